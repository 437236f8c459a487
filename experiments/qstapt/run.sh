#!/usr/bin/env bash
# Quickstart-budget lever "the task's own unlabelled text in the pretraining corpus" (task-adaptive pretraining):
# the experiments/qsobj comparison (6e12 FLOPs, tiny, the quickstart's data and fine-tuning settings, 1 thread, 3 seeds)
# with the routing and QA *train* texts (labels and answers not read) added to samples/corpus_ja.txt. The tokenizer
# is experiments/qsobj's (trained on samples/corpus_ja.txt alone), so the only change is the pretraining corpus and the
# random-init control is experiments/qsobj's. Runs experiments/qsobj/run.sh with these settings.
#   bash experiments/qstapt/run.sh     (runs/qstapt/…)
cd "$(dirname "$0")/../.."  # the repository root
D=runs/qstapt TOK=runs/qsobj/tok OBJECTIVES="mlm electra" CONTROL=0 \
  CORPUS="samples/corpus_ja.txt samples/routing_train.jsonl samples/qa_train.jsonl:question,context" \
  exec bash experiments/qsobj/run.sh
