# Sourced by the lever scripts: 3-seed fine-tuning on the experiment's task samples
# (denki finetune classify --seeds 3 on runs/evm2e14/data reproduces the experiment's cells exactly: experiments/ftlr).
# --class-weights none: the loss these reports were measured with (the default became auto later; experiments/cw)
#   ft CORE RUN_DIR TASK TEXT_FIELD              → RUN_DIR/../ft-NAME-TASK/report.json, from RUN_DIR/bundle
#   ft_model CORE OUT TASK TEXT_FIELD MODEL...   → OUT/report.json, MODEL = the model options (e.g. --init-random
#                                                  tiny --tokenizer runs/tok8k); both skipped when the report exists
ft_model() {
  local core=$1 out=$2 task=$3 field=$4; shift 4
  [ -f $out/report.json ] || taskset -c $core .venv/bin/denki finetune classify "$@" \
    --train runs/evm2e14/data/$task/train.jsonl --dev runs/evm2e14/data/$task/dev.jsonl --text-field $field \
    --max-length 128 --seeds 3 --threads 1 --no-baseline --no-progress --class-weights none --out $out > $out.log 2>&1
}
ft() {
  ft_model $1 "$(dirname "$2")/ft-$(basename "$2")-$3" $3 $4 --model $2/bundle
}
