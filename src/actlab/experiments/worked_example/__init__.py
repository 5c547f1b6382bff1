"""``worked-example``: the four pen-and-paper calculations of the handbook page, computed and printed.

The page is "Activations and initialization", its part "Worked example":

1. Two linear layers are one: the collapsed weight and bias, and the outputs with and
   without a ReLU between the layers.
2. The eight activations and their slopes at z = -1.5, 0 and 0.5 (slopes by autograd on the
   registry's modules, so PyTorch's conventions at kinks apply).
3. The error through a chain of four one-unit layers (sigmoid, ReLU, and ReLU with the
   second bias at -2), built as a :class:`~actlab.nn.deep_mlp.DeepMLP` of width one;
   errors ``dC/dz`` and weight gradients by autograd.
4. Initial scales of a 300 -> 100 layer (Xavier, He, ``torch.nn.Linear``'s default) and the
   per-layer variance factors of square ReLU stacks.

Every value is computed in float64, returned by :func:`worked_example_values`, stored in
``summary.json`` and printed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

import actlab
from actlab.errors import ConfigError
from actlab.experiments.worked_example.claims import claims as worked_example_claims
from actlab.experiments.worked_example.summary import build_summary, format_worked_example
from actlab.init import weight_std
from actlab.nn.deep_mlp import DeepMLP
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, checked

ACTIVATIONS = ("sigmoid", "tanh", "relu", "leaky_relu", "elu", "gelu", "silu", "softplus")
POINTS = (-1.5, 0.0, 0.5)


@dataclass
class WorkedExampleConfig(CheckedConfig):
    """The chain's weights and biases and the layer of part 4 (defaults: the handbook's)."""

    chain_weights: tuple[float, ...] = (0.8, 1.5, 1.2, 2.0)
    chain_biases: tuple[float, ...] = (0.2, -0.5, 0.1, -1.0)
    chain_input: float = 1.0
    chain_target: float = 1.0
    dead_bias: float = -2.0
    fan_in: int = checked(300, ge=1)
    fan_out: int = checked(100, ge=1)
    stack_layers: int = checked(10, ge=1)

    def check(self) -> None:
        """The chain needs one bias per weight and at least two layers."""
        if len(self.chain_weights) != len(self.chain_biases) or len(self.chain_weights) < 2:
            raise ConfigError("chain_weights", "needs as many weights as biases, at least two")


def linear_collapse() -> dict:
    """Part 1: two layers with the identity activation equal one collapsed layer."""
    w1 = torch.tensor([[1.0, -2.0], [0.5, 1.0], [-1.5, 0.5]], dtype=torch.float64)
    b1 = torch.tensor([0.5, -1.0, 0.0], dtype=torch.float64)
    w2 = torch.tensor([[2.0, -1.0, 1.0]], dtype=torch.float64)
    b2 = torch.tensor([0.5], dtype=torch.float64)
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    hidden = w1 @ x + b1
    relu_hidden = actlab.activation("relu")(hidden)
    return {
        "collapsed_weight": (w2 @ w1)[0].tolist(),
        "collapsed_bias": float((w2 @ b1 + b2)[0]),
        "hidden_net_inputs": hidden.tolist(),
        "two_layer_output": float((w2 @ hidden + b2)[0]),
        "collapsed_output": float(((w2 @ w1) @ x + w2 @ b1 + b2)[0]),
        "relu_hidden_activations": relu_hidden.tolist(),
        "relu_output": float((w2 @ relu_hidden + b2)[0]),
    }


def activation_table() -> dict:
    """Part 2: value and autograd slope of each activation at -1.5, 0 and 0.5."""
    table = {}
    for spec in ACTIVATIONS:
        z = torch.tensor(POINTS, dtype=torch.float64, requires_grad=True)
        a = actlab.activation(spec)(z)
        (slope,) = torch.autograd.grad(a.sum(), z)
        table[spec] = {"values": a.detach().tolist(), "slopes": slope.tolist()}
    return table


def chain(weights: Sequence[float], biases: Sequence[float], activation: str, x: float,
          y: float) -> dict:
    """Part 3: forward and backward pass of a one-unit-per-layer chain, squared-error cost."""
    depth = len(weights) - 1
    model = DeepMLP(1, 1, depth, 1, activation=activation, dtype=torch.float64)
    with torch.no_grad():
        for layer, w, b in zip(model.linears, weights, biases):
            layer.weight.fill_(w)
            layer.bias.fill_(b)
    trace = model.trace(torch.tensor([[x]], dtype=torch.float64), retain_grad=True)
    cost = 0.5 * (trace.output - y).pow(2).sum()
    net_inputs = [*trace.net_inputs, trace.output]
    errors = torch.autograd.grad(cost, net_inputs, retain_graph=True)
    weight_grads = torch.autograd.grad(cost, [layer.weight for layer in model.linears])
    slopes = []
    for z, act in zip(trace.net_inputs, model.acts):
        leaf = z.detach().clone().requires_grad_(True)
        (slope,) = torch.autograd.grad(act(leaf).sum(), leaf)
        slopes.append(float(slope))
    return {
        "net_inputs": [float(z.detach()) for z in net_inputs],
        "activations": [float(a.detach()) for a in trace.activations] + [float(trace.output.detach())],
        "slopes": slopes + [1.0],
        "errors": [float(e) for e in errors],
        "weight_gradients": [float(g) for g in weight_grads],
        "cost": float(cost.detach()),
        "first_over_output_error": float((errors[0] / errors[-1]).detach()),
    }


def initial_scales(fan_in: int, fan_out: int, stack_layers: int) -> dict:
    """Part 4: weight variances, standard deviations and uniform bounds of one layer."""
    out = {}
    for scheme in ("xavier", "he", "torch-default"):
        std = weight_std(scheme, fan_in, fan_out, activation="relu", convention="handbook")
        variance = std**2
        net_input_variance = fan_in * variance  # inputs of second moment 1
        # In a stack of square layers (fan_in = fan_out) ReLU halves the second moment:
        # the per-layer factor is n v / 2 with the square layer's variance.
        factor = fan_in * weight_std(scheme, fan_in, fan_in, convention="handbook") ** 2 / 2
        out[scheme] = {
            "variance": variance,
            "std": std,
            "uniform_bound": std * math.sqrt(3.0),
            "net_input_variance": net_input_variance,
            "relu_second_moment": net_input_variance / 2,
            "square_relu_layer_factor": factor,
            f"variance_after_{stack_layers}_layers": factor**stack_layers,
            f"std_after_{stack_layers}_layers": factor ** (stack_layers / 2),
        }
    return out


def worked_example_values(config: WorkedExampleConfig | None = None) -> dict:
    """All values of the four calculations as one nested dict."""
    c = config or WorkedExampleConfig()
    dead_biases = list(c.chain_biases)
    dead_biases[1] = c.dead_bias
    return {
        "linear_collapse": linear_collapse(),
        "activations": activation_table(),
        "chain_sigmoid": chain(c.chain_weights, c.chain_biases, "sigmoid", c.chain_input,
                               c.chain_target),
        "chain_relu": chain(c.chain_weights, c.chain_biases, "relu", c.chain_input, c.chain_target),
        "chain_relu_dead": chain(c.chain_weights, dead_biases, "relu", c.chain_input,
                                 c.chain_target),
        "initial_scales": initial_scales(c.fan_in, c.fan_out, c.stack_layers),
    }


@register
class WorkedExampleExperiment(Experiment):
    """The handbook's worked example, every value computed, printed and saved."""

    name = "worked-example"
    headline_figure = None
    description = ("The four pen-and-paper calculations of the handbook page \"Activations and "
                   "initialization\", printed value by value.")
    Config = WorkedExampleConfig
    default_seeds = 1
    seeds_per_unit = None
    host_only = "hand-worked float64 examples of a few units"

    def run_unit(self, config: WorkedExampleConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Compute every value (no randomness: the seed is unused)."""
        values = worked_example_values(config)
        result = UnitResult(data={"values": values})
        seed = seeds[0] if seeds else 0
        for spec, entry in values["activations"].items():
            for z, v, s in zip(POINTS, entry["values"], entry["slopes"]):
                result.add(spec, seed, 0, str(z), "value", v)
                result.add(spec, seed, 0, str(z), "slope", s)
        for key in ("chain_sigmoid", "chain_relu", "chain_relu_dead"):
            for name in ("net_inputs", "errors", "weight_gradients"):
                for layer, v in enumerate(values[key][name], start=1):
                    result.add(key, seed, 0, str(layer), name, v)
        return result

    def summarize(self, config: WorkedExampleConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Print every value and return them as the summary."""
        values = build_summary(results)
        print(format_worked_example(values))
        return values

    def claims(self, summary: dict) -> list[Claim]:
        """Every published value of the worked example, to the handbook's four decimals."""
        return worked_example_claims(summary)
