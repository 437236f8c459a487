"""What every task's parity check (:meth:`models.task.base.Task.parity`) shares: run PyTorch and each ONNX file
on the same padded batches. The export (:mod:`models.export.onnx`) judges the figures against its tolerances.

ONNX files are opened by :func:`models.bundle.onnx.open_session`, as the serving runtime opens them; torch is
imported inside :func:`run_torch`."""
from __future__ import annotations

from pathlib import Path

import numpy as np


NOT_RUN = {"ran": False, "note": "the CPU execution provider cannot run this graph; checked on CUDA only"}


def batches(tok, encs, batch_size=32):
    """``(start, padded int64 arrays)`` for consecutive slices of ``batch_size`` encodings."""
    for s in range(0, len(encs), batch_size):
        yield s, tok.pad(encs[s:s + batch_size])


def run_torch(model, batch) -> list[np.ndarray]:
    """The PyTorch model's outputs on one padded batch, in the ONNX graph's output order: ``[logits (b, K)]``
    for a sequence classifier, ``[start (b, L), end (b, L), answerable (b,)?]`` for QA."""
    import torch

    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in batch.items()})
    if hasattr(out, "logits"):
        return [out.logits.float().numpy()]
    extra = [out.answerable_logits.float().numpy()] if getattr(out, "answerable_logits", None) is not None else []
    return [out.start_logits.float().numpy(), out.end_logits.float().numpy(), *extra]


def session_outputs(path: Path, batch: dict, cache: dict) -> list[np.ndarray] | None:
    """Run an ONNX file on CPU (sessions cached); ``None`` if the CPU provider cannot run it (fp16 kernels)."""
    from denki.models.bundle.onnx import open_session

    if path not in cache:
        try:
            cache[path] = open_session(path, "cpu", None)[0]
        except Exception as e:  # pragma: no cover - depends on the ORT build
            cache[path] = e
    sess = cache[path]
    if isinstance(sess, Exception):
        return None
    names = [i.name for i in sess.get_inputs()]
    try:
        return [np.asarray(o, dtype=np.float32) for o in sess.run(None, {k: batch[k] for k in names})]
    except Exception as e:  # pragma: no cover
        cache[path] = e
        return None
