"""Selective prediction, shared by every task (numpy only): answer only where a confidence score clears a
threshold. :func:`coverage_curve` says what each threshold keeps and how often the kept part is right;
:func:`choose_threshold` picks the threshold for a target precision (or coverage) on dev. The router abstains to a
human with it (:mod:`models.classify.routing_rule`), the reader says "unsure" (:mod:`models.qa.selective`)."""
from __future__ import annotations

import numpy as np


def coverage_curve(score: np.ndarray, correct: np.ndarray) -> dict:
    """Selective prediction: keep the ``k`` most confident examples for ``k = 1..n``.

    Returns arrays (lists) ``coverage`` (k/n), ``accuracy`` (accuracy of the kept ones) and ``threshold`` (the
    k-th highest score: keeping ``score >= threshold``; ties make the kept set a little larger than ``k``)."""
    score = np.asarray(score, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    order = np.argsort(-score, kind="stable")
    cum = np.cumsum(correct[order])
    k = np.arange(1, len(score) + 1)
    return {"coverage": (k / len(score)).tolist(), "accuracy": (cum / k).tolist(),
            "threshold": score[order].tolist()}


def choose_threshold(score: np.ndarray, correct: np.ndarray, *, target_precision: float | None = None,
                     target_coverage: float | None = None) -> dict:
    """Abstention threshold ``t`` (keep examples with ``score >= t``) chosen on dev.

    With ``target_precision``: the lowest threshold (largest coverage) whose kept part has accuracy ≥ target;
    if no threshold reaches it, the one with the best kept accuracy (``reached: false``). With
    ``target_coverage``: the highest threshold that still keeps at least that fraction. With neither: 0 (never
    abstain). Returns ``{threshold, coverage, precision, reached, mode, target}`` (dev figures)."""
    score = np.asarray(score, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    n = len(score)
    if target_precision is None and target_coverage is None or n == 0:
        return {"mode": "none", "target": None, "threshold": 0.0, "coverage": 1.0,
                "precision": float(correct.mean()) if n else 0.0, "reached": True}
    order = np.argsort(-score, kind="stable")
    s = score[order]
    cum = np.cumsum(correct[order])
    # candidate cut points: the last index of every run of equal scores (a threshold keeps a whole tie group)
    last = np.flatnonzero(np.r_[s[1:] != s[:-1], True])
    kept = last + 1
    prec = cum[last] / kept
    cov = kept / n
    if target_precision is not None:
        ok = np.flatnonzero(prec >= target_precision - 1e-12)
        if len(ok):
            j, reached = int(ok[-1]), True
        else:
            best = prec.max()
            j, reached = int(np.flatnonzero(prec >= best - 1e-12)[-1]), False
        mode, target = "precision", float(target_precision)
    else:
        ok = np.flatnonzero(cov >= target_coverage - 1e-12)
        j, reached = int(ok[0]), True
        mode, target = "coverage", float(target_coverage)
    return {"mode": mode, "target": target, "threshold": float(s[last[j]]), "coverage": float(cov[j]),
            "precision": float(prec[j]), "reached": reached}
