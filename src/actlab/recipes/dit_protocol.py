"""The DiT protocol shared by ``dit-shift`` and ``dit-percentile``: train a class-conditional
DiT per condition and seed, and measure it along the way.

One run (:func:`train_condition`) trains :class:`~actlab.nn.dit.DiT` with the ε-loss of
:mod:`actlab.recipes.diffusion` (AdamW, DiT's linear β schedule, T = 1000) and an
:class:`~actlab.train.ema.EMA` of the weights, and records, under ``run``:

* ``batch_loss``: the batch loss averaged over each window of ``loss_every`` updates;
* at ``log_points`` log-spaced checkpoints (0 included), in eval mode:
  ``train_loss`` (the ε-loss of the first ``loss_samples`` training examples at fixed
  steps t and noise ε, the same draws for every condition and seed, so residuals are
  paired), ``hidden_mean`` of the residual stream after every block (layer ``blockN``, the
  statistic of "Rethinking Activation Functions" §2.2) and ``act_mean`` of every MLP
  activation (``actN``), both on a fixed probe batch of noised training images;
* at ``eval_points`` evenly spaced checkpoints (the last is the end of training): DDIM
  samples of the EMA model with classifier-free guidance, ``fid_samples`` of them with
  fixed noise and fixed class labels (so every checkpoint and condition is scored on the
  same number of samples from the same noise), their FID and IS with the digits classifier
  (:func:`~actlab.measure.feature_classifier.digits_feature_network`, offline; metric
  names carry the network's name) and ``detail_ratio`` (our sharpness proxy,
  :func:`detail_ratio`); the first ``grid_per_class`` samples of each class go to the
  unit's data as a sample grid;
* with ``timed=True``: training steps per second by :class:`~actlab.train.timing.StepClock`
  (thread CPU time on the CPU, CUDA events on a GPU) during warm-up and after it, steps
  with an evaluation left out.

Scaling ours (labelled so): "Rethinking Activation Functions" §4.2 trains DiT-B/2 for 400,000
steps, with EMA decay γ = 0.9999 (an average over 1/(1 − γ) = 10⁴ updates, 1/40 of
training). "Bug or Feature²" trains DiT-S/2, whose samples "improve progressively to 300K
steps" (App. B.2, the only length it gives for that model: we read it as the training
length), with T_warm = 50,000 warm-up steps (§7; 1/6 of 300K). :func:`scaled_decay` and
:func:`scaled_warmup` keep those fractions of the experiment's paper model
(``DiTProtocolConfig.paper_steps``) at our number of steps, and give back the papers' values
at the papers' lengths.

Data: the 8x8 digits in [-1, 1] (:func:`~actlab.data.digits.load_digits_pixels`), or VAE
latents (``data="latents:DIR"``, :class:`~actlab.data.latents.LatentShards` scaled by
0.18215 as in "Bug or Feature²" App. D.4) for the papers' models. actlab has no VAE decoder,
so latent runs record losses and hidden states but no FID, IS or sample grids.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from actlab import analysis
from actlab.errors import ConfigError
from actlab.runner.fields import CheckedConfig, checked
from actlab.train.callbacks import Callback, LossHistory
from actlab.train.placement import place, to_model_device, unit_device

PAPER_STEPS = 400_000  # "Rethinking Activation Functions" §4.2: DiT-B/2 for 400,000 steps
PAPER_EMA = 0.9999  # the DiT reference's EMA decay; "Bug or Feature²" §7's γ
PAPER_WARMUP = 50_000  # "Bug or Feature²" §7: T_warm for DiT-S/2
DIT_S2_STEPS = 300_000  # "Bug or Feature²" App. B.2: DiT-S/2 "improve progressively to 300K steps"
CUSTOM = "custom"
LOSS_SEED = 1_000_003  # fixed draws of the training-loss probe (ours)
PROBE_SEED = 1_000_033  # fixed probe batch of the hidden-state means (ours)
SAMPLE_SEED = 1_000_037  # fixed sampler noise (ours)
PROBE_IMAGES = 64
PROBE_STEPS = (50, 250, 500, 750)  # diffusion steps t of the probe batch, cycled (ours)


def scaled_decay(decay: float, steps: int, paper_steps: int = PAPER_STEPS) -> float:
    """An EMA decay that averages over the same fraction of training at ``steps`` as
    ``decay`` does at ``paper_steps``: ``1 − (1 − decay) · paper_steps / steps``, at least 0."""
    return max(0.0, 1.0 - (1.0 - decay) * paper_steps / steps)


def scaled_warmup(
    steps: int, paper_warmup: int = PAPER_WARMUP, paper_steps: int = PAPER_STEPS
) -> int:
    """Warm-up steps that are the same fraction of ``steps`` as ``paper_warmup`` of
    ``paper_steps``, at least 1."""
    return max(1, round(steps * paper_warmup / paper_steps))


@dataclass
class DiTProtocolConfig(CheckedConfig):
    """Model, data, training and measurement settings shared by the DiT experiments.

    ``paper_steps`` is the training length of the paper's DiT that the EMA and warm-up
    fractions are taken from (a class constant, not a field): :data:`PAPER_STEPS` for
    "Rethinking"'s DiT-B/2; an experiment on "Bug or Feature²"'s DiT-S/2 sets its own.
    """

    paper_steps: ClassVar[int] = PAPER_STEPS

    model: str = CUSTOM  # "custom" (the fields below) or a DiT name such as "DiT-B/2"
    hidden_size: int = checked(64, ge=4)
    depth: int = checked(4, ge=1)
    num_heads: int = checked(4, ge=1)
    patch_size: int = checked(2, ge=1)
    data: str = "digits"  # "digits" or "latents:DIR"
    steps: int = checked(3000, ge=2)
    batch_size: int = checked(64, ge=1)
    lr: float = checked(3e-3, gt=0)  # the library example's (docs/diffusion.md), ours
    weight_decay: float = checked(0.0, ge=0)
    log_points: int = checked(16, ge=2)
    eval_points: int = checked(4, ge=1)
    fid_samples: int = checked(500, ge=10)
    sample_steps: int = checked(50, ge=1)
    cfg_scale: float = checked(1.5, ge=1)  # "Bug or Feature²" §7 samples with s = 1.5
    loss_samples: int = checked(512, ge=1)
    loss_every: int = checked(10, ge=1)
    grid_per_class: int = checked(4, ge=1)
    threads: int = checked(1, ge=1)

    def check(self) -> None:
        """A known model name; a custom model fits the digits; the papers' models need
        latents; a data source we can read; one FID sample per class at least."""
        from actlab.nn.dit import dit_config

        if self.model != CUSTOM:
            try:
                dit_config(self.model)
            except ConfigError as err:
                raise ConfigError("model", f"{err.why}; or {CUSTOM}") from None
            if not self.data.startswith("latents:"):
                raise ConfigError(
                    "data",
                    f"model {self.model} is the papers' latent model: "
                    "give data=latents:DIR (VAE latent shards)",
                )
        elif self.hidden_size % self.num_heads:
            raise ConfigError(
                "num_heads", f"must divide hidden_size={self.hidden_size}, got {self.num_heads}"
            )
        if self.data == "digits" and 8 % self.patch_size:
            raise ConfigError("patch_size", f"must divide the 8x8 digits, got {self.patch_size}")
        if self.data != "digits" and not (
            self.data.startswith("latents:") and len(self.data) > len("latents:")
        ):
            raise ConfigError("data", f"must be digits or latents:DIR, got {self.data!r}")
        if self.fid_samples % 10:
            raise ConfigError(
                "fid_samples", f"must be a multiple of the 10 digit classes, got {self.fid_samples}"
            )

    @property
    def ema_decay(self) -> float:
        """The DiT reference's 0.9999 scaled to ``steps`` from ``paper_steps``
        (:func:`scaled_decay`)."""
        return scaled_decay(PAPER_EMA, self.steps, self.paper_steps)

    @property
    def warmup(self) -> int:
        """T_warm = 50,000 of ``paper_steps`` scaled to ``steps`` (:func:`scaled_warmup`)."""
        return scaled_warmup(self.steps, paper_steps=self.paper_steps)

    def log_steps(self) -> list[int]:
        """The training-loss and hidden-state checkpoints: log-spaced, 0 and the end included."""
        return sorted({0, *analysis.log_steps(self.steps, self.log_points), self.steps})

    def eval_steps(self) -> list[int]:
        """The FID checkpoints: ``eval_points`` evenly spaced, the last at the end."""
        return sorted(
            {
                max(1, round(self.steps * (i + 1) / self.eval_points))
                for i in range(self.eval_points)
            }
        )


# ------------------------------------------------------------------------------ data
@dataclass
class DiTData:
    """What a run trains on: a batch function, the fixed probe sets and the FID reference."""

    name: str
    shape: tuple[int, int, int]
    num_classes: int
    batch: Callable[[int, torch.Generator], tuple[Tensor, Tensor]]
    probe_x: Tensor
    probe_y: Tensor
    reference: Tensor | None  # the FID reference images (None: latents, no decoder)


def load_data(config: DiTProtocolConfig, seed: int) -> DiTData:
    """The digits (training split; test split as the FID reference) or latent shards."""
    if config.data == "digits":
        from actlab.data.digits import load_digits_pixels
        from actlab.data.sampling import EpochBatches

        digits = load_digits_pixels()
        x, y = digits.x_train, digits.y_train
        orders: list[EpochBatches] = []

        def batch(step: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
            if not orders:  # made on the first batch, from the run's generator
                orders.append(EpochBatches(len(x), config.batch_size, generator))
            idx = orders[0](step)
            return x[idx], y[idx]

        n = min(config.loss_samples, len(x))
        return DiTData(
            "digits-pixels",
            tuple(x.shape[1:]),
            digits.num_classes,
            batch,
            x[:n],
            y[:n],
            digits.x_test,
        )
    from actlab.data.latents import SD_VAE_SCALE, LatentShards

    shards = LatentShards(config.data[len("latents:") :], scale=SD_VAE_SCALE)
    n = min(config.loss_samples, len(shards))
    probe_x, probe_y = shards.get(list(range(n)))

    def latent_batch(step: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        return shards.batch(step, config.batch_size, generator_seed=seed)

    return DiTData(
        "latents",
        tuple(shards.latent_shape),
        max(shards.num_classes, 1),
        latent_batch,
        probe_x.float(),
        probe_y.long(),
        None,
    )


def build_model(
    config: DiTProtocolConfig,
    data: DiTData,
    *,
    activation: str,
    norm: str,
    seed: int,
    bias: bool = True,
) -> nn.Module:
    """The DiT of a condition, its weights drawn from ``seed`` (the same for every condition:
    activation and norm specs add no parameters here) and placed on the unit's device."""
    from actlab.nn.dit import DiT, DiTConfig, dit_config

    channels, size, _ = data.shape
    if config.model == CUSTOM:
        dit = DiTConfig(
            input_size=size,
            patch_size=config.patch_size,
            in_channels=channels,
            hidden_size=config.hidden_size,
            depth=config.depth,
            num_heads=config.num_heads,
            num_classes=data.num_classes,
            learn_sigma=False,
            activation=activation,
            norm=norm,
            bias=bias,
        )
    else:  # the reference's model, learned variance included
        dit = dit_config(
            config.model,
            input_size=size,
            in_channels=channels,
            num_classes=data.num_classes,
            activation=activation,
            norm=norm,
            bias=bias,
        )
    return place(DiT(dit, seed=seed))


