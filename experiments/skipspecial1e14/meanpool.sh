#!/usr/bin/env bash
# Scratch probe: 3-seed fine-tuning with a mean-pooling classification head (meanpool.py) instead of [CLS], on the
# 1e14 encoders of experiments/hybrid1e14 and the random-init control; the same task samples and settings as `ft`.
#   CORE=0 bash experiments/skipspecial1e14/meanpool.sh random electra-1e14     (names under runs/hybrid; "random" = init)
set -u
cd "$(dirname "$0")/../.."
. experiments/hybrid1e14/common.sh
for name in "$@"; do
  if [ "$name" = random ]; then model="--init-random tiny --tokenizer runs/tok8k"; else model="--model $R/$name/bundle"; fi
  for tf in livedoor-title:title jaquad-qtype:text; do
    task=${tf%%:*} field=${tf##*:} out=$R/meanpool-$name-$task
    [ -f $out/report.json ] || taskset -c ${CORE:-0} .venv/bin/python experiments/skipspecial1e14/meanpool.py finetune classify \
      $model --train runs/evm2e14/data/$task/train.jsonl --dev runs/evm2e14/data/$task/dev.jsonl --text-field $field \
      --max-length 128 --seeds 3 --threads 1 --no-baseline --no-progress --class-weights none --out $out > $out.log 2>&1
    echo "$out: $(grep -m1 'plain argmax' $out.log)"
  done
done
