"""``denki evaluate ask``: a collection asked end to end (torch-free) on a labelled SQuAD 2.0 file whose contexts
the index holds — what retrieval finds (passage recall at 1, 5 and 20), what the whole pipeline answers (HasAns F1
and EM) against the same reader given each question's own passage (``gold_passage_HasAns_f1``: what retrieval
costs), and, with whole articles left out of the index, how often their questions get 回答なし.

The file's unanswerable questions are synthetic (another paragraph's question of the same article): over the whole
collection their answer is in the index, so they are left out of every figure here.
"""
from __future__ import annotations

import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from denki.serve.asker import UNANSWERABLE_SHARE

RECALL_AT = (1, 5, 20)


def _pct(ms: list[float]) -> dict:
    return {f"p{p}": round(float(np.percentile(ms, p)), 3) if ms else None for p in (50, 90, 99)}


def _left_out(index_dir: Path, articles: list[str], n: int, seed: int, tmp: Path) -> tuple[Path, list[str]]:
    """A copy of the index without ``n`` whole articles (drawn with ``random.Random(seed)``) → (its folder, them)."""
    from denki.models.retrieval.index import PassageIndex

    out = tmp / "index"
    shutil.copytree(index_dir, out)
    drop = sorted(random.Random(seed).sample(sorted(articles), n))
    idx = PassageIndex(out)
    idx.remove(drop)
    idx.close()
    return out, drop


def mixed_f1(in_rows: list[tuple[float | None, float]], out_diffs: list[float | None], threshold: float,
             share: float = UNANSWERABLE_SHARE) -> float | None:
    """The mixed F1 (percent) at ``threshold``: a question in the collection scores its candidate span's F1 when
    answered (candidate ``null_score_diff`` ≤ threshold), 0 otherwise; a left-out article's question scores 1 when
    not answered. ``in_rows``: (candidate diff or None when nothing can be answered, span F1); ``out_diffs``: the
    left-out questions' candidate diffs. None without both groups."""
    if not in_rows or not out_diffs:
        return None
    answered = [d is not None and not (d > threshold) for d, _ in in_rows]
    has = float(np.mean([f if a else 0.0 for a, (_, f) in zip(answered, in_rows)]))
    no = float(np.mean([not (d is not None and not (d > threshold)) for d in out_diffs]))
    return 100.0 * ((1.0 - share) * has + share * no)


