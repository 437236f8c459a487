#!/usr/bin/env bash
# Livedoor-title routers, encoder alone (--fusion off), one fine-tuning seed on each of the 3 re-splits of
# train+dev (resplit.py), kit defaults otherwise; → runs/size-8e14/routers/NAME-splitK/report.json (skipped when done)
#   CORE=1 bash experiments/size-8e14/routers.sh NAME MODEL_OPTIONS...
#   e.g. … routers.sh tiny --model denki-electra-tiny-ja
#        … routers.sh mini --model runs/general/electra-mini-8e14/bundle
#        … routers.sh random-tiny --init-random tiny --tokenizer denki-electra-tiny-ja
set -eu
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
CORE=${CORE:-1}; name=$1; shift
S=runs/size-8e14/splits
[ -f $S/split2/dev.jsonl ] || .venv/bin/python experiments/size-8e14/resplit.py --out $S
mkdir -p runs/size-8e14/routers
for k in 0 1 2; do
  out=runs/size-8e14/routers/$name-split$k
  [ -f $out/report.json ] || taskset -c $CORE .venv/bin/denki finetune classify "$@" --train $S/split$k/train.jsonl \
    --dev $S/split$k/dev.jsonl --text-field title --max-length 128 --seeds 1 --fusion off --threads 1 \
    --no-progress --out $out > $out.log 2>&1
  .venv/bin/python -c "import json; s=json.load(open('$out/report.json'))['seed_summary']; print('$out', s['macro_f1_median'])"
done
