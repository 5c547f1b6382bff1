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
import statistics
from dataclasses import dataclass

import torch

from actlab.errors import ConfigError
from actlab.experiments._common import require_at_least_one, require_positive
from actlab.plotting import pyplot
from actlab.runner.claims import claim_id
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)

# Seed 001, "Averages over a Gaussian net input": mean, E f², E f'², gain (z ~ N(0, 1)).
PUBLISHED_AVERAGES = {
    "sigmoid": (0.5000, 0.2934, 0.0448, 1.8462),
    "tanh": (0.0, 0.3943, 0.4644, 1.5925),
    "relu": (0.3989, 0.5000, 0.5000, 1.4142),
    "leaky_relu": (0.3950, 0.50005, 0.50005, 1.4141),
    "elu": (0.1605, 0.6449, 0.6681, 1.2452),
    "gelu": (0.2821, 0.4252, 0.4559, 1.5335),
    "silu": (0.2066, 0.3558, 0.3795, 1.6765),
    "softplus": (0.8061, 0.9212, 0.2934, 1.0419),
}
AVERAGE_KEYS = ("mean", "second_moment", "slope_second_moment", "gain")
# Seed 000, Table 1 (tanh from App. A, eq. 19): b = E f(Z), Z ~ N(0, 1/3), three decimals.
PUBLISHED_SHIFTS = {"relu": 0.230, "gelu": 0.115, "swish": 0.077, "sigmoid": 0.500, "tanh": 0.0}
# Nonlinearities both conventions support: torch.nn.init.calculate_gain vs the fixed point.
GAIN_NAMES = ("linear", "conv2d", "relu", "leaky_relu", "tanh", "sigmoid", "selu")
# The handbook's "Checking the predictions": (label, activation, scheme, gain multiplier).
RECURSION_SETTINGS = (
    ("sigmoid, Xavier", "sigmoid", "xavier", 1.0),
    ("ReLU, He", "relu", "he", 1.0),
    ("ReLU, Xavier", "relu", "xavier", 1.0),
    ("ReLU, 1.5 x He", "relu", "he", 1.5),
)
RECURSION_FIELDS = ("net_input_variance", "activation_second_moment", "error_variance",
                    "weight_gradient_norm")


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


def elementwise_activations() -> list[str]:
    """Registered activations with Gaussian averages (all of them are elementwise by name)."""
    from actlab.activations.spec import available_activations

    return list(available_activations())


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
    description = ("Every activation and its derivative; Gaussian averages, Table 1 shifts and "
                   "gains vs published values; the variance recursion vs a measured network.")
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
            "averages": _averages(table),
            "shifts": _shifts(table, config.q_shift),
            "gains": _gains(table),
            "recursion": _recursion(table),
        }
        _draw_gallery(ctx, config.plot_range)
        _draw_averages(ctx, summary["averages"])
        _draw_shifts_and_gains(ctx, summary["shifts"], summary["gains"])
        _draw_recursion(ctx, table)
        _print_tables(summary)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Published values and the handbook's statements about the recursion example."""
        return gallery_claims(summary)


def _metric(table, run: str, metric: str, layer: str = "") -> float:
    rows = table[(table["run"] == run) & (table["metric"] == metric) & (table["layer"] == layer)]
    return float(rows["value"].iloc[0])


def _averages(table) -> dict:
    runs = sorted(r for r in table["run"].unique() if r.startswith("averages/"))
    out = {}
    for run in runs:
        spec = run.split("/", 1)[1]
        entry = {key: _metric(table, run, key) for key in AVERAGE_KEYS}
        if spec in PUBLISHED_AVERAGES:
            published = dict(zip(AVERAGE_KEYS, PUBLISHED_AVERAGES[spec]))
            entry["published"] = published
            # Half a unit in the last published place: 5 decimals for leaky ReLU's moments.
            entry["matches"] = all(
                abs(entry[k] - published[k]) <= (5e-6 if spec == "leaky_relu" and "moment" in k
                                                 else 5e-5)
                for k in AVERAGE_KEYS
            )
        out[spec] = entry
    return out


def _shifts(table, q: float) -> dict:
    out = {}
    for spec, published in PUBLISHED_SHIFTS.items():
        value = _metric(table, f"shift/{spec}", "shift")
        out[spec] = {"q": q, "theory": value, "paper": published,
                     "matches": round(value, 3) == published}
    return out


def _gains(table) -> dict:
    out = {}
    for name in GAIN_NAMES:
        ours, theirs = (_metric(table, f"gain/{name}", m) for m in ("fixed_point", "torch"))
        out[name] = {"fixed_point": ours, "torch": theirs, "equal": abs(ours - theirs) <= 1e-12}
    return out


def _recursion(table) -> dict:
    out = {}
    for label, *_ in RECURSION_SETTINGS:
        run = f"recursion/{label}"
        rows = table[table["run"] == run]
        entry = {}
        for kind in ("predicted", "measured"):
            for field in RECURSION_FIELDS:
                sel = rows[rows["metric"] == f"{kind}_{field}"]
                sel = sel.assign(order=sel["layer"].astype(int)).sort_values("order")
                entry[f"{kind}_{field}"] = sel["value"].tolist()
        ratios = [
            abs(math.log(m / p))
            for field in RECURSION_FIELDS
            for m, p in zip(entry[f"measured_{field}"], entry[f"predicted_{field}"])
            if m > 0 and p > 0
        ]
        entry["worst_factor"] = math.exp(max(ratios)) if ratios else float("nan")
        entry["median_factor"] = math.exp(statistics.median(ratios)) if ratios else float("nan")
        out[label] = entry
    return out


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


# ------------------------------------------------------------------------------- figures
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


def _draw_recursion(ctx: RunContext, table) -> None:
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


def _print_tables(summary: dict) -> None:
    print("Gaussian averages at unit variance (theory | handbook)")
    for spec, entry in summary["averages"].items():
        line = "  ".join(f"{entry[k]:.5f}" for k in AVERAGE_KEYS)
        if "published" in entry:
            line += "  |  " + "  ".join(f"{entry['published'][k]:.5f}" for k in AVERAGE_KEYS)
        print(f"  {spec:<11} {line}")
    print("Shifts at q = 1/3 (theory | Table 1)")
    for spec, entry in summary["shifts"].items():
        print(f"  {spec:<8} {entry['theory']:.4f} | {entry['paper']:.3f}")
    print("Gains (fixed point | torch.nn.init.calculate_gain)")
    for name, entry in summary["gains"].items():
        print(f"  {name:<10} {entry['fixed_point']:.4f} | {entry['torch']:.4f}")
