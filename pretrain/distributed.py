"""Data-parallel plumbing of a pretraining run: the process's rank and device, barriers and all-reduces that are
no-ops in a single process (:func:`pretrain.train.spawn_local` runs a run as local processes, for tests)."""
from __future__ import annotations

import os
import sys

import torch


def dist_env() -> tuple[int, int, int]:
    """``(rank, world size, local rank)`` as torchrun sets them (``(0, 1, 0)`` in a plain process)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0"))


def init_distributed(device_name: str):
    """``(rank, world, device)``; joins the process group under torchrun (NCCL on CUDA, gloo on CPUs)."""
    from denki.models.training.loop import pick_device

    rank, world, local = dist_env()
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


def distributed() -> bool:
    """Whether a process group is up."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def barrier(world: int) -> None:
    """Wait for every rank (nothing in a single process)."""
    if world > 1 or distributed():
        import torch.distributed as dist

        dist.barrier()


def all_reduce(t: torch.Tensor, world: int) -> torch.Tensor:
    """``t`` summed over ranks, in place (``t`` itself in a single process)."""
    if world > 1 or distributed():
        import torch.distributed as dist

        dist.all_reduce(t)
    return t
