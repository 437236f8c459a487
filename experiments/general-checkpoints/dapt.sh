#!/usr/bin/env bash
# Domain-adaptive pretraining re-measured from the shipped checkpoint: continue RTD on the man-page corpus at
# BUDGET FLOPs (default 1e14) vs the checkpoint alone, both fine-tuned on manpages_section (TRAIN_N = 4,000 of the
# 29,657 training paragraphs, Random(0), as experiments/dapt measured it; the full dev file, 3 seeds, kit defaults,
# TF-IDF baseline and fusion beside them).
#   CORE=0 bash experiments/general-checkpoints/dapt.sh       → runs/general-dapt/…
set -eu
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
D=../shared/data; CORE=${CORE:-0}; BUDGET=${BUDGET:-1e14}; TRAIN_N=${TRAIN_N:-4000}
CK=${CHECKPOINT:-denki-electra-tiny-ja}; R=runs/general-dapt
mkdir -p $R
cell() {  # cell NAME MODEL_OPTIONS...
  local out=$R/ft-$1; shift
  [ -f $out/report.json ] || taskset -c $CORE .venv/bin/denki finetune classify "$@" \
    --train $D/manpages_section_train.jsonl.gz --dev $D/manpages_section_dev.jsonl.gz --max-length 128 --seeds 3 \
    --max-train-examples $TRAIN_N --threads 1 --no-progress --out $out > $out.log 2>&1
  python3 -c "import json; s=json.load(open('$out/report.json'))['seed_summary']; print('$out', s['macro_f1_median'], s['macro_f1_min'], s['macro_f1_max'])"
}
cell checkpoint --model $CK
[ -f $R/dapt/summary.json ] || taskset -c $CORE .venv/bin/denki pretrain --init-from $CK \
  --corpus $D/corpus_manpages_ja.txt.gz --max-flops $BUDGET --precision ${PRECISION:-bf16} --seed 0 --no-progress \
  --out $R/dapt > $R/dapt.log 2>&1
cell dapt --model $R/dapt/bundle
cell random --init-random tiny --tokenizer $CK
