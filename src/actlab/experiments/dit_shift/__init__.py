"""``dit-shift``: a class-conditional DiT with and without the adaptive shift (eq. 9) in every
block's MLP activation ("Rethinking Activation Functions" §4.2, Fig. 7(b), App. E.1).

Both conditions of a seed share initial weights, batches, diffusion steps, noise and label
dropout; they differ only in the activation: the DiT reference's tanh-GELU (``unshifted``)
or the same GELU minus its current mean over the hidden neurons of each token
(``gelu:tanh:adaptive``, eq. 9; ``shifted``). The protocol is
:mod:`actlab.recipes.dit_protocol`: the training loss on fixed draws and the hidden-state
means after every block at log-spaced checkpoints, FID and IS (digits-classifier features,
a fixed number of EMA samples from fixed noise and labels) at evenly spaced checkpoints.

Scales (ours): 8x8 digits in pixel space; quick a 2-block width-32 DiT for 150 steps,
default a 4-block width-64 DiT for 3000 steps. ``--set model=DiT-B/2 --set
data=latents:DIR`` trains the paper's model on VAE latent shards; with ``vae``, ``inception``
and ``fid_reference`` set too, its samples are decoded by the Stable Diffusion VAE and scored
on the FID Inception-v3 (:mod:`actlab.recipes.dit_quality`). ``--nproc N`` trains each unit
data-parallel under torchrun. The claims read paired residuals (shifted − unshifted per
seed); the runner judges each on its per-seed residuals (paired t-intervals, all-of over
checkpoints).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from actlab.experiments.dit_paper import DIT_SHIFT, dit_workloads
from actlab.experiments.dit_shift.claims import claims as summary_claims
from actlab.experiments.dit_shift.figures import draw_figures
from actlab.experiments.dit_shift.summary import CONDITIONS, PREFIX, build_summary
from actlab.recipes.dit_protocol import DiTProtocolConfig, train_condition
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    STATUS_OK,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import checked
from actlab.train.supervised import torch_threads


@dataclass
class DiTShiftConfig(DiTProtocolConfig):
    """The two activations, then the DiT protocol's settings (model, data, scale)."""

    unshifted: str = checked("gelu:tanh", spec="activation")
    shifted: str = checked("gelu:tanh:adaptive", spec="activation")


@register
class DiTShift(Experiment):
    """DiT on digits: unshifted vs adaptively shifted GELU (loss, FID, hidden-state means)."""

    name = "dit-shift"
    headline_figure = "fid"
    description = (
        "Class-conditional DiT on 8x8 digits, gelu:tanh vs gelu:tanh:adaptive in "
        "every block: paired training-loss and FID residuals per checkpoint, sample "
        'grids, hidden-state means ("Rethinking Activation Functions" §4.2, '
        "App. E.1)"
    )
    Config = DiTShiftConfig
    quick = {
        "hidden_size": 32,
        "depth": 2,
        "steps": 150,
        "log_points": 6,
        "eval_points": 2,
        "fid_samples": 200,
        "sample_steps": 20,
        "loss_samples": 256,
        "grid_per_class": 3,
    }
    full = {"steps": 8000, "eval_points": 6}
    paper = DIT_SHIFT
    default_seeds = 3
    seeds_per_unit = 1
    distributed = True  # --nproc N: each unit's DiT trains under DDP (train_condition)

    def units(self, config: DiTShiftConfig) -> list[dict[str, Any]]:
        """One unit per condition (and seed)."""
        return [{"condition": c, "activation": getattr(config, c)} for c in CONDITIONS]

    def workloads(self, config: DiTShiftConfig, unit: dict[str, Any]) -> list:
        """The condition's DiT and its EMA (``actlab plan``)."""
        return dit_workloads(config, activation=unit["activation"])

    def run_unit(
        self, config: DiTShiftConfig, unit: dict[str, Any], seeds: list[int], ctx: UnitContext
    ) -> UnitResult:
        """Train the condition's DiT for each seed."""
        result = UnitResult()
        run = f"{PREFIX}/{unit['condition']}"
        with torch_threads(config.threads):
            for seed in seeds:
                status = train_condition(
                    config, result, run, seed, activation=unit["activation"], progress=ctx.progress,
                    dist=ctx.dist,
                )
                if status != STATUS_OK:
                    result.status = STATUS_DIVERGED
        return result

    def summarize(
        self,
        config: DiTShiftConfig,
        table: pd.DataFrame,
        results: list[dict[str, Any]],
        ctx: RunContext,
    ) -> dict:
        """Paired residuals per checkpoint (loss, FID), overshoot; the figures."""
        summary = build_summary(config, table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figures(config, table, results, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Loss comparable or lower throughout; lower FID at every checkpoint; overshoot."""
        return summary_claims(summary)
