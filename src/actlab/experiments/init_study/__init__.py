"""``init-study``: the handbook's sample project, ten activation/initialization choices on two spirals.

Protocol (the sample project of the handbook page "Activations and initialization", in its
part "The code"): 20 hidden layers of 32 units, one sigmoid output with the cross-entropy cost
(computed from the output's net input, so it stays finite when the sigmoid saturates), 300
noisy spiral points (:func:`actlab.data.spirals.two_spirals`, unit second moment per
coordinate), plain mini-batch SGD with learning rate 0.01, batches of 20, 150 epochs, three
seeds, float64, zero biases. Each seed has its own initial weights, training set and batch
order; the ten configurations share them by seed (paired).

Every run is classified by its *late cost*, the median over its last 15 epochs of the cost on
the whole training set measured at the end of each epoch:

* ``diverges`` if the cost overflows (any non-finite cost, recorded, never raised);
* ``trains`` if the late cost is below ln(2) / 2;
* ``stalls at chance`` if it is within 0.01 of ln(2);
* ``learns slowly`` otherwise.

A configuration takes the verdict of the median late cost over its seeds (a diverged run's
late cost counts as +inf). Test accuracy is measured on 300 fresh points after the last epoch
and averaged over the seeds that did not diverge. Before training, the weight-gradient norm
of every layer on the whole training set is recorded.

One unit per configuration trains all its seeds as one vmapped ensemble
(:func:`actlab.recipes.spirals.train_binary_sgd_ensemble`): each seed keeps its own data,
initial weights and batch order, and its run equals the plain loop
:func:`~actlab.recipes.spirals.train_binary_sgd` to rounding (an overflowing seed stops
alone, as in the loop). ``--quick`` trains 40 epochs with the late cost over the last 10;
those verdicts are not comparable with the handbook's, which belong to the full protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from actlab.data.spirals import data_seed, two_spirals
from actlab.errors import ConfigError
from actlab.experiments.init_study.claims import claims as init_study_claims
from actlab.experiments.init_study.figures import init_study_figures
from actlab.experiments.init_study.summary import build_summary
from actlab.measure.signal import logistic_cross_entropy, weight_grad_norms
from actlab.nn.deep_mlp import deep_mlp
from actlab.recipes.spirals import binary_accuracy, train_binary_sgd_ensemble
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, checked
from actlab.train.supervised import torch_threads

# name -> (activation, init scheme, gain or None: the scheme's own)
CONFIGURATIONS: dict[str, tuple[str, str, float | None]] = {
    "relu-default": ("relu", "torch-default", None),
    "relu-xavier": ("relu", "xavier", None),
    "relu-he": ("relu", "he", None),
    "relu-1.41he": ("relu", "he", 2.0),  # sqrt(2) times He's std: gain 2
    "sigmoid-xavier": ("sigmoid", "xavier", None),
    "tanh-xavier": ("tanh", "xavier", None),
    "tanh-xavier-5/3": ("tanh", "xavier", 5.0 / 3.0),
    "elu-he": ("elu", "he", None),
    "silu-he": ("silu", "he", None),
    "silu-gain1.68": ("silu", "fixed-point", None),  # SiLU's fixed-point gain 1.6765
}


@dataclass
class InitStudyConfig(CheckedConfig):
    """The sample project's protocol (defaults: the handbook's)."""

    configurations: tuple[str, ...] = checked(tuple(CONFIGURATIONS),
                                              choices=tuple(CONFIGURATIONS), nonempty=True)
    depth: int = checked(20, ge=1)
    width: int = checked(32, ge=1)
    n_train: int = checked(300, ge=1)
    n_test: int = checked(300, ge=1)
    noise: float = 0.1
    turns: float = 1.5
    input_scale: str = checked("unit", choices=("unit", "radius"))
    lr: float = checked(0.01, gt=0)
    batch_size: int = checked(20, ge=1)
    epochs: int = checked(150, ge=1)
    late_window: int = checked(15, ge=1)

    def check(self) -> None:
        """A batch must fit in the training set, the late window in the epochs."""
        if self.batch_size > self.n_train:
            raise ConfigError("batch_size", f"must be <= n_train ({self.n_train})")
        if self.late_window > self.epochs:
            raise ConfigError("late_window", f"must be <= epochs ({self.epochs})")


def spiral_sets(config: InitStudyConfig, seed: int
                ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Training and test spirals of one seed (test points from an independent stream)."""
    kwargs = {"noise": config.noise, "turns": config.turns, "scale": config.input_scale}
    train = two_spirals(config.n_train, seed=data_seed(seed, 0), **kwargs)
    test = two_spirals(config.n_test, seed=data_seed(seed, 1), **kwargs)
    return train, test


