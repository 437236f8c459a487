#!/usr/bin/env bash
# Adam's ε at 1e14 FLOPs (issue 15): ELECTRA (lr 1e-3, mask 15 %, --disc-skip-special) with the official code's
# ε 1e-6 vs torch's 1e-8 (experiments/skipspecial1e14: electra-skip-1e14, seed 0), then 3-seed fine-tuning on both tasks.
#   CORE=0 bash experiments/eps1e14/run.sh     → runs/hybrid/electra-skip-eps6-1e14 (finished stages skipped)
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model, pretrain_ft
pretrain_ft ${CORE:-0} electra-skip-eps6-1e14 --objective electra --mask-prob 0.15 --lr 1e-3 --max-flops 1e14 \
  --seed 0 --disc-skip-special --adam-eps 1e-6
