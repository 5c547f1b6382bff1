"""The ``spikes`` summary: per activation, val loss and the down-projection input ranges."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actlab.analysis import mean_or_nan, sd_or_nan

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
        sparsity = rows[rows.metric == "sparsity"].groupby("layer").value.mean()
        failed = [r for r in results if r["unit"].get("activation") == spec and r["status"] != "ok"]
        summary["activations"][spec] = {
            "val_loss": {"mean": mean_or_nan(final.tolist()), "sd": sd_or_nan(final.tolist()),
                         "per_seed": {str(k): float(v) for k, v in final.items()}},
            "max_range": {k: float(v) for k, v in per_layer.max().items()},
            "range_mean": {k: float(v) for k, v in per_layer.mean().items()},
            "sparsity": {k: float(v) for k, v in sparsity.items()},
            "largest_range": float(ranges.value.max()) if len(ranges) else float("nan"),
            "failed_runs": len(failed),
        }
    return summary
