"""Averages of an activation over a Gaussian net input: mean, second moments, gain, shift.

Every average is one call of :mod:`actlab.theory.quadrature` (folded adaptive
Gauss–Legendre quadrature in float64, accurate to about 1e-15 for integrands smooth on
each side of 0).

The activation is resolved through the spec registry
(:func:`actlab.activations.registry.resolve_elementwise`), so user-registered activations work;
when the registry gives no derivative, autograd is used, and when the function is not
differentiable by torch, central finite differences.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from actlab.activations.grammar import DEFAULT_Q, base_spec, parse_spec
from actlab.activations.registry import resolve_elementwise
from actlab.errors import SpecError
from actlab.theory.quadrature import Elementwise, expectation, gaussian_expectations

__all__ = ["Moments", "expectation", "gain", "gaussian_expectations", "moments", "resolve",
           "shift"]

_FD_STEP = 6e-6  # central differences: truncation ~h^2, rounding ~eps/h, both ~3e-11


@dataclass(frozen=True)
class Moments:
    """Gaussian averages of an activation ``f`` for ``z ~ N(0, q)``.

    ``mean`` is E f(z), ``second_moment`` E f(z)², ``slope_second_moment`` E f'(z)², and
    ``gain`` the fixed-point gain 1/sqrt(E f(z)²) at unit variance (q = 1, whatever ``q`` is),
    as the handbook defines it: weights of variance gain²/fan_in keep unit variance fixed.
    """

    mean: float
    second_moment: float
    slope_second_moment: float
    gain: float

    def as_dict(self) -> dict[str, float]:
        """The four averages as a dict with keys ``mean``, ``second_moment``, ... ``gain``."""
        return asdict(self)

    def __getitem__(self, key: str) -> float:
        return self.as_dict()[key]

    def keys(self):  # noqa: D102 - mapping protocol, so dict(moments) works
        return self.as_dict().keys()


def resolve(spec: str) -> tuple[Elementwise, Elementwise]:
    """The elementwise function of ``spec`` and its derivative, both on float64 tensors.

    The derivative is the registry's analytic one when it has one (for ``sugar`` the
    surrogate its backward uses), else autograd of the function, else central finite
    differences. ``shift=theory`` subtracts the Gaussian mean of the base function at the
    spec's ``q`` (default 1/3). Specs that are not elementwise (``adaptive``, ``topk``:
    they depend on the other features of the example) and ``shift=measured`` raise
    :class:`~actlab.errors.SpecError` (a ``ValueError``).
    """
    parsed = parse_spec(spec)
    extra = sorted({"adaptive"} & parsed.flags | {"topk"} & set(parsed.options))
    if parsed.options.get("shift") == "measured":
        raise SpecError(
            f"{spec!r}: shift=measured is measured on data (calibrate_shifts_), so it has no "
            f"Gaussian averages; use {base_spec(parsed) + ':shift=theory'!r} for the Gaussian mean"
        )
    if extra:
        raise SpecError(
            f"{spec!r}: option {' and '.join(extra)} is not elementwise, so it has no Gaussian "
            f"averages; use {base_spec(parsed)!r}"
        )
    function, derivative = resolve_elementwise(spec)
    if derivative is None:
        derivative = _numerical_derivative(function)
    if parsed.options.get("shift") == "theory":
        offset = shift(base_spec(parsed), parsed.options.get("q", DEFAULT_Q))
        unshifted = function

        def function(x: torch.Tensor) -> torch.Tensor:
            return unshifted(x) - offset

    return function, derivative


def _numerical_derivative(function: Elementwise) -> Elementwise:
    """Autograd derivative of ``function`` where torch can differentiate it, else central differences."""

    def derivative(x: torch.Tensor) -> torch.Tensor:
        leaf = x.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            y = function(leaf)
            if isinstance(y, torch.Tensor) and y.requires_grad:
                (grad,) = torch.autograd.grad(y.sum(), leaf, allow_unused=True)
                if grad is not None:
                    return grad.detach()
        step = _FD_STEP * torch.clamp(x.abs(), min=1.0)
        with torch.no_grad():
            return (function(x + step) - function(x - step)) / (2 * step)

    return derivative


def moments(spec: str, q: float = 1.0) -> Moments:
    """Gaussian averages of the activation ``spec`` for ``z ~ N(0, q)``.

    Returns a :class:`Moments` (attributes, ``m["mean"]`` and ``m.as_dict()``) with
    ``mean`` E f(z), ``second_moment`` E f(z)², ``slope_second_moment`` E f'(z)² and ``gain``
    1/sqrt(E f(z)²) at unit variance.

    >>> round(moments("relu").mean, 4)
    0.3989
    """
    function, derivative = resolve(spec)
    mean, second, slope = gaussian_expectations(
        [function, lambda z: function(z) ** 2, lambda z: derivative(z) ** 2], q
    )
    unit_second = second if float(q) == 1.0 else expectation(lambda z: function(z) ** 2, 1.0)
    gain = 1.0 / math.sqrt(unit_second) if unit_second > 0 else math.inf
    return Moments(mean=mean, second_moment=second, slope_second_moment=slope, gain=gain)


def gain(spec: str) -> float:
    """The fixed-point gain 1/sqrt(E f(z)²), z ~ N(0, 1), of ``spec`` (√2 for ReLU)."""
    function, _ = resolve(spec)
    second = expectation(lambda z: function(z) ** 2, 1.0)
    return 1.0 / math.sqrt(second) if second > 0 else math.inf


def shift(spec: str, q: float = 1 / 3) -> float:
    """The theory shift b = E f(z), z ~ N(0, q): eq. 15 of the "Rethinking" paper.

    The default q = 1/3 is the paper's pre-activation variance after LayerNorm and a
    U(-1/sqrt(d), 1/sqrt(d)) up-projection (eq. 12); it gives Table 1 (ReLU 0.230,
    GELU 0.115, Swish 0.077, sigmoid 0.500).
    """
    function, _ = resolve(spec)
    return expectation(function, q)

