"""The ``sparse-activations`` summary: setup -> activation -> mean and sd over seeds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from actlab.analysis import failed_units, mean_and_sd, seeds_in
from actlab.recipes.image_classifier import data_label

if TYPE_CHECKING:
    from actlab.experiments.sparse_activations import SparseActivationsConfig

CLASSIFIER_METRICS = ("accuracy", "neg_frac", "sparsity")
# the GPT cells: test_loss; linear_neg_frac: the classifiers' linear outputs (App. D.1)
METRICS = ("accuracy", "test_loss", "neg_frac", "sparsity", "linear_neg_frac")


def build_summary(config: SparseActivationsConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary.json``: the scale, failed units, the table of cells and its text form."""
    cells: dict[str, dict[str, Any]] = {}
    for setup in config.setups:
        for act in config.activations:
            df = table[table["run"] == f"{setup}/{act}"]
            cell: dict[str, Any] = {"seeds": int(df["seed"].nunique())}
            for metric in METRICS:
                values = df[df["metric"] == metric]["value"]
                cell[f"{metric}_mean"], cell[f"{metric}_sd"] = mean_and_sd(values)
            diverged = df[(df["metric"] == "train_loss") & df["value"].isna()]
            cell["diverged_seeds"] = int(len(diverged))
            cells.setdefault(setup, {})[act] = cell
    return {
        "scale": {"steps": config.steps, "seeds": seeds_in(table),
                  "data": data_label(config), "setups": config.setups},
        "failed_or_diverged": failed_units(results),
        "table": cells,
        "table_text": format_table(cells, config.activations),
    }


def format_table(cells: dict[str, Any], activations: list[str]) -> list[str]:
    """Rows ``setup | act: acc (the GPT: loss) / neg / sparsity`` as text (means ± sd)."""
    lines = []
    for setup, row in cells.items():
        parts = []
        for act in activations:
            c = row[act]

            def fmt(metric: str, c: dict = c) -> str:
                m, s = c[f"{metric}_mean"], c[f"{metric}_sd"]
                if m is None:
                    return "n/a"
                return f"{m:.3f}" + (f"±{s:.3f}" if s is not None else "")

            quality = "test_loss" if c["accuracy_mean"] is None else "accuracy"
            parts.append(f"{act}: {fmt(quality)} / {fmt('neg_frac')} / {fmt('sparsity')}")
        lines.append(f"{setup} | " + " | ".join(parts))
    return lines
