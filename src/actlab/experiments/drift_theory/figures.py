"""Figures of ``drift-theory`` (first seed): the expected pre-activation gradient against its
closed form, the skip block's gradient against its closed form, the covariance term."""

from __future__ import annotations

import numpy as np

from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw_figures(summary: dict, ctx: RunContext) -> None:
    """``gradients.png``, ``skip.png`` and ``covariance.png`` for the parts that ran."""
    parts = summary.get("parts", {})
    k = float(summary["k"])
    plain = sorted((r for r in parts if r.startswith("plain-c")), key=lambda r: int(r[7:]))
    if plain:
        _gradients(ctx, [(r, _first(parts[r])) for r in plain], k)
    if "skip" in parts:
        _skip(ctx, _first(parts["skip"]), k)
    covariance = [(r, _first(parts[r])) for r in ("covariance", "covariance-theory") if r in parts]
    if covariance:
        _covariance(ctx, covariance, k)


def _first(part: dict) -> dict:
    return part[sorted(part, key=int)[0]]


def _number(value: float | None) -> float:
    return np.nan if value is None else value


def _array(record: dict, metric: str) -> np.ndarray:
    return np.array([_number(v) for v in record["units"].get(metric, [])])


def _gradients(ctx: RunContext, runs: list[tuple[str, dict]], k: float) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(runs), figsize=(5.0 * len(runs), 3.8), squeeze=False)
    for ax, (_, rec) in zip(axes.flat, runs):
        g, classes = rec["scalars"]["g_closed"], rec["scalars"]["classes"]
        p = _array(rec, "p")
        factor = (classes - 1) / classes**2
        grid = np.linspace(min(p.min(), 0.0) - 0.2, p.max() + 0.2, 200)
        ax.plot(grid, np.maximum(grid, 0.0), color="0.3", lw=1.2, label="relu(p): closed form")
        ax.errorbar(
            p,
            _array(rec, "mse_grad") / g,
            yerr=k * _array(rec, "mse_grad_se") / g,
            fmt="o",
            ms=3.5,
            capsize=2,
            label="MSE: E[dl/dp] / g",
        )
        ax.errorbar(
            p + 0.03,
            _array(rec, "ce_grad") / (g * factor),
            yerr=k * _array(rec, "ce_grad_se") / (g * factor),
            fmt="s",
            ms=3.0,
            capsize=2,
            label="CE: E[dl/dp] / (g (C-1)/C²)",
        )
        ax.set_title(f"C = {classes:.0f}: g = {g:.3g}, (C-1)/C² = {factor:.3g}", fontsize=10)
        ax.set_xlabel("pre-activation p_i at layer l")
        ax.set_ylabel(f"Monte Carlo ± {k:g} SE, scaled")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Theorems 2.2-2.3: expected pre-activation gradient at initialisation")
    fig.tight_layout()
    ctx.save_figure(fig, "gradients")


def _skip(ctx: RunContext, rec: dict, k: float) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 4.2))
    p, stream = _array(rec, "p"), _array(rec, "stream")
    closed, mean, se = (_array(rec, m) for m in ("mse_grad_closed", "mse_grad", "mse_grad_se"))
    active = p > 0
    for selected, label in (
        (active & (stream >= 0), "p_i > 0, stream z_i >= 0"),
        (active & (stream < 0), "p_i > 0, stream z_i < 0"),
    ):
        ax.errorbar(
            closed[selected],
            mean[selected],
            yerr=k * se[selected],
            fmt="o",
            ms=4,
            capsize=2,
            label=label,
        )
    span = np.array([np.nanmin(closed), np.nanmax(closed)])
    ax.plot(span, span, color="0.4", lw=1, label="estimate = closed form")
    ax.axhline(0, color="0.85", lw=0.8)
    ax.axvline(0, color="0.85", lw=0.8)
    ax.set_xlabel("closed form of E[dl/dp_i]")
    ax.set_ylabel(f"Monte Carlo ± {k:g} SE")
    ax.set_title("App. A.3: one residual block z + relu(Wz) past layer l", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    ctx.save_figure(fig, "skip")


def _covariance(ctx: RunContext, runs: list[tuple[str, dict]], k: float) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(runs), figsize=(5.0 * len(runs), 3.8), squeeze=False)
    for ax, (run, rec) in zip(axes.flat, runs):
        layers = rec["layers"]
        sites = sorted(layers.get("cov_ratio", {}), key=lambda s: int(s[5:]))[1:]
        x = np.array([int(s[5:]) for s in sites])
        ratio = np.array([_number(layers["cov_ratio"][s]) for s in sites])
        err = np.array([_number(layers["cov_ratio_se"][s]) for s in sites])
        ax.errorbar(x, ratio, yerr=k * err, fmt="o", capsize=3, label=f"cov / mean ± {k:g} SE")
        if run == "covariance":
            ax.axhline(1e-2, color="C3", ls="--", lw=1, label="two orders below (the claim)")
        else:
            site = int(rec["scalars"]["closed_site"])
            ax.plot(
                [site], [rec["scalars"]["ratio_closed"]], "k*", ms=10, label="closed form (layer 2)"
            )
        ax.set_xticks(x)
        ax.set_xlabel("layer (its input is a post-activation)")
        ax.set_ylabel("covariance term / mean term")
        width = rec["scalars"]["width"]
        title = "paper's MLP shape, CE" if run == "covariance" else "orthogonal input layer, MSE"
        ax.set_title(f"{title}, width {width:.0f}", fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle("App. A.1: covariance term of the mean weight gradient at initialisation")
    fig.tight_layout()
    ctx.save_figure(fig, "covariance")
