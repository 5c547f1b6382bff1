"""``normalization``: weight-gradient norms of badly initialized 20 x 64 stacks, plain and repaired.

The handbook page "Activations and initialization", "Normalization and residual connections":
20 hidden layers of 64 units, inputs of width 64 drawn standard normal (500 of them), standard
normal targets, identity output and the half squared error averaged over the batch, at
initialization in float64. Two bad scales, each as a plain stack, with batch normalization
(batch statistics, as in training), with layer normalization, and with residual connections
``a_l = a_{l-1} + f(z_l)``:

* tanh with every weight of standard deviation 0.01 (the gradient vanishes);
* ReLU with twice He's standard deviation (it explodes).

Recorded: the Frobenius norm of the weight gradient of every hidden layer; the summary
keeps the first and the last hidden layer's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from actlab.data.spirals import data_seed
from actlab.experiments.normalization.claims import claims as normalization_claims
from actlab.experiments.normalization.figures import draw_figure
from actlab.experiments.normalization.summary import STACKS, VARIANTS, build_summary, read_curves
from actlab.measure.signal import half_squared_error, weight_grad_norms
from actlab.nn.deep_mlp import deep_mlp
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
class NormalizationConfig(CheckedConfig):
    """Size of the stacks and of the batch."""

    width: int = checked(64, ge=1)
    depth: int = checked(20, ge=1)
    n_inputs: int = checked(500, ge=2)  # batch norm needs two inputs for a batch statistic


@register
class NormalizationExperiment(Experiment):
    """First- and last-layer gradient norms of plain, normalized and residual stacks."""

    name = "normalization"
    headline_figure = "normalization"
    description = ("20x64 stacks (tanh std 0.01, ReLU 2xHe): plain, batch norm, layer norm, "
                   "residual; first/last weight-gradient norms at initialization (the handbook "
                   "page \"Activations and initialization\").")
    Config = NormalizationConfig
    quick: dict = {}  # seconds: quick is the full protocol
    default_seeds = 3  # random networks: every claim is judged over the seeds' own draws
    seeds_per_unit = 1

    def units(self, config: NormalizationConfig) -> list[dict]:
        """One unit per bad scale."""
        return [{"stack": stack} for stack in STACKS]

    def run_unit(self, config: NormalizationConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Gradient norms of every hidden layer for the four variants of one stack."""
        result = UnitResult()
        activation, init = STACKS[unit["stack"]]
        for seed in seeds:
            generator = torch.Generator().manual_seed(data_seed(seed))
            x = torch.randn(config.n_inputs, config.width, generator=generator, dtype=torch.float64)
            y = torch.randn(config.n_inputs, 1, generator=generator, dtype=torch.float64)
            for variant, (norm, residual) in VARIANTS.items():
                model = deep_mlp(config.width, config.width, config.depth, 1,
                                 activation=activation, norm=norm, residual=residual, seed=seed,
                                 **init)
                model.train()  # batch norm with batch statistics, as in training
                norms = weight_grad_norms(model, x, y, cost=half_squared_error,
                                          layers=list(model.hidden))
                for layer, value in enumerate(norms, start=1):
                    result.add(f"{unit['stack']}/{variant}", seed, 0, str(layer), "grad_norm",
                               value)
        return result

    def summarize(self, config: NormalizationConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """First and last hidden layer's gradient norm per stack and variant (first seed)."""
        seed, curves = read_curves(table)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figure(curves, ctx)
        return build_summary(seed, curves)

    def claims(self, summary: dict) -> list[Claim]:
        """Published norms within a factor of 3 (one random network each), and the ordering."""
        return normalization_claims(summary)
