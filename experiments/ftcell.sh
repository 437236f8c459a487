# Sourced (from the repository root) by experiments/cw/run.sh, experiments/qtypefull/run.sh and experiments/labels/run.sh: their one body.
#   here NAME MODEL_OPTIONS...            → false when ONLY=OTHER_NAME is set (one encoder per core), or, with a
#                                           message, when MODEL_OPTIONS name a --model bundle not on this machine
#   ft_cell CORE OUT MODEL_OPTIONS... -- CELL_OPTIONS...
#                                         → `denki finetune classify MODEL_OPTIONS CELL_OPTIONS` with the lever
#                                           scripts' fixed part (3 seeds, one thread, max length 128, no baseline)
#                                           into OUT on core CORE, skipped when OUT/report.json exists; then prints
#                                           OUT and its macro-F1 median, min and max over the seeds
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
here() {
  local name=$1; shift
  [ -z "${ONLY:-}" ] || [ "$ONLY" = "$name" ] || return 1
  if [ "$1" = --model ] && [ ! -f "$2/manifest.json" ]; then echo "$name: no bundle $2 on this machine, skipped"; return 1; fi
}
ft_cell() {
  local core=$1 out=$2 model=(); shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do model+=("$1"); shift; done; shift
  [ -f $out/report.json ] || taskset -c $core .venv/bin/denki finetune classify "${model[@]}" "$@" \
    --max-length 128 --seeds 3 --threads 1 --no-baseline --no-progress --out $out > $out.log 2>&1
  echo "$out $(python3 -c "import json; s=json.load(open('$out/report.json'))['seed_summary']; print(s['macro_f1_median'], s['macro_f1_min'], s['macro_f1_max'])" 2>&1 | tail -1)"
}
