#!/usr/bin/env bash
# ELECTRA + the discriminator's corrective MLM (`--objective electra-mlm`, pretrain/model.py) at 1e14 FLOPs, tiny,
# shared corpora, runs/tok8k, lr 1e-3 (the best pure-ELECTRA lr at 1e14, and MLM's), one pretraining per core:
#   core 0: mask 15 % (the ELECTRA default)          → runs/hybrid/electra-mlm-1e14
#   core 1: mask 40 % (tiny MLM's measured default)  → runs/hybrid/electra-mlm-m40-1e14
# then 3-seed fine-tuning of both on the experiment's task samples (experiments/levers1e14/ft.sh), which this script
# (re)writes first if they are missing (prepare_task_data: Random(0), 2,000 train / 500 dev, as the experiment).
#   bash experiments/hybrid1e14/run.sh          (RANDOM_CONTROL=1 also fine-tunes the random-init control on this machine)
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model
.venv/bin/python - <<'PY'
from pathlib import Path
from denki.pretrain.experiment.plan import parse_task, prepare_task_data
for t in ("livedoor-title", "jaquad-qtype"):
    prepare_task_data(parse_task(t, "../shared/data"), Path("runs/evm2e14"), 2000, 500)
PY
start=$(date +%s)
P="--corpus $C --tokenizer runs/tok8k --size tiny --objective electra-mlm --lr 1e-3 --max-flops 1e14 --seed 0 --no-progress"
[ -f $R/electra-mlm-1e14/bundle/manifest.json ] || taskset -c 0 $B pretrain $P --mask-prob 0.15 \
  --out $R/electra-mlm-1e14 > $R/electra-mlm-1e14.log 2>&1 &
# the second run starts once the first has built the token cache (one tokenization, not two racing)
until grep -q "step" $R/electra-mlm-1e14.log 2>/dev/null || [ -f $R/electra-mlm-1e14/bundle/manifest.json ]; do sleep 5; done
[ -f $R/electra-mlm-m40-1e14/bundle/manifest.json ] || taskset -c 1 $B pretrain $P --mask-prob 0.4 \
  --out $R/electra-mlm-m40-1e14 > $R/electra-mlm-m40-1e14.log 2>&1 &
wait
echo "PRETRAIN wall $(( $(date +%s) - start )) s"
ft 0 $R/electra-mlm-1e14 livedoor-title title & ft 1 $R/electra-mlm-m40-1e14 livedoor-title title & wait
ft 0 $R/electra-mlm-1e14 jaquad-qtype text & ft 1 $R/electra-mlm-m40-1e14 jaquad-qtype text & wait
if [ "${RANDOM_CONTROL:-0}" = 1 ]; then
  INIT_RANDOM="--init-random tiny --tokenizer runs/tok8k"
  ft_model 0 $R/ft-random-livedoor-title livedoor-title title $INIT_RANDOM &
  ft_model 1 $R/ft-random-jaquad-qtype jaquad-qtype text $INIT_RANDOM & wait
fi
echo "ALL wall $(( $(date +%s) - start )) s"
