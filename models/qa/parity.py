"""The reader's half of the export's parity gate: its parity data (question, passage pairs), its check of each
ONNX file against PyTorch (answers after post-processing: agreement and F1 against PyTorch's answers) and the
golden tokenisation records (windows)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from denki.models.task.parity import NOT_RUN, run_torch, session_outputs
from denki.models.io.errors import DenkiError


def window_settings(task: dict) -> tuple[int, int]:
    """``(max_length, doc_stride)`` of the bundle's windows."""
    return int(task.get("max_length", 384)), int(task.get("doc_stride", 128))


def load_parity(src: Path, parity_file: str | None, task: dict, limit: int) -> dict:
    """``{"pairs": [(question, context)]}``: from ``parity_file`` (SQuAD 2.0 dev data) or parity_sample.json."""
    if parity_file:
        from denki.models.qa.data import read_qa

        qa = read_qa(parity_file, limit=limit)
        return {"pairs": [(e.question, e.context) for e in qa.examples][:limit]}
    p = src / "parity_sample.json"
    if not p.is_file():
        raise DenkiError(f"{src}: no parity_sample.json in the bundle; pass --parity-data FILE (dev data)")
    sample = json.loads(p.read_text(encoding="utf-8"))
    return {"pairs": [(e["question"], e["context"]) for e in sample["examples"]][:limit]}


def encodings(tok, data: dict, task: dict, limit: int) -> list:
    """The windows of the first ``limit // 4`` (at least one) parity questions, as the runtime encodes them."""
    max_length, stride = window_settings(task)
    return [w for q, c in data["pairs"][:max(1, limit // 4)]
            for w in tok.encode_windows(q, c, max_length=max_length, stride=stride)]


def parity(model, tok, files: dict[str, Path], data: dict, task: dict) -> dict:
    """Each ONNX file's answers against PyTorch's, question by question: ``max_abs_diff`` of the start/end (and
    answerable) logits inside the windows, ``agreement`` (same span or both no answer), ``f1_vs_torch`` and
    ``metric_drop`` = 1 - F1."""
    from denki.models.qa.metrics import f1_score
    from denki.models.qa.postprocess import postprocess_question

    max_length, stride = window_settings(task)
    thr = float(task.get("null_threshold", 0.0))
    kw = dict(n_best=int(task.get("n_best", 20)), max_answer_length=int(task.get("max_answer_length", 30)),
              null_threshold=thr, null_rule=task.get("null_rule", "cls"))
    ref_ans, ans = [], {b: [] for b in files}
    diffs = {b: 0.0 for b in files}
    ran = {b: True for b in files}
    cache: dict = {}
    for q, c in data["pairs"]:
        wins = tok.encode_windows(q, c, max_length=max_length, stride=stride)
        batch = tok.pad(wins)
        lens = [len(w) for w in wins]
        offs, seqs = [w.offsets for w in wins], [w.sequence_ids for w in wins]

        def answer(st, en, ans=None):
            mask = np.arange(st.shape[1])[None, :] < np.array(lens)[:, None]
            st, en = np.where(mask, st, -1e9), np.where(mask, en, -1e9)
            return postprocess_question(st, en, offs, seqs, c, answerable_logits=ans, **kw), mask

        ref = run_torch(model, batch)
        rs, re_, r_ans = ref[0], ref[1], (ref[2] if len(ref) > 2 else None)
        r_ref, mask = answer(rs, re_, r_ans)
        ref_ans.append(r_ref)
        for b, f in files.items():
            o = session_outputs(f, batch, cache) if ran[b] else None
            if o is None:
                ran[b] = False
                continue
            diffs[b] = max(diffs[b], float(np.abs(np.where(mask, o[0] - rs, 0)).max()),
                           float(np.abs(np.where(mask, o[1] - re_, 0)).max()),
                           float(np.abs(o[2] - r_ans).max()) if r_ans is not None else 0.0)
            ans[b].append(answer(o[0], o[1], o[2] if r_ans is not None else None)[0])
    res = {"n": len(ref_ans)}
    for b in files:
        if not ran[b]:
            res[b] = dict(NOT_RUN)
            continue
        same = [a["has_answer"] == r["has_answer"] and a["start"] == r["start"] and a["end"] == r["end"]
                for a, r in zip(ans[b], ref_ans)]
        f1 = [1.0 if not r["has_answer"] and not a["has_answer"] else f1_score(a["answer"], r["answer"])
              for a, r in zip(ans[b], ref_ans)]
        res[b] = {"ran": True, "max_abs_diff": diffs[b], "agreement": float(np.mean(same)) if same else 1.0,
                  # F1 of this backend's answers against PyTorch's: 1 - this is the metric drop vs the reference
                  "f1_vs_torch": float(np.mean(f1)) if f1 else 1.0}
        res[b]["metric_drop"] = 1.0 - res[b]["f1_vs_torch"]
    return res


def golden(tok, data: dict, task: dict, n: int = 50) -> list[dict]:
    """The windows of the first ``n // 5`` parity questions with their ids, type ids and offsets."""
    max_length, stride = window_settings(task)
    out = []
    for q, c in data["pairs"][:n // 5]:
        wins = tok.encode_windows(q, c, max_length=max_length, stride=stride)
        out.append({"question": q, "context": c, "max_length": max_length, "doc_stride": stride,
                    "windows": [{"ids": w.ids, "type_ids": w.type_ids,
                                 "offsets": [list(o) for o in w.offsets]} for w in wins]})
    return out