def build_model(config: InitStudyConfig, name: str, seed: int) -> nn.Module:
    """The network of configuration ``name`` for ``seed`` (float64, zero biases)."""
    activation, scheme, gain = CONFIGURATIONS[name]
    return deep_mlp(2, config.width, config.depth, 1, activation=activation, scheme=scheme,
                    gain=gain, seed=seed)


@register
class InitStudyExperiment(Experiment):
    """Ten activation/initialization choices for a 20-layer network on two spirals (the
    handbook's sample project)."""

    name = "init-study"
    headline_figure = "init_study_costs"
    description = ("The sample project of the handbook page \"Activations and initialization\": "
                   "20x32 network, ten activation/init choices, spirals, plain SGD, verdicts by "
                   "late cost.")
    Config = InitStudyConfig
    quick = {"epochs": 40, "late_window": 10}
    default_seeds = 3
    seeds_per_unit = None  # all seeds of a configuration train as one ensemble

    def units(self, config: InitStudyConfig) -> list[dict]:
        """One unit per configuration (its seeds train together as one ensemble)."""
        return [{"configuration": name} for name in config.configurations]

    def run_unit(self, config: InitStudyConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train one configuration for all ``seeds`` as one ensemble; rows per seed: gradient
        norms before training, cost per epoch, divergence, test accuracy."""
        name = unit["configuration"]
        result = UnitResult()
        diverged = []
        sets = [spiral_sets(config, seed) for seed in seeds]
        models = [build_model(config, name, seed) for seed in seeds]
        with torch_threads(1):  # tiny products: extra threads only add synchronisation
            norms_before = [weight_grad_norms(model, x, y, cost=logistic_cross_entropy)
                            for model, ((x, y), _) in zip(models, sets)]
        runs = train_binary_sgd_ensemble(
            models, [x for (x, _), _ in sets], [y for (_, y), _ in sets], lr=config.lr,
            batch_size=config.batch_size, epochs=config.epochs,
            seeds=[data_seed(seed, 2) for seed in seeds])
        for seed, model, (_, (x_test, y_test)), norms, run in zip(seeds, models, sets,
                                                                 norms_before, runs):
            for layer, norm in enumerate(norms, start=1):
                result.add(name, seed, 0, str(layer), "grad_norm_before", norm)
            for epoch, cost in enumerate(run.costs):
                result.add(name, seed, epoch, "", "cost", cost)
            result.add(name, seed, config.epochs, "", "diverged", float(run.diverged))
            with torch_threads(1):
                accuracy = math.nan if run.diverged else binary_accuracy(model, x_test, y_test)
            result.add(name, seed, config.epochs, "", "test_accuracy", accuracy)
            if run.diverged:
                diverged.append(seed)
        if diverged:  # a failure is data: rows are kept, the unit is marked
            result.status = STATUS_DIVERGED
            result.error = f"cost overflowed (recorded as diverged) for seeds {diverged}"
        return result

    def summarize(self, config: InitStudyConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Per configuration (top-level key = its name): ``verdict``, ``late_costs`` (per seed,
        ``None`` for an overflow) and ``test_accuracy``; plus ``protocol`` and ``seeds``."""
        summary = build_summary(config, table)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            init_study_figures(summary, table, list(CONFIGURATIONS), ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """One claim per configuration (our verdict against the handbook's), gradient norms."""
        return init_study_claims(summary)
