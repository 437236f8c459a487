#!/usr/bin/env bash
# experiments/few-label: each cell (labels per desk K, draw S) = draw.py, then `denki finetune classify` without
# and with --unlabelled (K = all: without only, there is no pool), each scored on the full inquiry dev set.
# Usage: bash experiments/few-label/run.sh [K:S ...]   (default: the study's cells in the order they ran)
# "with" runs today's recipe; the study's with-v1 / with-cap300 / with-cap1000 runs are described in README.md.
# Runs that exist are skipped; then summarize.py writes result.json. CORE (default 1) pins the runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
CORE=${CORE:-1}
PY=".venv/bin/python"; DENKI=".venv/bin/denki"
DEV=../shared/data/inquiry_route_dev.jsonl.gz
CELLS=("$@")
[ ${#CELLS[@]} -gt 0 ] || CELLS=(10:0 10:1 10:2 30:0 100:0 all:0 30:1 100:1 30:2 100:2 10:3 10:4 10:5)
pin() { OMP_NUM_THREADS=1 taskset -c "$CORE" "$@"; }
for cell in "${CELLS[@]}"; do
  K=${cell%%:*}; S=${cell##*:}; D=runs/few-label/k$K-s$S
  [ -f $D/train.jsonl ] || pin $PY experiments/few-label/draw.py --k "$K" --seed "$S" --out $D
  variants=(without); [ -f $D/unlabelled.jsonl ] && variants+=(with)
  for v in "${variants[@]}"; do
    extra=(); [ $v = with ] && extra=(--unlabelled $D/unlabelled.jsonl)
    if [ ! -f $D/$v/report.json ]; then
      pin $DENKI finetune classify --model checkpoints/denki-electra-tiny-ja --train $D/train.jsonl \
        --dev $D/tune_dev.jsonl "${extra[@]}" --out $D/$v --seeds 1 --max-length 64 --threads 1 --no-progress \
        > $D/$v.log 2>&1
    fi
    [ -f $D/$v/dev855.json ] || pin $DENKI evaluate classify --model $D/$v --data $DEV \
        --output-json $D/$v/dev855.json --threads 1 --no-progress >> $D/$v.log 2>&1
  done
done
pin $PY experiments/few-label/summarize.py
