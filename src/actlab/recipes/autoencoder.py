"""Recipe: train a conv autoencoder and decode its latent's bias component ("Rethinking
Activation Functions" §3, eq. 8).

:func:`train_autoencoder` builds a :class:`~actlab.nn.autoencoder.ConvAutoencoder` (He
normal init with fan_out and zero biases as torchvision's VGG, drawn from a generator
seeded with ``seed``, so models of different activations start from the same weights),
trains it with the engine (:func:`actlab.train.supervised.train`) to reconstruct its input
(half squared error per image, batch order seeded with ``seed``) and, at each checkpoint,
measures on held-out images (:func:`measure_checkpoint`): the reconstruction MSE, how close
the images decoded from the bias component ``h_bias`` and from the deviation ``h_dev``
alone come to the full reconstruction (correlation, cosine, PSNR, and the scale-aware
:func:`scale_aware_fit`), and the latent's share of energy in the bias component.
:func:`load_images` gives digits (upsampled) or CIFAR-10 images.

With a ``shift=measured`` activation (``relu:shift=measured``) each activation's shift is
measured on training batches right after initialisation (:func:`calibrate_on_training_batches`,
"Rethinking Activation Functions" §2.1's "expected post-activation output at
initialization"), before the first update.

Example::

    from actlab.analysis import log_steps
    from actlab.train.settings import TrainSettings

    x_train, x_eval, name = load_images(image_size=16, n_eval=128)
    settings = TrainSettings(optimizer="adam", lr=1e-3, steps=700, batch_size=64,
                             loss="half_sse")
    run = train_autoencoder(x_train, x_eval, activation="relu:shift=theory",
                            settings=settings, seed=0, checkpoints=log_steps(700, 24))
    run.rows[:2]          # [(0, "test_loss", ...), (0, "bias_share", ...)]: step 0, untrained
    run.images["bias"]    # decoded bias-only images at run.images["steps"]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from actlab.activations.calibrate import calibrate_shifts_, measured_activations
from actlab.activations.spec_activation import SpecActivation
from actlab.device import place, to_model_device
from actlab.init import initialize_
from actlab.nn.autoencoder import ConvAutoencoder, bias_decomposition, image_similarity
from actlab.nn.losses import half_sse_to_mse_mean
from actlab.train.callbacks import EvalLog, LossLog
from actlab.train.loop import STATUS_DIVERGED
from actlab.train.settings import TrainSettings
from actlab.train.supervised import train

PARTS = ("full", "bias", "dev")


@dataclass
class AutoencoderRun:
    """What one run of :func:`train_autoencoder` measured.

    ``rows``: ``(step, metric, value)`` by step (updates done), the batch ``train_loss``
    (as per-pixel MSE) before that step's checkpoint metrics (:func:`measure_checkpoint`);
    a diverged run ends with a ``nan`` ``test_loss`` at the step after its last update.
    ``images``: ``input`` (the first ``n_show`` held-out images) and, per shown step in
    ``steps``, the decoded ``full``, ``bias`` and ``dev`` images, as nested lists rounded
    to 4 decimals. ``shifts``: the shift every activation subtracted during training, by
    module name (0 unshifted; measured at initialisation for ``shift=measured``).
    """

    status: str
    steps: int
    model: nn.Module
    rows: list[tuple[int, str, float]] = field(default_factory=list)
    images: dict[str, Any] = field(default_factory=dict)
    shifts: dict[str, float] = field(default_factory=dict)


def load_images(data_dir: str | None = None, *, image_size: int = 16, limit_train: int = 10000,
                n_eval: int = 256) -> tuple[Tensor, Tensor, str]:
    """Training and ``n_eval`` held-out images, and the data set's name.

    CIFAR-10 from its python files in ``data_dir`` (``limit_train`` training images; nothing
    is downloaded), else scikit-learn's digits upsampled to ``image_size``.
    """
    if data_dir is not None:
        from actlab.data.cifar import load_cifar10

        data = load_cifar10(data_dir, limit_train=limit_train, limit_test=n_eval)
    else:
        from actlab.data.digits import load_digits

        data = load_digits(image_size=image_size)
    return data.x_train, data.x_test[:n_eval], data.name


def grid_steps(checkpoints: Sequence[int], points: int) -> list[int]:
    """About ``points`` checkpoints for the image grids, log-spaced from 1% of training on."""
    trained = np.asarray([s for s in checkpoints if s > 0])
    if trained.size <= points:
        return trained.tolist()
    targets = np.geomspace(max(1.0, trained[-1] / 100), trained[-1], points)
    return sorted({int(trained[np.argmin(np.abs(np.log(trained) - np.log(t)))]) for t in targets})


@torch.no_grad()
def measure_checkpoint(model: Any, x: Tensor) -> tuple[dict[str, float], dict[str, Tensor]]:
    """Loss, bias/deviation similarities and latent bias share on ``x``; and the decoded parts.

    The parts are ``full`` (decode of ``h``), ``bias`` (of ``h_bias``) and ``dev`` (of
    ``h_dev``); similarities compare each part with ``full``, ``*_input_correlation`` with
    the input ``x``.
    """
    x = to_model_device(model, x)
    h = model.encode(x)
    h_bias, h_dev = bias_decomposition(h)
    parts = {"full": model.decode(h), "bias": model.decode(h_bias), "dev": model.decode(h_dev)}
    out = {"test_loss": float((parts["full"] - x).pow(2).mean()),
           "bias_share": float(h_bias.pow(2).sum() / h.pow(2).sum().clamp_min(1e-30)),
           "latent_mean": float(h.mean())}
    for part in ("bias", "dev"):
        for kind in ("correlation", "cosine", "psnr"):
            values = image_similarity(parts[part], parts["full"], kind)
            # mean over the finite values (no data-dependent shape: no host sync)
            out[f"{part}_{kind}"] = float(values.where(torch.isfinite(values), torch.nan).nanmean())
        # image content the component recovers on its own (vs the input, not the model)
        out[f"{part}_input_correlation"] = float(image_similarity(parts[part], x).mean())
        out.update(scale_aware_fit(parts[part], parts["full"], part))
    out["full_input_correlation"] = float(image_similarity(parts["full"], x).mean())
    return out, parts


def scale_aware_fit(part: Tensor, full: Tensor, name: str) -> dict[str, float]:
    """How much of the full decode one component's decode reproduces, scale included.

    A correlation ignores scale: a faint copy of the image correlates perfectly. Per image,
    ``{name}_r2`` is ``1 - |full - part|² / |full - mean(full)|²`` (1: the part alone gives
    the full decode; 0 or below: no better than the image's mean) and ``{name}_energy`` is
    ``|part|² / |full|²``; both are averaged over images.
    """
    dims = tuple(range(1, full.dim()))
    centred = (full - full.mean(dim=dims, keepdim=True)).pow(2).sum(dims).clamp_min(1e-30)
    r2 = 1 - (full - part).pow(2).sum(dims) / centred
    energy = part.pow(2).sum(dims) / full.pow(2).sum(dims).clamp_min(1e-30)
    return {f"{name}_r2": float(r2.mean()), f"{name}_energy": float(energy.mean())}


def build_autoencoder(in_channels: int, activation: str, seed: int, *,
                      widths: Sequence[int] = (16, 64), convs_per_stage: int = 2,
                      init: str = "he") -> ConvAutoencoder:
    """The initialised autoencoder on the CPU; its weights depend on ``seed``, not ``activation``.

    ``init`` ``torch-default`` keeps PyTorch's own draw (from the global generator, seeded
    with ``seed``); any other :mod:`actlab.init` scheme uses fan_out and zero biases.
    """
    torch.manual_seed(seed)
    model = ConvAutoencoder(in_channels, list(widths), convs_per_stage, activation)
    if init != "torch-default":
        # torchvision's VGG: He normal with fan_out, zero biases
        initialize_(model, init, activation="relu", mode="fan_out",
                    generator=torch.Generator().manual_seed(seed))
    return model


def calibrate_on_training_batches(model: nn.Module, x_train: Tensor, batch_size: int,
                                  n_batches: int, seed: int) -> dict[str, float]:
    """Measure every ``shift=measured`` activation of ``model`` on ``n_batches`` batches of
    ``batch_size`` training images (:func:`actlab.calibrate_shifts_`), and return the shift
    of every activation by module name.

    The batches are drawn without replacement by a generator of their own seeded with
    ``seed``, so the training batch order does not change.
    """
    if measured_activations(model):
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(seed))
        take = order[: batch_size * n_batches]
        calibrate_shifts_(model, list(x_train[take].split(batch_size)))
    return {name: m.shift for name, m in model.named_modules() if isinstance(m, SpecActivation)}


def train_autoencoder(x_train: Tensor, x_eval: Tensor, *, activation: str,
                      settings: TrainSettings, seed: int, checkpoints: Sequence[int],
                      widths: Sequence[int] = (16, 64), convs_per_stage: int = 2,
                      init: str = "he", loss_every: int = 10, n_show: int = 4,
                      grid_points: int = 6, calibration_batches: int = 8,
                      progress: Callable[..., Iterable] | None = None) -> AutoencoderRun:
    """Train one autoencoder on ``x_train`` and measure it on ``x_eval`` (module docstring).

    ``checkpoints`` are the steps (updates done, 0 = untrained) of :func:`measure_checkpoint`;
    about ``grid_points`` of them (:func:`grid_steps`) keep ``n_show`` decoded images. The
    batch loss is kept after update 1, 1 + ``loss_every``, ... and the last. ``settings.loss``
    must be ``half_sse`` (the image is the target). A ``shift=measured`` activation is
    calibrated on ``calibration_batches`` training batches before the first update
    (:func:`calibrate_on_training_batches`).
    """
    if settings.loss != "half_sse":
        raise ValueError(f"settings.loss: the autoencoder trains on half_sse, got {settings.loss!r}")
    model = place(build_autoencoder(x_train.shape[1], activation, seed, widths=widths,
                                    convs_per_stage=convs_per_stage, init=init))
    shifts = calibrate_on_training_batches(model, x_train, settings.batch_size,
                                           calibration_batches, seed)
    shown = set(grid_steps(checkpoints, grid_points))
    images: dict[str, Any] = {"steps": [], "input": _rounded(x_eval[:n_show]),
                              **{p: [] for p in PARTS}}

    def checkpoint(trainer: Any) -> dict[str, float]:
        stats, parts = measure_checkpoint(model, x_eval)
        if trainer.step in shown:
            images["steps"].append(trainer.step)
            for p in PARTS:
                images[p].append(_rounded(parts[p][:n_show]))
        return stats

    losses = LossLog(at=[*range(1, settings.steps + 1, loss_every), settings.steps])
    evals = EvalLog(checkpoint, at=checkpoints)
    outcome = train(model, x_train, x_train, settings, callbacks=[losses, evals],
                    generator=torch.Generator().manual_seed(seed), progress=progress)
    pixels = x_train[0].numel()
    by_step: dict[int, list[tuple[str, float]]] = {}
    for r in losses.rows:  # an update's loss line comes before its checkpoint's
        by_step.setdefault(r["step"], []).append(("train_loss",
                                                  half_sse_to_mse_mean(r["loss"], pixels)))
    for r in evals.rows:
        by_step.setdefault(r["step"], []).extend((k, v) for k, v in r.items() if k != "step")
    run = AutoencoderRun(outcome.status, outcome.steps, model, images=images, shifts=shifts)
    run.rows = [(step, metric, value) for step in sorted(by_step) for metric, value in by_step[step]]
    if outcome.status == STATUS_DIVERGED:
        run.rows.append((outcome.steps + 1, "test_loss", math.nan))
    return run


def _rounded(t: Tensor) -> list:
    """A tensor as nested lists of floats rounded to 4 decimals (JSON-able grid images)."""
    return np.round(t.detach().double().cpu().numpy(), 4).tolist()
