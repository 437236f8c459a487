"""Scoring a ``qa`` bundle with PyTorch on a labelled file (``denki evaluate qa`` for a PyTorch bundle): the bundle's
own windowing, null rule and threshold (``task.json``), character-level SQuAD 2.0 metrics.

Torch is imported inside the functions.
"""
from __future__ import annotations

import random

from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json
from denki.models.qa.data import QAExample, read_qa
from denki.models.qa.features import build_features
from denki.models.qa.metrics import squad_v2_metrics
from denki.models.qa.predict import predict_results
from denki.models.qa.report import golds_of, jsonable
from denki.models.qa.selective import selective_report
from denki.models.qa.task import READER

# The stored null threshold sits in the middle of the gap between the two dev score differences around the best
# switch point, not on a dev question's own score (the official best_f1_thresh): decisions keep a margin, so the
# rounding differences of ONNX / another CPU / int8 do not flip them (docs/qa.md, "Null threshold").
THRESHOLD_AT = "midpoint"


def subsample(examples: list[QAExample], n: int | None, seed: int) -> list[QAExample]:
    """A seeded random subset of ``n`` examples in their original order (``None`` = all)."""
    if not n or n >= len(examples):
        return examples
    keep = sorted(random.Random(seed).sample(range(len(examples)), n))
    return [examples[i] for i in keep]


def predict_file(model: str, data: str, *, batch_size: int = 64, max_examples: int | None = None,
                 strict: bool = False, device: str = "auto", threads: int | None = None,
                 progress: bool = True) -> tuple:
    """Answer every question of a labelled file with a ``qa`` bundle's own windowing, null rule and threshold →
    ``(bundle_dir, task, data, features, {qid: result})``: the reader's answers, before any abstention."""
    import torch

    from denki.models.bundle.format import read_task, resolve_bundle, verify_bundle
    from denki.models.bundle.pytorch import load_model
    from denki.models.qa.heads import qa_model_class
    from denki.models.text.tokenizer import JapaneseTokenizer
    from denki.models.training.loop import pick_device

    if threads:
        torch.set_num_threads(threads)
    model = resolve_bundle(model)
    verify_bundle(model, kinds=("qa",))  # kind and checksums first: a clearer error than "no task.json"
    task = read_task(model)
    if task.get("task") != READER.command:
        raise DenkiError(f"{model}: task.json is missing or not a QA task")
    m = load_model(model, qa_model_class(model, task.get("answerable_head", False)), kinds=("qa",))
    m.to(pick_device(device))
    tok = JapaneseTokenizer.load(model)
    qd = read_qa(data, strict=strict)
    exs = subsample(qd.examples, max_examples, 0)
    feats = build_features(exs, tok, max_length=task["max_length"], doc_stride=task["doc_stride"],
                           progress=progress, desc="qa: windows")
    res = predict_results(m, feats, tok, n_best=task.get("n_best", 20), max_answer_length=task["max_answer_length"],
                          null_threshold=float(task["null_threshold"]), null_rule=task.get("null_rule", "cls"),
                          batch_size=batch_size, progress=progress)
    return model, task, qd, feats, res


def evaluate_qa(*, model: str, data: str, output_json: str | None = None, predictions: str | None = None,
                batch_size: int = 64, max_examples: int | None = None, strict: bool = False, device: str = "auto",
                threads: int | None = None, progress: bool = True) -> dict:
    """Score a ``qa`` bundle on a labelled file with the bundle's own threshold and windowing, plus the selective
    answering table where the bundle has a confidence calibration."""
    model, task, qd, feats, res = predict_file(model, data, batch_size=batch_size, max_examples=max_examples,
                                               strict=strict, device=device, threads=threads, progress=progress)
    golds = golds_of(feats.examples)
    metrics = squad_v2_metrics(golds, res, threshold_at=THRESHOLD_AT)
    metrics["selective"] = selective_report(res, golds, task)
    metrics["null_threshold"] = float(task["null_threshold"])
    metrics["null_rule"] = task.get("null_rule", "cls")
    out = {**metrics, "model": str(model), "data": str(data), "data_summary": qd.summary(),
           "max_examples": max_examples, "skipped": qd.skipped + feats.skipped}
    if output_json:
        atomic_write_json(output_json, jsonable(out))
    if predictions:
        atomic_write_json(predictions, {q: r["answer"] for q, r in res.items()})
    return jsonable(out)
