"""Scoring ONNX bundles on labelled files (torch-free): `denki evaluate classify|qa` on an ONNX bundle and the
quickstart use these; the metrics are the same numpy functions the PyTorch evaluation uses."""
from __future__ import annotations

import time

import numpy as np

from denki.serve.runtime import Predictor


def onnx_logits_fn(bundle_dir, *, backend: str = "auto", device: str = "auto", batch_size: int = 64):
    """``texts → logits (n, n_labels)`` with an ONNX classifier bundle (for :func:`models.classify.evaluate`)."""
    p = Predictor(bundle_dir, backend=backend, device=device)

    def fn(texts):
        return p.logits(list(texts), batch_size=batch_size)

    fn.predictor = p  # type: ignore[attr-defined]
    return fn


def evaluate_onnx_qa(bundle_dir, data_path, *, backend: str = "auto", device: str = "auto",
                     limit: int | None = None) -> tuple[dict, dict]:
    """SQuAD-v2 metrics of an ONNX QA bundle on a file → ``(metrics, {id: result})``."""
    from denki.models.qa.data import read_qa
    from denki.models.qa.metrics import squad_v2_metrics
    from denki.models.qa.postprocess import apply_threshold
    from denki.models.qa.selective import selective_report

    p = Predictor(bundle_dir, backend=backend, device=device)
    data = read_qa(data_path, limit=limit)
    t0 = time.perf_counter()
    results = {}
    exs = data.examples
    for s in range(0, len(exs), 16):
        chunk = exs[s:s + 16]
        for ex, r in zip(chunk, p.answer_batch([(e.question, e.context) for e in chunk])):
            results[ex.id] = r
    # the SQuAD figures score the reader's own answers: an abstention ("unsure") is undone from its null score
    # difference, which the result keeps; the selective table then says what abstaining buys
    thr = float(p.task.get("null_threshold", 0.0))
    raw = dict(zip(results, apply_threshold(list(results.values()), thr)))
    golds = {e.id: e.answer_texts for e in exs}
    metrics = squad_v2_metrics(golds, raw)
    metrics["selective"] = selective_report(raw, golds, p.task)
    metrics.update(null_threshold=float(p.task.get("null_threshold", 0.0)), backend=p.backend,
                   seconds=time.perf_counter() - t0, model=str(p.dir), data=str(data_path))
    metrics = {k: (float(v) if isinstance(v, (np.floating,)) else v) for k, v in metrics.items()}
    return metrics, results
