"""``drift``: negative weight drift, the positive pre-activation gradient and emerging sparsity.

"Bug or Feature²" §2-3, App. A.4, B.1 and D.2. The 5-block MLP without biases or norms
(hidden 128) trains on random N(0, 1) pairs (half squared error) and on scikit-learn's
digits (cross-entropy) for relu, gelu, silu, tanh, noisy_relu and sugar. A probe records, per
layer, the weight mean and the drift Z-score ``E|w_t - w_0| / std(w_0)``, the mean
gradient at the pre-activations next to the covariance term, and the share of negative
pre-activations and of zero activations (the recipe :mod:`actlab.recipes.drift_mlp`).

Conditions (one unit each; every activation shares initial weights and batch order per
seed, so runs are paired):

* ``main``: random data, the default optimizer (SGD, lr 0.01, batch 128), He init;
* ``default-init``: the same with PyTorch's default Linear init, which shrinks the signal
  through the stack so that the drift nearly vanishes (shown beside ``main``);
* ``skip``: the MLP with skip connections, trained with Adam (lr 1e-3) as in the paper's
  App. B.1.3 (with He init the residual sum grows with depth and SGD diverges);
* ``digits``: real images, cross-entropy, Adam (lr 1e-3, as the paper's App. D.2): the
  digits, or CIFAR-10 when ``cifar_dir`` is set (``real_hidden`` > 0: that width instead of
  ``hidden``, ``digits_weight_decay``: Adam's weight decay), He init;
* ``digits-default-init``: the same with PyTorch's default init (``compare_init``): the paper
  never states its initialisation, so the real-data drift is reported under both, first;
* ``digits-skip``: the real-data MLP with skip connections (App. B.1.3's Fig. 9 pair);
  the two side conditions train ``real_extra_activations`` only;
* ``sweep``: SGD / SGD+momentum / Adam at two learning rates each (relu, gelu).

The weight layers are ``layer1`` (input projection, sees the data) .. ``layer6`` (hidden)
and ``layer7`` (output head). ``mean_shift_later_layers`` averages the hidden layers 2..6:
the paper's argument concerns layers whose output passes an activation, which the head's
does not (its shift is reported separately as ``mean_shift_output_layer``).

``epochs`` > 0 trains every condition for that many passes over its data (``n // batch_size``
steps a pass) instead of ``steps`` updates; ``real_epoch_size`` > 0 counts the real-data
conditions' passes over that many examples instead (50000: as many steps as CIFAR-10's
epochs take, 5 x 390 = 1,950 at batch 128, on the digits). The real data's centring, input
dimension, classes and input noise are the ablation's fields (``real_*``,
:mod:`actlab.experiments.drift.real_data`). ``--paper`` is App. D.2's setting
(:data:`~actlab.experiments.classifier_paper.DRIFT`): random data at width 128 with SGD and
CIFAR-10 at width 1024 with Adam, 5 epochs each, 5 runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
from torch import Tensor

from actlab.errors import ConfigError
from actlab.experiments.classifier_paper import DRIFT, epoch_steps
from actlab.experiments.drift.claims import claims as drift_claims
from actlab.experiments.drift.figures import draw_figures
from actlab.experiments.drift.real_data import CENTRINGS, LIFTS, check_real_data, load_real
from actlab.experiments.drift.summary import DriftRun, build_summary, parse_sweep_item, run_name
from actlab.recipes.drift_mlp import DriftMLP, train_drift_mlp
from actlab.recipes.image_classifier import check_cifar_dir
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
from actlab.train.optim import OPTIMIZERS
from actlab.train.settings import TrainSettings
from actlab.train.supervised import torch_threads

CONDITIONS = ("main", "default-init", "skip", "digits", "digits-default-init", "digits-skip",
              "sweep")
REAL_CONDITIONS = ("digits", "digits-default-init", "digits-skip")


@dataclass
class DriftConfig(CheckedConfig):
    """Scale and settings of the drift study (see the module docstring)."""

    activations: list[str] = checked(default_factory=lambda: ["relu", "gelu", "silu", "tanh",
                                                              "noisy_relu", "sugar"],
                                     spec="activation", nonempty=True)
    conditions: list[str] = checked(default_factory=lambda: list(CONDITIONS),
                                    choices=CONDITIONS, nonempty=True)
    steps: int = checked(2000, ge=1)
    batch_size: int = checked(128, ge=1)
    hidden: int = checked(128, ge=1)
    depth: int = checked(5, ge=1)
    in_dim: int = checked(128, ge=1)
    out_dim: int = checked(10, ge=1)
    n_random: int = checked(12800, ge=1)
    optimizer: str = checked("sgd", choices=OPTIMIZERS)
    lr: float = checked(0.01, gt=0)
    init: str = checked("he", spec="init")
    compare_init: str = checked("torch-default", spec="init")
    skip_optimizer: str = checked("adam", choices=OPTIMIZERS)
    skip_lr: float = checked(1e-3, gt=0)
    digits_optimizer: str = checked("adam", choices=OPTIMIZERS)
    digits_lr: float = checked(1e-3, gt=0)
    sweep: list[str] = checked(default_factory=lambda: ["sgd:0.01", "sgd:0.05", "momentum:0.01",
                                                        "momentum:0.05", "adam:0.0001",
                                                        "adam:0.001"])
    sweep_activations: list[str] = checked(default_factory=lambda: ["relu", "gelu"],
                                           spec="activation")
    record_every: int = checked(100, ge=1)
    loss_every: int = checked(10, ge=1)
    threads: int = checked(1, ge=1)
    epochs: float = checked(0.0, ge=0)  # > 0: passes over each condition's data, not steps
    cifar_dir: str = ""  # CIFAR-10 python files: the real-data condition reads them
    cifar_limit: int = checked(0, ge=0)  # first N CIFAR training images (0: all)
    real_hidden: int = checked(0, ge=0)  # > 0: the real-data condition's width
    digits_weight_decay: float = checked(0.0, ge=0)
    # the real-data ablation (real_data.py); the defaults leave the data as loaded
    real_extra_activations: list[str] = checked(default_factory=lambda: ["relu"],
                                                spec="activation")
    real_epoch_size: int = checked(0, ge=0)  # > 0: real-data epochs count this many examples
    real_centring: str = checked("global", choices=CENTRINGS)
    real_input_dim: int = checked(0, ge=0)  # > 0: inputs lifted to this dimension
    real_lift: str = checked("upsample", choices=LIFTS)
    real_classes: int = checked(0, ge=0)  # > 0: only the first k classes
    real_noise: float = checked(0.0, ge=0)  # std of fresh Gaussian noise on training inputs

    def check(self) -> None:
        """Every sweep item must read as ``optimizer:lr``; the CIFAR folder must hold it; the
        real data must take the lift; epochs of ``real_epoch_size`` need ``epochs``."""
        for item in self.sweep:
            parse_sweep_item(item)
        check_cifar_dir(self.cifar_dir)
        check_real_data(self)
        if self.real_epoch_size and not self.epochs:
            raise ConfigError("real_epoch_size", "counts epochs: set epochs > 0 as well")

    def unit_steps(self, n_train: int, real: bool = False) -> int:
        """Updates of a condition whose data has ``n_train`` examples (``real``: a real-data
        condition, whose epochs count ``real_epoch_size`` examples when that is set)."""
        if not self.epochs:
            return self.steps
        if real and self.real_epoch_size:
            n_train = self.real_epoch_size
        return max(1, round(self.epochs * epoch_steps(n_train, self.batch_size)))


def unit_data(unit: dict[str, Any], config: DriftConfig,
              seed: int) -> tuple[Tensor, Tensor, Tensor, Tensor, int, int, str]:
    """Training and held-out data of a unit: ``x, y, x_eval, y_eval, in_dim, out_dim, loss``."""
    from actlab.data.random_pairs import random_pairs

    if unit["data"] == "digits":
        return (*load_real(config), "cross_entropy")
    x, y = random_pairs(config.n_random, config.in_dim, config.out_dim, seed=seed)
    x_eval, y_eval = random_pairs(2048, config.in_dim, config.out_dim, seed=seed + 100_000)
    return x, y, x_eval, y_eval, config.in_dim, config.out_dim, "half_sse"


@register
class Drift(Experiment):
    """Negative weight drift across activations, data, init, skips and optimizers."""

    name = "drift"
    headline_figure = "drift_main"
    description = ("Weight drift, positive pre-activation gradient and emerging sparsity in the "
                   "paper's MLP on random data and digits (\"Bug or Feature²\" §2-3)")
    Config = DriftConfig
    quick = {"steps": 300, "record_every": 50, "n_random": 6400,
             "sweep": ["sgd:0.01", "sgd:0.05", "momentum:0.01", "adam:0.001"],
             "sweep_activations": ["relu"]}
    full = {"steps": 4000, "record_every": 100}
    paper = DRIFT
    default_seeds = 3
    seeds_per_unit = 1

    def units(self, config: DriftConfig) -> list[dict[str, Any]]:
        """One unit per (condition, activation[, optimizer, lr])."""
        base = {"data": "random", "optimizer": config.optimizer, "lr": config.lr,
                "init": config.init, "skip": False}
        units = []
        for condition in config.conditions:
            if condition == "sweep":
                for act in config.sweep_activations:
                    for item in config.sweep:
                        opt, lr = parse_sweep_item(item)
                        if ("main" in config.conditions and act in config.activations
                                and (opt, lr) == (config.optimizer, config.lr)):
                            continue  # the same run as main/<act>; summarize reuses it
                        units.append({**base, "condition": "sweep", "activation": act,
                                      "optimizer": opt, "lr": lr})
                continue
            side = condition in ("digits-default-init", "digits-skip")
            for act in config.real_extra_activations if side else config.activations:
                unit = {**base, "condition": condition, "activation": act}
                if condition in REAL_CONDITIONS:
                    unit.update(data="digits", optimizer=config.digits_optimizer, lr=config.digits_lr)
                if condition in ("default-init", "digits-default-init"):
                    unit["init"] = config.compare_init
                elif condition == "skip":
                    unit.update(skip=True, optimizer=config.skip_optimizer, lr=config.skip_lr)
                elif condition == "digits-skip":
                    unit["skip"] = True
                units.append(unit)
        return units

    def run_unit(self, config: DriftConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the unit's condition for each seed with the drift MLP recipe."""
        result = UnitResult()
        run = run_name(unit)
        with torch_threads(config.threads):
            for seed in seeds:
                x, y, x_eval, y_eval, in_dim, out_dim, loss = unit_data(unit, config, seed)
                real = unit["data"] == "digits"
                hidden = config.real_hidden if real and config.real_hidden else config.hidden
                spec = DriftMLP(in_dim, out_dim, hidden=hidden, depth=config.depth,
                                activation=unit["activation"], skip=unit["skip"],
                                init=unit["init"])
                settings = TrainSettings(optimizer=unit["optimizer"], lr=unit["lr"],
                                         steps=config.unit_steps(len(x), real),
                                         batch_size=config.batch_size, loss=loss,
                                         weight_decay=config.digits_weight_decay if real
                                         else 0.0)
                record = train_drift_mlp(x, y, spec, settings, seed=seed,
                                         record_every=config.record_every,
                                         loss_every=config.loss_every, x_eval=x_eval,
                                         y_eval=y_eval, progress=ctx.progress,
                                         input_noise=config.real_noise if real else 0.0)
                for row in record.rows():
                    result.add(run, seed, *row)
                if record.status == STATUS_DIVERGED:
                    result.status = STATUS_DIVERGED
        return result

    def workloads(self, config: DriftConfig, unit: dict[str, Any]) -> list:
        """What one seed of a unit trains (``actlab plan``): the MLP and two passes over the
        held-out set; the probe's forward passes are not priced."""
        from torch import empty

        from actlab.experiments.classifier_paper import cifar_shape
        from actlab.runner.cost import Workload

        real = unit["data"] == "digits"
        if real:
            data = cifar_shape(config)
            in_dim, out_dim, n_train, n_eval = (config.real_input_dim or data.in_features,
                                                config.real_classes or data.num_classes,
                                                data.n_train, data.n_test)
        else:
            in_dim, out_dim, n_train, n_eval = config.in_dim, config.out_dim, config.n_random, 2048
        hidden = config.real_hidden if real and config.real_hidden else config.hidden

        def build() -> Any:  # the recipe's MLP; its initialisation costs nothing to price
            from actlab.nn.mlp import MLP

            return MLP(in_dim, out_dim, hidden=hidden, depth=config.depth,
                       activation=unit["activation"], skip=unit["skip"])

        return [Workload(f"mlp {in_dim}-{hidden}x{config.depth}", build,
                         lambda n: (empty(n, in_dim),), config.unit_steps(n_train, real),
                         config.batch_size, unit["optimizer"], eval_samples=2 * n_eval,
                         sample="example")]

    def summarize(self, config: DriftConfig, table: pd.DataFrame, results: list[dict[str, Any]],
                  ctx: RunContext) -> dict:
        """Per-activation drift, gradient sign, sparsity; figures of the trajectories."""
        sweep = [DriftRun.of(u) for u in self.units(config) if u["condition"] == "sweep"]
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figures(config, table, sweep, ctx)
        return build_summary(config, table, results, sweep)

    def claims(self, summary: dict) -> list[Claim]:
        """Drift sign per activation, tanh, gradient sign, sparsity, NoisyReLU/SUGAR vs ReLU."""
        return drift_claims(summary)
