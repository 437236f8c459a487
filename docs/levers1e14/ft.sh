# Sourced by the lever scripts: 3-seed fine-tuning of a pretrained run on the experiment's task samples
# (denki finetune classify --seeds 3 on runs/evm2e14/data reproduces the experiment's cells exactly: docs/ftlr).
#   ft CORE RUN_DIR TASK TEXT_FIELD   → RUN_DIR/../ft-NAME-TASK/report.json (skipped when it exists)
ft() {
  local core=$1 run=$2 task=$3 field=$4
  local out=$(dirname "$run")/ft-$(basename "$run")-$task
  [ -f $out/report.json ] || taskset -c $core .venv/bin/denki finetune classify --model $run/bundle \
    --train runs/evm2e14/data/$task/train.jsonl --dev runs/evm2e14/data/$task/dev.jsonl --text-field $field \
    --max-length 128 --seeds 3 --threads 1 --no-baseline --no-progress --out $out > $out.log 2>&1
}
