"""Digits, CIFAR-10 pickle files (a fake set written here) and random pairs."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from actlab.data.cifar import CIFAR10_MEAN, CIFAR10_STD, load_cifar10
from actlab.data.digits import load_digits
from actlab.data.random_pairs import random_pairs


def test_digits_fixed_split_standardized_and_upsampled():
    data = load_digits()
    assert data.x_train.shape == (1438, 1, 8, 8) and data.x_test.shape == (359, 1, 8, 8)
    assert data.num_classes == 10 and set(data.y_test.tolist()) == set(range(10))
    assert abs(float(data.x_train.mean())) < 1e-5 and abs(float(data.x_train.std()) - 1) < 1e-3
    again = load_digits()
    assert torch.equal(data.x_test, again.x_test) and torch.equal(data.y_train, again.y_train)
    other = load_digits(split_seed=1)
    assert not torch.equal(data.y_test, other.y_test)
    # the split is a partition of the 1797 images
    from sklearn.datasets import load_digits as sk

    assert len(data.y_train) + len(data.y_test) == len(sk().target)
    big = load_digits(image_size=16, channels=3)
    assert big.x_train.shape[1:] == (3, 16, 16) and big.in_features == 768
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits(test_fraction=1.5)


def _write_fake_cifar(folder, n_per_batch, rng):
    folder.mkdir(parents=True)
    stored = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, size=(n_per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n_per_batch).tolist()
        with open(folder / name, "wb") as fh:
            pickle.dump({b"data": data, b"labels": labels, b"batch_label": name.encode()}, fh)
        stored[name] = (data, labels)
    return stored


def test_cifar10_loader_reads_python_pickles(tmp_path):
    rng = np.random.default_rng(0)
    stored = _write_fake_cifar(tmp_path / "cifar-10-batches-py", 4, rng)
    data = load_cifar10(tmp_path)  # parent folder is found too
    assert data.x_train.shape == (20, 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)
    assert data.y_train.tolist() == sum((stored[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    raw = stored["data_batch_2"][0][1].reshape(3, 32, 32) / 255.0  # 6th training image
    expected = (raw - np.array(CIFAR10_MEAN)[:, None, None]) / np.array(CIFAR10_STD)[:, None, None]
    np.testing.assert_allclose(data.x_train[5].numpy(), expected, rtol=1e-5, atol=1e-5)
    raw_data = load_cifar10(tmp_path / "cifar-10-batches-py", normalize=False, limit_train=3)
    assert raw_data.x_train.shape[0] == 3
    np.testing.assert_allclose(raw_data.x_test[0].numpy().reshape(-1),
                               stored["test_batch"][0][0] / 255.0, rtol=1e-6)


def test_cifar10_missing_files_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="data_batch_1"):
        load_cifar10(tmp_path)
    folder = tmp_path / "bad"
    _write_fake_cifar(folder, 2, np.random.default_rng(1))
    with open(folder / "test_batch", "wb") as fh:
        pickle.dump({b"data": np.zeros((2, 10), dtype=np.uint8), b"labels": [0, 1]}, fh)
    with pytest.raises(ValueError, match="3072"):
        load_cifar10(folder)


class _Payload:
    """Unpickling this calls os.mkdir(target): the side effect a crafted file would have."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        import os

        return (os.mkdir, (self.target,))


def test_cifar10_crafted_pickle_is_refused_without_running_it(tmp_path):
    folder = tmp_path / "crafted"
    _write_fake_cifar(folder, 2, np.random.default_rng(2))
    marker = tmp_path / "payload_ran"
    with open(folder / "data_batch_3", "wb") as fh:
        pickle.dump({b"data": _Payload(marker), b"labels": [0, 1]}, fh)
    # the plain pickle module would run it: the payload is real
    with open(folder / "data_batch_3", "rb") as fh:
        pickle.load(fh)
    assert marker.is_dir()
    marker.rmdir()
    with pytest.raises(ValueError) as info:
        load_cifar10(folder)
    message = str(info.value)
    assert "\n" not in message and "data_batch_3" in message and "mkdir" in message
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar10_allow_list_reads_every_pickle_protocol(tmp_path, protocol):
    folder = tmp_path / "p"
    folder.mkdir()
    rng = np.random.default_rng(protocol)
    expected = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, size=(3, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=3).tolist()
        with open(folder / name, "wb") as fh:
            pickle.dump({b"data": data, b"labels": labels, b"batch_label": name.encode(),
                         b"filenames": [b"a.png", b"b.png", b"c.png"]}, fh, protocol=protocol)
        expected[name] = data
    if protocol == 2:  # as numpy 1 wrote it: the array constructor under numpy.core
        path = folder / "test_batch"
        blob = path.read_bytes().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
        assert b"cnumpy.core.multiarray\n_reconstruct" in blob
        path.write_bytes(blob)
    raw = load_cifar10(folder, normalize=False, dtype=torch.float64)
    np.testing.assert_array_equal((raw.x_test.numpy() * 255).round().astype(np.uint8),
                                  expected["test_batch"].reshape(-1, 3, 32, 32))


def test_random_pairs_are_seeded_standard_normal_and_independent():
    x, y = random_pairs(4000, 16, 8, seed=3)
    assert x.shape == (4000, 16) and y.shape == (4000, 8)
    x2, y2 = random_pairs(4000, 16, 8, seed=3)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert abs(float(x.mean())) < 0.02 and abs(float(x.std()) - 1) < 0.02
    corr = torch.corrcoef(torch.cat([x, y], 1).T)[:16, 16:]
    assert float(corr.abs().max()) < 0.08
    with pytest.raises(ValueError):
        random_pairs(0, 1, 1)


def test_cifar10_bad_files_are_named_and_refused_before_a_run(tmp_path):
    from actlab.errors import ConfigError
    from actlab.recipes.image_classifier import check_cifar_dir

    rng = np.random.default_rng(3)
    # random bytes: refused from their first bytes, at config time
    junk = tmp_path / "junk"
    _write_fake_cifar(junk, 2, rng)
    (junk / "data_batch_2").write_bytes(bytes(rng.integers(1, 40, 5000, dtype=np.uint8)))
    with pytest.raises(ConfigError, match="data_batch_2: not a CIFAR-10 batch file") as err:
        check_cifar_dir(str(junk))
    assert err.value.field == "cifar_dir"
    # a truncated pickle: refused at load, naming the file, in one line
    cut = tmp_path / "cut"
    _write_fake_cifar(cut, 2, rng)
    blob = (cut / "test_batch").read_bytes()
    (cut / "test_batch").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ValueError) as info:
        load_cifar10(cut)
    assert "test_batch: not a readable CIFAR-10 batch file" in str(info.value)
    assert "\n" not in str(info.value)
    # labels outside 0-9: refused at load, not as an IndexError inside a loss
    wrong = tmp_path / "labels"
    _write_fake_cifar(wrong, 2, rng)
    with open(wrong / "data_batch_1", "wb") as fh:
        pickle.dump({b"data": np.zeros((2, 3072), dtype=np.uint8), b"labels": [3, 52]}, fh)
    with pytest.raises(ValueError, match="labels must be 0-9.*found 52"):
        load_cifar10(wrong)
