"""Fréchet distance (FID) and Inception Score (IS) on the features of a named network.

FID follows "GANs Trained by a Two Time-Scale Update Rule Converge to a Local Nash
Equilibrium" (Heusel et al., 2017), section 3 ("Fréchet Inception Distance"): fit a Gaussian
to each set's features and take the Fréchet (Wasserstein-2) distance between the two,

    d^2 = |mu_1 - mu_2|^2 + tr(S_1 + S_2 - 2 (S_1 S_2)^{1/2}).

IS follows "Improved Techniques for Training GANs" (Salimans et al., 2016), section 4
("Assessment of image quality"): ``exp(E_x KL(p(y|x) || p(y)))``, computed on ``splits``
consecutive parts of the predictions, reported as the mean and standard deviation over the
parts.

Both are only as meaningful as the network that made the features, so
:func:`generative_metrics` names its keys after the network (``"fid_digits-classifier"``)
and :func:`metric_label` writes e.g. ``"FID (digits-classifier features)"``, never a bare
"FID" that a reader would take for the Inception-v3 number.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from actlab.errors import did_you_mean
from actlab.measure.feature_network import FeatureNetwork

ArrayLike = Tensor | np.ndarray


def _float64(x: ArrayLike, what: str) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} contains NaN or infinite values")
    return arr


def _covariance(sigma: ArrayLike, dim: int, what: str) -> np.ndarray:
    s = _float64(sigma, what)
    if s.shape != (dim, dim):
        raise ValueError(f"{what} must be ({dim}, {dim}) to match the mean, got {s.shape}")
    scale = float(np.abs(s).max()) if s.size else 0.0
    if not np.allclose(s, s.T, rtol=1e-6, atol=1e-12 * scale):
        raise ValueError(f"{what} is not symmetric, so it is not a covariance matrix")
    return 0.5 * (s + s.T)


def _psd_sqrt(s: np.ndarray) -> np.ndarray:
    # Negative eigenvalues of a covariance can only come from rounding: clip them to 0.
    w, v = np.linalg.eigh(s)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def frechet_distance(mu1: ArrayLike, sigma1: ArrayLike, mu2: ArrayLike,
                     sigma2: ArrayLike) -> float:
    """Squared Fréchet distance between ``N(mu1, sigma1)`` and ``N(mu2, sigma2)``, in float64.

    The trace of ``(S_1 S_2)^{1/2}`` is computed from the symmetric matrix
    ``S_1^{1/2} S_2 S_1^{1/2}``, which has the same eigenvalues as ``S_1 S_2`` but is
    positive semi-definite, so its square root comes from a symmetric eigendecomposition:
    no imaginary parts, and no epsilon added to singular covariances (fewer samples than
    feature dimensions) as the ``scipy.linalg.sqrtm`` route of pytorch-fid needs. The
    distance is never negative; a rounding residue below 0 is returned as 0.
    """
    m1, m2 = _float64(mu1, "mu1").reshape(-1), _float64(mu2, "mu2").reshape(-1)
    if m1.shape != m2.shape:
        raise ValueError(f"mu1 and mu2 must have the same length, got {m1.size} and {m2.size}")
    s1 = _covariance(sigma1, m1.size, "sigma1")
    s2 = _covariance(sigma2, m1.size, "sigma2")
    root1 = _psd_sqrt(s1)
    inner = root1 @ s2 @ root1
    eig = np.linalg.eigvalsh(0.5 * (inner + inner.T))
    trace_sqrt = float(np.sqrt(np.clip(eig, 0.0, None)).sum())
    diff = m1 - m2
    d2 = float(diff @ diff) + float(np.trace(s1)) + float(np.trace(s2)) - 2.0 * trace_sqrt
    return max(d2, 0.0)


def feature_statistics(features: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``(D,)`` and unbiased covariance ``(D, D)`` (divided by ``N - 1``) of ``(N, D)`` rows.

    The same estimator as pytorch-fid (``np.cov``) and torchmetrics.
    """
    x = _float64(features, "features")
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"features must be (N, D) with N >= 2, got shape {x.shape}")
    return x.mean(axis=0), np.atleast_2d(np.cov(x, rowvar=False))


