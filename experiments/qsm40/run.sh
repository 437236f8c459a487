#!/usr/bin/env bash
# The quickstart's budget and data (6e12 FLOPs on samples/, experiments/qsobj/run.sh's settings, 1 thread each), MLM at
# mask rate 40 % vs 15 % over two pretraining seeds (seed 0 at 15 % is experiments/qsobj's published run), 3 fine-tuning
# seeds per router; reports in experiments/qsm40/.   bash experiments/qsm40/run.sh   (~6 min, one run per core)
set -u
cd "$(dirname "$0")/../.."  # the repository root
run() {  # $1 folder, $2 core, rest: pretraining options
  local d=$1 c=$2; shift 2
  mkdir -p runs/$d && { [ -d runs/$d/tok ] || [ ! -d runs/qsobj/tok ] || cp -r runs/qsobj/tok runs/$d/; }
  D=runs/$d OBJECTIVES=mlm CONTROL=0 PRETRAIN_ARGS="$*" taskset -c $c bash experiments/qsobj/run.sh > runs/$d.log 2>&1
}
run qsm40 1 --mask-prob 0.4 & wait
run qsm40s1 0 --mask-prob 0.4 --seed 1 & run qsm15s1 1 --mask-prob 0.15 --seed 1 & wait
