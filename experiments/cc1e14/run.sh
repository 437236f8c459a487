#!/usr/bin/env bash
# One lever on top of tiny ELECTRA --cls-contrast 1 (lr 1e-3, mask 15 %, 1e14 FLOPs, seed 0; the recipe of
# experiments/clscontrast1e14/run.sh with SKIP=0), then 3-seed fine-tuning on both tasks (finished stages skipped):
#   CORE=0 bash experiments/cc1e14/run.sh lr3e4 --lr 3e-4          → runs/hybrid/electra-cc1-lr3e4-1e14
#   CORE=1 bash experiments/cc1e14/run.sh g8 --gen-size 0.125      → runs/hybrid/electra-cc1-g8-1e14
#   BUDGET=3e13 CORE=0 bash experiments/cc1e14/run.sh lr1e3         → runs/hybrid/electra-cc1-lr1e3-3e13 (another budget)
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model, pretrain_ft
CORE=${CORE:-0}; tag=$1; shift; BUDGET=${BUDGET:-1e14}
# the lever's options come last: a second --lr overrides the first
pretrain_ft $CORE electra-cc1-$tag-$BUDGET --objective electra --mask-prob 0.15 --lr 1e-3 --max-flops $BUDGET \
  --seed 0 --cls-contrast 1 "$@"
