#!/usr/bin/env bash
# MLM with a 40 % mask rate at the top CPU budget, 2e14 FLOPs (the 15 % run: experiments/top2e14/launch.sh mlm-2e14 mlm),
# on one core, then 3-seed fine-tuning on the experiment's task samples (reproduces the experiment's cells: experiments/ftlr).
#   bash experiments/top2e14/m40.sh          (→ runs/top/mlm-m40-2e14; reports runs/top/ft-mlm-m40-2e14-TASK/report.json)
#   SEED=1 bash experiments/top2e14/m40.sh   (a second pretraining seed → runs/top/mlm-m40-2e14-s1)
#   TAG=s0b SEED=0 CORE=0 bash experiments/top2e14/m40.sh   (a seed re-run on another machine under its own name
#                                                    → runs/top/mlm-m40-2e14-s0b)
set -u
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
start=$(date +%s)
SEED=${SEED:-0}
N=mlm-m40-2e14; [ $SEED = 0 ] || N=$N-s$SEED; [ -z "${TAG:-}" ] || N=mlm-m40-2e14-$TAG
mkdir -p runs/top
[ -f runs/top/$N/bundle/manifest.json ] || taskset -c ${CORE:-0} bash experiments/top2e14/launch.sh $N mlm \
  --mask-prob 0.4 --seed $SEED --no-progress > runs/top/$N.log 2>&1
echo "PRETRAIN wall $(( $(date +%s) - start )) s"
. experiments/levers1e14/ft.sh  # ft CORE RUN_DIR TASK TEXT_FIELD
ft 0 runs/top/$N livedoor-title title & ft 1 runs/top/$N jaquad-qtype text & wait
echo "ALL wall $(( $(date +%s) - start )) s"
