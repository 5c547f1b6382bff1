"""Training side of ``bias-component``: data, checkpoints and one autoencoder run on the engine."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from actlab import analysis
from actlab.experiments._bias_config import BiasComponentConfig
from actlab.runner.experiment import STATUS_DIVERGED, UnitResult
from actlab.train.callbacks import EvalLog, LossLog
from actlab.train.losses import half_sse_to_mse_mean
from actlab.train.placement import place, to_model_device
from actlab.train.settings import settings_from
from actlab.train.supervised import train

PARTS = ("full", "bias", "dev")


def load_images(config: BiasComponentConfig) -> tuple[Tensor, Tensor, str]:
    """Training and held-out images for the autoencoder, and the data set's name."""
    if config.data_dir is not None:
        from actlab.data.cifar import load_cifar10

        data = load_cifar10(config.data_dir, limit_train=config.limit_train,
                            limit_test=config.n_eval)
    else:
        from actlab.data.digits import load_digits

        data = load_digits(image_size=config.image_size)
    return data.x_train, data.x_test[:config.n_eval], data.name


def checkpoint_steps(config: BiasComponentConfig) -> list[int]:
    """Evaluation steps (updates done): 0, geometric early, linear late, and the end."""
    return analysis.log_steps(config.steps, config.log_points)


def grid_steps(checkpoints: list[int], points: int) -> list[int]:
    """About ``points`` checkpoints for the image grids, log-spaced from 1% of training on."""
    trained = np.asarray([s for s in checkpoints if s > 0])
    if trained.size <= points:
        return trained.tolist()
    targets = np.geomspace(max(1.0, trained[-1] / 100), trained[-1], points)
    return sorted({int(trained[np.argmin(np.abs(np.log(trained) - np.log(t)))]) for t in targets})


@torch.no_grad()
def measure_checkpoint(model: Any, x: Tensor) -> tuple[dict[str, float], dict[str, Tensor]]:
    """Loss, bias/deviation similarities and latent bias share on ``x``; and the decoded parts."""
    from actlab.nn.autoencoder import bias_decomposition, image_similarity

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


def train_autoencoder(config: BiasComponentConfig, activation: str, seed: int,
                      x_train: Tensor, x_eval: Tensor, result: UnitResult, run: str,
                      progress: Any = None) -> tuple[str, dict[str, Any]]:
    """Train one autoencoder, add its rows to ``result``; its status and grid images."""
    from actlab.init import initialize_
    from actlab.nn.autoencoder import ConvAutoencoder

    torch.manual_seed(seed)  # same seed, same initial weights for both activations
    model = ConvAutoencoder(x_train.shape[1], config.widths, config.convs_per_stage, activation)
    if config.init != "torch-default":
        # torchvision's VGG: He normal with fan_out, zero biases
        initialize_(model, config.init, activation="relu", mode="fan_out",
                    generator=torch.Generator().manual_seed(seed))
    model = place(model)  # initialised on the CPU: the same weights on every device
    checkpoints = checkpoint_steps(config)
    shown = set(grid_steps(checkpoints, config.grid_points))
    images: dict[str, Any] = {"steps": [], "input": _rounded(x_eval[:config.n_show]),
                              **{p: [] for p in PARTS}}

    def checkpoint(trainer: Any) -> dict[str, float]:
        stats, parts = measure_checkpoint(model, x_eval)
        if trainer.step in shown:
            images["steps"].append(trainer.step)
            for p in PARTS:
                images[p].append(_rounded(parts[p][:config.n_show]))
        return stats

    # the batch loss after update k, logged for k = 1, 1 + loss_every, ... and the last one
    losses = LossLog(at=[*range(1, config.steps + 1, config.loss_every), config.steps])
    evals = EvalLog(checkpoint, at=checkpoints)
    settings = settings_from(config, loss="half_sse")  # whole images per example
    outcome = train(model, x_train, x_train, settings, callbacks=[losses, evals],
                    generator=torch.Generator().manual_seed(seed), progress=progress)
    pixels = x_train[0].numel()
    rows: dict[int, list[tuple[str, float]]] = {}
    for r in losses.rows:  # an update's loss line comes before its checkpoint's
        rows.setdefault(r["step"], []).append(("train_loss",
                                               half_sse_to_mse_mean(r["loss"], pixels)))
    for r in evals.rows:
        rows.setdefault(r["step"], []).extend((k, v) for k, v in r.items() if k != "step")
    for step in sorted(rows):
        for metric, value in rows[step]:
            result.add(run, seed, step, "", metric, value)
    if outcome.status == STATUS_DIVERGED:
        result.add(run, seed, outcome.steps + 1, "", "test_loss", math.nan)
    return outcome.status, images


def _rounded(t: Tensor) -> list:
    return np.round(t.detach().double().cpu().numpy(), 4).tolist()
