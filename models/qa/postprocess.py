"""QA post-processing in plain numpy — no torch — so the PyTorch evaluation and the ONNX runtime share it.

Input per question: start/end logits of its windows, ``(n_windows, seq)`` float arrays (rows may be padded past
a window's length; only the first ``len(offsets[w])`` positions count), and each window's ``offsets`` and
``sequence_ids`` (as in :class:`models.text.tokenizer.Encoding`: offsets into the ORIGINAL context, sequence id 1 =
context). The rule follows HF ``examples/pytorch/question-answering/utils_qa.py::postprocess_qa_predictions``:

* span candidates per window: the ``n_best`` highest start logits × the ``n_best`` highest end logits, kept when
  both tokens are context tokens, ``end >= start`` and the span is at most ``max_answer_length`` tokens;
  score = start logit + end logit; the same character span from overlapping windows keeps its best score;
* null score = **min over windows** of ``start[CLS] + end[CLS]`` (index 0);
* ``null_score_diff = null_score − best span score``; the answer is empty ("no answer") iff
  ``null_score_diff > null_threshold`` (SQuAD 2.0 convention; the threshold is tuned on dev, see
  :func:`models.qa.metrics.best_threshold`, and stored in the bundle's ``task.json``).

The answer is ``context[start:end]`` with character offsets into the original context, so it is always an
exact substring even where NFKC changed characters (full-width letters, ①, ㍿).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

NO_SPAN = math.inf  # null_score_diff when no valid span exists: always "no answer"


def _window_candidates(start: np.ndarray, end: np.ndarray, offsets, seq_ids, n_best: int,
                       max_answer_length: int) -> list[tuple[float, int, int]]:
    """Valid (score, char_start, char_end) spans of one window. ``start``/``end``: (L,) logits."""
    L = len(offsets)
    start, end = start[:L], end[:L]
    ctx = np.fromiter((s == 1 for s in seq_ids), dtype=bool, count=L)
    if not ctx.any():
        return []
    k = min(n_best, L)
    # Only context positions may start/end a span: mask the rest before taking the top k.
    s_masked = np.where(ctx, start, -np.inf)
    e_masked = np.where(ctx, end, -np.inf)
    si = np.argsort(-s_masked, kind="stable")[:k]
    ei = np.argsort(-e_masked, kind="stable")[:k]
    si = si[ctx[si]]
    ei = ei[ctx[ei]]
    if not len(si) or not len(ei):
        return []
    length = ei[None, :] - si[:, None] + 1  # (k, k) span length in tokens
    ok = (length >= 1) & (length <= max_answer_length)
    scores = start[si][:, None] + end[ei][None, :]
    out = []
    for a, b in zip(*np.nonzero(ok)):
        i, j = int(si[a]), int(ei[b])
        cs, ce = offsets[i][0], offsets[j][1]
        if ce <= cs:
            continue
        out.append((float(scores[a, b]), int(cs), int(ce)))
    return out


NULL_RULES = ("cls", "head", "combined")


def postprocess_question(start_logits: np.ndarray, end_logits: np.ndarray, offsets: Sequence, sequence_ids: Sequence,
                         context: str, *, n_best: int = 20, max_answer_length: int = 30,
                         null_threshold: float = 0.0, keep_nbest: int = 0,
                         answerable_logits: np.ndarray | None = None, null_rule: str = "cls") -> dict:
    """Answer one question from its windows' logits.

    Returns ``{"answer", "start", "end", "score", "has_answer", "null_score", "null_score_diff",
    "span_answer", "span_start", "span_end"}``: ``answer``/``start``/``end`` after the null decision
    (``""``/``None``/``None`` for no answer); ``span_*`` = the best non-null span whatever the decision (used
    for threshold tuning); ``null_score_diff`` = ``inf`` when no valid span exists. With ``keep_nbest > 0`` an
    ``nbest`` list of ``{"text", "start", "end", "score"}`` is added.

    ``answerable_logits`` (``(n_windows,)``, from the optional answerable head, see :mod:`models.qa.heads`) adds
    ``null_score_diffs = {"cls", "head", "combined"}`` and ``null_rule`` picks which one decides.
    """
    if null_rule not in NULL_RULES:
        raise ValueError(f"null_rule must be one of {NULL_RULES}")
    if null_rule != "cls" and answerable_logits is None:
        raise ValueError(f"null_rule={null_rule!r} needs answerable_logits")
    start_logits = np.asarray(start_logits, dtype=np.float64)
    end_logits = np.asarray(end_logits, dtype=np.float64)
    if start_logits.ndim == 1:
        start_logits, end_logits = start_logits[None], end_logits[None]
    n_win = start_logits.shape[0]
    if n_win != len(offsets) or n_win != len(sequence_ids) or end_logits.shape[0] != n_win:
        raise ValueError(f"{n_win} windows of logits but {len(offsets)} offsets / {len(sequence_ids)} sequence_ids")
    null_score = float(min(start_logits[w, 0] + end_logits[w, 0] for w in range(n_win)))
    best: dict[tuple[int, int], float] = {}
    for w in range(n_win):
        for score, cs, ce in _window_candidates(start_logits[w], end_logits[w], offsets[w], sequence_ids[w], n_best,
                                                max_answer_length):
            if score > best.get((cs, ce), -math.inf):
                best[(cs, ce)] = score
    ranked = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))
    out: dict = {"null_score": null_score}
    if ranked:
        (cs, ce), score = ranked[0]
        diff = null_score - score
        out.update(span_answer=context[cs:ce], span_start=cs, span_end=ce, score=score, null_score_diff=diff)
    else:
        out.update(span_answer="", span_start=None, span_end=None, score=None, null_score_diff=NO_SPAN)
    if answerable_logits is not None:
        ans = float(np.max(np.asarray(answerable_logits, dtype=np.float64)))
        cls_diff = out["null_score_diff"]
        out["answerable_score"] = ans
        out["null_score_diffs"] = {"cls": cls_diff, "head": -ans if ranked else NO_SPAN,
                                   "combined": cls_diff - ans if ranked else NO_SPAN}
        out["null_score_diff"] = out["null_score_diffs"][null_rule]
    has = bool(ranked) and not (out["null_score_diff"] > null_threshold)
    out["has_answer"] = has
    out["answer"] = out["span_answer"] if has else ""
    out["start"] = out["span_start"] if has else None
    out["end"] = out["span_end"] if has else None
    if keep_nbest:
        out["nbest"] = [{"text": context[a:b], "start": a, "end": b, "score": s} for (a, b), s in ranked[:keep_nbest]]
    return out


def postprocess_predictions(contexts: Sequence[str], example_index: np.ndarray, start_logits: np.ndarray,
                            end_logits: np.ndarray, encodings: Sequence, *, n_best: int = 20,
                            max_answer_length: int = 30, null_threshold: float = 0.0,
                            answerable_logits: np.ndarray | None = None, null_rule: str = "cls") -> list[dict]:
    """Answer many questions. ``start_logits``/``end_logits``: ``(n_windows, seq)`` for all windows (any
    order); ``example_index[w]`` = question of window ``w``; ``encodings[w]`` has ``.offsets`` and
    ``.sequence_ids``. Returns one result per question in ``contexts`` order."""
    groups: list[list[int]] = [[] for _ in contexts]
    for w, i in enumerate(np.asarray(example_index).tolist()):
        groups[i].append(w)
    results = []
    for i, ws in enumerate(groups):
        if not ws:
            results.append({"answer": "", "start": None, "end": None, "score": None, "has_answer": False,
                            "null_score": None, "null_score_diff": NO_SPAN, "span_answer": "",
                            "span_start": None, "span_end": None})
            continue
        results.append(postprocess_question(
            start_logits[ws], end_logits[ws], [encodings[w].offsets for w in ws],
            [encodings[w].sequence_ids for w in ws], contexts[i], n_best=n_best,
            max_answer_length=max_answer_length, null_threshold=null_threshold,
            answerable_logits=None if answerable_logits is None else answerable_logits[ws], null_rule=null_rule))
    return results


def apply_threshold(results: Sequence[dict], null_threshold: float, null_rule: str | None = None) -> list[dict]:
    """Re-decide every result with another threshold (and, with ``null_rule``, another null rule; needs
    results made with ``answerable_logits``) — no model call needed."""
    out = []
    for r in results:
        r = dict(r)
        if null_rule is not None and "null_score_diffs" in r:
            r["null_score_diff"] = r["null_score_diffs"][null_rule]
        elif null_rule not in (None, "cls"):
            raise ValueError(f"null_rule={null_rule!r} needs results made with answerable_logits")
        has = r.get("span_start") is not None and not (r["null_score_diff"] > null_threshold)
        r["has_answer"] = has
        r["answer"] = r["span_answer"] if has else ""
        r["start"] = r["span_start"] if has else None
        r["end"] = r["span_end"] if has else None
        out.append(r)
    return out
