"""The ``sparsity`` figure: normalised accuracy against measured sparsity, with the cliff fit."""

from __future__ import annotations

from typing import Any

import numpy as np

from actlab.experiments.sparsity.claims import METHODS
from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw_figures(summary: dict[str, Any], ctx: RunContext) -> None:
    """``sparsity_cliff``: every point by model and method and the fitted curve (only when the
    summary holds a fit, i.e. has ``n_points``); ``topk_frozen_kept``: the kept fraction of
    the frozen-threshold Top-K over training against K (when it ran); ``sparsity_gpt``: the
    GPT's loss against sparsity (when it ran)."""
    from actlab.theory.fit import CliffFit

    draw_frozen_kept(summary.get("frozen_topk") or {}, ctx)
    draw_gpt(summary.get("gpt") or {}, ctx)
    if "n_points" not in summary:
        return
    fit = CliffFit(summary["A"], summary["B"], summary["N"], summary["r2"],
                   summary["cliff_sparsity"], summary["n_points"])
    points = summary["points"]
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    markers = {"percentile": "o", "topk": "^"}
    for model in sorted({p["model"] for p in points}):
        for method in METHODS:
            sel = [p for p in points if p["model"] == model and p["method"] == method]
            if sel:
                ax.scatter([p["sparsity"] for p in sel], [p["normalized_accuracy"] for p in sel],
                           marker=markers[method], label=f"{model} {method}", s=22)
    s = np.linspace(0, 1, 200)
    ax.plot(s, fit.predict(s), "k-", lw=1.2,
            label=f"fit A={fit.A:.3f} B={fit.B:.3f} N={fit.N:.2f} R²={fit.r2:.2f}")
    if fit.cliff_sparsity is not None:
        ax.axvline(fit.cliff_sparsity, color="k", ls=":", lw=1)
    ax.set_xlabel("measured sparsity")
    ax.set_ylabel("accuracy / best of its group")
    ax.legend(fontsize=6, ncol=2)
    ctx.save_figure(fig, "sparsity_cliff")


def draw_frozen_kept(frozen: dict[str, Any], ctx: RunContext) -> None:
    """``topk_frozen_kept``: kept fraction over training steps per (model, K), K dashed, the
    end of the warm-up dotted."""
    pairs = frozen.get("pairs") or []
    if not pairs:
        return
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for pair in pairs:
        steps, kept = zip(*pair["kept_over_training"]) if pair["kept_over_training"] else ((), ())
        line = ax.plot(steps, kept, marker="o", ms=3, label=f"{pair['model']} K={pair['level']:g}")
        ax.axhline(pair["level"], color=line[0].get_color(), ls="--", lw=0.8)
    ax.axvline(frozen["freeze_after"], color="k", ls=":", lw=1)
    ax.set_xlabel("training step")
    ax.set_ylabel("kept fraction (training batches)")
    ax.set_yscale("log")
    ax.legend(fontsize=6, ncol=2)
    ctx.save_figure(fig, "topk_frozen_kept")


def draw_gpt(gpt: dict[str, Any], ctx: RunContext) -> None:
    """``sparsity_gpt``: the GPT's validation loss against measured sparsity per method, the
    paper's flat range (11-77 %) shaded, the flat region's tolerance above the best loss
    dashed."""
    points = gpt.get("points") or []
    if not points:
        return
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    lo, hi = gpt["flat_range"]
    ax.axvspan(lo, hi, color="0.9", label=f"paper's flat range {lo:.0%}-{hi:.0%}")
    for method, marker in (("percentile", "o-"), ("topk", "^-"), ("topk-frozen", "v--")):
        sel = [p for p in points if p["method"] == method]
        if sel:
            ax.plot([p["sparsity"] for p in sel], [p["loss"] for p in sel], marker, ms=5,
                    label=method)
    best = min(p["loss"] for p in points if p["method"] != "topk-frozen")
    ax.axhline(best + gpt["tolerance"], color="k", ls=":", lw=1,
               label=f"best + {gpt['tolerance']:g} nats")
    ax.set_xlabel("measured sparsity (activation output)")
    ax.set_ylabel("validation loss (nats / byte)")
    ax.legend(fontsize=7)
    ctx.save_figure(fig, "sparsity_gpt")
