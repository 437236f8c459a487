#!/usr/bin/env bash
# A longer fine-tuning schedule at the full 2,000 livedoor titles: 20 epochs with patience 6 (30 % of them, the
# default rule) instead of the default 10 / 3, for random init and the 2e14 encoders on this machine. Why: at 10
# epochs most pretrained encoders' best epoch is the last one, so the 2,000-label margin over random init might be
# schedule-bound. 3 seeds, the lever scripts' recipe (experiments/ftcell.sh); the 10-epoch cells to compare with are the
# lever scripts' reports (runs/hybrid/ft-*-livedoor-title, runs/top/ft-mlm-m40-2e14-s1-livedoor-title).
#   ONLY=NAME CORE=1 bash experiments/epochs/run.sh      → runs/epochs/<encoder>-e20/report.json  (finished ones skipped)
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/ftcell.sh  # here, ft_cell
CORE=${CORE:-1}; D=runs/evm2e14/data/livedoor-title
mkdir -p runs/epochs
run() {  # run NAME MODEL_OPTIONS...
  here "$@" || return 0
  local name=$1; shift
  ft_cell $CORE runs/epochs/$name-e20 "$@" -- --epochs 20 --patience 6 --train $D/train.jsonl --dev $D/dev.jsonl \
    --text-field title --class-weights none
}
run random --init-random tiny --tokenizer runs/tok8k
run electra-cc1-2e14-s2 --model runs/hybrid/electra-cc1-lr1e3s2-2e14/bundle
run electra-cc1-2e14-s0b --model runs/hybrid/electra-cc1-lr1e3s0b-2e14/bundle
run electra-cc1-2e14-s1b --model runs/hybrid/electra-cc1-lr1e3s1b-2e14/bundle
run mlm-m40-2e14-s1 --model runs/top/mlm-m40-2e14-s1/bundle
run mlm-m40-2e14-s0b --model runs/top/mlm-m40-2e14-s0b/bundle
run mlm-m40-2e14-s2 --model runs/top/mlm-m40-2e14-s2/bundle
