#!/usr/bin/env bash
# The GPU tier (bench/gpu_tier.py) on a lent CUDA machine that receives only the repository (≤ 64 MiB) and has
# its own python3 + torch but no denki dependencies and no ../shared.
#
#   bash bench/gpu_tier_lent.sh pack     # here (network for pip download): fills the ignored folder .gpu/
#   bash bench/gpu_tier_lent.sh run      # there, with .gpu carried; results under $OUT (or /tmp/gt-out)
#   bash bench/gpu_tier_lent.sh lever -- --cls-contrast 1    # there: one pretraining lever at the tier's budget
#   bash bench/gpu_tier_lent.sh mfu      # there: MFU of `denki pretrain` for tiny, Small, Base (~60 s each)
#   bash bench/gpu_tier_lent.sh small    # there: mfu, then ELECTRA-Small at the largest budget the time left allows
#   DRY=1 bash bench/gpu_tier_lent.sh mfu|small   # here, on CPU: the same chain, tiny-sized (GPU_DIR=a folder
#                                                 # laid out like .gpu, e.g. with slices of the data, instead)
#
# `mfu` (issue 49): first 30 steps of tiny ELECTRA through torchrun (world 1: the DDP + NCCL path) → ddp-log.txt;
# then bench/pretrain_mfu.py runs the real `denki pretrain` (bf16, --compile, SDPA attention) for
# SECONDS_PER_SIZE (60) per size and reports the median MFU of its logged intervals → $OUT/mfu.json. `small` then
# pretrains ELECTRA-Small for PRETRAIN_SECONDS (default 240) worth of FLOPs at the FLOP/s the Small MFU run measured
# (batch SMALL_BATCH, default the paper's 128), exports it and fine-tunes livedoor titles with SEEDS seeds; the
# bundle (fp32, ~55 MB) comes back under $OUT/small-bundle only if its median macro-F1 beats the shipped tiny
# checkpoint's 0.812 (3 seeds on the full splits, experiments/general-checkpoints) — then it can ship as a named
# checkpoint. Its corpora are the packed man pages + Wikipedia: the technical-docs corpus (24.7 MB compressed) does
# not fit the 64 MiB carry beside the wheels and the dictionary.
#
# `lever` is for the device time left after `run`: ELECTRA-Small pretrained alone at BUDGET (default 2e15, the
# tier's calibrated budget on the H200) with the extra `denki pretrain` options given after --, then livedoor-title
# fine-tuned with SEEDS (default 3) seeds side by side, to compare with the tier's ELECTRA/MLM/random rows.
#
# What travels in .gpu/ (~43 MB): the wheels denki needs beyond that machine's image, at denki's pins
# (transformers 4.57.6, tokenizers 0.22.2, huggingface-hub 0.36.2, optimum 2.1.0, optimum-onnx 0.1.0, fugashi 1.5.2
# for Python 3.12); the ipadic dictionary (13 MB — unidic-lite is 47 MB and does not fit beside the data), so the
# tier's tokenizer is trained here on MeCab-ipadic words; the two pretraining corpora; JaQuAD train/dev; livedoor
# train/dev with only id/label/title (the livedoor-title task reads nothing else). onnxruntime-gpu (~300 MB) does
# not fit: the machine's own CPU onnxruntime runs the parity gate, and CUDA latency is measured in PyTorch
# (gpu_tier.py's torch_latency) instead of ORT CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
G=${GPU_DIR:-.gpu}  # DRY runs may point it at a folder of small slices
case "${1:-}" in
pack)
  D=${DENKI_SHARED_DATA:-../shared/data}
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  mkdir -p $G/whl $G/data
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d $G/whl \
    fugashi==1.5.2 transformers==4.57.6 tokenizers==0.22.2 huggingface-hub==0.36.2 optimum==2.1.0 optimum-onnx==0.1.0
  python3 -m pip download -q --no-deps -d $G ipadic==1.0.0
  cp "$D"/corpus_manpages_ja.txt.gz "$D"/corpus_wiki_ja.txt.gz "$D"/jaquad_train.squad2.json.gz \
     "$D"/jaquad_dev.squad2.json.gz $G/data/
  for s in train dev; do
    zcat "$D/livedoor_$s.jsonl.gz" | python3 -c 'import sys, json
for line in sys.stdin:
    r = json.loads(line); print(json.dumps({k: r[k] for k in ("id", "label", "title")}, ensure_ascii=False))' \
      | gzip -9 > $G/data/livedoor_$s.jsonl.gz
  done
  .venv/bin/denki tokenizer train --corpus $G/data/corpus_manpages_ja.txt.gz $G/data/corpus_wiki_ja.txt.gz \
    --vocab-size 8000 --mecab-dic ipadic --out $G/tok
  du -sh $G
  ;;
