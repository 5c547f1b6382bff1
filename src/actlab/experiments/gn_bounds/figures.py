"""Figures of ``gn-bounds``, drawn as "Rethinking Activation Functions" Figs. 10-11 are:
``λ_G(b)`` between its bounds over the sweep (Fig. 10 left), ``λ_G(μ̄)`` against the sweep
minimum over training (Fig. 10 right), the Hessian against Gauss-Newton over training
(Fig. 11), and eq. 49's joint sharpness of the residual model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.experiments.gn_bounds.summary import FIG11_AFTER
from actlab.plotting import pyplot

if TYPE_CHECKING:
    from actlab.runner.experiment import RunContext


def _sweeps(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for record in results:
        out.update(record.get("data", {}).get("sweeps", {}))
    return out


def _band(ax: Any, steps: list[int], mean: list, sd: list, label: str, color: str) -> None:
    m = np.asarray([np.nan if v is None else v for v in mean], dtype=float)
    s = np.asarray([0.0 if v is None or not np.isfinite(v) else v for v in sd], dtype=float)
    ax.plot(steps, m, color=color, label=label)
    ax.fill_between(steps, m - s, m + s, color=color, alpha=0.2, lw=0)


def sweep_figure(summary: dict, results: list[dict[str, Any]], ctx: RunContext) -> None:
    """Fig. 10 left: one seed's ``λ_G(b)`` and eq. 37's bounds over ``b``, first and last checkpoint."""
    one, sweeps = summary.get("one_block") or {}, _sweeps(results)
    if not one or not sweeps:
        return
    seed, steps = one["seeds"][0], one["steps"]
    chosen = [s for s in (steps[0], steps[-1]) if f"{seed}/{s}" in sweeps]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(chosen), figsize=(5.2 * len(chosen), 3.8), squeeze=False)
    for ax, step in zip(axes[0], chosen):
        sw = sweeps[f"{seed}/{step}"]
        b = np.asarray(sw["b"])
        lam_b = np.asarray(sw["lambda_b"])
        ax.plot(b, sw["lambda_g"], "k", lw=2, label="λG(b)")
        ax.plot(b, np.maximum(sw["lambda_a"], lam_b), "C0--", label="lower max{λA, λB(b)}")
        ax.plot(b, sw["lambda_a"] + lam_b, "C3--", label="upper λA + λB(b)")
        ax.axvline(sw["mu_bar"], color="gray", ls=":", label="μ̄")
        ax.plot([sw["b_star"]], [sw["lambda_g_star"]], "o", color="C2", label="b*")
        ax.set_yscale("log")
        ax.set_xlabel("shift b")
        ax.set_title(f"update {step} (seed {seed})")
    axes[0, 0].set_ylabel("sharpness")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("Fig. 10 (left): Gauss-Newton sharpness and the bounds of eq. 37")
    ctx.save_figure(fig, "fig10_bounds_sweep")


def ratio_figure(summary: dict, ctx: RunContext) -> None:
    """Fig. 10 right: ``λ_G(μ̄)`` and ``λ_G(b*)`` over training, and their ratio."""
    one = summary.get("one_block") or {}
    if not one:
        return
    plt = pyplot()
    steps, mean, sd = one["steps"], one["mean"], one["sd"]
    x = [max(s, 0.5) for s in steps]  # log axis: the initialisation drawn at 0.5
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.8))
    _band(left, x, mean["lambda_g_mu"], sd["lambda_g_mu"], "λG(μ̄)", "C0")
    _band(left, x, mean["lambda_g_star"], sd["lambda_g_star"], "λG(b*)", "C3")
    left.set_ylabel("sharpness (mean ± sd over seeds)")
    _band(right, x, mean["ratio_mu_star"], sd["ratio_mu_star"], "λG(μ̄)/λG(b*)", "k")
    right.plot(x, one["seed_max"]["ratio_mu_star"], "k:", label="largest seed")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("update (initialisation at 0.5)")
        ax.legend(fontsize=8)
    fig.suptitle("Fig. 10 (right): sharpness at the average-mean shift vs the sweep minimum")
    ctx.save_figure(fig, "fig10_ratio")


def hessian_figure(summary: dict, ctx: RunContext) -> None:
    """Fig. 11: ``λmax(H)`` and ``λmax(G)`` at ``b = μ̄`` over training, with eq. 46's terms."""
    one = summary.get("one_block") or {}
    if not one:
        return
    plt = pyplot()
    steps, mean, sd = one["steps"], one["mean"], one["sd"]
    x = [max(s, 0.5) for s in steps]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.8))
    _band(left, x, mean["lambda_h_mu"], sd["lambda_h_mu"], "λmax(H) at μ̄", "C1")
    _band(left, x, mean["lambda_gn_mu"], sd["lambda_gn_mu"], "λmax(G) at μ̄", "C0")
    left.set_ylabel("sharpness (mean ± sd over seeds)")
    right.plot(x, mean["hg_rel_diff"], "k", label="|λH − λG| / λG")
    right.plot(
        x,
        [
            None if v is None or g is None else v / g
            for v, g in zip(mean["h_minus_g_norm"], mean["lambda_gn_mu"])
        ],
        "C2--",
        label="‖H − G‖₂ / λG",
    )
    right.plot(
        x,
        [
            None if v is None or g is None else v / g
            for v, g in zip(mean["residual_bound"], mean["lambda_gn_mu"])
        ],
        "C3:",
        label="R_b / λG (eq. 45)",
    )
    right.set_yscale("log")
    for ax in (left, right):
        ax.axvline(FIG11_AFTER, color="gray", ls=":")
        ax.set_xscale("log")
        ax.set_xlabel("update (initialisation at 0.5)")
        ax.legend(fontsize=8)
    fig.suptitle("Fig. 11: exact Hessian vs Gauss-Newton at b = μ̄ (dotted line: update 100)")
    ctx.save_figure(fig, "fig11_hessian_vs_gn")


def joint_figure(summary: dict, ctx: RunContext) -> None:
    """Eq. 49: joint down-projection sharpness per shift choice, at init and after training."""
    joint = summary.get("joint") or {}
    if not joint:
        return
    plt = pyplot()
    kinds = (
        ("lambda_unshifted", "b = 0"),
        ("lambda_theory_shift", "Table 1 shift"),
        ("lambda_global_mean", "one mean μ̄"),
        ("lambda_layer_means", "block means μ̄_ℓ"),
        ("lambda_floor", "floor λmax(Σ)"),
    )
    fig, ax = plt.subplots(figsize=(7, 3.8))
    width = 0.38
    for i, label in enumerate(("init", "trained")):
        values = [joint[label][k] or np.nan for k, _ in kinds]
        ax.bar(np.arange(len(kinds)) + (i - 0.5) * width, values, width, label=label)
    ax.set_xticks(np.arange(len(kinds)), [name for _, name in kinds], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("λmax(H_joint) (mean over seeds)")
    ax.legend()
    ax.set_title("Eq. 49: joint sharpness of the down-projections")
    ctx.save_figure(fig, "eq49_joint_sharpness")


def draw_figures(summary: dict, results: list[dict[str, Any]], ctx: RunContext) -> None:
    """Every figure of the run (the curves from the summary, the sweeps from the units' data)."""
    sweep_figure(summary, results, ctx)
    ratio_figure(summary, ctx)
    hessian_figure(summary, ctx)
    joint_figure(summary, ctx)
