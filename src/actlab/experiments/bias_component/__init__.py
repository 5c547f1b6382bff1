"""``bias-component``: what a conv autoencoder decodes from the activation-bias component.

"Rethinking Activation Functions" §3, eq. 8, Figs. 5, 17, 18 and App. D. A small VGG-style
autoencoder (:class:`~actlab.nn.autoencoder.ConvAutoencoder`) learns to reconstruct images
with plain ``relu`` (unshifted) or shifted ReLUs (App. D: "replaces each ReLU with
ReLU(z) − b"). The shifted model uses ``relu:shift=measured``: each ReLU's b is its mean
output at initialisation, measured on ``calibration_batches`` training batches layer by layer
(:func:`actlab.calibrate_shifts_`), our reading of §2.1's "we estimate b as its expected
post-activation output at initialization" for a model whose pre-activations are not the
teacher-student's N(0, 1/3). The variant ``shifted-theory`` keeps that Gaussian value
(``relu:shift=theory``, b = 0.23 in every layer). The three models of a seed start from the
same weights and see the same batches. At log- and linearly-spaced checkpoints, on a fixed
set of held-out images, we measure

* the reconstruction loss (per-pixel mean squared error; Fig. 17's residual is shifted minus
  unshifted);
* the similarity between the image decoded from the bias component ``h_bias`` alone (the
  channel mean at every location, eq. 8) and the full reconstruction: Pearson correlation
  (``similarity``, the headline), cosine and PSNR; the same for the deviation ``h_dev``;
* the share of the latent's energy in the bias component ``|h_bias|^2 / |h|^2``.

Data: scikit-learn's digits upsampled to ``image_size`` (default 16, standardized), or
CIFAR-10 from its python pickle files when ``data_dir`` is set (``--set data_dir=PATH``;
nothing is downloaded). The step-0 checkpoint is the untrained model; the peak of the
similarity curve is searched over the trained checkpoints (step >= 1). Training and
measurement are the recipe :mod:`actlab.recipes.autoencoder`.

``summary.json``::

    {"data": ..., "similarity": "correlation", "scale": {...},
     "unshifted": {"similarity_peak_step", "similarity_peak", "similarity_final",
                   "similarity_initial", "similarity_first_trained", "final_loss", ...},
     "shifted": {... the same ...}, "shifted-theory": {... the same ...},
     "final_loss_unshifted", "final_loss_shifted", "final_loss_shifted-theory",
     "loss_residual_final", "loss_residual_early", "early_step" (shifted - unshifted),
     "loss_residual_final_theory", "loss_residual_early_theory" (shifted-theory - unshifted),
     "failed_units"}

Each model's entry also has ``shifts`` (every activation's b, seed mean, by module name) and
``latent_mean_initial`` (the held-out mean of the latent h at step 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from actlab import analysis
from actlab.errors import ConfigError
from actlab.experiments.bias_component.claims import claims as bias_claims
from actlab.experiments.bias_component.figures import draw_figures
from actlab.experiments.bias_component.summary import (
    CONDITIONS,
    PREFIX,
    SHIFT_METRIC,
    build_summary,
)
from actlab.recipes.autoencoder import load_images, train_autoencoder
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, checked
from actlab.train.optim import OPTIMIZERS
from actlab.train.settings import settings_from
from actlab.train.supervised import torch_threads


@dataclass
class BiasComponentConfig(CheckedConfig):
    """Scale and settings of the bias-component study (see the module docstring)."""

    unshifted: str = checked("relu", spec="activation")
    shifted: str = checked("relu:shift=measured", spec="activation")
    shifted_theory: str = checked("relu:shift=theory", spec="activation")  # "shifted-theory"
    calibration_batches: int = checked(8, ge=1)  # training batches measuring shift=measured
    data_dir: str | None = None  # CIFAR-10 python files; digits when unset
    image_size: int = checked(16, ge=8)  # digits (8x8) are upsampled to this size
    limit_train: int = checked(10000, ge=1)  # CIFAR-10 training images used
    widths: list[int] = checked(default_factory=lambda: [16, 64], ge=1, nonempty=True)
    convs_per_stage: int = checked(2, ge=1)
    init: str = checked("he", spec="init")  # he (fan_out, as torchvision's VGG) or any scheme
    steps: int = checked(3000, ge=1)
    batch_size: int = checked(64, ge=1)
    optimizer: str = checked("adam", choices=OPTIMIZERS)
    lr: float = checked(1e-3, gt=0)
    log_points: int = checked(40, ge=1)
    loss_every: int = checked(10, ge=1)
    n_eval: int = checked(256, ge=1)  # held-out images for loss and similarity
    n_show: int = checked(4, ge=1)  # images in the reconstruction grids
    grid_points: int = checked(6, ge=1)  # checkpoints shown in the grids
    # similarity landmarks use checkpoints with loss <= min_fit * initial
    min_fit: float = checked(0.5, gt=0, le=1)
    threads: int = checked(1, ge=1)

    def check(self) -> None:
        """The image size must survive the poolings; ``data_dir`` must hold CIFAR-10."""
        if self.image_size % 2 ** (len(self.widths) - 1):
            raise ConfigError("image_size", f"must be divisible by 2**(len(widths)-1) = "
                              f"{2 ** (len(self.widths) - 1)}, got {self.image_size}")
        if self.data_dir is not None:
            from actlab.data.cifar import find_cifar10

            try:
                find_cifar10(self.data_dir)
            except (FileNotFoundError, ValueError) as exc:
                raise ConfigError("data_dir", str(exc)) from None


@register
class BiasComponent(Experiment):
    """Unshifted vs shifted ReLU autoencoders: decode the bias component and the deviation.

    ``shifted`` (the claims' model) measures b at initialisation; ``shifted-theory`` uses the
    Gaussian b = 0.23."""

    name = "bias-component"
    headline_figure = "fig17_loss_residual"
    description = ("Conv autoencoder: reconstructions from the activation-bias component (eq. 8), "
                   "unshifted vs shifted ReLU, b measured at initialisation (and b = 0.23 as "
                   "a variant) (\"Rethinking Activation Functions\" §3, App. D)")
    Config = BiasComponentConfig
    quick = {"steps": 500, "log_points": 24, "n_eval": 128}
    full = {"steps": 6000, "log_points": 50}
    default_seeds = 2
    seeds_per_unit = 1

    def units(self, config: BiasComponentConfig) -> list[dict[str, Any]]:
        """One unit per condition (each trains every seed of its group)."""
        return [{"condition": c, "activation": getattr(config, c.replace("-", "_"))}
                for c in CONDITIONS]

    def run_unit(self, config: BiasComponentConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the condition's autoencoder for each seed; keep grid images per seed."""
        result = UnitResult()
        x_train, x_eval, name = load_images(config.data_dir, image_size=config.image_size,
                                            limit_train=config.limit_train, n_eval=config.n_eval)
        run = f"{PREFIX}/{unit['condition']}"
        settings = settings_from(config, loss="half_sse")  # whole images per example
        checkpoints = analysis.log_steps(config.steps, config.log_points)
        with torch_threads(config.threads):
            for seed in seeds:
                trained = train_autoencoder(
                    x_train, x_eval, activation=unit["activation"], settings=settings, seed=seed,
                    checkpoints=checkpoints, widths=config.widths,
                    convs_per_stage=config.convs_per_stage, init=config.init,
                    loss_every=config.loss_every, n_show=config.n_show,
                    grid_points=config.grid_points,
                    calibration_batches=config.calibration_batches, progress=ctx.progress)
                for step, metric, value in trained.rows:
                    result.add(run, seed, step, "", metric, value)
                for layer, shift in trained.shifts.items():
                    result.add(run, seed, 0, layer, SHIFT_METRIC, shift)
                result.data[str(seed)] = trained.images
                result.data["dataset"] = name
                if trained.status == STATUS_DIVERGED:
                    result.status = STATUS_DIVERGED
        return result

    def summarize(self, config: BiasComponentConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]], ctx: RunContext) -> dict:
        """Similarity peaks and final values per model, loss residuals; the figures."""
        summary = build_summary(config, table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figures(table, results, ctx)
        # Which of the paper's effects the seed means show, in words (from the claims; the
        # verdicts over seeds, with their intervals, are in claims.json).
        words = {True: "shown by the seed means", False: "NOT shown by the seed means",
                 None: "undecided"}
        summary["note"] = [f"{words[c.held]}: {c.claim} ({c.measured})"
                           for c in self.claims(summary)]
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Rise and fall of the unshifted bias-only similarity, shifted < unshifted, losses."""
        return bias_claims(summary)
