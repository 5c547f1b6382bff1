"""Landmarks of an activation's graph: extrema of a function or its slope on an interval, the
largest gap between two activations, and where a slope falls below a level.

Each search runs on float64 tensors of an elementwise function (``resolve(spec)`` of
:mod:`actlab.theory.gaussian`): a dense grid finds the bracket of the best point, and a
golden-section search inside it refines the location to about ``1e-8`` (the square root of
float64 rounding: the limit of any search that compares values near a flat extremum), so
values stated to four decimals (the handbook's GELU minimum at -0.7518, say) can be checked to
rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

Elementwise = Callable[[torch.Tensor], torch.Tensor]
_INV_PHI = (math.sqrt(5.0) - 1.0) / 2.0  # 1/φ, the golden-section step
GRID_POINTS = 200_001  # points of the bracketing grid over the search interval


@dataclass(frozen=True)
class Landmark:
    """A point of a graph: ``at`` (the input) and ``value`` (the function there)."""

    at: float
    value: float


def _at(function: Elementwise, x: float) -> float:
    return float(function(torch.tensor([x], dtype=torch.float64))[0])


def _golden(function: Elementwise, lo: float, hi: float, tol: float = 1e-12) -> float:
    """The minimiser of a unimodal ``function`` on ``[lo, hi]`` by golden-section search."""
    a, b = lo, hi
    c, d = b - _INV_PHI * (b - a), a + _INV_PHI * (b - a)
    fc, fd = _at(function, c), _at(function, d)
    while b - a > tol:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - _INV_PHI * (b - a)
            fc = _at(function, c)
        else:
            a, c, fc = c, d, fd
            d = a + _INV_PHI * (b - a)
            fd = _at(function, d)
    return (a + b) / 2.0


def minimum(function: Elementwise, lo: float, hi: float) -> Landmark:
    """The global minimum of ``function`` on ``[lo, hi]`` (grid bracket, then golden section).

    Raises ``ValueError`` when the interval is empty or not finite.
    """
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"need a finite interval lo < hi, got [{lo}, {hi}]")
    grid = torch.linspace(lo, hi, GRID_POINTS, dtype=torch.float64)
    i = int(torch.argmin(function(grid)))
    step = (hi - lo) / (GRID_POINTS - 1)
    at = _golden(function, max(lo, float(grid[i]) - step), min(hi, float(grid[i]) + step))
    return Landmark(at, _at(function, at))


def maximum(function: Elementwise, lo: float, hi: float) -> Landmark:
    """The global maximum of ``function`` on ``[lo, hi]`` (see :func:`minimum`)."""
    low = minimum(lambda x: -function(x), lo, hi)
    return Landmark(low.at, -low.value)


def largest_gap(first: Elementwise, second: Elementwise, lo: float, hi: float) -> Landmark:
    """Where ``|first - second|`` is largest on ``[lo, hi]``, and that largest gap."""
    return maximum(lambda x: (first(x) - second(x)).abs(), lo, hi)


def falls_below(function: Elementwise, level: float, lo: float, hi: float) -> float:
    """The input in ``[lo, hi]`` beyond which a decreasing ``function`` stays below ``level``
    (bisection to about 1e-12). Raises ``ValueError`` unless ``function(lo) > level >=
    function(hi)``."""
    f_lo, f_hi = _at(function, lo), _at(function, hi)
    if not f_lo > level >= f_hi:
        raise ValueError(f"need function(lo) > level >= function(hi), got {f_lo}, {level}, {f_hi}")
    a, b = lo, hi
    while b - a > 1e-12:
        mid = (a + b) / 2.0
        a, b = (mid, b) if _at(function, mid) > level else (a, mid)
    return (a + b) / 2.0
