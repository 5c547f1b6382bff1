"""Two interleaved noisy spirals, a small 2-d binary classification task generated from a seed.

The handbook page on activations and initialization trains its deep networks on "two noisy
interleaved spirals" but does not give its generator, so actlab fixes one here and states it:

* class ``k`` (0 or 1) gets half of the points;
* a point draws ``s`` uniformly from ``[0, 1]``; its angle is ``theta = 2 pi turns s + k pi``
  and its radius ``s`` (so each arm winds ``turns`` times around the origin and reaches
  radius 1; the second arm is the first one rotated by half a turn);
* independent Gaussian noise of standard deviation ``noise`` (in units of the outer radius)
  is added to both coordinates;
* ``scale="unit"`` (the default) then divides both coordinates by the exact root expected
  second moment of a coordinate, ``sqrt(E[s^2] / 2 + noise^2) = sqrt(1/6 + noise^2)``, so the
  inputs have second moment 1 per coordinate, the assumption under which the variance
  recursion and the He / Xavier rules are derived (and what the handbook recommends when it
  says to standardize the inputs). ``scale="radius"`` keeps the raw radius-1 coordinates.

The scale is an analytic constant, not a statistic of the sample, so training and test sets
drawn with different seeds share it exactly. The input scale matters for deep networks at
an under-scaled initialization (ReLU and SiLU stacks without biases are close to positively
homogeneous, so their output scales with the input); experiments record which one they use.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from actlab.errors import ConfigError

SpiralScale = Literal["unit", "radius"]


# Offset between data seeds and model seeds: a data set and a network built from the same
# small integer must not draw from the same random stream (the first weights would then be
# a function of the data's own draws).
DATA_SEED_OFFSET = 1_000_003


def data_seed(seed: int, split: int = 0) -> int:
    """The seed of split ``split`` (0 train, 1 test, ...) of run ``seed``, disjoint from model seeds."""
    return DATA_SEED_OFFSET + 16 * int(seed) + int(split)


def spiral_input_rms(noise: float) -> float:
    """Root expected second moment of one raw coordinate: ``sqrt(1/6 + noise^2)``.

    With ``s ~ U(0, 1)`` and a uniformly distributed phase, ``E[(s cos theta)^2] = E[s^2] / 2
    = 1/6``; independent noise adds its variance.
    """
    return math.sqrt(1.0 / 6.0 + noise**2)


def two_spirals(
    n: int,
    *,
    noise: float = 0.1,
    turns: float = 1.5,
    scale: SpiralScale = "unit",
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``n`` points of two interleaved noisy spirals.

    Returns ``(x, y)``: ``x`` of shape ``(n, 2)`` and labels ``y`` of shape ``(n,)`` with values
    0. and 1. (same dtype as ``x``); the first ``n // 2`` points belong to class 0, the rest to
    class 1 (``n`` odd gives class 1 the extra point). Deterministic given ``seed``.

    >>> x, y = two_spirals(300, seed=0)
    >>> x.shape, int(y.sum())
    (torch.Size([300, 2]), 150)
    """
    if n < 2:
        raise ConfigError("n", f"need at least 2 points, got {n}")
    if noise < 0 or not math.isfinite(noise):
        raise ConfigError("noise", f"must be a finite number >= 0, got {noise}")
    if turns <= 0 or not math.isfinite(turns):
        raise ConfigError("turns", f"must be > 0, got {turns}")
    if scale not in ("unit", "radius"):
        raise ConfigError("scale", f"must be 'unit' or 'radius', got {scale!r}")
    generator = torch.Generator().manual_seed(int(seed))
    labels = torch.cat([torch.zeros(n // 2), torch.ones(n - n // 2)]).to(torch.float64)
    s = torch.rand(n, generator=generator, dtype=torch.float64)
    theta = 2.0 * math.pi * turns * s + math.pi * labels
    points = torch.stack([s * torch.cos(theta), s * torch.sin(theta)], dim=1)
    points = points + noise * torch.randn(n, 2, generator=generator, dtype=torch.float64)
    if scale == "unit":
        points = points / spiral_input_rms(noise)
    return points.to(dtype), labels.to(dtype)
