#!/usr/bin/env bash
# A/B of `denki classify`'s batch-workload choice on a bundle with five CPU variants and a `denki bench pick`
# record for this CPU: with the record (→ the variant fastest at batch 32, int8-static here) vs the same bundle
# without it (→ the default rule, int8). 20,000 rows, --workers 2, alternated twice. Quiet machine.
set -u
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ORT_DISABLE_TELEMETRY=1
O=experiments/bench-steady/workload
[ -d runs/bench/cls-norecord ] || { cp -r runs/bench-suite/cls-variants runs/bench/cls-norecord; rm runs/bench/cls-norecord/fastpath.json; }
for rep in 1 2; do
  for m in runs/bench-suite/cls-variants runs/bench/cls-norecord; do
    .venv/bin/python bench/batch_throughput.py --model $m --input-file runs/bench/rows20k.jsonl --engines denki \
      --workers 2 --rounds 2 --no-gflops --json $O/$(basename $m)-$rep.json | tee $O/$(basename $m)-$rep.txt
  done
done
