#!/usr/bin/env bash
# experiments/few-label: what the encoder's cap on pseudo-labelled rows per class costs and buys (--unlabelled-cap),
# at 10 labels per desk (100, the default, is run.sh's "with"; with-cap300 ran before the default became 100, as
# run.sh's "with"). Usage: bash experiments/few-label/caps.sh [CAP:K:S ...]; runs that exist are skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
CORE=${CORE:-1}
DEV=../shared/data/inquiry_route_dev.jsonl.gz
RUNS=("$@")
[ ${#RUNS[@]} -gt 0 ] || RUNS=(300:10:0 1000:10:0 300:10:1 1000:10:1 300:10:2 1000:10:2)
pin() { OMP_NUM_THREADS=1 taskset -c "$CORE" "$@"; }
for r in "${RUNS[@]}"; do
  IFS=: read -r CAP K S <<< "$r"; D=runs/few-label/k$K-s$S; O=$D/with-cap$CAP
  [ -f $D/train.jsonl ] || pin .venv/bin/python experiments/few-label/draw.py --k "$K" --seed "$S" --out $D
  [ -f $O/report.json ] || pin .venv/bin/denki finetune classify --model checkpoints/denki-electra-tiny-ja \
      --train $D/train.jsonl --dev $D/tune_dev.jsonl --unlabelled $D/unlabelled.jsonl --unlabelled-cap "$CAP" \
      --out $O --seeds 1 --max-length 64 --threads 1 --no-progress > $O.log 2>&1
  [ -f $O/dev855.json ] || pin .venv/bin/denki evaluate classify --model $O --data $DEV \
      --output-json $O/dev855.json --threads 1 --no-progress >> $O.log 2>&1
done
