#!/usr/bin/env bash
# end-of-session serving measurements on the quiet machine (both cores free)
set -u
cd "$(dirname "$0")/../.."  # the repository root; bash experiments/bench-bucketing/run.sh, or bash run.sh from here
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ORT_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
PY=.venv/bin/python
# the run was runs/bk/end.sh with O=runs/bk (console output: end.log); its outputs were then copied here
O=experiments/bench-bucketing
{ grep -m1 'model name' /proc/cpuinfo; echo "cores: $(nproc)"; grep -m1 flags /proc/cpuinfo; echo "load: $(cat /proc/loadavg)"; git log -1 --format='commit %h %s'; } | tee $O/cpu.txt
echo "=== bucketing $(date -u +%T)"
OMP_NUM_THREADS=1 taskset -c 1 $PY bench/bucketing.py --model runs/bench-suite/cls-variants --backend int8 --data samples/routing_dev.jsonl --batches 8 32 --threads 1 --repeats 100 | tee $O/bucketing.txt
echo "=== http 8 clients $(date -u +%T)"
$PY bench/http_load.py --model runs/bench-suite/cls-variants --clients 8 --requests 400 --rounds 3 --server-cpus 0 --client-cpus 1 --threads 1 --json $O/http_tiny.json --md $O/http_tiny.md | tail -n 30
echo "=== http 32 clients $(date -u +%T)"
$PY bench/http_load.py --model runs/bench-suite/cls-variants --clients 32 --requests 400 --rounds 3 --server-cpus 0 --client-cpus 1 --threads 1 --json $O/http32_tiny.json --md $O/http32_tiny.md | tail -n 30
echo "=== batch workers 2 $(date -u +%T)"
$PY bench/batch_throughput.py --model runs/bench-router/classifier-onnx --data ../shared/data/jaquad_qtype_dev.jsonl.gz --rows 2000 --workers 2 --json $O/batch_throughput.json | tee $O/batch_throughput.txt
echo "=== done $(date -u +%T)"
