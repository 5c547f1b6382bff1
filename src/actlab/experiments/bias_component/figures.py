"""Figures of ``bias-component``: similarity curves, the loss residual and image grids."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from actlab import analysis
from actlab.experiments.bias_component.summary import CONDITIONS, PREFIX
from actlab.recipes.autoencoder import PARTS

THEORY = "shifted-theory"
THEORY_COLOR = "tab:orange"

if TYPE_CHECKING:
    from actlab.runner.experiment import RunContext


def draw_figures(table: pd.DataFrame, results: list[dict[str, Any]], ctx: RunContext) -> None:
    """Similarity and latent-share curves, the loss residual (Fig. 17), per-model image grids."""
    plt = analysis.pyplot()
    if table.empty:
        return
    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
    for ax, metric in zip(axes, ("bias_correlation", "dev_correlation", "bias_share",
                                 "bias_input_correlation")):
        _theory_curve(ax, table, metric)
    analysis.plot_pair_curves(axes[3], table, PREFIX, "bias_input_correlation", log=True)
    axes[3].set_ylabel("correlation(bias-only, input)")
    axes[3].set_title("image content in the bias component", fontsize=9)
    analysis.plot_pair_curves(axes[0], table, PREFIX, "bias_correlation", log=True)
    axes[0].set_ylabel("correlation(bias-only, full reconstruction)")
    axes[0].set_title("bias component vs full reconstruction", fontsize=9)
    analysis.plot_pair_curves(axes[1], table, PREFIX, "dev_correlation", log=True)
    axes[1].set_ylabel("correlation(deviation-only, full)")
    axes[1].set_title("deviation vs full reconstruction", fontsize=9)
    analysis.plot_pair_curves(axes[2], table, PREFIX, "bias_share", log=True)
    axes[2].set_ylabel("|h_bias|^2 / |h|^2")
    axes[2].set_title("latent energy in the bias component", fontsize=9)
    for ax in axes:
        ax.legend(fontsize=7)
    ctx.save_figure(fig, "similarity")

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    analysis.plot_pair_curves(axes[0], table, PREFIX, "test_loss", log=True)
    _theory_curve(axes[0], table, "test_loss")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("held-out reconstruction MSE")
    axes[0].legend(fontsize=7)
    residual = analysis.paired_residual(table, "test_loss", PREFIX)
    x = np.maximum(residual.index.to_numpy(dtype=float), 1)
    axes[1].plot(x, residual.to_numpy(), color="gray", alpha=0.4, lw=0.7)
    axes[1].plot(x, residual.mean(axis=1).to_numpy(), color="black", lw=2,
                 label="shifted (measured b)")
    theory = (analysis.curves(table, f"{PREFIX}/{THEORY}", "test_loss")
              - analysis.curves(table, f"{PREFIX}/unshifted", "test_loss")).dropna(how="all")
    if not theory.empty:
        xt = np.maximum(theory.index.to_numpy(dtype=float), 1)
        axes[1].plot(xt, theory.mean(axis=1).to_numpy(), color=THEORY_COLOR, lw=1.5,
                     label=f"{THEORY} (b = 0.23)")
        axes[1].legend(fontsize=7)
    axes[1].axhline(0, color="k", lw=0.5, ls="--")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("L_shifted - L_unshifted")
    axes[1].set_title("reconstruction loss residual (Fig. 17)", fontsize=9)
    ctx.save_figure(fig, "fig17_loss_residual")

    for cond in CONDITIONS:
        entry = next((r for r in results if r["unit"].get("condition") == cond and r["data"]),
                     None)
        if entry is None:
            continue
        seeds = sorted(int(k) for k in entry["data"] if k.isdigit())
        if seeds:
            _image_grid(entry["data"][str(seeds[0])], cond, seeds[0], ctx)


def _theory_curve(ax: Any, table: pd.DataFrame, metric: str) -> None:
    """The seed-mean curve of the ``shifted-theory`` variant beside the pair's curves."""
    curve = analysis.curves(table, f"{PREFIX}/{THEORY}", metric)
    if not curve.empty:
        x = np.maximum(np.asarray(curve.index, dtype=float), 1)
        ax.plot(x, curve.mean(axis=1).to_numpy(), color=THEORY_COLOR, lw=1.5, label=THEORY)


def _image_grid(images: dict[str, Any], cond: str, seed: int, ctx: RunContext) -> None:
    """Rows: per shown image, full / bias-only / deviation-only; columns: input, checkpoints."""
    plt = analysis.pyplot()
    steps = images["steps"]
    inputs = np.asarray(images["input"])
    if not steps or inputs.size == 0:
        return
    n_img = inputs.shape[0]
    fig, axes = plt.subplots(3 * n_img, len(steps) + 1, squeeze=False,
                             figsize=(1.1 * (len(steps) + 1), 1.1 * 3 * n_img))
    for i in range(n_img):
        for r, part in enumerate(PARTS):
            row = 3 * i + r
            ax = axes[row, 0]
            low, high = float(inputs[i].min()), float(inputs[i].max())
            if r == 0:  # the input image stands in the label column of the "full" row
                ax.imshow(_display(inputs[i], low, high), cmap="gray")
                ax.set_title("input" if i == 0 else "", fontsize=7)
                ax.set_xlabel("input | full", fontsize=7)
            else:
                ax.text(0.5, 0.5, part, ha="center", va="center", fontsize=8,
                        transform=ax.transAxes)
            for j, step in enumerate(steps):
                axes[row, j + 1].imshow(_display(np.asarray(images[part][j])[i], low, high),
                                        cmap="gray")
                if row == 0:
                    axes[row, j + 1].set_title(f"step {step}", fontsize=7)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_visible(False)
    fig.suptitle(f"{cond} (seed {seed}): full / bias-only / deviation-only reconstructions",
                 fontsize=9)
    ctx.save_figure(fig, f"fig5_grid_{cond}")


def _display(image: np.ndarray, low: float, high: float) -> np.ndarray:
    """``(C, H, W)`` -> ``(H, W[, C])`` mapped from the input's ``[low, high]`` to [0, 1].

    Every panel of one image shares its input's range, so a faint reconstruction looks faint.
    """
    image = np.asarray(image, dtype=float)
    image = image[0] if image.shape[0] == 1 else np.transpose(image, (1, 2, 0))
    return np.clip((image - low) / (high - low), 0, 1) if high > low else np.zeros_like(image)
