"""The offline default feature network: a small conv classifier of scikit-learn's digits.

FID and IS need a network that knows the images. For the digits (``actlab.data.digits``,
bundled with scikit-learn) :func:`digits_feature_network` trains a two-convolution
classifier once, deterministically from ``seed``, and caches its weights as a safetensors
file under ``<cache>/feature_networks/`` (``cache_dir``, else ``$ACTLAB_CACHE``, else
``~/.cache/actlab``). The file name is a hash of the training settings and the torch
major.minor version, so changing either trains a new one; later calls just load it. The
test-split accuracy is stored in the file's metadata and exposed as ``test_accuracy``.

Inputs are ``(N, channels, image_size, image_size)`` images in ``[-1, 1]``: the digits as
:func:`actlab.data.digits.load_digits_pixels` gives them (the same split). Features are the
128 post-ReLU units of the penultimate layer; logits are the 10 classes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from actlab.data.digits import load_digits_pixels
from actlab.data.text import cache_dir as default_cache_dir
from actlab.measure.feature_network import FeatureNetwork

NAME = "digits-classifier"
IMAGE_SIZES = (8, 16, 32)
FORMAT_VERSION = 1  # bump when the architecture or training loop changes


@dataclass(frozen=True)
class ClassifierSettings:
    """Everything that determines the trained weights (and so the cache key)."""

    image_size: int = 8
    channels: int = 1
    seed: int = 0
    epochs: int = 15
    batch_size: int = 64
    lr: float = 1e-2  # peak of the one-cycle schedule
    split_seed: int = 0
    format_version: int = FORMAT_VERSION

    def cache_key(self) -> str:
        """Hash of the settings and the torch major.minor version."""
        torch_version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
        blob = json.dumps({**asdict(self), "torch": torch_version}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class DigitsClassifier(nn.Module):
    """conv-ReLU-maxpool, conv-ReLU-avgpool to 4x4, 128 ReLU units, 10 logits."""

    feature_dim = 128

    def __init__(self, channels: int = 1, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(4)  # the same 4x4 grid at every image size
        self.hidden = nn.Linear(32 * 16, self.feature_dim)
        self.head = nn.Linear(self.feature_dim, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(features, logits)`` of a batch."""
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = self.pool(torch.relu(self.conv2(x)))
        features = torch.relu(self.hidden(x.flatten(1)))
        return features, self.head(features)


class DigitsFeatureNetwork(FeatureNetwork):
    """The cached digits classifier as a :class:`FeatureNetwork` named ``"digits-classifier"``.

    ``test_accuracy`` is its accuracy on the digits test split, ``cache_path`` its weights
    file, and ``from_cache`` tells whether this instance was loaded rather than trained.
    """

    def __init__(self, module: DigitsClassifier, settings: ClassifierSettings, *,
                 test_accuracy: float, cache_path: Path, from_cache: bool) -> None:
        super().__init__(module, name=NAME, channels=settings.channels,
                         image_size=settings.image_size)
        self.settings = settings
        self.test_accuracy = test_accuracy
        self.cache_path = cache_path
        self.from_cache = from_cache


def _accuracy(model: DigitsClassifier, x: Tensor, y: Tensor) -> float:
    with torch.no_grad():
        return float((model(x)[1].argmax(dim=1) == y).double().mean())


def train_digits_classifier(settings: ClassifierSettings) -> tuple[DigitsClassifier, float]:
    """Train the classifier from ``settings.seed``; returns it (eval mode) and test accuracy.

    The global RNG is left untouched: initialisation runs under a forked RNG and the batch
    order comes from its own generator.
    """
    data = load_digits_pixels(image_size=settings.image_size, channels=settings.channels,
                              split_seed=settings.split_seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model = DigitsClassifier(settings.channels, data.num_classes)
    order = torch.Generator().manual_seed(settings.seed)
    opt = torch.optim.Adam(model.parameters(), lr=settings.lr)
    steps = settings.epochs * -(-len(data.y_train) // settings.batch_size)
    # One-cycle warm-up and annealing: about 1% more test accuracy than a constant rate.
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, settings.lr, total_steps=steps)
    model.train()
    for _ in range(settings.epochs):
        for idx in torch.randperm(len(data.y_train), generator=order).split(settings.batch_size):
            loss = nn.functional.cross_entropy(model(data.x_train[idx])[1], data.y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
    model.eval()
    return model, _accuracy(model, data.x_test, data.y_test)


def _save_atomic(path: Path, tensors: dict[str, Tensor], metadata: dict[str, str]) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    # Write next to the target, then rename: readers never see a half-written file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, tmp, metadata)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load(path: Path, settings: ClassifierSettings) -> tuple[DigitsClassifier, float]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}
        stored = json.loads(metadata["settings"])
        accuracy = float(metadata["test_accuracy"])
    except Exception as exc:  # corrupt file, foreign file, missing metadata
        raise ValueError(f"cannot read the cached digits classifier {path} ({exc}); "
                         "delete the file to retrain it") from exc
    if stored != asdict(settings):
        raise ValueError(f"cached digits classifier {path} was trained with {stored}, "
                         f"not {asdict(settings)}; delete the file to retrain it")
    model = DigitsClassifier(settings.channels)
    model.load_state_dict(state, strict=True)
    return model.eval(), accuracy


def digits_feature_network(image_size: int = 8, channels: int = 1,
                           cache_dir: str | os.PathLike | None = None, *,
                           seed: int = 0) -> DigitsFeatureNetwork:
    """The digits classifier for ``image_size`` (8, 16 or 32) and ``channels`` (1 or 3).

    Loads it from the cache folder, or trains it (a few seconds on one core) and caches it.
    """
    if image_size not in IMAGE_SIZES:
        raise ValueError(f"image_size must be one of {IMAGE_SIZES}, got {image_size}")
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels}")
    settings = ClassifierSettings(image_size=image_size, channels=channels, seed=seed)
    folder = default_cache_dir(cache_dir) / "feature_networks"
    path = folder / f"{NAME}-{settings.cache_key()}.safetensors"
    from_cache = path.exists()
    if from_cache:
        model, accuracy = _load(path, settings)
    else:
        model, accuracy = train_digits_classifier(settings)
        metadata = {"settings": json.dumps(asdict(settings), sort_keys=True),
                    "test_accuracy": repr(accuracy), "torch": torch.__version__, "name": NAME}
        _save_atomic(path, model.state_dict(), metadata)
    return DigitsFeatureNetwork(model, settings, test_accuracy=accuracy, cache_path=path,
                                from_cache=from_cache)
