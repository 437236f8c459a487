#!/usr/bin/env bash
# Quickstart-budget lever "the task's own unlabelled text in the pretraining corpus" (task-adaptive pretraining):
# the docs/qsobj comparison (6e12 FLOPs, tiny, the quickstart's data and fine-tuning settings, 1 thread, 3 seeds)
# with the routing and QA *train* texts (labels and answers not read) added to samples/corpus_ja.txt. The tokenizer
# is the one docs/qsobj trains on samples/corpus_ja.txt alone (same command: identical vocabulary), so the only
# change is the pretraining corpus and the random-init control is docs/qsobj's.
#   bash docs/qstapt/run.sh     (runs/qstapt/…; needs runs/qsobj/tok, made by docs/qsobj/run.sh's first line)
set -u
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
D=runs/qstapt
B=.venv/bin/denki
mkdir -p $D
[ -f runs/qsobj/tok/vocab.txt ] || $B tokenizer train --corpus samples/corpus_ja.txt --vocab-size 8000 --limit-alphabet 2500 --out runs/qsobj/tok
C="samples/corpus_ja.txt samples/routing_train.jsonl samples/qa_train.jsonl:question,context"
for obj in mlm electra; do
  [ -f $D/pre-$obj/bundle/manifest.json ] || /usr/bin/time -f "pretrain $obj %e s" $B pretrain --corpus $C --tokenizer runs/qsobj/tok \
     --size tiny --objective $obj --max-flops 6e12 --batch-size 32 --seq-len 128 --seed 0 --cache-dir $D/cache --no-progress --out $D/pre-$obj
done
for init in mlm electra; do
  [ -f $D/cls-$init/report.json ] || /usr/bin/time -f "cls $init %e s" $B finetune classify --model $D/pre-$init/bundle --train samples/routing_train.jsonl \
     --dev samples/routing_dev.jsonl --text-field text --label-field label --epochs 12 --patience 4 --max-length 64 \
     --batch-size 32 --seeds 3 --target-precision 0.9 --threads 1 --no-progress --out $D/cls-$init
done
for init in mlm electra; do
  [ -f $D/qa-$init/report.json ] || /usr/bin/time -f "qa $init %e s" $B finetune qa --model $D/pre-$init/bundle --train samples/qa_train.jsonl \
     --dev samples/qa_dev.jsonl --max-length 256 --doc-stride 64 --epochs 3 --seeds 1 --batch-size 16 --threads 1 --no-progress --out $D/qa-$init
done
echo DONE
