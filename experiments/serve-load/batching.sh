#!/usr/bin/env bash
# Micro-batching on a CPU worker with one onnxruntime thread, measured again after the serving changes (httptools,
# a socket per worker, the shared backlog): off, on with the 2 ms wait, and on with no wait (a batch is whatever
# queued while the previous call ran), default workers (a worker per core), closed loop at 32 and at 4
# connections, ROUNDS rounds with the three modes alternating. The rule is in README.md (written before the runs).
#   CLS=DIR QA=DIR bash experiments/serve-load/batching.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ORT_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-.venv/bin/python}
CLS=${CLS:-runs/quickstart/classifier-onnx}; QA=${QA:-runs/quickstart/qa-onnx}
OUT=${OUT:-experiments/serve-load/batching}; DUR=${DUR:-20}; ROUNDS=${ROUNDS:-3}
NCPU=$(nproc); CLIENT_CPU=$((NCPU - 1)); ALL=0-$((NCPU - 1))
mkdir -p "$OUT" runs/serve-load
{ grep -m1 'model name' /proc/cpuinfo; grep -m1 flags /proc/cpuinfo; echo "load: $(cat /proc/loadavg)"
  git log -1 --format='commit %h %s'; } | tee "$OUT/cpu.txt"
for r in $(seq 1 "$ROUNDS"); do
  for conn in 32 4; do
    for mode in off on-wait2 on-wait0; do
      case $mode in
        off) a=(--batching off) ;;
        on-wait2) a=(--batching on --server-arg=--max-wait-ms --server-arg=2) ;;
        on-wait0) a=(--batching on --server-arg=--max-wait-ms --server-arg=0) ;;
      esac
      label="$mode-c$conn-r$r"
      echo "=== $label $(date -u +%T)"
      $PY bench/serve_load.py run --classifier "$CLS" --qa "$QA" --client-cpus "$CLIENT_CPU" --server-cpus "$ALL" \
          --label "$label" --workdir runs/serve-load --warmup 3 --rate 0 --duration "$DUR" --connections "$conn" \
          --json "$OUT/$label.json" "${a[@]}" | grep -E '^\| [0-9]'
    done
  done
done
$PY experiments/serve-load/batching_table.py "$OUT" | tee "$OUT/table.md"
