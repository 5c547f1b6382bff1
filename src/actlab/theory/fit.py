"""The sparsity cliff: fit ``a(s) = A - B * s**N`` to performance against sparsity.

"Bug or Feature²" §4.1 normalizes each architecture-and-method group's performance by its maximum,
pools all (sparsity, performance) points and fits the three-parameter power law by
nonlinear least squares (their fit: A = 0.978, B = 0.635, N = 16.72, R^2 = 0.565). ``A`` is
the performance at zero sparsity, ``B`` the largest possible drop, ``N`` the sharpness;
the *cliff* is where the fitted curve falls 10% below ``A``, ``s* = (0.1 A / B)^(1/N)``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class CliffFit:
    """Fitted ``A``, ``B``, ``N``, the coefficient of determination ``r2`` and the cliff.

    ``cliff_sparsity`` is ``None`` when the curve never drops 10% below ``A`` on [0, 1].
    """

    A: float
    B: float
    N: float
    r2: float
    cliff_sparsity: float | None
    n_points: int

    def predict(self, s: np.ndarray | float) -> np.ndarray:
        """The fitted performance at sparsity ``s``."""
        return self.A - self.B * np.power(np.asarray(s, dtype=float), self.N)

    def as_dict(self) -> dict:
        """JSON-friendly fields."""
        return asdict(self)


def power_law(s: np.ndarray, A: float, B: float, N: float) -> np.ndarray:
    """``A - B * s**N``."""
    return A - B * np.power(s, N)


def cliff_point(A: float, B: float, N: float, drop: float = 0.1) -> float | None:
    """The sparsity where ``A - B s^N`` equals ``(1 - drop) A``; ``None`` if not in [0, 1]."""
    if B <= 0 or N <= 0 or A <= 0:
        return None
    s = (drop * A / B) ** (1.0 / N)
    return float(s) if 0.0 <= s <= 1.0 else None


def r_squared(y: np.ndarray, y_hat: np.ndarray) -> float:
    """``1 - SS_res / SS_tot`` (``nan`` when ``y`` is constant)."""
    y, y_hat = np.asarray(y, dtype=float), np.asarray(y_hat, dtype=float)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot == 0.0:
        return math.nan
    return 1.0 - float(np.sum((y - y_hat) ** 2)) / ss_tot


def fit_cliff(sparsity: Sequence[float], performance: Sequence[float]) -> CliffFit:
    """Least-squares fit of ``A - B s^N`` (``B, N >= 0``) to the points; see the module docstring.

    Several starting exponents are tried and the best fit is kept, since the loss surface in
    ``N`` is flat for small ``s``. Needs at least 3 points with sparsity in [0, 1].
    """
    from scipy.optimize import curve_fit

    s = np.asarray(sparsity, dtype=float)
    a = np.asarray(performance, dtype=float)
    keep = np.isfinite(s) & np.isfinite(a)
    s, a = s[keep], a[keep]
    if len(s) < 3:
        raise ValueError(f"need at least 3 finite points to fit 3 parameters, got {len(s)}")
    if np.any((s < 0) | (s > 1)):
        raise ValueError("sparsity values must lie in [0, 1]")
    best = None
    for n0 in (1.0, 2.0, 4.0, 8.0, 16.0, 32.0):
        try:
            params, _ = curve_fit(power_law, s, a, p0=(a.max(), max(a.max() - a.min(), 1e-3), n0),
                                  bounds=([-np.inf, 0.0, 0.0], [np.inf, np.inf, 200.0]),
                                  maxfev=20000)
        except RuntimeError:
            continue
        sse = float(np.sum((a - power_law(s, *params)) ** 2))
        if best is None or sse < best[0]:
            best = (sse, params)
    if best is None:
        raise RuntimeError("the power-law fit did not converge from any start")
    A, B, N = (float(v) for v in best[1])
    return CliffFit(A, B, N, r_squared(a, power_law(s, A, B, N)), cliff_point(A, B, N), len(s))


def normalize_by_group(values: Sequence[float], groups: Sequence[Hashable]) -> np.ndarray:
    """Each value divided by the largest value of its group ("Bug or Feature²" §4.1's scaling)."""
    v = np.asarray(values, dtype=float)
    out = np.empty_like(v)
    labels = list(groups)
    for g in set(labels):
        idx = np.array([i for i, lab in enumerate(labels) if lab == g])
        top = np.nanmax(v[idx])
        out[idx] = v[idx] / top if top > 0 else np.nan
    return out


@dataclass
class IndicatorFit:
    """The power law with an additive mechanism indicator, ``A + C m - B s^N``: ``C`` is the
    offset of the points with ``m = 1`` (ours: Top-K) against those with ``m = 0``."""

    A: float
    B: float
    N: float
    C: float
    r2: float
    n_points: int

    def predict(self, s: np.ndarray | float, m: np.ndarray | float) -> np.ndarray:
        """The fitted performance at sparsity ``s`` with indicator ``m``."""
        return (self.A + self.C * np.asarray(m, dtype=float)
                - self.B * np.power(np.asarray(s, dtype=float), self.N))


def fit_cliff_indicator(sparsity: Sequence[float], performance: Sequence[float],
                        indicator: Sequence[float], base: CliffFit | None = None) -> IndicatorFit:
    """Least-squares fit of ``A + C m - B s^N`` (``B, N >= 0``), ``m`` the 0/1 ``indicator``.

    "Bug or Feature²" §4.1 adds "a mechanism indicator to the power law model" (R² 0.565 ->
    0.618) without writing the model out; an additive offset per mechanism is our reading, the
    smallest model that nests :func:`fit_cliff` (``C = 0``), so its R² is never below the
    power law's at the best fit. Needs at least 4 finite points with sparsity in [0, 1].
    ``base``: :func:`fit_cliff` of the same points, where the caller has it already.
    """
    from scipy.optimize import curve_fit

    s = np.asarray(sparsity, dtype=float)
    a = np.asarray(performance, dtype=float)
    m = np.asarray(indicator, dtype=float)
    if not len(s) == len(a) == len(m):
        raise ValueError(f"sparsity, performance and indicator differ in length: "
                         f"{len(s)}, {len(a)}, {len(m)}")
    keep = np.isfinite(s) & np.isfinite(a) & np.isfinite(m)
    s, a, m = s[keep], a[keep], m[keep]
    if len(s) < 4:
        raise ValueError(f"need at least 4 finite points to fit 4 parameters, got {len(s)}")
    if np.any((s < 0) | (s > 1)):
        raise ValueError("sparsity values must lie in [0, 1]")
    if not np.all((m == 0) | (m == 1)):
        raise ValueError("the indicator must be 0 or 1")

    def model(x: np.ndarray, A: float, B: float, N: float, C: float) -> np.ndarray:
        return A + C * x[1] - B * np.power(x[0], N)

    # start from the power law's own best fit (C = 0) so the nested model cannot end worse
    base = base if base is not None else fit_cliff(s, a)
    x = np.vstack([s, m])
    best = (float(np.sum((a - model(x, base.A, base.B, base.N, 0.0)) ** 2)),
            (base.A, base.B, base.N, 0.0))
    for n0 in (base.N, 1.0, 4.0, 16.0, 64.0):
        try:
            params, _ = curve_fit(model, x, a,
                                  p0=(base.A, max(base.B, 1e-3), max(n0, 1e-3), 0.0),
                                  bounds=([-np.inf, 0.0, 0.0, -np.inf],
                                          [np.inf, np.inf, 200.0, np.inf]), maxfev=20000)
        except RuntimeError:
            continue
        sse = float(np.sum((a - model(x, *params)) ** 2))
        if sse < best[0]:
            best = (sse, params)
    A, B, N, C = (float(v) for v in best[1])
    fit = IndicatorFit(A, B, N, C, math.nan, len(s))
    fit.r2 = r_squared(a, fit.predict(s, m))
    return fit
