"""The ``dit-shift`` summary: per condition FID / IS / loss at the end and the hidden-state
overshoot; paired residuals (shifted − unshifted) at every checkpoint with their seed spread,
reduced to the numbers the claims judge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from actlab import analysis
from actlab.recipes.dit_protocol import (
    FID,
    condition_summary,
    model_depth,
    paired,
    scale_summary,
    spread_numbers,
)

if TYPE_CHECKING:
    from actlab.experiments.dit_shift import DiTShiftConfig

PREFIX = "dit"  # runs are dit/<condition>
CONDITIONS = ("unshifted", "shifted")
# "Comparable" training loss, ours, fixed before any run: the shifted loss may exceed the
# unshifted one by at most 2% of it at a checkpoint.
LOSS_TOLERANCE = 0.02


def _run(condition: str) -> str:
    return f"{PREFIX}/{condition}"


def overshoot_difference(table: pd.DataFrame, block: str) -> pd.DataFrame:
    """Per seed, shifted − unshifted overshoot of the hidden-state mean after ``block``, as a
    one-row frame of :func:`~actlab.recipes.dit_protocol.paired` shape."""
    u = analysis.curves(table, _run("unshifted"), "hidden_mean", block)
    s = analysis.curves(table, _run("shifted"), "hidden_mean", block)
    if u.empty or s.empty:
        return pd.DataFrame(columns=["mean", "sd", "n"])
    diff = (analysis.overshoot(s) - analysis.overshoot(u)).dropna()
    return pd.DataFrame(
        {"mean": [diff.mean()], "sd": [diff.std(ddof=1)], "n": [diff.count()]}, index=[0]
    )


def build_summary(
    config: DiTShiftConfig, table: pd.DataFrame, results: list[dict[str, Any]]
) -> dict[str, Any]:
    """``summary.json``: scale, per-condition entries and the claims' spread numbers."""
    depth = model_depth(config)
    summary: dict[str, Any] = {
        "scale": scale_summary(config, table),
        "failed_units": analysis.failed_units(results),
        "loss_tolerance": LOSS_TOLERANCE,
    }
    for condition in CONDITIONS:
        summary[condition] = condition_summary(table, _run(condition), depth)
    if table.empty:
        return summary
    loss = paired(table, _run("shifted"), _run("unshifted"), "train_loss")
    base = analysis.curves(table, _run("unshifted"), "train_loss").mean(axis=1)
    trained = [s for s in config.log_steps() if s > 0]
    summary["train_loss"] = spread_numbers(loss, trained, LOSS_TOLERANCE * base)
    summary["train_loss_residual"] = {
        int(s): analysis.finite_or_none(v) for s, v in loss["mean"].items()
    }
    fid = paired(table, _run("shifted"), _run("unshifted"), FID)
    summary["fid"] = spread_numbers(fid, config.eval_steps())
    summary["fid_residual"] = {int(s): analysis.finite_or_none(v) for s, v in fid["mean"].items()}
    last = f"block{depth - 1}"
    summary["overshoot"] = {
        **spread_numbers(overshoot_difference(table, last)),
        "block": last,
        "shifted": summary["shifted"]["overshoot_per_block"].get(last),
        "unshifted": summary["unshifted"]["overshoot_per_block"].get(last),
        "step_shifted": summary["shifted"]["overshoot_step_per_block"].get(last),
        "step_unshifted": summary["unshifted"]["overshoot_step_per_block"].get(last),
    }
    return summary
