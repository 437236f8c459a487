#!/usr/bin/env bash
# The routers this study calibrates (one fine-tuning seed each, kit defaults, one thread), then the halves table:
#   inquiry: denki-electra-tiny-ja on all 6,775 tourist-desk inquiries, dev 855 (fusion as the kit chooses)
#   livedoor titles: the encoder-alone routers of experiments/size-8e14 (its routers.sh writes them)
#   CORE=1 bash experiments/calibration-halves/routers.sh
set -eu
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
CORE=${CORE:-1}; D=../shared/data; R=runs/calibration-halves
mkdir -p $R
[ -f $R/inquiry/report.json ] || taskset -c $CORE .venv/bin/denki finetune classify --model denki-electra-tiny-ja \
  --train $D/inquiry_route_train.jsonl.gz --dev $D/inquiry_route_dev.jsonl.gz --max-length 128 --seeds 1 \
  --threads 1 --no-progress --out $R/inquiry > $R/inquiry.log 2>&1
livedoor=$(ls -d runs/size-8e14/routers/*-split0 2>/dev/null | grep -v random || true)
.venv/bin/python experiments/calibration-halves/halves.py $R/inquiry $livedoor --splits 20 \
  --out experiments/calibration-halves/result.json
