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

The measurements are :func:`actlab.measure.signal.signal_profile` and
:func:`~actlab.measure.signal.predicted_profile`; the part "Checking the predictions" of the
handbook page "Activations and initialization" is the source the claims compare with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from actlab.data.spirals import data_seed
from actlab.device import to_model_device
from actlab.experiments.signal.claims import claims as signal_claims
from actlab.experiments.signal.figures import draw_figures
from actlab.experiments.signal.summary import (
    HISTOGRAM_SETTINGS,
    PROFILE_METRICS,
    PROFILE_SETTINGS,
    SATURATION_SETTINGS,
    build_summary,
)
from actlab.init import weight_std
from actlab.measure.signal import predicted_profile, signal_profile
from actlab.nn.deep_mlp import DeepMLP, deep_mlp
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, checked

Setting = tuple[str, str, float | None, float | None]  # activation, scheme, gain, fixed std
HIST_EDGES = {"tanh": np.linspace(-1.0, 1.0, 41), "relu": np.linspace(0.0, 3.0, 41)}


@dataclass
class SignalConfig(CheckedConfig):
    """Sizes of the networks and of the probe batch."""

    width: int = checked(128, ge=1)
    depth: int = checked(20, ge=1)
    n_inputs: int = checked(500, ge=1)
    hist_width: int = checked(256, ge=1)
    hist_depth: int = checked(10, ge=1)
    saturation_threshold: float = checked(0.99, gt=0, lt=1)


def _network(setting: Setting, width: int, depth: int, seed: int) -> tuple[DeepMLP, list[float]]:
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


def _measure(result: UnitResult, run: str, seed: int, setting: Setting, width: int, depth: int,
             inputs: torch.Tensor, targets: torch.Tensor, threshold: float,
             gradients: bool = True) -> DeepMLP:
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
                   "recursion, activation histograms, tanh saturation (the handbook page "
                   "\"Activations and initialization\").")
    Config = SignalConfig
    quick: dict = {}  # the whole experiment takes seconds; quick is the full protocol
    default_seeds = 3  # random networks: every claim is judged over the seeds' own draws
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
        summary = build_summary(config, table)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figures(summary, results, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Compare with the handbook's published figures (tolerances in each claim's text)."""
        return signal_claims(summary)
