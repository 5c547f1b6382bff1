"""Top-K and weight drift ("Bug or Feature²" App. B.1.1, Fig. 8): the model ``random-mlp``.

"Figure 8 shows gradient mean and weight mean trajectories for a three-layer MLP with GELU
activations trained under varying levels of Top-K sparsity on random data": as K grows the
positive gradient bias and the negative drift grow, and "at K=0.10 ... the gradient mean
collapses toward zero across all layers and weight means remain nearly flat".

Ours where the text is silent: "three-layer" read as App. D.2 names its MLP "5-layer" for 5
repeated blocks, i.e. three ``Linear(d, d) -> GELU`` blocks after the input projection
(:class:`~actlab.recipes.drift_mlp.DriftMLP` ``depth=3``); App. D.2's random-data setting
otherwise (N(0, 1) pairs, d = 128, half squared error, SGD lr 0.01, batch 128, He init,
5 epochs of the 12,800 pairs of the ``drift`` experiment: 500 steps); the levels K
(``topk_drift_levels``) beside plain GELU (level 1, nothing dropped). Every level of a seed
starts from the same weights and batches, so levels pair by seed.

The measures: the pre-activation gradient mean of every activation site averaged over the
training records (per site and over sites), and the mean-weight shift of the hidden layers
2..``depth + 1`` (:func:`~actlab.recipes.drift_mlp.describe_drift`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

MODEL = "random-mlp"
METHOD = "topk-drift"
DEPTH, WIDTH, IN_DIM, OUT_DIM, N_PAIRS = 3, 128, 128, 10, 12800
PLAIN = 1.0  # the level of plain GELU (every activation kept)


def run_name(level: float) -> str:
    """The tidy table's run of one level."""
    return f"{MODEL}/{METHOD}/{level:g}"


def spec(level: float) -> str:
    """The activation of a level: GELU keeping the ``level`` largest share, or plain GELU."""
    return "gelu" if level >= PLAIN else f"gelu:topk={level:g}"


def drift_units(levels: list[float]) -> list[dict[str, Any]]:
    """One unit per level, plain GELU first."""
    return [{"model": MODEL, "method": METHOD, "level": level}
            for level in [PLAIN, *sorted(levels, reverse=True)]]


def run_drift_unit(level: float, steps: int, seeds: list[int], progress: Any = None) -> Any:
    """Train the level's MLP once per seed; rows of :meth:`DriftRecord.rows` under its run."""
    from actlab.data.random_pairs import random_pairs
    from actlab.recipes.drift_mlp import DriftMLP, train_drift_mlp
    from actlab.runner.experiment import UnitResult
    from actlab.train.settings import TrainSettings
    from actlab.train.supervised import torch_threads

    result = UnitResult()
    settings = TrainSettings(optimizer="sgd", lr=0.01, steps=steps, batch_size=128,
                             loss="half_sse")
    model = DriftMLP(in_dim=IN_DIM, out_dim=OUT_DIM, hidden=WIDTH, depth=DEPTH,
                     activation=spec(level), init="he")
    with torch_threads(1):
        for seed in seeds:
            x, y = random_pairs(N_PAIRS, IN_DIM, OUT_DIM, seed=seed)
            x_eval, _ = random_pairs(2048, IN_DIM, OUT_DIM, seed=seed + 100_000)
            record = train_drift_mlp(x, y, model, settings, seed=seed,
                                     record_every=max(1, steps // 10), x_eval=x_eval,
                                     progress=progress)
            for step, layer, metric, value in record.rows():
                result.add(run_name(level), seed, step, layer, metric, value)
            if record.status != "ok":
                result.status = record.status
    return result


def drift_summary(table: pd.DataFrame) -> dict[str, Any] | None:
    """Per level (seed means): the gradient mean over training per site and over sites, the
    hidden layers' mean-weight shift, the final loss and the eval sparsity; ``None`` without
    rows of the model."""
    from actlab.analysis import layer_number
    from actlab.recipes.drift_mlp import describe_drift

    rows = table[table["run"].astype(str).str.startswith(f"{MODEL}/")]
    if rows.empty:
        return None
    levels: dict[str, Any] = {}
    for run, df in rows.groupby("run"):
        level = float(str(run).split("/")[-1])
        d = describe_drift(df, DEPTH + 1)
        grads = df[(df["metric"] == "preact_grad_mean")
                   & df["layer"].map(lambda name: 1 <= layer_number(name) <= DEPTH + 1)]
        per_site = {str(k): float(v) for k, v in grads.groupby("layer")["value"].mean().items()}
        levels[f"{level:g}"] = {
            "level": level, "grad_mean": _number(d.get("preact_grad_mean_over_training")),
            "grad_mean_per_site": dict(sorted(per_site.items(), key=lambda kv: layer_number(kv[0]))),
            "mean_shift": _number(d.get("mean_shift_later_layers")),
            "final_loss": _number(d.get("final_loss")),
            "sparsity": _number(d.get("final_sparsity")), "seeds": int(df["seed"].nunique())}
    order = sorted(levels, key=lambda k: levels[k]["level"])
    return {"levels": {k: levels[k] for k in order}, "depth": DEPTH, "width": WIDTH}


def _number(value: Any) -> float:
    return float(value) if value is not None and np.isfinite(value) else math.nan


def drift_workloads(level: float, steps: int) -> list:
    """What one seed of a level trains (``actlab plan``): the MLP and two passes over the
    held-out set; the probe's forward passes are not priced."""
    from torch import empty

    from actlab.runner.cost import Workload

    def build() -> Any:
        from actlab.nn.mlp import MLP

        return MLP(IN_DIM, OUT_DIM, hidden=WIDTH, depth=DEPTH, activation=spec(level))

    return [Workload(f"mlp {IN_DIM}-{WIDTH}x{DEPTH} ({spec(level)})", build,
                     lambda n: (empty(n, IN_DIM),), steps, 128, "sgd", eval_samples=2 * 2048,
                     sample="example")]
