"""Decoding latent samples to images with the Stable Diffusion VAE, for FID on latent DiTs.

"Bug or Feature²" App. D.4 trains DiT-S/2 on the latents of Stable Diffusion's VAE
(``AutoencoderKL``), multiplied by 0.18215 (:data:`~actlab.data.latents.SD_VAE_SCALE`, the
scale :class:`~actlab.data.latents.LatentShards` applies on read). A sample of such a model
is an image only after ``vae.decode(z / 0.18215)``; its FID is then that image's, on a
feature network such as :func:`~actlab.measure.inception.inception_v3_fid`.

:func:`load_autoencoder` reads the VAE with ``diffusers`` from a local folder (the
``config.json`` and weights that ``save_pretrained`` writes, e.g. a copy of
``stabilityai/sd-vae-ft-ema``); nothing is downloaded. ``diffusers`` is an optional
dependency (``pip install 'actlab[diffusion]'``), imported only here, when a VAE is loaded.
:class:`LatentDecoder` decodes in batches, without gradients, in eval mode, to images in
[-1, 1].
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from actlab.data.latents import SD_VAE_SCALE

__all__ = ["SD_VAE_SCALE", "LatentDecoder", "latent_decoder", "load_autoencoder"]


def load_autoencoder(folder: str | os.PathLike, *, device: str | torch.device | None = None
                     ) -> nn.Module:
    """``diffusers.AutoencoderKL.from_pretrained(folder)``, from local files only, in eval mode.

    Raises ``FileNotFoundError`` for a folder without ``config.json`` and ``ImportError``
    (saying how to install it) without ``diffusers``.
    """
    path = Path(folder).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"VAE folder {path} has no config.json: give the folder that "
                                "AutoencoderKL.save_pretrained wrote (e.g. a local copy of "
                                "stabilityai/sd-vae-ft-ema); actlab never downloads it")
    try:
        from diffusers import AutoencoderKL
    except ImportError as exc:
        raise ImportError(f"decoding latents needs diffusers ({exc}); "
                          "pip install 'actlab[diffusion]'") from None
    vae = AutoencoderKL.from_pretrained(str(path), local_files_only=True)
    if device is not None:
        vae = vae.to(device)
    return vae.eval()


class LatentDecoder:
    """``images = vae.decode(latents / scale).sample`` clamped to [-1, 1], in batches.

    ``vae`` is any module with ``decode(z)`` returning an object with ``.sample`` (diffusers'
    ``AutoencoderKL``) or a tensor. ``scale`` is what the latents were multiplied by before
    training (0.18215, App. D.4). Latents go to the VAE's device and dtype; images come back
    there, in float32.
    """

    def __init__(self, vae: Any, *, scale: float = SD_VAE_SCALE, batch_size: int = 16,
                 name: str = "sd-vae") -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        configured = getattr(getattr(vae, "config", None), "scaling_factor", None)
        if configured is not None and abs(float(configured) - scale) > 1e-9:
            raise ValueError(f"the VAE's scaling_factor is {configured}, the latents were "
                             f"scaled by {scale}: latents of another VAE cannot be decoded "
                             "by this one")
        self.vae, self.scale, self.batch_size, self.name = vae, float(scale), batch_size, name

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, scale={self.scale})"

    @torch.no_grad()
    def __call__(self, latents: Tensor) -> Tensor:
        """``(N, C, h, w)`` latents -> ``(N, 3, H, W)`` images in [-1, 1]."""
        param = next(self.vae.parameters(), None)
        device = param.device if param is not None else latents.device
        dtype = param.dtype if param is not None else torch.float32
        was_training = getattr(self.vae, "training", False)
        self.vae.eval()
        out = []
        try:
            for batch in latents.split(self.batch_size):
                decoded = self.vae.decode(batch.to(device=device, dtype=dtype) / self.scale)
                images = getattr(decoded, "sample", decoded)
                out.append(images.float().clamp(-1.0, 1.0))
        finally:
            self.vae.train(was_training)
        return torch.cat(out)


def latent_decoder(folder: str | os.PathLike, *, device: str | torch.device | None = None,
                   batch_size: int = 16) -> LatentDecoder:
    """:class:`LatentDecoder` of the VAE in ``folder`` (:func:`load_autoencoder`)."""
    return LatentDecoder(load_autoencoder(folder, device=device), batch_size=batch_size)
