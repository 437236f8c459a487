#!/usr/bin/env bash
# --cls-contrast 1 at the quickstart's budget (6e12 FLOPs, samples/corpus_ja.txt, its tokenizer recipe, routers with
# 3 fine-tuning seeds, QA one seed: experiments/qsobj/run.sh), ELECTRA only, one thread per arm (taskset), one shared tokenizer:
#   bash experiments/cc1e14/quickstart.sh 0 lr1e3 "--cls-contrast 1 --lr 1e-3" 1   (→ runs/qscc-lr1e3; 1 = with random init)
#   bash experiments/cc1e14/quickstart.sh 1 lr3e4 "--cls-contrast 1 --lr 3e-4" 0
#   bash experiments/cc1e14/quickstart.sh 1 base  "" 0                             (the paper's loss at the default lr 3e-4)
#   bash experiments/cc1e14/quickstart.sh 1 lr1e3wu100 "--cls-contrast 1 --lr 1e-3 --warmup-steps 100" 0
set -u
cd "$(dirname "$0")/../.."  # the repository root
CORE=$1; TAG=$2; ARGS=$3; CONTROL=$4
TOK=runs/qscc/tok
[ -f $TOK/vocab.txt ] || .venv/bin/denki tokenizer train --corpus samples/corpus_ja.txt --vocab-size 8000 \
  --limit-alphabet 2500 --out $TOK
D=runs/qscc-$TAG TOK=$TOK OBJECTIVES=electra CONTROL=$CONTROL PRETRAIN_ARGS="--mask-prob 0.15 $ARGS" \
  taskset -c $CORE bash experiments/qsobj/run.sh
