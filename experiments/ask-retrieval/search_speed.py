"""Search latency over a built index with 1,000 JSQuAD valid questions as queries (k = 5), and the time to open it
(the manifest's sha256 of the database checked), experiments/ask-retrieval/README.md:

    denki index build --docs ../shared/data/corpus_docs_ja.txt.gz --out runs/index-docs-all
    OMP_NUM_THREADS=1 taskset -c 1 python experiments/ask-retrieval/search_speed.py runs/index-docs-all
"""
import random
import sys
import time
from pathlib import Path

import numpy as np

from denki.models.retrieval.evaluate import squad_questions
from denki.models.retrieval.index import PassageIndex

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "jsquad_valid.squad2.json.gz"

if __name__ == "__main__":
    t = time.perf_counter()
    idx = PassageIndex(sys.argv[1])
    opened = time.perf_counter() - t
    qs = random.Random(0).sample([q.question for q in squad_questions(DATA) if q.answerable], 1000)
    for q in qs[:20]:  # warm the page cache and the word segmenter
        idx.search(q, k=5)
    ms = []
    for q in qs:
        t = time.perf_counter()
        idx.search(q, k=5)
        ms.append((time.perf_counter() - t) * 1e3)
    print(f"{len(idx):,} passages; open + verify {opened:.2f} s; search p50 / p90 / p99 "
          + " / ".join(f"{np.percentile(ms, p):.1f}" for p in (50, 90, 99)) + " ms")
