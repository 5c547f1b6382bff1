"""The parts of the ``drift-theory`` experiment: one Monte Carlo study each, reduced to rows
``(layer, metric, value)`` of the tidy table next to the closed forms they are checked
against. ``layer`` is ``""`` for a number of the whole part, ``unit{i}`` for unit ``i`` of
layer ``l`` and ``layer{s}`` for activation site ``s`` of the covariance MLPs.

Every z-score is ``(estimate − closed form) / standard error``; the rows keep the largest
one of a family and the family's size, so that the claims can set a family-wise bar.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from actlab.experiments.drift_theory.montecarlo import (
    DTYPE,
    covariance_study,
    exponent_se,
    gram_study,
    mean_se,
    plain_study,
    ratio_se,
    skip_study,
)
from actlab.theory.drift import (
    SKEWED_PROBS,
    SKEWED_VALUES,
    ce_factor,
    finite_gated_gram,
    gram_scale,
    mse_expected_gradient,
    relu_input_covariance_ratio,
    relu_input_covariance_ratio_wide,
    skip_expected_gradient,
    skip_gram,
)

if TYPE_CHECKING:
    from actlab.experiments.drift_theory import DriftTheoryConfig

PARTS = ("plain", "skip", "skewed", "covariance-theory", "covariance")
SKEWED_STATE = (1.0, 0.8)  # h of the 2-unit layer: no row of the two-point law lands on 0
OUTPUTS = 10  # outputs of the skip, skewed and covariance-theory parts (as CIFAR-10)
Row = tuple[str, str, float]


def run_label(unit: dict[str, Any]) -> str:
    """The ``run`` column of a unit: ``plain-c10``, ``skip``, ..."""
    return f"plain-c{unit['classes']}" if unit["part"] == "plain" else unit["part"]


def run_part(config: DriftTheoryConfig, unit: dict[str, Any], seed: int) -> list[Row]:
    """The rows of ``unit``'s part for ``seed`` (the seed draws the state, then the weights)."""
    generator = torch.Generator().manual_seed(seed)
    part = unit["part"]
    if part == "plain":
        return list(_plain(config, int(unit["classes"]), generator))
    if part == "skip":
        return list(_skip(config, generator))
    if part == "skewed":
        return list(_skewed(config, generator))
    if part in ("covariance-theory", "covariance"):
        return list(_covariance(config, part, generator))
    raise ValueError(f"unknown part {part!r}; use one of {', '.join(PARTS)}")


def _z(estimate: np.ndarray, se: np.ndarray, reference: Any = 0.0) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.asarray(estimate) - reference) / np.asarray(se)


def _max_abs(values: np.ndarray) -> float:
    values = np.abs(np.asarray(values, dtype=float).ravel())
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else math.nan


def _min(values: np.ndarray) -> float:
    values = np.asarray(values, dtype=float).ravel()
    values = values[np.isfinite(values)]
    return float(values.min()) if values.size else math.nan


def _div(num: float, den: float) -> float:
    return num / den if den else math.nan


def _units(metric: str, values: np.ndarray) -> Iterator[Row]:
    for i, value in enumerate(np.asarray(values, dtype=float)):
        yield f"unit{i}", metric, float(value)


