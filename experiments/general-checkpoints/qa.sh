#!/usr/bin/env bash
# The QA checkpoint: fine-tune a pretrained checkpoint on all of jaquad_train (the kit's QA recipe for tiny: lr 1e-3,
# batch 32, 384-token windows, the answerable head — finetune qa's default for an ELECTRA bundle), then score it on
# JaQuAD dev (in the run) and JSQuAD valid (a second dev set, never used for a choice).
#   CORE=0 EPOCHS=1 bash experiments/general-checkpoints/qa.sh NAME MODEL   → runs/general-qa/NAME
#   e.g.  … qa.sh general-e1 denki-electra-tiny-ja
set -eu
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=${THREADS:-1} MKL_NUM_THREADS=${THREADS:-1} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
D=../shared/data; CORE=${CORE:-0}; EPOCHS=${EPOCHS:-1}; name=$1; model=$2; out=runs/general-qa/$name
mkdir -p runs/general-qa
start=$(date +%s)
[ -f $out/report.json ] || taskset -c $CORE .venv/bin/denki finetune qa --model $model \
  --train $D/jaquad_train.squad2.json.gz --dev $D/jaquad_dev.squad2.json.gz --out $out --max-length 384 \
  --doc-stride 128 --max-answer-length 30 --seeds 1 --epochs $EPOCHS --lr 1e-3 --batch-size 32 \
  --threads ${THREADS:-1} --no-progress > $out.log 2>&1
echo "$name: QA training wall $(( $(date +%s) - start )) s"
[ -f $out/jsquad.json ] || taskset -c $CORE .venv/bin/denki evaluate qa --model $out --data $D/jsquad_valid.squad2.json.gz \
  --output-json $out/jsquad.json > $out.jsquad.log 2>&1
python3 -c "import json; r=json.load(open('$out/report.json')); m=r.get('dev_metrics') or r['runs'][0]['dev_metrics']; j=json.load(open('$out/jsquad.json')); print('$name', 'jaquad_dev', m.get('best_f1', m.get('f1')), 'HasAns', m.get('HasAns_f1'), '| jsquad', j)" | cut -c1-400
