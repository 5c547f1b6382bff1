"""Per-step timing that means the same on every device.

On the CPU a step's cost is the CPU time of the training thread (``time.thread_time``), which
other jobs on a shared machine do not inflate. On CUDA the work runs asynchronously, so host
clocks measure launch time, not compute: :class:`StepClock` then records CUDA events on the
stream and reads their intervals once, at the end. Other devices use the wall clock.

Example::

    clock = StepClock(unit_device())
    clock.stamp()                       # before the first step
    train(model, x, y, settings, generator=g, callbacks=[clock.callback()])  # a stamp per step
    seconds = clock.intervals()         # one value per step

:func:`median_seconds` times a call with the device synchronised around it, and
:func:`measure_step` gives the throughput and memory of one training step.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from actlab.config import choose
from actlab.device import resolve_device
from actlab.train.callbacks import Callback
from actlab.train.loss_fn import Batch, LossFn, default_loss
from actlab.train.settings import DTYPES

__all__ = ["BLOCK", "StepClock", "measure_step", "median_seconds", "throughput"]

BLOCK = 5  # steps per timed block, as benchmarks/percentile.py's inner loop


class StepClock:
    """Stamps between steps; :meth:`intervals` gives the seconds between consecutive stamps.

    ``kind`` says what is measured: ``"thread_cpu"`` (CPU), ``"cuda_events"`` (CUDA) or
    ``"wall"`` (anything else).
    """

    def __init__(self, device: str | torch.device | None = None) -> None:
        self.device = resolve_device(device)
        if self.device.type == "cuda":
            self.kind = "cuda_events"
        elif self.device.type == "cpu":
            self.kind = "thread_cpu"
        else:
            self.kind = "wall"
        self._stamps: list = []

    def stamp(self) -> None:
        """Mark the boundary between two steps (no host synchronisation on CUDA)."""
        if self.kind == "cuda_events":
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            self._stamps.append(event)
        elif self.kind == "thread_cpu":
            self._stamps.append(time.thread_time())
        else:
            self._stamps.append(time.perf_counter())

    def callback(self) -> Callback:
        """A training callback that stamps after every update (it never reads the loss)."""
        return _StampEveryStep(self)

    def intervals(self) -> np.ndarray:
        """Seconds between consecutive stamps (waits for the device once on CUDA)."""
        if self.kind == "cuda_events":
            if self._stamps:
                self._stamps[-1].synchronize()
            return np.array([a.elapsed_time(b) / 1000.0
                             for a, b in zip(self._stamps, self._stamps[1:])])
        return np.diff(np.asarray(self._stamps, dtype=np.float64))


class _StampEveryStep(Callback):
    """Calls :meth:`StepClock.stamp` after every update."""

    def __init__(self, clock: StepClock) -> None:
        super().__init__(every=1)
        self.clock = clock

    def fires(self, step: int) -> bool:
        """After every update, not before training."""
        return step > 0

    def on_step(self, trainer: object, step: int, loss: object) -> None:
        """Stamp."""
        self.clock.stamp()


def throughput(step_times: np.ndarray, block: int = BLOCK) -> tuple[float, float]:
    """Steps/s (median over blocks of ``block`` steps, as ``benchmarks/percentile.py``) and its
    relative noise: half the relative difference between the two halves' rates."""
    step_times = np.asarray(step_times, dtype=np.float64)
    usable = len(step_times) // block * block
    blocks = step_times[:usable].reshape(-1, block).mean(1) if usable >= 2 * block else step_times
    rate = 1.0 / float(np.median(blocks))
    half = len(blocks) // 2
    if half == 0:
        return rate, math.nan
    first, second = 1.0 / np.median(blocks[:half]), 1.0 / np.median(blocks[half:])
    return rate, float(abs(first - second) / (first + second))


def measure_step(model: nn.Module, batch: Batch, loss_fn: LossFn = default_loss, *,
                 dtype: str = "float32", repeats: int = 5, warmup: int = 2) -> dict[str, float]:
    """Throughput and memory of one training step (forward, backward, AdamW update).

    ``tokens_per_s``: ``batch[0].numel()`` over the median wall time of ``repeats`` steps
    after ``warmup`` untimed ones. ``peak_bytes``: on CUDA the allocator's peak during a step;
    on CPU (no allocator statistics) parameters + gradients + AdamW's two moments plus the
    bytes of every distinct tensor autograd saves for backward (counted with
    ``torch.autograd.graph.saved_tensors_hooks``). The model is trained by these steps:
    pass a copy if it matters.
    """
    choose("dtype", dtype, DTYPES)
    device = next(model.parameters()).device
    if dtype == "float64":
        model.to(dtype=torch.float64)
    batch = tuple(t.to(device) for t in batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bfloat16"
                else contextlib.nullcontext())

    def one_step() -> None:
        with autocast:
            loss = loss_fn(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step_seconds = median_seconds(one_step, device, repeats, warmup)
    tokens_per_s = batch[0].numel() / step_seconds

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        one_step()
        peak = float(torch.cuda.max_memory_allocated(device))
    else:
        saved: dict[tuple[int, int], int] = {}
        weights = {p.untyped_storage().data_ptr() for p in model.parameters()}

        def pack(t: Tensor) -> Tensor:
            storage = t.untyped_storage()
            if storage.data_ptr() not in weights:  # parameters are counted once, below
                saved[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
            loss = loss_fn(model, batch)
        loss.backward()
        optimizer.zero_grad(set_to_none=True)
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        peak = float(4 * param_bytes + sum(saved.values()))
    return {"tokens_per_s": tokens_per_s, "peak_bytes": peak, "step_seconds": step_seconds}


def median_seconds(fn: Callable[[], Any], device: torch.device, repeats: int = 5,
                   warmup: int = 2) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` calls after ``warmup`` untimed ones,
    the device synchronised around each call (so CUDA work is inside the timing)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        begin = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - begin)
    times.sort()
    return times[len(times) // 2]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
