#!/usr/bin/env bash
# Fine-tuning recipe for a T = 3 tiny ELECTRA (the long-run default when measured) vs random init, livedoor
# titles (2,000 / 500, 3 seeds, unweighted loss: the lever scripts' ft_model). One cell per line, finished cells
# skipped:
#   CORE=1 bash experiments/ftsweep/run.sh ENCODER_NAME CELL [FT_OPTIONS...]
#   e.g. CORE=1 bash experiments/ftsweep/run.sh electra-cc1-t3s2c-2e14 ld0.8 --layer-decay 0.8
#        CORE=1 bash experiments/ftsweep/run.sh random ld0.8 --layer-decay 0.8     (random init: --init-random tiny)
# → runs/ftsweep/ENCODER_NAME-TASK-CELL/report.json (TASK=livedoor-title FIELD=title unless set; the encoder:
#   runs/hybrid/ENCODER_NAME/bundle)
set -u
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
. experiments/levers1e14/ft.sh
CORE=${CORE:-1}; enc=$1; cell=$2; shift 2; TASK=${TASK:-livedoor-title}; FIELD=${FIELD:-title}
mkdir -p runs/ftsweep
if [ "$enc" = random ]; then model=(--init-random tiny --tokenizer runs/tok8k); else model=(--model runs/hybrid/$enc/bundle); fi
start=$(date +%s)
ft_model $CORE runs/ftsweep/$enc-$TASK-$cell $TASK $FIELD "${model[@]}" "$@"
echo "$enc $TASK $cell wall $(( $(date +%s) - start )) s"