def evaluate_ask(index_dir: str | Path, qa_dir: str | Path, data: str | Path, *, k: int = 5,
                 exclude_articles: int = 0, seed: int = 0, limit: int | None = None, backend: str = "auto",
                 threads: int | None = None, progress: bool = True, share: float = UNANSWERABLE_SHARE,
                 gold_passage: bool = True, keep_rows: bool = False) -> dict:
    """The figures of the module docstring → a JSON-able dict. ``gold_passage=False`` skips reading each
    question's own passage (no ``gold_passage_*``); ``keep_rows`` adds ``rows``: each question's candidate
    ``null_score_diff`` (and span F1 in the collection), what :func:`mixed_f1` and ``denki calibrate ask`` need."""
    from tqdm.auto import tqdm

    from denki.models.io.errors import DenkiError
    from denki.models.qa.data import read_qa
    from denki.models.qa.metrics import max_over_golds
    from denki.models.retrieval.evaluate import squad_questions
    from denki.models.retrieval.index import PassageIndex
    from denki.serve.asker import Asker

    gold = {q.id: q for q in squad_questions(data)}
    examples = {e.id: e for e in read_qa(str(data)).examples}
    qs = [q for q in gold.values() if q.answerable and not q.synthetic and q.id in examples]
    if limit and limit < len(qs):  # a seeded random subset across the whole file (left-out articles included)
        keep = set(random.Random(seed).sample(range(len(qs)), limit))
        qs = [q for i, q in enumerate(qs) if i in keep]
    articles = sorted({q.passage_id.rsplit("#", 1)[0] for q in gold.values()})
    with tempfile.TemporaryDirectory() as t:
        idx_dir, dropped = Path(index_dir), []
        if exclude_articles:
            if exclude_articles >= len(articles):
                raise DenkiError(f"--exclude-articles {exclude_articles}: the file has {len(articles)} articles")
            idx_dir, dropped = _left_out(Path(index_dir), articles, exclude_articles, seed, Path(t))
        asker = Asker(idx_dir, qa_dir, k=k, backend=backend, threads=threads)
        indexed = set(asker.index.documents())
        missing = [a for a in articles if a not in indexed and a not in dropped]
        if missing:
            raise DenkiError(f"{index_dir}: the index lacks {len(missing)} articles of {data} (e.g. {missing[0]!r}): "
                             "build it from this file (denki index build --docs FILE)")
        e2e, gp, ranks, out_no, in_no, ret_ms, ask_ms = [], [], [], [], [], [], []
        in_rows, out_diffs = [], []  # the candidates, whatever the threshold: for mixed_f1 and calibrate ask
        for q in tqdm(qs, desc="ask: questions", disable=not progress, mininterval=1.0):
            ex = examples[q.id]
            t0 = time.perf_counter()
            hits = asker.index.search(q.question, k=max(RECALL_AT))
            ret_ms.append((time.perf_counter() - t0) * 1e3)
            r = asker.ask(q.question)
            ask_ms.append(r["retrieval_ms"] + r["reader_ms"])
            diff = _candidate_diff(r)
            if q.passage_id.rsplit("#", 1)[0] in dropped:
                out_no.append(not r["has_answer"])
                out_diffs.append(diff)
                continue
            in_no.append(not r["has_answer"])
            ranks.append(next((h.rank for h in hits if h.passage.id == q.passage_id), np.inf))
            e2e.append(max_over_golds(r["answer"], ex.answer_texts))
            in_rows.append((diff, max_over_golds(r["answer"] if r["has_answer"] else r.get("span_answer") or "",
                                                 ex.answer_texts)[1]))
            if gold_passage:
                g = asker.reader.answer(q.question, ex.context)
                gp.append(max_over_golds(g["answer"], ex.answer_texts))
    rk = np.array(ranks, dtype=float)
    n = max(1, len(rk))
    out = {"index": str(index_dir), "qa": str(qa_dir), "data": str(data), "k": k,
           "null_threshold": asker.threshold, "questions": len(ranks),
           "recall_at": {str(c): float((rk <= c).sum() / n) for c in RECALL_AT},
           "HasAns_exact": 100.0 * float(np.mean([e for e, _ in e2e])) if e2e else None,
           "HasAns_f1": 100.0 * float(np.mean([f for _, f in e2e])) if e2e else None,
           "gold_passage_HasAns_exact": 100.0 * float(np.mean([e for e, _ in gp])) if gp else None,
           "gold_passage_HasAns_f1": 100.0 * float(np.mean([f for _, f in gp])) if gp else None,
           "excluded_articles": dropped, "out_of_collection_questions": len(out_no),
           "out_of_collection_no_answer": float(np.mean(out_no)) if out_no else None,
           # the same share on the answerable questions still in the index: a reader that says 回答なし to
           # everything would score 1.0 above too, so read the two together
           "in_collection_no_answer": float(np.mean(in_no)) if in_no else None,
           "latency_ms": {"retrieval": _pct(ret_ms), "ask": _pct(ask_ms)}, "threads": threads,
           "reader_backend": asker.reader.backend, "unanswerable_share": share,
           "mixed_f1": mixed_f1(in_rows, out_diffs, asker.threshold, share)}
    if keep_rows:
        out["rows"] = {"in_collection": in_rows, "out_of_collection": out_diffs}
    return out


def _candidate_diff(r: dict) -> float | None:
    """The candidate passage's ``null_score_diff`` — the number a threshold is compared with — or None when no
    threshold makes this question answered (no passage, no span, or the reader's confidence floor said unsure)."""
    if r["reason"] in ("no_passage", "unsure") or r.get("null_score_diff") is None:
        return None
    return float(r["null_score_diff"])
