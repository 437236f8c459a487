"""How fast pretraining runs against what the hardware can do: FLOP/s and MFU (model FLOPs utilisation).

MFU = the run's counted training FLOPs per second (pretrain.flops, generator included) / the device's peak at the
precision used. The peak:

* CUDA: a table of dense (no sparsity) tensor-core peaks of known GPUs, by name, per precision (vendor data sheets);
  an unknown GPU has no peak (MFU is then None, said once);
* CPU: *measured* — the median rate of a square matmul (1024³) at the run's precision on the run's torch threads,
  taken once at the start of the run (~0.2 s). It is what this core (or these cores) reach on a large GEMM, so MFU
  says how much of that the small-matrix model work keeps.
"""
from __future__ import annotations

import statistics
import time

import torch

#: dense peak FLOP/s by GPU name fragment (first match wins), bf16 tensor cores and fp32 (non-tensor-core)
GPU_PEAKS = (
    ("H200", {"bf16": 989e12, "fp32": 67e12}),
    ("H100", {"bf16": 989e12, "fp32": 67e12}),   # SXM; the PCIe card is lower (756 / 51): a conservative MFU there
    ("A100", {"bf16": 312e12, "fp32": 19.5e12}),
    ("L40S", {"bf16": 362e12, "fp32": 91.6e12}),
    ("L4", {"bf16": 121e12, "fp32": 30.3e12}),
    ("A10", {"bf16": 125e12, "fp32": 31.2e12}),
    ("4090", {"bf16": 165e12, "fp32": 82.6e12}),
)


def gpu_peak(name: str, precision: str) -> float | None:
    for frag, peaks in GPU_PEAKS:
        if frag in name:
            return peaks.get(precision)
    return None


def measured_matmul_peak(precision: str, n: int = 1024, reps: int = 5) -> float:
    """FLOP/s of an ``n × n`` by ``n × n`` matmul on the CPU at ``precision``, on torch's current threads (median of
    ``reps`` after one warm-up)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    g = torch.Generator().manual_seed(0)  # its own generator: the run's RNG stream (resume = identical) is untouched
    a = torch.randn(n, n, generator=g).to(dtype)
    b = torch.randn(n, n, generator=g).to(dtype)
    torch.mm(a, b)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / max(statistics.median(times), 1e-9)


def device_peak(device: torch.device, precision: str) -> tuple[float | None, str]:
    """``(peak FLOP/s or None, where it comes from)`` for MFU."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak = gpu_peak(name, precision)
        return peak, (f"{name} {precision} dense peak (data sheet)" if peak else f"{name}: not in the peak table")
    threads = torch.get_num_threads()
    return measured_matmul_peak(precision), f"measured 1024³ {precision} matmul, {threads} thread(s)"


def mfu(flops_per_s: float, peak: float | None) -> float | None:
    return flops_per_s / peak if peak else None
