#!/usr/bin/env bash
# Issue 15 lever: the discriminator loss without [CLS] and [SEP] (`denki pretrain --disc-skip-special`).
# Why: their RTD label is always "original"; at 1e14 FLOPs the RTD encoders' [CLS] spread was 0.13 (ELECTRA) and
# 0.18 (electra-mlm) against MLM's 0.68 (experiments/hybrid1e14), and the router reads [CLS].
# Same recipe as experiments/hybrid1e14 (lr 1e-3, mask 15 %, 1e14 FLOPs, seed 0; controls in runs/hybrid), one change:
#   core 0: ELECTRA     --disc-skip-special → runs/hybrid/electra-skip-1e14
#   core 1: electra-mlm --disc-skip-special → runs/hybrid/electra-mlm-skip-1e14
# then 3-seed fine-tuning of each on livedoor-title and jaquad-qtype (finished stages are skipped).
#   bash experiments/skipspecial1e14/run.sh
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model, pretrain_ft
one() {  # CORE OBJECTIVE NAME
  pretrain_ft $1 $3 --objective $2 --mask-prob 0.15 --lr 1e-3 --max-flops 1e14 --seed 0 --disc-skip-special
}
one 0 electra electra-skip-1e14 &
one 1 electra-mlm electra-mlm-skip-1e14 &
wait
