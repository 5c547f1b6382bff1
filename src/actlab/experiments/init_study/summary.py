"""The ``init-study`` summary: each run's late cost and verdict, per configuration over seeds."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from actlab.analysis import finite_mean, seeds_in
from actlab.experiments.init_study.claims import PUBLISHED

if TYPE_CHECKING:
    from actlab.experiments.init_study import InitStudyConfig

LN2 = math.log(2.0)


def classify_late_cost(late_cost: float) -> str:
    """The verdict of one late cost (see :mod:`actlab.experiments.init_study`)."""
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


def build_summary(config: InitStudyConfig, table) -> dict:
    """Per configuration (top-level key = its name): ``verdict``, ``late_costs`` (per seed,
    ``None`` for an overflow) and ``test_accuracy``; plus ``protocol`` and ``seeds``."""
    summary: dict = {"protocol": {
        "epochs": config.epochs, "late_window": config.late_window, "lr": config.lr,
        "batch_size": config.batch_size, "depth": config.depth, "width": config.width,
        "input_scale": config.input_scale, "noise": config.noise, "turns": config.turns,
        "comparable_with_handbook": config.epochs == 150 and config.late_window == 15,
    }}
    seeds = seeds_in(table)
    summary["seeds"] = seeds
    for name in config.configurations:
        rows = table[table["run"] == name]
        late, curves = [], []
        for seed in seeds:
            sel = rows[(rows["seed"] == seed) & (rows["metric"] == "cost")].sort_values("step")
            costs = sel["value"].tolist()
            curves.append(costs)
            late.append(late_cost(costs[1:], config.late_window))
        grads = rows[(rows["metric"] == "grad_norm_before") & (rows["seed"] == seeds[0])]
        grads = grads.assign(l=grads["layer"].astype(int)).sort_values("l")["value"].tolist()
        summary[name] = {
            "verdict": configuration_verdict(late),
            "late_costs": [c if math.isfinite(c) else None for c in late],
            "seed_verdicts": [classify_late_cost(c) for c in late],
            "test_accuracy": finite_mean(rows[rows["metric"] == "test_accuracy"]["value"]),
            "initial_cost": [c[0] if c else None for c in curves],
            "grad_norms_before_seed0": grads,
            "handbook_verdict": PUBLISHED[name][0],
        }
    return summary
