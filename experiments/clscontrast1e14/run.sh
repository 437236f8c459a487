#!/usr/bin/env bash
# A [CLS] contrastive loss on top of the best pure-RTD recipe at 1e14 FLOPs (issue 15): ELECTRA lr 1e-3, mask 15 %,
# --disc-skip-special, plus --cls-contrast W (InfoNCE between the discriminator's and the generator's [CLS] over the
# batch), then 3-seed fine-tuning on both tasks (finished stages skipped).
#   CORE=1 SEED=0 W=1 EXTRA="" bash experiments/clscontrast1e14/run.sh   → runs/hybrid/electra-skip-cc1-1e14[-sSEED]
#   SKIP=0 …: without --disc-skip-special                          → runs/hybrid/electra-cc1-1e14[-sSEED]
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model, pretrain_ft
CORE=${CORE:-1}; SEED=${SEED:-0}; W=${W:-1}; EXTRA=${EXTRA:-}; SKIP=${SKIP:-1}
skip=$([ "$SKIP" = 1 ] && echo --disc-skip-special)
name=electra$([ "$SKIP" = 1 ] && echo -skip)-cc$W-1e14$([ "$SEED" = 0 ] || echo -s$SEED)
# $skip and $EXTRA unquoted: empty ones vanish, EXTRA's words become options
pretrain_ft $CORE $name --objective electra --mask-prob 0.15 --lr 1e-3 --max-flops 1e14 --seed $SEED $skip \
  --cls-contrast $W $EXTRA
