"""The improvement heat maps and the optimal-shift histograms: Figs. 12 and 13 of
"Rethinking Activation Functions"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.plotting import pyplot

if TYPE_CHECKING:
    from actlab.experiments.size_sweep import Config
    from actlab.experiments.size_sweep.summary import OptimalShifts
    from actlab.runner.experiment import RunContext


def size_grid_figure(config: Config, cells: dict[str, dict[str, Any]], ctx: RunContext) -> None:
    """Fig. 12: one (d, m) heat map of the relative improvement per depth L."""
    plt = pyplot()
    Ls = list(config.grid_L)
    fig, axes = plt.subplots(1, len(Ls), figsize=(4.8 * len(Ls), 3.8), squeeze=False,
                             layout="constrained")
    for ax, L in zip(axes[0], Ls):
        grid = np.full((len(config.grid_d), len(config.grid_m)), np.nan)
        for i, d in enumerate(config.grid_d):
            for j, m in enumerate(config.grid_m):
                if (cell := cells.get(f"{d}x{m}x{L}")) is not None:
                    grid[i, j] = cell["relative_improvement"]
        limit = np.nanmax(np.abs(grid)) if np.isfinite(grid).any() else 1.0
        im = ax.imshow(grid, cmap="RdBu_r", vmin=-limit, vmax=limit, origin="lower")
        for (i, j), v in np.ndenumerate(grid):
            if np.isfinite(v):
                ax.text(j, i, f"{100 * v:.1f}%", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(config.grid_m)), config.grid_m)
        ax.set_yticks(range(len(config.grid_d)), config.grid_d)
        ax.set_xlabel("MLP width m")
        ax.set_ylabel("residual width d")
        ax.set_title(f"L = {L}")
        fig.colorbar(im, ax=ax, label="relative improvement")
    fig.suptitle("Fig. 12: (L_unshifted - L_shifted) / L_unshifted (red: shifting helps)")
    ctx.save_figure(fig, "fig12_size_grid")


def optimal_shift_figure(samples: list[OptimalShifts], ctx: RunContext) -> None:
    """Fig. 13: per size, a histogram of the seeds' optimal shifts over the shift grid."""
    plt = pyplot()
    n = max(1, len(samples))
    fig, axes = plt.subplots(1, n, figsize=(4 * n, 3.4), squeeze=False, layout="constrained")
    for ax, sample in zip(axes[0], samples):
        shifts = sample.shifts
        step = np.diff(shifts).min() if len(shifts) > 1 else 0.05
        edges = np.append(np.asarray(shifts) - step / 2, shifts[-1] + step / 2)
        ax.hist(sample.best, bins=edges, color="tab:gray")
        ax.axvline(sample.theory_shift, color="tab:red", ls="--", label="theory")
        ax.set_title(sample.size.replace("x", ", ").join("()"))
        ax.set_xlabel("per-seed optimal shift")
    axes[0, 0].set_ylabel("seeds")
    axes[0, 0].legend()
    fig.suptitle("Fig. 13: empirically optimal shifts per seed")
    ctx.save_figure(fig, "fig13_optimal_shifts")
