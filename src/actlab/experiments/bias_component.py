"""``bias-component``: what a conv autoencoder decodes from the activation-bias component.

Seed 000 §3, eq. 8, Figs. 5, 17, 18 and App. D. A small VGG-style autoencoder
(:class:`~actlab.nn.autoencoder.ConvAutoencoder`) learns to reconstruct images with plain
``relu`` (unshifted) or ``relu:shift=theory`` (every ReLU becomes ``ReLU(z) - 0.23``). Both
models of a seed start from the same weights and see the same batches. At log- and
linearly-spaced checkpoints, on a fixed set of held-out images, we measure

* the reconstruction loss (per-pixel mean squared error; Fig. 17's residual is shifted minus
  unshifted);
* the similarity between the image decoded from the bias component ``h_bias`` alone (the
  channel mean at every location, eq. 8) and the full reconstruction: Pearson correlation
  (``similarity``, the headline), cosine and PSNR; the same for the deviation ``h_dev``;
* the share of the latent's energy in the bias component ``|h_bias|^2 / |h|^2``.

Data: scikit-learn's digits upsampled to ``image_size`` (default 16, standardized), or
CIFAR-10 from its python pickle files when ``data_dir`` is set (``--set data_dir=PATH``;
nothing is downloaded). The step-0 checkpoint is the untrained model; the peak of the
similarity curve is searched over the trained checkpoints (step >= 1).

``summary.json``::

    {"data": ..., "similarity": "correlation", "scale": {...},
     "unshifted": {"similarity_peak_step", "similarity_peak", "similarity_final",
                   "similarity_initial", "similarity_first_trained", "final_loss", ...},
     "shifted": {... the same ...},
     "final_loss_unshifted", "final_loss_shifted", "loss_residual_final",
     "loss_residual_early", "early_step", "failed_units"}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from actlab import analysis
from actlab.errors import ConfigError
from actlab.runner.claims import claim_id
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.train.classify import OPTIMIZERS, TrainSettings, torch_threads

PREFIX = "ae"
CONDITIONS = ("unshifted", "shifted")
PARTS = ("full", "bias", "dev")
# Per-model summary keys; None when no checkpoint qualifies (see describe_condition).
LANDMARKS = ("similarity_peak_step", "similarity_peak", "similarity_final", "final_loss",
             "first_trained_step", "similarity_first_trained")
# A rise or fall of the bias-only similarity counts when it exceeds this (correlation units);
# fixed before any run, as a plain "clearly more than noise between checkpoints" margin.
RISE_FALL_MARGIN = 0.05


@dataclass
class BiasComponentConfig:
    """Scale and settings of the bias-component study (see the module docstring)."""

    unshifted: str = "relu"
    shifted: str = "relu:shift=theory"
    data_dir: str | None = None  # CIFAR-10 python files; digits when unset
    image_size: int = 16  # digits are upsampled to this size
    limit_train: int = 10000  # CIFAR-10 training images used
    widths: list[int] = field(default_factory=lambda: [16, 64])
    convs_per_stage: int = 2
    init: str = "he"  # he (fan_out, as torchvision's VGG) or any actlab.init scheme
    steps: int = 3000
    batch_size: int = 64
    optimizer: str = "adam"
    lr: float = 1e-3
    log_points: int = 40
    loss_every: int = 10
    n_eval: int = 256  # held-out images for loss and similarity
    n_show: int = 4  # images in the reconstruction grids
    grid_points: int = 6  # checkpoints shown in the grids
    min_fit: float = 0.5  # similarity landmarks use checkpoints with loss <= min_fit * initial
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "log_points", "loss_every", "n_eval", "n_show",
                     "grid_points", "threads", "convs_per_stage", "limit_train"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.image_size < 8:
            raise ConfigError("image_size", f"must be >= 8 (digits are 8x8), got {self.image_size}")
        if not self.widths or min(self.widths) < 1:
            raise ConfigError("widths", f"need positive channel counts, got {self.widths}")
        if self.image_size % 2 ** (len(self.widths) - 1):
            raise ConfigError("image_size", f"must be divisible by 2**(len(widths)-1) = "
                              f"{2 ** (len(self.widths) - 1)}, got {self.image_size}")
        from actlab.init import SCHEMES

        if self.init not in SCHEMES:
            raise ConfigError("init", f"must be one of {', '.join(SCHEMES)}, got {self.init!r}")
        if not 0 < self.min_fit <= 1:
            raise ConfigError("min_fit", f"must be in (0, 1], got {self.min_fit}")
        if not self.lr > 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, "
                              f"got {self.optimizer!r}")
        import actlab

        for name in ("unshifted", "shifted"):
            try:
                actlab.activation(getattr(self, name))
            except ValueError as exc:
                raise ConfigError(name, str(exc)) from None
        if self.data_dir is not None:
            from actlab.data.cifar import find_cifar10

            try:
                find_cifar10(self.data_dir)
            except FileNotFoundError as exc:
                raise ConfigError("data_dir", str(exc)) from None


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

    h = model.encode(x)
    h_bias, h_dev = bias_decomposition(h)
    parts = {"full": model.decode(h), "bias": model.decode(h_bias), "dev": model.decode(h_dev)}
    out = {"test_loss": float((parts["full"] - x).pow(2).mean()),
           "bias_share": float(h_bias.pow(2).sum() / h.pow(2).sum().clamp_min(1e-30)),
           "latent_mean": float(h.mean())}
    for part in ("bias", "dev"):
        for kind in ("correlation", "cosine", "psnr"):
            values = image_similarity(parts[part], parts["full"], kind)
            out[f"{part}_{kind}"] = float(values[torch.isfinite(values)].mean())
        # image content the component recovers on its own (vs the input, not the model)
        out[f"{part}_input_correlation"] = float(image_similarity(parts[part], x).mean())
    out["full_input_correlation"] = float(image_similarity(parts["full"], x).mean())
    return out, parts


class _FlatImages(nn.Module):
    """Adapter: flat ``(N, C*H*W)`` rows in and out, so the generic trainer's ``mse`` loss
    (half the squared error summed per example) applies to whole images."""

    def __init__(self, model: nn.Module, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.model = model
        self.shape = shape

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x.view(-1, *self.shape)).flatten(1)


def train_autoencoder(config: BiasComponentConfig, activation: str, seed: int,
                      x_train: Tensor, x_eval: Tensor, result: UnitResult, run: str,
                      progress: Any = None) -> tuple[str, dict[str, Any]]:
    """Train one autoencoder, add its rows to ``result``; its status and grid images."""
    from actlab.init import initialize_
    from actlab.nn.autoencoder import ConvAutoencoder
    from actlab.train.classify import train

    torch.manual_seed(seed)  # same seed, same initial weights for both activations
    model = ConvAutoencoder(x_train.shape[1], config.widths, config.convs_per_stage, activation)
    if config.init != "torch-default":
        # torchvision's VGG: He normal with fan_out, zero biases
        initialize_(model, config.init, activation="relu", mode="fan_out",
                    generator=torch.Generator().manual_seed(seed))
    checkpoints = checkpoint_steps(config)
    shown = set(grid_steps(checkpoints, config.grid_points))
    to_log = set(checkpoints)
    pixels = x_train[0].numel()
    images: dict[str, Any] = {"steps": [], "input": _rounded(x_eval[:config.n_show]),
                              **{p: [] for p in PARTS}}

    def checkpoint(updates: int) -> None:
        stats, parts = measure_checkpoint(model, x_eval)
        for metric, value in stats.items():
            result.add(run, seed, updates, "", metric, value)
        if updates in shown:
            images["steps"].append(updates)
            for p in PARTS:
                images[p].append(_rounded(parts[p][:config.n_show]))

    def on_step(step: int, value: float) -> None:
        updates = step + 1
        if step % config.loss_every == 0 or updates == config.steps:
            # the trainer's loss is 0.5 * squared error summed over an image's pixels
            result.add(run, seed, updates, "", "train_loss", 2 * value / pixels)
        if updates in to_log:
            checkpoint(updates)

    checkpoint(0)
    settings = TrainSettings(optimizer=config.optimizer, lr=config.lr, steps=config.steps,
                             batch_size=config.batch_size, loss="mse")
    flat = _FlatImages(model, tuple(x_train.shape[1:]))
    x_flat = x_train.flatten(1)
    outcome = train(flat, x_flat, x_flat, settings, generator=torch.Generator().manual_seed(seed),
                    on_step=on_step, progress=progress)
    if outcome.status == STATUS_DIVERGED:
        result.add(run, seed, outcome.steps + 1, "", "test_loss", math.nan)
    return outcome.status, images


def _rounded(t: Tensor) -> list:
    return np.round(t.detach().double().numpy(), 4).tolist()


def _fmt(value: Any, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


@register
class BiasComponent(Experiment):
    """Unshifted vs shifted ReLU autoencoders: decode the bias component and the deviation."""

    name = "bias-component"
    description = ("Conv autoencoder: reconstructions from the activation-bias component (eq. 8), "
                   "unshifted vs shifted ReLU (seed 000 §3, App. D)")
    Config = BiasComponentConfig
    quick = {"steps": 700, "log_points": 24, "n_eval": 128}
    full = {"steps": 6000, "log_points": 50}
    default_seeds = 2
    seeds_per_unit = 1

    def units(self, config: BiasComponentConfig) -> list[dict[str, Any]]:
        """One unit per condition (each trains every seed of its group)."""
        return [{"condition": c, "activation": getattr(config, c)} for c in CONDITIONS]

    def run_unit(self, config: BiasComponentConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the condition's autoencoder for each seed; keep grid images per seed."""
        result = UnitResult()
        x_train, x_eval, name = load_images(config)
        run = f"{PREFIX}/{unit['condition']}"
        with torch_threads(config.threads):
            for seed in seeds:
                status, images = train_autoencoder(config, unit["activation"], seed, x_train,
                                                   x_eval, result, run, ctx.progress)
                result.data[str(seed)] = images
                result.data["dataset"] = name
                if status == STATUS_DIVERGED:
                    result.status = STATUS_DIVERGED
        return result

    def summarize(self, config: BiasComponentConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]], ctx: RunContext) -> dict:
        """Similarity peaks and final values per model, loss residuals; the figures."""
        dataset = next((r["data"].get("dataset") for r in results if r["data"]), None)
        summary: dict[str, Any] = {
            "data": dataset or ("cifar10" if config.data_dir else "digits"),
            "similarity": "correlation",
            "scale": {"steps": config.steps, "batch_size": config.batch_size,
                      "widths": list(config.widths), "convs_per_stage": config.convs_per_stage,
                      "init": config.init,
                      "image_size": 32 if config.data_dir else config.image_size,
                      "optimizer": f"{config.optimizer} lr={config.lr:g}",
                      "seeds": sorted({int(s) for s in table["seed"]}) if len(table) else []},
            "failed_units": [r["unit"] for r in results if r["status"] != "ok"],
        }
        for cond in CONDITIONS:
            summary[cond] = describe_condition(table, f"{PREFIX}/{cond}", config.min_fit)
            summary[f"final_loss_{cond}"] = summary[cond].get("final_loss")
        summary.update(early_step=None, loss_residual_early=None, loss_residual_final=None)
        residual = analysis.paired_residual(table, "test_loss", PREFIX)
        if not residual.empty:
            summary["early_step"] = analysis.early_step(list(residual.index), config.steps)
            summary["loss_residual_early"] = analysis.finite_mean(residual.loc[summary["early_step"]])
            summary["loss_residual_final"] = analysis.finite_mean(residual.iloc[-1])
        _figures(config, table, results, ctx)
        # Which of the seed's effects this run reproduced, in words (from the claims).
        summary["note"] = [f"{'reproduced' if c.held else 'NOT reproduced'}: {c.claim} "
                           f"({c.measured})" for c in self.claims(summary)]
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Rise and fall of the unshifted bias-only similarity, shifted < unshifted, losses."""
        src = "seed 000 §3.2, Figs. 5, 18"
        u, s = summary.get("unshifted", {}), summary.get("shifted", {})
        claims: list[Claim] = []
        peak, first = u.get("similarity_peak"), u.get("similarity_first_trained")
        final, last_step = u.get("similarity_final"), u.get("final_step")
        if None not in (peak, first, final):
            rise = peak - first > RISE_FALL_MARGIN
            fall = peak - final > RISE_FALL_MARGIN and u.get("similarity_peak_step") != last_step
            claims.append(Claim(
                "unshifted: the bias-only reconstruction first approaches the full one, then "
                f"diverges from it (rise and fall each > {RISE_FALL_MARGIN} in correlation)",
                f"correlation {_fmt(first)} (step {u.get('first_trained_step')}) -> peak "
                f"{_fmt(peak)} (step {u.get('similarity_peak_step')}) -> {_fmt(final)} "
                f"(step {last_step})", bool(rise and fall), src,
                id=claim_id(self.name, "unshifted", "bias-similarity-rises-and-falls"),
                value=peak - final, comparison="compound", threshold=RISE_FALL_MARGIN))
        if u.get("similarity_peak") is not None and s.get("similarity_peak") is not None:
            claims.append(Claim(
                "shifted: the bias component carries less image content (lower peak "
                "similarity of bias-only to full reconstruction)",
                f"peak correlation {_fmt(s['similarity_peak'])} shifted vs "
                f"{_fmt(u['similarity_peak'])} unshifted",
                s["similarity_peak"] < u["similarity_peak"], src,
                id=claim_id(self.name, "shifted", "lower-bias-peak-similarity"),
                value=s["similarity_peak"], comparison="<", threshold=u["similarity_peak"]))
        early = summary.get("loss_residual_early")
        if early is not None:
            claims.append(Claim(
                "shifted model has a higher reconstruction loss early in training",
                f"loss residual (shifted - unshifted) {_fmt(early)} at step "
                f"{summary.get('early_step')}", early > 0, "seed 000 App. D, Fig. 17",
                id=claim_id(self.name, "shifted", "higher-early-loss"), value=early,
                comparison=">", threshold=0.0))
        fu, fs = summary.get("final_loss_unshifted"), summary.get("final_loss_shifted")
        if fu is not None and fs is not None:
            claims.append(Claim(
                "shifted model reaches a lower final reconstruction loss",
                f"test MSE {_fmt(fs, 4)} shifted vs {_fmt(fu, 4)} unshifted", fs < fu,
                "seed 000 App. D, Fig. 17", id=claim_id(self.name, "shifted", "lower-final-loss"),
                value=fs, comparison="<", threshold=fu))
        return claims


def describe_condition(table: pd.DataFrame, run: str, min_fit: float = 0.5) -> dict[str, Any]:
    """Similarity trajectory landmarks (seed-mean curve) and the final loss of one model.

    The landmarks (first, peak, final) use only the checkpoints at which the mean held-out
    loss is at most ``min_fit`` times its step-0 value: before that the "full
    reconstruction" is not yet an image, and an untrained decoder maps ``h`` and ``h_bias``
    to nearly the same blur (correlation near 1 at step 0, an artefact, not information).
    """
    sim = analysis.curves(table, run, "bias_correlation")
    loss = analysis.curves(table, run, "test_loss")
    out: dict[str, Any] = dict.fromkeys(LANDMARKS)
    if sim.empty or loss.empty:
        return {**out, "status": "missing"}
    mean = sim.mean(axis=1)
    mean_loss = loss.mean(axis=1)
    fitted = mean_loss.index[(mean_loss <= min_fit * mean_loss.iloc[0]) & (mean_loss.index > 0)]
    trained = mean[mean.index.isin(fitted)].dropna()
    out.update({
        "similarity_initial": analysis.finite_mean([mean.iloc[0]]),
        "final_step": int(mean.index[-1]),
        "final_loss": analysis.finite_mean(loss.iloc[-1]),
        "seeds": int(sim.shape[1]),
    })
    if not trained.empty:
        out.update(similarity_peak_step=int(trained.idxmax()),
                   similarity_peak=float(trained.max()),
                   similarity_final=float(trained.iloc[-1]),
                   first_trained_step=int(trained.index[0]),
                   similarity_first_trained=float(trained.iloc[0]))
    for metric, key in (("dev_correlation", "dev_similarity_final"),
                        ("bias_input_correlation", "bias_input_correlation_final"),
                        ("bias_psnr", "bias_psnr_final"), ("bias_share", "bias_share_final")):
        curve = analysis.curves(table, run, metric)
        if not curve.empty:
            out[key] = analysis.finite_mean(curve.iloc[-1])
    return out


def _figures(config: BiasComponentConfig, table: pd.DataFrame, results: list[dict[str, Any]],
             ctx: RunContext) -> None:
    plt = analysis.pyplot()
    if table.empty:
        return
    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
    analysis.plot_pair_curves(axes[3], table, PREFIX, "bias_input_correlation", log=True)
    axes[3].set_ylabel("correlation(bias-only, input)")
    axes[3].set_title("image content in the bias component", fontsize=9)
    analysis.plot_pair_curves(axes[0], table, PREFIX, "bias_correlation", log=True)
    axes[0].set_ylabel("correlation(bias-only, full reconstruction)")
    axes[0].set_title("bias component vs full reconstruction", fontsize=9)
    analysis.plot_pair_curves(axes[1], table, PREFIX, "dev_correlation", log=True)
    axes[1].set_ylabel("correlation(deviation-only, full)")
    axes[1].set_title("deviation vs full reconstruction", fontsize=9)
    analysis.plot_pair_curves(axes[2], table, PREFIX, "bias_share", log=True)
    axes[2].set_ylabel("|h_bias|^2 / |h|^2")
    axes[2].set_title("latent energy in the bias component", fontsize=9)
    for ax in axes:
        ax.legend(fontsize=7)
    ctx.save_figure(fig, "similarity")

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    analysis.plot_pair_curves(axes[0], table, PREFIX, "test_loss", log=True)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("held-out reconstruction MSE")
    axes[0].legend(fontsize=7)
    residual = analysis.paired_residual(table, "test_loss", PREFIX)
    x = np.maximum(residual.index.to_numpy(dtype=float), 1)
    axes[1].plot(x, residual.to_numpy(), color="gray", alpha=0.4, lw=0.7)
    axes[1].plot(x, residual.mean(axis=1).to_numpy(), color="black", lw=2)
    axes[1].axhline(0, color="k", lw=0.5, ls="--")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("L_shifted - L_unshifted")
    axes[1].set_title("reconstruction loss residual (Fig. 17)", fontsize=9)
    ctx.save_figure(fig, "fig17_loss_residual")

    for cond in CONDITIONS:
        entry = next((r for r in results if r["unit"].get("condition") == cond and r["data"]),
                     None)
        if entry is None:
            continue
        seeds = sorted(int(k) for k in entry["data"] if k.isdigit())
        if seeds:
            _image_grid(entry["data"][str(seeds[0])], cond, seeds[0], ctx)


def _image_grid(images: dict[str, Any], cond: str, seed: int, ctx: RunContext) -> None:
    """Rows: per shown image, full / bias-only / deviation-only; columns: input, checkpoints."""
    plt = analysis.pyplot()
    steps = images["steps"]
    inputs = np.asarray(images["input"])
    if not steps or inputs.size == 0:
        return
    n_img = inputs.shape[0]
    fig, axes = plt.subplots(3 * n_img, len(steps) + 1, squeeze=False,
                             figsize=(1.1 * (len(steps) + 1), 1.1 * 3 * n_img))
    for i in range(n_img):
        for r, part in enumerate(PARTS):
            row = 3 * i + r
            ax = axes[row, 0]
            low, high = float(inputs[i].min()), float(inputs[i].max())
            if r == 0:  # the input image stands in the label column of the "full" row
                ax.imshow(_display(inputs[i], low, high), cmap="gray")
                ax.set_title("input" if i == 0 else "", fontsize=7)
                ax.set_xlabel("input | full", fontsize=7)
            else:
                ax.text(0.5, 0.5, part, ha="center", va="center", fontsize=8,
                        transform=ax.transAxes)
            for j, step in enumerate(steps):
                axes[row, j + 1].imshow(_display(np.asarray(images[part][j])[i], low, high),
                                        cmap="gray")
                if row == 0:
                    axes[row, j + 1].set_title(f"step {step}", fontsize=7)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_visible(False)
    fig.suptitle(f"{cond} (seed {seed}): full / bias-only / deviation-only reconstructions",
                 fontsize=9)
    ctx.save_figure(fig, f"fig5_grid_{cond}")


def _display(image: np.ndarray, low: float, high: float) -> np.ndarray:
    """``(C, H, W)`` -> ``(H, W[, C])`` mapped from the input's ``[low, high]`` to [0, 1].

    Every panel of one image shares its input's range, so a faint reconstruction looks faint.
    """
    image = np.asarray(image, dtype=float)
    image = image[0] if image.shape[0] == 1 else np.transpose(image, (1, 2, 0))
    return np.clip((image - low) / (high - low), 0, 1) if high > low else np.zeros_like(image)
