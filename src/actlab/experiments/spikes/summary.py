"""The ``spikes`` summary: per activation, val loss and the down-projection input ranges; over
the base runs, the spike layers against the rest (App. B.3.1); the same per norm and at the
depth arm's shape when those arms ran (:mod:`actlab.experiments.spikes.arms`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.analysis import mean_or_nan, sd_or_nan
from actlab.experiments.spikes.arms import depth_name, norm_arms, norm_run, run_name
from actlab.experiments.spikes.measures import WEIGHT_KINDS

if TYPE_CHECKING:
    from actlab.experiments.spikes import SpikesConfig


def build_summary(config: SpikesConfig, table: Any, results: list[dict]) -> dict:
    """Per activation: val loss mean/sd, per-layer max (over seeds) and mean range, sparsity;
    the spike layers of the base runs against the rest; and, when those arms ran, the same per
    activation under each normalisation (``norms``) and at the depth arm's shape (``depth``)."""
    summary: dict = {"scale": (f"{config.n_layer} layers, d={config.n_embd}, context "
                               f"{config.block_size}, batch {config.batch_size}, "
                               f"{config.steps} steps on {config.data}"), "activations": {}}
    failed = _failed_runs(config, results)
    for spec in config.activations:
        summary["activations"][spec] = arm_summary(table, spec, failed.get(spec, 0))
    summary["spike_layers"] = spike_layer_statistics(table[table.run.isin(config.activations)])
    if norm_arms(config):
        summary["norms"] = {
            "base": config.norm,
            "arms": {norm: {spec: arm_summary(table, run, failed.get(run, 0))
                            for spec in config.norm_activations
                            for run in [norm_run(config, norm, spec)]}
                     for norm in norm_arms(config)}}
    if config.depth_layers:
        prefix = depth_name(config.depth_layers, config.depth_width)
        runs = {spec: f"{prefix}/{spec}" for spec in config.depth_activations}
        summary["depth"] = {
            "n_layer": config.depth_layers, "n_embd": config.depth_width, "name": prefix,
            "base_n_layer": config.n_layer,
            "activations": {spec: arm_summary(table, run, failed.get(run, 0))
                            for spec, run in runs.items()},
            "spike_layers": spike_layer_statistics(table[table.run.isin(list(runs.values()))])}
    return summary


def _failed_runs(config: SpikesConfig, results: list[dict]) -> dict[str, int]:
    """Run name -> the number of its units that did not finish ok."""
    counts: dict[str, int] = {}
    for r in results:
        if r["status"] != "ok":
            run = run_name(config, r["unit"])
            counts[run] = counts.get(run, 0) + 1
    return counts


def arm_summary(table: Any, run: str, failed_runs: int) -> dict:
    """One run name's numbers: final val loss over seeds; per layer the largest (over seeds)
    and mean down-projection input range, sparsity, input extremes and weight std; the
    largest range per seed, its mean, and the block that holds it (0-based, mean over seeds);
    the up-projection input's largest range (max - min over a layer) per seed, its mean."""
    rows = table[table.run == run]
    final = rows[rows.metric == "val_loss"].sort_values("step").groupby("seed").value.last()
    ranges = rows[rows.metric == "act_range"]
    per_layer = ranges.groupby("layer").value
    per_seed = ranges.groupby("seed").value.max()
    blocks = {str(seed): float(int(group.set_index("layer").value.idxmax()))
              for seed, group in ranges.groupby("seed")}
    up = {str(seed): _up_range(group) for seed, group in rows.groupby("seed")}
    up = {seed: value for seed, value in up.items() if np.isfinite(value)}
    return {
        "val_loss": {"mean": mean_or_nan(final.tolist()), "sd": sd_or_nan(final.tolist()),
                     "per_seed": {str(k): float(v) for k, v in final.items()}},
        "max_range": {k: float(v) for k, v in per_layer.max().items()},
        "range_mean": {k: float(v) for k, v in per_layer.mean().items()},
        "sparsity": _per_layer_mean(rows, "sparsity"),
        "largest_range": float(ranges.value.max()) if len(ranges) else float("nan"),
        "largest_range_per_seed": {str(k): float(v) for k, v in per_seed.items()},
        "largest_range_mean": mean_or_nan(per_seed.tolist()),
        "spike_block": mean_or_nan(list(blocks.values())),
        "spike_block_per_seed": blocks,
        "n_layer": int(ranges.layer.astype(int).max()) + 1 if len(ranges) else 0,
        "up_in_range_mean": mean_or_nan(list(up.values())),
        "up_in_range_per_seed": up,
        "inputs": {metric: _per_layer_mean(rows, source) for metric, source in INPUTS.items()},
        "weight_std": {kind: _per_layer_mean(rows, f"w_std_{kind}") for kind in WEIGHT_KINDS},
        "failed_runs": failed_runs,
    }


