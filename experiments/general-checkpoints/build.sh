#!/usr/bin/env bash
# Rebuild the shipped general checkpoint denki-electra-tiny-ja from ../shared/data (one core; see README.md here).
#   CORE=0 bash experiments/general-checkpoints/build.sh      → runs/general/…, then checkpoints/denki-electra-tiny-ja
# Every step is skipped when its output exists; re-running resumes the pretraining from its newest checkpoint.
set -eu
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
CORE=${CORE:-0}; D=../shared/data
C="$D/corpus_wiki_ja.txt.gz $D/corpus_manpages_ja.txt.gz $D/corpus_docs_ja.txt.gz"
mkdir -p runs/general
# 1. the vocabulary: 8,000 WordPiece tokens on MeCab (unidic-lite) words of all three corpora (27 s)
[ -f runs/general/tok8k/vocab.txt ] || taskset -c $CORE .venv/bin/denki tokenizer train --corpus $C \
  --vocab-size 8000 --out runs/general/tok8k
# 2. tiny ELECTRA, today's long-run recipe (lr 1e-3, --cls-contrast 1, --gen-temperature 2 are the defaults it
#    prints), 8e14 FLOPs in bf16 autocast (1.84× fp32's tokens/s on an avx512_bf16 core, loss curves level: README)
[ -f runs/general/electra-tiny-8e14/summary.json ] || taskset -c $CORE .venv/bin/denki pretrain --corpus $C \
  --tokenizer runs/general/tok8k --size tiny --objective electra --max-flops 8e14 --precision bf16 --seed 0 \
  --out runs/general/electra-tiny-8e14 --no-progress --log-every 10 --save-every 500 \
  > runs/general/electra-tiny-8e14.log 2>&1
# 3. the checkpoint folder: discriminator + generator, card, model card, licences, SHA256SUMS
.venv/bin/python experiments/general-checkpoints/make_card.py pretrained --run runs/general/electra-tiny-8e14 \
  --name denki-electra-tiny-ja --out checkpoints/denki-electra-tiny-ja ${SCORES:+--scores $SCORES} \
  --rebuild "${REBUILD:-about 2 hours on one CPU core with avx512_bf16 (bf16 autocast), 3.7 h in fp32}"
