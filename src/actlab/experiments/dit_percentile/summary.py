"""The ``dit-percentile`` summary: per condition the final FID / IS / detail and steps/s;
paired differences to LayerNorm (and ReLU) per seed, averaged over the seeds (the runner
judges the claims again on every seed's own summary); speed ratios to LayerNorm with the
clock's noise."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from actlab import analysis
from actlab.experiments.dit_common import (
    condition_summary,
    model_depth,
    quality_metrics,
    scale_summary,
)

if TYPE_CHECKING:
    from actlab.experiments.dit_percentile import DiTPercentileConfig

PREFIX = "dit"
NORM_CONDITIONS = ("layernorm", "percentile", "percentile-frozen")
RATE_KEYS = ("steps_per_s", "steps_per_s_noise", "steps_per_s_warmup", "steps_per_s_warmup_noise")


def topk_condition(level: float) -> str:
    """``gelu-topk-0.1`` for K = 0.1."""
    return f"gelu-topk-{float(level):g}"


def conditions(config: DiTPercentileConfig) -> list[str]:
    """The conditions run: the three norms, then (with sparsity variants) ReLU and Top-K."""
    out = list(NORM_CONDITIONS)
    if config.sparsity_variants:
        out += ["relu", *(topk_condition(k) for k in config.topk_levels)]
    return out


def _run(condition: str) -> str:
    return f"{PREFIX}/{condition}"


def final_difference(
    table: pd.DataFrame, a: str, b: str, metric: str, relative: bool = False
) -> pd.Series:
    """Per seed, ``a − b`` of ``metric`` at the last checkpoint (relative to ``b`` if asked)."""
    ca, cb = analysis.curves(table, _run(a), metric), analysis.curves(table, _run(b), metric)
    if ca.empty or cb.empty:
        return pd.Series(dtype=float)
    last = ca.index.intersection(cb.index).max()
    diff = ca.loc[last] - cb.loc[last]
    return (diff / cb.loc[last] if relative else diff).dropna()


def seed_mean(diff: pd.Series) -> dict[str, Any]:
    """Mean and sd (``None`` below two seeds) of per-seed differences, and their count."""
    mean, sd = analysis.mean_and_sd(diff)
    return {"mean": mean, "sd": sd, "seeds": int(diff.count())}


def speed(table: pd.DataFrame, condition: str) -> dict[str, float]:
    """Seed means of the rates and their noise, and the relative seed spread of each rate."""
    rows = table[table["run"] == _run(condition)]
    out = {}
    for key in RATE_KEYS:
        values = rows[rows["metric"] == key]["value"]
        if len(values):
            out[key] = float(values.mean())
            if not key.endswith("noise") and len(values) > 1:
                out[f"{key}_seed_spread"] = float(values.std() / values.mean())
    return out


def ratio(entry: dict[str, float], base: dict[str, float], key: str) -> dict[str, float]:
    """``entry[key] / base[key]`` and its relative noise in quadrature (within-run noise or the
    seed spread, whichever is larger, of each rate), times the ratio."""
    if key not in entry or key not in base or not base[key]:
        return {"ratio": math.nan, "noise": math.nan}
    r = entry[key] / base[key]

    def noise(e: dict[str, float]) -> float:
        return max(e.get(f"{key}_noise", 0.0), e.get(f"{key}_seed_spread", 0.0))

    return {"ratio": r, "noise": r * math.hypot(noise(entry), noise(base))}


def build_summary(
    config: DiTPercentileConfig, table: pd.DataFrame, results: list[dict[str, Any]]
) -> dict[str, Any]:
    """``summary.json``: scale, per-condition entries and the claims' numbers."""
    depth = model_depth(config)
    summary: dict[str, Any] = {
        "scale": {
            **scale_summary(config, table),
            "q": config.q,
            "percentile_stats": config.percentile_stats,
            "statistics_momentum": config.momentum,
            "bias": config.bias,
            "clock": "engine step clock (thread CPU time on the CPU)",
        },
        "failed_units": analysis.failed_units(results),
        "freeze_tolerance": config.freeze_tolerance,
        "conditions": {},
    }
    for condition in conditions(config):
        summary["conditions"][condition] = {
            **condition_summary(table, _run(condition), depth, quality_metrics(config)),
            **speed(table, condition),
        }
    if table.empty:
        return summary
    fid, inception_score = quality_metrics(config)  # named by their feature network
    # FID: lower is better, relative to LayerNorm's (above 0: Percentile LN is worse)
    summary["fid_vs_layernorm"] = seed_mean(
        final_difference(table, "percentile", "layernorm", fid, relative=True)
    )
    # IS: higher is better, so (LayerNorm − Percentile) / LayerNorm (above 0: Percentile LN
    # scores lower, i.e. worse)
    summary["is_vs_layernorm"] = seed_mean(
        final_difference(table, "layernorm", "percentile", inception_score, relative=True)
    )
    summary["frozen_fid_vs_layernorm"] = seed_mean(
        final_difference(table, "percentile-frozen", "layernorm", fid, relative=True)
    )
    entries = summary["conditions"]
    base = entries.get("layernorm", {})
    frozen = entries.get("percentile-frozen", {})
    summary["speed"] = {
        "warmup": ratio(frozen, base, "steps_per_s_warmup"),
        "after": ratio(frozen, base, "steps_per_s"),
        "dynamic_after": ratio(entries.get("percentile", {}), base, "steps_per_s"),
    }
    if config.sparsity_variants and config.topk_levels:
        rows = {
            topk_condition(k): final_difference(table, "relu", topk_condition(k), "detail_ratio")
            for k in config.topk_levels
        }
        summary["detail_vs_relu"] = {
            # per K (in the config's order), ReLU − Top-K detail ratio: below 0, Top-K sharper
            "per_k": {c: seed_mean(diff)["mean"] for c, diff in rows.items()},
            "relu": entries.get("relu", {}).get("final_detail_ratio"),
            "topk": analysis.finite_mean(
                np.array(
                    [entries.get(c, {}).get("final_detail_ratio", np.nan) or np.nan for c in rows],
                    dtype=float,
                )
            ),
        }
    return summary
