"""The training loop of a pretraining run: one optimizer step per batch, and at its boundaries the health probe,
a ``metrics.jsonl`` line and a checkpoint (:class:`TrainingLoop`).

Each step: the batch of ``(seq, step)`` and its masks on the host (the masked positions, hence the FLOPs, are known
without the device) → forward/backward, in micro-batches where asked or where the device runs out of memory
(:func:`forward_backward`) → clip, optimizer and schedule step → counts. On a GPU the step's outputs are summed on
the device and read back only when a line is logged, a checkpoint saved or the run ends (a read-back waits for the
GPU); a NaN/inf loss stops the run naming the last good checkpoint.
"""
from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from denki.models.io.errors import DenkiError
from denki.models.training.precision import autocast

from . import train_state
from .diagnostics import run_probe
from .distributed import all_reduce, barrier
from .flops import step_flops
from .speed import device_peak, mfu

_SUM_KEYS = ("n_masked", "gen_correct", "n_nonpad", "n_judged", "n_replaced", "disc_correct", "disc_tp",
             "disc_pred_pos", "disc_mlm_correct", "cls_correct", "n_seqs")
#: per-step mean losses a pretrainer may return (all-reduced, then averaged over ranks)
_LOSS_KEYS = ("loss", "mlm_loss", "disc_loss", "disc_mlm_loss", "cls_loss")


@dataclass
class Progress:
    """Where a run stands: optimizer steps done, tokens and training FLOPs spent, wall seconds of earlier sessions
    (a resumed run's, from its checkpoint)."""
    step: int = 0
    tokens: int = 0
    flops: float = 0.0
    wall_before: float = 0.0


# ------------------------------------------------------------------------------------------------ one batch
def forward_backward(train_model, amp, ids, mk, pad_id: int, device, micro: int | None = None) -> dict:
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
    vals = dict(zip(keys, all_reduce(dev_sum, world).cpu().tolist()))
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
                     f"{train_state.latest_train_state(out) or '(none yet)'}; lower --lr or check the data, then "
                     "re-run to resume from it")


# ------------------------------------------------------------------------------------------------ metrics
def metrics_line(step, tokens, flops, acc: dict, n_steps: int, lr: float, tok_s: float, wall: float,
                 flops_s: float = 0.0, peak: float | None = None) -> dict:
    """One ``metrics.jsonl`` line from an interval's sums ``acc`` over ``n_steps`` steps."""
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


def _new_acc() -> dict:
    return {"loss": 0.0, "mlm_loss": 0.0, "disc_loss": 0.0, **{k: 0 for k in _SUM_KEYS}}


class _Interval:
    """The sums since the last logged line (losses, counts, tokens, time, FLOPs)."""

    def __init__(self, flops: float):
        self.acc, self.steps, self.tokens, self.t0, self.flops0 = _new_acc(), 0, 0, time.perf_counter(), flops

    def add(self, vals: dict[str, float]) -> None:
        for k, v in vals.items():
            self.acc[k] = self.acc.get(k, 0) + v


