"""Data-parallel training helpers: process-group setup, DDP wrapping, reductions.

Launch with ``torchrun --nproc_per_node N -m actlab.recipes.language_model ...``: torchrun
sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous address, and
:func:`init_distributed` picks ``gloo`` on CPU and ``nccl`` on CUDA. Without those variables
everything runs in one process and every helper here is a no-op. Tests and notebooks may
pass ``rank``, ``world_size`` and an ``init_method`` (e.g. ``file://...``) instead of
environment variables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistInfo:
    """Where this process stands: its rank among ``world_size`` and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def distributed(self) -> bool:
        """True when more than one process trains together."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0 (the process that writes files and prints)."""
        return self.rank == 0


def init_distributed(device: str = "auto", *, rank: int | None = None,
                     world_size: int | None = None, init_method: str | None = None,
                     backend: str | None = None) -> DistInfo:
    """Join the process group when launched by torchrun (or given ``rank``/``world_size``).

    ``device`` is ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``; with CUDA each
    process uses ``cuda:LOCAL_RANK``. ``backend`` defaults to ``nccl`` on CUDA, ``gloo`` on CPU.
    """
    rank = int(os.environ.get("RANK", 0)) if rank is None else rank
    world_size = int(os.environ.get("WORLD_SIZE", 1)) if world_size is None else world_size
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        where = torch.device("cuda", local_rank)
    else:
        where = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend or ("nccl" if device == "cuda" else "gloo"),
                                init_method=init_method, rank=rank, world_size=world_size)
    return DistInfo(rank, world_size, local_rank, where)


def wrap_model(model: nn.Module, info: DistInfo) -> nn.Module:
    """``DistributedDataParallel(model)`` when distributed, else ``model`` itself."""
    if not info.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [info.local_rank] if info.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module inside DDP or ``torch.compile`` wrappers."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None:
            return model
        model = inner


def all_reduce_mean(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Mean of ``value`` over all processes (``value`` itself when not distributed)."""
    if not info.distributed:
        return value
    value = value.clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / info.world_size


def all_reduce_sum(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum of ``value`` over all processes, returned where ``value`` was (``value`` itself
    when not distributed). The collective runs on the process's device (NCCL needs CUDA
    tensors), so host-side statistics (float64 on the CPU) can be merged on any backend."""
    if not info.distributed:
        return value
    moved = value.detach().to(info.device, copy=True)
    dist.all_reduce(moved, op=dist.ReduceOp.SUM)
    return moved.to(value.device)


def rank_slice(n: int, info: DistInfo) -> slice:
    """This rank's contiguous part of ``n`` items, the parts as equal as they can be
    (``torch.tensor_split``'s), for measurements whose sums are merged across ranks."""
    base, extra = divmod(n, info.world_size)
    start = info.rank * base + min(info.rank, extra)
    return slice(start, start + base + (info.rank < extra))


def shard(batch: tuple[torch.Tensor, ...], info: DistInfo) -> tuple[torch.Tensor, ...]:
    """This rank's contiguous slice (along dim 0) of a global batch.

    Every rank draws the same global batch and keeps its slice, so N processes see exactly
    the examples one process would, and averaging their gradients gives the same update.
    """
    if not info.distributed:
        return batch
    size = batch[0].shape[0]
    if size % info.world_size:
        raise ValueError(f"global batch {size} is not divisible by world size {info.world_size}")
    per = size // info.world_size
    return tuple(t[info.rank * per:(info.rank + 1) * per] for t in batch)


def cleanup() -> None:
    """Leave the process group if one was joined, after every rank has got here.

    Without the barrier a rank that finishes first tears down its gloo connections while a
    peer is still using them, and the peer can abort ("terminate called without an active
    exception"). A peer that never arrives (it crashed) makes the barrier time out after a
    minute; the group is left anyway.
    """
    if not dist.is_initialized():
        return
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=timedelta(seconds=60))
        else:
            dist.barrier()
    except Exception:  # a missing peer: still leave the group
        pass
    dist.destroy_process_group()
