"""Fitting the routing rule's parameters on dev logits (numpy only): temperature scaling, per-class offsets for
must-not-miss classes, and the abstention threshold. The rule itself is :mod:`models.classify.decision`.

Order used by ``denki finetune classify`` (each step sees the previous steps' result):

1. temperature ``T`` minimising dev NLL of ``softmax(z / T)`` (Guo et al. 2017);
2. offsets ``b`` so each must-not-miss class reaches its recall floor with ``argmax(z + b)`` on dev (full
   coverage: a "human" route is not counted as a hit — a floor is met by the model's own decision);
3. threshold ``t`` on ``score = softmax(z / T)[argmax(z + b)]`` to reach the target precision (accuracy of the
   non-abstained part) with the largest coverage, or the target coverage.
"""
from __future__ import annotations

import math

import numpy as np

from denki.models.classify.decision import softmax
from denki.models.classify.metrics import classification_metrics, nll
from denki.models.task.selective import choose_threshold  # noqa: F401  (re-exported: the routing rule's step 3)

EPS = 1e-6


def nll_at(logits: np.ndarray, gold: np.ndarray, beta: float) -> float:
    """Mean NLL of ``softmax(beta · logits)`` on ``gold``, exact (log-sum-exp, no clipping): convex in ``beta``.

    ``logits`` (N, K), ``gold`` (N,). Clipping the gold probability (as :func:`metrics.nll` does for reports) made
    the loss flat at large ``beta`` — every mistake stuck at −log 1e-12 — and the search walked into that plateau."""
    z = beta * np.asarray(logits, dtype=np.float64)
    m = z.max(axis=1)
    lse = m + np.log(np.exp(z - m[:, None]).sum(axis=1))
    return float((lse - z[np.arange(len(gold)), gold]).mean())


def fit_temperature_report(logits: np.ndarray, gold: np.ndarray, *, lo: float = 0.05, hi: float = 20.0,
                           iters: int = 80) -> dict:
    """Temperature scaling (Guo et al. 2017) with what happened: ``{"temperature", "nll_before" (T = 1),
    "nll_after", "fallback"}``; ``fallback`` is None, or why T = 1 was kept / the optimum lies on the search's edge.

    NLL is convex in ``beta = 1/T`` (log-sum-exp of a linear function minus a linear term), so a golden-section
    search on ``beta`` in ``[1/hi, 1/lo]`` finds the optimum without torch."""
    z = np.asarray(logits, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.int64)
    before = nll_at(z, gold, 1.0)
    if len(gold) == 0 or not np.isfinite(z).all():
        return {"temperature": 1.0, "nll_before": before, "nll_after": before,
                "fallback": "no dev examples" if len(gold) == 0 else "non-finite logits: T = 1 kept"}
    a, b = 1.0 / hi, 1.0 / lo
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = nll_at(z, gold, c), nll_at(z, gold, d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = nll_at(z, gold, c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = nll_at(z, gold, d)
    beta = (a + b) / 2
    after = nll_at(z, gold, beta)
    fallback = None
    if after > before:  # cannot happen for a convex loss unless the numbers are degenerate; never scale worse
        return {"temperature": 1.0, "nll_before": before, "nll_after": before,
                "fallback": f"the search ended worse than T = 1 (NLL {after:.4f} > {before:.4f}): T = 1 kept"}
    if beta <= 1.0 / hi * 1.001 or beta >= 1.0 / lo * 0.999:  # dev separable (T → 0) or uninformative (T → ∞)
        fallback = f"the optimum lies on the search's edge (T = {1 / beta:.3g} in [{lo:g}, {hi:g}])"
    return {"temperature": 1.0 / beta, "nll_before": before, "nll_after": after, "fallback": fallback}


def fit_temperature(logits: np.ndarray, gold: np.ndarray, *, lo: float = 0.05, hi: float = 20.0,
                    iters: int = 80) -> float:
    """The temperature in ``[lo, hi]`` minimising the NLL of ``softmax(logits / T)`` on ``gold``
    (:func:`fit_temperature_report` without the report)."""
    return fit_temperature_report(logits, gold, lo=lo, hi=hi, iters=iters)["temperature"]


def fit_min_recall_offsets(logits: np.ndarray, gold: np.ndarray, floors: dict[int, float], *,
                           max_rounds: int = 50) -> tuple[np.ndarray, dict[int, bool]]:
    """Smallest non-negative logit offsets so that each class ``c`` in ``floors`` reaches recall
    ``floors[c]`` under ``argmax(logits + offsets)`` on ``(logits, gold)``.

    Raising ``b_c`` only ever turns predictions *into* ``c``, so class ``c``'s recall is monotone in ``b_c``
    and the needed offset is an order statistic of the examples' margins. Raising one class can lower another
    protected class's recall, so the classes are revisited until nothing changes. Returns ``(offsets (K,),
    {class: floor reached})``."""
    z = np.asarray(logits, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.int64)
    k_labels = z.shape[1]
    b = np.zeros(k_labels)
    for _ in range(max_rounds):
        changed = False
        for c, floor in floors.items():
            m = gold == c
            n_c = int(m.sum())
            if n_c == 0 or floor <= 0:
                continue
            zc = z[m] + b[None, :]
            others = zc.copy()
            others[:, c] = -np.inf
            # b_c must exceed this margin for class c to win the argmax (ties go to the lower index; EPS avoids them)
            need = np.sort(others.max(axis=1) - z[m, c])
            k = min(n_c, max(1, math.ceil(floor * n_c - 1e-9)))
            want = max(0.0, float(need[k - 1]) + EPS)
            if want > b[c] + 1e-12:
                b[c] = want
                changed = True
        if not changed:
            break
    pred = np.argmax(z + b[None, :], axis=1)
    reached = {}
    for c, floor in floors.items():
        m = gold == c
        reached[c] = bool(m.sum() == 0 or (pred[m] == c).mean() >= floor - 1e-9)
    return b, reached


def offsets_cost(logits: np.ndarray, gold: np.ndarray, offsets: np.ndarray, labels: list[str]) -> dict:
    """What the offsets cost on dev at full coverage: metrics without and with them, and per-class deltas."""
    z = np.asarray(logits, dtype=np.float64)
    before = classification_metrics(gold, np.argmax(z, axis=1), labels)
    after = classification_metrics(gold, np.argmax(z + offsets[None, :], axis=1), labels)
    per = {lab: {k: after["per_class"][lab][k] - before["per_class"][lab][k] for k in ("precision", "recall", "f1")}
           for lab in labels}
    return {"accuracy_before": before["accuracy"], "accuracy_after": after["accuracy"],
            "macro_f1_before": before["macro_f1"], "macro_f1_after": after["macro_f1"],
            "per_class_delta": per,
            "per_class_before": before["per_class"], "per_class_after": after["per_class"]}
