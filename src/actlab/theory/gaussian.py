"""Averages of an activation over a Gaussian net input: mean, second moments, gain, shift.

For z ~ N(0, q) every average ``E[g(z)]`` is folded onto the positive half line,

    E[g(z)] = ∫_0^∞ (g(σt) + g(-σt)) φ(t) dt,   σ = sqrt(q),

so that a kink at z = 0 (ReLU and its relatives) sits on the end of the interval, where it
costs nothing. The half line is cut at t = 13 (φ(13) < 1e-37) and integrated by adaptive
composite Gauss–Legendre quadrature in float64: a panel is accepted when its 16-point value
agrees with the sum over its two halves, otherwise it is bisected. Integrands that are smooth
on each side of 0 converge to rounding (about 1e-15); a kink elsewhere (``clip=C``) is found
by bisection and still reaches about 1e-12.

The activation is resolved through the spec registry
(:func:`actlab.activations.spec.resolve_elementwise`), so user-registered activations work;
when the registry gives no derivative, autograd is used, and when the function is not
differentiable by torch, central finite differences.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch

from actlab.errors import SpecError

Elementwise = Callable[[torch.Tensor], torch.Tensor]

# Half line cut-off and the initial panels (finer near 0 where the density is largest).
_T_MAX = 13.0
_INITIAL_EDGES = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, _T_MAX)
_ORDER = 16
_REL_TOL = 1e-14
_MAX_ROUNDS = 60
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(_ORDER)
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
    they depend on the other features of the example) raise
    :class:`~actlab.errors.SpecError` (a ``ValueError``).
    """
    from actlab.activations.spec import DEFAULT_Q, base_spec, parse_spec, resolve_elementwise

    parsed = parse_spec(spec)
    extra = sorted({"adaptive"} & parsed.flags | {"topk"} & set(parsed.options))
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


def _check_variance(q: float) -> float:
    q = float(q)
    if not math.isfinite(q) or q < 0:
        raise ValueError(f"q: the pre-activation variance must be finite and >= 0, got {q}")
    return q


def gaussian_expectations(integrands: list[Elementwise], q: float) -> list[float]:
    """``E[g(z)]`` for each ``g`` in ``integrands`` and ``z ~ N(0, q)``, by folded adaptive quadrature.

    Each ``g`` maps a float64 tensor to a float64 tensor elementwise. All integrands share
    the panels, and a panel is refined until every integrand has converged on it.
    """
    q = _check_variance(q)
    if q == 0.0:
        zero = torch.zeros(1, dtype=torch.float64)
        return [float(g(zero)[0]) for g in integrands]
    sigma = math.sqrt(q)

    def panel_values(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        # Gauss–Legendre nodes of every panel at once: shape (panels, order).
        half = (hi - lo)[:, None] / 2
        t = (lo + hi)[:, None] / 2 + half * _NODES[None, :]
        density = np.exp(-0.5 * t * t) / math.sqrt(2 * math.pi)
        z = torch.from_numpy(sigma * t.ravel())
        out = []
        for g in integrands:
            with torch.no_grad():
                folded = (g(z) + g(-z)).detach().numpy().reshape(t.shape)
            out.append(((folded * density) * _WEIGHTS[None, :]).sum(axis=1) * half[:, 0])
        return np.stack(out)  # (integrands, panels)

    edges = np.asarray(_INITIAL_EDGES)
    lo, hi = edges[:-1], edges[1:]
    whole = panel_values(lo, hi)
    totals = np.zeros(len(integrands))
    for _ in range(_MAX_ROUNDS):
        mid = (lo + hi) / 2
        halves = panel_values(np.concatenate([lo, mid]), np.concatenate([mid, hi]))
        n = len(lo)
        left, right = halves[:, :n], halves[:, n:]
        refined = left + right
        scale = np.maximum(np.abs(totals) + np.abs(refined).sum(axis=1), 1e-300)[:, None]
        ok = np.all(np.abs(refined - whole) <= _REL_TOL * scale, axis=0)
        ok |= ~np.isfinite(refined).all(axis=0)  # nothing to gain from refining nan/inf
        totals += refined[:, ok].sum(axis=1)
        if ok.all():
            break
        keep = ~ok
        lo = np.concatenate([lo[keep], mid[keep]])
        hi = np.concatenate([mid[keep], hi[keep]])
        whole = np.concatenate([left[:, keep], right[:, keep]], axis=1)
    else:  # not converged: use the finest estimate (kinks of user functions, nan)
        totals += whole.sum(axis=1)
    return [float(v) for v in totals]


def expectation(function: Elementwise, q: float = 1.0) -> float:
    """``E[function(z)]`` for ``z ~ N(0, q)``; ``function`` acts elementwise on float64 tensors."""
    return gaussian_expectations([function], q)[0]


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

