"""Where a unit computes and in what precision: the foundation every layer above reads.

**Placement.** The one place the engine and the data modules learn their device.

The runner runs each unit inside :func:`on_device` (``--device cpu|cuda|cuda:N``). The engine
(:class:`~actlab.train.loop.Trainer`, :class:`~actlab.train.ensemble.Ensemble`, the
evaluation helpers) and the data modules read :func:`unit_device` when no device is given,
so an experiment builds its models and data as on the CPU and never moves them itself.

Random data is drawn from seeded CPU generators and then moved (:func:`to_unit_device`), so a
unit sees the same numbers on every device and quick verdicts compare across devices.

Example::

    with on_device("cuda"):
        model = place(ResidualMLP(20, 80, 10))        # parameters on cuda
        x = to_unit_device(torch.randn(4, 20, generator=torch.Generator().manual_seed(0)))

**Precision.** On CUDA, full float32 unless a config asks for bf16.

Ampere and newer GPUs may run float32 matrix products and convolutions in TF32 (10-bit
mantissa). That is fine for throughput, but curvature (Lanczos on Hessian products),
theory-against-measurement comparisons and the CPU/CUDA equality tests need float32's
precision, so every unit runs with TF32 off. Reduced precision is opt-in and explicit:
``dtype="bfloat16"`` in a config runs forward passes under ``torch.autocast``.
:func:`precision_flags` is what ``env.json`` records, so a reader knows what was in force.

(``actlab.train.placement`` and ``actlab.train.precision``, where these lived before, re-export
them.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

__all__ = ["model_device", "move_batch", "on_device", "place", "precision_flags", "resolve_device",
           "to_model_device", "to_unit_device", "unit_device", "use_strict_float32"]

_UNIT_DEVICE: ContextVar[torch.device | None] = ContextVar("actlab_unit_device", default=None)
_CPU = torch.device("cpu")
ModuleT = TypeVar("ModuleT", bound=nn.Module)


def unit_device() -> torch.device:
    """The device of the unit running now (CPU outside :func:`on_device`)."""
    return _UNIT_DEVICE.get() or _CPU


@contextlib.contextmanager
def on_device(device: str | torch.device) -> Iterator[torch.device]:
    """Run the block with ``device`` as the unit's device; the previous one is restored."""
    where = torch.device(device)
    token = _UNIT_DEVICE.set(where)
    try:
        yield where
    finally:
        _UNIT_DEVICE.reset(token)


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` as a :class:`torch.device`; ``None`` (or ``""``) means :func:`unit_device`."""
    return unit_device() if device is None or device == "" else torch.device(device)


def place(module: ModuleT, device: str | torch.device | None = None) -> ModuleT:
    """``module`` with its parameters and buffers on ``device`` (default: the unit's)."""
    return module.to(resolve_device(device))


def move_batch(batch: Any, device: torch.device) -> Any:
    """``batch`` with its tensors on ``device``: a tensor, or a dict/tuple/list of them."""
    if isinstance(batch, Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: move_batch(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_batch(v, device) for v in batch)
    return batch


def to_unit_device(*tensors: Tensor, device: str | torch.device | None = None) -> Tensor | tuple[Tensor, ...]:
    """The tensors on ``device`` (default: the unit's); one tensor comes back as itself, not a tuple."""
    moved = move_batch(tensors, resolve_device(device))
    return moved[0] if len(moved) == 1 else moved


def model_device(model: nn.Module) -> torch.device:
    """Where ``model``'s first parameter (or buffer) lives; CPU for a module with neither."""
    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return torch.device("cpu")


def to_model_device(model: nn.Module, *tensors: Tensor) -> Tensor | tuple[Tensor, ...]:
    """The tensors moved to where ``model`` lives (for evaluation on data held on the CPU)."""
    return to_unit_device(*tensors, device=model_device(model))


def use_strict_float32() -> None:
    """Turn TF32 off for matrix products and cuDNN convolutions (process-wide)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def precision_flags() -> dict[str, Any]:
    """The precision switches in force now (TF32 for matmul and cuDNN, matmul precision)."""
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cuda_matmul_allow_bf16_reduced_precision_reduction": bool(
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        ),
    }
