#!/usr/bin/env bash
# The fused router (encoder + TF-IDF in one bundle) on the three routing tasks, the full train splits, 3 fine-tuning
# seeds, kit defaults (--fusion auto). Most runs are shared with experiments/general-checkpoints (each skips what
# exists); this adds the random-init refits, the export and the latency benchmark.
#   CORE=1 bash experiments/fused-router/run.sh      → runs/general-routers/…, runs/general-dapt/…, runs/fusion/…
set -eu
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
D=../shared/data; CORE=${CORE:-1}; R=runs/fusion
mkdir -p $R
# 1. from the shipped checkpoint: livedoor titles + question types (routers.sh), man-page sections (dapt.sh's
#    checkpoint and random-init arms; its DAPT arm belongs to the general-checkpoints study)
CORE=$CORE bash experiments/general-checkpoints/routers.sh general --model denki-electra-tiny-ja
CORE=$CORE bash experiments/general-checkpoints/dapt.sh
# 2. random-init encoders already fine-tuned by routers.sh (before fusion existed): the fusion refitted on their
#    kept (median) seed with --epochs 0 — the same weights, the TF-IDF model and the fusion fitted again
refit() {  # refit NAME TASK TEXT_FIELD TRAIN DEV
  local out=$R/$1-$2
  [ -f $out/report.json ] || taskset -c $CORE .venv/bin/denki finetune classify --model runs/general-routers/$1-$2 \
    --epochs 0 --train $4 --dev $5 --text-field $3 --max-length 128 --threads 1 --no-progress --out $out > $out.log 2>&1
}
refit random livedoor-title title $D/livedoor_train.jsonl.gz $D/livedoor_dev.jsonl.gz
refit random jaquad-qtype text $D/jaquad_qtype_train.jsonl.gz $D/jaquad_qtype_dev.jsonl.gz
# 3. the livedoor-title router from the checkpoint, exported (int8), and what the lexical part costs to serve
[ -f $R/livedoor-title-onnx/manifest.json ] || taskset -c $CORE .venv/bin/denki export \
  --model runs/general-routers/general-livedoor-title --out $R/livedoor-title-onnx --optimize O2 --quantize int8 \
  > $R/export.log 2>&1
taskset -c $CORE .venv/bin/python bench/fusion_latency.py --model $R/livedoor-title-onnx \
  --data $D/livedoor_dev.jsonl.gz --field title --backend int8 --threads 1 | tee $R/latency.txt
python3 experiments/fused-router/summarize.py
