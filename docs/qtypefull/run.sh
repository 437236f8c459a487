#!/usr/bin/env bash
# jaquad-qtype routers scored on the full dev file (2,612 questions: 28 Cause, 9 Manner) instead of the experiment's
# 500-question dev sample (4 Cause, 4 Manner), so that one rare-type prediction moves macro-F1 by less. Same training
# sample (runs/evm2e14/data/jaquad-qtype/train.jsonl, 2,000 questions), recipe and 3 seeds as the lever scripts; both
# losses. Encoders whose bundle is not on this machine are skipped; finished reports are skipped.
#   CORE=1 bash docs/qtypefull/run.sh        → runs/qtypefull/<encoder>-<none|balanced>/report.json
set -u
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
CORE=${CORE:-1}; DEV=../shared/data/jaquad_qtype_dev.jsonl.gz
mkdir -p runs/qtypefull
run() {  # run NAME MODEL_OPTIONS...
  local name=$1; shift
  [ -z "${ONLY:-}" ] || [ "$ONLY" = "$name" ] || return 0  # ONLY=NAME: one encoder (one per core)
  if [ "$1" = --model ] && [ ! -f "$2/manifest.json" ]; then echo "$name: no bundle $2 on this machine, skipped"; return; fi
  for w in none balanced; do
    local out=runs/qtypefull/$name-$w
    [ -f $out/report.json ] || taskset -c $CORE .venv/bin/denki finetune classify "$@" \
      --train runs/evm2e14/data/jaquad-qtype/train.jsonl --dev $DEV --text-field text \
      --max-length 128 --seeds 3 --threads 1 --no-baseline --no-progress --class-weights $w --out $out > $out.log 2>&1
    echo "$out $(python3 -c "import json; s=json.load(open('$out/report.json'))['seed_summary']; print(s['macro_f1_median'], s['macro_f1_min'], s['macro_f1_max'])" 2>&1 | tail -1)"
  done
}
run random --init-random tiny --tokenizer runs/tok8k
run electra-cc1-2e14-s2 --model runs/hybrid/electra-cc1-lr1e3s2-2e14/bundle  # BUDGET=2e14 … docs/cc1e14/run.sh lr1e3s2 --seed 2
run mlm-m40-2e14-s1 --model runs/top/mlm-m40-2e14-s1/bundle                  # SEED=1 bash docs/top2e14/m40.sh
run electra-cc1-2e14-s1 --model runs/hybrid/electra-cc1-lr1e3s1-2e14/bundle  # (earlier machines' encoders, if present)
run electra-cc1-2e14 --model runs/hybrid/electra-cc1-lr1e3-2e14/bundle
run mlm-m40-2e14 --model runs/top/mlm-m40-2e14/bundle
