#!/usr/bin/env bash
# Routers on the full train splits (3 fine-tuning seeds, one thread, kit defaults, TF-IDF baseline beside them),
# scored on the full dev files: livedoor news titles (5,893 / 736) and JaQuAD question types (29,089 / 2,612).
#   CORE=1 bash experiments/general-checkpoints/routers.sh NAME MODEL_OPTIONS...
#   e.g.  … routers.sh random --init-random tiny --tokenizer runs/general/tok8k
#         … routers.sh general --model denki-electra-tiny-ja        (a checkpoint name, or a bundle path)
# → runs/general-routers/NAME-{livedoor-title,jaquad-qtype}/report.json (skipped when it exists)
set -eu
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
CORE=${CORE:-1}; D=../shared/data; name=$1; shift
mkdir -p runs/general-routers
args=("$@")
cell() {  # cell TASK FINETUNE_OPTIONS...
  local out=runs/general-routers/$name-$1; shift
  [ -f $out/report.json ] || taskset -c $CORE .venv/bin/denki finetune classify "${args[@]}" "$@" --max-length 128 \
    --seeds 3 --threads 1 --no-progress --out $out > $out.log 2>&1
  python3 -c "import json; s=json.load(open('$out/report.json'))['seed_summary']; print('$out', s['macro_f1_median'], s['macro_f1_min'], s['macro_f1_max'])"
}
cell livedoor-title --train $D/livedoor_train.jsonl.gz --dev $D/livedoor_dev.jsonl.gz --text-field title
cell jaquad-qtype --train $D/jaquad_qtype_train.jsonl.gz --dev $D/jaquad_qtype_dev.jsonl.gz --text-field text
