"""Fusing the fine-tuned encoder with the lexical (TF-IDF) model — numpy only, one implementation for fine-tuning,
PyTorch evaluation and the ONNX runtime.

The fused router's logits (what the routing rule of :mod:`models.classify.decision` then calibrates, offsets and
thresholds, exactly as it does an encoder's logits)::

    prob       z = log( w · softmax(z_enc) + (1 − w) · softmax(z_lex) )        (weighted probabilities)
    loglinear  z = w · log_softmax(z_enc) + (1 − w) · log_softmax(z_lex)         (weighted log-probabilities)

``w`` (the encoder's weight) and the mode are chosen on dev over a grid, by the NLL of the fused probabilities
(:data:`CRITERION`: smoother than macro-F1, and it scored better cross-fitted); ``w = 1`` is the encoder alone,
``w = 0`` the TF-IDF model alone. So that the figure that decides whether fusion ships is not measured on the rows
that tuned it, :func:`choose_fusion` also cross-fits: dev is cut into stratified folds, each fold is predicted with
the setting chosen on the other folds, and the macro-F1 of those predictions is the fused router's dev estimate.

``task.json`` of a fused bundle::

    "fusion": {"mode": "prob", "weight": 0.3, "lexical": "lexical.safetensors", ...}
"""
from __future__ import annotations

import numpy as np

from denki.models.classify.decision import softmax
from denki.models.classify.metrics import classification_metrics, nll

MODES = ("prob", "loglinear")
WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))  # the encoder's weight; 0 = TF-IDF alone, 1 = encoder alone
FOLDS = 5
CRITERIA = ("macro_f1", "nll", "accuracy")  # what the grid search maximises
#: measured (docs/classify.md, fusion): mean cross-fitted macro-F1 over three routers 0.8306 choosing by
#: NLL vs 0.8253 by macro-F1 itself (jumpy on a dev fold) and 0.8286 by accuracy
CRITERION = "nll"
_TINY = 1e-12  # floor of a fused probability before the log: an impossible class stays finite


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def fuse(enc_logits: np.ndarray, lex_logits: np.ndarray, mode: str, weight: float) -> np.ndarray:
    """Fused logits ``(n, K)`` float64 from the encoder's and the lexical model's logits (both ``(n, K)``)."""
    if mode == "prob":
        p = weight * softmax(enc_logits, axis=1) + (1.0 - weight) * softmax(lex_logits, axis=1)
        return np.log(np.maximum(p, _TINY))
    if mode == "loglinear":
        return weight * log_softmax(enc_logits) + (1.0 - weight) * log_softmax(lex_logits)
    raise ValueError(f"unknown fusion mode {mode!r}; expected one of {MODES}")


def fused_logits(task: dict, enc_logits: np.ndarray, lex_logits: np.ndarray | None) -> np.ndarray:
    """The logits the routing rule sees: fused when ``task`` has a ``fusion`` entry, else the encoder's."""
    f = task.get("fusion")
    if not f:
        return np.asarray(enc_logits)
    if lex_logits is None:
        raise ValueError("task.json asks for fusion but no lexical logits were given")
    return fuse(enc_logits, lex_logits, f["mode"], float(f["weight"]))


def _macro_f1(gold: np.ndarray, logits: np.ndarray, labels: list[str]) -> float:
    return float(classification_metrics(gold, np.argmax(logits, axis=1), labels)["macro_f1"])


def _score(criterion: str, gold: np.ndarray, logits: np.ndarray, labels: list[str]) -> float:
    """Higher is better: macro-F1, accuracy, or minus the NLL of ``softmax(logits)``."""
    if criterion == "macro_f1":
        return _macro_f1(gold, logits, labels)
    if criterion == "accuracy":
        return float((np.argmax(logits, axis=1) == gold).mean())
    if criterion == "nll":
        return -float(nll(softmax(logits, axis=1), gold))
    raise ValueError(f"unknown fusion criterion {criterion!r}; expected one of {CRITERIA}")


def _best(enc: np.ndarray, lex: np.ndarray, gold: np.ndarray, labels: list[str],
          criterion: str = "macro_f1") -> tuple[str, float, float]:
    """``(mode, weight, score)`` of the grid's best setting on these rows by ``criterion``. Ties go to the larger
    encoder weight (then prob before loglinear): among equals, the setting nearer the encoder alone."""
    best = None
    for w in sorted(WEIGHTS, reverse=True):
        for mode in MODES:
            score = _score(criterion, gold, fuse(enc, lex, mode, w), labels)
            if best is None or score > best[2] + 1e-12:
                best = (mode, w, score)
    return best


def stratified_folds(gold: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Fold number ``(n,)`` of each row: every class dealt round-robin over the folds after a seeded shuffle."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(gold), dtype=np.int64)
    start = 0
    for c in np.unique(gold):
        rows = rng.permutation(np.flatnonzero(gold == c))
        fold[rows] = (start + np.arange(len(rows))) % k
        start += len(rows)  # so small classes do not all land in fold 0
    return fold


def choose_fusion(enc_logits: np.ndarray, lex_logits: np.ndarray, gold: np.ndarray, labels: list[str], *,
                  folds: int = FOLDS, seed: int = 0, criterion: str = CRITERION) -> dict:
    """Choose the fusion on dev and estimate it honestly.

    Returns ``{"mode", "weight"}`` chosen on all of dev (what ships), ``"dev_macro_f1"`` (that setting on all of
    dev: optimistic), ``"crossfit"`` (macro-F1 / accuracy of the out-of-fold predictions and each fold's setting),
    ``"encoder_macro_f1"`` and ``"lexical_macro_f1"`` (each alone on all of dev; nothing tuned)."""
    enc = np.asarray(enc_logits, dtype=np.float64)
    lex = np.asarray(lex_logits, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.int64)
    mode, weight, _ = _best(enc, lex, gold, labels, criterion)
    f1 = _macro_f1(gold, fuse(enc, lex, mode, weight), labels)
    k = max(2, min(folds, int(np.bincount(gold).max())))
    fold = stratified_folds(gold, k, seed)
    pred = np.empty(len(gold), dtype=np.int64)
    per_fold = []
    for i in range(k):
        held, fit = fold == i, fold != i
        if not held.any():
            continue
        m, w, _ = _best(enc[fit], lex[fit], gold[fit], labels, criterion)
        pred[held] = np.argmax(fuse(enc[held], lex[held], m, w), axis=1)
        per_fold.append({"mode": m, "weight": w, "n": int(held.sum())})
    cf = classification_metrics(gold, pred, labels)
    return {"mode": mode, "weight": weight, "dev_macro_f1": f1,
            "crossfit": {"folds": k, "seed": seed, "macro_f1": float(cf["macro_f1"]),
                         "accuracy": float(cf["accuracy"]), "per_fold": per_fold},
            "encoder_macro_f1": _macro_f1(gold, enc, labels), "lexical_macro_f1": _macro_f1(gold, lex, labels),
            "grid": {"modes": list(MODES), "weights": list(WEIGHTS), "criterion": criterion}}
