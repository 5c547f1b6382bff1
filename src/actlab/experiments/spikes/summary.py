"""The ``spikes`` summary: per activation, val loss and the down-projection input ranges; over
all runs, the spike layers against the rest (App. B.3.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.analysis import mean_or_nan, sd_or_nan
from actlab.experiments.spikes.measures import WEIGHT_KINDS

if TYPE_CHECKING:
    from actlab.experiments.spikes import SpikesConfig


def build_summary(config: SpikesConfig, table: Any, results: list[dict]) -> dict:
    """Per activation: val loss mean/sd, per-layer max (over seeds) and mean range, sparsity."""
    summary: dict = {"scale": (f"{config.n_layer} layers, d={config.n_embd}, context "
                               f"{config.block_size}, batch {config.batch_size}, "
                               f"{config.steps} steps on {config.data}"), "activations": {}}
    for spec in config.activations:
        rows = table[table.run == spec]
        final = rows[rows.metric == "val_loss"].sort_values("step").groupby("seed").value.last()
        ranges = rows[rows.metric == "act_range"]
        per_layer = ranges.groupby("layer").value
        failed = [r for r in results if r["unit"].get("activation") == spec and r["status"] != "ok"]
        summary["activations"][spec] = {
            "val_loss": {"mean": mean_or_nan(final.tolist()), "sd": sd_or_nan(final.tolist()),
                         "per_seed": {str(k): float(v) for k, v in final.items()}},
            "max_range": {k: float(v) for k, v in per_layer.max().items()},
            "range_mean": {k: float(v) for k, v in per_layer.mean().items()},
            "sparsity": _per_layer_mean(rows, "sparsity"),
            "largest_range": float(ranges.value.max()) if len(ranges) else float("nan"),
            "largest_range_per_seed": {str(k): float(v) for k, v in
                                       ranges.groupby("seed").value.max().items()},
            "inputs": {metric: _per_layer_mean(rows, source) for metric, source in INPUTS.items()},
            "weight_std": {kind: _per_layer_mean(rows, f"w_std_{kind}") for kind in WEIGHT_KINDS},
            "failed_runs": len(failed),
        }
    summary["spike_layers"] = spike_layer_statistics(table)
    return summary


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
