"""A small VGG-style convolutional autoencoder and the activation-bias decomposition of its latent.

"Rethinking Activation Functions" §3 and App. D: the encoder is the front of a VGG network
(stages of 3x3 convolutions, each followed by the activation, with 2x2 max-pooling between
stages); the latent ``h`` is the encoder's final *post-activation* output with many channels.
The decoder mirrors it (3x3 convolutions and nearest-neighbour upsampling) and ends in a plain
convolution to the image channels. Every activation in both halves comes from one spec string,
so the shifted model (``relu:shift=theory``) replaces each ReLU with ``ReLU(z) - b``.

For the analysis of eq. 8, :func:`bias_decomposition` splits ``h`` at every spatial location
``p`` into the *bias component* ``h_bias = mean_c(h_p) * 1`` (the channel mean broadcast
back over the channels) and the *deviation* ``h_dev = h - h_bias``, which has zero channel
mean. :meth:`ConvAutoencoder.reconstruct_parts` decodes the full latent and each component
separately. :func:`image_similarity` compares decoded images (Pearson correlation, cosine,
PSNR).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from actlab.activations.spec_activation import make_activation
from actlab.errors import did_you_mean

SIMILARITIES = ("correlation", "cosine", "psnr")


def bias_decomposition(h: Tensor, dim: int = 1) -> tuple[Tensor, Tensor]:
    """Split ``h`` into ``(h_bias, h_dev)`` along the channel dimension ``dim`` (eq. 8).

    ``h_bias`` holds, at every location, the mean over channels repeated over the channels
    (a real tensor of ``h``'s shape, not a view); ``h_dev = h - h_bias`` has zero channel mean.
    ``h_bias + h_dev`` equals ``h`` up to rounding.
    """
    if h.dim() == 0:
        raise ValueError("bias_decomposition needs a tensor with a channel dimension")
    h_bias = h.mean(dim=dim, keepdim=True).expand_as(h).contiguous()
    return h_bias, h - h_bias


def _conv(in_channels: int, out_channels: int) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)


class ConvAutoencoder(nn.Module):
    """VGG-style encoder -> post-activation latent -> convolutional decoder.

    Args:
        in_channels: image channels (1 for digits, 3 for CIFAR-10).
        widths: channels of each encoder stage; the last is the latent's channel count. The
            spatial size shrinks by 2 between stages, so an ``S x S`` image gives an
            ``S / 2**(len(widths) - 1)`` square latent.
        convs_per_stage: 3x3 conv + activation pairs per encoder stage (VGG uses 2-4).
        activation: activation spec used after every convolution except the decoder's last.

    ``encoder`` and ``decoder`` are ``nn.Sequential``; ``encode(x)`` returns the latent ``h``
    (``(N, widths[-1], H', W')``), ``decode(h)`` the image.
    """

    def __init__(self, in_channels: int = 1, widths: Sequence[int] = (32, 128),
                 convs_per_stage: int = 2, activation: str = "relu") -> None:
        super().__init__()
        widths = tuple(int(w) for w in widths)
        if not widths or min(widths) < 1:
            raise ValueError(f"widths must be a non-empty list of positive ints, got {widths}")
        if convs_per_stage < 1 or in_channels < 1:
            raise ValueError(f"need convs_per_stage >= 1 and in_channels >= 1, got "
                             f"{convs_per_stage} and {in_channels}")
        self.in_channels = in_channels
        self.widths = widths
        self.activation = activation
        self.downsample = 2 ** (len(widths) - 1)

        enc: list[nn.Module] = []
        channels = in_channels
        for i, width in enumerate(widths):
            if i > 0:
                enc.append(nn.MaxPool2d(2))
            for _ in range(convs_per_stage):
                enc += [_conv(channels, width), make_activation(activation)]
                channels = width
        self.encoder = nn.Sequential(*enc)

        dec: list[nn.Module] = []
        for i in range(len(widths) - 1, 0, -1):
            dec += [_conv(channels, widths[i - 1]), make_activation(activation),
                    nn.Upsample(scale_factor=2, mode="nearest")]
            channels = widths[i - 1]
        dec += [_conv(channels, channels), make_activation(activation),
                _conv(channels, in_channels)]
        self.decoder = nn.Sequential(*dec)

    @property
    def latent_channels(self) -> int:
        """Channels of the latent ``h`` (the ``m`` of eq. 8)."""
        return self.widths[-1]

    def _check_input(self, x: Tensor) -> None:
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"expected (N, {self.in_channels}, H, W) images, got {tuple(x.shape)}")
        if x.shape[-1] % self.downsample or x.shape[-2] % self.downsample:
            raise ValueError(f"image height and width must be divisible by {self.downsample}, "
                             f"got {tuple(x.shape[-2:])}")

    def encode(self, x: Tensor) -> Tensor:
        """The post-activation latent ``h`` of images ``x``."""
        self._check_input(x)
        return self.encoder(x)

    def decode(self, h: Tensor) -> Tensor:
        """Images decoded from a latent (the full ``h`` or any component of it)."""
        if h.dim() != 4 or h.shape[1] != self.latent_channels:
            raise ValueError(f"expected a (N, {self.latent_channels}, H', W') latent, "
                             f"got {tuple(h.shape)}")
        return self.decoder(h)

    def forward(self, x: Tensor) -> Tensor:
        """Reconstruct ``x`` through the full latent."""
        return self.decode(self.encode(x))

    def reconstruct_parts(self, x: Tensor) -> dict[str, Tensor]:
        """Decode the full latent, its bias component and its deviation separately (§3.2).

        Returns ``{"full", "bias", "dev"}`` images, each of ``x``'s shape. Gradients flow
        unless the caller disables them.
        """
        h = self.encode(x)
        h_bias, h_dev = bias_decomposition(h)
        return {"full": self.decode(h), "bias": self.decode(h_bias), "dev": self.decode(h_dev)}


def image_similarity(a: Tensor, b: Tensor, kind: str = "correlation") -> Tensor:
    """Per-image similarity of two ``(N, ...)`` image batches.

    ``correlation``: Pearson correlation of the pixels (cosine after removing each image's
    mean, so a constant offset or contrast change does not count); ``cosine``: cosine of the
    raw pixel vectors; ``psnr``: ``10 log10(range(b)^2 / mse)`` with ``b``'s per-image range
    as the peak. A constant image has correlation 0.
    """
    if kind not in SIMILARITIES:
        hint = did_you_mean(kind, SIMILARITIES, n=3, cutoff=0.4, prefix="; ")
        raise ValueError(f"unknown similarity {kind!r}{hint} (valid: {', '.join(SIMILARITIES)})")
    if a.shape != b.shape or a.dim() < 2:
        raise ValueError(f"need two batches of the same shape, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    a, b = a.flatten(1), b.flatten(1)
    if kind == "psnr":
        mse = (a - b).pow(2).mean(1)
        peak = b.amax(1) - b.amin(1)
        return 10 * torch.log10(peak.pow(2) / mse.clamp_min(1e-12))
    if kind == "correlation":
        a, b = a - a.mean(1, keepdim=True), b - b.mean(1, keepdim=True)
    denom = a.norm(dim=1) * b.norm(dim=1)
    tiny = torch.finfo(a.dtype).tiny if a.is_floating_point() else 1e-30
    return (a * b).sum(1) / denom.clamp_min(math.sqrt(tiny))
