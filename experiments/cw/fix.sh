#!/usr/bin/env bash
# fix.sh PID NAME CORE: after the lever job PID ends, keep its auto (= balanced) jaquad-qtype fine-tuning as the
# balanced cell (runs/cw) and run the unweighted one (--class-weights none) under the usual name
cd "$(dirname "$0")/../.."  # the repository root
while kill -0 $1 2>/dev/null; do sleep 15; done
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
. experiments/levers1e14/ft.sh
d=runs/hybrid/ft-$2-jaquad-qtype
if [ -f $d/report.json ] && grep -q '"class_weights": "balanced"' $d/report.json; then
  mkdir -p runs/cw; mv $d runs/cw/$2-jaquad-qtype; mv $d.log runs/cw/$2-jaquad-qtype.log
fi
ft $3 runs/hybrid/$2 jaquad-qtype text
echo "$2 done $(date)"
