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
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from actlab.train.callbacks import Callback
from actlab.train.placement import resolve_device

__all__ = ["BLOCK", "StepClock", "throughput"]

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