def fid(features_a: ArrayLike, features_b: ArrayLike) -> float:
    """Fréchet distance between the Gaussians fitted to two ``(N, D)`` feature sets."""
    mu_a, sigma_a = feature_statistics(features_a)
    mu_b, sigma_b = feature_statistics(features_b)
    if mu_a.shape != mu_b.shape:
        raise ValueError(f"feature sets differ in dimension: {mu_a.size} and {mu_b.size}")
    return frechet_distance(mu_a, sigma_a, mu_b, sigma_b)


def _is_probability_table(x: Tensor) -> bool:
    sums = x.sum(dim=1)
    return bool((x >= 0).all()) and bool(torch.allclose(sums, torch.ones_like(sums)))


def inception_score(logits_or_probs: ArrayLike, splits: int = 10, *,
                    probs: bool | None = None, ddof: int = 1) -> tuple[float, float]:
    """Inception Score ``exp(E_x KL(p(y|x) || p(y)))``: mean and std over ``splits`` parts.

    ``logits_or_probs`` is ``(N, K)``: class logits, or probabilities when ``probs=True``.
    With ``probs=None`` rows that are non-negative and sum to 1 are taken as probabilities,
    anything else as logits. The rows are cut in order into ``splits`` parts of sizes
    differing by at most one (as in the original code of Salimans et al.); ``p(y)`` is each
    part's mean prediction. The std uses ``ddof=1`` (the sample std, as torchmetrics'
    ``InceptionScore``; the original code used ``numpy.std``, i.e. ``ddof=0``), so it is NaN
    for ``splits=1`` with the default ``ddof``.
    """
    x = torch.as_tensor(_float64(logits_or_probs, "logits_or_probs"))
    if x.dim() != 2 or x.shape[1] < 2:
        raise ValueError(f"logits_or_probs must be (N, K) with K >= 2, got {tuple(x.shape)}")
    if not isinstance(splits, int) or not 1 <= splits <= x.shape[0]:
        raise ValueError(f"splits must be an integer in [1, N={x.shape[0]}], got {splits!r}")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof}")
    if probs is None:
        probs = _is_probability_table(x)
    if probs:
        if not _is_probability_table(x):
            raise ValueError("probs=True but rows are not non-negative and summing to 1")
        p = x
    else:
        p = torch.softmax(x, dim=1)
    scores = []
    for part in np.array_split(np.arange(x.shape[0]), splits):
        q = p[torch.as_tensor(part)]
        marginal = q.mean(dim=0, keepdim=True)
        # xlogy gives 0 * log 0 = 0 for classes a prediction rules out.
        kl = (torch.special.xlogy(q, q) - torch.special.xlogy(q, marginal)).sum(dim=1)
        scores.append(float(torch.exp(kl.mean())))
    arr = np.asarray(scores)
    std = float(arr.std(ddof=ddof)) if len(arr) > ddof else float("nan")
    return float(arr.mean()), std


_LABELS = {"fid": "FID ({} features)", "is": "IS ({} logits)", "is_std": "IS std ({} logits)"}


def metric_label(metric: str, network: FeatureNetwork | str) -> str:
    """Display label naming the network, e.g. ``"FID (digits-classifier features)"``.

    ``metric`` is ``"fid"``, ``"is"`` or ``"is_std"``; ``network`` a network or its name.
    """
    if metric not in _LABELS:
        hint = did_you_mean(metric, _LABELS, fallback=True, quote=True, prefix="; ")
        raise ValueError(f"unknown metric {metric!r}{hint}")
    name = network if isinstance(network, str) else network.name
    return _LABELS[metric].format(name)


def generative_metrics(samples: Tensor, reference: Tensor, network: FeatureNetwork, *,
                       splits: int = 10) -> dict[str, float]:
    """FID of ``samples`` against ``reference`` and IS of ``samples``, keyed by network name.

    Returns ``{"fid_<name>": ..., "is_<name>": ..., "is_std_<name>": ...}``; use
    :func:`metric_label` for the matching display labels.
    """
    feats, logits = network.features_and_logits(samples)
    ref_feats = network.features(reference)
    is_mean, is_std = inception_score(logits, splits=splits, probs=False)
    return {f"fid_{network.name}": fid(feats, ref_feats),
            f"is_{network.name}": is_mean,
            f"is_std_{network.name}": is_std}
