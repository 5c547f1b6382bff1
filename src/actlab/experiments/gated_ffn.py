"""``gated-ffn``: plain ReLU/GELU FFNs vs ReGLU/GEGLU/SwiGLU at matched parameters, under the
controlled-selection protocol of seed 002.

Protocol, fixed before any run (the config holds every choice and threshold):

1. same data split (stdlib corpus), initialisation family (GPT-2 normal), optimizer
   (AdamW, warmup + cosine), number of steps and stopping rule (fixed steps; a non-finite
   loss stops the run and counts as a failed run);
2. plain FFNs of width ``m = mlp_ratio * d``; gated FFNs of the parameter-matched width
   ``g = matched_width(d, m)`` (``2m/3`` without biases), so totals are equal;
3. reported per variant: hidden width, total and FFN parameters, FLOPs per token (model
   and FFN), peak training-step memory, tokens/s at ``dtype``;
4. several seeds (paired: same initialisation seed and batches), mean ± sd, failed runs;
5. throughput measured end to end (a full training step) at the chosen dtype;
6. thresholds set in advance: a variant is *eligible* if it had no failed run, runs at
   ``>= min_speed_ratio`` of the plain baseline's tokens/s and needs ``<= max_memory_ratio``
   of its memory; among eligible variants the one with the lowest mean loss is *selected*,
   but it replaces the baseline only if it beats the baseline by more than
   ``quality_margin`` plus the larger of the two seed sds.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from actlab.activations.spec import activation
from actlab.errors import ConfigError, config_check
from actlab.experiments._gated_ffn_claims import gated_ffn_claims, mean_val_loss
from actlab.experiments._lm_common import mean_or_nan, sd_or_nan, seeded_gpt, train_and_record
from actlab.nn.ffn import GATE_KINDS, ffn_flops_per_token
from actlab.plotting import pyplot
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.train.classify import torch_threads
from actlab.train.lm import LMScale, lm_batches
from actlab.train.loop import measure_step

VARIANTS = ["relu", "gelu", "reglu", "geglu", "swiglu"]


def _ffn_fields(variant: str) -> dict[str, str]:
    """GPTConfig fields of a variant: a gated kind, or a plain FFN's activation spec."""
    return {"ffn": variant} if variant in GATE_KINDS else {"ffn": "plain", "activation": variant}


@dataclass
class GatedFFNConfig(LMScale):
    """Tiny-GPT scale, the variants, the baseline and the selection thresholds."""

    variants: list[str] = field(default_factory=lambda: list(VARIANTS))
    baseline: str = "gelu"
    timing_repeats: int = 5
    min_speed_ratio: float = 0.75
    max_memory_ratio: float = 1.25
    quality_margin: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.variants:
            raise ConfigError("variants", "needs at least one variant")
        for variant in self.variants:
            config_check("variants", self.model_config, **_ffn_fields(variant))
            if variant not in GATE_KINDS:
                config_check("variants", activation, variant)
        if self.baseline not in self.variants:
            raise ConfigError("baseline", f"must be one of the variants {self.variants}, got "
                                          f"{self.baseline!r}")
        if self.timing_repeats < 1:
            raise ConfigError("timing_repeats", f"must be >= 1, got {self.timing_repeats}")
        if not 0 < self.min_speed_ratio <= 1:
            raise ConfigError("min_speed_ratio", f"must be in (0, 1], got {self.min_speed_ratio}")
        if self.max_memory_ratio < 1:
            raise ConfigError("max_memory_ratio", f"must be >= 1, got {self.max_memory_ratio}")
        if self.quality_margin < 0:
            raise ConfigError("quality_margin", f"must be >= 0, got {self.quality_margin}")


