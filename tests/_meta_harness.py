"""Run code on the ``meta`` device to find device bugs without a GPU.

Mixing ``meta`` and ``cpu`` tensors in one operation raises the same "Expected all tensors to
be on the same device" error as mixing ``cuda`` and ``cpu``. Whole units can run on ``meta``
once the places where code reads values back are given placeholders:

* ``float(t)`` / ``t.item()`` of a meta tensor returns a fixed placeholder (0.5, 0, False);
* copies of a meta tensor to the CPU (``t.cpu()``, ``t.tolist()``, ``cpu_tensor.copy_(t)``)
  give zeros.

The mode also counts heavy operations (matrix products, convolutions) per device, so a test
can assert that a unit's work really ran on the unit's device, and records every random
operation whose generator lives on another device than its tensors (``meta`` accepts that
silently, CUDA does not).
"""

from __future__ import annotations

import collections
import traceback
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

META = torch.device("meta")
HEAVY_OPS = {"mm", "addmm", "bmm", "baddbmm", "convolution", "linear", "matmul",
             "_scaled_dot_product_flash_attention_for_cpu"}


def _actlab_frames(limit: int = 3) -> str:
    frames = [f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}" for f in traceback.extract_stack()
              if "/actlab/" in f.filename]
    return " < ".join(reversed(frames[-limit:]))


class MetaReads(TorchDispatchMode):
    """Dispatch mode: placeholder reads of meta tensors; heavy-op and generator bookkeeping."""

    def __init__(self) -> None:
        super().__init__()
        self.heavy: collections.Counter[str] = collections.Counter()
        self.heavy_on_cpu: collections.Counter[str] = collections.Counter()
        self.generator_mismatches: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None) -> Any:
        kwargs = kwargs or {}
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        name = func.__name__.split(".")[0]
        if name in HEAVY_OPS:
            device = tensors[0].device.type if tensors else "cpu"
            self.heavy[device] += 1
            if device == "cpu":
                self.heavy_on_cpu[_actlab_frames()] += 1
        generator = kwargs.get("generator")
        if isinstance(generator, torch.Generator):
            target = kwargs.get("device") or (tensors[0].device if tensors else None)
            if target is not None and torch.device(target).type != generator.device.type:
                self.generator_mismatches.append(f"{func}: generator on {generator.device}, "
                                                 f"tensors on {target} ({_actlab_frames()})")
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device == META:
            if args[0].dtype == torch.bool:
                return False
            return 0.5 if args[0].is_floating_point() else 0
        if func is torch.ops.aten._to_copy.default and args[0].device == META:
            target = kwargs.get("device")
            if target is not None and torch.device(target).type == "cpu":
                return torch.zeros(args[0].shape, dtype=kwargs.get("dtype") or args[0].dtype)
        if (func is torch.ops.aten.copy_.default and args[1].device == META
                and args[0].device.type == "cpu"):
            return args[0]
        return func(*args, **kwargs)
