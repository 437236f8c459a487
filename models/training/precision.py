"""The autocast precision of a training step, shared by pretraining (``denki pretrain --precision``) and QA
fine-tuning (``denki finetune qa --precision``): which CPUs do bf16 matrix work natively, what ``auto`` resolves to,
and the autocast context of a resolved precision. Master weights, the optimizer and the saved bundle stay fp32.

Torch is imported inside :func:`autocast`.
"""
from __future__ import annotations

import contextlib
import sys

from denki.models.io.errors import DenkiError

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


def resolve_precision(precision: str, device_type: str, *, who: str = "pretrain") -> str:
    """``auto`` → bf16 on CUDA and on CPUs with native bf16 (:func:`cpu_bf16_flags`), fp32 elsewhere (bf16 measured
    against fp32: docs/pretrain.md). ``bf16`` on a CPU without native bf16 runs, emulated and slower, with a
    warning that starts with ``who``."""
    if precision not in PRECISIONS:
        raise DenkiError(f"--precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if precision == "auto":
        return "bf16" if device_type == "cuda" or (device_type == "cpu" and cpu_bf16_flags()) else "fp32"
    if precision == "bf16" and device_type == "cpu" and not cpu_bf16_flags():
        print(f"{who}: WARNING: --precision bf16 on a CPU without avx512_bf16/amx_bf16 is emulated (slower than "
              "fp32)", file=sys.stderr)
    return precision


def autocast(precision: str, device_type: str):
    """The context a forward (and its loss) runs in: bf16 autocast for ``bf16``, nothing for ``fp32``. The backward
    runs outside it, as torch advises."""
    if precision != "bf16":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type, dtype=torch.bfloat16)
