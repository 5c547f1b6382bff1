"""CIFAR-10 from its standard python-pickle files in a local directory (never downloaded).

Point ``root`` at the folder holding ``data_batch_1`` .. ``data_batch_5`` and
``test_batch`` (or at its parent containing ``cifar-10-batches-py``). Images are scaled to
[0, 1] and normalized per channel with the usual CIFAR-10 statistics (seed 003, App. D.1).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from actlab.data.digits import ImageData

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


def find_cifar10(root: str | Path) -> Path:
    """The directory with CIFAR-10's batch files under ``root``; ``FileNotFoundError`` if none."""
    root = Path(root).expanduser()
    for candidate in (root, root / "cifar-10-batches-py"):
        if all((candidate / name).is_file() for name in (*TRAIN_FILES, TEST_FILE)):
            return candidate
    missing = [name for name in (*TRAIN_FILES, TEST_FILE) if not (root / name).is_file()]
    raise FileNotFoundError(
        f"CIFAR-10 python files not found in {root} (nor in {root / 'cifar-10-batches-py'}); "
        f"missing {', '.join(missing)}")


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as handle:
        batch = pickle.load(handle, encoding="bytes")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise ValueError(f"{path.name} is not a CIFAR-10 batch (no data/labels entries)")
    data = np.asarray(data, dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ValueError(f"{path.name}: expected (N, 3072) uint8 data with N labels, "
                         f"got {data.shape} and {len(labels)} labels")
    return data.reshape(-1, 3, 32, 32), np.asarray(labels, dtype=np.int64)


def load_cifar10(root: str | Path, *, normalize: bool = True, limit_train: int | None = None,
                 limit_test: int | None = None, dtype: torch.dtype = torch.float32) -> ImageData:
    """CIFAR-10 as :class:`~actlab.data.digits.ImageData` (``(N, 3, 32, 32)`` images).

    ``limit_train``/``limit_test`` keep only the first examples (for quick runs).
    """
    folder = find_cifar10(root)
    train = [_read_batch(folder / name) for name in TRAIN_FILES]
    x_train = np.concatenate([b[0] for b in train])[:limit_train]
    y_train = np.concatenate([b[1] for b in train])[:limit_train]
    x_test, y_test = _read_batch(folder / TEST_FILE)
    x_test, y_test = x_test[:limit_test], y_test[:limit_test]

    def to_tensor(x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(x).to(torch.float64) / 255.0
        if normalize:
            mean = torch.tensor(CIFAR10_MEAN, dtype=torch.float64).view(1, 3, 1, 1)
            std = torch.tensor(CIFAR10_STD, dtype=torch.float64).view(1, 3, 1, 1)
            t = (t - mean) / std
        return t.to(dtype)

    return ImageData(to_tensor(x_train), torch.from_numpy(y_train), to_tensor(x_test),
                     torch.from_numpy(y_test), 10, "cifar10")
