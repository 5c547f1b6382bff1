"""Training a diffusion model: the trainer's loss, its generators in the checkpoint, the recipe.

:class:`DiffusionLoss` is ``loss_fn(model, batch)`` for :class:`~actlab.train.loop.Trainer`
(the ε-loss of :func:`actlab.diffusion.diffusion_loss` with its own seeded draws),
:class:`GeneratorState` keeps those generators in a checkpoint, and :func:`train_diffusion`
is the recipe: the trainer plus an :class:`~actlab.train.ema.EMA`. The mathematics (forward
process, VLB, DDPM / DDIM samplers) lives in :mod:`actlab.diffusion`; its names are
importable from here too, as before it moved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn

from actlab.diffusion import (  # noqa: F401  (re-exported: their import path before the move)
    FIXED_VARIANCES,
    LN2,
    GaussianDiffusion,
    approx_standard_normal_cdf,
    ddim_sample,
    ddpm_sample,
    diffusion_loss,
    discretized_gaussian_log_likelihood,
    draw_timesteps_and_noise,
    guided_output,
    linear_betas,
    loss_terms,
    mean_flat,
    normal_kl,
    space_timesteps,
    split_output,
    takes_generator,
    vb_terms_bpd,
)
from actlab.train.callbacks import Callback
from actlab.train.ema import EMA
from actlab.train.loop import TrainResult
from actlab.train.settings import TrainSettings
from actlab.train.supervised import train


class GeneratorState(Callback):
    """Keeps ``torch.Generator`` states in the trainer's checkpoint (never fires), so a resumed
    run draws the numbers an uninterrupted one would."""

    def __init__(self, **generators: torch.Generator) -> None:
        super().__init__()
        self.generators = generators

    def fires(self, step: int) -> bool:
        """Never: it only carries state."""
        return False

    def state_tensors(self) -> dict[str, Tensor]:
        """Each generator's state."""
        return {name: g.get_state() for name, g in self.generators.items()}

    def load_state_tensors(self, tensors: dict[str, Tensor]) -> None:
        """Set each generator's state."""
        for name, generator in self.generators.items():
            generator.set_state(tensors[name])


class DiffusionLoss:
    """``loss_fn(model, batch)`` for :class:`~actlab.train.loop.Trainer`; batch ``(x0, y)``,
    or ``(x0, y, t, noise[, drop])`` with the per-sample draws already made (:meth:`draws`).

    With ``(x0, y)`` each call draws t and ε (:func:`draw_timesteps_and_noise`) from
    ``generator`` when the model is in training mode and from ``eval_generator`` (default:
    its own, seeded 0) in eval mode, so evaluating never changes what training draws. A run
    is deterministic given the generators' seeds (and the batches). A resumed run draws the
    same numbers as an uninterrupted one only if the checkpoint keeps the generators: pass
    :meth:`checkpoint_callback` among the trainer's callbacks (in the same position on resume).

    Data-parallel training (``--nproc``) needs every sample's draws to belong to the sample,
    not to the rank that happens to hold it: the batch function then makes them for the
    whole global batch with :meth:`draws` and returns them with the data, and
    :func:`~actlab.train.distributed.shard` cuts them with it. A rank then uses exactly the
    t, ε and label dropout one process would for the same global sample.
    """

    def __init__(self, diffusion: GaussianDiffusion, generator: torch.Generator,
                 eval_generator: torch.Generator | None = None) -> None:
        self.diffusion = diffusion
        self.generator = generator
        self.eval_generator = eval_generator or torch.Generator().manual_seed(0)

    def __call__(self, model: nn.Module, batch: Sequence[Tensor]) -> Tensor:
        """The batch loss of :func:`diffusion_loss` (with the batch's own draws, if any)."""
        if len(batch) in (4, 5):
            x0, y, t, noise = batch[:4]
            # the dropped labels are given: the model draws nothing itself
            net = partial(model, force_drop_ids=batch[4]) if len(batch) == 5 else model
            return loss_terms(self.diffusion, net, x0, y, t, noise)["loss"].mean()
        if len(batch) != 2:
            raise ValueError(f"batch: need (x0, y) or (x0, y, t, noise[, drop]), got "
                             f"{len(batch)} tensors")
        generator = self.generator if getattr(model, "training", True) else self.eval_generator
        return diffusion_loss(self.diffusion, model, batch[0], batch[1], generator=generator)

    def draws(self, x0: Tensor, label_dropout: float = 0.0) -> tuple[Tensor, ...]:
        """The per-sample draws of a training batch ``x0``, from ``generator`` in the order
        the ``(x0, y)`` form makes them: t and ε (:func:`draw_timesteps_and_noise`), then,
        with ``label_dropout > 0``, the dropped-label mask (1: drop) as DiT's label embedder
        draws it (:meth:`~actlab.nn.dit.LabelEmbedder.token_drop`). One process gets the
        same numbers either way."""
        t, noise = draw_timesteps_and_noise(self.diffusion, x0, self.generator)
        if label_dropout <= 0:
            return t, noise
        device = self.generator.device
        drop = torch.rand(x0.shape[0], generator=self.generator, device=device) < label_dropout
        return t, noise, drop.long()

    def checkpoint_callback(self) -> GeneratorState:
        """A callback that keeps both generators in the trainer's checkpoint."""
        return GeneratorState(train=self.generator, eval=self.eval_generator)


@dataclass
class DiffusionRun:
    """What :func:`train_diffusion` returns: the trainer's result, the EMA model, every
    update's batch loss."""

    result: TrainResult
    ema: nn.Module
    losses: list[float]


def train_diffusion(model: nn.Module, images: Tensor, labels: Tensor, settings: TrainSettings,
                    *, diffusion: GaussianDiffusion | None = None, ema_decay: float = 0.9999,
                    seed: int | None = None, callbacks: Sequence[Callback] = (),
                    progress: Callable[..., Iterable] | None = None) -> DiffusionRun:
    """Train ``model`` in place on ``(images, labels)`` with :class:`DiffusionLoss`.

    :func:`actlab.train.supervised.train` (``settings.steps`` updates over seeded epochs of
    ``settings.batch_size``) with an :class:`~actlab.train.ema.EMA` of
    ``ema_decay``. One generator seeded ``seed`` (default ``settings.seed``) draws the batch
    order, t, ε and the model's label dropout, so the run is deterministic given the seed.
    ``diffusion`` defaults to :meth:`GaussianDiffusion.linear`. No evaluation or checkpoints;
    the model's mode is restored afterwards.
    """
    if images.dim() < 2 or len(images) != len(labels):
        raise ValueError(f"images, labels: need one label per image, got {tuple(images.shape)} "
                         f"and {tuple(labels.shape)}")
    diffusion = diffusion or GaussianDiffusion.linear()
    generator = torch.Generator().manual_seed(settings.seed if seed is None else seed)
    ema = EMA(model, decay=ema_decay)
    result = train(model, images, labels, settings, generator=generator,
                   callbacks=[ema, *callbacks], progress=progress,
                   loss_fn=DiffusionLoss(diffusion, generator))
    return DiffusionRun(result, ema.module, result.losses)


__all__ = ["DiffusionLoss", "DiffusionRun", "GaussianDiffusion", "GeneratorState",
           "approx_standard_normal_cdf", "ddim_sample", "ddpm_sample", "diffusion_loss",
           "discretized_gaussian_log_likelihood", "draw_timesteps_and_noise", "guided_output",
           "linear_betas", "loss_terms", "mean_flat", "normal_kl", "space_timesteps",
           "split_output", "train_diffusion", "vb_terms_bpd"]
