"""The pretraining loop: resumable, FLOP-budgeted, single process or DDP (torchrun).

Layout of a run directory ``OUT``::

    run.json          the settings that define the run (a resume with different ones is refused)
    tokenizer/        copy of the tokenizer (the run does not depend on the original directory any more)
    checkpoints/      step-XXXXXXXX/ (see checkpoint.py), newest few kept
    metrics.jsonl     one JSON line every ``log_every`` steps (and at the last step)
    summary.json      written at the end ("finished": true)
    curves.png        loss, gen_acc, replace_rate, disc P/R vs FLOPs
    bundle/           the exported discriminator (ELECTRA) / encoder (MLM) as a ``pretrained`` bundle

Continued pretraining (``init_from``, :mod:`pretrain.init_from`): the models start from a ``pretrained`` bundle
(imported or denki's) instead of random weights, the bundle's tokenizer is the run's, and ``run.json`` /
the bundle's manifest record the bundle (path + sha256 of its weights) and the FLOPs already spent in it.

Reproducibility: the data order is a pure function of (seed, step) (see data.PackedSequences); masking, dropout
and Gumbel noise use the global torch RNG, whose state is checkpointed. On CPU a killed-and-resumed run ends with
parameters identical to an uninterrupted one.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json, atomic_write_text

from denki.models.training.pretrain_health import verdict

from . import checkpoint as ck
from .data import PackedSequences, build_token_cache, file_sha256
from .diagnostics import probe_batch, run_probe
from .fastpath import resolve_attention, use_cheap_mask_dropout, use_sdpa_attention
from .flops import expected_masked, step_flops
from .masking import BERT_SPLIT, ELECTRA_SPLIT, mask_tokens
from .model import OBJECTIVES, RTD_OBJECTIVES, build_pretrainer
from .runlog import bundle_metrics, last_diagnostics, read_metrics
from .speed import device_peak, mfu

#: `denki pretrain`'s objective when --objective is not given: ELECTRA at every size. Tiny, from evidence at one
#: CPU-hour (2e14 FLOPs, three pretraining seeds each, today's recipe: experiments/anshead, seeds2e14): ELECTRA's
#: routers trail compute-matched MLM 40 % by about one pretraining-seed SD (livedoor titles 0.715 ± 0.007 vs
#: 0.726 ± 0.009, question types 0.633 ± 0.042 vs 0.639 ± 0.016) while its QA leads by about 10 F1 (47–51 vs 36–39),
#: and at the quickstart's 6e12 the two tie (experiments/qsobj). (Tiny defaulted to MLM while every tiny ELECTRA
#: recipe fine-tuned below random init: experiments/top2e14.) --init-from keeps ELECTRA too (an imported
#: discriminator continues RTD; give --objective mlm for a BERT).
DEFAULT_OBJECTIVE = {"tiny": "electra", "mini": "electra", "small": "electra", "base": "electra"}



def default_objective(size: str, init_from=None) -> str:
    """The objective `denki pretrain` uses when none is given (see :data:`DEFAULT_OBJECTIVE`)."""
    return "electra" if init_from else DEFAULT_OBJECTIVE[size]


DEFAULT_LR = {"tiny": 1e-3, "mini": 5e-4, "small": 5e-4, "base": 2e-4}
#: replaced-token detection at size tiny: 1e-3 collapses the discriminator at CPU budgets, 3e-4 (with the prior
#: bias init of model.RTDPretrainer) learns (experiments/collapse-prior-bias); MLM keeps 1e-3
DEFAULT_LR_RTD = {"tiny": 3e-4}


def default_lr(size: str, objective: str, planned_steps: int | None = None) -> float:
    """The peak LR a run gets without ``--lr`` (per size; per objective where measurements differ; for a tiny
    ELECTRA from scratch, per run length: :func:`long_tiny_rtd`)."""
    if long_tiny_rtd(size, objective, planned_steps):
        return TINY_RTD_LONG["lr"]
    if objective in RTD_OBJECTIVES and size in DEFAULT_LR_RTD:
        return DEFAULT_LR_RTD[size]
    return DEFAULT_LR[size]


#: A tiny ELECTRA from scratch that plans at least this many steps gets :data:`TINY_RTD_LONG` for whatever of
#: --lr / --cls-contrast / --gen-temperature is not given. Evidence (experiments/cc1e14; dev macro-F1
#: livedoor-title / jaquad-qtype): at 1e14 FLOPs (3,470 steps) lr 1e-3 + cls-contrast 1 fine-tunes 0.695 / 0.569 (3
#: pretraining seeds; random init 0.687 / 0.564) vs 0.634 / 0.549 at lr 3e-4 and 0.609 / 0.560 for the paper's loss at
#: lr 1e-3; at 3e13 (1,040 steps) lr 1e-3 beats 3e-4 (0.607 vs 0.452); at the quickstart's 6e12 (209 steps) lr 1e-3
#: collapses (0.270) and 5e-4 nearly (AUC 0.57), so short runs keep lr 3e-4 and the paper's loss (with cls-contrast:
#: 0.722 vs 0.724, a tie). The switch sits at the shortest long run measured. --gen-temperature 2 (experiments/anshead):
#: over three pretraining seeds at 2e14 FLOPs the discriminator finds 0.339–0.347 of its replacements (T = 1: 0.06–0.07;
#: the issue's goal 0.3), livedoor-title routers score 0.715 ± 0.007 (T = 1 0.699 ± 0.010, random init 0.682) and
#: full-dev question types 0.633 ± 0.042 (T = 1 0.607). Its QA risk (one of three pretraining seeds scored
#: 38.74 / 37.64 / 48.71 on three QA seeds) is what `denki finetune qa`'s answerable head, on by default for ELECTRA
#: bundles, addresses (median 47.31 with it). T = 3 was the default for one release and left it when QA measured it
#: (38.87 / 47.01 / 43.58 from one pretraining seed), before the head was QA's default.
TINY_RTD_LONG_STEPS = 1000
TINY_RTD_LONG = {"lr": 1e-3, "cls_contrast": 1.0, "gen_temperature": 2.0}


def long_tiny_rtd(size: str, objective: str, planned_steps: int | None) -> bool:
    """Whether a run gets the long-run recipe :data:`TINY_RTD_LONG` (tiny, objective ``electra``, from scratch —
    ``planned_steps`` is None for --init-from — planning ≥ :data:`TINY_RTD_LONG_STEPS` steps)."""
    return size == "tiny" and objective == "electra" and planned_steps is not None \
        and planned_steps >= TINY_RTD_LONG_STEPS


def default_cls_contrast(size: str, objective: str, planned_steps: int | None) -> float:
    """The --cls-contrast weight a run gets when none is given: 1 for a long tiny ELECTRA, else 0 (off)."""
    return TINY_RTD_LONG["cls_contrast"] if long_tiny_rtd(size, objective, planned_steps) else 0.0


def default_gen_temperature(size: str, objective: str, planned_steps: int | None) -> float:
    """The --gen-temperature a run gets when none is given: ``TINY_RTD_LONG["gen_temperature"]`` (2) for a long tiny
    ELECTRA, else 1, the paper's."""
    return TINY_RTD_LONG["gen_temperature"] if long_tiny_rtd(size, objective, planned_steps) else 1.0


