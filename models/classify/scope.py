"""Out of scope → a human: the router's check that a text fits any desk at all — numpy only, applied by the
routing rule (:mod:`models.classify.decision`) wherever a bundle routes: PyTorch evaluation, the ONNX runtime, the
batch CLI, HTTP, Ray and the demo.

A router answers "which desk?", never "is this for us?": its softmax sums to one over the desks, so
「ログインできません」 goes to 宿泊 at 0.9994. The in-scope score is the top probability of the router's TF-IDF
logistic regression (the lexical model every ``denki finetune classify`` fits, :mod:`.lexical`): a text that shares
no desk's words gets a flat distribution over the desks, whatever the encoder says. Measured against eight other
scores (docs/classify.md, out of scope): it sent the most out-of-scope texts to a human — news titles and encyclopedia
questions, and a left-out desk's inquiries — at the same in-scope coverage.

The threshold is chosen on the dev rows alone, which are in scope by construction: the ``1 − keep`` quantile of
their scores, so that a share ``keep`` of in-scope inquiries like them stays routed. No out-of-scope text is needed.

``task.json``::

    "scope": {"score": "tfidf-msp", "threshold": 0.55, "keep": 0.95, "dev_kept": 0.953, "n_dev": 300}
"""
from __future__ import annotations

import numpy as np

from denki.models.classify.softmax import softmax

#: the score kinds a bundle may name (only one today; the name keeps the file readable when another is added)
SCORES = ("tfidf-msp",)
#: the in-scope share of dev kept routed by default: measured (docs/classify.md, out of scope), with the router's own
#: abstention on top it still leaves ≥ 90 % of held-out in-scope inquiries routed
DEFAULT_KEEP = 0.95


def scope_scores(task: dict, lexical_logits: np.ndarray) -> np.ndarray:
    """In-scope scores ``(n,)`` (higher = more in scope) from the lexical model's logits ``(n, K)``."""
    kind = task["scope"].get("score", "tfidf-msp")
    if kind not in SCORES:
        raise ValueError(f"task.json scope score {kind!r} is not one this denki knows ({', '.join(SCORES)}); "
                         "upgrade denki or re-fit the router")
    z = np.asarray(lexical_logits, dtype=np.float64)
    if z.ndim != 2:
        raise ValueError(f"lexical logits must be (batch, n_labels), got shape {z.shape}")
    return softmax(z, axis=1).max(axis=1)  # the top softmax probability


def out_of_scope(task: dict, lexical_logits: np.ndarray | None, n: int) -> np.ndarray:
    """``(n,)`` bool: the texts the bundle's scope rule sends to a human (all False without a rule)."""
    if not task.get("scope"):
        return np.zeros(n, dtype=bool)
    if lexical_logits is None:
        raise ValueError("task.json has an out-of-scope rule (scope): the lexical model's logits are needed")
    scores = scope_scores(task, lexical_logits)
    if scores.shape != (n,):
        raise ValueError(f"{scores.shape[0]} lexical rows for {n} texts")
    return scores < float(task["scope"]["threshold"])


def fit_scope(task_stub: dict, dev_lexical_logits: np.ndarray, keep: float = DEFAULT_KEEP) -> dict:
    """The ``scope`` entry of task.json: the threshold that keeps ``keep`` of the dev rows (all in scope) routed."""
    if not 0 < keep < 1:
        raise ValueError(f"keep must be in (0, 1), got {keep}")
    entry = {"score": task_stub.get("score", "tfidf-msp")}
    scores = scope_scores({"scope": entry}, dev_lexical_logits)
    threshold = float(np.quantile(scores, 1.0 - keep))
    entry.update({"threshold": threshold, "keep": float(keep), "dev_kept": float((scores >= threshold).mean()),
                  "n_dev": int(len(scores))})
    return entry
