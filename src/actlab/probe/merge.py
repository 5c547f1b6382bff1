"""Sufficient statistics and the rules that merge them exactly across passes and ranks.

A collector turns the passes of one recorded step into a :data:`Stats` dict of named
:class:`Stat` values; each carries its merge rule, so the same statistics merge over passes
(on one process) and over ranks (:mod:`actlab.probe.distributed`) with one implementation:

============== ======================================== ===========================================
rule           value                                    merge
============== ======================================== ===========================================
``sum``        any shape (counts, sums, squared norms)  elementwise sum
``max``        any shape (extremes, "ever active")      elementwise max
``min``        any shape                                elementwise min
``moments``    ``(..., 3)``: ``[n, mean, m2]``          Chan et al.: ``m2 = m2_a + m2_b +
                                                        d^2 n_a n_b / n`` with ``d = mean_b - mean_a``
``comoments``  ``(..., 4)``: ``[n, mean_x, mean_y, c]`` the same for a co-moment ``c = sum (x - mx)(y - my)``
``moments4``   ``(..., 5)``: ``[n, mean, m2, m3, m4]``  Pébay's (2008) pairwise update of the central
                                                        moment sums ``m_k = sum (x - mean)^k``
``argmax``     ``(k,)``: ``[key, count, loc, ...]``     the row with the largest ``key`` (a NaN key
                                                        wins; ties: the earlier part); its ``loc``
                                                        is offset by the ``count`` of the earlier
                                                        parts, counts add (passes, then ranks, in
                                                        order: a position in their concatenation)
``concat``     1-D values                               concatenated (rank order)
============== ======================================== ===========================================

Centred moments are merged by the parallel formulas rather than from raw power sums
(``sum x^2 - n mean^2``), which cancel catastrophically when ``|mean| >> std``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

RULES = ("sum", "max", "min", "moments", "comoments", "moments4", "argmax", "concat")


@dataclass(frozen=True)
class Stat:
    """One sufficient statistic: its merge ``rule`` (one of :data:`RULES`) and float64 ``value``."""

    rule: str
    value: np.ndarray

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown merge rule {self.rule!r}; choose from {RULES}")
        object.__setattr__(self, "value", np.asarray(self.value, dtype=np.float64))


#: A collector's statistics of one recorded step at one place, by name.
Stats = dict[str, Stat]


def _chan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merge ``[n, mean, m2]`` rows (last axis); an empty side (``n = 0``) is the identity."""
    na, nb = a[..., 0], b[..., 0]
    n = na + nb
    safe = np.where(n > 0, n, 1.0)
    delta = b[..., 1] - a[..., 1]
    mean = np.where(n > 0, a[..., 1] + delta * nb / safe, 0.0)
    m2 = a[..., 2] + b[..., 2] + delta * delta * na * nb / safe
    return np.stack([n, mean, m2], axis=-1)


