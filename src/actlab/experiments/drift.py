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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from actlab.errors import ConfigError
from actlab.experiments._common import check_activation_specs, require_at_least_one
from actlab.plotting import pyplot
from actlab.runner.claims import claim_id
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
POSITIVE = ("relu", "gelu", "silu", "noisy_relu", "sugar")  # positively biased activations
CONDITIONS = ("main", "default-init", "skip", "digits", "sweep")


@dataclass
class DriftConfig:
    """Scale and settings of the drift study (see the module docstring)."""

    activations: list[str] = field(default_factory=lambda: ["relu", "gelu", "silu", "tanh",
                                                            "noisy_relu", "sugar"])
    conditions: list[str] = field(default_factory=lambda: list(CONDITIONS))
    steps: int = 2000
    batch_size: int = 128
    hidden: int = 128
    depth: int = 5
    in_dim: int = 128
    out_dim: int = 10
    n_random: int = 12800
    optimizer: str = "sgd"
    lr: float = 0.01
    init: str = "he"
    compare_init: str = "torch-default"
    skip_optimizer: str = "adam"
    skip_lr: float = 1e-3
    digits_optimizer: str = "adam"
    digits_lr: float = 1e-3
    sweep: list[str] = field(default_factory=lambda: ["sgd:0.01", "sgd:0.05", "momentum:0.01",
                                                      "momentum:0.05", "adam:0.0001", "adam:0.001"])
    sweep_activations: list[str] = field(default_factory=lambda: ["relu", "gelu"])
    record_every: int = 100
    loss_every: int = 10
    threads: int = 1

    def __post_init__(self) -> None:
        from actlab.init import SCHEMES

        require_at_least_one(self, ("steps", "batch_size", "hidden", "in_dim", "out_dim", "n_random",
                                    "record_every", "loss_every", "threads", "depth"))
        if self.lr <= 0 or self.digits_lr <= 0 or self.skip_lr <= 0:
            raise ConfigError("lr", "learning rates must be > 0")
        for name in ("optimizer", "digits_optimizer", "skip_optimizer"):
            if getattr(self, name) not in OPTIMIZERS:
                raise ConfigError(name, f"must be one of {', '.join(OPTIMIZERS)}")
        for name in ("init", "compare_init"):
            if getattr(self, name) not in SCHEMES:
                raise ConfigError(name, f"must be one of {', '.join(SCHEMES)}, got {getattr(self, name)!r}")
        bad = [c for c in self.conditions if c not in CONDITIONS]
        if bad or not self.conditions:
            raise ConfigError("conditions", f"choose from {', '.join(CONDITIONS)}, got {bad or 'none'}")
        if not self.activations:
            raise ConfigError("activations", "need at least one activation")
        check_activation_specs(self.activations + self.sweep_activations)
        for item in self.sweep:
            parse_sweep_item(item)


def parse_sweep_item(item: str) -> tuple[str, float]:
    """``"momentum:0.01"`` -> ``("momentum", 0.01)``; ``ConfigError`` on bad input."""
    opt, _, lr = item.partition(":")
    if opt not in OPTIMIZERS:
        raise ConfigError("sweep", f"optimizer {opt!r} in {item!r} must be one of {', '.join(OPTIMIZERS)}")
    try:
        value = float(lr)
    except ValueError:
        raise ConfigError("sweep", f"{item!r}: expected optimizer:lr") from None
    if not value > 0:
        raise ConfigError("sweep", f"{item!r}: lr must be > 0")
    return opt, value


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
        in_dim, out_dim, loss = config.in_dim, config.out_dim, "mse"
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


def _layer_index(label: str) -> int:
    return int(label[5:]) if label.startswith("layer") and label[5:].isdigit() else -1


def _seed_mean(df: pd.DataFrame) -> float:
    return float(df["value"].mean()) if len(df) else math.nan


