#!/usr/bin/env bash
# Two more levers on top of ELECTRA --disc-skip-special (lr 1e-3, mask 15 %, 1e14 FLOPs, seed 0), one per core, then
# 3-seed fine-tuning on both tasks (finished stages skipped):
#   CORE=0 bash experiments/clscontrast1e14/levers.sh lr2e3 --lr 2e-3     → runs/hybrid/electra-skip-lr2e3-1e14
#   CORE=1 bash experiments/clscontrast1e14/levers.sh g8 --gen-size 0.125  → runs/hybrid/electra-skip-g8-1e14
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model, pretrain_ft
CORE=${CORE:-0}; tag=$1; shift
# the lever's options come last: a second --lr overrides the first
pretrain_ft $CORE electra-skip-$tag-1e14 --objective electra --mask-prob 0.15 --lr 1e-3 --max-flops 1e14 --seed 0 \
  --disc-skip-special "$@"
