"""Three re-splits of livedoor titles train+dev (a new dev each time), for comparing pretrained encoders on more
than today's dev set (held-out tests disagreed with dev by 3 points: ../../../shared/DESIGN.md).

    python experiments/size-8e14/resplit.py --out runs/size-8e14/splits     → split{0,1,2}/{train,dev}.jsonl

Split k pools ``livedoor_train`` and ``livedoor_dev`` (rows in file order), shuffles them with ``Random(k)`` and
takes the first 736 rows (the size of the original dev file) as dev, the rest as train. No test file is read.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

D = Path(__file__).resolve().parents[3] / "shared" / "data"


def read(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/size-8e14/splits")
    ap.add_argument("--splits", type=int, default=3)
    args = ap.parse_args()
    train, dev = read(D / "livedoor_train.jsonl.gz"), read(D / "livedoor_dev.jsonl.gz")
    pool = train + dev
    for k in range(args.splits):
        rows = pool[:]
        random.Random(k).shuffle(rows)
        out = Path(args.out) / f"split{k}"
        out.mkdir(parents=True, exist_ok=True)
        for name, part in (("dev", rows[:len(dev)]), ("train", rows[len(dev):])):
            (out / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part),
                                               encoding="utf-8")
        print(out, len(rows) - len(dev), len(dev))


if __name__ == "__main__":
    main()
