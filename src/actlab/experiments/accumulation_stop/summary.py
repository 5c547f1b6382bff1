"""The ``accumulation-stop`` summary: per model and norm, steps/s, ratio to LayerNorm, accuracy."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from actlab.analysis import failed_units, seeds_in
from actlab.recipes.image_classifier import data_label

if TYPE_CHECKING:
    from actlab.experiments.accumulation_stop import AccumulationStopConfig

RATE_KEYS = ("steps_per_s", "steps_per_s_warmup", "steps_per_s_noise", "accuracy",
             "stat_computations", "weight_mean_shift", "norm_input_mean_shift",
             "centred_negative_share")


def ratio_noise(entry: dict[str, float], base: dict[str, float]) -> float:
    """Relative noise of a steps/s ratio: its two rates' noises (within runs, or between
    seeds where larger) added in quadrature."""
    return math.hypot(max(entry.get("steps_per_s_noise", 0.0), entry.get("seed_spread", 0.0)),
                      max(base.get("steps_per_s_noise", 0.0), base.get("seed_spread", 0.0)))


def model_entry(table: pd.DataFrame, model: str, norms: list[str]) -> dict[str, Any]:
    """``{norm: seed means of the rates and accuracy, ratio to LayerNorm and its noise}``."""
    entry: dict[str, Any] = {}
    for norm in norms:
        df = table[table["run"] == f"{model}/{norm}"]
        values = df.groupby("metric")["value"].mean()
        if "steps_per_s" not in values:
            continue
        entry[norm] = {k: float(values[k]) for k in RATE_KEYS if k in values}
        rates = df[df["metric"] == "steps_per_s"]["value"]
        if len(rates) > 1:
            entry[norm]["seed_spread"] = float(rates.std() / rates.mean())
    base = entry.get("layernorm")
    for e in entry.values():
        if base and base.get("steps_per_s"):
            e["ratio_to_layernorm"] = e["steps_per_s"] / base["steps_per_s"]
            e["ratio_noise"] = e["ratio_to_layernorm"] * ratio_noise(e, base)
    return entry


def build_summary(config: AccumulationStopConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary.json``: the scale, failed units and each model's :func:`model_entry`."""
    models = {model: model_entry(table, model, config.norms) for model in config.models}
    return {"scale": {"steps": config.steps, "warmup": config.warmup, "q": config.q,
                      "seeds": seeds_in(table),
                      "data": data_label(config),
                      "clock": "thread CPU time, 1 thread"},
            "failed_or_diverged": failed_units(results),
            "models": models}
