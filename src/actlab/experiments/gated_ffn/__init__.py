"""``gated-ffn``: plain ReLU/GELU FFNs vs ReGLU/GEGLU/SwiGLU at matched parameters, under the
controlled-selection protocol of the notes "Activations and Gated Feed-Forward Networks".

Protocol, fixed before any run (the config holds every choice and threshold):

1. same data split (stdlib corpus), initialisation family (GPT-2 normal), optimizer
   (the language-model recipe's: by default Muon + AdamW with the trapezoidal schedule,
   ``actlab.recipes.language_model.LMScale``), number of steps and stopping rule (fixed
   steps; a non-finite loss stops the run and counts as a failed run);
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
from dataclasses import dataclass

from actlab.activations.spec_activation import activation
from actlab.errors import ConfigError, config_check
from actlab.experiments.gated_ffn.claims import claims
from actlab.experiments.gated_ffn.figures import draw
from actlab.experiments.gated_ffn.summary import build_summary, ffn_fields
from actlab.nn.ffn import GATE_KINDS, ffn_flops_per_token
from actlab.recipes.language_model import LMScale, lm_batches, seeded_gpt, train_and_record
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import checked
from actlab.train.supervised import torch_threads
from actlab.train.timing import measure_step

VARIANTS = ["relu", "gelu", "reglu", "geglu", "swiglu"]


@dataclass
class GatedFFNConfig(LMScale):
    """Tiny-GPT scale, the variants, the baseline and the selection thresholds."""

    variants: list[str] = checked(default_factory=lambda: list(VARIANTS), nonempty=True)
    baseline: str = "gelu"
    timing_repeats: int = checked(5, ge=1)
    min_speed_ratio: float = checked(0.75, gt=0, le=1)
    max_memory_ratio: float = checked(1.25, ge=1)
    quality_margin: float = checked(0.0, ge=0)

    def check(self) -> None:
        """The scale's checks; every variant builds; the baseline is one of them."""
        super().check()
        for variant in self.variants:
            config_check("variants", self.model_config, **ffn_fields(variant))
            if variant not in GATE_KINDS:
                config_check("variants", activation, variant)
        if self.baseline not in self.variants:
            raise ConfigError("baseline", f"must be one of the variants {self.variants}, got "
                                          f"{self.baseline!r}")


@register
class GatedFFNExperiment(Experiment):
    """Matched-parameter comparison of plain and gated FFNs with a pre-registered selection rule."""

    name = "gated-ffn"
    headline_figure = "gated_ffn"
    description = ("GPT with plain relu/gelu FFNs vs ReGLU/GEGLU/SwiGLU at matched parameters: "
                   "widths, params, FLOPs/token, peak memory, tokens/s, val loss (the notes "
                   "\"Activations and Gated Feed-Forward Networks\").")
    Config = GatedFFNConfig
    # The gpt-nano recipe scales warm-up, warm-down and evaluation with ``steps``; the quick
    # runs before it: --set steps=250 --set optimizer=adamw --set lr=0.003 --set warmup=25 --set eval_every=50
    quick = {"compile_model": "off",
             "n_layer": 2, "n_embd": 64, "block_size": 64, "batch_size": 16, "steps": 200,
             "eval_batches": 4, "timing_repeats": 3}
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
        model_config = config.model_config(**ffn_fields(variant))
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
        summary = build_summary(config, table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw(summary, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Matched parameters and FLOPs, loss of gated vs plain, throughput, stability."""
        return claims(summary)
