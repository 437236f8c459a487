#!/usr/bin/env bash
# Class-balanced fine-tuning loss (`denki finetune classify --class-weights balanced`) on the experiment's task
# samples, 3 seeds, for random init and the pretrained tiny encoders (finished reports are skipped):
#   CORE=1 bash experiments/cw/run.sh jaquad-qtype text      → runs/cw/<encoder>-<task>/report.json
#   CORE=1 bash experiments/cw/run.sh livedoor-title title
# (the lever jobs started before the default became auto fine-tuned jaquad-qtype balanced; experiments/cw/fix.sh moved
#  those reports here and ran the unweighted ones)
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/ftcell.sh  # here, ft_cell
CORE=${CORE:-1}; task=$1; field=$2; shift 2
mkdir -p runs/cw
run() {  # run NAME MODEL_OPTIONS...
  here "$@" || return 0
  local out=runs/cw/$1-$task; shift
  ft_cell $CORE $out "$@" -- --train runs/evm2e14/data/$task/train.jsonl --dev runs/evm2e14/data/$task/dev.jsonl \
    --text-field $field --class-weights balanced
}
run random --init-random tiny --tokenizer runs/tok8k
run electra-cc1-2e14 --model runs/hybrid/electra-cc1-lr1e3-2e14/bundle
run mlm-m40-2e14 --model runs/top/mlm-m40-2e14/bundle
run electra-cc1-1e14 --model runs/hybrid/electra-cc1-1e14/bundle
[ "$task" = jaquad-qtype ] || exit 0  # more pretraining seeds: the imbalanced task only
run electra-cc1-1e14-s1 --model runs/hybrid/electra-cc1-1e14-s1/bundle
run electra-cc1-1e14-s2 --model runs/hybrid/electra-cc1-1e14-s2/bundle
run electra-cc1-lr1e3s1-2e14 --model runs/hybrid/electra-cc1-lr1e3s1-2e14/bundle  # BUDGET=2e14 … run.sh lr1e3s1 --seed 1
run electra-cc1-lr1e3s2-2e14 --model runs/hybrid/electra-cc1-lr1e3s2-2e14/bundle  # BUDGET=2e14 … run.sh lr1e3s2 --seed 2
run mlm-m40-2e14-s1 --model runs/top/mlm-m40-2e14-s1/bundle                      # SEED=1 bash experiments/top2e14/m40.sh
run electra-cc1-lr1e3s0b-2e14 --model runs/hybrid/electra-cc1-lr1e3s0b-2e14/bundle  # seeds 0 and 1 again, machine B:
run electra-cc1-lr1e3s1b-2e14 --model runs/hybrid/electra-cc1-lr1e3s1b-2e14/bundle  # … run.sh lr1e3s0b / lr1e3s1b --seed 1
run mlm-m40-2e14-s0b --model runs/top/mlm-m40-2e14-s0b/bundle  # MLM 40 % seeds 0 (again) and 2 on machine B:
run mlm-m40-2e14-s2 --model runs/top/mlm-m40-2e14-s2/bundle    # TAG=s0b SEED=0 / SEED=2 bash experiments/top2e14/m40.sh
