"""Passage recall@k of BM25 variants on the two dev collections (experiments/ask-retrieval/README.md).

    OMP_NUM_THREADS=1 taskset -c 1 python experiments/ask-retrieval/compare.py [--bm25s] [--speed]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from denki.models.retrieval import words as W
from denki.models.retrieval.evaluate import passage_recall, squad_questions
from denki.models.retrieval.index import PassageIndex
from denki.models.retrieval.passages import read_passages

D = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SETS = {"jsquad_valid": D / "jsquad_valid.squad2.json.gz", "jaquad_dev": D / "jaquad_dev.squad2.json.gz"}


def fts5(words_mode: str, tmp: Path) -> dict:
    """FTS5 over content words (the default) or every MeCab surface (STOPWORDS emptied, symbols kept)."""
    saved = (W.STOPWORDS, W._is_symbol)
    if words_mode == "all":
        W.STOPWORDS = frozenset()
        W._is_symbol = lambda w: False
    try:
        out = {}
        for name, path in SETS.items():
            t0 = time.perf_counter()
            idx = PassageIndex.build([path], tmp / f"{words_mode}-{name}")
            build = time.perf_counter() - t0
            out[name] = {**passage_recall(idx, path), "build_s": round(build, 2)}
        return out
    finally:
        W.STOPWORDS, W._is_symbol = saved


def bm25s_variant() -> dict:
    """bm25s (its default BM25, k1 1.5, b 0.75) over the same content words."""
    import bm25s

    out = {}
    for name, path in SETS.items():
        ps = list(read_passages(path))
        t0 = time.perf_counter()
        corpus = [W.search_words(f"{p.title}\n{p.text}") for p in ps]
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
        build = time.perf_counter() - t0
        qs = [q for q in squad_questions(path) if q.answerable]
        ranks, ms = [], []
        for q in qs:
            t1 = time.perf_counter()
            docs, _ = retriever.retrieve([W.search_words(q.question)], k=20, show_progress=False)
            ms.append((time.perf_counter() - t1) * 1e3)
            ids = [ps[i].id for i in docs[0]]
            ranks.append(ids.index(q.passage_id) + 1 if q.passage_id in ids else np.inf)
        r = np.array(ranks, dtype=float)
        out[name] = {"questions": len(qs), "recall_at": {str(k): float((r <= k).mean()) for k in (1, 5, 20)},
                     "mrr": float(np.where(np.isfinite(r), 1 / r, 0).mean()),
                     "search_ms": {"p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90))},
                     "build_s": round(build, 2)}
    return out


def speed(tmp: Path, n: int = 10_000) -> dict:
    """Search latency over the first ``n`` paragraphs of corpus_docs_ja, queries = JSQuAD valid questions."""
    import gzip

    src = tmp / "docs10k.txt"
    with gzip.open(D / "corpus_docs_ja.txt.gz", "rt", encoding="utf-8") as f, open(src, "w", encoding="utf-8") as o:
        k = 0
        for line in f:
            if line.strip():
                o.write(line)
                k += 1
                if k >= n:
                    break
    t0 = time.perf_counter()
    idx = PassageIndex.build([src], tmp / "docs10k")
    build = time.perf_counter() - t0
    qs = [q.question for q in squad_questions(SETS["jsquad_valid"])][:1000]
    ms = []
    for q in qs:
        t1 = time.perf_counter()
        idx.search(q, k=5)
        ms.append((time.perf_counter() - t1) * 1e3)
    return {"passages": len(idx), "build_s": round(build, 1), "queries": len(qs),
            "search_ms": {f"p{p}": round(float(np.percentile(ms, p)), 2) for p in (50, 90, 99)}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bm25s", action="store_true", help="also bm25s (pip install bm25s)")
    ap.add_argument("--speed", action="store_true", help="also search latency over 10,000 docs paragraphs")
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.json")))
    a = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for mode in ("content", "all"):
            res[f"fts5-{mode}"] = fts5(mode, tmp)
        if a.bm25s:
            res["bm25s-content"] = bm25s_variant()
        if a.speed:
            res["speed-fts5-content-10k"] = speed(tmp)
    Path(a.out).write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for k, v in res.items():
        print(k, json.dumps(v, ensure_ascii=False), file=sys.stdout)


if __name__ == "__main__":
    main()
