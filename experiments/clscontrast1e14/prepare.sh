#!/usr/bin/env bash
# On a fresh machine, before the scripts of experiments/clscontrast1e14 (they need runs/tok8k and the experiment's task
# samples in runs/evm2e14/data): the tokenizer, the 2,000 / 500 task samples (as `denki experiment` writes them,
# Random(0)), then the random-init control's 3-seed fine-tuning on both tasks on this machine (core 1).
set -u
cd "$(dirname "$0")/../.."  # the repository root
. experiments/hybrid1e14/common.sh  # env, $C, $R, $B, ft/ft_model
[ -f runs/tok8k/vocab.txt ] || $B tokenizer train --corpus $C --vocab-size 8000 --out runs/tok8k
.venv/bin/python - <<'PY'
from pathlib import Path
from denki.pretrain.experiment.plan import parse_task, prepare_task_data
for t in ("livedoor-title", "jaquad-qtype"):
    print(prepare_task_data(parse_task(t, "../shared/data"), Path("runs/evm2e14"), 2000, 500))
PY
ft_model 1 $R/ft-random-livedoor-title livedoor-title title --init-random tiny --tokenizer runs/tok8k
ft_model 1 $R/ft-random-jaquad-qtype jaquad-qtype text --init-random tiny --tokenizer runs/tok8k
