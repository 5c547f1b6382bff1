"""``dead-units``: ReLU units killed by a large learning rate, and the dead units of a fresh deep stack.

Two parts (the handbook page "Activations and initialization", "Dead ReLUs"), on the two
spirals of :mod:`actlab.data.spirals`:

1. *learning rate*: one hidden layer of 128 units, He initialization with zero biases,
   sigmoid output with cross-entropy, plain SGD with batches of 20 for 30 epochs: ReLU at
   learning rate 4.0 and 0.5, leaky ReLU (slope 0.01) at 4.0. After every epoch the share of
   dead units on the whole training set (a unit whose output is zero on every training
   point, counted by :meth:`actlab.Probe.dead_units`) and the training cost.
2. *fresh deep stack*: a 20-layer, 32-unit He-initialized ReLU network before training:
   dead share over all hidden units on the 300 training points, and in the last hidden layer
   the whole-set share against the estimate from one batch of 20 (the probe's mean over the
   15 batches of the per-batch share).

For leaky ReLU, whose output is never exactly zero, the share of units whose *net input* is
non-positive on every point is recorded as well (``inactive_share``); such units still learn.

Each shallow run trains all its seeds as one vmapped ensemble
(:func:`actlab.recipes.spirals.train_binary_sgd_ensemble`; every seed keeps its own data,
initial weights and batch order, equal to the plain loop to rounding); the dead shares are
measured on a standalone copy of each member after every epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import actlab
from actlab.data.spirals import data_seed, two_spirals
from actlab.device import to_model_device
from actlab.errors import ConfigError
from actlab.experiments.dead_units.claims import claims as dead_units_claims
from actlab.experiments.dead_units.figures import dead_units_figure
from actlab.experiments.dead_units.summary import build_summary, shallow_runs
from actlab.measure.signal import dead_unit_share
from actlab.nn.deep_mlp import DeepMLP, deep_mlp
from actlab.recipes.spirals import train_binary_sgd_ensemble
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
class DeadUnitsConfig(CheckedConfig):
    """The two parts' settings (defaults: the handbook's)."""

    hidden: int = checked(128, ge=1)
    lr_large: float = checked(4.0, gt=0)
    lr_small: float = checked(0.5, gt=0)
    epochs: int = checked(30, ge=1)
    batch_size: int = checked(20, ge=1)
    n_train: int = checked(300, ge=1)
    noise: float = 0.1
    turns: float = 1.5
    input_scale: str = checked("unit", choices=("unit", "radius"))
    deep_depth: int = checked(20, ge=1)
    deep_width: int = checked(32, ge=1)

    def check(self) -> None:
        """A batch must fit in the training set."""
        if self.batch_size > self.n_train:
            raise ConfigError("batch_size", f"must be <= n_train ({self.n_train})")
        if f"{self.lr_large:g}" == f"{self.lr_small:g}":  # the runs are named by their rates
            raise ConfigError("lr_small", f"must differ from lr_large ({self.lr_large:g})")


def dead_shares(model: DeepMLP, x: torch.Tensor, batch_size: int) -> dict:
    """Dead shares of ``model``'s hidden layers on ``x``, exact and from single batches.

    ``total``: dead units over all hidden units on the whole of ``x`` (Probe, output never
    non-zero); ``per_layer`` / ``per_layer_batch``: per layer, exact and the mean over
    batches of ``batch_size`` of the share silent on that batch alone; ``inactive_total``:
    units whose net input is ``<= 0`` on every point.
    """
    x = to_model_device(model, x)
    probe = actlab.Probe(model, activations=lambda name, module: module in set(model.acts),
                         weights=False)
    batches = [x[i:i + batch_size] for i in range(0, x.shape[0] - batch_size + 1, batch_size)]
    table = probe.dead_units(batches)
    probe.close()
    per_layer = table["dead_frac"].tolist()
    units = table["units"].tolist()
    with torch.no_grad():
        inactive, _ = dead_unit_share(model.trace(x).net_inputs)
    return {
        "total": sum(f * u for f, u in zip(per_layer, units)) / sum(units),
        "per_layer": per_layer,
        "per_layer_batch": table["dead_frac_per_batch"].tolist(),
        "inactive_total": inactive,
    }


@register
class DeadUnitsExperiment(Experiment):
    """Dead ReLU units from a large learning rate, and in a fresh deep narrow stack."""

    name = "dead-units"
    headline_figure = "dead_units"
    description = ("Dead ReLUs: one layer of 128 units at lr 4.0 vs 0.5 and leaky ReLU; dead "
                   "units of a fresh 20x32 He ReLU stack, whole set vs one batch (the handbook "
                   "page \"Activations and initialization\").")
    Config = DeadUnitsConfig
    quick: dict = {}  # a few seconds per seed: quick is the full protocol
    default_seeds = 3
    seeds_per_unit = None  # all seeds of a shallow run train as one ensemble

    def units(self, config: DeadUnitsConfig) -> list[dict]:
        """One unit per shallow run (its seeds train as one ensemble), one for the deep stack."""
        return [{"part": "shallow", "run": run} for run in shallow_runs(config)] + [{"part": "deep"}]

    def run_unit(self, config: DeadUnitsConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train all seeds as one ensemble (shallow) or measure at initialization (deep)."""
        result = UnitResult()
        sets = [two_spirals(config.n_train, noise=config.noise, turns=config.turns,
                            scale=config.input_scale, seed=data_seed(seed, 0)) for seed in seeds]
        if unit["part"] == "deep":
            for seed, (x, _) in zip(seeds, sets):
                model = deep_mlp(2, config.deep_width, config.deep_depth, 1, activation="relu",
                                 scheme="he", seed=seed)
                shares = dead_shares(model, x, config.batch_size)
                result.add("deep", seed, 0, "", "dead_share", shares["total"])
                for layer, (full, batch) in enumerate(zip(shares["per_layer"],
                                                          shares["per_layer_batch"]), start=1):
                    result.add("deep", seed, 0, str(layer), "dead_share", full)
                    result.add("deep", seed, 0, str(layer), "dead_share_one_batch", batch)
            return result
        run = unit["run"]
        activation, lr_field = shallow_runs(config)[run]
        models = [deep_mlp(2, config.hidden, 1, 1, activation=activation, scheme="he", seed=seed)
                  for seed in seeds]
        # Per member, (epoch, dead share, inactive share); rows are written seed by seed below.
        measured: list[list[tuple[int, float, float]]] = [[] for _ in seeds]

        def on_epoch(epoch: int, member: int, model: DeepMLP) -> None:
            shares = dead_shares(model, sets[member][0], config.batch_size)
            measured[member].append((epoch, shares["total"], shares["inactive_total"]))

        trained = train_binary_sgd_ensemble(
            models, [x for x, _ in sets], [y for _, y in sets], lr=getattr(config, lr_field),
            batch_size=config.batch_size, epochs=config.epochs,
            seeds=[data_seed(seed, 2) for seed in seeds], on_epoch=on_epoch)
        for seed, shares, outcome in zip(seeds, measured, trained):
            for epoch, dead, inactive in shares:
                result.add(run, seed, epoch, "", "dead_share", dead)
                result.add(run, seed, epoch, "", "inactive_share", inactive)
            for epoch, cost in enumerate(outcome.costs):
                result.add(run, seed, epoch, "", "cost", cost)
        return result

    def summarize(self, config: DeadUnitsConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Per shallow run the dead share after epoch 1 and the last epoch and the final cost
        (mean over seeds, and per seed); the deep stack's shares."""
        summary = build_summary(config, table)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            dead_units_figure(table, config, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Compare with the handbook's dead shares and costs (tolerances in each claim)."""
        return dead_units_claims(summary)
