"""The ``lm-drift`` summary: per arm (norm/optimizer/activation), each trajectory's start and
end."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.analysis import mean_or_nan

if TYPE_CHECKING:
    from actlab.experiments.lm_drift import LMDriftConfig

TRAJECTORIES = ("w_mean", "z_score", "mean_drift_share", "down_w_mean", "down_z_score",
                "down_mean_drift_share", "b_mean", "w_mean_part", "preact_mean",
                "preact_neg_frac", "sparsity")


def build_summary(config: LMDriftConfig, table: Any, results: list[dict]) -> dict:
    """Per arm: for each trajectory its mean over blocks and seeds at step 0 and at the last
    recorded step, their change, the mean pre-activation's column part and the final
    validation loss."""
    arms: dict[str, dict] = {}
    for run in sorted(table.run.unique()):
        rows = table[table.run == run]
        arm: dict[str, Any] = {"seeds": int(rows.seed.nunique())}
        for metric in TRAJECTORIES:
            m = rows[rows.metric == metric]
            if not len(m):
                continue
            first, last = m.step.min(), m.groupby("seed").step.max().min()
            start = float(m[m.step == first].value.mean())
            end = float(m[m.step == last].value.mean())
            arm[metric] = {"start": start, "end": end, "change": end - start}
        if all(k in arm for k in ("preact_mean", "b_mean", "w_mean_part")):
            # what the bias and the uniform weight mean leave of the mean pre-activation: the
            # column means' alignment with the input's per-feature means (sum_k (c_k - w) E h_k)
            arm["column_part"] = {key: arm["preact_mean"][key] - arm["b_mean"][key]
                                  - arm["w_mean_part"][key] for key in ("start", "end", "change")}
        loss = rows[rows.metric == "val_loss"].sort_values("step").groupby("seed").value.last()
        arm["val_loss"] = mean_or_nan(loss.tolist())
        arms[run] = arm
    failed = [r["unit"] for r in results if r["status"] != "ok"]
    return {"scale": (f"{config.n_layer} layers, d={config.n_embd}, context {config.block_size}, "
                      f"batch {config.batch_size}, {config.steps} steps on {config.data}"),
            "arms": arms, "failed_units": failed,
            "activations": list(config.activations), "norms": list(config.norms),
            "finite": bool(all(np.isfinite(a.get("val_loss", np.nan)) for a in arms.values()))}
