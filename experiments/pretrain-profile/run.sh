#!/usr/bin/env bash
# Where a pretraining step's time goes on CPU, and what a second core buys: bench/pretrain_step.py on the RTD step
# (batch 32 x 128, vocabulary 8,000) — tiny and Small, fp32 and bf16, 1 thread then 2 threads (thread scaling),
# then torch.profiler over a few steps (operators by self time, the share of matrix products). Needs both cores
# quiet (about 4 minutes). → experiments/pretrain-profile/*.json and log.txt
#   bash run.sh defaults   today's default step instead (bf16 + the cheaper dropout masks, variant rtd-cheapdrop):
#                          → {size}-bf16-cheap-{t1,t2,profile}.json, cpu-defaults.txt and log-defaults.txt
set -euo pipefail
MODE=${1:-all}
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 MKL_NUM_THREADS=2
OUT=experiments/pretrain-profile; PY=${PY:-.venv/bin/python}
SUFFIX=""; [ "$MODE" = defaults ] && SUFFIX=-defaults

# measure SIZE PRECISION VARIANT TAG: median step on 1 and 2 threads, then the profile on 1 → $OUT/SIZE-TAG-*.json
measure() {
  local size=$1 prec=$2 variant=$3 tag=$4 steps=10 flag=() t cpus
  [ "$size" = small ] && steps=3
  [ "$prec" = bf16 ] && flag=(--bf16)
  for t in 1 2; do
    cpus=0; [ $t = 2 ] && cpus=0-1
    echo "=== $size $tag threads $t"
    OMP_NUM_THREADS=$t taskset -c $cpus $PY bench/pretrain_step.py --size "$size" --variants "$variant" \
        --steps $steps --threads $t --no-memory "${flag[@]}" --json "$OUT/$size-$tag-t$t.json"
  done
  echo "=== $size $tag profile (1 thread)"
  OMP_NUM_THREADS=1 taskset -c 0 $PY bench/pretrain_step.py --size "$size" --variants "$variant" --steps 1 \
      --threads 1 --no-memory --profile $((steps / 2)) "${flag[@]}" --json "$OUT/$size-$tag-profile.json"
}

{ grep -m1 'model name' /proc/cpuinfo; grep -m1 flags /proc/cpuinfo; echo "load: $(cat /proc/loadavg)"
  git log -1 --format='commit %h %s'; } > "$OUT/cpu$SUFFIX.txt"
for size in tiny small; do
  if [ "$MODE" = defaults ]; then
    measure $size bf16 rtd-cheapdrop bf16-cheap
  else
    for prec in fp32 bf16; do measure $size $prec rtd $prec; done
  fi
done 2>&1 | grep -v USDT | tee "$OUT/log$SUFFIX.txt"
