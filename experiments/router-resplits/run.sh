#!/usr/bin/env bash
# Routers on livedoor titles, encoder alone (--fusion off), over 3 re-splits of train + dev, for each encoder:
#   CORE=1 bash experiments/router-resplits/run.sh NAME MODEL_OPTIONS...
#   e.g. … run.sh random --init-random tiny --tokenizer checkpoints/denki-electra-tiny-ja
#        … run.sh leg1 --model checkpoints/denki-electra-tiny-ja
# → runs/router-resplits/NAME-sS/report.json (skipped when it exists); one fine-tuning seed per re-split
set -eu
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
CORE=${CORE:-1}; name=$1; shift
for s in 1 2 3; do
  split=runs/router-resplits/split-$s
  [ -f $split/dev.jsonl ] || python3 experiments/router-resplits/resplit.py $s $split
  out=runs/router-resplits/$name-s$s
  start=$(date +%s)
  [ -f $out/report.json ] || taskset -c $CORE .venv/bin/denki finetune classify "$@" --train $split/train.jsonl \
    --dev $split/dev.jsonl --text-field title --fusion off --max-length 128 --seeds 1 --threads 1 --no-progress \
    --out $out > $out.log 2>&1
  python3 -c "import json; s=json.load(open('$out/report.json'))['seed_summary']; print('$name', $s, s['macro_f1_median'], '$(( $(date +%s) - start )) s')"
done
