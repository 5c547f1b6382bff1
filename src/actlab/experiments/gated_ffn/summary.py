"""The ``gated-ffn`` summary: per-variant costs and quality, and the pre-registered selection."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.analysis import mean_or_nan, sd_or_nan
from actlab.experiments.gated_ffn.claims import mean_val_loss
from actlab.nn.ffn import GATE_KINDS

if TYPE_CHECKING:
    from actlab.experiments.gated_ffn import GatedFFNConfig


def ffn_fields(variant: str) -> dict[str, str]:
    """GPTConfig fields of a variant: a gated kind, or a plain FFN's activation spec."""
    return {"ffn": variant} if variant in GATE_KINDS else {"ffn": "plain", "activation": variant}


def build_summary(config: GatedFFNConfig, table: Any, results: list[dict]) -> dict:
    """``summary.json``: scale, thresholds, every variant's numbers and the selection."""
    variants = {variant: variant_summary(table, results, variant)
                for variant in config.variants}
    selection = select(variants, config)
    return {"dtype": config.dtype,
            "scale": (f"{config.n_layer} layers, d={config.n_embd}, context "
                      f"{config.block_size}, batch {config.batch_size}, {config.steps} "
                      f"steps on {config.data}; plain width {round(config.mlp_ratio * config.n_embd)}"),
            "thresholds": {"min_speed_ratio": config.min_speed_ratio,
                           "max_memory_ratio": config.max_memory_ratio,
                           "quality_margin": config.quality_margin,
                           "baseline": config.baseline},
            "variants": variants, **selection}


def variant_summary(table: Any, results: list[dict], variant: str) -> dict:
    """Widths, parameters, FLOPs, peak memory, median tokens/s and val loss of ``variant``."""
    rows = table[table.run == variant]

    def first(metric: str) -> float:
        values = rows[rows.metric == metric].value
        return float(values.iloc[0]) if len(values) else float("nan")

    def count(metric: str) -> int | None:
        return int(first(metric)) if np.isfinite(first(metric)) else None

    val = rows[rows.metric == "val_loss"].sort_values("step").groupby("seed").value.last()
    finite = [v for v in val.tolist() if np.isfinite(v)]
    unit_status = [r["status"] for r in results if r["unit"].get("variant") == variant]
    failed = sum(s != "ok" for s in unit_status) + (len(val) - len(finite))
    speed = rows[rows.metric == "tokens_per_s"].value
    return {
        **ffn_fields(variant),
        "hidden_width": count("hidden_width"),
        "params": count("params"),
        "ffn_params": count("ffn_params"),
        "flops_per_token": first("flops_per_token"),
        "ffn_flops_per_token": first("ffn_flops_per_token"),
        "peak_memory_mb": float(rows[rows.metric == "peak_bytes"].value.max() / 2**20),
        "tokens_per_s": float(speed.median()) if len(speed) else float("nan"),
        "val_loss": {"mean": mean_or_nan(finite), "sd": sd_or_nan(finite), "n": len(finite)},
        "failed_runs": int(failed),
    }


def select(variants: dict[str, dict], config: GatedFFNConfig) -> dict:
    """The selection rule: adds speed/memory ratios and eligibility to each variant (in
    place) and returns the eligible ones, the best of them and whether it replaces the
    baseline."""
    base = variants[config.baseline]
    eligible = []
    for name, s in variants.items():
        s["speed_ratio"] = s["tokens_per_s"] / base["tokens_per_s"]
        s["memory_ratio"] = s["peak_memory_mb"] / base["peak_memory_mb"]
        s["eligible"] = bool(s["failed_runs"] == 0 and s["val_loss"]["n"] > 0
                             and s["speed_ratio"] >= config.min_speed_ratio
                             and s["memory_ratio"] <= config.max_memory_ratio)
        if s["eligible"]:
            eligible.append(name)
    best = min(eligible, key=lambda k: mean_val_loss(variants[k])) if eligible else None
    replaces = False
    if best is not None and best != config.baseline:
        spread = max(nan_to_zero(variants[best]["val_loss"]["sd"]), nan_to_zero(base["val_loss"]["sd"]))
        replaces = mean_val_loss(base) - mean_val_loss(variants[best]) > config.quality_margin + spread
    return {"eligible": eligible, "best_eligible": best,
            "selected": best if replaces else config.baseline, "baseline_replaced": replaces}


def nan_to_zero(x: float) -> float:
    """``x``, or 0 where it is not finite (a missing sd)."""
    return 0.0 if not np.isfinite(x) else x
