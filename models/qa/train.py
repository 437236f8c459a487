"""Training one QA model: the windows and span targets of a question set (:func:`make_features`) and the training
loop of one seed (:func:`train_one_seed`: AdamW with layer-wise LR decay, linear warmup + linear decay, gradient
clipping at 1.0, shuffled windows each epoch).

Torch is imported inside the functions.
"""
from __future__ import annotations

import math
import time

import numpy as np

from denki.models.qa.data import QAExample
from denki.models.qa.features import QAFeatures, build_features
from denki.models.training.defaults import default_finetune_lr


def make_features(examples: list[QAExample], tokenizer, cfg, *, desc: str = "qa: windows") -> QAFeatures:
    """Windows of ``cfg.max_length`` tokens (overlapping by ``cfg.doc_stride``) with their start/end targets;
    questions that cannot be windowed are skipped and listed (:func:`models.qa.features.build_features`)."""
    return build_features(examples, tokenizer, max_length=cfg.max_length, doc_stride=cfg.doc_stride,
                          progress=cfg.progress, desc=desc)


def train_one_seed(make_model, seed: int, features: QAFeatures, tokenizer, cfg, *, device=None,
                   tile_from: int | None = None, on_epoch_end=None):
    """Fine-tune a fresh model ``make_model(seed=seed)`` (:func:`models.qa.model.build_model`) on ``features``
    → ``(model, info)``; ``cfg``: :class:`models.qa.finetune.QAFinetuneConfig`. Loss:
    :func:`models.qa.model.compute_loss`. ``cfg.lr`` None → the default for the encoder's width
    (:func:`models.training.defaults.default_finetune_lr`; in info). ``tile_from`` L: before training, copy the L
    trained position rows over the untrained ones (:func:`models.training.positions.tile_positions`; the number of
    rows copied is in info). ``on_epoch_end(model, epoch) -> dict``: called after every whole epoch before the
    last step (the model in eval mode; training resumes after it); its dicts are ``info["epoch_scores"]``."""
    import torch
    from tqdm.auto import tqdm

    from denki.models.qa.model import compute_loss
    from denki.models.training.loop import build_optimizer, warmup_linear_schedule
    from denki.models.training.positions import tile_positions
    from denki.models.training.precision import autocast

    model = make_model(seed=seed)  # seeds torch first
    tiled = tile_positions(model, tile_from) if tile_from else 0
    dev = device or torch.device("cpu")
    model.to(dev)
    n = len(features)
    total = _total_steps(n, cfg)
    lr = cfg.lr if cfg.lr is not None else default_finetune_lr(model.config.hidden_size)
    opt = build_optimizer(model, lr, weight_decay=cfg.weight_decay, layer_decay=cfg.layer_decay)
    sched = warmup_linear_schedule(opt, int(cfg.warmup_ratio * total), total)
    rng = np.random.default_rng(seed)
    sp = torch.from_numpy(features.start_positions)
    ep = torch.from_numpy(features.end_positions)
    model.train()
    step, losses, t0 = 0, [], time.time()
    steps_per_epoch = max(1, math.ceil(n / cfg.batch_size))
    epoch_scores = []
    bar = tqdm(total=total, desc=f"qa: train seed {seed}", unit=" step", disable=not cfg.progress, mininterval=1.0)
    while step < total:
        perm = rng.permutation(n)
        for b in range(0, n, cfg.batch_size):
            if step >= total:
                break
            idx = perm[b:b + cfg.batch_size]
            batch = {k: torch.from_numpy(v).to(dev) for k, v in
                     tokenizer.pad([features.encodings[w] for w in idx]).items()}
            targets = {"start_positions": sp[idx].to(dev), "end_positions": ep[idx].to(dev)}
            with autocast(cfg.precision, dev.type):  # bf16: the forward and its loss; the backward outside
                loss = compute_loss(model, {**batch, **targets})
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            step += 1
            bar.update(1)
            _log_progress(bar, seed, step, total, losses, t0, cfg.progress)
            if on_epoch_end is not None and step % steps_per_epoch == 0 and step < total:
                t_eval = time.time()
                epoch_scores.append({"epoch": step // steps_per_epoch, "step": step,
                                     **on_epoch_end(model, step // steps_per_epoch)})
                model.train()
                t0 += time.time() - t_eval  # train_seconds counts training only
    bar.close()
    info = {"seed": seed, "steps": step, "train_windows": n, "epochs": cfg.epochs, "lr": lr, "positions_tiled": tiled,
            "final_loss": float(np.mean(losses[-20:])), "train_seconds": round(time.time() - t0, 1),
            "epoch_scores": epoch_scores}
    return model, info


def _total_steps(n_windows: int, cfg) -> int:
    """Optimizer steps of one seed: ``cfg.epochs`` passes over the windows (a fraction allowed), at most
    ``cfg.max_steps``."""
    steps_per_epoch = max(1, math.ceil(n_windows / cfg.batch_size))
    total = max(1, int(round(steps_per_epoch * cfg.epochs)))
    return min(total, cfg.max_steps) if cfg.max_steps else total


def _log_progress(bar, seed: int, step: int, total: int, losses: list[float], t0: float, progress: bool) -> None:
    """The running loss on the bar every 20 steps; without a bar (background jobs, logs) a plain line every 5 % of
    the steps instead."""
    if step % 20 == 0:
        bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
    if not progress and (step % max(1, total // 20) == 0 or step == total):
        print(f"qa: seed {seed} step {step}/{total}, loss {np.mean(losses[-20:]):.3f}, "
              f"{time.time() - t0:.0f} s", flush=True)
