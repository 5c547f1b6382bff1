"""FID of latent samples: streaming, mergeable statistics against the one-shot formulas; the
reference statistics (guided-diffusion's .npz, image folders); the Stable Diffusion VAE
(diffusers' AutoencoderKL, built from a config with random weights) decoding latents; and
the DiT protocol's sample quality end to end through that VAE and a random-weight FID
Inception-v3, recomputed independently; ours against torchmetrics on the same features."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from actlab.data.latents import SD_VAE_SCALE, write_latent_shard
from actlab.measure.feature_network import FeatureNetwork
from actlab.measure.fid import feature_statistics, frechet_distance, inception_score
from actlab.measure.fid_statistics import (
    FeatureMoments,
    InceptionScoreParts,
    ReferenceStatistics,
    reference_statistics,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _features(n: int, d: int, seed: int, shift: float = 0.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g, dtype=torch.float64)
    return torch.randn(n, d, generator=g, dtype=torch.float64) @ mix + 5.0 + shift


def test_feature_moments_merged_in_any_split_are_the_one_shot_statistics() -> None:
    x = _features(70, 6, seed=1)
    mu, sigma = feature_statistics(x)  # np.mean and np.cov of all rows
    ranks = [FeatureMoments(6, center=mu * 0.9), FeatureMoments(6, center=mu * 0.9)]
    for i, chunk in enumerate(x.split(16)):  # chunks dealt to two "ranks" in turn
        ranks[i % 2].update(chunk)
    total = ranks[0].sum + ranks[1].sum  # a summing collective, by hand

    def reduce_with_peer(packed: torch.Tensor) -> torch.Tensor:
        peer = torch.cat([torch.tensor([float(ranks[1].count)]), ranks[1].sum,
                          ranks[1].outer.reshape(-1)])
        return packed + peer

    ranks[0].reduce(reduce_with_peer)
    torch.testing.assert_close(ranks[0].sum, total)
    got_mu, got_sigma = ranks[0].statistics()
    np.testing.assert_allclose(got_mu, mu, rtol=1e-12)
    np.testing.assert_allclose(got_sigma, sigma, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match=r"\(n, 6\)"):
        ranks[1].update(torch.zeros(3, 5))


class _TwoRanks:
    """A summing collective between two threads (each rank's call k meets the other's)."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2)
        self.slots: list[torch.Tensor | None] = [None, None]

    def reduce(self, rank: int):
        def call(t: torch.Tensor) -> torch.Tensor:
            self.slots[rank] = t
            self.barrier.wait()
            total = self.slots[0] + self.slots[1]
            self.barrier.wait()
            return total
        return call


def test_inception_score_parts_in_any_order_equal_the_split_formula() -> None:
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(53, 7, generator=g, dtype=torch.float64) * 2
    expected = inception_score(logits, splits=10, probs=False)
    order = torch.randperm(53, generator=g)
    ranks = [InceptionScoreParts(53, 7, 10), InceptionScoreParts(53, 7, 10)]
    ranks[0].update(logits[order[:30]], order[:30])
    ranks[1].update(logits[order[30:41]], order[30:41])
    ranks[1].update(logits[order[41:]], order[41:])
    group, results = _TwoRanks(), [None, None]

    def run(rank: int) -> None:
        results[rank] = ranks[rank].result(group.reduce(rank))

    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results[0] == pytest.approx(expected, rel=1e-12)
    assert results[1] == results[0]
    with pytest.raises(ValueError, match="scored 30 of 53"):
        ranks[0].result()


class _SmallNet(nn.Module):
    """A random feature network for small RGB images: (features, logits)."""

    def __init__(self, features: int = 12, classes: int = 5) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Tanh(),
                                  nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, features))
        self.head = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.body(x)
        return f, self.head(f)


def _image_folder(root, n_per_class: int, size: int = 12) -> None:
    rng = np.random.default_rng(5)
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(n_per_class):
            pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / c / f"{i:03d}.png")


