"""Rebuild samples/routing_{train,dev}.jsonl — the quickstart's routing sample — from ../shared/data.

    python scripts/make_routing_sample.py [--data ../shared/data] [--per-desk-train 100] [--per-desk-dev 50]

A stratified sample of the tourist-desk inquiries (``inquiry_route_{train,dev}.jsonl.gz``: JMultiWOZ (nu-dialogue),
JMultiWOZ-TC (llm-jp), CC BY-SA 4.0): for each desk, sorted by name, ``random.Random(42)`` shuffles the desk's rows
of the split and keeps the first N. The rows keep the shared file's ``id``, ``text`` and ``label`` (and
``first_turn``), in the shared file's order, so that the sample is byte-reproducible.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KEEP = ("id", "text", "label", "first_turn")


def stratified(rows: list[dict], per_label: int, seed: int = 42) -> list[dict]:
    """``per_label`` rows of each label (all of a smaller label), in the input order."""
    rng = random.Random(seed)
    chosen: set[int] = set()
    for label in sorted({r["label"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["label"] == label]
        rng.shuffle(idx)
        chosen.update(idx[:per_label])
    return [rows[i] for i in sorted(chosen)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--per-desk-train", type=int, default=100)
    ap.add_argument("--per-desk-dev", type=int, default=50)
    ap.add_argument("--out", type=Path, default=REPO / "samples")
    args = ap.parse_args(argv)
    for split, n in (("train", args.per_desk_train), ("dev", args.per_desk_dev)):
        with gzip.open(args.data / f"inquiry_route_{split}.jsonl.gz", "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        sample = stratified(rows, n)
        out = args.out / f"routing_{split}.jsonl"
        out.write_text("".join(json.dumps({k: r[k] for k in KEEP}, ensure_ascii=False) + "\n" for r in sample),
                       encoding="utf-8")
        print(f"{out}: {len(sample)} rows ({n} per desk) from inquiry_route_{split}.jsonl.gz ({len(rows)} rows)")


if __name__ == "__main__":
    main()
