#!/usr/bin/env bash
# Two-stage pretraining (Clark et al. 2020, §3.2 "two-stage" training): MLM first, then replaced-token detection
# from the MLM encoder — does RTD add anything once MLM has shaped the encoder? Tiny, shared corpora, runs/tok8k.
#   stage 1  (core 0): MLM, mask 40 % (the tiny default), 5e13 FLOPs                       → runs/twostage/mlm-5e13
#            (core 1, meanwhile): the random-init control fine-tuned on this machine       → runs/twostage/ft-random-TASK
#   stage 2  (both cores): +2.5e13 FLOPs from the stage-1 bundle, the same lr 1e-3 and schedule in both arms:
#            electra: RTD, generator = a copy of the encoder's bottom layer + embeddings      → runs/twostage/mlm-then-electra
#            mlm:     MLM continued, mask 40 % (the control at equal total FLOPs, 7.5e13)      → runs/twostage/mlm-then-mlm
#   then 3-seed fine-tuning of both on the experiment's task samples (experiments/levers1e14/ft.sh).
#   bash experiments/twostage/run.sh
set -u
cd "$(dirname "$0")/../.."  # the repository root
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
C="../shared/data/corpus_manpages_ja.txt.gz ../shared/data/corpus_wiki_ja.txt.gz"
R=runs/twostage; B=.venv/bin/denki
mkdir -p $R
. experiments/levers1e14/ft.sh  # ft CORE RUN_DIR TASK TEXT_FIELD; ft_model CORE OUT TASK TEXT_FIELD MODEL_OPTIONS...
start=$(date +%s)
[ -f $R/mlm-5e13/bundle/manifest.json ] || taskset -c 0 $B pretrain --corpus $C --tokenizer runs/tok8k --size tiny \
  --objective mlm --mask-prob 0.4 --max-flops 5e13 --seed 0 --no-progress --out $R/mlm-5e13 > $R/mlm-5e13.log 2>&1 &
INIT_RANDOM="--init-random tiny --tokenizer runs/tok8k"
{ ft_model 1 $R/ft-random-livedoor-title livedoor-title title $INIT_RANDOM
  ft_model 1 $R/ft-random-jaquad-qtype jaquad-qtype text $INIT_RANDOM; } &
wait
echo "STAGE1 wall $(( $(date +%s) - start )) s"
S2="--init-from $R/mlm-5e13/bundle --corpus $C --max-flops 2.5e13 --lr 1e-3 --seed 0 --no-progress"
[ -f $R/mlm-then-electra/bundle/manifest.json ] || taskset -c 0 $B pretrain $S2 --objective electra \
  --out $R/mlm-then-electra > $R/mlm-then-electra.log 2>&1 &
[ -f $R/mlm-then-mlm/bundle/manifest.json ] || taskset -c 1 $B pretrain $S2 --objective mlm --mask-prob 0.4 \
  --out $R/mlm-then-mlm > $R/mlm-then-mlm.log 2>&1 &
wait
echo "STAGE2 wall $(( $(date +%s) - start )) s"
ft 0 $R/mlm-then-electra livedoor-title title & ft 1 $R/mlm-then-mlm livedoor-title title & wait
ft 0 $R/mlm-then-electra jaquad-qtype text & ft 1 $R/mlm-then-mlm jaquad-qtype text & wait
echo "ALL wall $(( $(date +%s) - start )) s"
