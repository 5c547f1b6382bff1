"""``gallery``: every activation and its derivative, and the theory tables next to published values.

1. Figures of every registered activation and its derivative.
2. Gaussian averages (mean, E f², E f'², gain) at unit variance for every elementwise
   activation, and for the handbook's eight against its published four-decimal values.
3. Theory shifts E f(z), z ~ N(0, 1/3), against Table 1 of the "Rethinking" paper.
4. Fixed-point gains against ``torch.nn.init.calculate_gain``.
5. The variance recursion against one measured random network per setting (the handbook's
   "Checking the predictions": sigmoid + Xavier, ReLU + He, ReLU + Xavier, ReLU + 1.5·He).

Everything is computed by :mod:`actlab.theory` and :mod:`actlab.init`; this module only
arranges, compares and draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from actlab.errors import ConfigError
from actlab.experiments._common import require_at_least_one, require_positive
from actlab.experiments._gallery_data import (  # noqa: F401 - PUBLISHED_AVERAGES re-exported
    GAIN_NAMES,
    PUBLISHED_AVERAGES,
    PUBLISHED_SHIFTS,
    RECURSION_FIELDS,
    RECURSION_SETTINGS,
    elementwise_activations,
    read_averages,
    read_gains,
    read_recursion,
    read_shifts,
)
from actlab.experiments._gallery_figures import draw_gallery_figures, print_tables
from actlab.runner.claims import claim_id
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)

NAME = "gallery"


@dataclass
class GalleryConfig:
    """Settings of the gallery. ``width``, ``depth`` and ``n_examples`` shape the recursion check."""

    q_shift: float = 1 / 3
    depth: int = 20
    width: int = 128
    n_examples: int = 500
    plot_range: float = 5.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.q_shift) and self.q_shift > 0):
            raise ConfigError("q_shift", f"must be a finite number > 0, got {self.q_shift}")
        require_at_least_one(self, ("depth", "width", "n_examples"))
        require_positive(self, ("plot_range",))


def recursion_network(config: GalleryConfig, activation: str, scheme: str, multiplier: float):
    """Widths, weight variances and activations of the recursion check (a linear output layer)."""
    from actlab.init import weight_std

    widths = [config.width] * (config.depth + 2)
    variance = (multiplier * weight_std(scheme, config.width, config.width)) ** 2
    return widths, variance, [activation] * config.depth + ["identity"]


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
    default_seeds = 1
    seeds_per_unit = None

    def run_unit(self, config: GalleryConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Compute every table; the seed draws the recursion check's random networks."""
        from torch.nn.init import calculate_gain

        from actlab.init import recommended_gain
        from actlab.theory.gaussian import moments, shift
        from actlab.theory.recursion import measure_variances, predict_variances

        seed = seeds[0] if seeds else 0
        result = UnitResult()
        for spec in elementwise_activations():
            for key, value in moments(spec).as_dict().items():
                result.add(f"averages/{spec}", seed, 0, "", key, value)
        for spec in PUBLISHED_SHIFTS:
            result.add(f"shift/{spec}", seed, 0, "", "shift", shift(spec, config.q_shift))
        for name in GAIN_NAMES:
            result.add(f"gain/{name}", seed, 0, "", "fixed_point", recommended_gain(name))
            result.add(f"gain/{name}", seed, 0, "", "torch", calculate_gain(name))
        settings = ctx.progress(RECURSION_SETTINGS, desc="recursion")
        for index, (label, activation, scheme, multiplier) in enumerate(settings):
            widths, variance, activations = recursion_network(config, activation, scheme, multiplier)
            predicted = predict_variances(widths, variance, activations)
            generator = torch.Generator().manual_seed(seed * 1000 + index)
            measured = measure_variances(widths, variance, activations,
                                         n_examples=config.n_examples, generator=generator)
            for kind, values in (("predicted", predicted), ("measured", measured)):
                for field in RECURSION_FIELDS:
                    for layer, value in enumerate(getattr(values, field), start=1):
                        result.add(f"recursion/{label}", seed, 0, str(layer), f"{kind}_{field}",
                                   value)
        return result

    def summarize(self, config: GalleryConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Tables as nested dicts, headline comparisons, and the figures."""
        summary = {
            "averages": read_averages(table),
            "shifts": read_shifts(table, config.q_shift),
            "gains": read_gains(table),
            "recursion": read_recursion(table),
        }
        draw_gallery_figures(ctx, summary, table, config.plot_range)
        print_tables(summary)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Published values and the handbook's statements about the recursion example."""
        return gallery_claims(summary)


def _spread(values: list[float]) -> float:
    """max/min of the standard deviations sqrt(values) over layers."""
    return math.sqrt(max(values) / min(values))


def _per_layer_factor(values: list[float]) -> float:
    """Geometric-mean factor per layer by which sqrt(values) grows from the first to the last."""
    return math.sqrt(values[-1] / values[0]) ** (1 / (len(values) - 1))


def gallery_claims(summary: dict) -> list[Claim]:
    """The headline rows: published numbers reproduced, and the recursion example's statements."""
    averages, shifts, gains, rec = (summary[k] for k in ("averages", "shifts", "gains",
                                                          "recursion"))
    checked = {k: v for k, v in averages.items() if "published" in v}
    missed = sorted(k for k, v in checked.items() if not v["matches"])
    claims = [
        Claim("Gaussian averages (mean, E f², E f'², gain) of the eight activations, 4 decimals",
              f"{len(checked) - len(missed)}/{len(checked)} activations match"
              + (f"; differ: {', '.join(missed)}" if missed else ""),
              not missed and len(checked) == 8, "seed 001, Averages over a Gaussian net input",
              id=claim_id(NAME, "all", "averages-match-published"), value=len(missed),
              comparison="compound", threshold=0),
        Claim("theory shifts b at q = 1/3: ReLU 0.230, GELU 0.115, Swish 0.077, sigmoid 0.500, "
              "tanh 0",
              ", ".join(f"{k} {v['theory']:.3f}" for k, v in shifts.items()),
              all(v["matches"] for v in shifts.values()), "seed 000, Table 1 and App. A",
              id=claim_id(NAME, "all", "theory-shifts-match-published"),
              value=sum(not v["matches"] for v in shifts.values()), comparison="<=", threshold=0),
    ]
    same = [n for n in ("linear", "conv2d", "relu", "leaky_relu") if gains[n]["equal"]]
    claims.append(Claim(
        "the fixed-point gain equals PyTorch's for linear, ReLU and leaky ReLU; tanh's is "
        "1.5925, close to PyTorch's 5/3",
        f"equal for {', '.join(same)}; tanh {gains['tanh']['fixed_point']:.4f} vs "
        f"{gains['tanh']['torch']:.4f}, sigmoid {gains['sigmoid']['fixed_point']:.4f} vs "
        f"{gains['sigmoid']['torch']:.4f}, selu {gains['selu']['fixed_point']:.4f} vs "
        f"{gains['selu']['torch']:.4f}",
        len(same) == 4 and round(gains["tanh"]["fixed_point"], 4) == 1.5925,
        "seed 001, A gain for any activation", id=claim_id(NAME, "all", "fixed-point-gains"),
        value=gains["tanh"]["fixed_point"], comparison="compound", threshold=1.5925))
    he = rec["ReLU, He"]
    he_spread = max(_spread(he["measured_activation_second_moment"][:-1]),
                    _spread(he["measured_error_variance"][:-1]))
    claims.append(Claim(
        "ReLU with He: forward and backward sizes stay within a factor of two across all 20 "
        "layers", f"measured max/min of the std over hidden layers {he_spread:.2f}",
        he_spread <= 2.0, "seed 001, Checking the predictions",
        id=claim_id(NAME, "relu-he", "sizes-within-factor-two"), value=he_spread,
        comparison="<=", threshold=2.0))
    sig = rec["sigmoid, Xavier"]
    # Going back from layer 20 to layer 1 the error shrinks by the factor it grows forwards.
    measured_factor = _per_layer_factor(sig["measured_error_variance"][:-1])
    predicted_factor = _per_layer_factor(sig["predicted_error_variance"][:-1])
    claims.append(Claim(
        "sigmoid with Xavier: the error shrinks by a factor of about 4.3 per layer",
        f"measured {measured_factor:.2f} per layer (predicted {predicted_factor:.2f})",
        abs(measured_factor - 4.3) <= 0.3, "seed 001, Checking the predictions",
        id=claim_id(NAME, "sigmoid-xavier", "error-shrinks-4.3-per-layer"), value=measured_factor,
        comparison="within", threshold=0.3, reference=4.3))
    xav = rec["ReLU, Xavier"]
    grads_x = xav["measured_weight_gradient_norm"][:-1]
    grads_he = he["measured_weight_gradient_norm"][:-1]
    ratio = math.exp(sum(math.log(a / b) for a, b in zip(grads_x, grads_he)) / len(grads_x))
    flat = max(grads_x) / min(grads_x)
    claims.append(Claim(
        "ReLU with Xavier: per-example weight gradients flat across layers, about 2^-10 times "
        "He's", f"max/min over hidden layers {flat:.2f}; Xavier/He {ratio:.2e} "
        f"(2^-10 = {2**-10:.2e})", flat <= 2.0 and 0.5 <= ratio / 2**-10 <= 2.0,
        "seed 001, Checking the predictions", id=claim_id(NAME, "relu-xavier", "flat-gradients"),
        value=flat, comparison="compound", threshold=2.0))
    worst = max(v["worst_factor"] for v in rec.values())
    median = max(v["median_factor"] for v in rec.values())
    claims.append(Claim(
        "the recursion's predictions follow the measured per-layer sizes closely (one network "
        "per setting, so finite-width scatter remains)",
        f"median measured/predicted factor per setting at most {median:.2f}; worst single "
        f"layer {worst:.2f}", median <= 1.25, "seed 001, Checking the predictions",
        id=claim_id(NAME, "all", "recursion-follows-measured"), value=median, comparison="<=",
        threshold=1.25))
    return claims