def _up_range(rows: Any) -> float:
    """The largest ``up_in_max - up_in_min`` over the layers of one seed's rows (NaN if none)."""
    value = rows[rows.metric.isin(("up_in_max", "up_in_min"))].pivot_table(
        index="layer", columns="metric", values="value", aggfunc="first")
    if value.empty or not {"up_in_max", "up_in_min"} <= set(value.columns):
        return float("nan")
    return float((value["up_in_max"] - value["up_in_min"]).max())


# the summary's names of the inputs (Table 8) -> the unit rows' metrics
INPUTS = {"down_in_max": "act_max", "down_in_min": "act_min", "up_in_max": "up_in_max",
          "up_in_min": "up_in_min", "attn_in_max": "attn_in_max", "attn_in_min": "attn_in_min"}


def _per_layer_mean(rows: Any, metric: str) -> dict[str, float]:
    """Mean over seeds of ``metric`` per layer."""
    return {k: float(v) for k, v in rows[rows.metric == metric].groupby("layer").value.mean().items()}


def _absmax(value: Any, layer: str, kind: str) -> float:
    """Largest |entry| of the ``kind`` weight matrix of ``layer`` (from its max and min)."""
    return max(abs(float(value[(layer, f"w_max_{kind}")])),
               abs(float(value[(layer, f"w_min_{kind}")])))


def spike_layer_statistics(table: Any) -> dict:
    """App. B.3.1's comparison of spike layers with the rest, averaged over every run.

    A run's *spike layer* is its layer with the largest down-projection input range (the
    paper's spike layers are L1-L4 of 12; ours, with a few layers, is the single largest). Per
    run: the inputs' extremes at that layer (Table 8), the largest |weight| of the
    down-projection there and in the other layers, and the weight standard deviation per
    layer type there and averaged over the other layers (Table 7). Returns the means over runs.
    """
    per_run: list[dict[str, float]] = []
    for (_run, _seed), rows in table.groupby(["run", "seed"]):
        ranges = rows[rows.metric == "act_range"].set_index("layer").value
        if not len(ranges):
            continue
        spike = str(ranges.idxmax())
        value = rows.set_index(["layer", "metric"]).value
        others = [layer for layer in ranges.index if layer != spike]
        if not others or ("0", "w_max_down") not in value.index:
            continue
        record = {name: float(value[(spike, source)]) for name, source in INPUTS.items()}

        for kind in WEIGHT_KINDS:
            record[f"w_absmax_{kind}_spike"] = _absmax(value, spike, kind)
            record[f"w_absmax_{kind}_others"] = max(_absmax(value, layer, kind) for layer in others)
            record[f"w_std_{kind}_spike"] = float(value[(spike, f"w_std_{kind}")])
            record[f"w_std_{kind}_others"] = float(np.mean(
                [float(value[(layer, f"w_std_{kind}")]) for layer in others]))
        per_run.append(record)
    if not per_run:
        return {"runs": 0}
    return {"runs": len(per_run),
            **{key: float(np.mean([r[key] for r in per_run])) for key in per_run[0]}}
