"""What a DiT condition of the DiT protocol runs on: its config, data and model.

:class:`DiTProtocolConfig` holds the model, data, training and measurement settings that
``dit-shift`` and ``dit-percentile`` share; :func:`load_data` gives the training batches, the
fixed probe sets and the FID reference; :func:`build_model` the DiT of a condition. The run
itself (training and measuring) is :func:`actlab.recipes.dit_protocol.train_condition`.

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
0.18215 as in "Bug or Feature²" App. D.4) for the papers' models.

Sample quality (:mod:`actlab.recipes.dit_quality`): on the digits, FID and IS on the offline
digits classifier's features against the test split; on latents, once ``vae`` (a local
folder with the Stable Diffusion ``AutoencoderKL``, :mod:`actlab.measure.vae`),
``inception`` (the FID Inception-v3 weights file, :mod:`actlab.measure.inception`) and
``fid_reference`` (an image folder, or an ``.npz`` of guided-diffusion's reference batches,
:mod:`actlab.measure.fid_statistics`) are given, FID and IS of the decoded samples on the
Inception's features ("inception-v3-fid" in every metric name and figure); without them
latent runs record losses and hidden states only. ``sampler`` is DDIM (ours, fast) or
ancestral DDPM (the DiT reference's ``sample_ddp.py``), ``sample_batch`` the samples drawn
together (their noise seeded by the chunk, so the scores do not depend on how many ranks
share the chunks). ``dtype="float64"`` trains in double precision (for exact comparisons).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor, nn

from actlab import analysis
from actlab.config import CheckedConfig, checked
from actlab.device import place
from actlab.errors import ConfigError

PAPER_STEPS = 400_000  # "Rethinking Activation Functions" §4.2: DiT-B/2 for 400,000 steps
PAPER_EMA = 0.9999  # the DiT reference's EMA decay; "Bug or Feature²" §7's γ
PAPER_WARMUP = 50_000  # "Bug or Feature²" §7: T_warm for DiT-S/2
DIT_S2_STEPS = 300_000  # "Bug or Feature²" App. B.2: DiT-S/2 "improve progressively to 300K steps"
CUSTOM = "custom"
SAMPLERS = ("ddim", "ddpm")
FID_SOURCES = ("vae", "inception", "fid_reference")


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
    dtype: str = checked("float32", choices=("float32", "float64"))
    sampler: str = checked("ddim", choices=SAMPLERS)
    sample_batch: int = checked(0, ge=0)  # samples per chunk; 0: all fid_samples at once
    vae: str = ""  # latents: folder of the Stable Diffusion VAE (AutoencoderKL)
    inception: str = ""  # latents: the FID Inception-v3 weights file
    fid_reference: str = ""  # latents: reference image folder or .npz statistics / images
    fid_reference_per_class: int = checked(0, ge=0)  # first images per class (0: all)

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
        if self.data.startswith("latents:"):  # checked before any unit runs, not in each
            folder = Path(self.data[len("latents:"):]).expanduser()
            if not folder.is_dir():
                raise ConfigError("data", f"latent folder {folder} does not exist")
            if not any(p.suffix in (".npy", ".safetensors") for p in folder.iterdir()):
                raise ConfigError("data", f"latent folder {folder} holds no .npy or "
                                          ".safetensors shards")
        if self.data == "digits" and self.fid_samples % 10:
            raise ConfigError(
                "fid_samples", f"must be a multiple of the 10 digit classes, got {self.fid_samples}"
            )
        self._check_fid_sources()

    def _check_fid_sources(self) -> None:
        """Latent FID needs all of vae, inception and fid_reference, each where it is said to
        be; the digits are scored by the digits classifier and take none of them."""
        given = {name: getattr(self, name) for name in FID_SOURCES if getattr(self, name)}
        if self.data == "digits":
            if given:
                raise ConfigError(next(iter(given)), "the digits are scored by the offline "
                                  "digits classifier; vae, inception and fid_reference are "
                                  "for data=latents:DIR")
            return
        if not given:
            return
        missing = [name for name in FID_SOURCES if name not in given]
        if missing:
            raise ConfigError(missing[0], f"FID of latent samples needs {', '.join(FID_SOURCES)}"
                                          f"; {', '.join(missing)} not given")
        vae = Path(self.vae).expanduser()
        if not (vae / "config.json").is_file():
            raise ConfigError("vae", f"{vae} is not a folder with an AutoencoderKL's config.json")
        if not Path(self.inception).expanduser().is_file():
            raise ConfigError("inception", f"weights file {self.inception} does not exist")
        reference = Path(self.fid_reference).expanduser()
        if not (reference.is_dir() or (reference.is_file() and reference.suffix == ".npz")):
            raise ConfigError("fid_reference", f"{reference} is neither an image folder nor "
                                               "an .npz file")

    @property
    def scores_latents(self) -> bool:
        """Whether latent samples are decoded and scored (all three FID sources given)."""
        return self.data.startswith("latents:") and all(getattr(self, n) for n in FID_SOURCES)

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


__all__ = ["CUSTOM", "DIT_S2_STEPS", "FID_SOURCES", "PAPER_EMA", "PAPER_STEPS", "PAPER_WARMUP",
           "SAMPLERS", "DiTData", "DiTProtocolConfig", "build_model", "load_data",
           "scaled_decay", "scaled_warmup"]
