"""``signal``: sizes per layer of deep stacks at initialization, measured against the variance recursion.

Three parts, all at initialization, in float64, with zero biases and inputs of the same
width as the hidden layers drawn standard normal (as in the handbook's measurements):

1. *profiles*: 20 hidden layers of 128 units, identity output, half squared error against
   standard normal targets, 500 inputs; per layer the activation std, net-input std, error
   size, per-example and batch weight-gradient norms, next to the recursion's prediction,
   for sigmoid + Xavier, ReLU + He, ReLU + Xavier and ReLU + 1.5 x He;
2. *histograms*: 10 hidden layers of 256 units; activation histograms for tanh with weight
   std 0.01 / 0.2 / Xavier and ReLU with Xavier / He / sqrt(2) x He;
3. *saturation*: the same tanh network with Xavier gain 5/3 and with the fixed-point gain
   1.5925: net-input std of layer 10 (measured and predicted) and the saturated share
   (``|tanh| > 0.99``) in layer 10.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from actlab.data.spirals import data_seed
from actlab.errors import ConfigError
from actlab.experiments._common import require_at_least_one
from actlab.experiments._signal_claims import signal_claims
from actlab.init import weight_std
from actlab.measure.signal import predicted_profile, signal_profile
from actlab.nn.deep_mlp import deep_mlp
from actlab.plotting import pyplot
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.train.placement import to_model_device

# name -> (activation, scheme, gain or None, fixed std or None)
PROFILE_SETTINGS: dict[str, tuple[str, str, float | None, float | None]] = {
    "sigmoid-xavier": ("sigmoid", "xavier", None, None),
    "relu-he": ("relu", "he", None, None),
    "relu-xavier": ("relu", "xavier", None, None),
    "relu-1.5he": ("relu", "he", 1.5 * math.sqrt(2.0), None),
}
HISTOGRAM_SETTINGS: dict[str, tuple[str, str, float | None, float | None]] = {
    "tanh-std0.01": ("tanh", "std", None, 0.01),
    "tanh-std0.2": ("tanh", "std", None, 0.2),
    "tanh-xavier": ("tanh", "xavier", None, None),
    "relu-xavier": ("relu", "xavier", None, None),
    "relu-he": ("relu", "he", None, None),
    "relu-1.41he": ("relu", "he", 2.0, None),
}
SATURATION_SETTINGS: dict[str, tuple[str, str, float | None, float | None]] = {
    "tanh-xavier": ("tanh", "xavier", None, None),
    "tanh-xavier-5/3": ("tanh", "xavier", 5.0 / 3.0, None),
    "tanh-fixed-point": ("tanh", "fixed-point", None, None),
}
PROFILE_METRICS = ("activation_std", "net_input_std", "error_rms", "per_example_grad_rms",
                   "batch_grad_norm")
HIST_EDGES = {"tanh": np.linspace(-1.0, 1.0, 41), "relu": np.linspace(0.0, 3.0, 41)}



@dataclass
class SignalConfig:
    """Sizes of the networks and of the probe batch."""

    width: int = 128
    depth: int = 20
    n_inputs: int = 500
    hist_width: int = 256
    hist_depth: int = 10
    saturation_threshold: float = 0.99

    def __post_init__(self) -> None:
        require_at_least_one(self, ("width", "depth", "n_inputs", "hist_width", "hist_depth"))
        if not 0 < self.saturation_threshold < 1:
            raise ConfigError("saturation_threshold", f"must be in (0, 1), got {self.saturation_threshold}")


def _network(setting, width: int, depth: int, seed: int):
    activation, scheme, gain, std = setting
    model = deep_mlp(width, width, depth, 1, activation=activation, scheme=scheme, gain=gain,
                     std=std, seed=seed)
    stds = [weight_std(scheme, layer.in_features, layer.out_features, activation=activation,
                       gain=gain, std=std, convention="handbook") for layer in model.linears]
    return model, stds


def _probe_batch(n: int, width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(data_seed(seed))
    inputs = torch.randn(n, width, generator=generator, dtype=torch.float64)
    targets = torch.randn(n, 1, generator=generator, dtype=torch.float64)
    return inputs, targets


def _measure(result: UnitResult, run: str, seed: int, setting, width: int, depth: int,
             inputs, targets, threshold: float, gradients: bool = True):
    model, stds = _network(setting, width, depth, seed)
    measured = signal_profile(model, inputs, targets, saturation_threshold=threshold,
                              gradients=gradients)
    output_error = measured.output_error_second_moment if gradients else None
    predicted = predicted_profile([width] * (depth + 1) + [1], stds, setting[0],
                                  output_error_second_moment=output_error)
    for metric in (*PROFILE_METRICS, "saturated_share"):
        for layer, value in enumerate(getattr(measured, metric), start=1):
            if math.isfinite(value):
                result.add(run, seed, 0, str(layer), metric, value)
        for layer, value in enumerate(getattr(predicted, metric), start=1):
            if math.isfinite(value):
                result.add(run, seed, 0, str(layer), f"predicted_{metric}", value)
    return model


@register
class SignalExperiment(Experiment):
    """Per-layer signal, error and gradient sizes at initialization versus the variance recursion."""

    name = "signal"
    headline_figure = "signal_profiles"
    description = ("Deep stacks at initialization: measured per-layer sizes vs the variance "
                   "recursion, activation histograms, tanh saturation (seed 001).")
    Config = SignalConfig
    quick: dict = {}  # the whole experiment takes seconds; quick is the full protocol
    default_seeds = 1
    seeds_per_unit = 1

    def units(self, config: SignalConfig) -> list[dict]:
        """One unit per part: profiles, histograms, saturation."""
        return [{"part": "profiles"}, {"part": "histograms"}, {"part": "saturation"}]

    def run_unit(self, config: SignalConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Measure one part for each seed (one network per setting and seed)."""
        result = UnitResult()
        part = unit["part"]
        for seed in seeds:
            if part == "profiles":
                inputs, targets = _probe_batch(config.n_inputs, config.width, seed)
                for run, setting in PROFILE_SETTINGS.items():
                    _measure(result, f"profile/{run}", seed, setting, config.width, config.depth, inputs,
                             targets, config.saturation_threshold)
            else:
                settings = HISTOGRAM_SETTINGS if part == "histograms" else SATURATION_SETTINGS
                inputs, targets = _probe_batch(config.n_inputs, config.hist_width, seed)
                for run, setting in settings.items():
                    model = _measure(result, f"{part}/{run}", seed, setting, config.hist_width,
                                     config.hist_depth, inputs, targets,
                                     config.saturation_threshold, gradients=False)
                    if part == "histograms":
                        with torch.no_grad():
                            trace = model.trace(to_model_device(model, inputs))
                        edges = HIST_EDGES[setting[0]]
                        counts = [np.histogram(a.cpu().numpy().ravel(), bins=edges)[0].tolist()
                                  for a in trace.activations]
                        result.data.setdefault("histograms", {})[f"{run}/{seed}"] = {
                            "edges": edges.tolist(), "counts": counts}
        return result

    def summarize(self, config: SignalConfig, table, results: list[dict], ctx: RunContext) -> dict:
        """Headline numbers of the first seed, and the figures."""
        seed = int(table["seed"].min())
        rows = table[table["seed"] == seed]

        def series(run: str, metric: str) -> list[float]:
            sel = rows[(rows["run"] == run) & (rows["metric"] == metric)].copy()
            sel["l"] = sel["layer"].astype(int)
            return sel.sort_values("l")["value"].tolist()

        summary: dict = {"seed": seed, "profiles": {}, "histograms": {}, "saturation": {}}
        depth = config.depth
        for run in PROFILE_SETTINGS:
            entry = {metric: series(f"profile/{run}", metric) for metric in PROFILE_METRICS}
            entry.update({f"predicted_{m}": series(f"profile/{run}", f"predicted_{m}")
                          for m in PROFILE_METRICS if m != "batch_grad_norm"})
            errors = entry["error_rms"]
            entry["error_factor_per_layer"] = (errors[-1] / errors[0]) ** (1 / (depth - 1))
            grads = entry["per_example_grad_rms"]
            entry["first_over_last_grad"] = grads[0] / grads[-1]
            entry["per_example_grad_range"] = [min(entry["per_example_grad_rms"]),
                                               max(entry["per_example_grad_rms"])]
            entry["max_abs_log10_error_of_prediction"] = {
                m: max(abs(math.log10(a / b)) for a, b in
                       zip(entry[m], entry[f"predicted_{m}"]))
                for m in ("net_input_std", "activation_std", "error_rms", "per_example_grad_rms")
            }
            summary["profiles"][run] = entry
        for run in HISTOGRAM_SETTINGS:
            summary["histograms"][run] = {
                "activation_std": series(f"histograms/{run}", "activation_std"),
                "share_beyond_0.99": series(f"histograms/{run}", "saturated_share"),
            }
        for run in SATURATION_SETTINGS:
            summary["saturation"][run] = {
                "net_input_std_last": series(f"saturation/{run}", "net_input_std")[-1],
                "predicted_net_input_std_last":
                    series(f"saturation/{run}", "predicted_net_input_std")[-1],
                "saturated_share_last": series(f"saturation/{run}", "saturated_share")[-1],
            }
        _figures(summary, results, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Compare with the handbook's published figures (tolerances in each claim's text)."""
        return signal_claims(summary)


def _figures(summary: dict, results: list[dict], ctx: RunContext) -> None:
    plt = pyplot()

    panels = (("net_input_std", "net-input std"), ("error_rms", "error size (RMS of delta)"),
              ("per_example_grad_rms", "per-example weight-gradient norm"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (metric, label) in zip(axes, panels):
        for i, (run, entry) in enumerate(summary["profiles"].items()):
            layers = range(1, len(entry[metric]) + 1)
            ax.semilogy(layers, entry[metric], color=f"C{i}", label=run)
            ax.semilogy(layers, entry[f"predicted_{metric}"], color=f"C{i}", ls="--")
        ax.set_xlabel("layer")
        ax.set_title(f"{label} (dashed: predicted)")
    axes[0].legend()
    ctx.save_figure(fig, "signal_profiles")

    hists = {}
    for record in results:
        hists.update(record.get("data", {}).get("histograms", {}))
    seed = summary["seed"]
    runs = [r for r in HISTOGRAM_SETTINGS if f"{r}/{seed}" in hists]
    if runs:
        fig, axes = plt.subplots(2, 3, figsize=(15, 7))
        for ax, run in zip(axes.ravel(), runs):
            entry = hists[f"{run}/{seed}"]
            edges = np.asarray(entry["edges"])
            centres = (edges[:-1] + edges[1:]) / 2
            for layer, counts in enumerate(entry["counts"], start=1):
                ax.plot(centres, counts, color=plt.cm.viridis(layer / len(entry["counts"])),
                        label=f"layer {layer}" if layer in (1, len(entry["counts"])) else None)
            ax.set_title(run)
            ax.set_yscale("symlog")
        axes[0, 0].legend()
        ctx.save_figure(fig, "signal_histograms")