#: MLM's mask rate from scratch at size tiny: 40 %, from evidence (experiments/qsm40): at 1e14 FLOPs two
#: pretraining seeds fine-tuned into livedoor-title routers above random init + 3 (15 %: +2.6), and at the
#: quickstart's 6e12 the router beat the 15 % one by 3.5 points. Everything else keeps the paper's 15 % (ELECTRA at
#: 25 % learnt no better, experiments/levers1e14; a checkpoint continued with --init-from was pretrained at 15 %).
MLM_TINY_MASK_PROB = 0.4
DEFAULT_MASK_PROB = 0.15


def default_mask_prob(size: str, objective: str, init_from=None) -> float:
    """The mask rate a run gets without ``--mask-prob`` (see :data:`MLM_TINY_MASK_PROB`)."""
    return MLM_TINY_MASK_PROB if objective == "mlm" and size == "tiny" and not init_from else DEFAULT_MASK_PROB


PRECISIONS = ("auto", "fp32", "bf16")


def cpu_bf16_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """The CPU flags that give native bf16 matrix work (``avx512_bf16``, ``amx_bf16``), as Linux lists them; [] where
    none (or no /proc/cpuinfo)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return []
    return [f for f in ("avx512_bf16", "amx_bf16") if f in flags]


def resolve_precision(precision: str, device_type: str) -> str:
    """``auto`` → bf16 on CUDA and on CPUs with native bf16 (:func:`cpu_bf16_flags`), fp32 elsewhere. Measured on an
    avx512_bf16 AMD EPYC core (experiments/bf16-pretraining): tiny RTD 1.84× the tokens/s of fp32 with the same loss
    curve, and routers from bf16 and fp32 encoders at equal FLOPs within fine-tuning seed noise on both tasks.
    ``bf16`` on a CPU without native bf16 runs, emulated and slower, with a warning."""
    if precision not in PRECISIONS:
        raise DenkiError(f"--precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if precision == "auto":
        return "bf16" if device_type == "cuda" or (device_type == "cpu" and cpu_bf16_flags()) else "fp32"
    if precision == "bf16" and device_type == "cpu" and not cpu_bf16_flags():
        print("pretrain: WARNING: --precision bf16 on a CPU without avx512_bf16/amx_bf16 is emulated (slower than "
              "fp32)", file=sys.stderr)
    return precision


def _use_fast_modules(model, cfg: "PretrainConfig", device) -> None:
    """Swap in the fast paths chosen by ``cfg`` (pretrain/fastpath.py): SDPA attention, cheaper CPU dropout masks.
    Neither adds parameters, so checkpoints and exported bundles are the same either way."""
    if cfg.micro_batch is not None and cfg.micro_batch < 1:
        raise DenkiError(f"--micro-batch {cfg.micro_batch}: give a number of sequences ≥ 1")
    if resolve_attention(cfg.attention, device.type) == "sdpa":
        use_sdpa_attention(model)
    if cfg.dropout_masks == "cheap":
        use_cheap_mask_dropout(model)
    elif cfg.dropout_masks != "torch":
        raise DenkiError(f"--dropout-masks {cfg.dropout_masks!r}: choose cheap or torch")


def _smaller_micro_batch(current: int) -> int:
    """Half the sequences per pass after an out-of-memory error; an error when one sequence does not fit."""
    if current <= 1:
        raise DenkiError("out of memory with one sequence per forward/backward: lower --seq-len or use a smaller "
                         "--size")
    return (current + 1) // 2


def _sync_each_step(device, world: int) -> bool:
    """Read the step's outputs back every step (exact NaN stop at the step it happens) where that costs nothing —
    a CPU, whose tensors are already on the host — or where ranks must agree each step anyway; on one GPU they are
    summed on the device and read at log / save steps only."""
    return device.type != "cuda" or world > 1


def _read_back(dev_sum: torch.Tensor, keys: list[str], world: int) -> dict[str, float]:
    """The summed ``(K,)`` outputs on the host (all-reduced over ranks; losses averaged over them)."""
    vals = dict(zip(keys, _all_reduce(dev_sum, world).cpu().tolist()))
    for k in _LOSS_KEYS:
        if k in vals:
            vals[k] /= world
    return vals


def _stop_if_not_finite(vals: dict[str, float], first: int, last: int, out: Path, bar) -> None:
    """Raise (naming the last good checkpoint) if a loss summed over steps ``first``–``last`` is NaN or inf."""
    if all(math.isfinite(vals[k]) for k in ("loss", "mlm_loss")):
        return
    bar.close()
    when = f"at step {last}" if first == last else f"between steps {first} and {last}"
    raise DenkiError(f"loss became {vals['loss']} {when} (NaN/inf); training stopped. The last good checkpoint is "
                     f"{ck.latest_checkpoint(out) or '(none yet)'}; lower --lr or check the data, then re-run to "
                     "resume from it")


def _forward_backward(train_model, amp, ids, mk, pad_id: int, device, micro: int | None = None) -> dict:
    """Forward (under ``amp``) and backward of one batch — ``ids`` and ``mk`` on the host, ``(B, L)`` — in chunks
    of ``micro`` rows (gradient accumulation; None = the whole batch at once). Each chunk goes to ``device`` with
    its masked positions as flat indices (``(M,)``, computed on the host: the model's gathers then never wait for
    the device). Each chunk's loss is weighted by its share of the rows — exactly the whole batch's loss when the
    rows hold equal numbers of masked and non-pad tokens, as packed sequences do (all but the last of an epoch);
    the [CLS] contrast (``--cls-contrast``) then draws its in-batch negatives from the chunk. Returns the outputs
    detached, on the device: losses row-weighted, counts summed."""
    import contextlib

    B = ids.shape[0]
    size = min(micro or B, B)
    cuda = device.type == "cuda"

    def to_device(t):
        return t.pin_memory().to(device, non_blocking=True) if cuda else t

    out: dict[str, torch.Tensor] = {}
    for start in range(0, B, size):
        rows = slice(start, start + size)
        w = (min(B, start + size) - start) / B
        last = start + size >= B
        chunk_ids, positions = ids[rows], mk.positions[rows]
        index = positions.reshape(-1).nonzero().squeeze(1)  # (M,) row-major, as boolean indexing orders them
        chunk_ids, masked, positions, index = map(to_device, (chunk_ids, mk.input_ids[rows], positions, index))
        am = (chunk_ids != pad_id).long()
        # DDP all-reduces the gradients on the last chunk's backward only
        sync = contextlib.nullcontext() if last or not hasattr(train_model, "no_sync") else train_model.no_sync()
        with sync:
            with amp:
                res = train_model(chunk_ids, masked, positions, am, index=index)
            (res["loss"] if w == 1 else res["loss"] * w).backward()
        for k, v in res.items():
            v = v.detach() * w if k in _LOSS_KEYS and w != 1 else v.detach()
            out[k] = out[k] + v if k in out else v
    return out


# settings that define a run: changing any of them on resume is an error
IDENTITY_KEYS = ("corpus_sha256", "tokenizer", "size", "objective", "batch_size", "seq_len", "lr", "seed",
                 "mask_prob", "gen_size", "disc_weight", "max_flops", "steps", "warmup_steps", "weight_decay",
                 "world_size", "embeddings", "dropout", "init_from", "gen_init", "gen_layers", "disc_skip_special",
                 "adam_eps", "cls_contrast", "gen_temperature")


@dataclass
class PretrainConfig:
    corpus: list[str]
    tokenizer: str | None  # None/"" with init_from: the bundle's tokenizer
    out: str
    size: str = "tiny"
    objective: str = "electra"
    max_flops: float | None = None
    steps: int | None = None
    batch_size: int = 32
    seq_len: int = 128
    lr: float | None = None
    seed: int = 0
    device: str = "auto"
    mask_prob: float | None = None  # None: default_mask_prob(size, objective, init_from)
    gen_size: float = 0.25
    disc_weight: float = 50.0
    #: RTD: one embeddings module for generator and discriminator (paper) or one each ("separate")
    share_embeddings: bool = True
    #: RTD: the discriminator loss skips [CLS] and [SEP] (always "original"); False = the paper's (scores them).
    #: Opt-in: livedoor-title +4.4 / +8.6 points at 1e14 (two pretraining seeds), but it stalled RTD at one seed of
    #: tests/test_pretrain_learns' synthetic corpus (experiments/skipspecial1e14)
    disc_skip_special: bool = False
    #: AdamW's ε; None = torch's 1e-8 (the official ELECTRA code uses 1e-6, which damps the updates of parameters
    #: whose gradients are tiny — rare tokens' embeddings)
    adam_eps: float | None = None
    #: RTD: weight of a [CLS] contrastive loss between the discriminator's and the generator's views
    #: (model.RTDPretrainer.enable_cls_contrast); 0 = off, the paper's objective; None = default_cls_contrast
    cls_contrast: float | None = None
    #: RTD: the generator's sampling temperature in training (model.RTDPretrainer.gen_temperature); 1 = the paper's;
    #: None = default_gen_temperature
    gen_temperature: float | None = None
    #: dropout during pretraining (hidden and attention); None = the preset's 0.1. The exported bundle always
    #: carries the fine-tuning dropout (models.bundle.presets.FINETUNE_DROPOUT), whatever was used here.
    dropout: float | None = None
    warmup_steps: int | None = None
    weight_decay: float = 0.01
    log_every: int = 10
    save_every: int = 200
    keep: int = 3
    cache_dir: str | None = None
    compile: bool = False
    progress: bool = True
    export: bool = True
    #: continued pretraining: a ``pretrained`` bundle (or run directory) to start from (see pretrain.init_from)
    init_from: str | None = None
    #: RTD from a bundle: bundle | copy | random (None: bundle when it has generator/, else copy)
    gen_init: str | None = None
    #: gen_init copy: generator depth (None: max(1, L // 4) of the discriminator's L layers)
    gen_layers: int | None = None
    #: autocast precision of the forward/backward: auto | fp32 | bf16 (``resolve_precision``); master weights, the
    #: optimizer, the losses and the generator's sampling stay fp32 either way
    precision: str = "auto"
    #: dropout keep-masks: "cheap" (pretrain.fastpath.CheapMaskDropout: a quarter of the random numbers on CPUs,
    #: torch's dropout elsewhere) or "torch"; experiments/cpu-dropout
    dropout_masks: str = "cheap"
    #: sequences per forward/backward; the optimizer steps once per --batch-size (gradient accumulation, for a
    #: batch larger than the device's memory); None = the whole batch at once
    micro_batch: int | None = None
    #: attention kernel: auto (sdpa on CUDA, eager on CPUs) | eager | sdpa (pretrain.fastpath.resolve_attention)
    attention: str = "auto"
    extra: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ distributed
def _dist_env() -> tuple[int, int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0"))


def _init_distributed(device_name: str):
    from denki.models.training.loop import pick_device

    rank, world, local = _dist_env()
    device = pick_device(device_name)
    # torchrun with one process still takes the distributed path (process group, DDP), so that a one-GPU machine
    # can prove it; a plain `denki pretrain` does not
    if world > 1 or "TORCHELASTIC_RUN_ID" in os.environ:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
            if rank == 0:
                print(f"pretrain: DDP over {dist.get_backend()}, {world} process(es)", file=sys.stderr)
        if device.type == "cuda":
            device = torch.device("cuda", local)
            torch.cuda.set_device(device)
    return rank, world, device


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _barrier(world: int) -> None:
    if world > 1 or _distributed():
        import torch.distributed as dist

        dist.barrier()


def _all_reduce(t: torch.Tensor, world: int) -> torch.Tensor:
    if world > 1 or _distributed():
        import torch.distributed as dist

        dist.all_reduce(t)
    return t


# ------------------------------------------------------------------------------------------------ planning
def plan_steps(cfg: PretrainConfig, disc_cfg, gen_cfg, world: int) -> int:
    """Number of optimizer steps the LR schedule spans: ``--steps``, or enough to spend ``--max-flops``."""
    if cfg.steps is None and cfg.max_flops is None:
        raise DenkiError("give --steps N and/or --max-flops F (the training budget)")
    candidates = []
    if cfg.steps is not None:
        candidates.append(int(cfg.steps))
    if cfg.max_flops is not None:
        per = step_flops(cfg.objective, disc_cfg, gen_cfg, cfg.batch_size * world, cfg.seq_len,
                         expected_masked(cfg.batch_size * world, cfg.seq_len, cfg.mask_prob))
        candidates.append(max(1, math.ceil(cfg.max_flops / per)))
    return max(1, min(candidates))


def _identity(cfg: PretrainConfig, shas: list[str], tok_fp: str, world: int, lr: float, warmup: int | None,
              init: dict | None = None) -> dict:
    """``init``: continued pretraining — ``{"init_from": {"path", "sha256"}, "gen_init", "gen_layers"}`` (the
    architecture is the bundle's, so ``size`` is None); absent keys stay None, so older runs still resume."""
    init = init or {}
    return {"corpus_sha256": shas, "tokenizer": tok_fp, "size": None if init else cfg.size,
            "objective": cfg.objective, "init_from": init.get("init_from"), "gen_init": init.get("gen_init"),
            "gen_layers": init.get("gen_layers"),
            "batch_size": cfg.batch_size, "seq_len": cfg.seq_len, "lr": lr, "seed": cfg.seed,
            "mask_prob": cfg.mask_prob, "gen_size": cfg.gen_size if cfg.objective in RTD_OBJECTIVES else None,
            "disc_weight": cfg.disc_weight if cfg.objective in RTD_OBJECTIVES else None,
            "max_flops": cfg.max_flops, "steps": cfg.steps, "warmup_steps": warmup, "weight_decay": cfg.weight_decay, "world_size": world,
            # None for the defaults, so that runs made before these settings existed still resume
            "embeddings": None if cfg.share_embeddings or cfg.objective not in RTD_OBJECTIVES else "separate",
            "dropout": cfg.dropout,
            "disc_skip_special": True if cfg.disc_skip_special else None,  # RTD only: checked before
            "adam_eps": cfg.adam_eps, "cls_contrast": cfg.cls_contrast or None,
            "gen_temperature": cfg.gen_temperature if cfg.gen_temperature != 1.0 else None}


def _check_same_run(out: Path, ident: dict) -> None:
    p = out / "run.json"
    if not p.is_file():
        return
    prev = json.loads(p.read_text(encoding="utf-8")).get("identity", {})
    diffs = [f"{k}: {prev.get(k)!r} → {ident.get(k)!r}" for k in IDENTITY_KEYS if prev.get(k) != ident.get(k)]
    if diffs:
        raise DenkiError(f"{out} holds a run with different settings ({'; '.join(diffs)}); "
                         "use a new --out directory (or the original settings to resume)")


# ------------------------------------------------------------------------------------------------ metrics
_SUM_KEYS = ("n_masked", "gen_correct", "n_nonpad", "n_judged", "n_replaced", "disc_correct", "disc_tp",
             "disc_pred_pos", "disc_mlm_correct", "cls_correct", "n_seqs")
#: per-step mean losses a pretrainer may return (all-reduced, then averaged over ranks)
_LOSS_KEYS = ("loss", "mlm_loss", "disc_loss", "disc_mlm_loss", "cls_loss")


def _metrics_line(step, tokens, flops, acc: dict, n_steps: int, lr: float, tok_s: float, wall: float,
                  flops_s: float = 0.0, peak: float | None = None) -> dict:
    def div(a, b):
        return float(a) / float(b) if b else 0.0

    row = {"step": step, "tokens": int(tokens), "flops": float(flops), "loss": div(acc["loss"], n_steps),
           "mlm_loss": div(acc["mlm_loss"], n_steps), "gen_acc": div(acc["gen_correct"], acc["n_masked"])}
    if acc.get("n_replaced") is not None and "disc_loss" in acc:
        # over the tokens the discriminator is judged on (all non-pad unless --disc-skip-special)
        row.update(disc_loss=div(acc["disc_loss"], n_steps), replace_rate=div(acc["n_replaced"], acc["n_judged"]),
                   disc_acc=div(acc["disc_correct"], acc["n_judged"]),
                   disc_precision=div(acc["disc_tp"], acc["disc_pred_pos"]),
                   disc_recall=div(acc["disc_tp"], acc["n_replaced"]))
    else:  # MLM baseline: no discriminator
        row.update(disc_loss=None, replace_rate=None, disc_acc=None, disc_precision=None, disc_recall=None)
    if acc.get("disc_mlm_loss") is not None:  # electra-mlm: the discriminator's corrective MLM
        row.update(disc_mlm_loss=div(acc["disc_mlm_loss"], n_steps),
                   disc_mlm_acc=div(acc["disc_mlm_correct"], acc["n_masked"]))
    if acc.get("cls_loss") is not None:  # --cls-contrast: the [CLS] InfoNCE and how often it finds the pair
        row.update(cls_loss=div(acc["cls_loss"], n_steps), cls_acc=div(acc["cls_correct"], acc["n_seqs"]))
    row.update(lr=lr, tokens_per_s=tok_s, flops_per_s=flops_s, mfu=mfu(flops_s, peak), wall_s=wall)
    return row


def _truncate_metrics(path: Path, max_step: int) -> None:
    """Drop lines logged after the checkpoint we resume from (they will be logged again)."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line)["step"] <= max_step:
                keep.append(line)
        except (json.JSONDecodeError, KeyError):
            break  # a torn last line from a kill
    atomic_write_text(path, "".join(k + "\n" for k in keep))


def plot_curves(rows: list[dict], path: str | os.PathLike, title: str = "") -> None:
    from denki.models.io.plotting import setup_matplotlib

    plt = setup_matplotlib()

    if not rows:
        return
    x = [r["flops"] for r in rows]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    ax = axes[0][0]
    ax.plot(x, [r["mlm_loss"] for r in rows], label="mlm_loss")
    if rows[-1].get("disc_loss") is not None:
        ax.plot(x, [r["disc_loss"] for r in rows], label="disc_loss")
    ax.set_yscale("log")
    ax.set_title("loss")
    ax = axes[0][1]
    ax.plot(x, [r["gen_acc"] for r in rows], label="gen_acc (masked positions)")
    ax.set_title("generator / MLM accuracy")
    ax = axes[1][0]
    if rows[-1].get("replace_rate") is not None:
        ax.plot(x, [r["replace_rate"] for r in rows], label="replace_rate")
    ax.set_title("replace rate (of non-pad tokens)")
    ax = axes[1][1]
    if rows[-1].get("disc_precision") is not None:
        for k in ("disc_precision", "disc_recall", "disc_acc"):
            ax.plot(x, [r[k] for r in rows], label=k)
        # the trivial "everything is original" answer, for scale
        ax.plot(x, [1 - r["replace_rate"] for r in rows], "k:", label="acc of 'all original'")
        probed = [r for r in rows if r.get("disc_auc") is not None]
        if probed:
            ax.plot([r["flops"] for r in probed], [r["disc_auc"] for r in probed], "o-", label="AUC (probe)")
    ax.set_title("discriminator (replaced = positive)")
    for a in axes.flat:
        a.set_xlabel("training FLOPs")
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8)
        a.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    tmp = Path(path).with_name(Path(path).name + ".partial.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------ main loop
def run_pretrain(cfg: PretrainConfig, *, stop_after: int | None = None) -> dict:
    """Train (or resume, or report a finished run). Returns the summary dict.

    ``stop_after`` (tests): return right after that step's checkpoint logic, as if the process were killed.
    """
    from tqdm.auto import tqdm

    from denki.models.bundle.pytorch import copy_tokenizer
    from denki.models.bundle.presets import SIZES, electra_config, generator_config
    from denki.models.text.tokenizer import JapaneseTokenizer
    from denki.models.training.loop import build_optimizer, set_seed, warmup_linear_schedule

    from .export import export_bundle

    if cfg.size not in SIZES:
        raise DenkiError(f"unknown size {cfg.size!r}; choose one of {sorted(SIZES)}")
    if cfg.objective not in OBJECTIVES:
        raise DenkiError(f"unknown objective {cfg.objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if cfg.mask_prob is None:  # resolved once here: the identity, FLOP count, masking and bundle all see the value
        cfg = replace(cfg, mask_prob=default_mask_prob(cfg.size, cfg.objective, cfg.init_from))
    if not 0 < cfg.mask_prob < 1:
        raise DenkiError("--mask-prob must be in (0, 1)")
    if cfg.dropout is not None and not 0 <= cfg.dropout < 1:
        raise DenkiError("--dropout must be in [0, 1)")
    rank, world, device = _init_distributed(cfg.device)
    main = rank == 0
    out = Path(cfg.out)
    init_bundle = init_rec = None
    init_ident: dict = {}
    lr_size = cfg.size
    if cfg.init_from:
        from denki.models.bundle.importer import generator_of

        from .init_from import bundle_architecture, default_gen_layers, resolve_init

        init_bundle, init_rec = resolve_init(cfg.init_from)
        tok_dir = init_bundle
        tok = JapaneseTokenizer.load(init_bundle)
        if cfg.tokenizer and JapaneseTokenizer.load(cfg.tokenizer).fingerprint() != tok.fingerprint():
            raise DenkiError(f"--tokenizer {cfg.tokenizer} is not the tokenizer of --init-from {init_bundle} "
                             "(continued pretraining keeps the checkpoint's vocabulary); leave --tokenizer out")
        bcfg = json.loads((init_bundle / "config.json").read_text(encoding="utf-8"))
        h = int(bcfg["hidden_size"])
        lr_size = "tiny" if h <= 128 else "small" if h <= 256 else "base"  # only for the default --lr
        gen_init = gen_layers = None
        if cfg.objective in RTD_OBJECTIVES:
            gen_init = cfg.gen_init or ("bundle" if generator_of(init_bundle) is not None else "copy")
            if gen_init == "copy":
                gen_layers = int(cfg.gen_layers or default_gen_layers(int(bcfg["num_hidden_layers"])))
        elif cfg.gen_init or cfg.gen_layers:
            raise DenkiError("--gen-init / --gen-layers apply to RTD (--objective electra) only")
        init_ident = {"init_from": {"path": init_rec["path"], "sha256": init_rec["sha256"]}, "gen_init": gen_init,
                      "gen_layers": gen_layers}
        if bundle_architecture(init_bundle)[0] == "bert" and cfg.objective in RTD_OBJECTIVES:
            raise DenkiError(f"{init_bundle}: a BERT has no replaced-token-detection discriminator; continue it "
                             "with --objective mlm")
    else:
        if not cfg.tokenizer:
            raise DenkiError("pretrain needs --tokenizer DIR (or --init-from BUNDLE, whose tokenizer it keeps)")
        if cfg.gen_init or cfg.gen_layers:
            raise DenkiError("--gen-init / --gen-layers go with --init-from")
        tok_dir = cfg.tokenizer
        tok = JapaneseTokenizer.load(cfg.tokenizer)
    planned = None  # the plan of a tiny ELECTRA from scratch: its default lr, --cls-contrast, --gen-temperature
    if init_bundle is None and cfg.size == "tiny" and cfg.objective == "electra" \
            and any(getattr(cfg, k) is None for k in TINY_RTD_LONG):
        d = electra_config(cfg.size, tok.vocab_size, max_position_embeddings=max(512, cfg.seq_len))
        planned = plan_steps(cfg, d, generator_config(d, cfg.gen_size), world)
        if main and long_tiny_rtd(cfg.size, cfg.objective, planned):
            # the options left unset, named as the CLI spells them (TINY_RTD_LONG's keys are PretrainConfig fields)
            chosen = [f"--{k.replace('_', '-')} {v:g}" for k, v in TINY_RTD_LONG.items() if getattr(cfg, k) is None]
            print(f"pretrain: a tiny ELECTRA run of {planned:,} steps (≥ {TINY_RTD_LONG_STEPS:,}) gets the long-run "
                  f"defaults {' '.join(chosen)} (experiments/cc1e14, experiments/anshead; give them to choose)",
                  file=sys.stderr)
    if cfg.cls_contrast is None:  # resolved once here: identity, model and bundle all see the value
        cfg = replace(cfg, cls_contrast=default_cls_contrast(cfg.size, cfg.objective, planned))
    if cfg.gen_temperature is None:
        cfg = replace(cfg, gen_temperature=default_gen_temperature(cfg.size, cfg.objective, planned))
    if cfg.disc_skip_special and cfg.objective not in RTD_OBJECTIVES:
        raise DenkiError("--disc-skip-special goes with a replaced-token-detection objective (electra*)")
    if cfg.cls_contrast and cfg.objective not in RTD_OBJECTIVES:
        raise DenkiError("--cls-contrast goes with a replaced-token-detection objective (electra*): it pairs the "
                         "generator's and the discriminator's views")
    if not (cfg.cls_contrast >= 0 and math.isfinite(cfg.cls_contrast)):
        raise DenkiError(f"--cls-contrast {cfg.cls_contrast}: give a weight ≥ 0")
    if not (cfg.gen_temperature > 0 and math.isfinite(cfg.gen_temperature)):
        raise DenkiError(f"--gen-temperature {cfg.gen_temperature}: give a temperature > 0")
    if cfg.gen_temperature != 1.0 and cfg.objective not in RTD_OBJECTIVES:
        raise DenkiError("--gen-temperature goes with a replaced-token-detection objective (electra*): MLM samples "
                         "nothing")
    shas = [file_sha256(p) for p in cfg.corpus]
    lr = cfg.lr if cfg.lr is not None else default_lr(lr_size, cfg.objective, planned)
    ident = _identity(cfg, shas, tok.fingerprint(), world, lr, cfg.warmup_steps, init_ident)
    _check_same_run(out, ident)

    summary_path = out / "summary.json"
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        if summary.get("finished"):
            if main:
                _ensure_bundle(out, summary, cfg)
                print(f"pretrain: {out} already finished ({summary['steps']} steps, {summary['flops']:.3g} FLOPs); "
                      f"bundle: {summary.get('bundle')}")
            return summary

    precision = resolve_precision(cfg.precision, device.type)
    if main:
        out.mkdir(parents=True, exist_ok=True)
        # "precision": the resolved one this (re)start trains and probes at (load_run_probe re-probes at it)
        atomic_write_json(out / "run.json", {"identity": ident, "corpus": [str(p) for p in cfg.corpus],
                                             "tokenizer_dir": str(tok_dir), "config": asdict(cfg),
                                             "init_from": init_rec, "precision": precision})
        copy_tokenizer(tok_dir, out / "tokenizer")
    # rank 0 tokenizes; the others then find the cache
    if main:
        cache = build_token_cache(cfg.corpus, tok, cfg.cache_dir, progress=cfg.progress, corpus_shas=shas)
    _barrier(world)
    if not main:
        cache = build_token_cache(cfg.corpus, tok, cfg.cache_dir, progress=False, corpus_shas=shas)
    data = PackedSequences(cache, cfg.seq_len, cls_id=tok.cls_id, pad_id=tok.pad_id, seed=cfg.seed)

    init_record = None
    if init_bundle is not None:
        from .init_from import build_from_bundle, model_config_for

        set_seed(cfg.seed)  # new heads (and a random generator) are initialised from it
        model, init_record = build_from_bundle(cfg.objective, init_bundle, gen_init=init_ident["gen_init"],
                                               gen_layers=init_ident["gen_layers"], gen_size=cfg.gen_size,
                                               disc_weight=cfg.disc_weight, mask_prob=cfg.mask_prob,
                                               share_embeddings=cfg.share_embeddings, dropout=cfg.dropout)
        rtd = cfg.objective in RTD_OBJECTIVES
        disc_cfg = model.discriminator.config if rtd else model.mlm.config
        gen_cfg = model.generator.config if rtd else None
        if cfg.seq_len > disc_cfg.max_position_embeddings:
            raise DenkiError(f"--seq-len {cfg.seq_len} exceeds the checkpoint's {disc_cfg.max_position_embeddings} "
                             "positions")
        model = model.to(device)
        model_config = model_config_for(model, cfg.objective, cfg.disc_weight, cfg.share_embeddings)
        # the bundle keeps the checkpoint's own dropout (not the fine-tuning preset's)
        model_config["export_dropout"] = {k: bcfg.get(k) for k in ("hidden_dropout_prob",
                                                                   "attention_probs_dropout_prob")}
        total_steps = plan_steps(cfg, disc_cfg, gen_cfg, world)
    else:
        # pretraining dropout (a bundle continued with --init-from takes it through build_from_bundle instead)
        drop = {} if cfg.dropout is None else {"hidden_dropout_prob": cfg.dropout,
                                               "attention_probs_dropout_prob": cfg.dropout}
        disc_cfg = electra_config(cfg.size, tok.vocab_size, max_position_embeddings=max(512, cfg.seq_len), **drop)
        gen_cfg = generator_config(disc_cfg, cfg.gen_size) if cfg.objective in RTD_OBJECTIVES else None
        # the early plan (tiny ELECTRA's defaults) counted the same FLOPs: dropout does not change them
        total_steps = planned if planned is not None else plan_steps(cfg, disc_cfg, gen_cfg, world)
        set_seed(cfg.seed)
        model = build_pretrainer(cfg.objective, disc_cfg, gen_cfg, cfg.disc_weight, cfg.mask_prob,
                                 share_embeddings=cfg.share_embeddings).to(device)
        model_config = {"disc": disc_cfg.to_dict(), "gen": gen_cfg.to_dict() if gen_cfg else None,
                        "objective": cfg.objective, "disc_weight": cfg.disc_weight,
                        "share_embeddings": cfg.share_embeddings}
    if cfg.cls_contrast:  # new parameters: before the optimizer is built and a checkpoint is loaded
        model.enable_cls_contrast(cfg.cls_contrast)
    if cfg.objective in RTD_OBJECTIVES:
        model.gen_temperature = float(cfg.gen_temperature)
    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else min(10000, max(1, total_steps // 10))
    optimizer = build_optimizer(model, lr, weight_decay=cfg.weight_decay, fused=device.type == "cuda",
                                eps=cfg.adam_eps)
    scheduler = warmup_linear_schedule(optimizer, warmup, total_steps)

    step, tokens, flops, wall_before = 0, 0, 0.0, 0.0
    last = ck.latest_checkpoint(out)
    if last is not None:
        state = ck.load_checkpoint(last, model, optimizer, scheduler)
        step, tokens, flops, wall_before = state["step"], state["tokens"], state["flops"], state["wall_s"]
        if main:
            _truncate_metrics(out / "metrics.jsonl", step)
            print(f"pretrain: resuming {out} from step {step} ({flops:.3g} FLOPs)")
    _barrier(world)

    if cfg.disc_skip_special:  # an RTD objective (checked above)
        model.skip_in_disc_loss((tok.cls_id, tok.sep_id))
    _use_fast_modules(model, cfg, device)
    train_model = model
    if world > 1 or _distributed():
        from torch.nn.parallel import DistributedDataParallel as DDP

        train_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    eager_model = train_model
    if cfg.compile:
        train_model = torch.compile(train_model, dynamic=True)

    split = ELECTRA_SPLIT if cfg.objective in RTD_OBJECTIVES else BERT_SPLIT
    special = (tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id)
    special += tuple(tok.vocab[t] for t in tok.settings.extra_tokens)  # a checkpoint's extra added tokens
    # random replacements skip the special tokens when they lead the vocabulary (denki's layout, and that of
    # the public Japanese BERTs); elsewhere they are drawn from the whole vocabulary
    first_regular = len(tok.special_ids) if tok.special_ids == tuple(range(len(tok.special_ids))) else 0

    def mask_fn(x):
        return mask_tokens(x, mask_prob=cfg.mask_prob, mask_id=tok.mask_id, special_ids=special,
                           vocab_size=tok.vocab_size, split=split, first_regular_id=first_regular)

    # health probe (pretrain/diagnostics.py): fixed batch, run at every checkpoint and at the end
    probe_ids = probe_batch(cache, cfg.seq_len, cls_id=tok.cls_id, pad_id=tok.pad_id).to(device)
    last_diag = None
    amp = torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else _null()
    metrics_path = out / "metrics.jsonl"

    def new_acc():
        return {"loss": 0.0, "mlm_loss": 0.0, "disc_loss": 0.0, **{k: 0 for k in _SUM_KEYS}}

    # the device's peak at this precision, for MFU (pretrain/speed.py: a data-sheet table for GPUs, a measured
    # matmul on CPUs), taken before the clock starts
    peak, peak_source = device_peak(device, precision)
    if peak is not None and world > 1:  # the FLOPs counted are every rank's: so is the peak
        peak, peak_source = peak * world, f"{world} × {peak_source}"
    flops_at_start, tokens_at_start = flops, tokens
    if main and peak is None:
        print(f"pretrain: no peak FLOP/s for MFU ({peak_source})", file=sys.stderr)
    acc, acc_steps, acc_tokens, t_interval, flops_interval = new_acc(), 0, 0, time.perf_counter(), flops
    t_start = time.perf_counter()
    last_row = None
    budget = f"/{cfg.max_flops:.3g}" if cfg.max_flops else ""
    bar = tqdm(total=total_steps, initial=step,
               desc=f"pretrain {cfg.objective}-{'init' if init_bundle is not None else cfg.size}",
               disable=not (main and cfg.progress), unit="step", dynamic_ncols=True)

    def save(step_now):
        ck.save_checkpoint(out, step_now, model, optimizer, scheduler, {
            "tokens": tokens, "flops": flops, "wall_s": wall_before + time.perf_counter() - t_start,
            "data_position": step_now, "model_config": model_config, "identity": ident}, keep=cfg.keep)

    def finished() -> bool:
        return step >= total_steps or (cfg.max_flops is not None and flops >= cfg.max_flops)

    model.train()
    # on a GPU the model's outputs are summed on the device and read back only when a line is logged, a checkpoint
    # saved or the run ends (a read-back waits for the GPU); the counts that decide FLOPs come from the host
    sync_each_step = _sync_each_step(device, world)
    dev_sum, first_unchecked = None, step + 1
    micro = cfg.micro_batch  # halved on an out-of-memory error
    while not finished():
        # the batch and its masks on the host: the masked positions (hence FLOPs) are known without the device
        ids = torch.from_numpy(data.batch(step, cfg.batch_size, rank, world))
        mk = mask_fn(ids)
        counts = [int(mk.positions.sum()), int((ids != tok.pad_id).sum())]  # masked, non-pad (this rank)
        while True:  # one batch; tried again, the same masks, after either of the two fallbacks below
            try:
                res = _forward_backward(train_model, amp, ids, mk, tok.pad_id, device, micro)
                break
            except torch.OutOfMemoryError:
                # the batch scaled to the device: fewer sequences per pass, gradients accumulated (same training)
                optimizer.zero_grad(set_to_none=True)
                micro = _smaller_micro_batch(micro or cfg.batch_size)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                print(f"pretrain: out of memory; continuing with --micro-batch {micro} (gradients of the "
                      f"{cfg.batch_size}-sequence batch accumulated)", file=sys.stderr)
            except Exception as e:  # noqa: BLE001 — a compiler failure of any kind: train on, uncompiled
                if train_model is eager_model:
                    raise
                print(f"pretrain: WARNING: torch.compile failed ({type(e).__name__}: {str(e)[:200]}); continuing "
                      "without --compile", file=sys.stderr)
                train_model = eager_model
                optimizer.zero_grad(set_to_none=True)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        keys = [k for k in (*_LOSS_KEYS, *_SUM_KEYS) if k in res]
        # float64: an interval's token counts can pass float32's exact integers (2^24) on a GPU
        vec = torch.stack([res[k].detach().double() for k in keys])
        dev_sum = vec if dev_sum is None else dev_sum + vec
        if world > 1:  # every rank's counts, so that FLOPs, tokens and the stopping step agree on all of them
            counts = _all_reduce(torch.tensor(counts, device=device), world).cpu().tolist()
        if sync_each_step:
            vals = _read_back(dev_sum, keys, world)
            dev_sum = None
            _stop_if_not_finite(vals, step + 1, step + 1, out, bar)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        flops += step_flops(cfg.objective, disc_cfg, gen_cfg, cfg.batch_size * world, cfg.seq_len, counts[0])
        tokens += counts[1]
        acc_steps += 1
        acc_tokens += counts[1]
        bar.update(1)
        # a step that logs, saves (and probes) or ends the run: the same on every rank
        boundary = (step % cfg.log_every == 0 or step % cfg.save_every == 0 or finished()
                    or (stop_after is not None and step >= stop_after))
        if sync_each_step:
            for k, v in vals.items():
                acc[k] = acc.get(k, 0) + v
        elif boundary:
            # the interval's sums, checked before anything is probed, logged or saved
            vals = _read_back(dev_sum, keys, world)
            dev_sum = None
            _stop_if_not_finite(vals, first_unchecked, step, out, bar)
            for k, v in vals.items():
                acc[k] = acc.get(k, 0) + v
            first_unchecked = step + 1
        diag = None
        if main and (step % cfg.save_every == 0 or finished()):
            with amp:
                diag = run_probe(model, probe_ids, pad_id=tok.pad_id, mask_fn=mask_fn)
            last_diag = diag
        if step % cfg.log_every == 0 or finished() or diag is not None:
            now = time.perf_counter()
            tok_s = acc_tokens / max(1e-9, now - t_interval)
            flops_s = (flops - flops_interval) / max(1e-9, now - t_interval)
            if "disc_loss" not in res:
                acc.pop("disc_loss", None)
                acc["n_replaced"] = None
            last_row = _metrics_line(step, tokens, flops, acc, acc_steps, scheduler.get_last_lr()[0], tok_s,
                                     wall_before + now - t_start, flops_s, peak)
            if diag is not None:
                last_row.update(diag)
            if main:
                with open(metrics_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(last_row) + "\n")
            speed = f"{tok_s:,.0f} tok/s {flops_s:.3g} FLOP/s" + (f" MFU {last_row['mfu']:.1%}" if peak else "")
            bar.set_postfix_str(f"loss {last_row['loss']:.3f} {speed} FLOPs {flops:.3g}{budget}")
            acc, acc_steps, acc_tokens, t_interval, flops_interval = new_acc(), 0, 0, time.perf_counter(), flops
        if main and (step % cfg.save_every == 0 or finished()):
            save(step)
            if not cfg.progress and last_row is not None:
                # no bar (background jobs, logs): one plain line per checkpoint instead
                d = f", disc AUC {diag['disc_auc']:.3f}" if diag and diag.get("disc_auc") is not None else ""
                d += f" R {diag['probe_recall']:.3f}" if d and diag.get("probe_recall") is not None else ""
                print(f"pretrain: step {step}/{total_steps}, FLOPs {flops:.3g}{budget}, loss {last_row['loss']:.3f}, "
                      f"gen_acc {last_row.get('gen_acc') or 0:.3f}{d}, {last_row['tokens_per_s']:,.0f} tok/s"
                      + (f" (MFU {last_row['mfu']:.1%})" if last_row.get("mfu") is not None else "")
                      + f", {wall_before + time.perf_counter() - t_start:.0f} s", flush=True)
        if stop_after is not None and step >= stop_after and not finished():
            bar.close()
            _barrier(world)
            return {"finished": False, "steps": step, "flops": flops, "tokens": tokens}
    bar.close()
    _barrier(world)
    wall = wall_before + time.perf_counter() - t_start
    rows = read_metrics(out) if main else []
    init_flops = init_rec.get("flops") if init_rec else None
    summary = {"finished": True, "objective": cfg.objective, "size": "init" if init_rec else cfg.size,
               "steps": step, "tokens": tokens, "flops": flops, "max_flops": cfg.max_flops, "wall_s": wall,
               "world_size": world, "precision": precision, "micro_batch": micro,
               # this session's speed (a resumed run: since the resume), against the device's peak
               "speed": _speed(flops - flops_at_start, tokens - tokens_at_start, time.perf_counter() - t_start,
                               peak, peak_source),
               "init_from": init_rec, "init_flops": init_flops,
               # pretraining FLOPs in the model, the checkpoint's included (unknown for an imported checkpoint)
               "total_flops": (flops + init_flops) if init_flops is not None else (None if init_rec else flops),
               "device": str(device), "final": rows[-1] if rows else last_row,
               "bundle": str(out / "bundle") if cfg.export else None, "checkpoint": str(ck.latest_checkpoint(out))}
    if main:
        summary["diagnostics"] = last_diag or last_diagnostics(rows)
        warning = verdict(summary["diagnostics"])
        summary["health_warning"] = warning
        if warning:
            print(f"pretrain: WARNING: {warning}", flush=True)
        plot_curves(rows, out / "curves.png", title=f"{cfg.objective} {cfg.size}: {out.name}")
        if cfg.export:
            gen = model.generator if init_rec and cfg.objective in RTD_OBJECTIVES else None
            export_bundle(model.export_model, out / "tokenizer", out / "bundle",
                          source=_source(cfg, shas, tok.fingerprint(), summary, init_record),
                          metrics=bundle_metrics(summary), dropout=model_config.get("export_dropout"),
                          generator=gen)
        atomic_write_json(summary_path, summary)
    _barrier(world)
    return summary


def _speed(flops: float, tokens: int, seconds: float, peak: float | None, peak_source: str) -> dict:
    fs = flops / max(seconds, 1e-9)
    return {"tokens_per_s": tokens / max(seconds, 1e-9), "flops_per_s": fs, "peak_flops": peak,
            "peak_source": peak_source, "mfu": mfu(fs, peak), "seconds": seconds}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _source(cfg: PretrainConfig, shas, tok_fp, summary, init_record: dict | None = None) -> dict:
    from denki.models.bundle.format import command_line

    init = {}
    if summary.get("init_from"):
        init = {"init_from": {**summary["init_from"], **(init_record or {})}, "init_flops": summary.get("init_flops"),
                "total_flops": summary.get("total_flops")}
    return {**init, "objective": cfg.objective, "size": summary.get("size", cfg.size),
            "corpus": [{"path": str(p), "sha256": s} for p, s in zip(cfg.corpus, shas)],
            "tokenizer": tok_fp, "seed": cfg.seed, "steps": summary["steps"], "tokens": summary["tokens"],
            "flops": summary["flops"], "max_flops": cfg.max_flops, "batch_size": cfg.batch_size,
            "seq_len": cfg.seq_len, "mask_prob": cfg.mask_prob,
            "gen_size": cfg.gen_size if cfg.objective in RTD_OBJECTIVES else None,
            "disc_weight": cfg.disc_weight if cfg.objective in RTD_OBJECTIVES else None,
            "embeddings": ("shared" if cfg.share_embeddings else "separate") if cfg.objective in RTD_OBJECTIVES
            else None, "disc_skip_special": bool(cfg.disc_skip_special) if cfg.objective in RTD_OBJECTIVES else None,
            "adam_eps": cfg.adam_eps, "cls_contrast": cfg.cls_contrast or None,
            "gen_temperature": cfg.gen_temperature if cfg.objective in RTD_OBJECTIVES else None,
            "pretrain_dropout": cfg.dropout, "command": command_line()}


def _ensure_bundle(out: Path, summary: dict, cfg: PretrainConfig) -> None:
    """A finished run whose bundle is missing or damaged is exported again from its last checkpoint."""
    from denki.models.bundle.format import verify_bundle

    from .export import export_from_checkpoint

    if not cfg.export:
        return
    bundle = out / "bundle"
    try:
        verify_bundle(bundle, kinds=("pretrained",))
        return
    except DenkiError:
        pass
    last = ck.latest_checkpoint(out)
    if last is None:
        raise DenkiError(f"{out}: finished run without a checkpoint; cannot re-export the bundle")
    print(f"pretrain: bundle missing or damaged; exporting again from {last}")
    export_from_checkpoint(last, bundle)


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


def spawn_local(cfg: PretrainConfig, world: int, port: int = 29533) -> None:
    """Run ``cfg`` as ``world`` local CPU processes on the gloo backend (what torchrun does, for tests)."""
    import torch.multiprocessing as mp

    mp.spawn(_spawn_worker, args=(world, port, asdict(cfg)), nprocs=world, join=True)
