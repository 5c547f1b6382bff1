"""Sample quality of a DiT of the DiT protocol: guided samples of the EMA model, decoded when
they are latents, scored by a named feature network against reference statistics.

:func:`quality_setup` picks what a condition is scored with (the module docstring of
:mod:`actlab.recipes.dit_setup` says when): on the digits the offline digits classifier
against the test split's statistics, with the test images for :func:`detail_ratio`; on
latents the FID Inception-v3, the Stable Diffusion VAE that decodes the samples and the
reference statistics of ``fid_reference``.

:func:`sample_quality` draws ``fid_samples`` samples (labels cycling through the classes)
in chunks of ``sample_batch``; chunk ``c`` starts from noise seeded ``SAMPLE_SEED + c``, so
a sample is the same whichever process draws it. Under ``--nproc N`` rank ``r`` draws the
chunks ``r, r + N, ...``, and the statistics of the scores (feature moments, the Inception
Score's parts, the detail sums) are summed across ranks
(:mod:`actlab.measure.fid_statistics`): every rank ends with the scores one process would
get. With ``sample_batch=0`` (one chunk) that is the protocol's single draw from
``SAMPLE_SEED``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from actlab.device import place, unit_device
from actlab.measure.feature_network import FeatureNetwork
from actlab.measure.fid_statistics import (
    FeatureMoments,
    InceptionScoreParts,
    ReferenceStatistics,
)
from actlab.recipes.dit_setup import DiTData, DiTProtocolConfig
from actlab.train.distributed import DistInfo, all_reduce_sum

SAMPLE_SEED = 1_000_037  # fixed sampler noise (ours); chunk c uses SAMPLE_SEED + c
IS_SPLITS = 10


def laplacian_energy(x: Tensor) -> tuple[float, int]:
    """Sum and count of the squared 4-neighbour Laplacian over the interior pixels of ``x``."""
    x = x.double()
    lap = (4 * x[..., 1:-1, 1:-1] - x[..., :-2, 1:-1] - x[..., 2:, 1:-1]
           - x[..., 1:-1, :-2] - x[..., 1:-1, 2:])
    return float(lap.pow(2).sum()), lap.numel()


def detail_ratio(samples: Tensor, reference: Tensor) -> float:
    """Our sharpness proxy: the mean squared 4-neighbour Laplacian of ``samples`` over that of
    ``reference`` (interior pixels). Blurred samples score below 1; real detail scores 1."""
    total, count = laplacian_energy(samples)
    ref_total, ref_count = laplacian_energy(reference.to(samples.device))
    return (total / count) / max(ref_total / ref_count, 1e-12)


@dataclass
class QualitySetup:
    """What a condition's samples are scored with (``reference`` None on the meta device,
    where the samplers run and nothing is scored)."""

    network: FeatureNetwork
    reference: ReferenceStatistics | None
    classes: int  # logits of the network (the Inception Score's classes)
    decode: Callable[[Tensor], Tensor] | None = None  # latents -> images in [-1, 1]
    reference_images: Tensor | None = None  # pixels: the images detail_ratio compares with

    @property
    def pixels(self) -> bool:
        """Whether the model samples images directly (no decoder)."""
        return self.decode is None


def quality_setup(config: DiTProtocolConfig, data: DiTData) -> QualitySetup | None:
    """The digits classifier and the test split, or (latents with all FID sources given)
    the FID Inception-v3, the VAE and the reference statistics; None when latents are not
    scored."""
    from actlab.measure.fid import feature_statistics

    meta = unit_device().type == "meta"
    if data.reference is not None:
        from actlab.measure.feature_classifier import digits_feature_network

        network = digits_feature_network(image_size=data.shape[1], channels=data.shape[0])
        place(network.module)
        if config.dtype == "float64":  # the whole chain in double precision (exact weights)
            network.module.double()
        if meta:
            return QualitySetup(network, None, data.num_classes, None, data.reference)
        features, logits = network.features_and_logits(data.reference)
        mu, sigma = feature_statistics(features)
        stats = ReferenceStatistics(mu, sigma, network.name, "digits test split",
                                    len(data.reference))
        return QualitySetup(network, stats, logits.shape[1], None, data.reference)
    if not config.scores_latents or meta:
        return None
    from actlab.measure.fid_statistics import reference_statistics
    from actlab.measure.inception import inception_v3_fid
    from actlab.measure.vae import latent_decoder

    device = unit_device()
    network = inception_v3_fid(config.inception, device=device)
    decode = latent_decoder(config.vae, device=device)
    # the side of the decoded images: the VAE upsamples by 2 per extra block (8 for SD's)
    side = data.shape[1] * 2 ** (len(decode.vae.config.block_out_channels) - 1)
    stats = reference_statistics(config.fid_reference, network, image_size=side,
                                 limit_per_class=config.fid_reference_per_class or None)
    classes = network.logits(torch.zeros(1, 3, side, side)).shape[1]
    return QualitySetup(network, stats, classes, decode, None)


def _sample(model: Any, diffusion: Any, config: DiTProtocolConfig, shape: tuple[int, ...],
            labels: Tensor, seed: int, pixels: bool) -> Tensor:
    from actlab.diffusion import ddim_sample, ddpm_sample

    sampler = ddim_sample if config.sampler == "ddim" else ddpm_sample
    samples = sampler(model, diffusion, (len(labels), *shape), labels,
                      generator=torch.Generator().manual_seed(seed), steps=config.sample_steps,
                      cfg_scale=config.cfg_scale, clip_denoised=pixels)
    return samples.clamp(-1.0, 1.0) if pixels else samples


def sample_quality(model: Any, diffusion: Any, config: DiTProtocolConfig, data: DiTData,
                   setup: QualitySetup, dist: DistInfo | None = None
                   ) -> tuple[dict[str, float], Tensor | None]:
    """Scores of ``fid_samples`` samples of ``model`` (module docstring) and rank 0's first
    chunk of samples (for the sample grids; None elsewhere or on latents).

    Keys: ``fid_<network>``, ``is_<network>``, ``is_std_<network>`` and, on pixels,
    ``detail_ratio``. On the meta device the samplers run and nothing is scored.
    """
    from actlab.measure.fid import frechet_distance

    dist = dist or DistInfo()
    n = config.fid_samples
    labels = torch.arange(n) % data.num_classes  # sample i is of class i mod classes
    chunk = config.sample_batch or n
    name, reference = setup.network.name, setup.reference
    scored = reference is not None
    moments = FeatureMoments(len(reference.mu), center=reference.mu) if scored else None
    parts = InceptionScoreParts(n, setup.classes, min(IS_SPLITS, n))
    detail = torch.zeros(2, dtype=torch.float64)  # Laplacian energy: sum, count
    first: Tensor | None = None
    for c in range(dist.rank, math.ceil(n / chunk), dist.world_size):
        index = torch.arange(c * chunk, min(n, (c + 1) * chunk))
        samples = _sample(model, diffusion, config, data.shape, labels[index],
                          SAMPLE_SEED + c, setup.pixels)
        if c == 0 and setup.pixels:
            first = samples
        if not scored or samples.is_meta:
            continue
        images = samples if setup.decode is None else setup.decode(samples)
        features, logits = setup.network.features_and_logits(images)
        moments.update(features)
        parts.update(logits, index)
        if setup.pixels:
            total, count = laplacian_energy(samples)
            detail += torch.tensor([total, count], dtype=torch.float64)
    if not scored or model_is_meta(model):
        return {}, first

    def reduce(x: Tensor) -> Tensor:
        return all_reduce_sum(x, dist)

    # every rank takes part in the sums, one without chunks with zeros
    moments.reduce(reduce)
    mu, sigma = moments.statistics()
    is_mean, is_std = parts.result(reduce)
    scores = {f"fid_{name}": frechet_distance(mu, sigma, reference.mu, reference.sigma),
              f"is_{name}": is_mean, f"is_std_{name}": is_std}
    if setup.pixels:
        detail = reduce(detail)
        ref_total, ref_count = laplacian_energy(setup.reference_images)
        scores["detail_ratio"] = float(detail[0] / detail[1]) / max(ref_total / ref_count,
                                                                     1e-12)
    return scores, first


def model_is_meta(model: Any) -> bool:
    """Whether ``model``'s parameters live on the meta device."""
    param = next(model.parameters(), None)
    return param is not None and param.is_meta


__all__ = ["IS_SPLITS", "SAMPLE_SEED", "QualitySetup", "detail_ratio", "laplacian_energy",
           "quality_setup", "sample_quality"]