# ------------------------------------------------------------------------------ measures
def detail_ratio(samples: Tensor, reference: Tensor) -> float:
    """Our sharpness proxy: the mean squared 4-neighbour Laplacian of ``samples`` over that of
    ``reference`` (interior pixels). Blurred samples score below 1; real detail scores 1."""

    def energy(x: Tensor) -> Tensor:
        x = x.float()
        lap = (
            4 * x[..., 1:-1, 1:-1]
            - x[..., :-2, 1:-1]
            - x[..., 2:, 1:-1]
            - x[..., 1:-1, :-2]
            - x[..., 1:-1, 2:]
        )
        return lap.pow(2).mean()

    return float(energy(samples)) / max(float(energy(reference.to(samples.device))), 1e-12)


def short_layer(layer: str) -> str:
    """``blocks.3`` -> ``block3``, ``blocks.3.mlp.act`` -> ``act3``."""
    parts = layer.split(".")
    if len(parts) >= 2 and parts[0] == "blocks" and parts[1].isdigit():
        return f"block{parts[1]}" if len(parts) == 2 else f"act{parts[1]}"
    return layer


class _Evaluator(Callback):
    """Checkpoint measurements (see the module docstring), in eval mode, then back."""

    def __init__(
        self,
        config: DiTProtocolConfig,
        data: DiTData,
        ema: Any,
        result: Any,
        run: str,
        seed: int,
        network: Any,
    ) -> None:
        from actlab.recipes.diffusion import GaussianDiffusion

        self.log_at, self.eval_at = set(config.log_steps()), set(config.eval_steps())
        super().__init__(at=self.log_at | self.eval_at)
        self.config, self.data, self.ema, self.result = config, data, ema, result
        self.run, self.seed, self.network = run, seed, network
        self.diffusion = GaussianDiffusion.linear()
        g = torch.Generator().manual_seed(LOSS_SEED)
        n = len(data.probe_x)
        self.loss_t = torch.randint(0, self.diffusion.num_timesteps, (n,), generator=g)
        self.loss_noise = torch.randn(data.probe_x.shape, generator=g)
        g = torch.Generator().manual_seed(PROBE_SEED)
        k = min(PROBE_IMAGES, n)
        self.probe_t = torch.tensor([PROBE_STEPS[i % len(PROBE_STEPS)] for i in range(k)])
        self.probe_xt = self.diffusion.q_sample(
            data.probe_x[:k].double(),
            self.probe_t,
            torch.randn(data.probe_x[:k].shape, generator=g, dtype=torch.float64),
        ).float()
        self.grids: dict[str, list] = {}

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        model = trainer.model
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                if step in self.log_at:
                    self._log(model, step)
                if step in self.eval_at and self.data.reference is not None:
                    self._quality(step)
        finally:
            model.train(was_training)

    def _log(self, model: nn.Module, step: int) -> None:
        from actlab.probe.probe import Probe
        from actlab.recipes.diffusion import loss_terms

        x0, y, noise = to_model_device(model, self.data.probe_x, self.data.probe_y, self.loss_noise)
        terms = loss_terms(self.diffusion, model, x0, y, self.loss_t, noise)
        self.result.add(self.run, self.seed, step, "", "train_loss", float(terms["loss"].mean()))
        probe = Probe(
            model,
            every=[0],
            blocks=list(model.blocks),
            weights=False,
            metrics=["hidden_mean", "act_mean"],
        )
        try:
            xt, t, y = to_model_device(
                model, self.probe_xt, self.probe_t, self.data.probe_y[: len(self.probe_t)]
            )
            model(xt, t, y)
            probe.step()
            table = probe.table()
        finally:
            probe.close()
        for row in table.itertuples():
            self.result.add(
                self.run, self.seed, step, short_layer(row.layer), row.metric, float(row.value)
            )

    def _quality(self, step: int) -> None:
        from actlab.measure.fid import generative_metrics
        from actlab.recipes.diffusion import ddim_sample

        config, data = self.config, self.data
        classes = data.num_classes
        labels = torch.arange(classes).repeat(config.fid_samples // classes)
        samples = ddim_sample(
            self.ema.module,
            self.diffusion,
            (len(labels), *data.shape),
            labels,
            generator=torch.Generator().manual_seed(SAMPLE_SEED),
            steps=config.sample_steps,
            cfg_scale=config.cfg_scale,
            clip_denoised=True,
        ).clamp(-1.0, 1.0)
        # On the meta device there are no pixel values to check and score (the sampler ran).
        scores = (
            {} if samples.is_meta else generative_metrics(samples, data.reference, self.network)
        )
        for key, value in scores.items():
            if not key.startswith("is_std"):
                self.result.add(self.run, self.seed, step, "", key, value)
        self.result.add(
            self.run, self.seed, step, "", "detail_ratio", detail_ratio(samples, data.reference)
        )
        # labels cycle through the classes: sample i*classes + c is the i-th of class c
        per = min(config.grid_per_class, config.fid_samples // classes)
        grid = samples[: per * classes].reshape(per, classes, *data.shape[1:]).transpose(0, 1)
        self.grids[str(step)] = grid.float().cpu().numpy().round(3).tolist()


class _Stamp(Callback):
    """Stamps the step clock after every update count, 0 included (after the evaluator)."""

    def __init__(self, clock: Any) -> None:
        super().__init__(every=1)
        self.clock = clock

    def fires(self, step: int) -> bool:
        """Every update count."""
        return True

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """One stamp."""
        self.clock.stamp()


def step_rates(intervals: np.ndarray, skip: set[int], warmup: int) -> dict[str, float]:
    """Steps/s during warm-up and after it (``throughput``'s block median) from per-step
    intervals (interval i is update i + 1 plus the callbacks after it), leaving out the
    updates in ``skip`` (those followed by an evaluation)."""
    from actlab.train.timing import throughput

    keep = np.array([i + 1 not in skip for i in range(len(intervals))], dtype=bool)
    index = np.arange(len(intervals))
    warm = intervals[keep & (index < warmup)]
    after = intervals[keep & (index >= warmup)]
    out = dict.fromkeys(
        ("steps_per_s_warmup", "steps_per_s_warmup_noise", "steps_per_s", "steps_per_s_noise"),
        math.nan,
    )
    if len(warm):
        out["steps_per_s_warmup"], out["steps_per_s_warmup_noise"] = throughput(warm)
    if len(after):
        out["steps_per_s"], out["steps_per_s_noise"] = throughput(after)
    return out


def train_condition(
    config: DiTProtocolConfig,
    result: Any,
    run: str,
    seed: int,
    *,
    activation: str,
    norm: str = "layernorm",
    bias: bool = True,
    timed: bool = False,
    progress: Callable[..., Any] | None = None,
) -> str:
    """Train one condition for one seed, adding its rows to ``result`` (and its sample grids
    to ``result.data[f"{run}/seed{seed}"]``); returns the trainer's status."""
    from actlab.measure.feature_classifier import digits_feature_network
    from actlab.recipes.diffusion import DiffusionLoss, GaussianDiffusion
    from actlab.train.ema import EMA
    from actlab.train.loop import Trainer
    from actlab.train.settings import TrainSettings
    from actlab.train.timing import StepClock

    data = load_data(config, seed)
    model = build_model(config, data, activation=activation, norm=norm, seed=seed, bias=bias)
    network = None
    if data.reference is not None:
        network = digits_feature_network(image_size=data.shape[1], channels=data.shape[0])
        place(network.module)
    generator = torch.Generator().manual_seed(seed)  # batch order, t, ε and label dropout
    ema = EMA(model, decay=config.ema_decay)
    history = LossHistory()
    evaluator = _Evaluator(config, data, ema, result, run, seed, network)
    clock = StepClock(unit_device())
    settings = TrainSettings(
        optimizer="adamw",
        lr=config.lr,
        weight_decay=config.weight_decay,
        steps=config.steps,
        batch_size=config.batch_size,
        log_every=config.steps,
        eval_every=0,
        checkpoint_every=0,
    )
    trainer = Trainer(
        model,
        settings,
        lambda step: data.batch(step, generator),
        loss_fn=DiffusionLoss(GaussianDiffusion.linear(), generator),
        callbacks=[history, ema, evaluator, _Stamp(clock)],
        progress=progress,
    )
    outcome = trainer.fit()
    losses = np.asarray(history.values(), dtype=float)
    for start in range(0, len(losses), config.loss_every):
        window = losses[start : start + config.loss_every]
        result.add(run, seed, start + len(window), "", "batch_loss", float(window.mean()))
    if outcome.status != "ok":
        result.add(run, seed, len(losses) + 1, "", "batch_loss", math.nan)
        return outcome.status
    if timed:
        skip = evaluator.log_at | evaluator.eval_at
        for metric, value in step_rates(clock.intervals(), skip, config.warmup).items():
            result.add(run, seed, config.steps, "", metric, value)
    if evaluator.grids:
        result.data[f"{run}/seed{seed}"] = {"grids": evaluator.grids}
    return outcome.status


# ------------------------------------------------------------------------------ summaries
FID = "fid_digits-classifier"
IS = "is_digits-classifier"


def paired(table: pd.DataFrame, run: str, base: str, metric: str, layer: str = "") -> pd.DataFrame:
    """Per checkpoint: mean and sample sd over seeds of ``run − base`` (paired by seed), and
    the number of seeds."""
    a = analysis.curves(table, run, metric, layer)
    b = analysis.curves(table, base, metric, layer)
    diff = (a - b).dropna(how="all")
    return pd.DataFrame(
        {"mean": diff.mean(axis=1), "sd": diff.std(axis=1, ddof=1), "n": diff.count(axis=1)}
    )


# What :func:`spread_numbers` returns when nothing can be judged (claims start from it).
EMPTY_SPREAD: dict[str, Any] = {
    "high": None,
    "low": None,
    "seeds": 0,
    "checkpoints": 0,
    "worst_step": None,
    "worst_mean": None,
}


def spread_numbers(
    diff: pd.DataFrame, steps: Sequence[int] | None = None, margin: float | pd.Series = 0.0
) -> dict[str, Any]:
    """The worst checkpoint of a paired difference against ``margin`` within the seed spread.

    ``high`` = max over checkpoints of (mean − margin + sd): at most 0 means the difference
    stays at or below the margin everywhere even at the top of its spread; ``low`` = max of
    (mean − margin − sd): above 0 means some checkpoint is above the margin beyond its spread;
    ``seeds`` the fewest seeds at a checkpoint (under 2: no spread, the values are None).
    """
    if steps is not None:
        diff = diff.loc[[s for s in steps if s in diff.index]]
    if diff.empty:
        return dict(EMPTY_SPREAD)
    excess = diff["mean"] - margin
    seeds = int(diff["n"].min())
    if seeds < 2:
        return {**EMPTY_SPREAD, "seeds": seeds, "checkpoints": len(diff)}
    worst = excess.idxmax()
    return {
        "high": float((excess + diff["sd"]).max()),
        "low": float((excess - diff["sd"]).max()),
        "seeds": seeds,
        "checkpoints": len(diff),
        "worst_step": int(worst) if isinstance(worst, (int, np.integer)) else str(worst),
        "worst_mean": float(diff["mean"][worst]),
    }


def within_spread(numbers: dict[str, Any]) -> str:
    """The precondition text of a claim decided only beyond the seed spread ('' when decided)."""
    if numbers.get("seeds", 0) < 2:
        return "fewer than 2 seeds: no seed spread"
    if numbers["high"] > 0 >= numbers["low"]:
        return "within the seed spread"
    return ""


def condition_summary(table: pd.DataFrame, run: str, depth: int) -> dict[str, Any]:
    """Per condition: final FID / IS / detail (seed mean and sd), final train loss and the
    hidden-state overshoot of every block (seed means of :func:`actlab.analysis.overshoot`:
    how far the trajectory goes past its final value) and the mean step of its peak."""
    out: dict[str, Any] = {}
    for metric in (FID, IS, "detail_ratio", "train_loss"):
        curve = analysis.curves(table, run, metric)
        if not curve.empty:
            mean, sd = analysis.mean_and_sd(curve.iloc[-1])
            out[f"final_{metric}"], out[f"final_{metric}_sd"] = mean, sd
    fid = analysis.curves(table, run, FID)
    if not fid.empty:
        out["fid_curve"] = {int(s): analysis.finite_mean(v) for s, v in fid.iterrows()}
    overshoot, step = {}, {}
    for block in range(depth):
        hidden = analysis.curves(table, run, "hidden_mean", f"block{block}")
        if not hidden.empty:
            overshoot[f"block{block}"] = analysis.finite_mean(analysis.overshoot(hidden))
            step[f"block{block}"] = analysis.finite_mean(analysis.overshoot_peak_step(hidden))
    out["overshoot_per_block"] = overshoot
    out["overshoot_step_per_block"] = step
    return out


def model_depth(config: DiTProtocolConfig) -> int:
    """Blocks of the configured model."""
    if config.model == CUSTOM:
        return config.depth
    from actlab.nn.dit import dit_config

    return dit_config(config.model).depth


def scale_summary(config: DiTProtocolConfig, table: pd.DataFrame) -> dict[str, Any]:
    """The protocol's settings as run (ours: the scaled EMA decay and warm-up)."""
    return {
        "model": config.model
        if config.model != CUSTOM
        else f"custom: hidden {config.hidden_size}, depth {config.depth}, heads "
        f"{config.num_heads}, patch {config.patch_size}",
        "data": config.data,
        "steps": config.steps,
        "batch_size": config.batch_size,
        "optimizer": f"adamw lr={config.lr:g} wd={config.weight_decay:g}",
        "ema_decay": config.ema_decay,
        "warmup": config.warmup,
        "fid_samples": config.fid_samples,
        "sample_steps": config.sample_steps,
        "cfg_scale": config.cfg_scale,
        "eval_steps": config.eval_steps(),
        "feature_network": "digits-classifier" if config.data == "digits" else None,
        "seeds": analysis.seeds_in(table) if len(table) else [],
    }


# ------------------------------------------------------------------------------ figures
def draw_sample_grids(
    results: list[dict[str, Any]],
    runs: Sequence[str],
    ctx: Any,
    name: str = "samples",
    seed: int = 0,
) -> None:
    """One panel per condition (rows) and FID checkpoint (columns): the first samples of each
    class (columns of a panel) from the fixed noise, seed ``seed``."""
    grids = {}
    for record in results:
        for key, value in (record.get("data") or {}).items():
            if key.endswith(f"/seed{seed}") and "grids" in value:
                grids[key.rsplit("/seed", 1)[0]] = value["grids"]
    runs = [r for r in runs if r in grids]
    if not runs:
        return
    plt = analysis.pyplot()
    steps = sorted({int(s) for r in runs for s in grids[r]})
    fig, axes = plt.subplots(
        len(runs), len(steps), squeeze=False, figsize=(2.2 * len(steps), 1.1 * len(runs) + 0.6)
    )
    for i, run in enumerate(runs):
        for j, step in enumerate(steps):
            ax = axes[i, j]
            ax.set_xticks([]), ax.set_yticks([])
            cell = grids[run].get(str(step))
            if cell is None:
                continue
            arr = np.asarray(cell, dtype=float)  # classes x per x H x W
            classes, per, h, w = arr.shape
            mosaic = arr.transpose(1, 2, 0, 3).reshape(per * h, classes * w)
            ax.imshow(mosaic, cmap="gray_r", vmin=-1, vmax=1)
            if i == 0:
                ax.set_title(f"step {step}", fontsize=8)
            if j == 0:
                ax.set_ylabel(run.split("/", 1)[-1], fontsize=7)
    fig.suptitle(
        f"EMA samples (fixed noise and labels, seed {seed}): classes 0-9 across", fontsize=9
    )
    ctx.save_figure(fig, name)


def draw_fid_curves(table: pd.DataFrame, runs: Sequence[str], ctx: Any, name: str = "fid") -> None:
    """FID (digits-classifier features) and IS over training per condition, mean ± sd."""
    plt = analysis.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    drawn = False
    for run in runs:
        for ax, metric in zip(axes, (FID, IS)):
            curve = analysis.curves(table, run, metric)
            if curve.empty:
                continue
            drawn = True
            mean, sd = curve.mean(axis=1), curve.std(axis=1, ddof=1).fillna(0.0)
            ax.errorbar(
                curve.index, mean, yerr=sd, capsize=3, marker="o", ms=3, label=run.split("/", 1)[-1]
            )
    if not drawn:
        plt.close(fig)
        return
    axes[0].set_title("FID (digits-classifier features), mean ± sd over seeds", fontsize=9)
    axes[1].set_title("IS (digits-classifier logits), mean ± sd over seeds", fontsize=9)
    for ax in axes:
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    ctx.save_figure(fig, name)


def draw_residuals(
    table: pd.DataFrame, runs: Sequence[str], base: str, ctx: Any, name: str = "loss_residuals"
) -> None:
    """Paired residuals against ``base`` (mean ± sd over seeds): training loss and FID."""
    plt = analysis.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for run in runs:
        if run == base:
            continue
        for ax, metric in zip(axes, ("train_loss", FID)):
            diff = paired(table, run, base, metric)
            if diff.empty:
                continue
            ax.errorbar(
                diff.index,
                diff["mean"],
                yerr=diff["sd"].fillna(0.0),
                capsize=3,
                marker="o",
                ms=3,
                label=run.split("/", 1)[-1],
            )
    short = base.split("/", 1)[-1]
    axes[0].set_title(f"training-loss residual (condition − {short}), fixed draws", fontsize=9)
    axes[1].set_title(f"FID residual (condition − {short})", fontsize=9)
    for ax in axes:
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xlabel("step")
        ax.set_xscale("symlog", linthresh=10)
    axes[0].legend(fontsize=7)
    ctx.save_figure(fig, name)


def draw_hidden_means(
    table: pd.DataFrame, runs: Sequence[str], depth: int, ctx: Any, name: str = "hidden_means"
) -> None:
    """The residual-stream mean after every block over training, per condition (seed mean)."""
    plt = analysis.pyplot()
    cols = min(depth, 6)
    rows = math.ceil(depth / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False)
    for block in range(depth):
        ax = axes[block // cols, block % cols]
        for run in runs:
            curve = analysis.curves(table, run, "hidden_mean", f"block{block}")
            if not curve.empty:
                ax.plot(curve.index, curve.mean(axis=1), marker=".", label=run.split("/", 1)[-1])
        ax.set_title(f"hidden-state mean after block {block}", fontsize=8)
        ax.set_xscale("symlog", linthresh=10)
    axes[0, 0].legend(fontsize=6)
    ctx.save_figure(fig, name)


__all__ = [
    "CUSTOM",
    "EMPTY_SPREAD",
    "FID",
    "IS",
    "PAPER_EMA",
    "PAPER_STEPS",
    "DIT_S2_STEPS",
    "PAPER_WARMUP",
    "DiTData",
    "DiTProtocolConfig",
    "build_model",
    "condition_summary",
    "detail_ratio",
    "draw_fid_curves",
    "draw_hidden_means",
    "draw_residuals",
    "draw_sample_grids",
    "load_data",
    "model_depth",
    "paired",
    "scale_summary",
    "scaled_decay",
    "scaled_warmup",
    "short_layer",
    "spread_numbers",
    "step_rates",
    "train_condition",
    "within_spread",
]
