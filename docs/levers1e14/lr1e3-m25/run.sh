#!/usr/bin/env bash
# ELECTRA lever at 1e14: mask rate 25 % on top of the best 1e14 recipe (lr 1e-3); then the experiment fine-tunes it
cd "$(dirname "$0")/../../.."  # the repository root (the script ran as runs/lever/m25.sh)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
C="../shared/data/corpus_manpages_ja.txt.gz ../shared/data/corpus_wiki_ja.txt.gz"
start=$(date +%s)
.venv/bin/denki pretrain --corpus $C --tokenizer runs/tok8k --size tiny --objective electra --lr 1e-3 --mask-prob 0.25 \
  --max-flops 1e14 --seed 0 --no-progress --out runs/lever/electra-lr1e3-m25-1e14
echo "PRETRAIN EXIT $? wall $(( $(date +%s) - start )) s"
mkdir -p runs/evm-m25/pretrain && ln -sfn ../../lever/electra-lr1e3-m25-1e14 runs/evm-m25/pretrain/electra-1e14
.venv/bin/denki experiment electra-vs-mlm --corpus $C --tokenizer runs/tok8k --size tiny --flops-budgets 1e14 --seeds 3 \
  --threads 1 --no-progress --tasks livedoor-title,jaquad-qtype --objectives electra --pretrain-lr 1e-3 --mask-prob 0.25 \
  --no-random-init --out runs/evm-m25
echo "ALL EXIT $? wall $(( $(date +%s) - start )) s"
