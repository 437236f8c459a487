#!/usr/bin/env bash
# More pretraining seeds for the pair that experiments/skipspecial1e14/run.sh found apart at seed 0: pure ELECTRA with the
# paper's discriminator loss (control) vs ELECTRA --disc-skip-special, both at lr 1e-3, mask 15 %, 1e14 FLOPs.
#   SEED=1 bash experiments/skipspecial1e14/seeds.sh   → runs/hybrid/electra-1e14-s1 (core 0), electra-skip-1e14-s1 (core 1),
#                                                 then 3-seed fine-tuning of each on both tasks (finished stages skipped)
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model, pretrain_ft
SEED=${SEED:?set SEED (0 is experiments/hybrid1e14/electra.sh and run.sh)}
one() {  # CORE NAME EXTRA_OPTIONS...
  local core=$1 name=$2; shift 2
  pretrain_ft $core $name --objective electra --mask-prob 0.15 --lr 1e-3 --max-flops 1e14 --seed $SEED "$@"
}
one 0 electra-1e14-s$SEED &
one 1 electra-skip-1e14-s$SEED --disc-skip-special &
wait
