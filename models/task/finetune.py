"""The generic fine-tuning loop: any registered task that declares :meth:`~models.task.base.Task.build_model`,
:meth:`~models.task.base.Task.make_features` and :meth:`~models.task.base.Task.compute_loss` can be fine-tuned
from a ``pretrained`` bundle with it. The router and the reader have their own, richer commands
(:mod:`models.classify.finetune`: calibration, fusion; :mod:`models.qa.finetune`: windows, the null threshold);
this loop is what a new task starts from.

Read top to bottom: read the records → the task's ``task.json`` → encoder + head → features → epochs of AdamW
with warmup → a bundle of the task's kind with its parity sample. torch inside the functions.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from denki.models.io.errors import InputError


@dataclass
class GenericFinetuneConfig:
    """Settings of the generic loop (one object, built once by the caller)."""

    train_file: str  # JSONL: one record per line, the fields the task's make_features reads
    model: str  # the pretrained bundle to start from
    out_dir: str
    epochs: int = 3  # passes over the training records
    lr: float = 1e-4  # peak learning rate (linear warmup over the first 10 % of steps, then linear decay)
    batch_size: int = 16
    seed: int = 0
    max_length: int = 128  # tokens per text (longer texts are cut)


def read_jsonl(path: str | Path) -> list[dict]:
    """Every record of a JSONL file; a bad line is an :class:`InputError` naming the file and line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"malformed JSON ({e.msg})", path=str(path), line=lineno) from None
            if not isinstance(rec, dict):
                raise InputError("expected a JSON object", path=str(path), line=lineno)
            out.append(rec)
    if not out:
        raise InputError("no records", path=str(path))
    return out


def _batches(features: list[dict], batch_size: int, tok, generator):
    """Shuffled batches: the encodings padded (int64 ``(b, seq)`` tensors) plus each other field stacked."""
    import torch

    order = torch.randperm(len(features), generator=generator).tolist()
    for s in range(0, len(order), batch_size):
        rows = [features[i] for i in order[s:s + batch_size]]
        batch = {k: torch.from_numpy(v) for k, v in tok.pad([r["encoding"] for r in rows]).items()}
        for key in rows[0]:
            if key != "encoding":
                batch[key] = torch.tensor([r[key] for r in rows])
        yield batch


def train_epochs(task, model, features: list[dict], tok, cfg: GenericFinetuneConfig) -> list[float]:
    """AdamW with linear warmup/decay over ``cfg.epochs``; returns the mean loss of each epoch."""
    import torch

    from denki.models.training.loop import build_optimizer, warmup_linear_schedule

    steps = cfg.epochs * -(-len(features) // cfg.batch_size)
    opt = build_optimizer(model, cfg.lr)
    sched = warmup_linear_schedule(opt, max(1, steps // 10), steps)
    gen = torch.Generator().manual_seed(cfg.seed)
    model.train()
    losses = []
    for _ in range(cfg.epochs):
        total, n = 0.0, 0
        for batch in _batches(features, cfg.batch_size, tok, gen):
            loss = task.compute_loss(model, batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            total, n = total + float(loss.detach()), n + 1
        losses.append(total / max(1, n))
    return losses


def finetune_task(task, cfg: GenericFinetuneConfig) -> dict:
    """Fine-tune ``task`` (a :class:`~models.task.base.Task`) from ``cfg.model``; writes a bundle of the task's
    kind to ``cfg.out_dir`` and returns its manifest."""
    from denki.models.bundle.format import resolve_bundle, verify_bundle
    from denki.models.bundle.pytorch import save_bundle
    from denki.models.text.tokenizer import JapaneseTokenizer
    from denki.models.training.loop import set_seed

    t0 = time.perf_counter()
    set_seed(cfg.seed)
    parent = resolve_bundle(cfg.model)
    verify_bundle(parent, kinds=("pretrained",))
    records = read_jsonl(cfg.train_file)
    task_json = task.task_json(records, {"task": task.name, "max_length": cfg.max_length})
    tok = JapaneseTokenizer.load(parent)
    model = task.build_model(parent, task_json)
    features = task.make_features(records, tok, task_json)
    losses = train_epochs(task, model, features, tok, cfg)
    model.eval()
    return save_bundle(model, parent, cfg.out_dir, task.name,
                       source={"parent": str(parent), "train_file": str(cfg.train_file), "settings": vars(cfg)},
                       metrics={"train_loss_by_epoch": losses, "seconds": time.perf_counter() - t0},
                       extra_files={"task.json": task_json, "parity_sample.json": task.parity_sample(records)})
