"""Tiny experiments registered only by the runner's tests (not part of actlab).

``toy`` trains a two-layer network per activation and seed for a few SGD steps; options
make chosen units fail (raise), diverge (huge learning rate) or kill their pool worker, or
sleep so that a test can kill a sweep half-way. ``toy-ensemble`` puts all seeds in one unit.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from dataclasses import dataclass

import torch

from actlab.errors import ConfigError
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    UnitContext,
    UnitResult,
    register,
)

ACTS = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


@dataclass
class ToyConfig:
    """Config of the toy experiment."""

    steps: int = 12
    lr: float = 0.05
    width: int = 4
    acts: tuple[str, ...] = ("relu", "tanh")
    fail_act: str = ""
    diverge_act: str = ""
    flag_divergence: bool = True  # False: leave detection to the runner's safety net
    sleep: float = 0.0
    crash_act: str = ""  # units of this activation kill their pool worker (never the main process)
    nan_metric_act: str = ""  # units of this activation record weight_mean nan halfway, loss finite

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")
        if self.steps < 1:
            raise ConfigError("steps", f"must be >= 1, got {self.steps}")
        for act in self.acts:
            if act not in ACTS:
                raise ConfigError("acts", f"unknown activation {act!r}")


def train_toy(config: ToyConfig, act: str, seed: int, result: UnitResult, run: str) -> bool:
    """Train one toy model; add loss rows; return False if the loss became non-finite."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(32, config.width, generator=gen, dtype=torch.float64)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    w1 = (torch.randn(config.width, 8, generator=gen, dtype=torch.float64) * 0.5).requires_grad_()
    w2 = (torch.randn(8, 1, generator=gen, dtype=torch.float64) * 0.5).requires_grad_()
    lr = 1e6 if act == config.diverge_act else config.lr
    phi = ACTS[act]
    for step in range(config.steps):
        loss = ((phi(x @ w1) @ w2 - y) ** 2).mean()
        result.add(run, seed, step, "", "loss", loss.item())
        broken = act == config.nan_metric_act and step == config.steps // 2
        result.add(run, seed, step, "w1", "weight_mean", math.nan if broken else w1.mean().item())
        if not torch.isfinite(loss):
            return False
        g1, g2 = torch.autograd.grad(loss, (w1, w2))
        with torch.no_grad():
            w1 -= lr * g1
            w2 -= lr * g2
    return True


@register
class Toy(Experiment):
    """Per-activation toy regression."""

    name = "toy"
    description = "toy regression for the runner's tests"
    Config = ToyConfig
    quick = {"steps": 6}
    full = {"steps": 20}
    default_seeds = 2
    seeds_per_unit = 1

    def units(self, config: ToyConfig) -> list[dict]:
        """One unit per activation."""
        return [{"act": act} for act in config.acts]

    def run_unit(self, config: ToyConfig, unit: dict, seeds: list[int], ctx: UnitContext) -> UnitResult:
        """Train the unit's activation for each seed."""
        act = unit["act"]
        if config.sleep:
            time.sleep(config.sleep)
        if act == config.fail_act or act in FAIL_ACTS:
            raise RuntimeError(f"boom in {act}")
        if act == config.crash_act and multiprocessing.parent_process() is not None:
            os._exit(3)  # as a segfault or the OOM killer would: no exception, no record
        result = UnitResult()
        for seed in seeds:
            finite = train_toy(config, act, seed, result, run=act)
            if not finite and config.flag_divergence:
                result.status = STATUS_DIVERGED
                result.error = f"non-finite loss for seed {seed}"
        result.data["first_loss"] = {str(s): r[5] for r in result.rows for s in seeds
                                      if r[4] == "loss" and r[2] == 0 and r[1] == s}
        return result

    def summarize(self, config, table, results, ctx) -> dict:
        """Final loss per activation (mean over seeds) and a figure of the curves."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        loss = table[table.metric == "loss"]
        summary = {"final_loss": {}, "first_loss": {}}
        fig, ax = plt.subplots(figsize=(3, 2))
        for act, part in loss.groupby("run"):
            last = part[part.step == part.step.max()]
            summary["final_loss"][act] = float(last.value.mean())
            summary["first_loss"][act] = float(part[part.step == 0].value.mean())
            curve = part.groupby("step").value.mean()
            ax.plot(curve.index, curve.values, label=act)
        ax.legend()
        ctx.save_figure(fig, "loss")
        summary["statuses"] = sorted(r["status"] for r in results)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """The loss falls for every activation that did not diverge."""
        rows = []
        for act, final in summary["final_loss"].items():
            first = summary["first_loss"][act]
            held = None if final != final else final < first
            rows.append(Claim(f"{act}: loss falls", f"{first:.4g} -> {final:.4g}", held, "toy",
                              id=f"toy/{act}/loss-falls", value=final, comparison="<",
                              threshold=first))
        return rows


@register
class ToyEnsemble(Toy):
    """All seeds in one unit (as vmapped ensembles do)."""

    name = "toy-ensemble"
    description = "toy with all seeds in one unit"
    seeds_per_unit = None


@register
class ToyBrokenSummary(Toy):
    """A toy whose summarize raises."""

    name = "toy-broken-summary"
    description = "toy whose summarize raises"

    def summarize(self, config, table, results, ctx) -> dict:  # noqa: D102
        raise ValueError("summary exploded")


# ---------------------------------------------------------------- utilities for the tests
FAIL_ACTS: set[str] = set()  # activations whose units raise, toggled in-process by tests


def invoke(*args: str):
    """Run the ``actlab`` CLI in this process; returns click's ``Result``. ``run`` and
    ``sweep`` run in-process (``--workers 1``) unless the test names its workers: the CLI's
    default pool of every core costs a process start per test and is tested on its own."""
    from click.testing import CliRunner

    from actlab.cli import main

    words = [str(a) for a in args]
    if words and words[0] in ("run", "sweep") and "--workers" not in words:
        words += ["--workers", "1"]
    return CliRunner().invoke(main, words, catch_exceptions=False)


def subprocess_env() -> dict[str, str]:
    """Environment for an ``actlab`` subprocess that registers these toy experiments."""
    import os
    from pathlib import Path

    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["ACTLAB_EXPERIMENT_MODULES"] = "_toy_experiments"
    return env
