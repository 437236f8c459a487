#!/usr/bin/env bash
# ELECTRA lever at 1e14: sequence length 64 (equal FLOPs) on top of the best 1e14 recipe (lr 1e-3); then the experiment fine-tunes it
cd "$(dirname "$0")/../../.."  # the repository root (the script ran as runs/lever/s64.sh)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
C="../shared/data/corpus_manpages_ja.txt.gz ../shared/data/corpus_wiki_ja.txt.gz"
start=$(date +%s)
.venv/bin/denki pretrain --corpus $C --tokenizer runs/tok8k --size tiny --objective electra --lr 1e-3 --seq-len 64 \
  --max-flops 1e14 --seed 0 --no-progress --out runs/lever/electra-lr1e3-s64-1e14
echo "PRETRAIN EXIT $? wall $(( $(date +%s) - start )) s"
mkdir -p runs/evm-s64/pretrain && ln -sfn ../../lever/electra-lr1e3-s64-1e14 runs/evm-s64/pretrain/electra-1e14
.venv/bin/denki experiment electra-vs-mlm --corpus $C --tokenizer runs/tok8k --size tiny --flops-budgets 1e14 --seeds 3 \
  --threads 1 --no-progress --tasks livedoor-title,jaquad-qtype --objectives electra --pretrain-lr 1e-3 --seq-len 64 \
  --no-random-init --out runs/evm-s64
echo "ALL EXIT $? wall $(( $(date +%s) - start )) s"
