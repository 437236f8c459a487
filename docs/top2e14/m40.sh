#!/usr/bin/env bash
# MLM with a 40 % mask rate at the top CPU budget, 2e14 FLOPs (the 15 % run: docs/top2e14/launch.sh mlm-2e14 mlm),
# on one core, then 3-seed fine-tuning on the experiment's task samples (reproduces the experiment's cells: docs/ftlr).
#   bash docs/top2e14/m40.sh     (→ runs/top/mlm-m40-2e14; reports runs/top/ft-mlm-m40-2e14-TASK/report.json)
set -u
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
start=$(date +%s)
[ -f runs/top/mlm-m40-2e14/bundle/manifest.json ] || taskset -c ${CORE:-0} bash docs/top2e14/launch.sh mlm-m40-2e14 mlm \
  --mask-prob 0.4 --no-progress > runs/top/mlm-m40-2e14.log 2>&1
echo "PRETRAIN wall $(( $(date +%s) - start )) s"
D=runs/evm2e14/data
ft() {  # $1 core, $2 task, $3 text field
  [ -f runs/top/ft-mlm-m40-2e14-$2/report.json ] || taskset -c $1 .venv/bin/denki finetune classify \
    --model runs/top/mlm-m40-2e14/bundle --train $D/$2/train.jsonl --dev $D/$2/dev.jsonl --text-field $3 \
    --max-length 128 --seeds 3 --threads 1 --no-baseline --no-progress --out runs/top/ft-mlm-m40-2e14-$2 \
    > runs/top/ft-mlm-m40-2e14-$2.log 2>&1
}
ft 0 livedoor-title title & ft 1 jaquad-qtype text & wait
echo "ALL wall $(( $(date +%s) - start )) s"
