"""Scoring a classifier's logits on labelled data with the bundle's routing rule (numpy only, so the PyTorch
and the ONNX evaluation report exactly the same metrics)."""
from __future__ import annotations

import numpy as np

from .decision import decide, softmax
from .metrics import classification_metrics, coverage_curve, ece, nll, reliability_bins


def label_indices(labels: list[str], task_labels: list[str], path: str, lines: list[int],
                  field: str = "label") -> np.ndarray:
    """Map gold label strings to the bundle's label indices; an unknown label is an :class:`InputError`."""
    from .errors import InputError

    index = {lab: i for i, lab in enumerate(task_labels)}
    out = np.empty(len(labels), dtype=np.int64)
    for i, lab in enumerate(labels):
        if lab not in index:
            raise InputError(f"label {lab!r} is not one of the model's labels {task_labels}", path=path,
                             line=lines[i], field=field)
        out[i] = index[lab]
    return out


def evaluate_logits(logits: np.ndarray, gold: np.ndarray, task: dict, *, curves: bool = False) -> dict:
    """Every metric of ``denki evaluate classify`` from ``logits (n, K)`` and gold indices ``(n,)``.

    * ``accuracy``, ``macro_f1``, ``per_class``, ``confusion_matrix``: the model's decision at full coverage
      (``argmax(logits + offsets)``; abstention ignored);
    * ``abstain_rate``, ``coverage``, ``accuracy_non_abstained`` (precision of the routed part), and per class
      ``routed_wrong`` (fraction of the class's examples sent to a wrong department, i.e. neither correct nor
      "human") — what the routing rule does;
    * ``ece`` / ``nll`` with the bundle's temperature, ``ece_uncalibrated`` / ``nll_uncalibrated`` with T = 1.
    With ``curves`` also ``reliability`` bins and the ``coverage_curve`` (for plots)."""
    labels = list(task["labels"])
    z = np.asarray(logits, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.int64)
    idx, score, probs, abstain = decide(z, task)
    out = classification_metrics(gold, idx, labels)
    correct = idx == gold
    kept = ~abstain
    out["abstain_rate"] = float(abstain.mean()) if len(gold) else 0.0
    out["coverage"] = 1.0 - out["abstain_rate"]
    out["accuracy_non_abstained"] = float(correct[kept].mean()) if kept.any() else None
    out["n_abstained"] = int(abstain.sum())
    for k, lab in enumerate(labels):
        m = gold == k
        out["per_class"][lab]["routed_wrong"] = float((m & kept & ~correct).sum() / m.sum()) if m.any() else 0.0
        out["per_class"][lab]["abstained"] = float((m & abstain).sum() / m.sum()) if m.any() else 0.0
    p1 = softmax(z, axis=1)
    score1 = p1[np.arange(len(idx)), idx]
    out["ece"] = ece(score, correct)
    out["ece_uncalibrated"] = ece(score1, correct)
    out["nll"] = nll(probs, gold)
    out["nll_uncalibrated"] = nll(p1, gold)
    out["temperature"] = float(task.get("temperature", 1.0) or 1.0)
    out["threshold"] = float(task.get("threshold", 0.0) or 0.0)
    if curves:
        out["reliability"] = reliability_bins(score, correct)
        out["reliability_uncalibrated"] = reliability_bins(score1, correct)
        out["coverage_curve"] = coverage_curve(score, correct)
    return out
