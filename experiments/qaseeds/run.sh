#!/usr/bin/env bash
# QA across pretraining seeds (issue 15): ELECTRA --cls-contrast 1 and MLM 40 %, both tiny at 2e14 FLOPs with
# pretraining seed 2, pretrained side by side on one core each, then each fine-tuned for QA with the recipe of
# experiments/qa-cc1/run.sh (full jaquad_train, 1 epoch, lr 1e-3, one thread). The seed-0 encoders' QA is in experiments/qa-cc1.
#   bash experiments/qaseeds/run.sh      → runs/hybrid/electra-cc1-lr1e3s2-2e14, runs/top/mlm-m40-2e14-s2 (pretraining,
#                                   skipped when the bundle exists), runs/qa-cc1/{electra-cc1-2e14-s2,mlm-m40-2e14-s2}
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B
[ -f runs/tok8k/vocab.txt ] || $B tokenizer train --corpus $C --vocab-size 8000 --out runs/tok8k > /dev/null
E=electra-cc1-lr1e3s2-2e14; M=mlm-m40-2e14-s2; mkdir -p runs/top
electra() {
  [ -f $R/$E/bundle/manifest.json ] || taskset -c 0 $B pretrain --corpus $C --tokenizer runs/tok8k --size tiny \
    --objective electra --mask-prob 0.15 --lr 1e-3 --max-flops 2e14 --seed 2 --cls-contrast 1 --gen-temperature 1 --no-progress \
    --out $R/$E > $R/$E.log 2>&1   # = BUDGET=2e14 CORE=0 bash experiments/cc1e14/run.sh lr1e3s2 --seed 2, without routers
  CORE=0 bash experiments/qa-cc1/run.sh electra-cc1-2e14-s2 --model $R/$E/bundle > runs/qa-cc1-electra-s2.log 2>&1
}
mlm() {
  [ -f runs/top/$M/bundle/manifest.json ] || taskset -c 1 bash experiments/top2e14/launch.sh $M mlm --mask-prob 0.4 \
    --seed 2 --no-progress > runs/top/$M.log 2>&1   # = SEED=2 bash experiments/top2e14/m40.sh, without routers
  CORE=1 bash experiments/qa-cc1/run.sh mlm-m40-2e14-s2 --model runs/top/$M/bundle > runs/qa-cc1-mlm-s2.log 2>&1
}
electra & mlm & wait
