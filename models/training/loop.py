"""Small, shared pieces of every training loop: seeds, device, AdamW with layer-wise LR decay, warmup schedule.

Torch is imported here; ``serve/`` never imports this module.
"""
from __future__ import annotations

import random

import numpy as np
import torch


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device(name: str = "auto") -> torch.device:
    """``auto`` → CUDA when available, else CPU; ``cuda`` without a GPU is a clear error."""
    from denki.models.io.errors import DenkiError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise DenkiError("--device cuda was requested but no CUDA GPU is available to torch")
    return torch.device(name)


def _layer_id(name: str, num_layers: int) -> int:
    """0 = embeddings, 1..L = encoder layers, L+1 = everything above the encoder (heads)."""
    if ".embeddings." in name or name.startswith("embeddings.") or "embeddings_project" in name:
        return 0
    if ".layer." in name:
        return int(name.split(".layer.")[1].split(".")[0]) + 1
    return num_layers + 1


def build_optimizer(model: torch.nn.Module, lr: float, *, weight_decay: float = 0.01, layer_decay: float = 1.0,
                    num_layers: int | None = None, fused: bool | None = None,
                    eps: float | None = None) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases/LayerNorm; with ``layer_decay < 1`` layer ``i`` of ``L`` gets
    ``lr * layer_decay ** (L + 1 - i)`` (official ELECTRA fine-tuning uses 0.8). ``eps``: Adam's ε (None: torch's
    1e-8)."""
    if num_layers is None:
        num_layers = getattr(getattr(model, "config", None), "num_hidden_layers", 0)
    groups: dict[tuple[int, bool], list] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        no_decay = p.ndim < 2 or "LayerNorm" in name or name.endswith(".bias")
        lid = _layer_id(name, num_layers) if layer_decay != 1.0 else num_layers + 1
        groups.setdefault((lid, no_decay), []).append(p)
    param_groups = [{"params": ps, "weight_decay": 0.0 if nd else weight_decay,
                     "lr": lr * layer_decay ** (num_layers + 1 - lid)} for (lid, nd), ps in sorted(groups.items())]
    for g in param_groups:
        g["initial_lr"] = g["lr"]
    if fused is None:
        fused = any(p.is_cuda for g in param_groups for p in g["params"])
    return torch.optim.AdamW(param_groups, lr=lr, fused=fused, **({} if eps is None else {"eps": eps}))


def warmup_linear_schedule(optimizer, warmup_steps: int, total_steps: int):
    """Linear warmup to the peak LR, then linear decay to 0 (BERT/ELECTRA)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def median_index(values: list[float]) -> int:
    """Index of the median element (lower median for even counts) — used to keep the median-seed model."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    return order[(len(values) - 1) // 2]

