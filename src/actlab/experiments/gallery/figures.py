"""Figures of the ``gallery`` experiment."""

from __future__ import annotations

import math
from typing import Any

import torch

from actlab.experiments.gallery.summary import (
    AVERAGE_KEYS,
    RECURSION_SETTINGS,
    elementwise_activations,
)
from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw_gallery_figures(ctx: RunContext, summary: dict, table: Any, plot_range: float) -> None:
    """Activations, Gaussian averages, shifts and gains, and the variance recursion."""
    _draw_gallery(ctx, plot_range)
    _draw_averages(ctx, summary["averages"])
    _draw_shifts_and_gains(ctx, summary["shifts"], summary["gains"])
    _draw_recursion(ctx, table)


def _draw_gallery(ctx: RunContext, plot_range: float) -> None:
    plt = pyplot()

    from actlab.theory.gaussian import resolve

    specs = elementwise_activations()
    cols = 4
    rows = math.ceil(len(specs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    z = torch.linspace(-plot_range, plot_range, 801, dtype=torch.float64)
    for ax, spec in zip(axes.flat, specs):
        function, derivative = resolve(spec)
        with torch.no_grad():
            ax.plot(z, function(z), label="f")
            ax.plot(z, derivative(z), "--", label="f'")
        ax.axhline(0, color="0.85", lw=0.8)
        ax.axvline(0, color="0.85", lw=0.8)
        ax.set_title(spec, fontsize=10)
        ax.set_ylim(-1.5, max(3.0, 1.5))
    for ax in list(axes.flat)[len(specs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("Activations (solid) and their derivatives (dashed)")
    fig.tight_layout()
    ctx.save_figure(fig, "activations")


def _draw_averages(ctx: RunContext, averages: dict) -> None:
    plt = pyplot()

    specs = list(averages)
    fig, axes = plt.subplots(1, 4, figsize=(15, 0.28 * len(specs) + 1.5), sharey=True)
    for ax, key in zip(axes, AVERAGE_KEYS):
        values = [averages[s][key] for s in specs]
        ax.barh(specs, values, color="tab:blue", label="theory")
        pub = [(i, averages[s]["published"][key]) for i, s in enumerate(specs)
               if "published" in averages[s]]
        ax.scatter([v for _, v in pub], [i for i, _ in pub], color="tab:red", zorder=3,
                   marker="|", s=200, label="handbook")
        ax.set_title(key)
    axes[0].legend(fontsize=8)
    fig.suptitle("Gaussian averages at unit variance (bars) and the handbook's values (red)")
    fig.tight_layout()
    ctx.save_figure(fig, "gaussian_averages")


def _draw_shifts_and_gains(ctx: RunContext, shifts: dict, gains: dict) -> None:
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.5))
    names = list(shifts)
    xs = range(len(names))
    left.bar([x - 0.2 for x in xs], [shifts[n]["theory"] for n in names], 0.4, label="theory")
    left.bar([x + 0.2 for x in xs], [shifts[n]["paper"] for n in names], 0.4, label="Table 1")
    left.set_xticks(list(xs), names)
    left.set_title("shift b = E f(z), z ~ N(0, 1/3)")
    left.legend()
    names = list(gains)
    xs = range(len(names))
    right.bar([x - 0.2 for x in xs], [gains[n]["fixed_point"] for n in names], 0.4,
              label="fixed point 1/sqrt(E f²)")
    right.bar([x + 0.2 for x in xs], [gains[n]["torch"] for n in names], 0.4,
              label="torch calculate_gain")
    right.set_xticks(list(xs), names, rotation=30)
    right.set_title("gains")
    right.legend(fontsize=8)
    fig.tight_layout()
    ctx.save_figure(fig, "shifts_and_gains")


def _draw_recursion(ctx: RunContext, table: Any) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    titles = {"activation_second_moment": "activation second moment m",
              "error_variance": "error variance E Δ²",
              "weight_gradient_norm": "per-example weight-gradient norm"}
    for i, (label, *_) in enumerate(RECURSION_SETTINGS):
        rows = table[table["run"] == f"recursion/{label}"]
        colour = f"C{i}"
        for ax, field in zip(axes, titles):
            for kind, style in (("measured", "-"), ("predicted", "--")):
                sel = rows[rows["metric"] == f"{kind}_{field}"]
                sel = sel.assign(order=sel["layer"].astype(int)).sort_values("order")
                ax.plot(sel["order"], sel["value"], style, color=colour,
                        label=label if kind == "measured" else None)
    for ax, title in zip(axes, titles.values()):
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.suptitle("Variance recursion: measured (solid) vs predicted (dashed)")
    fig.tight_layout()
    ctx.save_figure(fig, "variance_recursion")