def _plain(config: DriftTheoryConfig, classes: int, generator: torch.Generator) -> Iterator[Row]:
    p = torch.randn(config.width, dtype=DTYPE, generator=generator)
    y = torch.randn(classes, dtype=DTYPE, generator=generator)
    r = plain_study(
        p,
        y,
        config.hidden,
        classes,
        gain=config.gain,
        samples=config.samples,
        chunk=config.chunk,
        eps=config.eps,
        generator=generator,
    )
    g = gram_scale(config.width, config.hidden, classes, config.gain)
    p_np = p.numpy()
    active = p_np > 0
    closed = mse_expected_gradient(p_np, g)
    n = p_np.size
    upper = np.triu_indices(n, 1)
    yield from _units("p", p_np)
    yield from _units("mse_grad", r.mse_mean)
    yield from _units("mse_grad_se", r.mse_se)
    yield from _units("mse_grad_closed", closed)
    yield from _units("ce_grad", r.ce_mean)
    yield from _units("ce_grad_se", r.ce_se)
    yield from _units("ce_grad_closed", ce_factor(classes) * closed)
    d = r.draws
    trace, trace_se = mean_se(d["trace"])
    pooled, pooled_se = mean_se(d["mse"])
    ce_sum, ce_sum_se = mean_se(d["a1"])
    ratio, ratio_err = ratio_se(d["a1"], d["b"])
    ratio2, ratio2_err = ratio_se(d["a2"], d["b"])
    extrapolated, extrapolated_err = ratio_se((4.0 * d["a1"] - d["a2"]) / 3.0, d["b"])
    exponent, exponent_err = exponent_se(d["c1"], d["c2"])
    even, even_err = mean_se(d["even"])
    scalars = {
        "g_closed": g,
        "classes": classes,
        "units": n,
        "active_units": int(active.sum()),
        "v_max_z": _max_abs(_z(r.v_mean, r.v_se)),
        "v_entries": r.v_mean.size,
        "cross_max_z": _max_abs(_z(r.gram_mean, r.gram_se)[upper]),
        "cross_pairs": upper[0].size,
        "trace": trace,
        "trace_se": trace_se,
        "gram_diag_max_z": _max_abs(_z(np.diag(r.gram_mean), np.diag(r.gram_se), g)),
        "mse_max_z": _max_abs(_z(r.mse_mean, r.mse_se, closed)[active]),
        "inactive_max_abs": _max_abs(r.mse_mean[~active]) if (~active).any() else 0.0,
        "mse_pooled": pooled,
        "mse_pooled_se": pooled_se,
        "mse_pooled_closed": float(closed.sum()),
        "mse_min_z": _min(_z(r.mse_mean, r.mse_se)[active]),
        "mse_sum_z": _div(pooled, pooled_se),
        "mse_resolved": int((_z(r.mse_mean, r.mse_se)[active] > config.k).sum()),
        "ce_min_z": _min(_z(r.ce_mean, r.ce_se)[active]),
        "ce_sum_z": _div(ce_sum, ce_sum_se),
        "ce_resolved": int((_z(r.ce_mean, r.ce_se)[active] > config.k).sum()),
        "ce_ratio": ratio,
        "ce_ratio_se": ratio_err,
        "ce_ratio_2eps": ratio2,
        "ce_ratio_2eps_se": ratio2_err,
        "ce_ratio_extrapolated": extrapolated,
        "ce_ratio_extrapolated_se": extrapolated_err,
        "ce_factor_closed": ce_factor(classes),
        "correction_exponent": exponent,
        "correction_exponent_se": exponent_err,
        "even_term": even,
        "even_term_se": even_err,
        "eps": config.eps,
        "samples": config.samples,
    }
    for metric, value in scalars.items():
        yield "", metric, float(value)


def _pair(
    name: str, index: tuple[int, int], closed: np.ndarray, mean: np.ndarray, se: np.ndarray
) -> Iterator[Row]:
    i, j = index
    yield "", f"{name}_closed", float(closed[i, j])
    yield "", f"{name}_mean", float(mean[i, j])
    yield "", f"{name}_se", float(se[i, j])


def _skip(config: DriftTheoryConfig, generator: torch.Generator) -> Iterator[Row]:
    classes = OUTPUTS
    p = torch.randn(config.width, dtype=DTYPE, generator=generator)
    bypass = torch.randn(config.width, dtype=DTYPE, generator=generator)
    y = torch.randn(classes, dtype=DTYPE, generator=generator)
    r = skip_study(
        p,
        bypass,
        y,
        classes,
        gain=config.gain,
        samples=config.samples,
        chunk=config.chunk,
        generator=generator,
    )
    p_np, a_np = p.numpy(), bypass.numpy()
    stream = a_np + np.maximum(p_np, 0.0)
    gram = skip_gram(stream, classes, config.gain)
    closed = skip_expected_gradient(p_np, a_np, classes, config.gain)
    active = p_np > 0
    n = p_np.size
    upper = np.triu_indices(n, 1)
    with_diag = np.triu_indices(n)
    yield from _units("p", p_np)
    yield from _units("bypass", a_np)
    yield from _units("stream", stream)
    yield from _units("mse_grad", r.mse_mean)
    yield from _units("mse_grad_se", r.mse_se)
    yield from _units("mse_grad_closed", closed)
    cross, cross_se = mean_se(r.draws["cross"])
    pooled, pooled_se = mean_se(r.draws["mse"])
    off = gram[upper]
    yield from _pair(
        "neg_pair", (upper[0][off.argmin()], upper[1][off.argmin()]), gram, r.gram_mean, r.gram_se
    )
    yield from _pair(
        "pos_pair", (upper[0][off.argmax()], upper[1][off.argmax()]), gram, r.gram_mean, r.gram_se
    )
    negative = np.flatnonzero(active & (closed < 0))
    if negative.size:
        worst = negative[closed[negative].argmin()]
        yield "", "neg_unit_closed", float(closed[worst])
        yield "", "neg_unit_mean", float(r.mse_mean[worst])
        yield "", "neg_unit_se", float(r.mse_se[worst])
    scalars = {
        "classes": classes,
        "units": n,
        "active_units": int(active.sum()),
        "neg_units": int(negative.size),
        "gram_max_z": _max_abs(_z(r.gram_mean, r.gram_se, gram)[with_diag]),
        "gram_entries": with_diag[0].size,
        "cross_sum": cross,
        "cross_sum_se": cross_se,
        "cross_sum_closed": float(gram.sum() - np.trace(gram)),
        "mse_max_z": _max_abs(_z(r.mse_mean, r.mse_se, closed)[active]),
        "mse_pooled": pooled,
        "mse_pooled_se": pooled_se,
        "mse_pooled_closed": float(closed.sum()),
        "samples": config.samples,
    }
    for metric, value in scalars.items():
        yield "", metric, float(value)


