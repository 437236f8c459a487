#!/usr/bin/env bash
# jaquad-qtype routers scored on the full dev file (2,612 questions: 28 Cause, 9 Manner) instead of the experiment's
# 500-question dev sample (4 Cause, 4 Manner), so that one rare-type prediction moves macro-F1 by less. Same training
# sample (runs/evm2e14/data/jaquad-qtype/train.jsonl, 2,000 questions), recipe and 3 seeds as the lever scripts; both
# losses. Encoders whose bundle is not on this machine are skipped; finished reports are skipped.
#   CORE=1 bash experiments/qtypefull/run.sh        → runs/qtypefull/<encoder>-<none|balanced>/report.json
#   ONLY=NAME WEIGHTS=balanced CORE=0 bash experiments/qtypefull/run.sh   (one encoder, the default loss only)
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/ftcell.sh  # here, ft_cell
CORE=${CORE:-1}; WEIGHTS=${WEIGHTS:-none balanced}; DEV=../shared/data/jaquad_qtype_dev.jsonl.gz
mkdir -p runs/qtypefull
run() {  # run NAME MODEL_OPTIONS...
  here "$@" || return 0
  local name=$1 w; shift
  for w in $WEIGHTS; do
    ft_cell $CORE runs/qtypefull/$name-$w "$@" -- --train runs/evm2e14/data/jaquad-qtype/train.jsonl --dev $DEV \
      --text-field text --class-weights $w
  done
}
run random --init-random tiny --tokenizer runs/tok8k
run electra-cc1-2e14-s2 --model runs/hybrid/electra-cc1-lr1e3s2-2e14/bundle  # BUDGET=2e14 … experiments/cc1e14/run.sh lr1e3s2 --seed 2
run mlm-m40-2e14-s1 --model runs/top/mlm-m40-2e14-s1/bundle                  # SEED=1 bash experiments/top2e14/m40.sh
run electra-cc1-2e14-s0b --model runs/hybrid/electra-cc1-lr1e3s0b-2e14/bundle  # seeds 0 and 1 again, on machine B:
run electra-cc1-2e14-s1b --model runs/hybrid/electra-cc1-lr1e3s1b-2e14/bundle  # … run.sh lr1e3s0b / lr1e3s1b --seed 1
run mlm-m40-2e14-s0b --model runs/top/mlm-m40-2e14-s0b/bundle  # MLM 40 % seeds 0 (again) and 2 on machine B:
run mlm-m40-2e14-s2 --model runs/top/mlm-m40-2e14-s2/bundle    # TAG=s0b SEED=0 / SEED=2 bash experiments/top2e14/m40.sh
run electra-cc1-2e14-s1 --model runs/hybrid/electra-cc1-lr1e3s1-2e14/bundle  # (earlier machines' encoders, if present)
run electra-cc1-2e14 --model runs/hybrid/electra-cc1-lr1e3-2e14/bundle
run mlm-m40-2e14 --model runs/top/mlm-m40-2e14/bundle
run electra-cc1-t3-2e14 --model runs/hybrid/electra-cc1-t3-2e14/bundle      # --gen-temperature 3 (experiments/gentemp1e14):
run electra-cc1-t3s1-2e14 --model runs/hybrid/electra-cc1-t3s1-2e14/bundle  #   seeds 0 and 1 on machine B
run electra-cc1-lr1e3s2c-2e14 --model runs/hybrid/electra-cc1-lr1e3s2c-2e14/bundle  # pretraining seed 2 of T = 1 and
run electra-cc1-t3s2c-2e14 --model runs/hybrid/electra-cc1-t3s2c-2e14/bundle        # of T = 3, a pair on machine C
run electra-cc1-t3lr15-2e14 --model runs/hybrid/electra-cc1-t3lr15-2e14/bundle  # T = 3, --lr 1.5e-3, seed 0 (t3more)
run electra-cc1-t2s2c-2e14 --model runs/hybrid/electra-cc1-t2s2c-2e14/bundle    # T = 2, seed 2, machine C (gentemp1e14)
run electra-cc1-t2-2e14 --model runs/hybrid/electra-cc1-t2-2e14/bundle      # T = 2, seeds 0 and 1, machine C
run electra-cc1-t2s1-2e14 --model runs/hybrid/electra-cc1-t2s1-2e14/bundle  #   (gentemp1e14)