def _finite(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


@register
class Drift(Experiment):
    """Negative weight drift across activations, data, init, skips and optimizers."""

    name = "drift"
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
        table = table.copy()
        table["depth"] = table["layer"].map(_layer_index)
        last_hidden = config.depth + 1
        summary: dict[str, Any] = {
            "scale": {"steps": config.steps, "seeds": sorted({int(s) for s in table["seed"]}),
                      "hidden": config.hidden, "depth": config.depth, "batch_size": config.batch_size,
                      "random_pairs": config.n_random, "optimizer": f"{config.optimizer} lr={config.lr}",
                      "init": config.init, "compare_init": config.compare_init},
            "failed_units": [r["unit"] for r in results if r["status"] != "ok"],
        }

        def block(run: str) -> dict[str, Any] | None:
            df = table[table["run"] == run]
            if df.empty:
                return None
            return describe_run(df, last_hidden)

        per_act: dict[str, Any] = {}
        for act in config.activations:
            entry = block(f"main/{act}") or {}
            for cond in ("default-init", "skip", "digits"):
                other = block(f"{cond}/{act}")
                if other is not None:
                    entry[cond] = {k: other[k] for k in ("mean_shift_first_layer",
                                                         "mean_shift_later_layers",
                                                         "mean_shift_output_layer",
                                                         "final_sparsity", "final_neg_frac",
                                                         "sparsity_start", "sparsity_end",
                                                         "test_accuracy") if k in other}
            if entry:
                per_act[act] = entry
        # Paired comparison with ReLU: identical losses would mean the activation trains as ReLU.
        relu_loss = _loss_curve(table, "main/relu")
        for act, entry in per_act.items():
            if act != "relu" and relu_loss is not None:
                curve = _loss_curve(table, f"main/{act}")
                if curve is not None:
                    joined = pd.concat([relu_loss, curve], axis=1, join="inner").dropna()
                    gap = (joined.iloc[:, 1] - joined.iloc[:, 0]).abs().mean()
                    entry["loss_gap_vs_relu"] = _finite(float(gap / joined.iloc[:, 0].abs().mean()))
        summary["activations"] = per_act
        sweep: dict[str, dict[str, Any]] = {}
        sweep_runs = {r: r for r in table["run"].unique() if r.startswith("sweep/")}
        if "sweep" in config.conditions:
            for act in config.sweep_activations:  # sweep points that are the main run
                if (table["run"] == f"main/{act}").any():
                    sweep_runs[f"sweep/{act}/{config.optimizer}:{config.lr:g}"] = f"main/{act}"
        for run in sorted(sweep_runs):
            _, act, opt_lr = run.split("/", 2)
            df = table[table["run"] == sweep_runs[run]]
            hidden = df[(df["depth"] >= 2) & (df["depth"] <= last_hidden)]
            final_step = hidden[hidden["metric"] == "drift_z"]["step"].max()
            z = hidden[(hidden["metric"] == "drift_z") & (hidden["step"] == final_step)]
            early = hidden[(hidden["metric"] == "drift_z") &
                           (hidden["step"] == min(config.record_every, config.steps))]
            d = describe_run(df, last_hidden)
            sweep.setdefault(act, {})[opt_lr] = {
                "drift_z_final": _finite(_seed_mean(z)), "drift_z_early": _finite(_seed_mean(early)),
                "mean_shift_later_layers": d["mean_shift_later_layers"], "final_loss": d["final_loss"]}
        summary["sweep"] = sweep
        self._figures(config, table, ctx)
        return summary

    def _figures(self, config: DriftConfig, table: pd.DataFrame, ctx: RunContext) -> None:
        plt = pyplot()

        for cond in ("main", "default-init", "skip", "digits"):
            acts = [a for a in config.activations if (table["run"] == f"{cond}/{a}").any()]
            if not acts:
                continue
            fig, axes = plt.subplots(3, len(acts), figsize=(3.2 * len(acts), 8), squeeze=False)
            for j, act in enumerate(acts):
                df = table[table["run"] == f"{cond}/{act}"]
                for i, metric in enumerate(("weight_mean", "preact_grad_mean", "sparsity")):
                    ax = axes[i, j]
                    sub = df[df["metric"] == metric].groupby(["layer", "step"])["value"].mean()
                    for layer in sorted(sub.index.get_level_values(0).unique(), key=_layer_index):
                        series = sub.loc[layer]
                        if metric == "weight_mean":
                            series = series - series.iloc[0]
                        ax.plot(series.index, series.values, label=layer)
                    ax.set_title(f"{act}: {metric}{' shift' if metric == 'weight_mean' else ''}",
                                 fontsize=8)
                    ax.tick_params(labelsize=7)
                axes[0, j].legend(fontsize=6)
            fig.suptitle(f"drift, condition {cond}")
            ctx.save_figure(fig, f"drift_{cond}")
        sweep_runs = sorted(r for r in table["run"].unique() if r.startswith("sweep/"))
        if sweep_runs:
            fig, ax = plt.subplots(figsize=(6, 4))
            for run in sweep_runs:
                df = table[(table["run"] == run) & (table["metric"] == "drift_z")]
                df = df[(df["layer"].map(_layer_index) >= 2) &
                        (df["layer"].map(_layer_index) <= config.depth + 1)]
                curve = df.groupby("step")["value"].mean()
                ax.plot(curve.index, curve.values, label=run[6:])
            ax.set_xlabel("step")
            ax.set_ylabel("drift Z-score (layers 2..6)")
            ax.legend(fontsize=7)
            ctx.save_figure(fig, "drift_optimizers")

    def claims(self, summary: dict) -> list[Claim]:
        """Drift sign per activation, tanh, gradient sign, sparsity, NoisyReLU/SUGAR vs ReLU."""
        claims: list[Claim] = []
        acts = summary.get("activations", {})
        src = "seed 003 §3, Fig. 3(a)"
        positive_shifts = []
        for act in POSITIVE:
            e = acts.get(act)
            if not e:
                continue
            if "mean_shift_later_layers" not in e:
                continue
            later, first = e["mean_shift_later_layers"], e["mean_shift_first_layer"]
            per = e["mean_shift_per_layer"]
            hidden_neg = all(v is not None and v < 0 for k, v in per.items()
                             if 2 <= _layer_index(k) <= len(per) - 1)
            held = None if later is None or first is None else bool(
                hidden_neg and later < 0 and abs(first) < 0.2 * abs(later))
            if later is not None:
                positive_shifts.append(abs(later))
            claims.append(Claim(
                f"{act}, random data: weights drift negative in every hidden layer >= 2, "
                "not in layer 1 (|shift1| < 0.2 |shift later|)",
                f"shift layer1 {_fmt(first)}, layers 2-6 {_fmt(later)}", held, src,
                id=claim_id(self.name, act, "drift-negative-in-hidden-layers"), value=later,
                comparison="compound", threshold=0.0))
        tanh = acts.get("tanh")
        if tanh and positive_shifts and "mean_shift_later_layers" in tanh:
            ref = float(np.median(positive_shifts))
            value = tanh["mean_shift_later_layers"]
            claims.append(Claim("tanh, random data: no drift (|shift| < 0.2 x median |shift| of "
                                "the positively biased activations)",
                                f"tanh {_fmt(value)} vs {_fmt(ref)}",
                                None if value is None else abs(value) < 0.2 * ref, src,
                                id=claim_id(self.name, "tanh", "no-drift"),
                                value=None if value is None else abs(value), comparison="<",
                                threshold=0.2 * ref))
        for act in ("relu", "gelu", "silu"):
            e = acts.get(act)
            if e and e.get("preact_grad_mean_init") is not None:
                g, c = e["preact_grad_mean_init"], e.get("preact_grad_cov_init")
                held = g > 0 and c is not None and abs(c) < 0.1 * g
                claims.append(Claim(f"{act}: mean pre-activation gradient > 0 at init, covariance "
                                    "term < 0.1x of it (hidden layers)",
                                    f"grad mean {_fmt(g)}, cov {_fmt(c)}", held,
                                    "seed 003 Thm 2.2, Fig. 3(b)",
                                    id=claim_id(self.name, act, "positive-preact-gradient-at-init"),
                                    value=g, comparison="compound", threshold=0.0))
        relu = acts.get("relu")
        if relu:
            for cond, label in (("main", "random data"), ("digits", "digits")):
                e = relu if cond == "main" else relu.get("digits")
                if e and e.get("sparsity_start") is not None and e.get("sparsity_end") is not None:
                    s0, s1 = e["sparsity_start"], e["sparsity_end"]
                    claims.append(Claim(f"relu without norm, {label}: sparsity rises over training "
                                        "(by > 0.02)", f"{s0:.3f} -> {s1:.3f}", s1 > s0 + 0.02,
                                        "seed 003 §4, App. B.1.3",
                                        id=claim_id(self.name, "relu", cond, "sparsity-rises"),
                                        value=s1, comparison=">", threshold=s0 + 0.02))
            dg = relu.get("digits")
            if dg and dg.get("mean_shift_later_layers") is not None:
                claims.append(Claim("relu on real data (digits, cross-entropy, Adam): weights of layers "
                                    "2-6 drift negative", _fmt(dg["mean_shift_later_layers"]),
                                    dg["mean_shift_later_layers"] < 0, "seed 003 §3, App. B.1.3 (CIFAR-10)",
                                    id=claim_id(self.name, "relu", "digits", "drift-negative"),
                                    value=dg["mean_shift_later_layers"], comparison="<",
                                    threshold=0.0))
            di = relu.get("default-init")
            if di and relu.get("mean_shift_later_layers") is not None and di["mean_shift_later_layers"] is not None:
                he, dflt = relu["mean_shift_later_layers"], di["mean_shift_later_layers"]
                claims.append(Claim("relu: PyTorch's default Linear init hides the drift "
                                    "(|shift| < 0.1x the He-init shift)",
                                    f"default {_fmt(dflt)} vs He {_fmt(he)}",
                                    abs(dflt) < 0.1 * abs(he), "issue prototype",
                                    id=claim_id(self.name, "relu", "default-init", "hides-drift"),
                                    value=abs(dflt), comparison="<", threshold=0.1 * abs(he)))
            sk = relu.get("skip")
            if sk and sk["mean_shift_later_layers"] is not None:
                claims.append(Claim("relu with skip connections: drift still negative",
                                    f"{_fmt(sk['mean_shift_later_layers'])}",
                                    sk["mean_shift_later_layers"] < 0, "seed 003 App. A.3",
                                    id=claim_id(self.name, "relu", "skip", "drift-negative"),
                                    value=sk["mean_shift_later_layers"], comparison="<",
                                    threshold=0.0))
        for act in ("noisy_relu", "sugar"):
            e = acts.get(act)
            if e and e.get("loss_gap_vs_relu") is not None:
                gap = e["loss_gap_vs_relu"]
                claims.append(Claim(f"{act} trains differently from ReLU (paired seeds: relative "
                                    "mean loss gap > 1e-3)", f"gap {gap:.2e}", gap > 1e-3,
                                    "seeds README (released code trained both as ReLU)",
                                    id=claim_id(self.name, act, "trains-differently-from-relu"),
                                    value=gap, comparison=">", threshold=1e-3))
        sweep = summary.get("sweep", {}).get("relu", {})
        by = {k: v.get("drift_z_final") for k, v in sweep.items()}
        for lr_key in sorted({k.split(":")[1] for k in by}):
            sgd, mom = by.get(f"sgd:{lr_key}"), by.get(f"momentum:{lr_key}")
            if sgd is not None and mom is not None:
                claims.append(Claim(f"relu, lr {lr_key}: momentum drifts faster than plain SGD",
                                    f"drift Z {mom:.3g} vs {sgd:.3g}", mom > sgd, "seed 003 §3, Fig. 2",
                                    id=claim_id(self.name, "relu", f"lr-{lr_key}",
                                                "momentum-drifts-faster"),
                                    value=mom, comparison=">", threshold=sgd))
        for opt in OPTIMIZERS:
            pairs = sorted((float(k.split(":")[1]), v) for k, v in by.items()
                           if k.startswith(opt + ":") and v is not None)
            if len(pairs) >= 2:
                increasing = all(b[1] > a[1] for a, b in zip(pairs, pairs[1:]))
                claims.append(Claim(f"relu, {opt}: a higher learning rate gives larger drift",
                                    ", ".join(f"lr {lr:g}: {v:.3g}" for lr, v in pairs), increasing,
                                    "seed 003 §3, Fig. 2",
                                    id=claim_id(self.name, "relu", opt, "higher-lr-larger-drift"),
                                    value=min(b[1] - a[1] for a, b in zip(pairs, pairs[1:])),
                                    comparison=">", threshold=0.0))
        return claims


def run_name(unit: dict[str, Any]) -> str:
    """Tidy-table run name of a unit, e.g. ``main/relu`` or ``sweep/relu/adam:0.001``."""
    if unit["condition"] == "sweep":
        return f"sweep/{unit['activation']}/{unit['optimizer']}:{unit['lr']:g}"
    return f"{unit['condition']}/{unit['activation']}"


def describe_run(df: pd.DataFrame, last_hidden: int) -> dict[str, Any]:
    """Seed-averaged headline numbers of one run's rows (see the experiment's summary)."""
    depth = df["layer"].map(_layer_index)
    wm = df[df["metric"] == "weight_mean"]
    shifts: dict[str, float] = {}
    for layer, rows in wm.groupby("layer"):
        per_seed = rows.sort_values("step").groupby("seed")["value"].agg(lambda v: v.iloc[-1] - v.iloc[0])
        shifts[str(layer)] = float(per_seed.mean())
    hidden_later = [v for k, v in shifts.items() if 2 <= _layer_index(k) <= last_hidden]
    out: dict[str, Any] = {
        "mean_shift_first_layer": _finite(shifts.get("layer1", math.nan)),
        "mean_shift_later_layers": _finite(float(np.mean(hidden_later))) if hidden_later else None,
        "mean_shift_output_layer": _finite(shifts.get(f"layer{last_hidden + 1}", math.nan)),
        "mean_shift_per_layer": {k: _finite(v) for k, v in sorted(shifts.items(), key=lambda kv: _layer_index(kv[0]))},
    }
    hidden_sites = df[(depth >= 1) & (depth <= last_hidden)]
    grads = hidden_sites[hidden_sites["metric"] == "preact_grad_mean"]
    covs = hidden_sites[hidden_sites["metric"] == "preact_grad_cov"]
    if len(grads):
        first = grads["step"].min()
        g0 = _seed_mean(grads[grads["step"] == first])
        c0 = covs[covs["step"] == first]["value"].abs().mean() if len(covs) else math.nan
        out["preact_grad_mean_init"] = _finite(g0)
        out["preact_grad_cov_init"] = _finite(float(c0))
        out["preact_grad_mean_sign"] = int(np.sign(g0)) if math.isfinite(g0) else None
        out["preact_grad_mean_over_training"] = _finite(_seed_mean(grads))
    sp = hidden_sites[hidden_sites["metric"] == "sparsity"]
    if len(sp):
        out["sparsity_start"] = _finite(_seed_mean(sp[sp["step"] == sp["step"].min()]))
        out["sparsity_end"] = _finite(_seed_mean(sp[sp["step"] == sp["step"].max()]))
    for metric in ("final_sparsity", "final_neg_frac", "test_accuracy"):
        rows = df[(df["metric"] == metric) & (df["layer"] == "")]
        if len(rows):
            out[metric] = _finite(_seed_mean(rows))
    z = df[(df["metric"] == "drift_z") & (depth >= 2) & (depth <= last_hidden)]
    if len(z):
        out["drift_z_final"] = _finite(_seed_mean(z[z["step"] == z["step"].max()]))
    loss = df[df["metric"] == "loss"].sort_values("step")
    if len(loss):
        tail = loss[loss["step"] >= loss["step"].max() - 50]
        out["final_loss"] = _finite(_seed_mean(tail))
    return out


def _loss_curve(table: pd.DataFrame, run: str) -> pd.Series | None:
    df = table[(table["run"] == run) & (table["metric"] == "loss")]
    if df.empty:
        return None
    return df.set_index(["seed", "step"])["value"]


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2e}"
