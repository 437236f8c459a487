#!/usr/bin/env bash
# $1 = name, $2 = objective, rest = extra pretrain flags
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
name=$1; obj=$2; shift 2
# --cls-contrast 0 --gen-temperature 1: the paper's ELECTRA loss and sampling these runs used, pinned since tiny ELECTRA runs
# of >= 1,000 steps default to --cls-contrast 1 (2026-12-03) and a --gen-temperature above 1 (2026-12-04; 2 today);
# both are no-ops for MLM (same run identity)
exec .venv/bin/denki pretrain --corpus ../shared/data/corpus_manpages_ja.txt.gz ../shared/data/corpus_wiki_ja.txt.gz --tokenizer runs/tok8k \
  --size tiny --objective $obj --max-flops 2e14 --out runs/top/$name --log-every 10 --save-every 200 --seed 0 --mask-prob 0.15 --cls-contrast 0 --gen-temperature 1 "$@"  # the mask rate of its day (MLM tiny now defaults to 0.4)
