#!/usr/bin/env bash
# Issue 15, fine-tuning recipe for a pretrained tiny encoder: the peak lr. The classify default for tiny encoders
# (1e-3, layer decay 1.0, 10 epochs, patience 3) was chosen on random init and a mid-run ELECTRA checkpoint; a
# pretrained encoder usually wants a lower lr than training from scratch. Here: the MLM 2e14 encoder (the best CPU
# encoder, experiments/top2e14) on the experiment's task samples, 3 seeds per lr, one core each task.
#   bash experiments/ftlr/run.sh LR...      (runs/ftlr/<task>-lr<LR>/report.json)
set -u
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
B=runs/top/mlm-2e14/bundle
D=runs/evm2e14/data
one() {  # $1 core, $2 task, $3 text field, $4 lr
  [ -f runs/ftlr/$2-lr$4/report.json ] || taskset -c $1 .venv/bin/denki finetune classify --model $B \
    --train $D/$2/train.jsonl --dev $D/$2/dev.jsonl --text-field $3 --max-length 128 --seeds 3 --lr $4 \
    --threads 1 --no-baseline --no-progress --class-weights none --out runs/ftlr/$2-lr$4 > runs/ftlr/$2-lr$4.log 2>&1
}
mkdir -p runs/ftlr
for lr in "$@"; do
  one 0 livedoor-title title $lr & one 1 jaquad-qtype text $lr & wait
done
echo DONE