def test_reference_statistics_from_folder_npz_and_guided_diffusion_batches(tmp_path) -> None:
    from actlab.data.image_folder import load_image_folder

    net = FeatureNetwork(_SmallNet(), name="small-net", channels=3, batch_size=7)
    _image_folder(tmp_path / "images", 9)
    images = load_image_folder(tmp_path / "images", image_size=8).x
    mu, sigma = feature_statistics(net.features(images))
    cache = tmp_path / "cache"
    stats = reference_statistics(tmp_path / "images", net, image_size=8, batch_size=5,
                                 cache_dir=cache)
    assert stats.network == "small-net" and stats.count == 18
    np.testing.assert_allclose(stats.mu, mu, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(stats.sigma, sigma, rtol=1e-5, atol=1e-8)
    assert len(list((cache / "fid_reference").glob("*.npz"))) == 1
    again = reference_statistics(tmp_path / "images", net, image_size=8, cache_dir=cache)
    np.testing.assert_array_equal(again.mu, stats.mu)
    # guided-diffusion's reference batch: arr_0 uint8 NHWC images (scored here) ...
    pixels = ((images + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
    np.savez(tmp_path / "batch.npz", arr_0=pixels.numpy())
    from_images = reference_statistics(tmp_path / "batch.npz", net)
    np.testing.assert_allclose(from_images.mu, mu, rtol=1e-6, atol=1e-7)
    # ... or mu / sigma of the TF Inception's pool_3: only for the FID Inception-v3
    np.savez(tmp_path / "ref.npz", mu=mu, sigma=sigma, mu_s=mu, sigma_s=sigma)
    with pytest.raises(ValueError, match="inception-v3-fid features.*not small-net"):
        reference_statistics(tmp_path / "ref.npz", net)
    inception_named = FeatureNetwork(_SmallNet(), name="inception-v3-fid")
    read = reference_statistics(tmp_path / "ref.npz", inception_named)
    np.testing.assert_array_equal(read.sigma, sigma)
    saved = ReferenceStatistics(mu, sigma, "small-net", "here").save(tmp_path / "ours.npz")
    assert reference_statistics(saved, net).network == "small-net"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        reference_statistics(tmp_path / "missing", net)


def _tiny_vae(folder) -> nn.Module:
    """A Stable-Diffusion-layout AutoencoderKL from a config (random weights, factor 2)."""
    from diffusers import AutoencoderKL

    torch.manual_seed(6)
    vae = AutoencoderKL(block_out_channels=(8, 8), norm_num_groups=4, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, sample_size=8)
    vae.save_pretrained(str(folder))
    return vae


def test_vae_decoder_reads_a_local_autoencoderkl_and_decodes_scaled_latents(tmp_path) -> None:
    from actlab.measure.vae import LatentDecoder, latent_decoder

    vae = _tiny_vae(tmp_path / "vae")
    decoder = latent_decoder(tmp_path / "vae", batch_size=3)
    z = torch.randn(5, 4, 4, 4, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        expected = vae.eval().decode(z / SD_VAE_SCALE).sample.clamp(-1, 1)
    torch.testing.assert_close(decoder(z), expected, rtol=1e-5, atol=1e-6)
    assert decoder(z).shape == (5, 3, 8, 8)
    with pytest.raises(FileNotFoundError, match="config.json"):
        latent_decoder(tmp_path)
    with pytest.raises(ValueError, match="scaling_factor"):
        LatentDecoder(vae, scale=0.13025)


def test_ours_and_torchmetrics_agree_on_decoded_images(tmp_path) -> None:
    from torchmetrics.image.fid import FrechetInceptionDistance

    from actlab.measure.vae import latent_decoder

    _tiny_vae(tmp_path / "vae")
    decode = latent_decoder(tmp_path / "vae")
    g = torch.Generator().manual_seed(8)
    fake = decode(torch.randn(64, 4, 4, 4, generator=g))
    real = decode(torch.randn(64, 4, 4, 4, generator=g) * 0.5 + 0.2)
    net = _SmallNet()

    class Features(nn.Module):  # torchmetrics' custom feature module: the same features
        num_features = 12

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return net(x)[0]

    metric = FrechetInceptionDistance(feature=Features())
    metric.update(real, real=True)
    metric.update(fake, real=False)
    with torch.no_grad():
        real_mu, real_sigma = feature_statistics(net(real)[0])
        moments = FeatureMoments(12, center=real_mu)
        for chunk in fake.split(20):
            moments.update(net(chunk)[0])
    ours = frechet_distance(*moments.statistics(), real_mu, real_sigma)
    assert ours == pytest.approx(float(metric.compute()), rel=1e-6)
    assert ours > 1e-4  # two different sets


@pytest.mark.slow  # the Inception-v3 at 299 x 299 on 13 images
def test_latent_dit_sample_quality_end_to_end(tmp_path, monkeypatch) -> None:
    """Samples of a DiT on latents, decoded by the VAE, scored by a random-weight FID
    Inception against an image folder: every number recomputed by hand."""
    from actlab.device import on_device
    from actlab.diffusion import GaussianDiffusion, ddim_sample
    from actlab.measure import fid as fid_module
    from actlab.measure.inception import FIDInceptionV3, inception_v3_fid
    from actlab.recipes.dit_quality import SAMPLE_SEED, quality_setup, sample_quality
    from actlab.recipes.dit_setup import DiTProtocolConfig, build_model, load_data

    vae = _tiny_vae(tmp_path / "vae").eval()
    torch.manual_seed(9)
    torch.save(FIDInceptionV3().state_dict(), tmp_path / "inception.pth")
    _image_folder(tmp_path / "reference", 2, size=8)
    g = torch.Generator().manual_seed(10)
    (tmp_path / "latents").mkdir()
    write_latent_shard(tmp_path / "latents" / "s0.safetensors",
                       torch.randn(6, 4, 4, 4, generator=g), torch.tensor([0, 1, 2, 0, 1, 2]))
    config = DiTProtocolConfig(data=f"latents:{tmp_path / 'latents'}", hidden_size=8, depth=1,
                               num_heads=2, fid_samples=10, sample_steps=2, sample_batch=3,
                               loss_samples=4, vae=str(tmp_path / "vae"),
                               inception=str(tmp_path / "inception.pth"),
                               fid_reference=str(tmp_path / "reference"))
    assert config.scores_latents
    config.fid_samples = 4  # under the config's floor (IS's 10 parts): less Inception work
    data = load_data(config, seed=0)
    with on_device("cpu"):
        model = build_model(config, data, activation="gelu", norm="layernorm", seed=0).eval()
        setup = quality_setup(config, data)
    assert setup.network.name == "inception-v3-fid" and setup.classes == 1008
    diffusion = GaussianDiffusion.linear()
    # The distance of two 2048-dim Gaussians (two eigendecompositions, tested against scipy
    # in test_fid.py) is the slow part: record what the pipeline measures it on instead.
    seen = []

    def distance(*args):
        seen.append([np.asarray(a) for a in args])
        return 123.0

    monkeypatch.setattr(fid_module, "frechet_distance", distance)
    scores, _ = sample_quality(model, diffusion, config, data, setup)
    assert scores["fid_inception-v3-fid"] == 123.0 and len(seen) == 1

    # by hand: chunks of 3 from their own seeds, decoded by diffusers directly
    labels = torch.arange(4) % data.num_classes
    images = []
    for c, start in enumerate(range(0, 4, 3)):
        part = labels[start:start + 3]
        z = ddim_sample(model, diffusion, (len(part), *data.shape), part, steps=2, cfg_scale=1.5,
                        generator=torch.Generator().manual_seed(SAMPLE_SEED + c))
        with torch.no_grad():
            images.append(vae.decode(z / SD_VAE_SCALE).sample.clamp(-1, 1))
    network = inception_v3_fid(tmp_path / "inception.pth")
    feats, logits = network.features_and_logits(torch.cat(images))
    # the folder's statistics are reference_statistics' (tested above on a small network)
    assert setup.reference.count == 4 and setup.reference.network == "inception-v3-fid"
    mu, sigma, ref_mu, ref_sigma = seen[0]
    hand_mu, hand_sigma = feature_statistics(feats)
    np.testing.assert_allclose(mu, hand_mu, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sigma, hand_sigma, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(ref_mu, setup.reference.mu)
    np.testing.assert_array_equal(ref_sigma, setup.reference.sigma)
    is_mean, is_std = inception_score(logits, splits=4)
    assert scores["is_inception-v3-fid"] == pytest.approx(is_mean, rel=1e-9)
    assert scores["is_std_inception-v3-fid"] == pytest.approx(is_std, rel=1e-6)
    assert "detail_ratio" not in scores
