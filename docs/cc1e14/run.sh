#!/usr/bin/env bash
# One lever on top of tiny ELECTRA --cls-contrast 1 (lr 1e-3, mask 15 %, 1e14 FLOPs, seed 0; the recipe of
# docs/clscontrast1e14/run.sh with SKIP=0), then 3-seed fine-tuning on both tasks (finished stages skipped):
#   CORE=0 bash docs/cc1e14/run.sh lr3e4 --lr 3e-4          → runs/hybrid/electra-cc1-lr3e4-1e14
#   CORE=1 bash docs/cc1e14/run.sh g8 --gen-size 0.125      → runs/hybrid/electra-cc1-g8-1e14
#   BUDGET=3e13 CORE=0 bash docs/cc1e14/run.sh lr1e3         → runs/hybrid/electra-cc1-lr1e3-3e13 (another budget)
set -u
cd "$(dirname "$0")/../.."  # the repository root
. docs/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model
CORE=${CORE:-0}; tag=$1; shift
BUDGET=${BUDGET:-1e14}; name=electra-cc1-$tag-$BUDGET; start=$(date +%s)
# the lever's options come last: a second --lr overrides the first
[ -f $R/$name/bundle/manifest.json ] || taskset -c $CORE $B pretrain --corpus $C --tokenizer runs/tok8k \
  --size tiny --objective electra --mask-prob 0.15 --lr 1e-3 --max-flops $BUDGET --seed 0 --cls-contrast 1 "$@" \
  --no-progress --out $R/$name > $R/$name.log 2>&1
echo "$name PRETRAIN wall $(( $(date +%s) - start )) s"
ft $CORE $R/$name livedoor-title title
ft $CORE $R/$name jaquad-qtype text
echo "$name ALL wall $(( $(date +%s) - start )) s"
