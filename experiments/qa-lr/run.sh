#!/usr/bin/env bash
# QA fine-tuning lr on the full jaquad_train: experiments/qa-cc1/run.sh's recipe (1 epoch = 1,974 steps of 32 windows, one
# thread) at another peak lr, from the 2e14 ELECTRA encoder (runs/hybrid/electra-cc1-lr1e3-2e14, experiments/cc1e14).
#   CORE=0 bash experiments/qa-lr/run.sh 3e-4     → runs/qa-lr/electra-cc1-2e14-lr3e-4 (report.md/json)
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
D=../shared/data; CORE=${CORE:-0}; lr=$1; shift
start=$(date +%s)
taskset -c $CORE .venv/bin/denki finetune qa --model runs/hybrid/electra-cc1-lr1e3-2e14/bundle \
  --train $D/jaquad_train.squad2.json.gz --dev $D/jaquad_dev.squad2.json.gz --out runs/qa-lr/electra-cc1-2e14-lr$lr \
  --max-length 384 --doc-stride 128 --max-answer-length 30 --seeds 1 --epochs 1 --lr $lr --batch-size 32 --threads 1 \
  --no-progress --no-answerable-head "$@"  # the plain head this section measured (not today's ELECTRA default)
echo "EXIT $? wall $(( $(date +%s) - start )) s"
