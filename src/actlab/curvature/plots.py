"""Figure helper for loss planes: a heat map with projected trajectories."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from matplotlib.figure import Figure

from actlab.curvature.landscape import PlaneGrid

_COLORS = ("tab:blue", "tab:red", "tab:green", "tab:orange", "tab:purple")


def plot_plane(
    grid: PlaneGrid,
    trajectories: Mapping[str, torch.Tensor] | Sequence[torch.Tensor] | None = None,
    title: str = "",
    log_scale: bool = False,
    levels: int = 30,
    axis_labels: tuple[str, str] = ("α", "β"),
) -> Figure:
    """Draw ``grid.loss`` as a filled contour map (red = high loss) with trajectories on top.

    ``trajectories`` maps a label to a ``(T, 2)`` tensor of plane coordinates (from
    :func:`actlab.curvature.project_trajectory`), or is a list of such tensors. Uses the
    object-oriented Matplotlib API (no pyplot state); save with ``fig.savefig``.
    """
    fig = Figure(figsize=(5, 4.2))
    ax = fig.add_subplot(1, 1, 1)
    z = grid.loss.clone()
    if log_scale:
        z = torch.log10(z.clamp_min(1e-12))
    z = torch.where(torch.isfinite(z), z, torch.nan)
    cs = ax.contourf(grid.alphas.numpy(), grid.betas.numpy(), z.numpy(), levels=levels, cmap="coolwarm")
    fig.colorbar(cs, ax=ax, label="log10 loss" if log_scale else "loss")
    if trajectories is not None:
        items = trajectories.items() if isinstance(trajectories, Mapping) else (
            (f"trajectory {i}", t) for i, t in enumerate(trajectories)
        )
        for i, (label, coords) in enumerate(items):
            c = torch.as_tensor(coords).detach().cpu().double()
            color = _COLORS[i % len(_COLORS)]
            ax.plot(c[:, 0], c[:, 1], "-", color=color, lw=1.5, label=label)
            ax.plot(c[:1, 0], c[:1, 1], "o", color=color, ms=5)
            ax.plot(c[-1:, 0], c[-1:, 1], "*", color=color, ms=9)
        ax.legend(loc="best", fontsize=8)
    ax.set_xlabel(axis_labels[0])
    ax.set_ylabel(axis_labels[1])
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig
