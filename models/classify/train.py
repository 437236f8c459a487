"""Training one router: the token ids of a text set (:func:`make_features`) and the training loop of one seed
(:func:`train_one_seed`: AdamW with layer-wise LR decay, linear warmup + linear decay, gradient clipping at 1.0,
length-bucketed batches, optional class weights, bf16 autocast on CUDA, early stopping on dev macro-F1 with the
best epoch's weights kept).

Torch is imported at module level (through :mod:`models.classify.predict`).
"""
from __future__ import annotations

import math
import random
import time

import numpy as np
import torch
from tqdm.auto import tqdm

from denki.models.classify.predict import collate, encode_texts, length_batches, predict_logits
from denki.models.training.defaults import default_finetune_lr, default_layer_decay  # by encoder width, as QA


def make_features(tokenizer, texts: list[str], cfg, *, desc: str = "tokenize") -> tuple[list[np.ndarray], int]:
    """Token ids per text (``[CLS] … [SEP]``, cut at ``cfg.max_length``) → ``(ids, n_truncated)``."""
    return encode_texts(tokenizer, texts, cfg.max_length, progress=cfg.progress, desc=desc)


def _dev_macro_f1(logits: np.ndarray, gold: np.ndarray, labels: list[str]) -> dict:
    from denki.models.classify.metrics import classification_metrics

    m = classification_metrics(gold, logits.argmax(axis=1), labels)
    return {"accuracy": m["accuracy"], "macro_f1": m["macro_f1"]}


def _snapshot(model) -> dict:
    """The model's weights as CPU copies (the best epoch's, kept while training goes on)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def _class_weight(train_gold: np.ndarray, labels: list[str], cfg, device):
    """``(K,)`` loss weights n/(K·n_k) for ``class_weights == "balanced"``, else None."""
    if cfg.class_weights != "balanced":
        return None
    counts = np.bincount(train_gold, minlength=len(labels)).astype(np.float64)
    w = len(train_gold) / (len(labels) * np.maximum(counts, 1))
    return torch.tensor(w, dtype=torch.float32, device=device)


def train_one_seed(make_model, seed: int, train_ids: list[np.ndarray], train_gold: np.ndarray,
                   dev_ids: list[np.ndarray], dev_gold: np.ndarray, labels: list[str], cfg,
                   *, pad_id: int = 0) -> dict:
    """Fine-tune a fresh model ``make_model(seed=seed)`` (:func:`models.classify.model.build_model`); ``cfg``: a
    :class:`models.classify.config.FinetuneConfig` with ``epochs`` / ``patience`` / ``class_weights`` resolved.
    Returns ``{seed, lr, layer_decay, state (best epoch, CPU tensors), dev_logits, best_epoch, accuracy, macro_f1,
    history, seconds, epochs_run}``. ``cfg.epochs == 0``: no training, dev scored once (re-fitting the routing
    rule of an existing classifier)."""
    from denki.models.classify.model import compute_loss
    from denki.models.training.loop import build_optimizer, pick_device, set_seed, warmup_linear_schedule

    device = pick_device(cfg.device)
    model = make_model(seed=seed).to(device)
    set_seed(seed)
    lr = cfg.lr if cfg.lr is not None else default_finetune_lr(model.config.hidden_size)
    layer_decay = cfg.layer_decay if cfg.layer_decay is not None else default_layer_decay(model.config.hidden_size)
    opt = build_optimizer(model, lr, weight_decay=cfg.weight_decay, layer_decay=layer_decay,
                          num_layers=model.config.num_hidden_layers)
    total = math.ceil(len(train_ids) / cfg.batch_size) * cfg.epochs
    sched = warmup_linear_schedule(opt, int(cfg.warmup_ratio * total), total)
    weight = _class_weight(train_gold, labels, cfg, device)
    gold_t = torch.from_numpy(np.asarray(train_gold, dtype=np.int64))
    rng = random.Random(seed)
    lengths = [len(x) for x in train_ids]

    def score_dev() -> tuple[np.ndarray, dict]:
        logits = predict_logits(model, dev_ids, pad_id=pad_id, batch_size=cfg.eval_batch_size, device=device,
                                bf16=cfg.bf16, progress=cfg.progress, desc="dev")
        return logits, _dev_macro_f1(logits, dev_gold, labels)

    best = {"macro_f1": -1.0}
    history, bad_epochs = [], 0
    t0 = time.perf_counter()
    if cfg.epochs == 0:
        dev_logits, m = score_dev()
        best = {**m, "epoch": 0, "dev_logits": dev_logits, "state": _snapshot(model)}
    model.train()
    for epoch in range(1, cfg.epochs + 1):
        losses = []
        bar = tqdm(length_batches(lengths, cfg.batch_size, rng), desc=f"seed {seed} epoch {epoch}/{cfg.epochs}",
                   unit="batch", disable=not cfg.progress, leave=False, mininterval=1.0)
        for b in bar:
            batch = {**collate(train_ids, b, pad_id, device), "labels": gold_t[b].to(device)}
            loss = compute_loss(model, batch, class_weight=weight, bf16=cfg.bf16)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            if len(losses) % 20 == 0:
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
        dev_logits, m = score_dev()
        history.append({"epoch": epoch, "train_loss": float(np.mean(losses)) if losses else None, **m})
        tqdm.write(f"seed {seed} epoch {epoch}: train loss {history[-1]['train_loss']:.4f}, dev macro-F1 "
                   f"{m['macro_f1']:.4f}, accuracy {m['accuracy']:.4f} ({time.perf_counter() - t0:.0f}s)")
        if m["macro_f1"] > best["macro_f1"]:
            best = {**m, "epoch": epoch, "dev_logits": dev_logits, "state": _snapshot(model)}
            bad_epochs = 0
        else:
            bad_epochs += 1
            if bad_epochs >= cfg.patience:
                break
    return {"seed": seed, "lr": lr, "layer_decay": layer_decay, "state": best["state"], "dev_logits": best["dev_logits"],
            "best_epoch": best["epoch"], "accuracy": best["accuracy"], "macro_f1": best["macro_f1"],
            "history": history, "seconds": time.perf_counter() - t0, "epochs_run": len(history)}
