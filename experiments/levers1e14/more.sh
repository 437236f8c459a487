#!/usr/bin/env bash
# Two more levers at 1e14 FLOPs, one per core, then 3-seed fine-tuning of each on the experiment's task samples
# (denki finetune classify --seeds 3 on runs/evm2e14/data reproduces the experiment's cells exactly: experiments/ftlr).
#   MLM with mask rate 40 % (Wettig et al. 2023, "Should You Mask 15% in MLM?")   → runs/lever/mlm-m40-1e14
#   ELECTRA lr 1e-3 with a generator ½ the discriminator's width (paper: ¼–½)      → runs/lever/electra-lr1e3-g05-1e14
#   bash experiments/levers1e14/more.sh        (fine-tuning reports: runs/lever/ft-NAME-TASK/report.json)
set -u
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
C="../shared/data/corpus_manpages_ja.txt.gz ../shared/data/corpus_wiki_ja.txt.gz"
P=".venv/bin/denki pretrain --corpus $C --tokenizer runs/tok8k --size tiny --max-flops 1e14 --seed 0 --no-progress"
# --cls-contrast 0 --gen-temperature 1: the paper's loss and sampling these runs were measured with, pinned since tiny
# ELECTRA runs of >= 1,000 steps default to --cls-contrast 1 (2026-12-03) and a --gen-temperature above 1 (2026-12-04; 2 today)
mkdir -p runs/lever
start=$(date +%s)
taskset -c 0 $P --objective mlm --mask-prob 0.4 --out runs/lever/mlm-m40-1e14 > runs/lever/mlm-m40-1e14.log 2>&1 &
taskset -c 1 $P --objective electra --lr 1e-3 --cls-contrast 0 --gen-temperature 1 --gen-size 0.5 --out runs/lever/electra-lr1e3-g05-1e14 > runs/lever/electra-lr1e3-g05-1e14.log 2>&1 &
wait
echo "PRETRAIN wall $(( $(date +%s) - start )) s"
. experiments/levers1e14/ft.sh  # ft CORE RUN_DIR TASK TEXT_FIELD
for name in mlm-m40-1e14 electra-lr1e3-g05-1e14; do
  ft 0 runs/lever/$name livedoor-title title & ft 1 runs/lever/$name jaquad-qtype text & wait
done
echo "ALL wall $(( $(date +%s) - start )) s"