# ------------------------------------------------------------------------------------------------ the loop
class TrainingLoop:
    """The steps of one session of a run, from ``progress`` until the plan (``total_steps``) or ``--max-flops`` is
    reached, or until ``stop_after`` (tests: as if the process were killed there). Afterwards the attributes hold
    what the summary reports: ``progress``, ``micro`` (the micro-batch the run ended with), ``last_row``,
    ``last_diag``, ``peak`` / ``peak_source`` and the session's start (``t_start``, ``start``)."""

    def __init__(self, *, cfg, out: Path, model, train_model, eager_model, optimizer, scheduler, data, mask_fn,
                 probe_ids, pad_id: int, disc_cfg, gen_cfg, total_steps: int, progress: Progress, device,
                 precision: str, rank: int, world: int, init_run: bool, save):
        self.cfg, self.out, self.model, self.train_model, self.eager_model = cfg, out, model, train_model, eager_model
        self.optimizer, self.scheduler, self.data, self.mask_fn, self.probe_ids = (optimizer, scheduler, data,
                                                                                   mask_fn, probe_ids)
        self.pad_id, self.disc_cfg, self.gen_cfg, self.total_steps = pad_id, disc_cfg, gen_cfg, total_steps
        self.progress, self.device, self.precision, self.rank, self.world = progress, device, precision, rank, world
        self.main = rank == 0
        self.save_fn = save
        self.amp = autocast(precision, device.type)
        self.micro = cfg.micro_batch  # halved on an out-of-memory error
        self.last_row = self.last_diag = None
        self.peak, self.peak_source = self._device_peak()
        self.start = Progress(**vars(progress))
        self.interval = _Interval(progress.flops)
        self.t_start = time.perf_counter()
        budget = f"/{cfg.max_flops:.3g}" if cfg.max_flops else ""
        self.budget = budget
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total_steps, initial=progress.step,
                        desc=f"pretrain {cfg.objective}-{'init' if init_run else cfg.size}",
                        disable=not (self.main and cfg.progress), unit="step", dynamic_ncols=True)

    def _device_peak(self):
        """The device's peak at this precision, for MFU (pretrain/speed.py: a data-sheet table for GPUs, a measured
        matmul on CPUs), taken before the clock starts; every rank's when the FLOPs counted are."""
        peak, source = device_peak(self.device, self.precision)
        if peak is not None and self.world > 1:
            peak, source = peak * self.world, f"{self.world} × {source}"
        if self.main and peak is None:
            print(f"pretrain: no peak FLOP/s for MFU ({source})", file=sys.stderr)
        return peak, source

    def wall(self) -> float:
        """Wall seconds of the whole run so far (earlier sessions included)."""
        return self.progress.wall_before + time.perf_counter() - self.t_start

    def finished(self) -> bool:
        p = self.progress
        return p.step >= self.total_steps or (self.cfg.max_flops is not None and p.flops >= self.cfg.max_flops)

    def run(self, stop_after: int | None = None) -> bool:
        """Train until finished (True) or until ``stop_after`` (False)."""
        cfg, p = self.cfg, self.progress
        self.model.train()
        sync_each_step = _sync_each_step(self.device, self.world)
        dev_sum, first_unchecked = None, p.step + 1
        while not self.finished():
            ids = torch.from_numpy(self.data.batch(p.step, cfg.batch_size, self.rank, self.world))
            mk = self.mask_fn(ids)
            counts = [int(mk.positions.sum()), int((ids != self.pad_id).sum())]  # masked, non-pad (this rank)
            res = self._train_batch(ids, mk)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            keys = [k for k in (*_LOSS_KEYS, *_SUM_KEYS) if k in res]
            # float64: an interval's token counts can pass float32's exact integers (2^24) on a GPU
            vec = torch.stack([res[k].detach().double() for k in keys])
            dev_sum = vec if dev_sum is None else dev_sum + vec
            if self.world > 1:  # every rank's counts, so that FLOPs, tokens and the stopping step agree on all
                counts = all_reduce(torch.tensor(counts, device=self.device), self.world).cpu().tolist()
            if sync_each_step:
                vals = _read_back(dev_sum, keys, self.world)
                dev_sum = None
                _stop_if_not_finite(vals, p.step + 1, p.step + 1, self.out, self.bar)
            self._optimizer_step(counts)
            # a step that logs, saves (and probes) or ends the run: the same on every rank
            boundary = (p.step % cfg.log_every == 0 or p.step % cfg.save_every == 0 or self.finished()
                        or (stop_after is not None and p.step >= stop_after))
            if sync_each_step:
                self.interval.add(vals)
            elif boundary:
                # the interval's sums, checked before anything is probed, logged or saved
                vals = _read_back(dev_sum, keys, self.world)
                dev_sum = None
                _stop_if_not_finite(vals, first_unchecked, p.step, self.out, self.bar)
                self.interval.add(vals)
                first_unchecked = p.step + 1
            self._log_probe_save(res)
            if stop_after is not None and p.step >= stop_after and not self.finished():
                self.bar.close()
                barrier(self.world)
                return False
        self.bar.close()
        barrier(self.world)
        return True

    def _train_batch(self, ids, mk) -> dict:
        """Forward/backward of one batch; tried again, with the same masks, after either fallback: fewer sequences
        per pass after an out-of-memory error, or eager after a torch.compile failure."""
        while True:
            try:
                return forward_backward(self.train_model, self.amp, ids, mk, self.pad_id, self.device, self.micro)
            except torch.OutOfMemoryError:
                # the batch scaled to the device: fewer sequences per pass, gradients accumulated (same training)
                self.optimizer.zero_grad(set_to_none=True)
                self.micro = _smaller_micro_batch(self.micro or self.cfg.batch_size)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                print(f"pretrain: out of memory; continuing with --micro-batch {self.micro} (gradients of the "
                      f"{self.cfg.batch_size}-sequence batch accumulated)", file=sys.stderr)
            except Exception as e:  # noqa: BLE001 — a compiler failure of any kind: train on, uncompiled
                if self.train_model is self.eager_model:
                    raise
                print(f"pretrain: WARNING: torch.compile failed ({type(e).__name__}: {str(e)[:200]}); continuing "
                      "without --compile", file=sys.stderr)
                self.train_model = self.eager_model
                self.optimizer.zero_grad(set_to_none=True)

    def _optimizer_step(self, counts: list[int]) -> None:
        """Step the optimizer and the schedule; count the step's tokens and FLOPs (``counts``: masked, non-pad)."""
        cfg, p = self.cfg, self.progress
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        p.step += 1
        p.flops += step_flops(cfg.objective, self.disc_cfg, self.gen_cfg, cfg.batch_size * self.world, cfg.seq_len,
                              counts[0])
        p.tokens += counts[1]
        self.interval.steps += 1
        self.interval.tokens += counts[1]
        self.bar.update(1)

    def _log_probe_save(self, res: dict) -> None:
        """At a checkpoint step (and the last): the health probe; at a log step (or a probed one): a metrics line;
        then the checkpoint."""
        cfg, p = self.cfg, self.progress
        checkpoint_step = p.step % cfg.save_every == 0 or self.finished()
        diag = None
        if self.main and checkpoint_step:
            with self.amp:
                diag = run_probe(self.model, self.probe_ids, pad_id=self.pad_id, mask_fn=self.mask_fn)
            self.last_diag = diag
        if p.step % cfg.log_every == 0 or self.finished() or diag is not None:
            self._log_line(res, diag)
        if self.main and checkpoint_step:
            self.save_fn(p.step, self.wall())
            if not cfg.progress and self.last_row is not None:
                print(self._checkpoint_line(diag), flush=True)

    def _log_line(self, res: dict, diag: dict | None) -> None:
        """Write the interval's ``metrics.jsonl`` line (rank 0), show it on the bar, start a new interval."""
        p, iv = self.progress, self.interval
        now = time.perf_counter()
        tok_s = iv.tokens / max(1e-9, now - iv.t0)
        flops_s = (p.flops - iv.flops0) / max(1e-9, now - iv.t0)
        if "disc_loss" not in res:
            iv.acc.pop("disc_loss", None)
            iv.acc["n_replaced"] = None
        row = metrics_line(p.step, p.tokens, p.flops, iv.acc, iv.steps, self.scheduler.get_last_lr()[0], tok_s,
                           p.wall_before + now - self.t_start, flops_s, self.peak)
        if diag is not None:
            row.update(diag)
        if self.main:
            with open(self.out / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        speed = f"{tok_s:,.0f} tok/s {flops_s:.3g} FLOP/s" + (f" MFU {row['mfu']:.1%}" if self.peak else "")
        self.bar.set_postfix_str(f"loss {row['loss']:.3f} {speed} FLOPs {p.flops:.3g}{self.budget}")
        self.last_row = row
        self.interval = _Interval(p.flops)

    def _checkpoint_line(self, diag: dict | None) -> str:
        """No bar (background jobs, logs): one plain line per checkpoint instead."""
        p, row = self.progress, self.last_row
        d = f", disc AUC {diag['disc_auc']:.3f}" if diag and diag.get("disc_auc") is not None else ""
        d += f" R {diag['probe_recall']:.3f}" if d and diag.get("probe_recall") is not None else ""
        return (f"pretrain: step {p.step}/{self.total_steps}, FLOPs {p.flops:.3g}{self.budget}, loss "
                f"{row['loss']:.3f}, gen_acc {row.get('gen_acc') or 0:.3f}{d}, {row['tokens_per_s']:,.0f} tok/s"
                + (f" (MFU {row['mfu']:.1%})" if row.get("mfu") is not None else "")
                + f", {self.wall():.0f} s")
