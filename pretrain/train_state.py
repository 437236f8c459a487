"""A pretraining run's saved training state (what a killed run resumes from), without pickle: tensors in
safetensors, scalars and RNG states in JSON / uint8 tensors. (Not to be confused with a shipped model in
``checkpoints/``, :mod:`models.registry.checkpoints`: that is a bundle; this is a run's own resumable state, from which
``denki pretrain export`` can also write one.)

A training state is a directory ``OUT/checkpoints/step-00000123/`` (the folder's name is kept for existing runs)::

    model.safetensors      every parameter by name (deduplicated: shared/tied tensors appear once)
    optimizer.safetensors  AdamW state per parameter index (exp_avg, exp_avg_sq, step) + RNG states (uint8)
    state.json             step, data position, tokens, FLOPs, scheduler state, optimizer param groups,
                           python/numpy RNG states, run config — written last

It is built under ``step-….partial`` and renamed into place, so a kill at any moment leaves either the old
set of checkpoints or the old set plus one complete new one. Only the newest ``keep`` are kept.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json

STATE = "state.json"


def train_state_root(out_dir: str | os.PathLike) -> Path:
    """The folder of a run's training states, ``OUT/checkpoints``."""
    return Path(out_dir) / "checkpoints"


def list_train_states(out_dir: str | os.PathLike) -> list[Path]:
    """Complete training states (those with ``state.json``), oldest first."""
    root = train_state_root(out_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-")
             and not p.name.endswith(".partial") and (p / STATE).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def latest_train_state(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete training state of run ``out_dir`` (None before the first)."""
    cks = list_train_states(out_dir)
    return cks[-1] if cks else None


def _rng_tensors() -> dict[str, torch.Tensor]:
    out = {"rng.torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            out[f"rng.torch_cuda.{i}"] = s
    return out


def _rng_json() -> dict:
    st = np.random.get_state()
    py = random.getstate()
    return {"python": [py[0], list(py[1]), py[2]],
            "numpy": [st[0], st[1].tolist(), int(st[2]), int(st[3]), float(st[4])]}


def restore_rng(tensors: dict[str, torch.Tensor], js: dict) -> None:
    torch.set_rng_state(tensors["rng.torch_cpu"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.torch_cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[:torch.cuda.device_count()])
    py = js["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = js["numpy"]
    np.random.set_state((n[0], np.asarray(n[1], dtype=np.uint32), n[2], n[3], n[4]))


def model_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters by name, each shared tensor once (``named_parameters`` deduplicates)."""
    return {name: p.detach().cpu().contiguous() for name, p in model.named_parameters()}


def load_model_tensors(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(tensors))
    unexpected = sorted(set(tensors) - set(params))
    if missing or unexpected:
        raise DenkiError(f"checkpoint does not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(tensors[name].to(p.device, p.dtype))


def save_train_state(out_dir, step: int, model, optimizer, scheduler, state: dict, keep: int = 3) -> Path:
    """Write the training state of ``step`` atomically and prune to the newest ``keep``. ``state``: JSON-able
    scalars."""
    root = train_state_root(out_dir)
    final = root / f"step-{step:08d}"
    tmp = root / f"step-{step:08d}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_file(model_tensors(model), str(tmp / "model.safetensors"))

    opt_sd = optimizer.state_dict()
    opt_t: dict[str, torch.Tensor] = {}
    for idx, st in opt_sd["state"].items():
        for k, v in st.items():
            t = v if torch.is_tensor(v) else torch.tensor(v)
            opt_t[f"opt.{idx}.{k}"] = t.detach().cpu().contiguous()
    opt_t.update(_rng_tensors())
    save_file(opt_t, str(tmp / "optimizer.safetensors"))

    sched_sd = {k: v for k, v in scheduler.state_dict().items() if k != "lr_lambdas"}
    full = dict(state, step=step, scheduler=sched_sd, param_groups=opt_sd["param_groups"], rng=_rng_json())
    atomic_write_json(tmp / STATE, full)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_train_states(out_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_state(ckpt_dir: str | os.PathLike) -> dict:
    return json.loads((Path(ckpt_dir) / STATE).read_text(encoding="utf-8"))


def load_train_state(ckpt_dir, model, optimizer=None, scheduler=None, *, restore_rng_states: bool = True) -> dict:
    """Restore model (and optimizer, scheduler, RNG states when given/asked); return ``state.json``."""
    ckpt = Path(ckpt_dir)
    state = read_state(ckpt)
    load_model_tensors(model, load_file(str(ckpt / "model.safetensors")))
    opt_t = load_file(str(ckpt / "optimizer.safetensors"))
    if optimizer is not None:
        per: dict[int, dict] = {}
        for key, t in opt_t.items():
            if key.startswith("opt."):
                _, idx, name = key.split(".", 2)
                per.setdefault(int(idx), {})[name] = t
        optimizer.load_state_dict({"state": per, "param_groups": state["param_groups"]})
    if scheduler is not None:
        sd = dict(state["scheduler"], lr_lambdas=[None] * len(scheduler.lr_lambdas))
        scheduler.load_state_dict(sd)
    if restore_rng_states:
        restore_rng(opt_t, state["rng"])
    return state
