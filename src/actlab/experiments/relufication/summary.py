"""The ``relufication`` summary: per model and phase, mean ± sd over seeds of each metric."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from actlab.analysis import failed_units, mean_and_sd, seeds_in
from actlab.recipes.image_classifier import data_label

if TYPE_CHECKING:
    from actlab.experiments.relufication import ReluficationConfig

PHASES = ("before", "swapped", "after")  # the table's ``layer`` column
METRICS = ("accuracy", "neg_frac", "sparsity")


def model_entry(df: pd.DataFrame) -> dict[str, Any]:
    """``{phase_metric: mean, phase_metric_sd: sd}`` of one model's rows, and the accuracy drop."""
    entry: dict[str, Any] = {}
    for phase in PHASES:
        for metric in METRICS:
            v = df[(df["layer"] == phase) & (df["metric"] == metric)]["value"]
            entry[f"{phase}_{metric}"], entry[f"{phase}_{metric}_sd"] = mean_and_sd(v)
    if entry["before_accuracy"] is not None and entry["after_accuracy"] is not None:
        entry["accuracy_drop_pp"] = 100 * (entry["before_accuracy"] - entry["after_accuracy"])
    return entry


def build_summary(config: ReluficationConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary.json``: the scale, failed units and each model's :func:`model_entry`."""
    models = {str(model): model_entry(df) for model, df in table.groupby("run")}
    return {"scale": {"steps": config.steps, "finetune_epochs": config.finetune_epochs,
                      "seeds": seeds_in(table),
                      "data": data_label(config)},
            "failed_or_diverged": failed_units(results),
            "models": models}
