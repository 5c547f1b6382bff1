"""The statistics behind FID and IS, accumulated batch by batch and mergeable across processes,
and the reference statistics a Fréchet distance compares with.

:class:`FeatureMoments` keeps the count, sum and sum of outer products of ``(N, D)`` features
(float64, about a fixed centre), so N samples can be scored in batches, on several ranks,
and merged with one summing collective: the mean and unbiased covariance are those of
:func:`~actlab.measure.fid.feature_statistics` on all N rows, to rounding.
:class:`InceptionScoreParts` does the same for the Inception Score of
:func:`~actlab.measure.fid.inception_score` (its ``splits`` consecutive parts of the N
samples): predictions may arrive in any order, each with its sample's index.

:class:`ReferenceStatistics` is ``(mu, sigma)`` of a reference set and the name of the
feature network that made them; :func:`reference_statistics` reads them from

* an ``.npz`` file: the reference batches of guided-diffusion's evaluator
  (``evaluations/evaluator.py``: ``mu`` and ``sigma`` of the TensorFlow Inception-v3's
  ``pool_3`` features, which only :func:`~actlab.measure.inception.inception_v3_fid`'s
  features, the same network ported, may be compared with), or ``arr_0`` images
  ``(N, H, W, 3)`` uint8, scored here; or a file written by :meth:`ReferenceStatistics.save`;
* a folder of images (:mod:`actlab.data.image_folder`'s ``root/<class>/<image>`` layout,
  read in batches at ``image_size``), scored here and cached under
  ``<cache>/fid_reference/`` keyed by the folder, its files and the network.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from actlab.measure.feature_network import FeatureNetwork

Reduce = Callable[[Tensor], Tensor]  # sums a tensor over the ranks (identity in one process)
INCEPTION_NAME = "inception-v3-fid"  # actlab.measure.inception.NAME, without importing it


def _identity(x: Tensor) -> Tensor:
    return x


class FeatureMoments:
    """Count, sum and sum of outer products of ``(N, D)`` features about ``center``.

    ``center`` (default 0) only conditions the arithmetic: a centre near the features'
    mean (e.g. the reference mean) keeps the covariance ``(S2 - s s^T / n) / (n - 1)`` free
    of cancellation. Every rank must use the same centre.
    """

    def __init__(self, dim: int, center: np.ndarray | Tensor | None = None) -> None:
        self.dim = int(dim)
        c = torch.zeros(self.dim, dtype=torch.float64) if center is None else \
            torch.as_tensor(np.asarray(center, dtype=np.float64))
        if c.shape != (self.dim,):
            raise ValueError(f"center must have shape ({self.dim},), got {tuple(c.shape)}")
        self.center = c
        self.count = 0
        self.sum = torch.zeros(self.dim, dtype=torch.float64)
        self.outer = torch.zeros(self.dim, self.dim, dtype=torch.float64)

    def update(self, features: Tensor) -> None:
        """Add the rows of ``features`` ``(n, D)``."""
        x = features.detach().to("cpu", torch.float64)
        if x.dim() != 2 or x.shape[1] != self.dim:
            raise ValueError(f"features must be (n, {self.dim}), got {tuple(x.shape)}")
        if not torch.isfinite(x).all():
            raise ValueError("features contain NaN or infinite values")
        x = x - self.center
        self.count += x.shape[0]
        self.sum += x.sum(dim=0)
        self.outer += x.T @ x

    def reduce(self, reduce: Reduce = _identity) -> None:
        """Sum the moments over the ranks (one collective on a packed tensor)."""
        packed = torch.cat([torch.tensor([float(self.count)], dtype=torch.float64), self.sum,
                            self.outer.reshape(-1)])
        packed = reduce(packed)
        self.count = round(float(packed[0]))
        self.sum = packed[1:1 + self.dim].clone()
        self.outer = packed[1 + self.dim:].reshape(self.dim, self.dim).clone()

    def statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean ``(D,)`` and unbiased covariance ``(D, D)`` of every row added."""
        if self.count < 2:
            raise ValueError(f"need at least 2 feature rows, got {self.count}")
        n = self.count
        mean = self.sum / n
        cov = (self.outer - torch.outer(self.sum, self.sum) / n) / (n - 1)
        return (self.center + mean).numpy(), (0.5 * (cov + cov.T)).numpy()


