"""Label draws for experiments/few-label: per desk, Random(seed) shuffles inquiry_route_train's rows of that desk;
the first k go to train.jsonl, the next k to tune_dev.jsonl (early stopping, fusion, calibration: the only labels a
run sees besides train), and every other training text to unlabelled.jsonl (text only: no label field is written).

k = "all": tune_dev keeps ALL_TUNE rows per desk (drawn as above) and train every other row; there is no pool.

    python experiments/few-label/draw.py --k 10 --seed 0 --out runs/few-label/k10-s0
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
from collections import defaultdict
from pathlib import Path

ALL_TUNE = 100  # tune-dev rows per desk at k = all


def read(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def draw(rows, k, seed):
    by = defaultdict(list)
    for r in rows:
        by[r["label"]].append(r)
    train, tune, pool = [], [], []
    for lab in sorted(by):
        rs = list(by[lab])
        random.Random(seed).shuffle(rs)
        if k == "all":
            tune += rs[:ALL_TUNE]
            train += rs[ALL_TUNE:]
        else:
            train += rs[:k]
            tune += rs[k:2 * k]
            pool += rs[2 * k:]
    return train, tune, pool


def write(path, rows, keys=("id", "text", "label")):
    path.write_text("".join(json.dumps({k: r[k] for k in keys}, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", required=True, help="labels per desk, or 'all'")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default="../shared/data/inquiry_route_train.jsonl.gz")
    a = ap.parse_args()
    k = a.k if a.k == "all" else int(a.k)
    train, tune, pool = draw(read(a.data), k, a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write(out / "train.jsonl", train)
    write(out / "tune_dev.jsonl", tune)
    if pool:
        write(out / "unlabelled.jsonl", pool, keys=("id", "text"))
    print(f"{out}: train {len(train)}, tune_dev {len(tune)}, unlabelled {len(pool)}")


if __name__ == "__main__":
    main()
