"""Re-split livedoor news train + dev into a new train / dev of the same sizes (seeded), so a router's gain over
random init is measured on several dev sets, not only the shipped one.

    python experiments/router-resplits/resplit.py SEED OUT_DIR     # → OUT_DIR/train.jsonl, OUT_DIR/dev.jsonl
"""
from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

D = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def main(seed: int, out: str) -> None:
    rows = {}
    sizes = {}
    for split in ("train", "dev"):
        with gzip.open(D / f"livedoor_{split}.jsonl.gz", "rt", encoding="utf-8") as f:
            part = [json.loads(x) for x in f if x.strip()]
        sizes[split] = len(part)
        rows[split] = part
    pool = rows["train"] + rows["dev"]
    random.Random(seed).shuffle(pool)
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    n_dev = sizes["dev"]
    for name, part in (("dev", pool[:n_dev]), ("train", pool[n_dev:])):
        (o / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part),
                                         encoding="utf-8")
    print(f"seed {seed}: train {len(pool) - n_dev}, dev {n_dev} → {o}")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
