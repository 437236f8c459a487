"""Classification metrics (numpy only): accuracy, per-class precision/recall/F1, macro-F1, confusion matrix,
calibration (NLL, ECE, reliability bins) and the coverage–accuracy curve of a confidence score."""
from __future__ import annotations

import numpy as np

from denki.models.task.selective import coverage_curve  # noqa: F401  (re-exported)


def confusion_matrix(gold: np.ndarray, pred: np.ndarray, n_labels: int) -> np.ndarray:
    """``cm[i, j]`` = number of examples of gold class ``i`` predicted as ``j``; ``(K, K)`` int64."""
    cm = np.zeros((n_labels, n_labels), dtype=np.int64)
    np.add.at(cm, (np.asarray(gold, dtype=np.int64), np.asarray(pred, dtype=np.int64)), 1)
    return cm


def per_class_from_confusion(cm: np.ndarray, labels: list[str]) -> dict[str, dict]:
    """``{label: {precision, recall, f1, support}}``; 0 where undefined (no prediction / no support)."""
    out = {}
    tp = np.diag(cm).astype(np.float64)
    pred_n = cm.sum(axis=0).astype(np.float64)
    gold_n = cm.sum(axis=1).astype(np.float64)
    for k, lab in enumerate(labels):
        p = tp[k] / pred_n[k] if pred_n[k] else 0.0
        r = tp[k] / gold_n[k] if gold_n[k] else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        out[lab] = {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(gold_n[k])}
    return out


def classification_metrics(gold: np.ndarray, pred: np.ndarray, labels: list[str]) -> dict:
    """Accuracy, macro-F1 (over classes with support > 0), per-class metrics and the confusion matrix."""
    gold = np.asarray(gold)
    pred = np.asarray(pred)
    cm = confusion_matrix(gold, pred, len(labels))
    per = per_class_from_confusion(cm, labels)
    present = [lab for lab in labels if per[lab]["support"] > 0]
    macro = float(np.mean([per[lab]["f1"] for lab in present])) if present else 0.0
    return {"accuracy": float((gold == pred).mean()) if len(gold) else 0.0, "macro_f1": macro,
            "per_class": per, "confusion_matrix": cm.tolist(), "n": int(len(gold))}


def nll(probs: np.ndarray, gold: np.ndarray) -> float:
    """Mean negative log-likelihood of the gold class."""
    p = np.clip(probs[np.arange(len(gold)), gold], 1e-12, 1.0)
    return float(-np.log(p).mean())


def reliability_bins(confidence: np.ndarray, correct: np.ndarray, n_bins: int = 15) -> list[dict]:
    """Equal-width confidence bins on [0, 1]: ``{lo, hi, count, confidence, accuracy}`` per non-empty bin."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # bin i holds (edges[i], edges[i+1]]; confidence 0 goes to the first bin
    which = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, n_bins - 1)
    out = []
    for b in range(n_bins):
        m = which == b
        if m.any():
            out.append({"lo": float(edges[b]), "hi": float(edges[b + 1]), "count": int(m.sum()),
                        "confidence": float(confidence[m].mean()), "accuracy": float(correct[m].mean())})
    return out


def ece(confidence: np.ndarray, correct: np.ndarray, n_bins: int = 15) -> float:
    """Expected calibration error: count-weighted mean |accuracy − confidence| over equal-width bins."""
    n = len(confidence)
    if n == 0:
        return 0.0
    return float(sum(b["count"] / n * abs(b["accuracy"] - b["confidence"])
                     for b in reliability_bins(confidence, correct, n_bins)))
