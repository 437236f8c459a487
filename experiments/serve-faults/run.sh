#!/usr/bin/env bash
# Faults under load for `denki serve` (issue 62): capacity, the retry storm (shed delays 0 / 100 / 250 / 500 ms,
# then wrk as the issue measured it), reloads every 5 s at 2x capacity, SIGTERM and a worker SIGKILL under load.
# Loopback only; 2 workers on CPUs 0-1, the load generator on CPU 1. Pause anything else on the machine first.
#
#   bash experiments/serve-faults/run.sh                 # about 10 minutes
#   CLS=DIR bash experiments/serve-faults/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ORT_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-.venv/bin/python}
CLS=${CLS:-runs/quickstart/classifier-onnx}
OUT=${OUT:-experiments/serve-faults}
F="$PY experiments/serve-faults/faults.py"
[ -f "$CLS/manifest.json" ] || { echo "no ONNX router at $CLS: run \`.venv/bin/denki quickstart --no-demo\` first" >&2; exit 2; }
{ grep -m1 'model name' /proc/cpuinfo; echo "cores: $(nproc)"; grep -m1 flags /proc/cpuinfo
  echo "load: $(cat /proc/loadavg)"; git log -1 --format='commit %h %s'; } | tee "$OUT/cpu.txt"

$F capacity --classifier "$CLS" --out "$OUT"
for d in ${DELAYS:-0 100 250 500}; do
  $F storm --classifier "$CLS" --out "$OUT" --shed-delay-ms "$d" --rate-from "$OUT/capacity.json" --label "storm-$d"
done
if command -v wrk >/dev/null; then  # the issue's own measurement: wrk, 256 connections, 30 s
  for d in ${WRK_DELAYS:-0 250}; do
    PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    taskset -c 0-1 $PY -m denki.app.cli serve --classifier "$CLS" --port "$PORT" --workers 2 --log-level warning \
        --shed-delay-ms "$d" & SRV=$!
    until curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null; do sleep 0.2; done
    taskset -c 1 wrk -t1 -c16 -d5s -s experiments/serve-faults/storm.lua "http://127.0.0.1:$PORT/v1/classify" >/dev/null
    taskset -c 1 wrk -t1 -c256 -d30s --latency -s experiments/serve-faults/storm.lua \
        "http://127.0.0.1:$PORT/v1/classify" | tee "$OUT/wrk-storm-$d.txt"
    kill -TERM $SRV; wait $SRV || true
  done
fi
$F reload --classifier "$CLS" --out "$OUT" --rate-from "$OUT/capacity.json" --duration 120 --every 5
$F sigterm --classifier "$CLS" --out "$OUT" --rate-from "$OUT/capacity.json" --duration 20 --at 10
$F kill-worker --classifier "$CLS" --out "$OUT" --rate-from "$OUT/capacity.json" --duration 30 --at 10
