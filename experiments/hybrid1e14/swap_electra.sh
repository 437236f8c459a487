#!/usr/bin/env bash
# The layers/embeddings swap (experiments/hybrid1e14/swap.py) on the pure-ELECTRA control (experiments/hybrid1e14/electra.sh):
# runs/hybrid/swap-electra/{layers-only,embeddings-only}, each fine-tuned on both tasks (3 seeds), one task per core.
#   bash experiments/hybrid1e14/swap_electra.sh
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model
[ -f $R/swap-electra/layers-only/manifest.json ] || .venv/bin/python experiments/hybrid1e14/swap.py $R/electra-1e14/bundle $R/swap-electra
for part in layers-only embeddings-only; do
  ft_model 0 $R/ft-swap-electra-$part-livedoor-title livedoor-title title --model $R/swap-electra/$part &
  ft_model 1 $R/ft-swap-electra-$part-jaquad-qtype jaquad-qtype text --model $R/swap-electra/$part &
  wait
done
echo DONE