mfu|small)
  OUT=${OUT:-/tmp/gt-out}
  mkdir -p "$OUT"
  : > "$OUT/log.txt"
  if [ -z "${DRY:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $G/whl/*.whl
    tar xzf $G/ipadic-1.0.0.tar.gz -C /tmp && cp -r /tmp/ipadic-1.0.0/ipadic /tmp/site/
    export PYTHONPATH=/tmp/site
    PY=python3
  else
    PY=${PY:-.venv/bin/python}
  fi
  export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
  D=$G/data
  C="$D/corpus_manpages_ja.txt.gz $D/corpus_wiki_ja.txt.gz"
  DRYARGS=(); [ -n "${DRY:-}" ] && DRYARGS=(--dry-run --sizes tiny)
  set +e
  # the DDP path through torchrun (NCCL on CUDA; gloo in a DRY run): world 1, 30 steps of tiny ELECTRA
  $PY -m torch.distributed.run --standalone --nproc_per_node 1 -m denki.app.cli pretrain --corpus $C --tokenizer $G/tok \
    --size tiny --objective electra --steps 30 --batch-size 32 --log-every 10 --save-every 30 --no-export \
    --no-progress --cache-dir /tmp/mfu/cache --out /tmp/ddp1 > "$OUT/ddp-log.txt" 2>&1
  echo "torchrun world 1: exit $? ($(grep -c '"step"' /tmp/ddp1/metrics.jsonl 2>/dev/null) metrics lines;" \
    "$(grep -o 'DDP over [a-z]*' "$OUT/ddp-log.txt"))" | tee -a "$OUT/log.txt"
  $PY bench/pretrain_mfu.py --corpus $C --tokenizer $G/tok --out /tmp/mfu --seconds "${SECONDS_PER_SIZE:-60}" \
    "${DRYARGS[@]}" 2>&1 | tee "$OUT/mfu-log.txt"
  cp /tmp/mfu/mfu.json "$OUT/" 2>/dev/null
  [ "$1" = mfu ] && exit 0
  # the largest budget PRETRAIN_SECONDS allows at the measured Small FLOP/s (the tiny row in a dry run)
  BUDGET=$($PY -c 'import json, sys
rows = {r["size"]: r for r in json.load(open("/tmp/mfu/mfu.json"))["results"] if r["summary"]}
r = rows.get("small") or rows.get("tiny")
print("%.3g" % (r["summary"]["flops_per_s"] * float(sys.argv[1])))' "${PRETRAIN_SECONDS:-240}")
  [ -n "$BUDGET" ] || { echo "small: no FLOP/s measured (see mfu-log.txt)" | tee -a "$OUT/log.txt"; exit 1; }
  SIZE=small; [ -n "${DRY:-}" ] && SIZE=tiny
  echo "small: ELECTRA-$SIZE at $BUDGET FLOPs" | tee -a "$OUT/log.txt"
  L=/tmp/gs; rm -rf $L; mkdir -p $L
  $PY -m denki.app.cli pretrain --corpus $C --tokenizer $G/tok --size $SIZE --objective electra --max-flops $BUDGET \
    --batch-size "${SMALL_BATCH:-128}" --no-progress --save-every 100000000 --cache-dir /tmp/mfu/cache \
    $([ -z "${DRY:-}" ] && echo --compile) --out $L/pretrain 2>&1 | tail -n 3 | tee -a "$OUT/log.txt"
  [ -f $L/pretrain/bundle/manifest.json ] || { echo "small: pretraining failed" | tee -a "$OUT/log.txt"; exit 1; }
  for s in $(seq 0 $((${SEEDS:-3} - 1))); do
    $PY -m denki.app.cli finetune classify --model $L/pretrain/bundle --train $D/livedoor_train.jsonl.gz \
      --dev $D/livedoor_dev.jsonl.gz --text-field title --seeds 1 --seed $s --threads 4 --no-progress --no-baseline \
      ${FT_ARGS:-} --out $L/ft-s$s > $L/ft-s$s.log 2>&1 &
  done
  wait
  for f in $L/ft-s*.log; do echo "== $f"; tail -n 2 "$f"; done | tee -a "$OUT/log.txt"
  $PY - "$L" "$OUT" <<'PYEOF' 2>&1 | tee -a "$OUT/log.txt"
import json, shutil, statistics, sys
from pathlib import Path
L, out = Path(sys.argv[1]), Path(sys.argv[2])
TINY = 0.812  # denki-electra-tiny-ja, livedoor titles, median of 3 seeds (experiments/general-checkpoints)
f1 = []
for p in sorted(L.glob("ft-s*/report.json")):
    f1.append(json.loads(p.read_text())["dev"]["macro_f1"])
summary = json.loads((L / "pretrain" / "summary.json").read_text())
res = {"livedoor_title_macro_f1": f1, "median": statistics.median(f1) if f1 else None, "tiny_checkpoint": TINY,
       "pretrain": {k: summary.get(k) for k in ("flops", "steps", "tokens", "wall_s", "precision", "speed")}}
res["beats_tiny"] = bool(f1) and res["median"] > TINY
(out / "small.json").write_text(json.dumps(res, indent=1))
print(json.dumps(res, indent=1))
if res["beats_tiny"]:
    shutil.copytree(L / "pretrain" / "bundle", out / "small-bundle")
PYEOF
  rc=${PIPESTATUS[0]}
  tar czf "$OUT/small-reports.tgz" --exclude='*.safetensors' --exclude='*.onnx' --exclude=cache -C /tmp gs 2>/dev/null
  exit "$rc"
  ;;
run|lever)
  OUT=${OUT:-/tmp/gt-out}
  mkdir -p "$OUT"
  # what comes back is reports, summaries, metrics and logs; no weights
  NO_WEIGHTS=(--exclude='*.safetensors' --exclude='*.onnx' --exclude='*.onnx_data' --exclude='*.bin' --exclude='*.pt')
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $G/whl/*.whl
  tar xzf $G/ipadic-1.0.0.tar.gz -C /tmp && cp -r /tmp/ipadic-1.0.0/ipadic /tmp/site/
  export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONUNBUFFERED=1 \
    TOKENIZERS_PARALLELISM=false GRADIO_ANALYTICS_ENABLED=False
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/env.txt"
  python3 -c 'import sys, torch, transformers, fugashi, ipadic, optimum, onnxruntime as o
print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__,
      "onnxruntime", o.__version__, o.get_available_providers(), "cuda", torch.cuda.is_available())' \
    | tee -a "$OUT/env.txt"
  if [ "$1" = lever ]; then
    shift; [ "${1:-}" = -- ] && shift
    set +e
    L=${LEVER_DIR:-/tmp/gl}; mkdir -p $L
    D=$G/data
    # pretraining, then SEEDS fine-tuning processes at once (one run uses ~1 % of the GPU), all under LIMIT
    export G D L BUDGET=${BUDGET:-2e15} SEEDS=${SEEDS:-3} LEVER="$*"
    timeout "${LIMIT:-300}" bash -c '
      python3 -m denki.app.cli pretrain --corpus $D/corpus_manpages_ja.txt.gz $D/corpus_wiki_ja.txt.gz --tokenizer $G/tok \
        --size small --objective electra --max-flops $BUDGET --batch-size 128 --device ${DEVICE:-cuda} --no-progress \
        --save-every 100000 --cache-dir $L/cache --out $L/pretrain $LEVER || exit 1
      for s in $(seq 0 $((SEEDS - 1))); do
        python3 -m denki.app.cli finetune classify --model $L/pretrain/bundle --train $D/livedoor_train.jsonl.gz \
          --dev $D/livedoor_dev.jsonl.gz --text-field title --seeds 1 --seed $s --device ${DEVICE:-cuda} \
          --threads 4 --no-progress --no-baseline ${FT_ARGS:-} --out $L/ft-s$s > $L/ft-s$s.log 2>&1 &
      done
      wait' 2>&1 | tee "$OUT/log.txt"
    rc=${PIPESTATUS[0]}
    for f in $L/ft-s*.log; do echo "== $f"; tail -n 3 "$f"; done | tee -a "$OUT/log.txt"
    tar czf "$OUT/reports.tgz" "${NO_WEIGHTS[@]}" --exclude=cache -C "$(dirname $L)" "$(basename $L)" 2>/dev/null
    echo "gpu lever exit $rc"
    exit "$rc"
  fi
  # the tier itself, cut at LIMIT seconds so that what it measured still gets packed below
  set +e
  timeout "${LIMIT:-500}" python3 bench/gpu_tier.py --tokenizer $G/tok --data-dir $G/data --out /tmp/gt \
    --pretrain-seconds "${PRETRAIN_SECONDS:-150}" --max-train "${MAX_TRAIN:-10000}" --jobs "${JOBS:-6}" 2>&1 | tee "$OUT/log.txt"
  rc=${PIPESTATUS[0]}
  cp /tmp/gt/gpu_tier.json /tmp/gt/gpu_tier.md "$OUT/" 2>/dev/null
  tar czf "$OUT/reports.tgz" "${NO_WEIGHTS[@]}" -C /tmp gt 2>/dev/null
  echo "gpu tier exit $rc"
  exit "$rc"
  ;;
*)
  echo "usage: bash bench/gpu_tier_lent.sh pack|run|lever|mfu|small [-- PRETRAIN-OPTIONS]" >&2; exit 2 ;;
esac
