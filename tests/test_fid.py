"""FID and IS against closed forms, dense scipy, torchmetrics and hand-computed cases; the
cached digits classifier; the FID Inception-v3 loading a state dict."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from torch import nn

from actlab.data.digits import load_digits_pixels
from actlab.measure import feature_classifier as fc
from actlab.measure.feature_network import FeatureNetwork
from actlab.measure.fid import (
    feature_statistics,
    fid,
    frechet_distance,
    generative_metrics,
    inception_score,
    metric_label,
)
from actlab.measure.inception import WEIGHTS_FILE, FIDInceptionV3, inception_v3_fid

# --- Fréchet distance --------------------------------------------------------------------


def _random_rotation(d: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q


def test_diagonal_covariances_match_the_hand_computed_closed_form():
    # d^2 = |mu1 - mu2|^2 + sum (sqrt a - sqrt b)^2 = 9 + (1 + 1 + 1) = 12
    mu1, mu2 = np.zeros(3), np.array([1.0, 2.0, 2.0])
    a, b = np.diag([1.0, 4.0, 9.0]), np.diag([4.0, 1.0, 16.0])
    assert frechet_distance(mu1, a, mu2, b) == pytest.approx(12.0, rel=1e-12)


def test_commuting_covariances_match_the_closed_form_after_a_rotation():
    q = _random_rotation(5, seed=1)
    a, b = np.array([0.5, 1.0, 2.0, 3.0, 0.1]), np.array([2.0, 0.3, 2.0, 1.0, 0.4])
    mu1, mu2 = np.arange(5.0), np.arange(5.0)[::-1]
    expected = float(((mu1 - mu2) ** 2).sum() + ((np.sqrt(a) - np.sqrt(b)) ** 2).sum())
    got = frechet_distance(mu1, q @ np.diag(a) @ q.T, mu2, q @ np.diag(b) @ q.T)
    assert got == pytest.approx(expected, rel=1e-10)


def test_one_dimensional_case_is_the_wasserstein_formula():
    # N(m1, s1^2) vs N(m2, s2^2): (m1 - m2)^2 + (s1 - s2)^2
    got = frechet_distance([0.5], [[4.0]], [-1.0], [[0.25]])
    assert got == pytest.approx(1.5 ** 2 + 1.5 ** 2, rel=1e-12)


def test_non_commuting_covariances_match_dense_scipy_sqrtm():
    rng = np.random.default_rng(2)
    d = 12
    m1, m2 = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    s1, s2 = m1 @ m1.T / d + 0.1 * np.eye(d), m2 @ m2.T / d + 0.1 * np.eye(d)
    mu1, mu2 = rng.normal(size=d), rng.normal(size=d)
    covmean = scipy.linalg.sqrtm(s1 @ s2).real
    expected = float(((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2 - 2 * covmean))
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(expected, rel=1e-9)


def test_singular_covariances_and_identical_gaussians():
    # Rank-1 covariances u u^T and v v^T: tr sqrt = |u.v|, so d^2 = |u|^2 + |v|^2 - 2|u.v|.
    u, v = np.array([1.0, 2.0, 0.0]), np.array([0.0, 1.0, 3.0])
    got = frechet_distance(np.zeros(3), np.outer(u, u), np.zeros(3), np.outer(v, v))
    assert got == pytest.approx(5.0 + 10.0 - 2 * 2.0, rel=1e-9)
    s = np.outer(u, u) + np.eye(3)
    assert frechet_distance(np.ones(3), s, np.ones(3), s) == pytest.approx(0.0, abs=1e-12)


def test_feature_statistics_is_the_unbiased_estimate():
    x = np.array([[0.0, 1.0], [2.0, 1.0], [4.0, 4.0]])
    mu, sigma = feature_statistics(x)
    np.testing.assert_allclose(mu, [2.0, 2.0])
    # hand: deviations (-2,-1), (0,-1), (2,2); sums of products / (3 - 1)
    np.testing.assert_allclose(sigma, [[4.0, 3.0], [3.0, 3.0]])


class _Identity(nn.Module):
    """Hands torchmetrics the given features as if a network had computed them."""

    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.num_features = num_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_fid_agrees_with_torchmetrics_on_the_same_features():
    from torchmetrics.image.fid import FrechetInceptionDistance

    g = torch.Generator().manual_seed(4)
    d = 8
    mix = torch.randn(d, d, generator=g, dtype=torch.float64)
    real = torch.randn(300, d, generator=g, dtype=torch.float64) @ mix
    fake = torch.randn(250, d, generator=g, dtype=torch.float64) @ mix.T * 0.7 + 0.3
    metric = FrechetInceptionDistance(feature=_Identity(d))
    metric.update(real, real=True)
    metric.update(fake, real=False)
    assert fid(fake, real) == pytest.approx(float(metric.compute()), rel=1e-6)


@pytest.mark.parametrize(("args", "match"), [
    (([0.0, 0.0], np.eye(2), [0.0], np.eye(1)), "same length"),
    (([0.0, 0.0], np.eye(3), [0.0, 0.0], np.eye(2)), r"\(2, 2\)"),
    (([0.0, 0.0], [[1.0, 0.5], [0.0, 1.0]], [0.0, 0.0], np.eye(2)), "symmetric"),
    (([np.nan, 0.0], np.eye(2), [0.0, 0.0], np.eye(2)), "NaN"),
])
def test_frechet_distance_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        frechet_distance(*args)


def test_fid_rejects_mismatched_or_too_few_features():
    with pytest.raises(ValueError, match="dimension"):
        fid(np.zeros((5, 3)), np.zeros((5, 4)))
    with pytest.raises(ValueError, match="N >= 2"):
        fid(np.zeros((1, 3)), np.zeros((5, 3)))


# --- Inception Score ---------------------------------------------------------------------


def test_uniform_predictions_score_one():
    mean, std = inception_score(torch.zeros(40, 7), splits=4)
    assert mean == pytest.approx(1.0, abs=1e-12)
    assert std == pytest.approx(0.0, abs=1e-12)


def test_distinct_confident_predictions_spread_evenly_score_the_class_count():
    k = 5
    probs = torch.eye(k).repeat(4, 1)  # each split of 10 rows holds every class twice
    mean, std = inception_score(probs, splits=2)
    assert mean == pytest.approx(k, rel=1e-12)
    assert std == pytest.approx(0.0, abs=1e-12)


def test_two_class_case_by_hand():
    # p(y) = (3/4, 1/4); KL = log(4/3) and (1/2) log(4/3); IS = exp((3/4) log(4/3)).
    probs = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    mean, _ = inception_score(probs, splits=1, ddof=0)
    assert mean == pytest.approx((4 / 3) ** 0.75, rel=1e-12)
    # The same predictions given as logits (log p, with log 0 as a very negative number).
    logits = torch.tensor([[0.0, -1e4], [0.0, 0.0]])
    assert inception_score(logits, splits=1, ddof=0)[0] == pytest.approx(mean, rel=1e-12)


def test_std_over_splits_by_hand():
    # split 1: two distinct one-hots (IS 2); split 2: two uniform rows (IS 1).
    probs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.5, 0.5]])
    mean, std = inception_score(probs, splits=2)
    assert mean == pytest.approx(1.5, rel=1e-12)
    assert std == pytest.approx(math.sqrt(0.5), rel=1e-12)  # sample std, ddof=1
    assert inception_score(probs, splits=2, ddof=0)[1] == pytest.approx(0.5, rel=1e-12)
    assert math.isnan(inception_score(probs, splits=1)[1])


@pytest.mark.parametrize("splits", [1, 5])
@pytest.mark.filterwarnings("ignore::UserWarning")  # its buffer and splits=1 std notes
def test_inception_score_agrees_with_torchmetrics(splits):
    from torchmetrics.image.inception import InceptionScore

    g = torch.Generator().manual_seed(5)
    logits = 2.0 * torch.randn(200, 10, generator=g, dtype=torch.float64)
    metric = InceptionScore(feature=_Identity(10), splits=splits)
    metric.update(logits)
    # torchmetrics shuffles the rows with torch.randperm before splitting: replay it.
    torch.manual_seed(6)
    tm_mean, tm_std = metric.compute()
    torch.manual_seed(6)
    shuffled = logits[torch.randperm(len(logits))]
    mean, std = inception_score(shuffled, splits=splits)
    assert mean == pytest.approx(float(tm_mean), rel=1e-6)
    if splits > 1:
        assert std == pytest.approx(float(tm_std), rel=1e-6)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"logits_or_probs": torch.zeros(5, 3), "splits": 6}, "splits"),
    ({"logits_or_probs": torch.zeros(5, 3), "splits": 0}, "splits"),
    ({"logits_or_probs": torch.zeros(5), "splits": 1}, r"\(N, K\)"),
    ({"logits_or_probs": torch.ones(4, 3), "splits": 1, "probs": True}, "summing to 1"),
    ({"logits_or_probs": torch.zeros(4, 3), "splits": 1, "ddof": 2}, "ddof"),
])
def test_inception_score_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        inception_score(**kwargs)


# --- digits classifier ---------------------------------------------------------------------

# A sound floor: the measured test accuracy at these settings is about 0.98, and a conv net
# that falls below 0.95 on the digits no longer knows them well enough for FID features.
ACCURACY_FLOOR = 0.95


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("actlab-cache")


@pytest.fixture(scope="module")
def digits_net(cache):
    return fc.digits_feature_network(image_size=8, channels=1, cache_dir=cache)


def test_classifier_is_accurate_and_cached(digits_net, cache, monkeypatch):
    assert not digits_net.from_cache
    assert digits_net.test_accuracy > ACCURACY_FLOOR
    assert digits_net.cache_path.is_file() and digits_net.cache_path.is_relative_to(cache)
    assert not list(digits_net.cache_path.parent.glob("*.tmp"))  # the atomic write cleaned up
    mtime = digits_net.cache_path.stat().st_mtime_ns

    def no_training(settings):
        raise AssertionError("retrained although the cached file exists")

    monkeypatch.setattr(fc, "train_digits_classifier", no_training)
    monkeypatch.setenv("ACTLAB_CACHE", str(cache))
    again = fc.digits_feature_network(image_size=8, channels=1)  # via $ACTLAB_CACHE
    assert again.from_cache and again.cache_path == digits_net.cache_path
    assert again.cache_path.stat().st_mtime_ns == mtime
    assert again.test_accuracy == digits_net.test_accuracy
    x = load_digits_pixels(image_size=8).x_test[:50]
    torch.testing.assert_close(again.features(x), digits_net.features(x), rtol=0, atol=0)


def test_classifier_training_is_deterministic(digits_net, tmp_path):
    other = fc.digits_feature_network(image_size=8, channels=1, cache_dir=tmp_path)
    assert not other.from_cache
    ours, theirs = digits_net.module.state_dict(), other.module.state_dict()
    for key in ours:
        torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=0)
    assert other.test_accuracy == digits_net.test_accuracy


def test_classifier_outputs_shapes_restore_mode_and_check_input(digits_net):
    x = load_digits_pixels(image_size=8).x_test[:7]
    digits_net.module.train()
    feats, logits = digits_net.features_and_logits(x)
    assert digits_net.module.training
    digits_net.module.eval()
    assert feats.shape == (7, fc.DigitsClassifier.feature_dim) and logits.shape == (7, 10)
    assert x.min() >= -1 and x.max() <= 1
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        digits_net.features(x * 3)
    with pytest.raises(ValueError, match="8x8"):
        digits_net.features(torch.zeros(2, 1, 16, 16))
    with pytest.raises(ValueError, match="channel"):
        digits_net.features(torch.zeros(2, 3, 8, 8))
    with pytest.raises(ValueError, match="image_size"):
        fc.digits_feature_network(image_size=12)


def test_digits_halves_give_a_small_fid_that_falls_with_n(digits_net):
    data = load_digits_pixels(image_size=8)
    x = torch.cat([data.x_train, data.x_test])
    x = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(7))]
    half = len(x) // 2
    feats_a, feats_b = digits_net.features(x[:half]), digits_net.features(x[half:])
    by_n = [fid(feats_a[:n], feats_b[:n]) for n in (100, 300, 700)]
    assert by_n[0] > by_n[1] > by_n[2] > 0
    noise = torch.rand(700, 1, 8, 8, generator=torch.Generator().manual_seed(8)) * 2 - 1
    mean_image = x[:half].mean(dim=0, keepdim=True).expand(700, -1, -1, -1)
    feats = digits_net.features(x[:700])
    to_noise = fid(feats, digits_net.features(noise))
    const_feats = digits_net.features(mean_image)
    to_mean = fid(feats, const_feats)
    # A constant image has zero feature covariance: FID = |mu - f(c)|^2 + tr(Sigma) exactly.
    mu, sigma = feature_statistics(feats)
    gap = mu - const_feats[0].double().numpy()
    assert to_mean == pytest.approx(float(gap @ gap + np.trace(sigma)), rel=1e-9)
    assert by_n[0] < min(to_noise, to_mean)
    assert 10 * by_n[2] < min(to_noise, to_mean)  # measured: about 40 times below


def test_generative_metrics_name_the_network(digits_net):
    data = load_digits_pixels(image_size=8)
    out = generative_metrics(data.x_test[:100], data.x_train[:200], digits_net, splits=5)
    assert set(out) == {"fid_digits-classifier", "is_digits-classifier",
                        "is_std_digits-classifier"}
    assert out["fid_digits-classifier"] == pytest.approx(
        fid(digits_net.features(data.x_test[:100]), digits_net.features(data.x_train[:200])))
    # A well-trained 10-class classifier on balanced real digits scores close to 10.
    assert 1.0 < out["is_digits-classifier"] <= 10.0
    assert metric_label("fid", digits_net) == "FID (digits-classifier features)"
    assert metric_label("is", "inception-v3-fid") == "IS (inception-v3-fid logits)"
    with pytest.raises(ValueError, match="fid"):
        metric_label("fdi", digits_net)


def test_feature_network_rejects_names_with_spaces():
    with pytest.raises(ValueError, match="name"):
        FeatureNetwork(nn.Identity(), name="my net")


# --- Inception-v3 of the FID variant ------------------------------------------------------

# torchvision's published parameter count of Inception-v3 (27,161,264, 1000 classes, with
# the auxiliary head of 3,326,696), minus the auxiliary head, plus 8 classes * 2049.
FID_INCEPTION_PARAMETERS = 27_161_264 - 3_326_696 + 8 * 2049


def test_inception_loads_a_state_dict_strictly_and_gives_pool3_and_logits(tmp_path):
    torch.manual_seed(9)
    source = FIDInceptionV3()
    assert sum(p.numel() for p in source.parameters()) == FID_INCEPTION_PARAMETERS
    state = source.state_dict()
    # Key names and shapes of pytorch-fid's weights file (torchvision's Inception3 layout).
    assert state["Conv2d_1a_3x3.conv.weight"].shape == (32, 3, 3, 3)
    assert state["Mixed_7c.branch3x3dbl_3b.bn.running_var"].shape == (384,)
    assert state["Mixed_6e.branch7x7dbl_5.conv.weight"].shape == (192, 192, 1, 7)
    assert state["fc.weight"].shape == (1008, 2048) and not any("Aux" in k for k in state)
    path = tmp_path / WEIGHTS_FILE
    torch.save(state, path)
    net = inception_v3_fid(path)
    assert net.name == "inception-v3-fid"
    for key, value in net.module.state_dict().items():
        torch.testing.assert_close(value, state[key], rtol=0, atol=0)
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(10)) * 2 - 1
    feats, logits = net.features_and_logits(images)
    assert feats.shape == (2, 2048) and logits.shape == (2, 1008)
    torch.testing.assert_close(logits, net.module.fc(feats), rtol=1e-5, atol=1e-6)


def test_inception_rejects_missing_and_wrong_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        inception_v3_fid(tmp_path / WEIGHTS_FILE)
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot read"):
        inception_v3_fid(garbage)
    wrong = tmp_path / "wrong.pth"
    torch.save(nn.Linear(3, 2).state_dict(), wrong)
    with pytest.raises(ValueError, match="missing keys"):
        inception_v3_fid(wrong)