def _skewed(config: DriftTheoryConfig, generator: torch.Generator) -> Iterator[Row]:
    h = torch.tensor(SKEWED_STATE, dtype=DTYPE)
    mean, se = gram_study(
        h,
        config.skewed_hidden,
        OUTPUTS,
        gain=config.gain,
        samples=config.samples,
        chunk=config.chunk,
        generator=generator,
    )
    n = len(SKEWED_STATE)
    second = sum(q * v * v for v, q in zip(SKEWED_VALUES, SKEWED_PROBS))
    values = np.asarray(SKEWED_VALUES) * math.sqrt(config.gain / n / second)  # variance gain/n
    exact = finite_gated_gram(
        SKEWED_STATE,
        values,
        SKEWED_PROBS,
        config.skewed_hidden,
        config.gain / config.skewed_hidden,
        OUTPUTS,
    )
    scalars = {
        "cross": mean[0, 1],
        "cross_se": se[0, 1],
        "cross_exact": exact[0, 1],
        "diag_max_z": _max_abs(_z(np.diag(mean), np.diag(se), np.diag(exact))),
        "diag_exact": exact[0, 0],
        "classes": OUTPUTS,
        "samples": config.samples,
    }
    for metric, value in scalars.items():
        yield "", metric, float(value)


def _covariance(config: DriftTheoryConfig, part: str, generator: torch.Generator) -> Iterator[Row]:
    if part == "covariance-theory":
        width, classes = config.theory_width, OUTPUTS
        r = covariance_study(
            width,
            width,
            2,
            classes,
            loss="mse",
            first_layer="orthogonal",
            gain=config.gain,
            networks=config.theory_networks,
            batch=config.theory_batch,
            generator=generator,
        )
        yield "", "ratio_closed", relu_input_covariance_ratio(width)
        yield "", "ratio_wide", relu_input_covariance_ratio_wide(width)
        yield "", "closed_site", 2.0
        networks, batch = config.theory_networks, config.theory_batch
    else:
        width, classes = config.cov_width, config.cov_classes
        r = covariance_study(
            config.cov_in_dim,
            width,
            config.cov_blocks,
            classes,
            loss="ce",
            first_layer="gaussian",
            gain=config.gain,
            networks=config.cov_networks,
            batch=config.cov_batch,
            generator=generator,
        )
        networks, batch = config.cov_networks, config.cov_batch
    yield "", "width", float(width)
    yield "", "networks", float(networks)
    yield "", "batch", float(batch)
    for site in range(r.weight_grad.shape[1]):
        layer = f"layer{site + 1}"
        for metric, values in (
            ("weight_grad", r.weight_grad),
            ("mean_term", r.mean_term),
            ("cov_term", r.cov_term),
        ):
            value, se = mean_se(values[:, site])
            yield layer, metric, value
            yield layer, f"{metric}_se", se
        ratio, ratio_err = ratio_se(r.cov_term[:, site], r.mean_term[:, site])
        yield layer, "cov_ratio", ratio
        yield layer, "cov_ratio_se", ratio_err
