"""``lm-drift``: weight drift, negative pre-activations and sparsity of a GPT under Muon and AdamW.

"Bug or Feature²" (long version) §2-3 derives a negative drift of the weights feeding an
activation from the positive mean of the pre-activation gradient, and measures it under SGD and
Adam; its GPT-nano trains with Muon (App. D.6), which orthogonalises each matrix update (every
singular value of the Newton-Schulz output is about 1). The drift argument concerns the mean
of the update, one direction among many, so Muon may spend less of its movement on it. This
experiment measures that, on the same seeds and batches:

* ``muon``: the gpt-nano recipe (:class:`~actlab.recipes.language_model.LMScale`'s default:
  Muon on the hidden matrices, AdamW on the rest, trapezoidal schedule, no weight decay);
* ``adamw``: the same schedule, no weight decay and no clipping, AdamW on every parameter at
  ``adamw_lr`` (ours: the engine's AdamW rate), so only the optimizer differs;

each under every normalisation of ``norms``: nanoGPT's LayerNorm and the RMSNorm of the
authors' released code (App. C.2 and §10.2: a centring norm suppresses drift, RMSNorm does not).

The paper's own prediction for a transformer is about the down-projection: App. C.2 ("Why the
first layer does not drift") signs a layer's expected update by its input, and the
down-projection "receives a post-activation input". Behind LayerNorm, Muon cannot move that
layer's weight mean at all: every path from the residual stream to the loss passes a
LayerNorm, whose input gradient sums to zero per token, so the down-projection's gradient has
zero column sums, and Newton-Schulz (``X <- a X + (b A + c A^2) X``, ``A = X X^T``) keeps them
zero (tested in ``tests/test_lm_drift.py``; argued, not proved for every rounding). That arm is
therefore a test of the optimizer, not a finding, and carries no drift claim.

Every ``probe_every`` steps, per block: the mean of the up-projection weight (the layer whose
output enters the activation; ``down_*`` the same for the down-projection, whose input is the
activation's output), its drift Z-score ``E|w_t - w_0| / std(w_0)`` (the paper's
§2 measure), the share of that movement which is mean drift, ``|E[w_t - w_0]| / E|w_t - w_0|``
(ours: 1 when every weight moved by the same amount in the same direction), and on fixed
validation windows the share of negative activation inputs and the activation output's
sparsity (``|a| < 1e-7``). The summary keeps the change of each from step 0 to the end,
averaged over blocks and seeds.

The mean pre-activation is taken apart too (ours): ``mean_j (W h + b)_j = mean(b) +
w_mean * sum_k h_k + sum_k (c_k - w_mean) h_k`` with ``c_k`` the column means of ``W`` and
``h`` the up-projection's input. Behind a LayerNorm ``sum_k h_k`` is ``sum_k beta_k`` plus the
scale's unevenness (zero at initialisation), so the weight mean barely reaches the
pre-activations; ``b_mean``, ``w_mean_part`` and ``column_part`` say which term moved them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from actlab.experiments.lm_drift.claims import claims
from actlab.experiments.lm_drift.figures import draw
from actlab.experiments.lm_drift.summary import build_summary
from actlab.experiments.lm_paper import GPT_NANO, gpt_workloads
from actlab.nn.gpt import GPT
from actlab.recipes.language_model import (
    LMScale,
    probe_forward,
    probe_windows,
    seeded_gpt,
    train_and_record,
)
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

OPTIMIZERS = ("muon", "adamw")
NORMS = ("layernorm", "rmsnorm")


@dataclass
class LMDriftConfig(LMScale):
    """Tiny-GPT scale, the activations, the normalisations, the AdamW arm's rate and the
    trajectory schedule."""

    activations: list[str] = checked(default_factory=lambda: ["relu", "gelu"],
                                     spec="activation", nonempty=True)
    norms: list[str] = checked(default_factory=lambda: list(NORMS), choices=NORMS,
                               nonempty=True)
    adamw_lr: float = checked(1e-3, gt=0)
    probe_every: int = checked(50, ge=1)
    probe_batches: int = checked(2, ge=1)
    steps: int = 1000

    def arm(self, optimizer: str, norm: str | None = None) -> LMScale:
        """The scale one arm trains with (``adamw``: the Muon arm's schedule; ``norm``: the
        model's normalisation, default the config's ``norm``)."""
        scale = self if norm is None else replace(self, norm=norm)
        if optimizer == "muon":
            return scale
        recipe = scale.recipe()
        return replace(scale, optimizer="adamw", lr=self.adamw_lr, schedule="trapezoid",
                       warmup=recipe["warmup"], warmdown=recipe["warmdown"],
                       eval_every=recipe["eval_every"], weight_decay=0.0, grad_clip=0.0)


@register
class LMDriftExperiment(Experiment):
    """Weight drift and sparsity of a byte-level GPT, Muon against AdamW on the same seeds."""

    name = "lm-drift"
    headline_figure = "lm_drift"
    description = ("GPT on the stdlib corpus, relu/gelu, Muon (gpt-nano recipe) vs AdamW on the "
                   "same schedule, LayerNorm and RMSNorm, 3 seeds: up- and down-projection "
                   "weight means and drift Z-scores, negative pre-activation share and sparsity "
                   "over training (\"Bug or Feature²\" §2-3, App. C.2).")
    Config = LMDriftConfig
    quick = {"compile_model": "off", "n_layer": 2, "n_embd": 64, "block_size": 64,
             "batch_size": 16, "steps": 150, "eval_batches": 2, "probe_every": 25}
    paper = GPT_NANO
    default_seeds = 3
    seeds_per_unit = 1

    def units(self, config: LMDriftConfig) -> list[dict]:
        """One unit per normalisation, optimizer and activation."""
        return [{"norm": n, "optimizer": o, "activation": a} for n in config.norms
                for o in OPTIMIZERS for a in config.activations]

    def workloads(self, config: LMDriftConfig, unit: dict) -> list:
        """The arm's GPT with its validation and trajectory probe (``actlab plan``)."""
        scale = config.arm(unit["optimizer"], unit["norm"])
        return gpt_workloads(scale, activation=unit["activation"],
                             probe_batches=config.probe_batches, probe_every=config.probe_every)

    def run_unit(self, config: LMDriftConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train one arm per seed, recording the trajectory every ``probe_every`` steps."""
        result = UnitResult()
        scale = config.arm(unit["optimizer"], unit["norm"])
        run = f"{unit['norm']}/{unit['optimizer']}/{unit['activation']}"
        corpus = config.corpus()
        with torch_threads(config.threads or None):
            for seed in seeds:
                model = seeded_gpt(scale.model_config(activation=unit["activation"]), seed, ctx)
                windows = probe_windows(config, corpus, seed, config.probe_batches, ctx)
                record = _trajectory_recorder(result, run, seed, model, windows, config)
                record(0)
                train_and_record(scale, model, corpus, seed, ctx, result, run, on_step=record)
        return result

    def summarize(self, config: LMDriftConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Per arm: start and end of each trajectory, averaged over blocks and seeds; figure."""
        summary = build_summary(config, table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw(table, config, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """The down-projection's drift (App. C.2) and the rising negative share (§1, Table 1);
        the up-projection's weight mean and Muon's share of mean drift (ours)."""
        return claims(summary)


def _trajectory_recorder(result: UnitResult, run: str, seed: int, model: GPT, windows: list,
                         config: LMDriftConfig) -> Callable[..., None]:
    """``on_step`` callback: per block, up- and down-projection weight mean, Z-score and mean
    drift share, the up-projection's bias mean, the part of the mean pre-activation that the
    weight mean carries, mean and negative share of the pre-activations and sparsity, every
    ``probe_every`` steps and at the end."""
    # the up-projection feeds the activation; the down-projection reads its output, the input
    # the paper's drift argument needs (a post-activation), so both are followed
    layers = [(str(i), prefix, getattr(block.mlp, name)) for i, block in enumerate(model.blocks)
              for prefix, name in (("", "up"), ("down_", "down"))]
    initial = [layer.weight.detach().clone() for _, _, layer in layers]

    def record(step: int, _loss: float = 0.0) -> None:
        if step % config.probe_every and step != config.steps:
            return
        up_means = {}
        with torch.no_grad():
            for (i, prefix, layer), w0 in zip(layers, initial):
                w = layer.weight.detach()
                w_mean = float(w.double().mean())
                if not prefix:
                    up_means[i] = w_mean
                result.add(run, seed, step, i, f"{prefix}w_mean", w_mean)
                moved = (w - w0).abs().double().mean()
                result.add(run, seed, step, i, f"{prefix}z_score",
                           float(moved / w0.double().std()))
                result.add(run, seed, step, i, f"{prefix}mean_drift_share",
                           float((w - w0).double().mean().abs() / moved) if moved > 0 else 0.0)
            for i, block in enumerate(model.blocks):
                if block.mlp.up.bias is not None:
                    result.add(run, seed, step, str(i), "b_mean",
                               float(block.mlp.up.bias.double().mean()))
        ups = [block.mlp.up for block in model.blocks]
        table = probe_forward(model, windows, input_modules=ups,
                              metrics=("preact_neg_frac", "preact_mean", "sparsity",
                                       "input_row_sum"))
        for row in table.itertuples():
            i = row.layer.split(".")[1]
            if row.metric == "input_row_sum":
                # mean_j (W h)_j = sum_k colmean_k h_k; a uniform shift's part is w_mean sum_k h_k
                result.add(run, seed, step, i, "w_mean_part", up_means[i] * row.value)
            else:
                result.add(run, seed, step, i, row.metric, row.value)

    return record
