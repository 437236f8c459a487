"""The routing decision rule of a classifier bundle — numpy only, the single implementation that the PyTorch
evaluation, the ONNX runtime (``serve/``) and the demo all call.

The rule's parameters live in the bundle's ``task.json`` (written by ``denki finetune classify``)::

    {"labels": [...], "temperature": T, "threshold": t, "offsets": [b_0, ..., b_{K-1}], "human_label": "human", ...}

For one example with logits ``z`` (shape ``(K,)``):

1. ``label = argmax(z + offsets)``   — per-class offsets (0 for most classes) protect must-not-miss classes;
2. ``scores = softmax(z / T)``       — temperature-scaled (calibrated) probabilities, *without* the offsets;
3. ``score = scores[label]``;
4. ``route = human_label if score < threshold else label`` — abstain (send to a person) when unsure;
5. with a ``scope`` entry, also ``route = human_label`` when the text fits no desk (:mod:`.scope`: the router's TF-IDF
   model's top probability under the scope threshold) — this needs the lexical model's logits beside ``z``.

Ties in step 1 go to the lower class index (``numpy.argmax``). A missing key means "no effect": temperature 1,
threshold 0 (never abstain), offsets 0.
"""
from __future__ import annotations

import numpy as np

from denki.models.classify.softmax import softmax

HUMAN = "human"


def out_of_scope(task: dict, lexical_logits, n: int) -> np.ndarray:
    """``(n,)`` bool: the bundle's scope rule (:func:`models.classify.scope.out_of_scope`)."""
    if not task.get("scope"):
        return np.zeros(n, dtype=bool)
    from denki.models.classify.scope import out_of_scope as rule

    return rule(task, lexical_logits, n)


def rule_params(task: dict, n_labels: int) -> tuple[float, float, np.ndarray]:
    """``(temperature, threshold, offsets)`` from ``task`` with the documented defaults; validates shapes."""
    temperature = float(task.get("temperature", 1.0) or 1.0)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    threshold = float(task.get("threshold", 0.0) or 0.0)
    offsets = np.asarray(task.get("offsets") or [0.0] * n_labels, dtype=np.float64)
    if offsets.shape != (n_labels,):
        raise ValueError(f"task has {offsets.shape[0]} offsets for {n_labels} logits")
    return temperature, threshold, offsets


def _decide(logits: np.ndarray, task: dict, lexical_logits: np.ndarray | None):
    """``(label_idx, score, probs, unsure, out_of_scope)``: the rule's parts, each reason for a human apart."""
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 2:
        raise ValueError(f"logits must be (batch, n_labels), got shape {z.shape}")
    temperature, threshold, offsets = rule_params(task, z.shape[1])
    idx = np.argmax(z + offsets[None, :], axis=1)
    probs = softmax(z / temperature, axis=1)
    score = probs[np.arange(len(idx)), idx]
    return idx, score, probs, score < threshold, out_of_scope(task, lexical_logits, len(idx))


def decide(logits: np.ndarray, task: dict, lexical_logits: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised rule. ``logits``: ``(batch, K)``; ``lexical_logits`` ``(batch, K)``: the TF-IDF model's, needed
    when ``task`` has a ``scope`` rule. Returns ``(label_idx (batch,), score (batch,), probs (batch, K),
    abstain (batch,) bool)`` — ``abstain`` covers both reasons (:func:`route` tells them apart)."""
    idx, score, probs, unsure, oos = _decide(logits, task, lexical_logits)
    return idx, score, probs, unsure | oos


def route(logits: np.ndarray, task: dict, lexical_logits: np.ndarray | None = None) -> list[dict]:
    """Apply the bundle's rule to ``logits`` ``(batch, n_labels)`` (and, for a ``scope`` rule, the lexical model's
    ``(batch, n_labels)``) → one dict per example: ``{"label": best department, "score": its calibrated
    probability, "scores": {label: prob}, "route": label or "human", "reason": None, "unsure" or
    "out_of_scope"}``."""
    labels = list(task["labels"])
    human = task.get("human_label", HUMAN)
    idx, score, probs, unsure, oos = _decide(logits, task, lexical_logits)
    # why a text goes to a human: out of scope (fits no desk) wins over unsure (below the threshold)
    why = ["out_of_scope" if o else "unsure" if u else None for o, u in zip(oos, unsure)]
    if probs.shape[1] != len(labels):
        raise ValueError(f"logits have {probs.shape[1]} columns, task has {len(labels)} labels")
    out = []
    for i in range(len(idx)):
        lab = labels[int(idx[i])]
        out.append({"label": lab, "score": float(score[i]),
                    "scores": {labels[k]: float(probs[i, k]) for k in range(len(labels))},
                    "route": lab if why[i] is None else human, "reason": why[i]})
    return out
