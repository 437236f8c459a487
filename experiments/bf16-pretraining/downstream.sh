#!/usr/bin/env bash
# bf16 vs fp32 downstream, at equal FLOPs: tiny ELECTRA (today's long-run recipe) on the general corpora with the
# general tokenizer (experiments/general-checkpoints), BUDGET FLOPs (default 1e14), seed 0, in PRECISION; then the
# routers of experiments/general-checkpoints/routers.sh (full train splits, full dev files, 3 fine-tuning seeds).
#   CORE=0 PRECISION=fp32 bash experiments/bf16-pretraining/downstream.sh
#   CORE=1 PRECISION=bf16 bash experiments/bf16-pretraining/downstream.sh   (side by side: one core each)
# Needs runs/general/tok8k (experiments/general-checkpoints/build.sh, step 1). → runs/bf16-downstream/…
set -eu
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
D=../shared/data; CORE=${CORE:-0}; BUDGET=${BUDGET:-1e14}; PRECISION=${PRECISION:-bf16}
out=runs/bf16-downstream/electra-$PRECISION-$BUDGET
mkdir -p runs/bf16-downstream
[ -f $out/summary.json ] || taskset -c $CORE .venv/bin/denki pretrain --corpus $D/corpus_wiki_ja.txt.gz \
  $D/corpus_manpages_ja.txt.gz $D/corpus_docs_ja.txt.gz --tokenizer runs/general/tok8k --size tiny --objective electra \
  --max-flops $BUDGET --precision $PRECISION --seed 0 --no-progress --out $out > $out.log 2>&1
CORE=$CORE bash experiments/general-checkpoints/routers.sh bf16-downstream-$PRECISION-$BUDGET --model $out/bundle
