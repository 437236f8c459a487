#!/usr/bin/env bash
# Routers for the out-of-scope study: the quickstart's router (samples/routing_*.jsonl, 100 + 50 inquiries per desk)
# and six leave-one-desk-out routers (the same rows without one desk), each from denki-electra-tiny-ja with
# the quickstart's settings (12 epochs, patience 4, --target-precision 0.9). Then oos.py scores them.
#   CORE=1 bash experiments/out-of-scope/run.sh
set -eu
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
CORE=${CORE:-1}; R=runs/oos; mkdir -p $R/data
FT="--model checkpoints/denki-electra-tiny-ja --seeds 1 --epochs 12 --patience 4 --max-length 64 --target-precision 0.9 --threads 1 --no-progress"
[ -f $R/all/bundle/manifest.json ] || taskset -c $CORE .venv/bin/denki finetune classify $FT \
    --train samples/routing_train.jsonl --dev samples/routing_dev.jsonl --out $R/all > $R/all.log 2>&1
for d in 宿泊 飲食店 観光スポット 買い物 タクシー 天気; do
  for s in train dev; do grep -v "\"label\": \"$d\"" samples/routing_$s.jsonl > $R/data/without-$d.$s.jsonl; done
  [ -f $R/without-$d/bundle/manifest.json ] || taskset -c $CORE .venv/bin/denki finetune classify $FT \
      --train $R/data/without-$d.train.jsonl --dev $R/data/without-$d.dev.jsonl --out $R/without-$d > $R/without-$d.log 2>&1
done
taskset -c $CORE .venv/bin/python experiments/out-of-scope/oos.py --runs $R --json experiments/out-of-scope/result.json
