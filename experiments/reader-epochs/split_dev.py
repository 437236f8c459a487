"""Split JaQuAD dev into two halves by article: `select` (epochs and the null threshold are chosen on it) and
`report` (scored once, never used for a choice). Whole articles go to one half, so no context is in both.

    python experiments/reader-epochs/split_dev.py ../shared/data/jaquad_dev.squad2.json.gz runs/reader-epochs

Deterministic: the titles sorted, shuffled with random.Random(0), the first half (by article count) → select.
"""
from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path


def main(src: str, out_dir: str) -> None:
    data = json.load(gzip.open(src, "rt", encoding="utf-8"))
    articles = sorted(data["data"], key=lambda a: a["title"])
    random.Random(0).shuffle(articles)
    half = len(articles) // 2
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, part in (("select", articles[:half]), ("report", articles[half:])):
        qs = [q for a in part for p in a["paragraphs"] for q in p["qas"]]
        no = sum(bool(q.get("is_impossible")) for q in qs)
        path = out / f"jaquad_dev_{name}.squad2.json.gz"
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump({**data, "data": part}, f, ensure_ascii=False)
        print(f"{name}: {len(part)} articles, {len(qs)} questions ({no} unanswerable) → {path}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
