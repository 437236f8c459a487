#!/usr/bin/env bash
# Fewer labels: livedoor-title routers fine-tuned on a random part (--max-train-examples N, Random(0), the same
# examples for every encoder) of the experiment's 2,000-title training sample, scored on its 500-title dev sample;
# 3 seeds, the lever scripts' recipe. Does pretraining pay off more when a user has only a few hundred labels?
# Encoders whose bundle is not on this machine are skipped; finished reports are skipped. N = 2000 is the full
# sample (the lever scripts' cell, re-run here under the same name scheme).
#   CORE=1 bash docs/labels/run.sh              → runs/labels/<encoder>-n<N>/report.json       (--epochs 10 --patience 3,
#                                                  the fixed schedule of its day)
#   SCHED=auto CORE=1 bash docs/labels/run.sh    → runs/labels/<encoder>-n<N>-auto/report.json  (the default schedule:
#                                                  ≥ 630 updates, at most 40 epochs, patience 30 % of them)
set -u
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
CORE=${CORE:-1}; D=runs/evm2e14/data/livedoor-title
SCHED=${SCHED:-fixed}; if [ $SCHED = auto ]; then SFX=-auto; SA=""; else SFX=""; SA="--epochs 10 --patience 3"; fi
mkdir -p runs/labels
run() {  # run NAME MODEL_OPTIONS...
  local name=$1; shift
  [ -z "${ONLY:-}" ] || [ "$ONLY" = "$name" ] || return 0  # ONLY=NAME: one encoder (one per core)
  if [ "$1" = --model ] && [ ! -f "$2/manifest.json" ]; then echo "$name: no bundle $2 on this machine, skipped"; return; fi
  for n in ${SIZES:-250 500 1000}; do
    local out=runs/labels/$name-n$n$SFX
    [ -f $out/report.json ] || taskset -c $CORE .venv/bin/denki finetune classify "$@" $SA \
      --train $D/train.jsonl --dev $D/dev.jsonl --text-field title --max-train-examples $n \
      --max-length 128 --seeds 3 --threads 1 --no-baseline --no-progress --class-weights none --out $out > $out.log 2>&1
    echo "$out $(python3 -c "import json; s=json.load(open('$out/report.json'))['seed_summary']; print(s['macro_f1_median'], s['macro_f1_min'], s['macro_f1_max'])" 2>&1 | tail -1)"
  done
}
run random --init-random tiny --tokenizer runs/tok8k
run electra-cc1-2e14-s2 --model runs/hybrid/electra-cc1-lr1e3s2-2e14/bundle  # BUDGET=2e14 … docs/cc1e14/run.sh lr1e3s2 --seed 2
run mlm-m40-2e14-s1 --model runs/top/mlm-m40-2e14-s1/bundle                  # SEED=1 bash docs/top2e14/m40.sh