def _chan_co(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merge ``[n, mean_x, mean_y, c]`` co-moment rows (last axis)."""
    na, nb = a[..., 0], b[..., 0]
    n = na + nb
    safe = np.where(n > 0, n, 1.0)
    dx, dy = b[..., 1] - a[..., 1], b[..., 2] - a[..., 2]
    mx = np.where(n > 0, a[..., 1] + dx * nb / safe, 0.0)
    my = np.where(n > 0, a[..., 2] + dy * nb / safe, 0.0)
    c = a[..., 3] + b[..., 3] + dx * dy * na * nb / safe
    return np.stack([n, mx, my, c], axis=-1)


def _pebay(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merge ``[n, mean, m2, m3, m4]`` rows (central moment sums) by the pairwise update of
    Pébay, "Formulas for Robust, One-Pass Parallel Computation of Covariances and
    Arbitrary-Order Statistical Moments" (2008), to the fourth order; an empty side is the
    identity. ``tests/test_probe_trouble.py`` checks it against NumPy on split data."""
    na, nb = a[..., 0], b[..., 0]
    n = na + nb
    safe = np.where(n > 0, n, 1.0)
    d = b[..., 1] - a[..., 1]
    m2a, m3a, m4a = a[..., 2], a[..., 3], a[..., 4]
    m2b, m3b, m4b = b[..., 2], b[..., 3], b[..., 4]
    mean = np.where(n > 0, a[..., 1] + d * nb / safe, 0.0)
    m2 = m2a + m2b + d**2 * na * nb / safe
    m3 = (m3a + m3b + d**3 * na * nb * (na - nb) / safe**2
          + 3 * d * (na * m2b - nb * m2a) / safe)
    m4 = (m4a + m4b + d**4 * na * nb * (na * na - na * nb + nb * nb) / safe**3
          + 6 * d**2 * (na * na * m2b + nb * nb * m2a) / safe**2
          + 4 * d * (na * m3b - nb * m3a) / safe)
    return np.stack([n, mean, m2, m3, m4], axis=-1)


def _argmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merge ``[key, count, loc, ...]`` rows: ``b`` (the later part) wins on a larger or a
    NaN key; its ``loc`` is shifted by ``a``'s count."""
    b_wins = b[0] > a[0] or (np.isnan(b[0]) and not np.isnan(a[0]))
    out = b.copy() if b_wins else a.copy()
    if b_wins:
        out[2] += a[1]
    out[1] = a[1] + b[1]
    return out


def merge_values(rule: str, values: list[np.ndarray]) -> np.ndarray:
    """Merge the values of one statistic (one per pass or per rank) by ``rule``."""
    if not values:
        raise ValueError("nothing to merge")
    if rule == "sum":
        return np.sum(np.stack(values), axis=0)
    if rule == "max":
        return np.max(np.stack(values), axis=0)
    if rule == "min":
        return np.min(np.stack(values), axis=0)
    if rule == "moments":
        return functools.reduce(_chan, values)
    if rule == "comoments":
        return functools.reduce(_chan_co, values)
    if rule == "moments4":
        return functools.reduce(_pebay, values)
    if rule == "argmax":
        return functools.reduce(_argmax, values)
    if rule == "concat":
        return np.concatenate([np.reshape(v, -1) for v in values])
    raise ValueError(f"unknown merge rule {rule!r}; choose from {RULES}")


def merge_stats(parts: list[Stats]) -> Stats:
    """Merge several :data:`Stats` of the same layout (same names and rules) into one."""
    first = parts[0]
    for other in parts[1:]:
        if other.keys() != first.keys():
            raise ValueError(f"statistics differ: {sorted(first)} vs {sorted(other)}")
    return {name: Stat(stat.rule, merge_values(stat.rule, [p[name].value for p in parts]))
            for name, stat in first.items()}


def moments_rows(n: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> Stat:
    """Pool per-pass ``(n, mean, m2)`` into one ``moments`` statistic."""
    rows = np.stack([np.asarray(n, np.float64), np.asarray(mean, np.float64),
                     np.asarray(m2, np.float64)], axis=-1).reshape(-1, 3)
    return Stat("moments", merge_values("moments", list(rows)))


def comoments_rows(n: np.ndarray, mean_x: np.ndarray, mean_y: np.ndarray,
                   c: np.ndarray) -> Stat:
    """Pool per-pass ``(n, mean_x, mean_y, c)`` into one ``comoments`` statistic."""
    rows = np.stack([np.asarray(v, np.float64) for v in (n, mean_x, mean_y, c)],
                    axis=-1).reshape(-1, 4)
    return Stat("comoments", merge_values("comoments", list(rows)))


def moments4_rows(n: np.ndarray, mean: np.ndarray, m2: np.ndarray, m3: np.ndarray,
                  m4: np.ndarray) -> Stat:
    """Pool per-pass ``(n, mean, m2, m3, m4)`` into one ``moments4`` statistic."""
    rows = np.stack([np.asarray(v, np.float64) for v in (n, mean, m2, m3, m4)],
                    axis=-1).reshape(-1, 5)
    return Stat("moments4", merge_values("moments4", list(rows)))


def argmax_rows(rows: np.ndarray) -> Stat:
    """Pool per-pass ``[key, count, loc, ...]`` rows (in pass order) into one ``argmax``."""
    rows = np.asarray(rows, np.float64)
    return Stat("argmax", merge_values("argmax", list(rows.reshape(len(rows), -1))))
