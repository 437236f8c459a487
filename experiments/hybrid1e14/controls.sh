#!/usr/bin/env bash
# Beside experiments/hybrid1e14/run.sh, on the same machine (so every cell of its table shares the numerics):
#   core 1: the compute-matched MLM control, tiny MLM's default (mask 40 %, lr 1e-3), 1e14 FLOPs → runs/hybrid/mlm-m40-1e14
#   core 0: which part of the electra-mlm (mask 15 %) encoder hurts fine-tuning? experiments/hybrid1e14/swap.py writes
#           runs/hybrid/swap/{layers-only,embeddings-only} (the other part random), each fine-tuned on both tasks
# then the MLM control's fine-tuning. All fine-tuning: 3 seeds on the experiment's task samples (experiments/levers1e14/ft.sh).
#   bash experiments/hybrid1e14/controls.sh      (after run.sh, which writes the task samples and the electra-mlm bundle)
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model
start=$(date +%s)
[ -f $R/mlm-m40-1e14/bundle/manifest.json ] || taskset -c 1 $B pretrain --corpus $C --tokenizer runs/tok8k --size tiny \
  --objective mlm --mask-prob 0.4 --lr 1e-3 --max-flops 1e14 --seed 0 --no-progress --out $R/mlm-m40-1e14 \
  > $R/mlm-m40-1e14.log 2>&1 &
{ [ -f $R/swap/layers-only/manifest.json ] || .venv/bin/python experiments/hybrid1e14/swap.py $R/electra-mlm-1e14/bundle $R/swap
  for part in layers-only embeddings-only; do
    ft_model 0 $R/ft-swap-$part-livedoor-title livedoor-title title --model $R/swap/$part
    ft_model 0 $R/ft-swap-$part-jaquad-qtype jaquad-qtype text --model $R/swap/$part
  done; } &
wait
echo "PRETRAIN wall $(( $(date +%s) - start )) s"
ft 0 $R/mlm-m40-1e14 livedoor-title title & ft 1 $R/mlm-m40-1e14 jaquad-qtype text & wait
echo "ALL wall $(( $(date +%s) - start )) s"
