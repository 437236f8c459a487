"""The router's half of the export's parity gate: its parity data, its check of each ONNX file against PyTorch
(logits, agreement, accuracy drop), the TF-IDF half's own gate and the golden tokenisation records."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from denki.models.task.parity import NOT_RUN, batches, run_torch, session_outputs
from denki.models.io.errors import DenkiError

LEXICAL_FILES = ("lexical.safetensors", "lexical_vocab.json")  # a router's TF-IDF model (fusion, scope; copied)
LEXICAL_ATOL = 1e-4  # probabilities; measured: 1.2e-7 on livedoor titles (float32 tf-idf in scikit-learn)


def max_length(task: dict) -> int:
    return int(task.get("max_length") or 128)


def load_parity(src: Path, parity_file: str | None, task: dict, limit: int) -> dict:
    """``{"texts", "labels"}``: from ``parity_file`` (labelled dev data) or the bundle's parity_sample.json."""
    if parity_file:
        from denki.models.io.records import read_labelled

        data = read_labelled(parity_file, task.get("text_field", "text"), task.get("label_field", "label"))
        return {"texts": list(data.texts)[:limit], "labels": list(data.labels)[:limit]}
    sample = read_parity_sample(src)
    return {"texts": sample["texts"][:limit], "labels": sample.get("labels", [])[:limit]}


def read_parity_sample(src: Path) -> dict:
    p = src / "parity_sample.json"
    if not p.is_file():
        raise DenkiError(f"{src}: no parity_sample.json in the bundle; pass --parity-data FILE (dev data)")
    return json.loads(p.read_text(encoding="utf-8"))


def encodings(tok, data: dict, task: dict, limit: int) -> list:
    """The first ``limit`` parity texts, tokenised as the runtime does."""
    return [tok.encode(t, max_length=max_length(task)) for t in data["texts"][:limit]]


def parity(model, tok, files: dict[str, Path], data: dict, task: dict) -> dict:
    """Each ONNX file's logits against PyTorch's on the parity texts: ``max_abs_diff``, ``agreement`` (argmax),
    and with labels ``accuracy`` and ``metric_drop`` (PyTorch's accuracy minus this file's)."""
    labels = task["labels"]
    encs = encodings(tok, data, task, len(data["texts"]))
    ref, outs, cache = [], {b: [] for b in files}, {}
    for _, batch in batches(tok, encs):
        ref.append(run_torch(model, batch)[0])
        for b, f in files.items():
            o = session_outputs(f, batch, cache)
            outs[b].append(None if o is None else o[0])
    ref_l = np.concatenate(ref)
    gold = None
    if data.get("labels"):
        index = {lab: i for i, lab in enumerate(labels)}
        gold = np.array([index.get(lab, -1) for lab in data["labels"]])
    res = {"n": len(encs), "torch_accuracy": None if gold is None else float((ref_l.argmax(1) == gold).mean())}
    for b, parts in outs.items():
        if any(p is None for p in parts):
            res[b] = dict(NOT_RUN)
            continue
        lg = np.concatenate(parts)
        r = {"ran": True, "max_abs_diff": float(np.abs(lg - ref_l).max()),
             "agreement": float((lg.argmax(1) == ref_l.argmax(1)).mean())}
        if gold is not None:
            r["accuracy"] = float((lg.argmax(1) == gold).mean())
            r["metric_drop"] = res["torch_accuracy"] - r["accuracy"]
        res[b] = r
    return res


def lexical_gate(src: Path) -> dict:
    """A fused router's lexical half: the bundle's numpy TF-IDF model must give the probabilities scikit-learn
    gave at fine-tuning (``parity_sample.json`` ``lexical_probs``) within :data:`LEXICAL_ATOL`."""
    from denki.models.classify.decision import softmax
    from denki.models.classify.lexical import LexicalModel

    sample = json.loads((src / "parity_sample.json").read_text(encoding="utf-8"))
    if "lexical_probs" not in sample:
        raise DenkiError(f"{src}: task.json asks for the TF-IDF model (fusion or scope) but parity_sample.json has "
                         "no lexical_probs "
                         "(fine-tune it again with this denki)")
    got = softmax(LexicalModel.load(src).logits(sample["texts"]), axis=1)
    diff = float(np.abs(got - np.asarray(sample["lexical_probs"])).max()) if len(got) else 0.0
    if not diff <= LEXICAL_ATOL:
        raise DenkiError(f"parity gate failed, nothing written: the lexical (TF-IDF) model's probabilities differ "
                         f"from scikit-learn's by {diff:.2e} > {LEXICAL_ATOL:g}")
    return {"max_abs_diff_probs": diff, "n": len(got), "atol": LEXICAL_ATOL, "passed": True}


def golden(tok, data: dict, task: dict, n: int = 50) -> list[dict]:
    """The first ``n`` parity texts with their ids and offsets (``golden_tokenization.jsonl``)."""
    out = []
    for t in data["texts"][:n]:
        e = tok.encode(t, max_length=max_length(task))
        out.append({"text": t, "max_length": max_length(task), "ids": e.ids,
                    "offsets": [list(o) for o in e.offsets]})
    return out
