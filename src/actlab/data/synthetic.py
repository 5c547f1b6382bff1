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

from actlab.device import resolve_device

# Streams of the same seed must not collide: inputs, evaluation set, model inits.
_STREAM_OFFSETS = {"train": 0, "eval": 1, "teacher": 2, "student": 3}


def seed_generator(seed: int, stream: str, device: str | torch.device = "cpu") -> torch.Generator:
    """A generator for one named stream (``train``, ``eval``, ``teacher``, ``student``) of a seed.

    CPU by default: the stream every device reproduces. A CUDA generator with the same seed
    gives different numbers (a different algorithm), so it is used only where asked for.
    """
    if stream not in _STREAM_OFFSETS:
        raise ValueError(f"stream: must be one of {', '.join(_STREAM_OFFSETS)}, got {stream!r}")
    offset = 1_000_003 * int(seed) + 7919 * _STREAM_OFFSETS[stream]
    return torch.Generator(device=device).manual_seed(offset)


def gaussian_inputs(
    seeds: Sequence[int],
    n: int,
    dim: int,
    stream: str = "eval",
    dtype: torch.dtype = torch.float32,
    *,
    device: str | torch.device | None = None,
) -> Tensor:
    """A fixed ``(len(seeds), n, dim)`` standard-normal sample, one independent block per seed.

    Drawn from the seeds' CPU streams and moved to ``device`` (default: the unit's device),
    so every device sees the same numbers.
    """
    sample = torch.stack(
        [torch.randn(n, dim, generator=seed_generator(s, stream), dtype=dtype) for s in seeds]
    )
    return sample.to(resolve_device(device))


class GaussianStream:
    """Fresh ``(len(seeds), batch_size, dim)`` standard-normal batches, one generator per seed.

    Iterating yields a new batch each time (fresh inputs every step, as in the paper's
    teacher-student setup), on ``device`` (default: the unit's device). By default the
    numbers come from CPU generators and are moved, the same on every device;
    ``generate_on_device=True`` draws them with generators on ``device`` instead (no
    host-to-device copy per step, but other numbers than the CPU stream on an accelerator).
    """

    def __init__(
        self,
        seeds: Sequence[int],
        batch_size: int,
        dim: int,
        dtype: torch.dtype = torch.float32,
        *,
        device: str | torch.device | None = None,
        generate_on_device: bool = False,
    ) -> None:
        if batch_size < 1 or dim < 1:
            raise ValueError(f"batch_size and dim must be >= 1, got {batch_size}, {dim}")
        self.seeds = list(seeds)
        self.batch_size, self.dim, self.dtype = batch_size, dim, dtype
        self.device = resolve_device(device)
        self.generator_device = self.device if generate_on_device else torch.device("cpu")
        self._generators = [seed_generator(s, "train", self.generator_device) for s in self.seeds]

    def __iter__(self) -> GaussianStream:
        return self

    def __next__(self) -> Tensor:
        batch = torch.stack(
            [
                torch.randn(self.batch_size, self.dim, generator=g, dtype=self.dtype,
                            device=self.generator_device)
                for g in self._generators
            ]
        )
        return batch.to(self.device)


TargetFn = Callable[[Tensor], Tensor]


def soft_targets(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Class probabilities ``softmax(logits / T)`` over the last dimension (soft-target CE)."""
    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    return torch.softmax(logits / temperature, dim=-1)
