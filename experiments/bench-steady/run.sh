#!/usr/bin/env bash
# Issue 17, quiet machine (both cores free): the batch engine at steady state (20,000 rows instead of 2,000, so
# that pipeline fill and drain and the per-run fixed costs weigh less), then flat memory on a 1M-row file.
#   bash experiments/bench-steady/run.sh       (outputs in experiments/bench-steady/)
set -u
cd "$(dirname "$0")/../.."  # the repository root
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ORT_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
PY=.venv/bin/python
O=experiments/bench-steady
M=runs/bench-router/classifier-onnx   # the tiny int8 router made in experiments/bench-suite (README)
Q=../shared/data/jaquad_qtype_dev.jsonl.gz
{ grep -m1 'model name' /proc/cpuinfo; echo "cores: $(nproc)"; grep -m1 flags /proc/cpuinfo; echo "load: $(cat /proc/loadavg)"; git log -1 --format='commit %h %s'; } > $O/cpu.txt
[ -s runs/bench/rows20k.jsonl ] || $PY bench/batch_throughput.py --make-rows 20000 --data $Q --out runs/bench/rows20k.jsonl
[ -s runs/bench/rows1m.jsonl ] || $PY bench/batch_throughput.py --make-rows 1000000 --data $Q --out runs/bench/rows1m.jsonl
echo "=== 20k rows, workers 2 $(date -u +%T)"
$PY bench/batch_throughput.py --model $M --input-file runs/bench/rows20k.jsonl --workers 2 --rounds 2 --json $O/rows20k.json | tee $O/rows20k.txt
for bs in 128 256; do
  echo "=== 20k rows, denki only, batch $bs $(date -u +%T)"
  $PY bench/batch_throughput.py --model $M --input-file runs/bench/rows20k.jsonl --engines denki --batch-size $bs --workers 2 --rounds 2 --no-gflops --json $O/rows20k-b$bs.json | tee $O/rows20k-b$bs.txt
done
echo "=== 1M rows, denki only, workers 2 $(date -u +%T)"
$PY bench/batch_throughput.py --model $M --input-file runs/bench/rows1m.jsonl --engines denki --rounds 1 --workers 2 --no-gflops --json $O/rows1m.json | tee $O/rows1m.txt
echo "=== done $(date -u +%T)"
