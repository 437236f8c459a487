"""``denki calibrate ask``: the no-answer threshold of asking a whole collection, fitted on a labelled collection.

The reader's own ``null_threshold`` was tuned for one passage known to be relevant; over a collection the
candidate is the least-"no answer" of k passages, which leans toward answering. This fits the threshold that
maximises the *mixed F1* (:func:`serve.evaluate_ask.mixed_f1`): the end-to-end HasAns F1 on questions whose
articles are in the index, weighted 1 − s, plus the share of 回答なし on questions about articles left out of it,
weighted s (``--unanswerable-share``). It writes a copy of the ONNX QA bundle with ``ask_null_threshold`` (and how
it was fitted) in ``task.json``; :class:`~serve.asker.Asker` uses it. Torch-free.
"""
from __future__ import annotations

import numpy as np

from denki.models.io.errors import DenkiError
from denki.serve.asker import UNANSWERABLE_SHARE
from denki.serve.evaluate_ask import evaluate_ask


def fit_threshold(in_rows: list, out_diffs: list, share: float = UNANSWERABLE_SHARE) -> tuple[float, float]:
    """The threshold with the highest mixed F1 (:func:`~serve.evaluate_ask.mixed_f1`) over the candidates' diffs →
    (threshold, mixed F1). Ties go to the lowest threshold (fewer answers: a wrong answer costs a user more than a
    回答なし). ``-inf`` answers nothing. One sort and cumulative sums: linear after sorting, so thousands of
    questions take milliseconds."""
    d_in = np.array([d for d, _ in in_rows if d is not None], dtype=float)
    f_in = np.array([f for d, f in in_rows if d is not None], dtype=float)
    d_out = np.sort(np.array([d for d in out_diffs if d is not None], dtype=float))
    order = np.argsort(d_in, kind="stable")
    d_in, cum_f = d_in[order], np.concatenate([[0.0], np.cumsum(f_in[order])])
    candidates = np.concatenate([[-np.inf], np.unique(np.concatenate([d_in, d_out]))])
    has = cum_f[np.searchsorted(d_in, candidates, side="right")] / len(in_rows)  # answered when d ≤ t
    no = 1.0 - np.searchsorted(d_out, candidates, side="right") / len(out_diffs)
    mixed = 100.0 * ((1.0 - share) * has + share * no)
    best = int(np.argmax(mixed >= mixed.max() - 1e-12))  # the first (lowest) threshold within a hair of the best
    return float(candidates[best]), float(mixed[best])


def calibrate_ask(*, index: str, qa: str, data: str, out: str, k: int = 5, exclude_articles: int = 10,
                  seed: int = 0, share: float = UNANSWERABLE_SHARE, limit: int | None = None, backend: str = "auto",
                  threads: int | None = None, progress: bool = True) -> dict:
    """Ask ``data``'s questions of ``index`` with ``exclude_articles`` whole articles left out, fit the threshold,
    write the bundle to ``out`` (built in ``OUT.partial``, then renamed) → the fitted fields and the figures at the
    reader's own threshold and at the fitted one (on ``data``: optimistic)."""
    from denki.models.bundle.format import command_line, copy_with_task, read_manifest, read_task

    if not 0.0 < share < 1.0:
        raise DenkiError(f"--unanswerable-share must be between 0 and 1, not {share}")
    if exclude_articles < 1:
        raise DenkiError("--exclude-articles must be at least 1: the questions of left-out articles are the ones "
                         "that should get 回答なし")
    r = evaluate_ask(index, qa, data, k=k, exclude_articles=exclude_articles, seed=seed, limit=limit,
                     backend=backend, threads=threads, progress=progress, share=share, gold_passage=False,
                     keep_rows=True)
    rows = r.pop("rows")
    thr, best = fit_threshold(rows["in_collection"], rows["out_of_collection"], share)
    fields = {"ask_null_threshold": thr,
              "ask_calibration": {"data": str(data), "index": str(index), "k": k, "exclude_articles": exclude_articles,
                                  "seed": seed, "unanswerable_share": share,
                                  "in_collection_questions": len(rows["in_collection"]),
                                  "out_of_collection_questions": len(rows["out_of_collection"]),
                                  "mixed_f1": best, "mixed_f1_at_reader_threshold": r["mixed_f1"],
                                  "reader_null_threshold": r["null_threshold"]}}
    kind = read_manifest(qa)["kind"]
    if not kind.startswith("onnx"):
        raise DenkiError(f"--qa {qa}: a {kind} bundle; calibrate the ONNX QA bundle `denki ask` reads")
    copy_with_task(qa, out, {**read_task(qa), **fields},
                   {"ask_calibrated": {"from": str(qa), "command": command_line()}})
    return {**fields, "evaluation_at_reader_threshold": r,
            "answered_in_collection_at_fitted": float(np.mean([d is not None and d <= thr
                                                               for d, _ in rows["in_collection"]])),
            "no_answer_out_of_collection_at_fitted": float(np.mean([not (d is not None and d <= thr)
                                                                     for d in rows["out_of_collection"]]))}
