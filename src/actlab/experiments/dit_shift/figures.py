"""The ``dit-shift`` figures: sample grids, FID over training, residuals, hidden-state means."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from actlab.experiments.dit_common import (
    DIGITS_NETWORK,
    draw_fid_curves,
    draw_hidden_means,
    draw_residuals,
    draw_sample_grids,
    feature_network,
    model_depth,
)
from actlab.experiments.dit_shift.summary import CONDITIONS, PREFIX
from actlab.runner.experiment import RunContext

if TYPE_CHECKING:
    from actlab.experiments.dit_shift import DiTShiftConfig


def draw_figures(
    config: DiTShiftConfig, table: pd.DataFrame, results: list[dict[str, Any]], ctx: RunContext
) -> None:
    """``samples``, ``fid``, ``loss_residuals`` and ``hidden_means``."""
    if table.empty:
        return
    runs = [f"{PREFIX}/{c}" for c in CONDITIONS]
    network = feature_network(config) or DIGITS_NETWORK  # every figure names its network
    draw_sample_grids(results, runs, ctx)
    draw_fid_curves(table, runs, ctx, network=network)
    draw_residuals(table, runs, f"{PREFIX}/unshifted", ctx, network=network)
    draw_hidden_means(table, runs, model_depth(config), ctx)
