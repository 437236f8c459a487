#!/usr/bin/env bash
# Fewer labels: livedoor-title routers fine-tuned on a random part (--max-train-examples N, Random(0), the same
# examples for every encoder) of the experiment's 2,000-title training sample, scored on its 500-title dev sample;
# 3 seeds, the lever scripts' recipe. Does pretraining pay off more when a user has only a few hundred labels?
# Encoders whose bundle is not on this machine are skipped; finished reports are skipped. N = 2000 is the full
# sample (the lever scripts' cell, re-run here under the same name scheme).
#   CORE=1 bash experiments/labels/run.sh              → runs/labels/<encoder>-n<N>/report.json       (--epochs 10 --patience 3,
#                                                  the fixed schedule of its day)
#   SCHED=auto CORE=1 bash experiments/labels/run.sh    → runs/labels/<encoder>-n<N>-auto/report.json  (the default schedule:
#                                                  ≥ 630 updates, at most 40 epochs, patience 30 % of them)
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/ftcell.sh  # here, ft_cell
CORE=${CORE:-1}; D=runs/evm2e14/data/livedoor-title
SCHED=${SCHED:-fixed}; if [ $SCHED = auto ]; then SFX=-auto; SA=""; else SFX=""; SA="--epochs 10 --patience 3"; fi
mkdir -p runs/labels
run() {  # run NAME MODEL_OPTIONS...
  here "$@" || return 0
  local name=$1 n; shift
  for n in ${SIZES:-250 500 1000}; do
    ft_cell $CORE runs/labels/$name-n$n$SFX "$@" -- $SA --train $D/train.jsonl --dev $D/dev.jsonl --text-field title \
      --max-train-examples $n --class-weights none
  done
}
run random --init-random tiny --tokenizer runs/tok8k
run electra-cc1-2e14-s2 --model runs/hybrid/electra-cc1-lr1e3s2-2e14/bundle  # BUDGET=2e14 … experiments/cc1e14/run.sh lr1e3s2 --seed 2
run mlm-m40-2e14-s1 --model runs/top/mlm-m40-2e14-s1/bundle                  # SEED=1 bash experiments/top2e14/m40.sh
run electra-cc1-2e14-s0b --model runs/hybrid/electra-cc1-lr1e3s0b-2e14/bundle  # seeds 0 and 1 again, on machine B:
run electra-cc1-2e14-s1b --model runs/hybrid/electra-cc1-lr1e3s1b-2e14/bundle  # … run.sh lr1e3s0b / lr1e3s1b --seed 1
run mlm-m40-2e14-s0b --model runs/top/mlm-m40-2e14-s0b/bundle  # MLM 40 % seeds 0 (again) and 2 on machine B:
run mlm-m40-2e14-s2 --model runs/top/mlm-m40-2e14-s2/bundle    # TAG=s0b SEED=0 / SEED=2 bash experiments/top2e14/m40.sh
run electra-cc1-t3-2e14 --model runs/hybrid/electra-cc1-t3-2e14/bundle      # --gen-temperature 3 (experiments/gentemp1e14):
run electra-cc1-t3s1-2e14 --model runs/hybrid/electra-cc1-t3s1-2e14/bundle  #   seeds 0 and 1 on machine B