class InceptionScoreParts:
    """The Inception Score of ``total`` samples cut in order into ``splits`` parts (as
    :func:`~actlab.measure.fid.inception_score`), from ``classes``-way logits that arrive in
    any order and on any rank, each row with its sample's index in ``0 .. total - 1``."""

    def __init__(self, total: int, classes: int, splits: int = 10) -> None:
        if not 1 <= splits <= total or classes < 2:
            raise ValueError(f"need splits in [1, total={total}] and classes >= 2, got "
                             f"{splits} and {classes}")
        self.total, self.classes, self.splits = int(total), int(classes), int(splits)
        parts = np.array_split(np.arange(self.total), self.splits)
        self.starts = np.array([p[0] for p in parts])
        self.sizes = torch.tensor([len(p) for p in parts], dtype=torch.float64)
        self.probs: list[Tensor] = []
        self.parts: list[Tensor] = []

    def update(self, logits: Tensor, indices: Tensor | Iterable[int]) -> None:
        """Add the class logits ``(n, K)`` of the samples numbered ``indices``."""
        index = torch.as_tensor(list(indices) if not isinstance(indices, Tensor) else indices)
        index = index.cpu()
        if logits.shape != (len(index), self.classes):
            raise ValueError(f"need ({len(index)}, {self.classes}) logits for {len(index)} "
                             f"indices, got {tuple(logits.shape)}")
        if len(index) and (int(index.min()) < 0 or int(index.max()) >= self.total):
            raise ValueError(f"indices must lie in [0, {self.total})")
        self.probs.append(torch.softmax(logits.detach().to("cpu", torch.float64), dim=1))
        self.parts.append(torch.as_tensor(np.searchsorted(self.starts, index.numpy(),
                                                          side="right") - 1))

    def result(self, reduce: Reduce = _identity, ddof: int = 1) -> tuple[float, float]:
        """Mean and standard deviation (``ddof``) of the parts' scores, merged by ``reduce``."""
        k = self.classes
        probs = torch.cat(self.probs) if self.probs else torch.zeros(0, k, dtype=torch.float64)
        parts = torch.cat(self.parts) if self.parts else torch.zeros(0, dtype=torch.long)
        counts = reduce(torch.zeros(self.splits, dtype=torch.float64).index_add_(
            0, parts, torch.ones(len(parts), dtype=torch.float64)))
        if not torch.equal(counts, self.sizes):
            raise ValueError(f"scored {int(counts.sum())} of {self.total} samples "
                             f"(per part {counts.tolist()}, expected {self.sizes.tolist()})")
        sums = reduce(torch.zeros(self.splits, k, dtype=torch.float64).index_add_(0, parts, probs))
        marginal = sums / self.sizes[:, None]
        kl = (torch.special.xlogy(probs, probs)
              - torch.special.xlogy(probs, marginal[parts])).sum(dim=1)
        kl_sums = reduce(torch.zeros(self.splits, dtype=torch.float64).index_add_(0, parts, kl))
        scores = torch.exp(kl_sums / self.sizes).numpy()
        std = float(scores.std(ddof=ddof)) if len(scores) > ddof else float("nan")
        return float(scores.mean()), std


