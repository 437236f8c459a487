"""A toy third task, in one module, to show (and test) that a new task is one package plus one registry line
(docs/architecture.md walks through it): **scorer** — a number per text (here: how long an inquiry is, a stand-in
for a satisfaction or urgency score). Regression head on the encoder's [CLS]; exported, gated and served by the
same code as the router and the reader, which never name it.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from denki.models.task.base import RuntimeHead, Task
from denki.models.task.batching import check_texts, sorted_batches
from denki.models.task.parity import NOT_RUN, batches, run_torch, session_outputs


class ScorerHead(RuntimeHead):
    """texts → ``[{"value": float}]``: tokenise, length-bucketed model calls, one number per text."""

    def predict(self, texts: list[str], *, batch_size: int = 32) -> list[dict]:
        check_texts(texts)
        max_length = int(self.task["max_length"])
        encs = [self.tokenizer.encode(t, max_length=max_length) for t in texts]
        out = np.zeros(len(texts), dtype=np.float32)
        for idx in sorted_batches([len(e) for e in encs], batch_size):
            out[idx] = self.session.run(self.tokenizer.pad([encs[i] for i in idx]))[0][:, 0]
        scale = float(self.task["scale"])
        return [{"value": float(v) * scale} for v in out]

    def warm_up(self) -> None:
        self.predict(["テスト"])


class ScorerTask(Task):
    name = "scorer"
    command = "score"
    title = "scorer"
    hf_task = "text-classification"  # a one-logit sequence classifier: optimum exports it as any classifier
    experiment_metric = "mse"

    # ---------------------------------------------------------------- runtime
    def runtime_head(self, session):
        return ScorerHead(session)

    # ---------------------------------------------------------------- fine-tuning (the generic loop)
    def task_json(self, records, settings):
        return {**settings, "text_field": "text", "value_field": "value",
                "scale": max(abs(float(r["value"])) for r in records) or 1.0}

    def build_model(self, parent: Path, task_json: dict):
        from transformers import AutoModelForSequenceClassification

        from denki.models.bundle.pytorch import load_model

        return load_model(parent, AutoModelForSequenceClassification, num_labels=1, problem_type="regression")

    def make_features(self, records, tok, task_json):
        scale = float(task_json["scale"])
        return [{"encoding": tok.encode(r[task_json["text_field"]], max_length=int(task_json["max_length"])),
                 "target": float(r[task_json["value_field"]]) / scale} for r in records]

    def compute_loss(self, model, batch):
        import torch

        target = batch.pop("target").float()
        pred = model(**batch).logits[:, 0]
        return torch.nn.functional.mse_loss(pred, target)

    def parity_sample(self, records):
        return {"texts": [r["text"] for r in records[:64]]}

    # ---------------------------------------------------------------- export
    def torch_model(self, bundle_dir, task_json):
        from transformers import AutoModelForSequenceClassification

        from denki.models.bundle.pytorch import load_model

        return load_model(bundle_dir, AutoModelForSequenceClassification).eval()

    def parity_data(self, src, parity_file, task_json, limit):
        import json

        sample = json.loads((Path(src) / "parity_sample.json").read_text(encoding="utf-8"))
        return {"texts": sample["texts"][:limit]}

    def sample_encodings(self, tok, data, task_json, limit):
        return [tok.encode(t, max_length=int(task_json["max_length"])) for t in data["texts"][:limit]]

    def parity(self, model, tok, files, data, task_json):
        encs = self.sample_encodings(tok, data, task_json, len(data["texts"]))
        ref, outs, cache = [], {b: [] for b in files}, {}
        for _, batch in batches(tok, encs):
            ref.append(run_torch(model, batch)[0][:, 0])
            for b, f in files.items():
                o = session_outputs(f, batch, cache)
                outs[b].append(None if o is None else o[0][:, 0])
        ref_v = np.concatenate(ref)
        res = {"n": len(encs)}
        for b, parts in outs.items():
            if any(p is None for p in parts):
                res[b] = dict(NOT_RUN)
                continue
            v = np.concatenate(parts)
            diff = float(np.abs(v - ref_v).max())
            # "agreement": the share of values within 5 % of the scale of PyTorch's; the drop: RMS difference
            res[b] = {"ran": True, "max_abs_diff": diff, "agreement": float(np.mean(np.abs(v - ref_v) < 0.05)),
                      "metric_drop": float(math.sqrt(np.mean((v - ref_v) ** 2)))}
        return res


SCORER = ScorerTask()


def scorer_records(rows: list[dict]) -> list[dict]:
    """Routing-sample rows → ``{"text", "value"}`` with value = the text's length in characters."""
    return [{"text": r["text"], "value": float(len(r["text"]))} for r in rows]
