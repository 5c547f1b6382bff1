"""``drift``: negative weight drift, the positive pre-activation gradient and emerging sparsity.

Seed 003 §2-3, App. A.4, B.1 and D.2. The 5-block MLP without biases or norms (hidden 128)
trains on random N(0, 1) pairs (half squared error) and on scikit-learn's digits
(cross-entropy) for relu, gelu, silu, tanh, noisy_relu and sugar. A probe records, per
layer, the weight mean and the drift Z-score ``E|w_t - w_0| / std(w_0)``, the mean
gradient at the pre-activations next to the covariance term, and the share of negative
pre-activations and of zero activations.

Conditions (one unit each; every activation shares initial weights and batch order per
seed, so runs are paired):

* ``main``: random data, the default optimizer (SGD, lr 0.01, batch 128), He init;
* ``default-init``: the same with PyTorch's default Linear init, which shrinks the signal
  through the stack so that the drift nearly vanishes (shown beside ``main``);
* ``skip``: the MLP with skip connections, trained with Adam (lr 1e-3) as in the seed's
  App. B.1.3 (with He init the residual sum grows with depth and SGD diverges);
* ``digits``: real images, cross-entropy, Adam (lr 1e-3, as the seed's App. D.2);
* ``sweep``: SGD / SGD+momentum / Adam at two learning rates each (relu, gelu).

The weight layers are ``layer1`` (input projection, sees the data) .. ``layer6`` (hidden)
and ``layer7`` (output head). ``mean_shift_later_layers`` averages the hidden layers 2..6:
the seed's argument concerns layers whose output passes an activation, which the head's
does not (its shift is reported separately as ``mean_shift_output_layer``).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import torch

from actlab.experiments._drift_claims import drift_claims
from actlab.experiments._drift_config import CONDITIONS, DriftConfig, parse_sweep_item  # noqa: F401
from actlab.experiments._drift_summary import DriftRun, drift_figures, drift_summary, run_name
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.train.classify import OPTIMIZERS, TrainSettings, activation_statistics, torch_threads

PROBE_METRICS = ("weight_mean", "drift_z", "preact_grad_mean", "preact_grad_cov",
                 "preact_neg_frac", "sparsity")
def record_steps(steps: int, every: int) -> list[int]:
    """Probe schedule: every ``every`` steps, plus the final weights."""
    return sorted(set(range(0, steps + 1, every)) | {steps})


def run_drift(unit: dict[str, Any], config: DriftConfig, seed: int, result: UnitResult,
              run: str, progress=None) -> str:
    """Train one MLP of ``unit``'s condition with seed ``seed`` and add its rows; the status."""
    from actlab.data.digits import load_digits
    from actlab.data.random_pairs import random_pairs
    from actlab.init import initialize_
    from actlab.nn.mlp import MLP
    from actlab.probe.probe import Probe
    from actlab.train.classify import evaluate, train

    torch.manual_seed(seed)  # noise of noisy_relu
    if unit["data"] == "digits":
        data = load_digits()
        x, y = data.x_train.flatten(1), data.y_train
        x_eval, y_eval = data.x_test.flatten(1), data.y_test
        in_dim, out_dim, loss = data.in_features, data.num_classes, "cross_entropy"
    else:
        x, y = random_pairs(config.n_random, config.in_dim, config.out_dim, seed=seed)
        x_eval, y_eval = random_pairs(2048, config.in_dim, config.out_dim, seed=seed + 100_000)
        in_dim, out_dim, loss = config.in_dim, config.out_dim, "half_sse"
    model = MLP(in_dim, out_dim, hidden=config.hidden, depth=config.depth,
                activation=unit["activation"], skip=unit["skip"])
    # Same generator seed for every activation: paired initial weights.
    initialize_(model, unit["init"], activation=unit["activation"],
                generator=torch.Generator().manual_seed(seed))
    names = model.layer_names()
    probe = Probe(model, every=record_steps(config.steps, config.record_every),
                  metrics=list(PROBE_METRICS))

    def on_step(step: int, value: float) -> None:
        probe.step()
        if step % config.loss_every == 0 or step == config.steps - 1:
            result.add(run, seed, step, "", "loss", value)

    settings = TrainSettings(optimizer=unit["optimizer"], lr=unit["lr"], steps=config.steps,
                             batch_size=config.batch_size, loss=loss)
    outcome = train(model, x, y, settings, generator=torch.Generator().manual_seed(seed),
                    on_step=on_step, progress=progress)
    table = probe.table()
    probe.close()
    for row in table.itertuples():
        if math.isfinite(row.value):
            result.add(run, seed, row.step, names.get(row.layer, row.layer), row.metric, row.value)
    if outcome.status == STATUS_DIVERGED:
        result.add(run, seed, outcome.steps, "", "loss", math.nan)
        return STATUS_DIVERGED
    final = activation_statistics(model, x_eval)  # eval mode: noisy_relu acts as ReLU
    for layer, stats in final.items():
        label = "" if layer == "mean" else names.get(layer, layer)
        result.add(run, seed, config.steps, label, "final_neg_frac", stats["preact_neg_frac"])
        result.add(run, seed, config.steps, label, "final_sparsity", stats["sparsity"])
    if loss == "cross_entropy":
        result.add(run, seed, config.steps, "", "test_accuracy", evaluate(model, x_eval, y_eval)["accuracy"])
    return outcome.status


@register
class Drift(Experiment):
    """Negative weight drift across activations, data, init, skips and optimizers."""

    name = "drift"
    headline_figure = "drift_main"
    description = ("Weight drift, positive pre-activation gradient and emerging sparsity in the "
                   "seed's MLP on random data and digits (seed 003 §2-3)")
    Config = DriftConfig
    quick = {"steps": 400, "record_every": 50, "n_random": 6400,
             "sweep": ["sgd:0.01", "sgd:0.05", "momentum:0.01", "adam:0.001"],
             "sweep_activations": ["relu"]}
    full = {"steps": 4000, "record_every": 100}
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
            for act in config.activations:
                unit = {**base, "condition": condition, "activation": act}
                if condition == "default-init":
                    unit["init"] = config.compare_init
                elif condition == "skip":
                    unit.update(skip=True, optimizer=config.skip_optimizer, lr=config.skip_lr)
                elif condition == "digits":
                    unit.update(data="digits", optimizer=config.digits_optimizer, lr=config.digits_lr)
                units.append(unit)
        return units

    def run_unit(self, config: DriftConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the unit's condition for each seed."""
        result = UnitResult()
        run = run_name(unit)
        with torch_threads(config.threads):
            for seed in seeds:
                if run_drift(unit, config, seed, result, run, ctx.progress) == STATUS_DIVERGED:
                    result.status = STATUS_DIVERGED
        return result

    def summarize(self, config: DriftConfig, table: pd.DataFrame, results: list[dict[str, Any]],
                  ctx: RunContext) -> dict:
        """Per-activation drift, gradient sign, sparsity; figures of the trajectories."""
        runs = {name: rows for name, rows in table.groupby("run")}
        sweep = [DriftRun.of(u) for u in self.units(config) if u["condition"] == "sweep"]
        drift_figures(config, runs, sweep, ctx)
        return drift_summary(config, runs, results, sweep)

    def claims(self, summary: dict) -> list[Claim]:
        """Drift sign per activation, tanh, gradient sign, sparsity, NoisyReLU/SUGAR vs ReLU."""
        return drift_claims(summary, OPTIMIZERS, parse_sweep_item)
