"""Running a QA model on windows with PyTorch: batched start/end (and answerable) logits, then the numpy
post-processing (:mod:`models.qa.postprocess`, shared with the ONNX runtime) to one answer or no answer per question.

Torch is imported inside the functions: importing this module stays cheap.
"""
from __future__ import annotations

import numpy as np

from denki.models.qa.features import QAFeatures
from denki.models.qa.postprocess import postprocess_predictions


def predict_logits(model, features: QAFeatures, tokenizer, *, batch_size: int = 64, device=None,
                   progress: bool = False, desc: str = "qa: predict"):
    """Start/end logits for every window → ``(start, end, answerable)``: two float32 arrays
    ``(n_windows, max_window_len)`` and, for a model with the answerable head, ``(n_windows,)`` (else ``None``).

    Windows are batched by length (less padding); positions past a window's length are left at 0 and never
    read by post-processing.
    """
    import torch
    from tqdm.auto import tqdm

    n = len(features)
    width = max((len(e) for e in features.encodings), default=1)
    starts = np.zeros((n, width), dtype=np.float32)
    ends = np.zeros((n, width), dtype=np.float32)
    answerable = None
    order = sorted(range(n), key=lambda w: len(features.encodings[w]))
    model.eval()
    dev = device or next(model.parameters()).device
    with torch.inference_mode():
        for b in tqdm(range(0, n, batch_size), desc=desc, unit=" batch", disable=not progress, mininterval=1.0):
            idx = order[b:b + batch_size]
            batch = tokenizer.pad([features.encodings[w] for w in idx])
            out = model(**{k: torch.from_numpy(v).to(dev) for k, v in batch.items()})
            s = out.start_logits.float().cpu().numpy()
            e = out.end_logits.float().cpu().numpy()
            a = getattr(out, "answerable_logits", None)
            if a is not None:
                if answerable is None:
                    answerable = np.zeros(n, dtype=np.float32)
                answerable[idx] = a.float().cpu().numpy()
            for r, w in enumerate(idx):
                L = len(features.encodings[w])
                starts[w, :L] = s[r, :L]
                ends[w, :L] = e[r, :L]
    return starts, ends, answerable


def predict_results(model, features: QAFeatures, tokenizer, *, n_best: int, max_answer_length: int,
                    null_threshold: float, null_rule: str = "cls", batch_size: int = 64, progress: bool = False,
                    desc: str = "qa: predict") -> dict[str, dict]:
    """``{qid: postprocess result}`` for every example of ``features``."""
    s, e, a = predict_logits(model, features, tokenizer, batch_size=batch_size, progress=progress, desc=desc)
    res = postprocess_predictions([ex.context for ex in features.examples], features.example_index, s, e,
                                  features.encodings, n_best=n_best, max_answer_length=max_answer_length,
                                  null_threshold=null_threshold, answerable_logits=a, null_rule=null_rule)
    return {ex.id: r for ex, r in zip(features.examples, res)}
