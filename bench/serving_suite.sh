#!/usr/bin/env bash
# Re-measure every serving-speed figure of issue 17 on this machine, one benchmark after another, into OUT.
#
#   bash bench/serving_suite.sh [QUICKSTART_DIR] [OUT]      # defaults: runs/quickstart runs/bench-suite
#
# Needs a router laid out as the quickstart's (QUICKSTART_DIR/classifier = `denki finetune classify --out`,
# QUICKSTART_DIR/classifier-onnx = its `denki export`; `denki quickstart --no-demo` makes one in ≈ 8–10 min) and ../shared/data for the batch rows
# (falls back to samples/routing_dev.jsonl). Run it on an otherwise idle machine: the benchmarks interleave their
# variants so that load hits all alike, but absolute figures from a loaded machine are not comparable. ≈ 15 min on
# the 2-core development machine. WORKERS=N sets the batch benchmark's cores (default: all); HTTP=0 / SMALL=0 skip
# the HTTP part / its Small-size model. Writes OUT/*.json|md|txt and OUT/cpu.txt (model name, core count, flags, load).
set -euo pipefail
cd "$(dirname "$0")/.."
Q=${1:-runs/quickstart}
OUT=${2:-runs/bench-suite}
PY=${PYTHON:-python}
DENKI=${DENKI:-denki}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ORT_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
[ -d "$Q/classifier-onnx" ] || { echo "no $Q/classifier-onnx: run \`denki quickstart --no-demo\` first" >&2; exit 2; }
TORCH_BUNDLE="$Q/classifier/bundle"; [ -d "$TORCH_BUNDLE" ] || TORCH_BUNDLE="$Q/classifier"
TOK="$Q/tokenizer"; [ -d "$TOK" ] || TOK="$TORCH_BUNDLE"   # a bundle holds its tokenizer files
ROWS=../shared/data/jaquad_qtype_dev.jsonl.gz
[ -f "$ROWS" ] || ROWS=samples/routing_dev.jsonl

{ grep -m1 'model name' /proc/cpuinfo; echo "cores: $(nproc)"; grep -m1 flags /proc/cpuinfo; echo "load: $(cat /proc/loadavg)"
  git log -1 --format='commit %h %s' 2>/dev/null || true; } | tee "$OUT/cpu.txt"

step() { echo; echo "=== $* ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }

step "1/6 batch scoring: denki classify vs its sequential schedule vs the transformers pipeline"
$PY bench/batch_throughput.py --model "$Q/classifier-onnx" --data "$ROWS" --rows 2000 --workers "${WORKERS:-$(nproc)}" \
    --json "$OUT/batch_throughput.json" | tee "$OUT/batch_throughput.txt"

step "2/6 every CPU variant behind the parity gate (fp32, O2, int8, int8-channel, int8-static; O3 left out: its approximate GELU missed the float gate, 1.2e-3 > 1e-3, on this router)"
rm -rf "$OUT/cls-variants"
$DENKI export --model "$Q/classifier" --out "$OUT/cls-variants" --optimize O2 \
    --quantize int8 int8-channel int8-static | tail -n 20 | tee "$OUT/export.txt"

step "3/6 latency: PyTorch eager vs every ORT variant vs optimum, batch 1/32 × 32/128 tokens, 1 thread"
$DENKI bench latency --model "$OUT/cls-variants" --torch-model "$TORCH_BUNDLE" --threads 1 --out "$OUT/latency" \
    | tee "$OUT/latency.txt"

step "4/6 the fast-path record for this CPU (1 thread and onnxruntime's default)"
$DENKI bench pick --model "$OUT/cls-variants" --threads 1 0 | tee "$OUT/pick.txt"

if [ "${HTTP:-1}" = 1 ]; then  # HTTP=0 skips the HTTP part (it needs two cores to separate client and server)
step "5/6 HTTP micro-batching on vs off, server on CPU 0, client on CPU 1 (tiny router)"
PIN=()
if [ "$(nproc)" -ge 2 ]; then PIN=(--server-cpus 0 --client-cpus 1 --threads 1); fi
$PY bench/http_load.py --model "$OUT/cls-variants" --clients 8 --requests 400 --rounds 3 "${PIN[@]}" \
    --json "$OUT/http_tiny.json" --md "$OUT/http_tiny.md" | tail -n 30
if [ "${SMALL:-1}" = 1 ]; then  # SMALL=0 skips it
  step "5b/6 the same for a Small-size router (hidden 256, 12 layers; random init, timing only)"
  if [ ! -d "$OUT/small-onnx" ]; then
    $DENKI finetune classify --init-random small --tokenizer "$TOK" --train samples/routing_train.jsonl \
        --dev samples/routing_dev.jsonl --epochs 1 --max-train-examples 64 --seeds 1 --threads 1 --no-baseline \
        --no-progress \
        --out "$OUT/small-cls" > "$OUT/small-cls.log" 2>&1
    $DENKI export --model "$OUT/small-cls" --out "$OUT/small-onnx" --quantize int8 --min-agreement 0 --max-drop 1 \
        > "$OUT/small-export.log" 2>&1
  fi
  $PY bench/http_load.py --model "$OUT/small-onnx" --clients 8 --requests 400 --rounds 3 "${PIN[@]}" \
      --json "$OUT/http_small.json" --md "$OUT/http_small.md" | tail -n 30
fi
fi

step "6/6 the tiny RTD step vs the MLM step (1 thread)"
$PY bench/pretrain_step.py --size tiny --steps 10 --threads 1 --variants rtd,mlm,naive,rtd-nodrop,mlm-nodrop --json "$OUT/pretrain_step.json" | tee "$OUT/pretrain_step.txt"

step "done: $OUT"
