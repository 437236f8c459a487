#!/usr/bin/env bash
# `denki serve` under real load: capacity with 1 worker and with a worker per core, the batching modes, then an
# open-loop run at 1x capacity and a soak at 2x capacity (RSS over time, recovery). Loopback only; every step is
# bounded in time. Needs the quickstart's ONNX models (or CLS=... QA=...) and a C compiler (for bench/loadgen.c).
#
#   bash experiments/serve-load/run.sh            # soak 600 s (about 18 minutes in all)
#   bash experiments/serve-load/run.sh 120        # a shorter soak (the first argument, or SOAK_S=...)
#   CLS=DIR QA=DIR OUT=DIR bash experiments/serve-load/run.sh
#
# Pinning (2-core machine): the one-core runs put the server on CPU 0 and the load generator on CPU 1. A worker
# per core needs both cores for the server, so the all-core runs give the server CPUs 0-1 and the generator
# shares CPU 1 (it is compiled and costs little; its CPU time is in every result). On a machine with 3+ cores
# set ALL_CPUS=0-(N-2) and CLIENT_CPU=N-1 so they never share.
set -euo pipefail
cd "$(dirname "$0")/../.."  # the repository root; bash experiments/serve-load/run.sh, or bash run.sh from here
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ORT_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-.venv/bin/python}
SOAK_S=${1:-${SOAK_S:-600}}            # soak duration (s)
CLS=${CLS:-runs/quickstart/classifier-onnx}
QA=${QA:-runs/quickstart/qa-onnx}
OUT=${OUT:-experiments/serve-load}     # result JSON/markdown (records and the loadgen binary go to runs/serve-load)
NCPU=$(nproc)
SERVER_CPU=${SERVER_CPU:-0}            # the one-core server runs
CLIENT_CPU=${CLIENT_CPU:-$((NCPU - 1))}
ALL_CPUS=${ALL_CPUS:-0-$((NCPU - 1))}  # the server in the all-core runs
CAP_S=${CAP_S:-30}                     # each closed-loop capacity run (s)
ONE_X_S=${ONE_X_S:-60}                 # the open-loop run at 1x capacity (s)
WARMUP_S=${WARMUP_S:-5}                # closed-loop warm-up before each run, not recorded (s)
CONN=${CONN:-32}                       # closed-loop clients: saturate, yet never queue past the deadline
OPEN_CONN=${OPEN_CONN:-768}            # open loop: most connections at once (opened on demand; < 1000 per worker)

for m in "$CLS" "$QA"; do
  if [ ! -f "$m/manifest.json" ]; then
    echo "no ONNX bundle at $m: run \`.venv/bin/denki quickstart --no-demo\` first, or set CLS=... QA=..." >&2
    exit 2
  fi
done
mkdir -p "$OUT" runs/serve-load
HTTP_IMPL=$($PY -c 'import importlib.util as u; print("httptools" if u.find_spec("httptools") else "h11")')
{ grep -m1 'model name' /proc/cpuinfo; echo "cores: $NCPU"; grep -m1 flags /proc/cpuinfo
  echo "load: $(cat /proc/loadavg)"; git log -1 --format='commit %h %s'; echo "uvicorn HTTP parser: $HTTP_IMPL"
  echo "soak: ${SOAK_S} s; server CPU ${SERVER_CPU} / ${ALL_CPUS}; client CPU ${CLIENT_CPU}"; } | tee "$OUT/cpu.txt"

run() {  # run LABEL [serve_load.py run arguments...]
  local label=$1; shift
  echo "=== $label $(date -u +%T)"
  $PY bench/serve_load.py run --classifier "$CLS" --qa "$QA" --client-cpus "$CLIENT_CPU" --label "$label" \
      --workdir runs/serve-load --warmup "$WARMUP_S" --json "$OUT/$label.json" "$@" | tee "$OUT/$label.md"
}

# 1. capacity (closed loop): 1 worker on one core (one onnxruntime thread: one core); 1 worker with its defaults
#    (onnxruntime's threads, batching auto = on) and a worker per core on all cores (same pinning)
run cap-w1     --workers 1 --threads 1 --server-cpus "$SERVER_CPU" --rate 0 --duration "$CAP_S" --connections "$CONN"
run cap-w1-all --workers 1 --server-cpus "$ALL_CPUS" --rate 0 --duration "$CAP_S" --connections "$CONN"
run cap-wn     --workers "$NCPU" --server-cpus "$ALL_CPUS" --rate 0 --duration "$CAP_S" --connections "$CONN"
# 2. batching: the default (auto) against forced on and off, default workers, closed loop
for b in auto on off; do
  run "batch-$b" --batching "$b" --server-cpus "$ALL_CPUS" --rate 0 --duration "$CAP_S" --connections "$CONN"
done
# 3. open loop at 1x the default configuration's capacity, then the soak at 2x (RSS every 5 s, recovery after)
run load-1x --server-cpus "$ALL_CPUS" --rate-from "$OUT/batch-auto.json" --rate-factor 1 --duration "$ONE_X_S" \
    --connections "$OPEN_CONN"
run soak-2x --server-cpus "$ALL_CPUS" --rate-from "$OUT/batch-auto.json" --rate-factor 2 --duration "$SOAK_S" \
    --connections "$OPEN_CONN" --bucket-s 30 --rss-every 5 --rss-warmup-s 60
# 4. the goal table
echo "=== report $(date -u +%T)"
$PY bench/serve_load.py report "$OUT" --md "$OUT/goals.md"
echo "=== done $(date -u +%T)"