@register
class GatedFFNExperiment(Experiment):
    """Matched-parameter comparison of plain and gated FFNs with a pre-registered selection rule."""

    name = "gated-ffn"
    headline_figure = "gated_ffn"
    description = ("GPT with plain relu/gelu FFNs vs ReGLU/GEGLU/SwiGLU at matched parameters: "
                   "widths, params, FLOPs/token, peak memory, tokens/s, val loss (seed 002).")
    Config = GatedFFNConfig
    quick = {"compile_model": "off",
             "n_layer": 2, "n_embd": 64, "block_size": 64, "batch_size": 16, "steps": 250,
             "lr": 3e-3, "warmup": 25, "eval_every": 50, "eval_batches": 4, "timing_repeats": 3}
    default_seeds = 3
    seeds_per_unit = 1

    def units(self, config: GatedFFNConfig) -> list[dict]:
        """One unit per FFN variant."""
        return [{"variant": v} for v in config.variants]

    def run_unit(self, config: GatedFFNConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Cost measurements of the variant, then one training run per seed."""
        result = UnitResult()
        variant = unit["variant"]
        corpus = config.corpus()
        model_config = config.model_config(**_ffn_fields(variant))
        c = model_config
        with torch_threads(config.threads or None):
            for seed in seeds:
                model = seeded_gpt(model_config, seed, ctx)
                if seed == seeds[0]:
                    static = {
                        "hidden_width": c.hidden, "params": model.num_params(),
                        "ffn_params": model.ffn_params(), "flops_per_token": model.flops_per_token(),
                        "ffn_flops_per_token": c.n_layer * ffn_flops_per_token(
                            c.n_embd, c.hidden, gated=c.gated, bias=c.bias)}
                    for metric, value in static.items():
                        result.add(variant, seed, 0, "", metric, value)
                train_batch, _ = lm_batches(corpus, config.batch_size, config.block_size, seed)
                cost = measure_step(copy.deepcopy(model), train_batch(0), dtype=config.dtype,
                                    repeats=config.timing_repeats)
                result.add(variant, seed, 0, "", "tokens_per_s", cost["tokens_per_s"])
                result.add(variant, seed, 0, "", "peak_bytes", cost["peak_bytes"])
                train_and_record(config, model, corpus, seed, ctx, result, variant)
        return result

    def summarize(self, config: GatedFFNConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Per-variant costs and quality, the thresholds and the selection."""
        variants: dict[str, dict] = {}
        for variant in config.variants:
            rows = table[table.run == variant]

            def first(metric: str, rows=rows) -> float:
                values = rows[rows.metric == metric].value
                return float(values.iloc[0]) if len(values) else float("nan")

            val = rows[rows.metric == "val_loss"].sort_values("step").groupby("seed").value.last()
            finite = [v for v in val.tolist() if np.isfinite(v)]
            unit_status = [r["status"] for r in results if r["unit"].get("variant") == variant]
            failed = sum(s != "ok" for s in unit_status) + (len(val) - len(finite))
            speed = rows[rows.metric == "tokens_per_s"].value
            variants[variant] = {
                **_ffn_fields(variant),
                "hidden_width": int(first("hidden_width")) if np.isfinite(first("hidden_width")) else None,
                "params": int(first("params")) if np.isfinite(first("params")) else None,
                "ffn_params": int(first("ffn_params")) if np.isfinite(first("ffn_params")) else None,
                "flops_per_token": first("flops_per_token"),
                "ffn_flops_per_token": first("ffn_flops_per_token"),
                "peak_memory_mb": float(rows[rows.metric == "peak_bytes"].value.max() / 2**20),
                "tokens_per_s": float(speed.median()) if len(speed) else float("nan"),
                "val_loss": {"mean": mean_or_nan(finite), "sd": sd_or_nan(finite), "n": len(finite)},
                "failed_runs": int(failed),
            }
        selection = _select(variants, config)
        summary = {"dtype": config.dtype,
                   "scale": (f"{config.n_layer} layers, d={config.n_embd}, context "
                             f"{config.block_size}, batch {config.batch_size}, {config.steps} "
                             f"steps on {config.data}; plain width {round(config.mlp_ratio * config.n_embd)}"),
                   "thresholds": {"min_speed_ratio": config.min_speed_ratio,
                                  "max_memory_ratio": config.max_memory_ratio,
                                  "quality_margin": config.quality_margin,
                                  "baseline": config.baseline},
                   "variants": variants, **selection}
        _figure(summary, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Matched parameters and FLOPs, loss of gated vs plain, throughput, stability."""
        return gated_ffn_claims(summary)


def _select(variants: dict[str, dict], config: GatedFFNConfig) -> dict:
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
        spread = max(_nan0(variants[best]["val_loss"]["sd"]), _nan0(base["val_loss"]["sd"]))
        replaces = mean_val_loss(base) - mean_val_loss(variants[best]) > config.quality_margin + spread
    return {"eligible": eligible, "best_eligible": best,
            "selected": best if replaces else config.baseline, "baseline_replaced": replaces}


def _nan0(x: float) -> float:
    return 0.0 if not np.isfinite(x) else x


def _figure(summary: dict, ctx: RunContext) -> None:
    plt = pyplot()

    names = list(summary["variants"])
    v = summary["variants"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    panels = (("val loss (mean ± sd)", [v[n]["val_loss"]["mean"] for n in names],
               [_nan0(v[n]["val_loss"]["sd"]) for n in names]),
              ("tokens / s", [v[n]["tokens_per_s"] for n in names], None),
              ("peak step memory (MiB)", [v[n]["peak_memory_mb"] for n in names], None))
    for ax, (label, values, errors) in zip(axes, panels):
        colors = ["tab:blue" if v[n]["ffn"] == "plain" else "tab:orange" for n in names]
        ax.bar(range(len(names)), values, yerr=errors, color=colors)
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel(label)
        finite = [x for x in values if np.isfinite(x)]
        if label.startswith("val") and finite:
            ax.set_ylim(min(finite) - 0.05, max(finite) + 0.05)
    fig.suptitle(f"matched parameters; selected: {summary['selected']}")
    fig.tight_layout()
    ctx.save_figure(fig, "gated_ffn")
