#!/usr/bin/env bash
# Is MLM with a 40 % mask rate a default? Two checks beside experiments/levers1e14/more.sh's seed-0 run:
#   core 0: a second pretraining seed at 1e14 FLOPs (--seed 1)               → runs/lever/mlm-m40-1e14-s1
#   core 1: the quickstart's budget and data (6e12, samples/, experiments/qsobj)   → runs/qsm40
# then 3-seed fine-tuning of the seed-1 encoder on the experiment's task samples, as in more.sh.
#   bash experiments/levers1e14/m40.sh
#   CORE=1 SEED=2 bash experiments/levers1e14/m40.sh   (a third pretraining seed, on core 1, → runs/lever/mlm-m40-1e14-s2)
set -u
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
C="../shared/data/corpus_manpages_ja.txt.gz ../shared/data/corpus_wiki_ja.txt.gz"
mkdir -p runs/lever
start=$(date +%s)
SEED=${SEED:-1}
N=mlm-m40-1e14-s$SEED
[ -f runs/lever/$N/bundle/manifest.json ] || taskset -c ${CORE:-0} .venv/bin/denki pretrain --corpus $C \
  --tokenizer runs/tok8k --size tiny --max-flops 1e14 --seed $SEED --no-progress --objective mlm --mask-prob 0.4 \
  --out runs/lever/$N > runs/lever/$N.log 2>&1 &
[ $SEED = 1 ] && D=runs/qsm40 OBJECTIVES=mlm CONTROL=0 PRETRAIN_ARGS="--mask-prob 0.4" taskset -c 1 bash experiments/qsobj/run.sh \
  > runs/qsm40.log 2>&1 &
wait
echo "PRETRAIN wall $(( $(date +%s) - start )) s"
. experiments/levers1e14/ft.sh  # ft CORE RUN_DIR TASK TEXT_FIELD
ft 0 runs/lever/$N livedoor-title title & ft 1 runs/lever/$N jaquad-qtype text & wait
echo "ALL wall $(( $(date +%s) - start )) s"
