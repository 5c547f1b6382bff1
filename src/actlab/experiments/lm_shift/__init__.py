"""``lm-shift``: adaptive shifting of the MLP activation in a small GPT ("Rethinking Activation
Functions" §4.3, §5).

§4.3 trains GPT-2 Small "Following Karpathy's training setup (Karpathy, 2022)", i.e. nanoGPT.
The default recipe is therefore nanoGPT's, read from the karpathy/nanoGPT repository:
AdamW with betas (0.9, 0.95) and weight decay 0.1 on the 2-D weights only (``train.py``,
``model.py: configure_optimizers``), gradient clipping at 1.0, linear warm-up then cosine
decay to a floor of a tenth of the peak rate, no biases, no dropout (``train.py``) and the
exact (erf) GELU (``model.py``: ``nn.GELU()``). The peak rate 1e-3 and the 100 warm-up steps
are those of the repository's small-model config (``config/train_shakespeare_char.py``; GPT-2's
``config/train_gpt2.py`` uses 6e-4 and 2,000 warm-up steps for 124M parameters). The cosine
ends at ``steps`` (our choice of horizon: the repository says ``lr_decay_iters`` "should be
~= max_iters", while ``config/train_gpt2.py`` decays over 600,000 steps and the paper trained
300,000). The gpt-nano recipe of "Bug or Feature²" App. D.6 (Muon + AdamW, trapezoid), the
default of this experiment's earlier references, stays a named variant: ``--set
optimizer=muon`` (its run is the committed reference until nanoGPT's re-run replaces it,
then kept as ``docs/results/lm-shift/evidence-gpt-nano``). ``init_std`` scales
the initialisation (nanoGPT's 0.02, residual projections by ``1/sqrt(2 n_layer)``) for §5's
question whether the small initialisation hides the unshifted model's early lead.

For each activation (gelu, relu) a GPT trains twice per seed from the same initialisation on
the same batches: unshifted, and with ``:adaptive`` shifting (eq. 9: the mean over the
hidden units is subtracted from every unit, per token). Recorded per condition and seed:
training loss every ``log_every`` steps, validation loss every ``eval_every`` steps, and
every ``probe_every`` steps the hidden-state mean of each block's output (the residual
stream, averaged over all elements of a fixed set of validation windows, as in §2.2) and the
activation mean of each MLP.

Summary: the loss residual ``L_shifted - L_unshifted`` (paired by seed) at the end
(``residual_final``), at every evaluation of the last half of training (``residual_late``,
for §4.3's "stably") and at the first evaluation at or after ``early_fraction`` of training
(``residual_early``), the final validation losses, and the hidden-state overshoot per block
``max(0, max_t s (h_t - h_T))`` with ``s = sign(h_T - h_0)`` (how far the trajectory went past
where it ended, :func:`actlab.analysis.overshoot`; 0 for a monotone approach), averaged over
seeds and blocks, with the mean step of its peak (``overshoot_step_*``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from actlab.errors import config_check
from actlab.experiments.lm_paper import GPT2_SMALL, gpt_workloads
from actlab.experiments.lm_shift.claims import claims
from actlab.experiments.lm_shift.figures import draw
from actlab.experiments.lm_shift.summary import CONDITIONS, build_summary
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
from actlab.runner.fields import check_plain_activations, checked
from actlab.train.optim import TRAINER_OPTIMIZERS
from actlab.train.supervised import torch_threads


@dataclass
class LMShiftConfig(LMScale):
    """Tiny-GPT scale on nanoGPT's recipe (module docstring: AdamW, no biases), plus the
    activations compared, the initialisation scale and the trajectory schedule."""

    optimizer: str = checked("adamw", choices=TRAINER_OPTIMIZERS)
    bias: bool = False
    init_std: float = checked(0.02, gt=0)
    activations: list[str] = checked(default_factory=lambda: ["gelu", "relu"],
                                     spec="activation", nonempty=True)
    probe_every: int = checked(25, ge=1)
    probe_batches: int = checked(2, ge=1)
    early_fraction: float = checked(0.1, gt=0, lt=1)

    def check(self) -> None:
        """The scale's checks; plain activation names that also build shifted."""
        super().check()
        check_plain_activations("activations", self.activations)
        for spec in self.activations:
            config_check("activations", self.model_config, activation=f"{spec}:adaptive")


@register
class LMShiftExperiment(Experiment):
    """Unshifted vs adaptively shifted MLP activations in a byte-level GPT."""

    name = "lm-shift"
    headline_figure = "loss_residual"
    description = ("GPT on nanoGPT's recipe and the stdlib corpus, gelu/relu unshifted vs "
                   ":adaptive, 3 seeds: loss residual over training and hidden-state mean "
                   "trajectories (\"Rethinking Activation Functions\" §4.3, §5).")
    Config = LMShiftConfig
    # Warm-up scaled to the 250 quick steps as 100 is to 2,000; ten evaluations.
    quick = {"compile_model": "off",
             "n_layer": 2, "n_embd": 64, "block_size": 64, "batch_size": 16, "steps": 250,
             "eval_batches": 4, "probe_every": 10, "warmup": 13, "eval_every": 25}
    paper = GPT2_SMALL
    default_seeds = 3
    seeds_per_unit = 1
    distributed = True  # --nproc N: each unit's GPT trains under DDP (train_and_record)

    def units(self, config: LMShiftConfig) -> list[dict]:
        """One unit per activation and condition."""
        return [{"activation": a, "condition": c} for a in config.activations for c in CONDITIONS]

    def workloads(self, config: LMShiftConfig, unit: dict) -> list:
        """The condition's GPT with its validation and trajectory probe (``actlab plan``)."""
        spec = unit["activation"] + (":adaptive" if unit["condition"] == "shifted" else "")
        return gpt_workloads(config, activation=spec, probe_batches=config.probe_batches,
                             probe_every=config.probe_every)

    def run_unit(self, config: LMShiftConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train one condition for each seed, recording losses and hidden-state means."""
        result = UnitResult()
        spec = unit["activation"] + (":adaptive" if unit["condition"] == "shifted" else "")
        run = f"{unit['activation']}/{unit['condition']}"
        corpus = config.corpus()
        with torch_threads(config.threads or None):
            for seed in seeds:
                model = seeded_gpt(config.model_config(activation=spec), seed, ctx)
                probe_inputs = probe_windows(config, corpus, seed, config.probe_batches, ctx)
                trajectory = _trajectory_recorder(result, run, seed, model, probe_inputs, config)
                trajectory(0)
                train_and_record(config, model, corpus, seed, ctx, result, run,
                                 losses=("train_loss", "val_loss"), on_step=trajectory)
        return result

    def summarize(self, config: LMShiftConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Residuals, final losses and overshoot per activation; figures."""
        summary = build_summary(config, table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw(table, config, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Shift lowers the final loss, stably; no early lead of the unshifted model (§5);
        smaller overshoot (ours)."""
        return claims(summary)


def _trajectory_recorder(result: UnitResult, run: str, seed: int, model: GPT, inputs: list,
                         config: LMShiftConfig) -> Callable[..., None]:
    """``on_step`` callback: block hidden-state and activation means every ``probe_every`` steps."""

    def record(step: int, _loss: float = 0.0) -> None:
        if step % config.probe_every and step != config.steps:
            return
        table = probe_forward(model, inputs, metrics=("hidden_mean", "act_mean"),
                              blocks=model.blocks)
        for row in table.itertuples():
            result.add(run, seed, step, row.layer, row.metric, row.value)

    return record
