#!/usr/bin/env bash
# QA on the full jaquad_train, 1 epoch (1,974 steps of 32 windows), lr 1e-3, one thread: the recipe of the first
# "MLM 2e14, full train, 1 epoch" row of experiments/qa-top, for another encoder (experiments/qa-cc1/README.md).
#   CORE=1 bash experiments/qa-cc1/run.sh NAME SOURCE…  → runs/qa-cc1/NAME (report.md/json); SOURCE is the encoder:
#   CORE=1 bash experiments/qa-cc1/run.sh electra-cc1-1e14 --model runs/hybrid/electra-cc1-1e14/bundle
#   CORE=1 bash experiments/qa-cc1/run.sh random --init-random tiny --tokenizer runs/tok8k   (the random-init control)
# --no-answerable-head first: the plain head these sections measured (finetune qa's default trains the head for an
# ELECTRA bundle since the head became the default, experiments/anshead); an --answerable-head in SOURCE… wins.
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
D=../shared/data; CORE=${CORE:-1}; name=$1; shift
start=$(date +%s)
taskset -c $CORE .venv/bin/denki finetune qa --no-answerable-head "$@" --train $D/jaquad_train.squad2.json.gz \
  --dev $D/jaquad_dev.squad2.json.gz --out runs/qa-cc1/$name --max-length 384 --doc-stride 128 --max-answer-length 30 \
  --seeds 1 --epochs 1 --lr 1e-3 --batch-size 32 --threads 1 --no-progress
echo "EXIT $? wall $(( $(date +%s) - start )) s"
