"""Scoring a classifier's logits on labelled data with the bundle's routing rule (numpy only, so the PyTorch
and the ONNX evaluation report exactly the same metrics)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from denki.models.bundle.format import resolve_bundle
from denki.models.classify.decision import HUMAN, decide, softmax
from denki.models.classify.metrics import classification_metrics, coverage_curve, ece, nll, reliability_bins
from denki.models.classify.task import ROUTER


def label_indices(labels: list[str], task_labels: list[str], path: str, lines: list[int],
                  field: str = "label") -> np.ndarray:
    """Map gold label strings to the bundle's label indices; an unknown label is an :class:`InputError`."""
    from denki.models.io.errors import InputError

    index = {lab: i for i, lab in enumerate(task_labels)}
    out = np.empty(len(labels), dtype=np.int64)
    for i, lab in enumerate(labels):
        if lab not in index:
            raise InputError(f"label {lab!r} is not one of the model's labels {task_labels}", path=path,
                             line=lines[i], field=field)
        out[i] = index[lab]
    return out


def evaluate_logits(logits: np.ndarray, gold: np.ndarray, task: dict, *, curves: bool = False,
                    lexical_logits: np.ndarray | None = None) -> dict:
    """Every metric of ``denki evaluate classify`` from ``logits (n, K)`` and gold indices ``(n,)``.

    * ``accuracy``, ``macro_f1``, ``per_class``, ``confusion_matrix``: the model's decision at full coverage
      (``argmax(logits + offsets)``; abstention ignored);
    * ``abstain_rate``, ``coverage``, ``accuracy_non_abstained`` (precision of the routed part), and per class
      ``routed_wrong`` (fraction of the class's examples sent to a wrong department, i.e. neither correct nor
      "human") — what the routing rule does;
    * ``ece`` / ``nll`` with the bundle's temperature, ``ece_uncalibrated`` / ``nll_uncalibrated`` with T = 1.
    * ``out_of_scope_rate``: with a ``scope`` rule, the share that rule alone sends to a human (these rows are
      labelled, so in scope: it is coverage given up; ``lexical_logits`` ``(n, K)`` are then needed).
    With ``curves`` also ``reliability`` bins and the ``coverage_curve`` (for plots)."""
    labels = list(task["labels"])
    z = np.asarray(logits, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.int64)
    idx, score, probs, abstain = decide(z, task, lexical_logits)
    out = classification_metrics(gold, idx, labels)
    if task.get("scope"):
        from denki.models.classify.scope import out_of_scope

        out["out_of_scope_rate"] = float(out_of_scope(task, lexical_logits, len(idx)).mean()) if len(idx) else 0.0
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


def misrouted_examples(texts: list[str], logits: np.ndarray, gold: np.ndarray, task: dict, *,
                       lexical_logits: np.ndarray | None = None, k: int = 8) -> list[dict]:
    """Up to ``k`` examples the model gets wrong at full coverage (``logits (n, K)``, gold indices ``(n,)``), the
    ones routed to a wrong department first, then those the rule sent to a human; most confident first within each
    (a confident mistake is the one a label fix or more data helps most). Each: ``{index, text, gold,
    predicted, confidence (the calibrated probability of the prediction), route (predicted or "human")}``."""
    labels = list(task["labels"])
    z = np.asarray(logits, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.int64)
    idx, score, _, abstain = decide(z, task, lexical_logits)
    wrong = np.flatnonzero(idx != gold)
    # routed wrong (not abstained) before abstained; within each, higher confidence first; ties by row
    order = sorted(wrong.tolist(), key=lambda i: (bool(abstain[i]), -float(score[i]), i))[:k]
    human = task.get("human_label", HUMAN)
    return [{"index": i, "text": texts[i], "gold": labels[int(gold[i])], "predicted": labels[int(idx[i])],
             "confidence": float(score[i]), "route": human if abstain[i] else labels[int(idx[i])]}
            for i in order]


def evaluate_bundle(model_dir: str | os.PathLike, data_path: str | os.PathLike, *, text_field: str | None = None,
                    label_field: str | None = None, logits_fn=None, device: str = "auto", batch_size: int = 128,
                    skip_empty: bool = False, progress: bool = True) -> dict:
    """``denki evaluate classify``: score a labelled file with the bundle's routing rule.

    ``logits_fn`` (``texts → logits (n, K)``) scores the texts; by default a PyTorch ``classifier`` bundle is
    loaded (torch imported only then). ONNX bundles need it passed in (``serve.evaluate.onnx_logits_fn``; the
    ``models`` layer does not import ``serve``)."""
    from denki.models.bundle.format import read_manifest, read_task
    from denki.models.io.errors import DenkiError
    from denki.models.io.records import read_labelled

    bundle_dir = resolve_bundle(model_dir)
    manifest = read_manifest(bundle_dir)
    kind = manifest.get("kind")
    if kind not in ROUTER.kinds:
        raise DenkiError(f"{bundle_dir}: bundle kind is {kind!r}; expected {' or '.join(map(repr, ROUTER.kinds))}")
    task = read_task(bundle_dir)
    if not task.get("labels"):
        raise DenkiError(f"{bundle_dir}: no task.json with labels; is this a classifier bundle?")
    text_field = text_field or task.get("text_field", "text")
    label_field = label_field or task.get("label_field", "label")
    data = read_labelled(data_path, text_field, label_field, skip_empty=skip_empty)
    gold = label_indices(data.labels, task["labels"], data.path, data.lines, label_field)
    if logits_fn is None:
        if kind != ROUTER.name:
            raise DenkiError(f"{bundle_dir}: an ONNX bundle is scored through the serve runtime; use "
                             "`denki evaluate classify` (or pass serve.evaluate.onnx_logits_fn)")
        from denki.models.classify.predict import torch_logits_fn

        logits_fn = torch_logits_fn(bundle_dir, device=device, batch_size=batch_size, progress=progress)
    t0 = time.perf_counter()
    logits = np.asarray(logits_fn(data.texts))
    lexical_logits = None
    if task.get("scope"):  # the out-of-scope rule reads the TF-IDF model's logits (numpy, in every router bundle)
        from denki.models.classify.lexical import LexicalModel

        lexical_logits = LexicalModel.load(bundle_dir).logits(data.texts)
    res = evaluate_logits(logits, gold, task, lexical_logits=lexical_logits)
    res["misrouted"] = misrouted_examples(data.texts, logits, gold, task, lexical_logits=lexical_logits)
    for m in res["misrouted"]:  # where to find (and fix) the row: its line in the data file
        m["line"] = data.lines[m["index"]]
    res.update({"model": str(bundle_dir), "kind": kind, "data": str(data_path), "text_field": text_field,
                "label_field": label_field, "skipped": len(data.skipped), "seconds": time.perf_counter() - t0})
    return res
