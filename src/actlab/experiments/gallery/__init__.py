"""``gallery``: every activation and its derivative, and the theory tables next to published values.

1. Figures of every registered activation and its derivative.
2. Gaussian averages (mean, E f², E f'², gain) at unit variance for every elementwise
   activation, and for the handbook's eight against its published four-decimal values.
3. Theory shifts E f(z), z ~ N(0, 1/3), against Table 1 of the "Rethinking" paper.
4. Fixed-point gains against ``torch.nn.init.calculate_gain``.
5. The variance recursion against one measured random network per setting and seed (the
   handbook's "Checking the predictions": sigmoid + Xavier, ReLU + He, ReLU + Xavier,
   ReLU + 1.5·He).
6. Landmarks of the graphs the documents state: GELU's and SiLU's minima and peak slopes, the
   largest gap between GELU and its tanh approximation, where the sigmoid's and tanh's slopes
   fall below 0.01 (the handbook), and SiLU and its slope at -1 (the gated-FFN notes).

Everything is computed by :mod:`actlab.theory` and :mod:`actlab.init`; this package only
arranges, compares and draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from actlab.errors import ConfigError
from actlab.experiments.gallery.claims import NAME
from actlab.experiments.gallery.claims import claims as gallery_claims
from actlab.experiments.gallery.figures import draw_gallery_figures
from actlab.experiments.gallery.summary import (
    GAIN_NAMES,
    LANDMARKS,
    PUBLISHED_SHIFTS,
    RECURSION_FIELDS,
    RECURSION_SETTINGS,
    SATURATION_SLOPE,
    build_summary,
    elementwise_activations,
    print_tables,
)
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, checked


@dataclass
class GalleryConfig(CheckedConfig):
    """Settings of the gallery. ``width``, ``depth`` and ``n_examples`` shape the recursion check."""

    q_shift: float = checked(1 / 3, gt=0)
    depth: int = checked(20, ge=1)
    width: int = checked(128, ge=1)
    n_examples: int = checked(500, ge=1)
    plot_range: float = checked(5.0, gt=0)

    def check(self) -> None:
        """``q_shift`` must also be finite (a bound alone lets infinity through)."""
        if not math.isfinite(self.q_shift):
            raise ConfigError("q_shift", f"must be a finite number > 0, got {self.q_shift}")


def recursion_network(config: GalleryConfig, activation: str, scheme: str,
                      multiplier: float) -> tuple[list[int], float, list[str]]:
    """Widths, weight variances and activations of the recursion check (a linear output layer)."""
    from actlab.init import weight_std

    widths = [config.width] * (config.depth + 2)
    variance = (multiplier * weight_std(scheme, config.width, config.width)) ** 2
    return widths, variance, [activation] * config.depth + ["identity"]


def landmark(kind: str, spec: str, interval: tuple[float, float]) -> dict[str, float]:
    """One landmark of ``spec``'s graph (a kind of :data:`~.summary.LANDMARKS`), float64."""
    from actlab.theory import landmarks
    from actlab.theory.gaussian import resolve

    function, slope = resolve(spec)
    lo, hi = interval
    if kind == "minimum":
        point = landmarks.minimum(function, lo, hi)
    elif kind == "peak_slope":
        point = landmarks.maximum(slope, lo, hi)
    elif kind == "tanh_gap":
        point = landmarks.largest_gap(resolve(f"{spec}:tanh")[0], function, lo, hi)
    elif kind == "saturation":
        return {"at": landmarks.falls_below(slope, SATURATION_SLOPE, lo, hi)}
    elif kind == "at_minus_one":
        x = torch.tensor([lo], dtype=torch.float64)
        return {"at": lo, "value": float(function(x)[0]), "slope": float(slope(x)[0])}
    else:
        raise ValueError(f"unknown landmark kind {kind!r}")
    return {"at": point.at, "value": point.value}


@register
class GalleryExperiment(Experiment):
    """Activation gallery and theory tables (Gaussian averages, shifts, gains, recursion)."""

    name = NAME
    headline_figure = "activations"
    description = ("Every activation and its derivative; Gaussian averages, Table 1 shifts and "
                   "gains vs published values; the variance recursion vs a measured network.")
    host_only = "activation tables and a seeded Monte Carlo of the variance recursion"
    Config = GalleryConfig
    quick = {"n_examples": 200}
    full = {"width": 512, "n_examples": 1000}
    default_seeds = 3  # the recursion claims measure random networks: judged over 3 seeds
    seeds_per_unit = None

    def run_unit(self, config: GalleryConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Compute every table once and record it under every seed (no seed enters it), then
        draw the recursion check's random networks for each seed."""
        from torch.nn.init import calculate_gain

        from actlab.init import recommended_gain
        from actlab.theory.gaussian import moments, shift
        from actlab.theory.recursion import measure_variances, predict_variances

        seeds = list(seeds) or [0]
        tables: list[tuple[str, str, str, float]] = []  # run, layer, metric, value
        for spec in elementwise_activations():
            for key, value in moments(spec).as_dict().items():
                tables.append((f"averages/{spec}", "", key, value))
        for spec in PUBLISHED_SHIFTS:
            tables.append((f"shift/{spec}", "", "shift", shift(spec, config.q_shift)))
        for name in GAIN_NAMES:
            tables.append((f"gain/{name}", "", "fixed_point", recommended_gain(name)))
            tables.append((f"gain/{name}", "", "torch", calculate_gain(name)))
        for name, kind, spec, interval in LANDMARKS:
            for key, value in landmark(kind, spec, interval).items():
                tables.append((f"landmarks/{name}", "", key, value))
        networks = [(label, *recursion_network(config, activation, scheme, multiplier))
                    for label, activation, scheme, multiplier in RECURSION_SETTINGS]
        predictions = {label: predict_variances(widths, variance, activations)
                       for label, widths, variance, activations in networks}
        result = UnitResult()
        for seed in ctx.progress(seeds, desc="seeds"):
            for run, layer, metric, value in tables:
                result.add(run, seed, 0, layer, metric, value)
            for index, (label, widths, variance, activations) in enumerate(networks):
                generator = torch.Generator().manual_seed(seed * 1000 + index)
                measured = measure_variances(widths, variance, activations,
                                             n_examples=config.n_examples, generator=generator)
                for kind, values in (("predicted", predictions[label]), ("measured", measured)):
                    for field in RECURSION_FIELDS:
                        for layer, value in enumerate(getattr(values, field), start=1):
                            result.add(f"recursion/{label}", seed, 0, str(layer),
                                       f"{kind}_{field}", value)
        return result

    def summarize(self, config: GalleryConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Tables as nested dicts, headline comparisons, and the figures, of the first seed
        (the tables are the same in every seed; the recursion check's networks are not)."""
        seed = int(table["seed"].min())
        first = table[table["seed"] == seed]
        summary = {"seed": seed, **build_summary(config, first)}
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_gallery_figures(ctx, summary, first, config.plot_range)
        print_tables(summary)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Published values and the handbook's statements about the recursion example."""
        return gallery_claims(summary)
