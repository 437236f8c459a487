#!/usr/bin/env bash
# The HTTP parser under load: uvicorn with h11 (pure Python) against httptools (C), same models, same pinning,
# measured back to back: 1 worker on CPU 0 closed loop (capacity), and the default server (a worker per core) at
# 1x and 2x of its own closed-loop capacity (goodput ratio). Loopback only; about 6 minutes.
#   CLS=DIR QA=DIR bash experiments/serve-load/http-parser.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ORT_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-.venv/bin/python}
CLS=${CLS:-runs/quickstart/classifier-onnx}; QA=${QA:-runs/quickstart/qa-onnx}
OUT=${OUT:-experiments/serve-load/http-parser}; DUR=${DUR:-30}
NCPU=$(nproc); CLIENT_CPU=$((NCPU - 1)); ALL=0-$((NCPU - 1))
mkdir -p "$OUT" runs/serve-load
{ grep -m1 'model name' /proc/cpuinfo; grep -m1 flags /proc/cpuinfo; echo "load: $(cat /proc/loadavg)"
  git log -1 --format='commit %h %s'; } | tee "$OUT/cpu.txt"
run() {  # run LABEL ARGS...
  local label=$1; shift
  echo "=== $label $(date -u +%T)"
  $PY bench/serve_load.py run --classifier "$CLS" --qa "$QA" --client-cpus "$CLIENT_CPU" --label "$label" \
      --workdir runs/serve-load --warmup 5 --json "$OUT/$label.json" "$@" | tee "$OUT/$label.md"
}
for h in h11 httptools; do
  run "cap-w1-$h" --server-arg=--http --server-arg=$h --workers 1 --threads 1 --server-cpus 0 --rate 0 \
      --duration "$DUR" --connections 32
  run "cap-$h" --server-arg=--http --server-arg=$h --server-cpus "$ALL" --rate 0 --duration "$DUR" --connections 32
  run "load-1x-$h" --server-arg=--http --server-arg=$h --server-cpus "$ALL" --rate-from "$OUT/cap-$h.json" \
      --rate-factor 1 --duration "$DUR" --connections 768
  run "load-2x-$h" --server-arg=--http --server-arg=$h --server-cpus "$ALL" --rate-from "$OUT/cap-$h.json" \
      --rate-factor 2 --duration "$((DUR * 2))" --connections 768 --bucket-s 30
done
