"""Synthetic data: fresh Gaussian inputs per seed and targets from a fixed teacher.

Every seed owns its own ``torch.Generator``, so the batches seed ``s`` sees do not depend
on which other seeds train alongside it (an ensemble of seeds 0-7 and one of seed 3 alone
give seed 3 the same data). Paired conditions (unshifted/shifted students) get the same
batch by indexing the same ``(seeds, batch, dim)`` tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

# Streams of the same seed must not collide: inputs, evaluation set, model inits.
_STREAM_OFFSETS = {"train": 0, "eval": 1, "teacher": 2, "student": 3}


def seed_generator(seed: int, stream: str) -> torch.Generator:
    """A generator for one named stream (``train``, ``eval``, ``teacher``, ``student``) of a seed."""
    if stream not in _STREAM_OFFSETS:
        raise ValueError(f"stream: must be one of {', '.join(_STREAM_OFFSETS)}, got {stream!r}")
    return torch.Generator().manual_seed(1_000_003 * int(seed) + 7919 * _STREAM_OFFSETS[stream])


def gaussian_inputs(
    seeds: Sequence[int],
    n: int,
    dim: int,
    stream: str = "eval",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """A fixed ``(len(seeds), n, dim)`` standard-normal sample, one independent block per seed."""
    return torch.stack(
        [torch.randn(n, dim, generator=seed_generator(s, stream), dtype=dtype) for s in seeds]
    )


class GaussianStream:
    """Fresh ``(len(seeds), batch_size, dim)`` standard-normal batches, one generator per seed.

    Iterating yields a new batch each time (fresh inputs every step, as in the paper's
    teacher-student setup).
    """

    def __init__(
        self,
        seeds: Sequence[int],
        batch_size: int,
        dim: int,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if batch_size < 1 or dim < 1:
            raise ValueError(f"batch_size and dim must be >= 1, got {batch_size}, {dim}")
        self.seeds = list(seeds)
        self.batch_size, self.dim, self.dtype = batch_size, dim, dtype
        self._generators = [seed_generator(s, "train") for s in self.seeds]

    def __iter__(self) -> GaussianStream:
        return self

    def __next__(self) -> Tensor:
        return torch.stack(
            [
                torch.randn(self.batch_size, self.dim, generator=g, dtype=self.dtype)
                for g in self._generators
            ]
        )


TargetFn = Callable[[Tensor], Tensor]


def soft_targets(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Class probabilities ``softmax(logits / T)`` over the last dimension (soft-target CE)."""
    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    return torch.softmax(logits / temperature, dim=-1)
