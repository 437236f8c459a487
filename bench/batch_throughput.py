"""Batch scoring throughput: `denki classify` (ONNX, torch-free, streaming) vs a transformers torch pipeline.

Same rows, same model weights, one process, alternating runs; prints rows/s for both and the ratio
(goal ≥ 5×). The transformers side is what a user would otherwise write: ``pipeline("text-classification",
model=<PyTorch bundle>)`` over the texts with the same batch size (its BertJapaneseTokenizer included).

    python bench/batch_throughput.py --model runs/quickstart/classifier-onnx --data ../shared/data/livedoor_dev.jsonl.gz \\
        --text-field title --rows 2000
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="ONNX classifier bundle")
    ap.add_argument("--torch-model", help="PyTorch bundle (default: the export's parent)")
    ap.add_argument("--data", required=True, help="JSONL/CSV with the text field")
    ap.add_argument("--text-field", default=None)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args()

    import torch
    from transformers import pipeline

    from models.bundle.format import read_manifest, read_task
    from models.io.records import iter_records
    from serve.batch import classify_file
    from serve.runtime import resolve_onnx_bundle

    bundle = resolve_onnx_bundle(args.model)
    task = read_task(bundle)
    field = args.text_field or task.get("text_field", "text")
    parent = args.torch_model or read_manifest(bundle)["source"]["parent"]["path"]
    rows = []
    for _, r in iter_records(args.data):
        if isinstance(r.get(field), str) and r[field].strip():
            rows.append({"text": r[field]})
        if len(rows) >= args.rows:
            break
    if args.threads:
        torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp())
    inp = tmp / "in.jsonl"
    inp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    pipe = pipeline("text-classification", model=parent, tokenizer=parent, truncation=True,
                    max_length=int(task.get("max_length") or 128), device="cpu")
    texts = [r["text"] for r in rows]
    denki_s, hf_s = [], []
    for i in range(args.rounds):
        t0 = time.perf_counter()
        classify_file(bundle, inp, tmp / f"out{i}.jsonl", text_field="text", batch_size=args.batch_size,
                      threads=args.threads, progress=False)
        denki_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        pipe(texts, batch_size=args.batch_size)
        hf_s.append(time.perf_counter() - t0)
    d, h = statistics.median(denki_s), statistics.median(hf_s)
    res = {"rows": len(rows), "denki_rows_per_s": len(rows) / d, "transformers_torch_pipeline_rows_per_s": len(rows) / h,
           "speedup": h / d, "batch_size": args.batch_size, "threads": args.threads}
    print(f"{len(rows)} rows, batch {args.batch_size}: denki classify {len(rows) / d:.0f} rows/s, "
          f"transformers torch pipeline {len(rows) / h:.0f} rows/s → {h / d:.2f}× (goal ≥ 5×)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
