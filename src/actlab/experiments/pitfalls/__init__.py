"""``pitfalls``: the handbook's common mistakes, each as a measured number with its expected relation.

The handbook page "Activations and initialization", "Pitfalls" (float64 throughout):

* ``linear_collapse``: three ``torch.nn.Linear`` layers without activations equal one
  collapsed affine map (max difference over 1,000 inputs); on the spirals a network with
  three hidden layers of 32 identity units tests no better than a straight line, while the
  same network with ReLU units follows the spirals (handbook: 64.00% vs 92.33%).
* ``constant_start``: the ReLU network of the same shape started with every weight 0.2
  (zero biases) keeps identical rows (to rounding: the matrix products may sum in different
  orders per row) in every hidden weight matrix through training and
  tests worse than from a random He start (handbook: 61.00%).
* ``default_linear_scale``: 20 ReLU layers of 64 units with ``torch.nn.Linear``'s default
  initialization vary across 1,000 inputs by almost nothing (what is left is the biases),
  against ``kaiming_normal_`` with zero biases (handbook: 8.67e-9 vs 0.132).
* ``wrong_fan_in_axis``: He's std for a 300-input, 100-output layer from ``shape[1]`` (right)
  and from ``shape[0]`` (wrong): 0.0816 vs 0.1414, sqrt(3) too large.
* ``uniform_bound_as_std``: He's uniform bound used as a normal std in 10 ReLU layers of 256
  units with zero biases: output variance 3^10 = 59049 times too large, to rounding.
* ``variance_vs_second_moment``: a gain from ReLU's variance (pi - 1) / (2 pi) instead of its
  second moment 1/2 gives 1.7129 instead of sqrt(2); the measured variance of a 10-layer
  stack with that gain grows by (1.7129^2 / 2)^10.

Training runs use plain SGD (learning rate 0.1, batches of 20, 200 epochs) with the
sigmoid / cross-entropy output of the other spiral experiments; the handbook does not give
its settings for these two demonstrations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from actlab.data.spirals import data_seed, two_spirals
from actlab.device import place, to_unit_device
from actlab.experiments.pitfalls.claims import DEMOS
from actlab.experiments.pitfalls.claims import claims as pitfalls_claims
from actlab.experiments.pitfalls.summary import build_summary
from actlab.init import weight_std
from actlab.nn.deep_mlp import deep_mlp
from actlab.recipes.spirals import binary_accuracy, train_binary_sgd
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
class PitfallsConfig(CheckedConfig):
    """Sizes and the training protocol of the spiral demonstrations."""

    n_train: int = checked(300, ge=1)
    n_test: int = checked(300, ge=1)
    hidden_layers: int = checked(3, ge=1)
    hidden_width: int = checked(32, ge=1)
    lr: float = checked(0.1, gt=0)
    batch_size: int = checked(20, ge=1)
    epochs: int = checked(200, ge=1)
    constant_weight: float = 0.2


def _train_spirals(config: PitfallsConfig, activation: str, seed: int,
                   constant: float | None = None) -> tuple[float, nn.Module]:
    """Test accuracy after training a small network on the spirals (optionally constant start)."""
    x, y = two_spirals(config.n_train, seed=data_seed(seed, 0))
    x_test, y_test = two_spirals(config.n_test, seed=data_seed(seed, 1))
    model = deep_mlp(2, config.hidden_width, config.hidden_layers, 1, activation=activation,
                     scheme="he", seed=seed)
    if constant is not None:
        with torch.no_grad():
            for layer in model.linears:
                layer.weight.fill_(constant)
                layer.bias.zero_()
    run = train_binary_sgd(model, x, y, lr=config.lr, batch_size=config.batch_size,
                           epochs=config.epochs, seed=data_seed(seed, 2))
    accuracy = math.nan if run.diverged else binary_accuracy(model, x_test, y_test)
    return accuracy, model


def linear_collapse(config: PitfallsConfig, seed: int) -> dict:
    """Max difference between three Linear layers and their collapsed map; spiral accuracies."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        stack = place(nn.Sequential(nn.Linear(2, 32, dtype=torch.float64),
                                    nn.Linear(32, 32, dtype=torch.float64),
                                    nn.Linear(32, 1, dtype=torch.float64)))
    weight, bias = to_unit_device(torch.eye(2, dtype=torch.float64),
                                  torch.zeros(2, dtype=torch.float64))
    for layer in stack:
        weight, bias = layer.weight @ weight, layer.weight @ bias + layer.bias
    x = to_unit_device(torch.randn(1000, 2, generator=torch.Generator().manual_seed(data_seed(seed)),
                                   dtype=torch.float64))
    with torch.no_grad():
        stacked = stack(x)
        collapsed = x @ weight.T + bias
    linear_acc, _ = _train_spirals(config, "identity", seed)
    relu_acc, _ = _train_spirals(config, "relu", seed)
    return {"max_abs_difference": float((stacked - collapsed).abs().max()),
            "linear_test_accuracy": linear_acc, "relu_test_accuracy": relu_acc}


def constant_start(config: PitfallsConfig, seed: int) -> dict:
    """Rows of every hidden weight matrix after training from a constant start; accuracies."""
    accuracy, model = _train_spirals(config, "relu", seed, constant=config.constant_weight)
    spread = max(float((layer.weight - layer.weight[0:1]).detach().abs().max())
                 for layer in model.hidden)
    random_accuracy, _ = _train_spirals(config, "relu", seed)
    return {"max_row_difference": spread, "constant_test_accuracy": accuracy,
            "random_test_accuracy": random_accuracy}


