"""Asking a whole collection, torch-free: the passage index (:mod:`models.retrieval.index`) finds the ``k`` best
passages by BM25, the reader (:class:`serve.runtime.Predictor` on an ONNX QA bundle) reads each, and one answer
comes back — the span of the most answerable passage, or no answer when none holds one.

    from denki import Asker
    a = Asker("runs/index", "runs/qa-onnx")
    a.ask("保証期間はどのくらいですか?")
    # → {"answer": "お買い上げ日から1年間", "has_answer": True, "document": "kettle.md", "passage_id": "kettle.md#0",
    #    "start": 9, "end": 20, "passage": "…", "score": …, "confidence": …, "reason": "answer", "passages": [...]}

The decision across passages: the passage whose ``null_score_diff`` is lowest (the reader is surest a span beats
no answer there; ties → the higher span score) is the candidate, answered iff that difference is at most the
threshold: the one given, else the bundle's ``ask_null_threshold`` (fitted across passages by ``denki calibrate
ask``, :mod:`serve.calibrate_ask`), else the reader's own single-passage ``null_threshold``. Taking the least "no
answer" of k passages leans toward answering as k grows; ``denki evaluate ask`` measures it.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence

from denki.models.io.errors import DenkiError
from denki.models.task.batching import check_texts

DEFAULT_K = 5
#: s of the mixed F1 that ``denki calibrate ask`` maximises ((1 − s) × HasAns F1 in the collection + s × 回答なし for
#: left-out articles): JaQuAD dev's share of unanswerable questions, the mix the reader's own null threshold was
#: tuned for (experiments/ask-retrieval)
UNANSWERABLE_SHARE = 0.33


class Asker:
    """An index and a reader, asked together. ``index`` is an index folder or an open
    :class:`~models.retrieval.index.PassageIndex`; ``qa`` an ONNX QA bundle's folder or a loaded
    :class:`~serve.runtime.Predictor` (``denki serve --index`` shares the one its ``/v1/answer`` uses, the demo
    its own)."""

    def __init__(self, index: str | os.PathLike, qa, *, k: int = DEFAULT_K,
                 null_threshold: float | None = None, backend: str = "auto", device: str = "auto",
                 threads: int | None = None):
        from denki.models.retrieval.index import PassageIndex
        from denki.serve.runtime import Predictor

        if k < 1:
            raise DenkiError(f"k must be at least 1, not {k}")
        self.index = index if isinstance(index, PassageIndex) else PassageIndex(index)
        self.reader = qa if isinstance(qa, Predictor) else Predictor(qa, backend=backend, device=device,
                                                                      threads=threads)
        if not hasattr(self.reader.head, "answer_batch"):
            raise DenkiError(f"{qa}: not a QA bundle (denki ask reads passages with an onnx-qa bundle)")
        self.k = int(k)
        self.null_threshold = null_threshold

    @property
    def threshold(self) -> float:
        """The no-answer threshold across passages: the one given, else the bundle's ``ask_null_threshold``
        (``denki calibrate ask``), else the reader's own single-passage ``null_threshold``."""
        if self.null_threshold is not None:
            return float(self.null_threshold)
        task = self.reader.task
        return float(task.get("ask_null_threshold", task.get("null_threshold", 0.0)))

    def ask(self, question: str, *, k: int | None = None) -> dict:
        """One answer from the collection (see the module docstring for the fields)."""
        t0 = time.perf_counter()
        hits = self.search(question, k=k)
        t1 = time.perf_counter()
        reads = self.reader.answer_batch(self.pairs(question, hits)) if hits else []
        t2 = time.perf_counter()
        return self.result(hits, reads, retrieval_ms=(t1 - t0) * 1e3, reader_ms=(t2 - t1) * 1e3)

    # the three steps of ask(), public so that the HTTP API can run the reader through its micro-batcher
    def search(self, question: str, *, k: int | None = None) -> list:
        """The question checked (not blank, within the size limits), then its ``k`` best passages (index hits)."""
        if not question or not question.strip():
            raise DenkiError("the question is empty")
        check_texts([question])
        if k is not None and k < 1:
            raise DenkiError(f"k must be at least 1, not {k}")
        return self.index.search(question, k=k or self.k)

    @staticmethod
    def pairs(question: str, hits: list) -> list[tuple[str, str]]:
        """(question, passage text) for each hit: what the reader reads."""
        return [(question, h.passage.text) for h in hits]

    def result(self, hits: list, reads: list[dict], *, retrieval_ms: float, reader_ms: float) -> dict:
        """The reader's raw results on the hits (``Predictor.answer_batch``) → the answer dict."""
        out = self._decide(hits, reads)
        out["retrieval_ms"] = round(retrieval_ms, 3)
        out["reader_ms"] = round(reader_ms, 3)
        return out

    def describe(self) -> dict:
        """What is asked: the index (folder, passages, documents), k and the no-answer threshold."""
        return {"index": str(self.index.dir), "passages": len(self.index), "documents": len(self.index.documents()),
                "k": self.k, "null_threshold": self.threshold}

    def ask_batch(self, questions: Sequence[str], *, k: int | None = None) -> list[dict]:
        return [self.ask(q, k=k) for q in questions]

    def _decide(self, hits: list, reads: list[dict]) -> dict:
        """The candidate passage and the answer-or-not decision → the result dict."""
        passages = [{"rank": h.rank, "id": h.passage.id, "document": h.passage.doc, "title": h.passage.title,
                     "bm25": round(h.score, 4), "span_answer": r["span_answer"],
                     "null_score_diff": _finite(r["null_score_diff"]), "score": r["score"]}
                    for h, r in zip(hits, reads)]
        empty = {"answer": "", "has_answer": False, "document": None, "passage_id": None, "title": None,
                 "passage": None, "start": None, "end": None, "score": None, "null_score_diff": None,
                 "null_threshold": self.threshold, "confidence": None, "passages": passages}
        spans = [i for i, r in enumerate(reads) if r.get("span_start") is not None]
        if not spans:
            return {**empty, "reason": "no_passage" if not hits else "no_answer"}
        best = min(spans, key=lambda i: (reads[i]["null_score_diff"], -(reads[i]["score"] or 0.0)))
        r, h = reads[best], hits[best]
        answered = not (r["null_score_diff"] > self.threshold)
        where = {"document": h.passage.doc, "passage_id": h.passage.id, "title": h.passage.title,
                 "passage": h.passage.text, "score": r["score"], "null_score_diff": _finite(r["null_score_diff"]),
                 "confidence": r.get("confidence")}
        if r.get("reason") == "unsure":  # the reader's confidence floor (task.json min_confidence)
            return {**empty, **where, "reason": "unsure", "span_answer": r["span_answer"]}
        if not answered:
            return {**empty, **where, "reason": "no_answer", "span_answer": r["span_answer"]}
        return {**empty, **where, "answer": r["span_answer"], "has_answer": True, "start": r["span_start"],
                "end": r["span_end"], "reason": "answer"}


def _finite(x):
    return x if x is None or math.isfinite(x) else None
