"""``actlab list`` and ``actlab info``: the activation catalogue and one activation's Gaussian averages."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from actlab.cli import main


def _catalogue() -> list[tuple[str, str]]:
    """``(name, description)`` of every available activation, sorted by name."""
    from actlab.activations.registry import activation_info, available_activations

    return [(name, activation_info(name).description) for name in available_activations()]


@main.command("list")
def list_activations() -> None:
    """List every available activation with a short description."""
    items = _catalogue()
    width = max((len(name) for name, _ in items), default=0)
    for name, description in items:
        click.echo(f"{name:<{width}}  {description}".rstrip())


def plot_activation(spec: str, path: Path, lo: float = -5.0, hi: float = 5.0) -> Path:
    """Draw ``spec`` and its derivative on ``[lo, hi]`` into the PNG ``path``."""
    import torch

    from actlab.plotting import pyplot
    from actlab.theory.gaussian import resolve

    plt = pyplot()

    function, derivative = resolve(spec)
    z = torch.linspace(lo, hi, 1001, dtype=torch.float64)
    with torch.no_grad():
        values, slopes = function(z), derivative(z)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(z, values, label=f"{spec}")
    ax.plot(z, slopes, "--", label="derivative")
    ax.axhline(0, color="0.8", lw=0.8)
    ax.axvline(0, color="0.8", lw=0.8)
    ax.set_xlabel("z")
    ax.legend()
    ax.set_title(spec)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


@main.command("info")
@click.argument("spec")
@click.option("--q", "q", type=float, default=1.0, show_default=True,
              help="Variance of the Gaussian net input z ~ N(0, q).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--plot", "plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Draw the function and its derivative into this PNG file.")
def info(spec: str, q: float, as_json: bool, plot: Path | None) -> None:
    """Gaussian averages of the activation SPEC: mean, E f(z)², E f'(z)² and the fixed-point gain."""
    from actlab.theory.gaussian import moments

    result = moments(spec, q).as_dict()
    if plot is not None:
        if not plot.parent.exists():
            raise FileNotFoundError(f"--plot: folder {str(plot.parent)!r} does not exist")
        plot_activation(spec, plot)
    if as_json:
        click.echo(json.dumps({"spec": spec, "q": q, **result}))
        return
    click.echo(f"{spec}   z ~ N(0, {q:g})")
    labels = {
        "mean": "mean E f(z)",
        "second_moment": "E f(z)^2",
        "slope_second_moment": "E f'(z)^2",
        "gain": "gain 1/sqrt(E f^2) at q=1",
    }
    for key, label in labels.items():
        value = result[key]
        text = "inf" if math.isinf(value) else f"{value:.6f}"
        click.echo(f"  {label:<27} {text}")
    if plot is not None:
        click.echo(f"  plot written to {plot}")
