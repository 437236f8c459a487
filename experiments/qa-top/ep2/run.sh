#!/usr/bin/env bash
# $1 = name, $2 = pretrained bundle, $3 = threads, $4 = max steps; 2 epochs capped at $4 steps (the LR schedule is
# planned over the capped total), full jaquad_train, dev = jaquad_dev, ELECTRA-style answerable head
cd "$(dirname "$0")/../../.."  # the repository root (ran as runs/top/qa2.sh mlm-2e14-ep2 runs/top/mlm-2e14/bundle 1 3600)
export OMP_NUM_THREADS=$3 MKL_NUM_THREADS=$3 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
D=../shared/data
start=$(date +%s)
.venv/bin/denki finetune qa --model "$2" --train $D/jaquad_train.squad2.json.gz --dev $D/jaquad_dev.squad2.json.gz \
  --out runs/qa-top/$1 --max-length 384 --doc-stride 128 --max-answer-length 30 --seeds 1 --epochs 2 \
  --max-steps $4 --answerable-head --lr 1e-3 --batch-size 32 --threads $3 --no-progress
echo "EXIT $? wall $(( $(date +%s) - start )) s"
