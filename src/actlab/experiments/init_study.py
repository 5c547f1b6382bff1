"""``init-study``: the handbook's sample project, ten activation/initialization choices on two spirals.

Protocol (seed 001, "The sample project"): 20 hidden layers of 32 units, one sigmoid output
with the cross-entropy cost (computed from the output's net input, so it stays finite when
the sigmoid saturates), 300 noisy spiral points (:func:`actlab.data.spirals.two_spirals`,
unit second moment per coordinate), plain mini-batch SGD with learning rate 0.01, batches
of 20, 150 epochs, three seeds, float64, zero biases. Each seed has its own initial weights,
training set and batch order; the ten configurations share them by seed (paired).

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
(:func:`actlab.train.binary.train_binary_sgd_ensemble`): each seed keeps its own data, initial
weights and batch order, and its run equals the plain loop :func:`train_binary_sgd` to
rounding (an overflowing seed stops alone, as in the loop). ``--quick`` trains 40 epochs
with the late cost over the last 10; those verdicts are not comparable with the
handbook's, which belong to the full protocol.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from actlab.data.spirals import data_seed, two_spirals
from actlab.errors import ConfigError, did_you_mean
from actlab.experiments._common import check_input_scale, require_at_least_one, require_positive
from actlab.experiments._init_study_report import (
    LN2,
    PUBLISHED,
    gradient_claims,  # noqa: F401 - re-exported
    init_study_claims,
    init_study_figures,
)
from actlab.measure.signal import logistic_cross_entropy, weight_grad_norms
from actlab.nn.deep_mlp import deep_mlp
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.train.binary import (  # noqa: F401 (some re-exported: the loop's former home)
    BinaryRun,
    binary_accuracy,
    mean_bce,
    train_binary_sgd,
    train_binary_sgd_ensemble,
)
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


def classify_late_cost(late_cost: float) -> str:
    """The verdict of one late cost (see the module docstring)."""
    if not math.isfinite(late_cost):
        return "diverges"
    if late_cost < LN2 / 2:
        return "trains"
    if abs(late_cost - LN2) <= 0.01:
        return "stalls at chance"
    return "learns slowly"


def late_cost(costs: Sequence[float], window: int) -> float:
    """Median of the last ``window`` epoch costs; +inf if any cost of the run is non-finite."""
    if any(not math.isfinite(c) for c in costs):
        return math.inf
    return float(statistics.median(costs[-window:]))


def configuration_verdict(late_costs: Sequence[float]) -> str:
    """The verdict of the median late cost over seeds (diverged runs count as +inf)."""
    return classify_late_cost(float(statistics.median(late_costs)))


@dataclass
class InitStudyConfig:
    """The sample project's protocol (defaults: the handbook's)."""

    configurations: tuple[str, ...] = tuple(CONFIGURATIONS)
    depth: int = 20
    width: int = 32
    n_train: int = 300
    n_test: int = 300
    noise: float = 0.1
    turns: float = 1.5
    input_scale: str = "unit"
    lr: float = 0.01
    batch_size: int = 20
    epochs: int = 150
    late_window: int = 15

    def __post_init__(self) -> None:

        for name in self.configurations:
            if name not in CONFIGURATIONS:
                hint = did_you_mean(name, CONFIGURATIONS, n=3, cutoff=0.4, prefix="; ")
                raise ConfigError("configurations", f"unknown configuration {name!r}{hint}")
        if not self.configurations:
            raise ConfigError("configurations", "need at least one")
        require_at_least_one(self, ("depth", "width", "n_train", "n_test", "batch_size", "epochs", "late_window"))
        if self.batch_size > self.n_train:
            raise ConfigError("batch_size", f"must be <= n_train ({self.n_train})")
        if self.late_window > self.epochs:
            raise ConfigError("late_window", f"must be <= epochs ({self.epochs})")
        require_positive(self, ("lr",))
        check_input_scale(self.input_scale)


def spiral_sets(config: InitStudyConfig, seed: int):
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
    """Ten activation/initialization choices for a 20-layer network on two spirals (seed 001)."""

    name = "init-study"
    headline_figure = "init_study_costs"
    description = ("The handbook's sample project: 20x32 network, ten activation/init choices, "
                   "spirals, plain SGD, verdicts by late cost (seed 001).")
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
        summary: dict = {"protocol": {
            "epochs": config.epochs, "late_window": config.late_window, "lr": config.lr,
            "batch_size": config.batch_size, "depth": config.depth, "width": config.width,
            "input_scale": config.input_scale, "noise": config.noise, "turns": config.turns,
            "comparable_with_handbook": config.epochs == 150 and config.late_window == 15,
        }}
        seeds = sorted(int(s) for s in table["seed"].unique())
        summary["seeds"] = seeds
        for name in config.configurations:
            rows = table[table["run"] == name]
            late, curves = [], []
            for seed in seeds:
                sel = rows[(rows["seed"] == seed) & (rows["metric"] == "cost")].sort_values("step")
                costs = sel["value"].tolist()
                curves.append(costs)
                late.append(late_cost(costs[1:], config.late_window))
            acc = rows[rows["metric"] == "test_accuracy"]["value"]
            acc = [a for a in acc.tolist() if math.isfinite(a)]
            grads = rows[(rows["metric"] == "grad_norm_before") & (rows["seed"] == seeds[0])]
            grads = grads.assign(l=grads["layer"].astype(int)).sort_values("l")["value"].tolist()
            summary[name] = {
                "verdict": configuration_verdict(late),
                "late_costs": [c if math.isfinite(c) else None for c in late],
                "seed_verdicts": [classify_late_cost(c) for c in late],
                "test_accuracy": sum(acc) / len(acc) if acc else None,
                "initial_cost": [c[0] if c else None for c in curves],
                "grad_norms_before_seed0": grads,
                "handbook_verdict": PUBLISHED[name][0],
            }
        init_study_figures(summary, table, list(CONFIGURATIONS), ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """One claim per configuration (our verdict against the handbook's), gradient norms."""
        return init_study_claims(summary, list(CONFIGURATIONS))
