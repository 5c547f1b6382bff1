"""CIFAR-10 from its standard python-pickle files in a local directory (never downloaded).

Point ``root`` at the folder holding ``data_batch_1`` .. ``data_batch_5`` and
``test_batch`` (or at its parent containing ``cifar-10-batches-py``). Images are scaled to
[0, 1] and normalized per channel with the usual CIFAR-10 statistics ("Bug or Feature²", App. D.1).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actlab.data.digits import ImageData

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


def find_cifar10(root: str | Path) -> Path:
    """The directory with CIFAR-10's batch files under ``root``; ``FileNotFoundError`` if
    none, ``ValueError`` naming a file that is empty or does not start as a pickle (checked
    from its first bytes, so a run refuses it before any unit starts)."""
    root = Path(root).expanduser()
    for candidate in (root, root / "cifar-10-batches-py"):
        if all((candidate / name).is_file() for name in (*TRAIN_FILES, TEST_FILE)):
            for name in (*TRAIN_FILES, TEST_FILE):
                with open(candidate / name, "rb") as handle:
                    head = handle.read(2)
                if len(head) < 2 or head[0] not in PICKLE_OPENINGS:
                    raise ValueError(f"{candidate / name}: not a CIFAR-10 batch file (empty or "
                                     "not a pickle)")
            return candidate
    missing = [name for name in (*TRAIN_FILES, TEST_FILE) if not (root / name).is_file()]
    raise FileNotFoundError(
        f"CIFAR-10 python files not found in {root} (nor in {root / 'cifar-10-batches-py'}); "
        f"missing {', '.join(missing)}")


# Every global a CIFAR-10 batch file may name: numpy's array and dtype constructors (numpy 1
# pickles say numpy.core, numpy 2 pickles numpy._core; protocol 5 uses _frombuffer) and the
# bytes constructor of protocol-2 pickles written by Python 3. dict, list, bytes and str need
# no global. Anything else (os.system, builtins.eval, ...) is refused before it is called.
_ALLOWED = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
    *((f"{core}.multiarray", "_reconstruct") for core in ("numpy.core", "numpy._core")),
    *((f"{core}.numeric", "_frombuffer") for core in ("numpy.core", "numpy._core")),
}


# The first byte of a pickle: PROTO (protocol 2 and later, as the dataset's files) or, for
# protocols 0 and 1, the opcodes a dict of lists can start with (MARK, EMPTY_DICT, EMPTY_LIST,
# GLOBAL).
PICKLE_OPENINGS = frozenset(b"\x80(}]c")


class UnsafePickleError(ValueError):
    """A pickle file names a global outside the CIFAR-10 allow-list."""


class _CifarUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals in :data:`_ALLOWED`."""

    def __init__(self, handle: io.BufferedReader, path: Path) -> None:
        super().__init__(handle, encoding="bytes")
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        """Resolve ``module.name`` if allowed, else raise :class:`UnsafePickleError`."""
        if (module, name) not in _ALLOWED:
            raise UnsafePickleError(
                f"{self.path}: refused to load, it names {module}.{name}, which a CIFAR-10 "
                f"batch file never holds (allowed: dict, list, bytes, str, numpy arrays)")
        if module.startswith("numpy.core"):
            module = module.replace("numpy.core", _numpy_core(), 1)
        return super().find_class(module, name)


def _numpy_core() -> str:
    """numpy 2 renamed numpy.core to numpy._core (the old name warns when imported)."""
    return "numpy._core" if int(np.__version__.split(".")[0]) >= 2 else "numpy.core"


def safe_load_pickle(path: Path) -> Any:
    """Unpickle a CIFAR-10 batch file, resolving only numpy-array globals; a file that is
    not a pickle, or is cut short, raises ``ValueError`` naming it."""
    with open(path, "rb") as handle:
        try:
            return _CifarUnpickler(handle, path).load()
        except UnsafePickleError:
            raise
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
            raise ValueError(f"{path}: not a readable CIFAR-10 batch file ({type(exc).__name__}: "
                             f"{exc}); the file is truncated or is not the dataset's "
                             "python version") from None


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    batch = safe_load_pickle(path)
    if not isinstance(batch, dict):
        raise ValueError(f"{path.name} is not a CIFAR-10 batch (a {type(batch).__name__}, "
                         f"not a dict)")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise ValueError(f"{path.name} is not a CIFAR-10 batch (no data/labels entries)")
    data = np.asarray(data, dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ValueError(f"{path.name}: expected (N, 3072) uint8 data with N labels, "
                         f"got {data.shape} and {len(labels)} labels")
    labels = np.asarray(labels, dtype=np.int64)
    bad = labels[(labels < 0) | (labels >= 10)]
    if bad.size:  # caught here, not as an IndexError deep in a loss
        raise ValueError(f"{path}: labels must be 0-9 (ten classes), found {int(bad[0])} "
                         f"({bad.size} out of range)")
    return data.reshape(-1, 3, 32, 32), labels


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
