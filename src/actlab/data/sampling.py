"""Seeded mini-batch orders over an in-memory dataset, as a function of the step number."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class EpochBatches:
    """``step -> indices``: epochs of a seeded permutation, the last partial batch dropped.

    Each epoch draws ``torch.randperm(n, generator=generator)`` when its first batch is asked
    for (all of ``n`` per batch when ``batch_size >= n``). Steps must be asked in order, so
    its state (:meth:`state_dict`) is what a checkpoint needs to resume the same order.
    """

    def __init__(self, n: int, batch_size: int, generator: torch.Generator) -> None:
        if n < 1 or batch_size < 1:
            raise ValueError(f"need n >= 1 and batch_size >= 1, got {n}, {batch_size}")
        self.n, self.batch_size, self.generator = n, min(batch_size, n), generator
        self.order: Tensor | None = None
        self.position = 0
        self.next_step = 0

    def __call__(self, step: int) -> Tensor:
        """The indices of batch ``step`` (0-based; asked in order)."""
        if step != self.next_step:
            raise ValueError(f"step: batches are drawn in order, expected {self.next_step}, "
                             f"got {step}")
        if self.order is None or self.position + self.batch_size > self.n:
            self.order = torch.randperm(self.n, generator=self.generator)
            self.position = 0
        idx = self.order[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        self.next_step += 1
        return idx

    def state_dict(self) -> dict[str, Any]:
        """Generator state, current permutation and position."""
        return {"generator": self.generator.get_state(), "order": self.order,
                "position": self.position, "next_step": self.next_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.generator.set_state(state["generator"])
        self.order, self.position = state["order"], int(state["position"])
        self.next_step = int(state["next_step"])
