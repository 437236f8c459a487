"""Selective answering for the reader (numpy only; the ONNX runtime and the PyTorch evaluation share it).

Every answer — a span or 「回答なし」 — gets ``confidence``: a calibrated probability that it is right, where *right*
means character F1 ≥ :data:`RIGHT_F1` against a gold answer (a 「回答なし」 is right on an unanswerable question).
Two logistic regressions, fitted on dev by ``denki finetune qa`` and stored in ``task.json`` ``confidence``:

* a span answer: features ``[margin, score]`` — ``margin = null_threshold − null_score_diff`` (how far the span
  cleared the null decision) and ``score`` (start + end logit of the span);
* a 「回答なし」: feature ``[margin]`` — ``margin = null_score_diff − null_threshold`` (how far it missed it; no
  valid span at all counts as :data:`MARGIN_CAP`).

With ``--target-precision P`` fine-tuning also stores ``min_confidence``: the lowest confidence whose kept answers
were right ≥ P of the time on dev (:func:`models.task.selective.choose_threshold`). Below it the reader abstains:
``reason`` ``"unsure"``, no answer, the span it would have given still in ``span_answer``. Otherwise ``reason`` is
``"answer"`` or ``"no_answer"``. :func:`decide` is the one place that applies this, for every serving path.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from denki.models.qa.metrics import max_over_golds
from denki.models.task.selective import choose_threshold, coverage_curve

RIGHT_F1 = 0.5          # an answer counts as right at character F1 ≥ this (the definition)
MARGIN_CAP = 50.0       # |margin| beyond this (or infinite: no valid span) is clipped: the logistic fit stays finite
MAX_CONFIDENCE = 0.999  # confidences are clipped to [0.001, 0.999]
CONFIDENCE_FORMAT = 1
CURVE_POINTS = 201      # points of the coverage curves kept in reports and output JSON
COVERAGE_LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
REASONS = ("answer", "no_answer", "unsure")


# ------------------------------------------------------------------------------------------------ features
def _features(r: Mapping, null_threshold: float) -> tuple[str, np.ndarray]:
    """``("answer" | "no_answer", x)`` for one post-processed result (before any abstention)."""
    d = r["null_score_diff"]
    if r["has_answer"]:
        margin = float(np.clip(null_threshold - d, -MARGIN_CAP, MARGIN_CAP))
        return "answer", np.array([margin, float(r["score"])])
    margin = MARGIN_CAP if not math.isfinite(d) else float(np.clip(d - null_threshold, -MARGIN_CAP, MARGIN_CAP))
    return "no_answer", np.array([margin])


def is_right(r: Mapping, answers: Sequence[str]) -> bool:
    """The answer given (``""`` for 「回答なし」) has character F1 ≥ :data:`RIGHT_F1` against a gold answer (an
    unanswerable question's gold is ``""``)."""
    return max_over_golds(r["answer"], answers)[1] >= RIGHT_F1


def is_exact(r: Mapping, answers: Sequence[str]) -> bool:
    return bool(max_over_golds(r["answer"], answers)[0])


# ------------------------------------------------------------------------------------------------ calibration
def _fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, iters: int = 50) -> dict:
    """Logistic regression by Newton's method on standardised features → ``{mean, std, coef, intercept}``.
    ``x`` (n, d), ``y`` (n,) in {0, 1}. One class only, or fewer than 2 examples: a constant at the smoothed rate."""
    n, d = x.shape
    rate = (y.sum() + 1.0) / (n + 2.0)  # Laplace: never exactly 0 or 1
    if n < 2 or y.min() == y.max():
        return {"mean": [0.0] * d, "std": [1.0] * d, "coef": [0.0] * d, "intercept": float(np.log(rate / (1 - rate)))}
    mean, std = x.mean(axis=0), x.std(axis=0)
    std = np.where(std > 1e-9, std, 1.0)
    z = np.hstack([(x - mean) / std, np.ones((n, 1))])
    w = np.zeros(d + 1)
    w[-1] = np.log(rate / (1 - rate))
    reg = np.full(d + 1, l2)
    reg[-1] = 0.0  # the intercept is not shrunk
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        grad = z.T @ (p - y) / n + reg * w
        hess = (z * (p * (1 - p))[:, None]).T @ z / n + np.diag(reg)
        step = np.linalg.solve(hess + 1e-9 * np.eye(d + 1), grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return {"mean": mean.tolist(), "std": std.tolist(), "coef": w[:-1].tolist(), "intercept": float(w[-1])}


def fit_confidence(results: Mapping[str, dict], golds: Mapping[str, Sequence[str]], null_threshold: float,
                   *, fitted_on: str = "") -> dict:
    """Fit ``task.json`` ``confidence`` on dev results (made at ``null_threshold``; ``golds[qid]`` = gold texts,
    ``[]`` for unanswerable)."""
    rows: dict[str, tuple[list, list]] = {"answer": ([], []), "no_answer": ([], [])}
    for q, r in results.items():
        kind, x = _features(r, null_threshold)
        rows[kind][0].append(x)
        rows[kind][1].append(float(is_right(r, golds[q])))
    out = {"format": CONFIDENCE_FORMAT, "right_if": f"character F1 >= {RIGHT_F1} (「回答なし」 right iff unanswerable)",
           "features": {"answer": ["margin", "score"], "no_answer": ["margin"]}, "fitted_on": fitted_on}
    for kind, dim in (("answer", 2), ("no_answer", 1)):
        xs, ys = rows[kind]
        x = np.array(xs, dtype=np.float64).reshape(-1, dim)
        out[kind] = {**_fit_logistic(x, np.array(ys, dtype=np.float64)), "n": len(ys),
                     "right_rate": float(np.mean(ys)) if ys else None}
    return out


def confidence_of(r: Mapping, calibration: Mapping, null_threshold: float) -> float:
    """P(right) of one result under a fitted ``calibration`` (``task.json`` ``confidence``)."""
    kind, x = _features(r, null_threshold)
    m = calibration[kind]
    z = float(np.dot((x - np.asarray(m["mean"])) / np.asarray(m["std"]), np.asarray(m["coef"])) + m["intercept"])
    # never exactly 0 or 1: a fit on a few thousand dev questions cannot promise certainty (and a capped margin
    # far outside the dev range would otherwise round to it)
    return min(MAX_CONFIDENCE, max(1.0 - MAX_CONFIDENCE, 1.0 / (1.0 + math.exp(-max(-700.0, min(700.0, z))))))


# ------------------------------------------------------------------------------------------------ the decision
def decide(r: dict, task: Mapping) -> dict:
    """Add ``confidence`` (``None`` for a bundle fitted before confidences existed), ``reason`` and
    ``abstained`` to one post-processed result, and withhold the answer below ``task.json`` ``min_confidence``."""
    thr = float(task.get("null_threshold", 0.0))
    cal = task.get("confidence")
    conf = confidence_of(r, cal, thr) if cal else None
    out = {**r, "confidence": conf, "abstained": False, "reason": "answer" if r["has_answer"] else "no_answer"}
    floor = task.get("min_confidence")
    if floor is not None and conf is not None and conf < float(floor):
        out.update(abstained=True, reason="unsure", answer="", start=None, end=None, has_answer=False)
    return out


# ------------------------------------------------------------------------------------------------ reporting
def selective_report(results: Mapping[str, dict], golds: Mapping[str, Sequence[str]], task: Mapping) -> dict:
    """How often a given answer is right at each coverage (answers kept by falling confidence), on a labelled
    file: ``{"rows": [{coverage, min_confidence, right, exact, n}], "curve": …, "operating_point": …}``;
    ``results`` are made at the task's null threshold, before abstention. Empty without a fitted confidence."""
    cal = task.get("confidence")
    if not cal or not results:
        return {}
    thr = float(task.get("null_threshold", 0.0))
    qs = list(results)
    conf = np.array([confidence_of(results[q], cal, thr) for q in qs])
    right = np.array([is_right(results[q], golds[q]) for q in qs], dtype=np.float64)
    exact = np.array([is_exact(results[q], golds[q]) for q in qs], dtype=np.float64)
    order = np.argsort(-conf, kind="stable")
    rows = []
    for c in COVERAGE_LEVELS:
        k = max(1, math.ceil(c * len(qs) - 1e-9))
        kept = order[:k]
        rows.append({"coverage": c, "n": k, "min_confidence": float(conf[kept[-1]]),
                     "right": float(right[kept].mean()), "exact": float(exact[kept].mean())})
    out = {"right_if": cal.get("right_if"), "rows": rows, "curve": _thin(coverage_curve(conf, right)),
           "curve_exact": _thin(coverage_curve(conf, exact)), "mean_confidence": float(conf.mean()),
           "right_rate": float(right.mean())}
    floor = task.get("min_confidence")
    if floor is not None:
        keep = conf >= float(floor)
        out["operating_point"] = {"min_confidence": float(floor), "target_precision": task.get("target_precision"),
                                  "coverage": float(keep.mean()),
                                  "right": float(right[keep].mean()) if keep.any() else None,
                                  "exact": float(exact[keep].mean()) if keep.any() else None}
    return out


def _thin(curve: dict, points: int = CURVE_POINTS) -> dict:
    """At most ``points`` evenly spaced points of a coverage curve (the last kept): enough for the plot, small in
    a report or an output JSON."""
    n = len(curve["coverage"])
    if n <= points:
        return curve
    idx = sorted(set(np.linspace(0, n - 1, points).round().astype(int).tolist()))
    return {k: [v[i] for i in idx] for k, v in curve.items()}


def fit_min_confidence(results: Mapping[str, dict], golds: Mapping[str, Sequence[str]], calibration: Mapping,
                       null_threshold: float, target_precision: float) -> dict:
    """The lowest confidence whose kept answers are right ≥ ``target_precision`` of the time on dev →
    ``{threshold, coverage, precision, reached, …}`` (:func:`models.task.selective.choose_threshold`)."""
    qs = list(results)
    conf = np.array([confidence_of(results[q], calibration, null_threshold) for q in qs])
    right = np.array([is_right(results[q], golds[q]) for q in qs], dtype=np.float64)
    return choose_threshold(conf, right, target_precision=target_precision)


def format_rows(report: Mapping) -> list[str]:
    """The coverage table as Markdown lines (``denki evaluate qa`` prints them; report.md holds them)."""
    if not report:
        return []
    lines = ["| coverage | questions | min confidence | right (F1 ≥ 0.5) | exact match |", "|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        lines.append(f"| {r['coverage']:.0%} | {r['n']} | {r['min_confidence']:.3f} | {r['right']:.1%} | "
                     f"{r['exact']:.1%} |")
    op = report.get("operating_point")
    if op:
        right = "—" if op["right"] is None else f"{op['right']:.1%}"
        lines += ["", f"Operating point (task.json min_confidence {op['min_confidence']:.3f}, target precision "
                      f"{op['target_precision']}): answers {op['coverage']:.1%} of the questions, right {right} of "
                      "them; the rest get 「わかりません」 (reason \"unsure\")."]
    return lines
