"""Plot helpers for probe tables: a metric against step per layer, histogram strips over training.

Both take the DataFrames the probe returns (:meth:`~actlab.probe.probe.Probe.table`,
:meth:`~actlab.probe.probe.Probe.histograms`) and return the matplotlib ``Axes`` they drew on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd


def _axes(ax: Any) -> Any:
    if ax is not None:
        return ax
    from actlab.plotting import pyplot

    return pyplot().subplots(figsize=(6, 3.5))[1]


def plot_metric(df: pd.DataFrame, metric: str, *, layers: Iterable[str] | None = None,
                ax: Any = None, logx: bool = False) -> Any:
    """One line per layer of ``metric`` against step; raises ValueError for an absent metric."""
    rows = df[df["metric"] == metric]
    if rows.empty:
        present = sorted(df["metric"].unique())
        raise ValueError(f"metric {metric!r} not in the table; present: {present}")
    if layers is not None:
        rows = rows[rows["layer"].isin(list(layers))]
    ax = _axes(ax)
    for layer, part in rows.groupby("layer", sort=False):
        part = part.sort_values("step")
        ax.plot(part["step"], part["value"], label=str(layer), lw=1.2)
    if logx:
        ax.set_xscale("symlog")
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    if rows["layer"].nunique() <= 12:
        ax.legend(fontsize=7, frameon=False)
    ax.figure.tight_layout()
    return ax


def plot_histogram_strip(hist: pd.DataFrame, layer: str, *, kind: str = "post",
                         ax: Any = None, log: bool = True) -> Any:
    """Histogram strip of one site: step on x, bin on y, colour = share of values in the bin
    (log10 when ``log``); each recorded step is normalised on its own."""
    part = hist[(hist["layer"] == layer) & (hist["kind"] == kind)]
    if part.empty:
        raise ValueError(f"no {kind} histograms for layer {layer!r}")
    grid = part.pivot_table(index="bin_left", columns="step", values="count", aggfunc="sum")
    share = grid.to_numpy() / np.maximum(grid.to_numpy().sum(axis=0, keepdims=True), 1)
    image = np.log10(share + 1e-6) if log else share
    steps = grid.columns.to_numpy()
    low, high = part["bin_left"].min(), part["bin_right"].max()
    ax = _axes(ax)
    x = np.arange(len(steps))
    mesh = ax.imshow(image, origin="lower", aspect="auto", cmap="viridis",
                     extent=(-0.5, len(steps) - 0.5, low, high))
    ticks = x[:: max(1, len(x) // 8)]
    ax.set_xticks(ticks, [str(s) for s in steps[ticks]])
    ax.set_xlabel("step")
    ax.set_ylabel(f"{kind}-activation")
    ax.set_title(layer, fontsize=9)
    ax.figure.colorbar(mesh, ax=ax, label="log10 share" if log else "share")
    ax.figure.tight_layout()
    return ax


def _natural_key(label: str) -> tuple:
    """Sort key putting ``layer2`` before ``layer10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(label)))


def plot_layer_means(ax: Any, rows: pd.DataFrame, metric: str, *, relative: bool = False) -> Any:
    """One line per layer of ``metric``'s mean over seeds against step, on ``ax``.

    ``rows`` are tidy-table rows (``seed, step, layer, metric, value``); with ``relative``
    each line shows the change from its first logged value. Layers are drawn in natural
    order (``layer2`` before ``layer10``) and labelled; returns ``ax``.
    """
    means = rows[rows["metric"] == metric].groupby(["layer", "step"])["value"].mean()
    for layer in sorted(means.index.get_level_values(0).unique(), key=_natural_key):
        series = means.loc[layer]
        if relative:
            series = series - series.iloc[0]
        ax.plot(series.index, series.values, label=layer)
    ax.tick_params(labelsize=7)
    return ax