@dataclass
class ReferenceStatistics:
    """``mu`` ``(D,)`` and ``sigma`` ``(D, D)`` of a reference set's features, the feature
    network's name, where they came from and (when known) over how many images."""

    mu: np.ndarray
    sigma: np.ndarray
    network: str
    source: str
    count: int | None = None

    def save(self, path: str | os.PathLike) -> Path:
        """Write an ``.npz`` with ``mu`` and ``sigma`` (the keys guided-diffusion's evaluator
        reads) and the network's name."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            np.savez(handle, mu=self.mu, sigma=self.sigma, network=np.array(self.network),
                     count=np.array(-1 if self.count is None else self.count))
        return path


def _check_network_name(found: str, network: FeatureNetwork, source: str) -> None:
    if found != network.name:
        raise ValueError(f"{source} holds statistics of {found} features; they compare only "
                         f"with features of the same network, not {network.name}")


def _from_npz(path: Path, network: FeatureNetwork, batch_size: int) -> ReferenceStatistics:
    with np.load(path, allow_pickle=False) as npz:
        keys = set(npz.files)
        if {"mu", "sigma"} <= keys:
            # ours name their network; guided-diffusion's hold the TF Inception's pool_3
            found = str(npz["network"]) if "network" in keys else INCEPTION_NAME
            _check_network_name(found, network, str(path))
            count = int(npz["count"]) if "count" in keys and int(npz["count"]) >= 0 else None
            return ReferenceStatistics(np.asarray(npz["mu"], np.float64),
                                       np.asarray(npz["sigma"], np.float64), found,
                                       str(path), count)
        if "arr_0" not in keys:
            raise ValueError(f"{path} holds neither mu/sigma nor arr_0 images (found "
                             f"{', '.join(sorted(keys)) or 'nothing'})")
        images = npz["arr_0"]
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"{path}: arr_0 must be (N, H, W, 3) uint8 images, got "
                         f"{images.shape} {images.dtype}")
    batches = (torch.from_numpy(images[i:i + batch_size]).permute(0, 3, 1, 2).float() / 127.5 - 1
               for i in range(0, len(images), batch_size))
    return _score(batches, network, str(path))


def _score(batches: Iterable[Tensor], network: FeatureNetwork, source: str) -> ReferenceStatistics:
    moments: FeatureMoments | None = None
    for batch in batches:
        feats = network.features(batch)
        if moments is None:
            moments = FeatureMoments(feats.shape[1], feats.double().mean(dim=0))
        moments.update(feats)
    if moments is None:
        raise ValueError(f"{source} holds no images")
    mu, sigma = moments.statistics()
    return ReferenceStatistics(mu, sigma, network.name, source, moments.count)


def _folder_key(root: Path, files: list[Path], network: FeatureNetwork, image_size: int,
                per_class: int | None) -> str:
    listing = [(str(p.relative_to(root)), p.stat().st_size) for p in files]
    text = json.dumps([str(root.resolve()), network.name, image_size, per_class, listing])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def reference_statistics(source: str | os.PathLike, network: FeatureNetwork, *,
                         image_size: int | None = None, batch_size: int = 64,
                         limit_per_class: int | None = None,
                         cache_dir: str | os.PathLike | None = None) -> ReferenceStatistics:
    """The reference statistics of ``source`` (an ``.npz`` file or an image folder, see the
    module docstring) on ``network``'s features.

    ``image_size`` (folders only, required there) is the side the images are brought to,
    that of the generated samples; ``limit_per_class`` keeps the first images of each
    class. Raises ``FileNotFoundError`` for a missing source and ``ValueError`` for one that
    holds another network's statistics or no images.
    """
    from actlab.data.image_folder import image_folder_batches, image_folder_files
    from actlab.data.text import cache_dir as default_cache_dir

    path = Path(source).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"FID reference {path} does not exist (give an image folder "
                                "or an .npz of reference statistics or images)")
    if path.is_file():
        if path.suffix != ".npz":
            raise ValueError(f"FID reference {path}: a file must be an .npz")
        return _from_npz(path, network, batch_size)
    if image_size is None:
        raise ValueError("image_size: needed to read a reference image folder")
    files = image_folder_files(path, limit_per_class)
    key = _folder_key(path, files, network, image_size, limit_per_class)
    cached = default_cache_dir(cache_dir) / "fid_reference" / f"{key}.npz"
    if cached.exists():
        stats = _from_npz(cached, network, batch_size)
        return ReferenceStatistics(stats.mu, stats.sigma, stats.network, str(path), stats.count)
    stats = _score(image_folder_batches(path, image_size=image_size, batch_size=batch_size,
                                        limit_per_class=limit_per_class,
                                        channels=network.channels or 3),
                   network, str(path))
    stats.save(cached)
    return stats


__all__ = ["FeatureMoments", "InceptionScoreParts", "ReferenceStatistics",
           "reference_statistics"]
