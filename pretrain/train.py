"""The pretraining run: resumable, FLOP-budgeted, single process or DDP (torchrun). :func:`run_pretrain` reads top
to bottom as the list of its steps; each step lives where its subject does.

Layout of a run directory ``OUT``::

    run.json          the settings that define the run (a resume with different ones is refused): run_dir.py
    tokenizer/        copy of the tokenizer (the run does not depend on the original directory any more)
    checkpoints/      step-XXXXXXXX/ training states to resume from (train_state.py), newest few kept
    metrics.jsonl     one JSON line every ``log_every`` steps (and at the last step): loop.py
    summary.json      written at the end ("finished": true): summary.py
    curves.png        loss, gen_acc, replace_rate, disc P/R vs FLOPs
    bundle/           the exported discriminator (ELECTRA) / encoder (MLM) as a ``pretrained`` bundle

Where the rest lives: the settings and every default in settings.py; the run's start, data, model, optimizer and
resume in run_setup.py; ranks and process groups in distributed.py.

Continued pretraining (``init_from``, :mod:`pretrain.init_from`): the models start from a ``pretrained`` bundle
(imported or denki's) instead of random weights, the bundle's tokenizer is the run's, and ``run.json`` /
the bundle's manifest record the bundle (path + sha256 of its weights) and the FLOPs already spent in it.

Reproducibility: the data order is a pure function of (seed, step) (see data.PackedSequences); masking, dropout
and Gumbel noise use the global torch RNG, whose state is saved with each training state. On CPU a
killed-and-resumed run ends with parameters identical to an uninterrupted one.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from . import train_state
from .data import file_sha256
from .diagnostics import probe_batch
from .distributed import barrier, init_distributed
from .loop import TrainingLoop
from .run_dir import check_same_run, finished_summary, run_identity, write_run_json
from .run_setup import (build_model, build_optimizer, early_plan, masking, prepare_data, resolve_start, resume,
                        training_modules)
from .settings import (PretrainConfig, check_size_and_objective, chosen_settings_line, default_pretrain_lr,
                       resolve_precision, resolve_rtd_options)
from .summary import build_summary, finish_run

__all__ = ["PretrainConfig", "run_pretrain", "spawn_local"]


def run_pretrain(cfg: PretrainConfig, *, stop_after: int | None = None) -> dict:
    """Train (or resume, or report a finished run). Returns the summary dict.

    ``stop_after`` (tests): return right after that step's checkpoint logic, as if the process were killed.
    """
    from denki.models.bundle.pytorch import copy_tokenizer

    given = cfg
    # the settings: checked, and every default that depends on the run resolved once
    cfg = check_size_and_objective(cfg)
    rank, world, device = init_distributed(cfg.device)
    main, out = rank == 0, Path(cfg.out)
    start = resolve_start(cfg)
    planned = early_plan(cfg, start, world)
    cfg = resolve_rtd_options(cfg, planned)
    shas = [file_sha256(p) for p in cfg.corpus]
    lr = cfg.lr if cfg.lr is not None else default_pretrain_lr(start.lr_size, cfg.objective, planned)
    ident = run_identity(cfg, shas, start.tok.fingerprint(), world, lr, cfg.warmup_steps, start.init_ident)
    # the run directory: the same run's, or new; a finished run is reported as it is
    check_same_run(out, ident)
    done = finished_summary(out, cfg, main)
    if done is not None:
        return done
    precision = resolve_precision(cfg.precision, device.type)
    if main:
        write_run_json(out, cfg, ident, start.tok_dir, start.init_rec, precision)
        copy_tokenizer(start.tok_dir, out / "tokenizer")
    # data, model, optimizer, and the training state to resume from
    cache, data = prepare_data(cfg, start.tok, shas, rank, world)
    built = build_model(cfg, start, device, world, planned)
    model = built.model
    optimizer, scheduler, warmup = build_optimizer(cfg, model, lr, built.total_steps, device)
    progress = resume(out, model, optimizer, scheduler, rank, world)
    train_model, eager_model = training_modules(model, cfg, start.tok, device, world)
    if main:
        print(chosen_settings_line(given, cfg, lr=lr, total_steps=built.total_steps, warmup=warmup,
                                   precision=precision, planned=planned), file=sys.stderr, flush=True)
    # the steps
    def save(step: int, wall: float) -> None:
        train_state.save_train_state(out, step, model, optimizer, scheduler, {
            "tokens": loop.progress.tokens, "flops": loop.progress.flops, "wall_s": wall, "data_position": step,
            "model_config": built.model_config, "identity": ident}, keep=cfg.keep)

    loop = TrainingLoop(cfg=cfg, out=out, model=model, train_model=train_model, eager_model=eager_model,
                        optimizer=optimizer, scheduler=scheduler, data=data, mask_fn=masking(cfg, start.tok),
                        # the health probe (pretrain/diagnostics.py): a fixed batch, at every checkpoint and the end
                        probe_ids=probe_batch(cache, cfg.seq_len, cls_id=start.tok.cls_id,
                                              pad_id=start.tok.pad_id).to(device),
                        pad_id=start.tok.pad_id, disc_cfg=built.disc_cfg, gen_cfg=built.gen_cfg,
                        total_steps=built.total_steps, progress=progress, device=device, precision=precision,
                        rank=rank, world=world, init_run=start.init_bundle is not None, save=save)
    if not loop.run(stop_after):
        p = loop.progress
        return {"finished": False, "steps": p.step, "flops": p.flops, "tokens": p.tokens}
    # the end: summary, curves, bundle
    summary = build_summary(cfg, out, loop, world=world, init_rec=start.init_rec, main=main)
    if main:
        finish_run(cfg, out, summary, loop, model=model, model_config=built.model_config, shas=shas,
                   tok_fp=start.tok.fingerprint(), init_record=built.init_record)
    barrier(world)
    return summary


# ------------------------------------------------------------------------------------------------ local DDP
def _spawn_worker(rank: int, world: int, port: int, cfg_dict: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    try:
        run_pretrain(PretrainConfig(**cfg_dict))
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def spawn_local(cfg, world: int, port: int = 29533) -> None:
    """Run ``cfg`` (a :class:`~pretrain.settings.PretrainConfig`) as ``world`` local CPU processes on the gloo
    backend (what torchrun does, for tests)."""
    from dataclasses import asdict

    import torch.multiprocessing as mp

    mp.spawn(_spawn_worker, args=(world, port, asdict(cfg)), nprocs=world, join=True)