def default_linear_scale(seed: int, depth: int = 20, width: int = 64, n: int = 1000) -> dict:
    """Spread of a deep ReLU stack's outputs across inputs: torch default vs kaiming_normal_."""
    x = to_unit_device(torch.randn(n, width, generator=torch.Generator().manual_seed(data_seed(seed)),
                                   dtype=torch.float64))
    spreads = {}
    for name in ("default", "kaiming"):
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            layers = []
            for _ in range(depth):
                linear = nn.Linear(width, width, dtype=torch.float64)
                if name == "kaiming":
                    nn.init.kaiming_normal_(linear.weight, mode="fan_in", nonlinearity="relu")
                    nn.init.zeros_(linear.bias)
                layers += [linear, nn.ReLU()]
        with torch.no_grad():
            out = place(nn.Sequential(*layers))(x)
        # std over the inputs, averaged over the output units
        spreads[name] = float(out.std(dim=0, unbiased=False).mean())
        spreads[f"{name}_mean_abs_output"] = float(out.abs().mean())
    return {"default_output_spread": spreads["default"],
            "kaiming_output_spread": spreads["kaiming"],
            "default_mean_abs_output": spreads["default_mean_abs_output"],
            "ratio": spreads["default"] / spreads["kaiming"]}


def wrong_fan_in_axis(seed: int, fan_in: int = 300, fan_out: int = 100) -> dict:
    """He's std from the right and the wrong axis, and the measured std of weights drawn with each."""
    shape = (fan_out, fan_in)  # torch.nn.Linear.weight layout: (outputs, inputs)
    right = weight_std("he", shape[1], shape[0], convention="handbook")
    wrong = weight_std("he", shape[0], shape[1], convention="handbook")
    draw = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return {"right_std": right, "wrong_std": wrong, "ratio": wrong / right,
            "measured_right_std": float((right * draw).std()),
            "measured_wrong_std": float((wrong * draw).std())}


def uniform_bound_as_std(seed: int, depth: int = 10, width: int = 256, n: int = 1000) -> dict:
    """Output variance of a ReLU stack with He's uniform bound used as the normal std, over He's."""
    generator = torch.Generator().manual_seed(seed)
    x = to_unit_device(torch.randn(n, width, generator=generator, dtype=torch.float64))
    draws = [to_unit_device(torch.randn(width, width, generator=generator, dtype=torch.float64))
             for _ in range(depth)]
    std = weight_std("he", width, width, convention="handbook")
    variances = {}
    for name, scale in (("he", std), ("bound", std * math.sqrt(3.0))):
        a = x
        for draw in draws:
            a = torch.relu(a @ (scale * draw).T)
        variances[name] = float(a.var())
    return {"he_variance": variances["he"], "bound_variance": variances["bound"],
            "ratio": variances["bound"] / variances["he"], "expected_ratio": 3.0**depth}


def variance_vs_second_moment(seed: int, depth: int = 10, width: int = 256, n: int = 1000) -> dict:
    """Gains from ReLU's second moment and from its variance; measured growth with the wrong one."""
    from actlab.theory import moments

    m = moments("relu", 1.0)
    variance = m.second_moment - m.mean**2
    right, wrong = 1.0 / math.sqrt(m.second_moment), 1.0 / math.sqrt(variance)
    generator = torch.Generator().manual_seed(seed)
    x = to_unit_device(torch.randn(n, width, generator=generator, dtype=torch.float64))
    a = x
    for _ in range(depth):
        weight = to_unit_device(torch.randn(width, width, generator=generator, dtype=torch.float64))
        z = a @ (wrong / math.sqrt(width) * weight).T
        a = torch.relu(z)
    return {"relu_variance": variance, "right_gain": right, "wrong_gain": wrong,
            "net_input_second_moment_growth": float(z.pow(2).mean() / x.pow(2).mean()),
            "predicted_growth": (wrong**2 * m.second_moment) ** (depth - 1) * wrong**2}


# The demonstrations that train on the spirals (they need the config), and those measured at
# initialization from the seed alone.
TRAINED = {"linear_collapse": linear_collapse, "constant_start": constant_start}
AT_INIT = {"default_linear_scale": default_linear_scale, "wrong_fan_in_axis": wrong_fan_in_axis,
           "uniform_bound_as_std": uniform_bound_as_std,
           "variance_vs_second_moment": variance_vs_second_moment}


@register
class PitfallsExperiment(Experiment):
    """Six common mistakes of the handbook, each measured; the relations that could fail are
    claims, those true by construction are tests."""

    name = "pitfalls"
    headline_figure = None
    description = ("Linear collapse, constant start, default Linear scale, wrong fan-in axis, "
                   "uniform bound as std, variance vs second moment (the handbook page "
                   "\"Activations and initialization\").")
    Config = PitfallsConfig
    quick: dict = {}  # about 25 s of CPU: quick is the full protocol
    default_seeds = 1
    seeds_per_unit = 1

    def units(self, config: PitfallsConfig) -> list[dict]:
        """One unit per demonstration."""
        return [{"demo": demo} for demo in DEMOS]

    def run_unit(self, config: PitfallsConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Measure one demonstration per seed; every number becomes a row."""
        result = UnitResult()
        demo = unit["demo"]
        for seed in seeds:
            if demo in TRAINED:
                values = TRAINED[demo](config, seed)
            else:
                values = AT_INIT[demo](seed)
            for key, value in values.items():
                result.add(demo, seed, 0, "", key, value)
        return result

    def summarize(self, config: PitfallsConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Each demonstration's numbers (first seed); the claims judge their relations."""
        return build_summary(config, table)

    def claims(self, summary: dict) -> list[Claim]:
        """The relations the demonstrations should show (see :func:`.claims.specs`)."""
        return pitfalls_claims(summary)
