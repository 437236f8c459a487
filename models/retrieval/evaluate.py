"""Passage recall of an index on a labelled SQuAD 2.0 file whose contexts it holds (built from the same file, or
from a collection that contains it): for every answerable question, the rank of its own context among the hits.

The shared files' unanswerable questions are synthetic — another paragraph's question of the same article
(``synthetic_negative``): over a whole collection their answer is in the index, so they are left out here.
"""
from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from denki.models.io.errors import InputError

RECALL_AT = (1, 5, 20)


@dataclass(frozen=True)
class GoldQuestion:
    id: str
    question: str
    passage_id: str    # TITLE#N, as models.retrieval.passages names a SQuAD context
    answerable: bool
    synthetic: bool    # a synthetic negative (another paragraph's question)


def squad_questions(path: str | Path) -> Iterator[GoldQuestion]:
    """Every question of a SQuAD 2.0 file with the id of its context passage."""
    p = Path(path)
    opener = gzip.open if p.name.endswith(".gz") else open
    with opener(p, "rt", encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or "data" not in data:
        raise InputError("expected a SQuAD 2.0 JSON file ({\"data\": [...]})", path=str(p))
    for a, art in enumerate(data["data"]):
        title = str(art.get("title") or f"article{a}")
        for i, par in enumerate(art.get("paragraphs", [])):
            for q in par.get("qas", []):
                yield GoldQuestion(id=q["id"], question=q["question"], passage_id=f"{title}#{i}",
                                   answerable=not q.get("is_impossible", False),
                                   synthetic=bool(q.get("synthetic_negative", False)))


def passage_recall(index, data: str | Path, *, ks: Sequence[int] = RECALL_AT, limit: int | None = None,
                   progress: bool = False) -> dict:
    """``{"recall_at": {"1": r, "5": r, "20": r}, "questions": n, "mrr": …, "search_ms": {p50, p90, p99}}`` over the
    answerable questions of ``data`` (the first ``limit`` of them)."""
    from tqdm.auto import tqdm

    qs = [q for q in squad_questions(data) if q.answerable][:limit]
    kmax = max(ks)
    ranks, ms = [], []
    for q in tqdm(qs, desc="retrieval: questions", disable=not progress, mininterval=1.0):
        t0 = time.perf_counter()
        hits = index.search(q.question, k=kmax)
        ms.append((time.perf_counter() - t0) * 1e3)
        ranks.append(next((h.rank for h in hits if h.passage.id == q.passage_id), None))
    n = len(qs) or 1
    found = np.array([r if r is not None else np.inf for r in ranks], dtype=np.float64)
    return {"questions": len(qs), "passages": len(index),
            "recall_at": {str(k): float((found <= k).sum() / n) for k in ks},
            "mrr": float(np.where(np.isfinite(found), 1.0 / found, 0.0).sum() / n),
            "search_ms": {f"p{p}": float(np.percentile(ms, p)) if ms else None for p in (50, 90, 99)}}
