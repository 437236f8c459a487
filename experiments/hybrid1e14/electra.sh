#!/usr/bin/env bash
# The pure-RTD control for experiments/hybrid1e14 on the same machine: ELECTRA, lr 1e-3 (the best pure-ELECTRA recipe at
# 1e14), mask 15 %, 1e14 FLOPs, core 0 → runs/hybrid/electra-1e14, then 3-seed fine-tuning on both tasks.
# Against electra-mlm (mask 15 %) it measures what the discriminator's corrective MLM adds, all else equal.
#   bash experiments/hybrid1e14/electra.sh
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model
start=$(date +%s)
# --cls-contrast 0 --gen-temperature 1: the paper's loss and sampling this control ran with, pinned since tiny ELECTRA
# runs of >= 1,000 steps default to --cls-contrast 1 (2026-12-03) and a --gen-temperature above 1 (2026-12-04; 2 today)
[ -f $R/electra-1e14/bundle/manifest.json ] || taskset -c 0 $B pretrain --corpus $C --tokenizer runs/tok8k --size tiny \
  --objective electra --mask-prob 0.15 --lr 1e-3 --cls-contrast 0 --gen-temperature 1 --max-flops 1e14 --seed 0 \
  --no-progress --out $R/electra-1e14 \
  > $R/electra-1e14.log 2>&1
echo "PRETRAIN wall $(( $(date +%s) - start )) s"
ft 0 $R/electra-1e14 livedoor-title title
ft 0 $R/electra-1e14 jaquad-qtype text
echo "ALL wall $(( $(date +%s) - start )) s"
