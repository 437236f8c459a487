#!/usr/bin/env bash
# The generator's sampling temperature on top of tiny ELECTRA's defaults at 1e14 FLOPs (issue 15): lr 1e-3,
# --cls-contrast 1, mask 15 %, plus --gen-temperature T (replacements drawn from softmax(logits / T): T > 1 makes
# them less plausible), then 3-seed fine-tuning on both tasks (finished stages skipped).
#   CORE=0 T=2 SEED=0 bash docs/gentemp1e14/run.sh   → runs/hybrid/electra-cc1-t$T-1e14[-sSEED]
#   CORE=1 T=1 …                                     → the same recipe at the paper's T = 1 (the control)
# Before it on a fresh machine: bash docs/clscontrast1e14/prepare.sh (tokenizer, task samples, random-init control).
set -u
cd "$(dirname "$0")/../.."  # the repository root
. docs/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model, pretrain_ft
CORE=${CORE:-0}; T=${T:-2}; SEED=${SEED:-0}
name=electra-cc1-t$T-1e14$([ "$SEED" = 0 ] || echo -s$SEED)
pretrain_ft $CORE $name --objective electra --mask-prob 0.15 --lr 1e-3 --cls-contrast 1 --max-flops 1e14 \
  --seed $SEED --gen-temperature $T
