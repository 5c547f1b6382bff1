"""The ImageNet-style training loader: timm's augmentations written from their formulas
(random resized crop, RandAugment's ops and magnitudes, random erasing, the evaluation
resize and crop), Mixup / CutMix with label smoothing, and the streaming folder reader on a
tiny folder of PNGs (epochs are permutations, a step's batch is a function of the step, a
rank's part equals its slice of the whole batch, evaluation covers every image once)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image
from test_fid_latents import _image_folder

from actlab.data.augment import (
    RAND_INCREASING_OPS,
    ImageTransform,
    _ops,
    erase_box,
    rand_augment,
    random_resized_crop_box,
)
from actlab.data.image_stream import ImageStream, split_folders
from actlab.data.mixing import Mixing, smoothed_targets


def test_random_resized_crop_box_follows_timms_bounds_and_fallback():
    rng = np.random.default_rng(0)
    areas = []
    for _ in range(2000):
        top, left, h, w = random_resized_crop_box(64, 48, rng)
        assert 0 <= top <= 48 - h and 0 <= left <= 64 - w
        # a drawn box: area 8-100 % and aspect 3/4-4/3 up to the rounding of its sides
        assert 0.08 * 64 * 48 * 0.9 <= h * w <= 64 * 48
        assert 3 / 4 * 0.9 < w / h < 4 / 3 * 1.1
        areas.append(h * w / (64 * 48))
    # target areas are uniform on [0.08, 1]; tries whose box does not fit are redrawn, which
    # removes large areas: the mean falls below the uniform 0.54
    assert 0.3 < np.mean(areas) < 0.54
    # an image far wider than 4/3: no try fits a large area, and the fallback is the central
    # crop of aspect 4/3 (timm: h = H, w = round(H * 4/3), centred)
    rng = np.random.default_rng(1)
    boxes = {random_resized_crop_box(400, 10, rng, scale=(0.9, 1.0)) for _ in range(50)}
    assert boxes == {(0, (400 - 13) // 2, 10, 13)}


def test_erase_box_bounds():
    rng = np.random.default_rng(2)
    for _ in range(500):
        box = erase_box(32, 32, rng)
        assert box is not None
        top, left, h, w = box
        assert h < 32 and w < 32 and top + h <= 32 and left + w <= 32
        assert 0.02 * 1024 * 0.7 <= h * w <= 1024 / 3 * 1.3


def _rgb(width: int = 16, height: int = 12, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def test_rand_augment_ops_against_their_closed_forms():
    image = _rgb()
    p = np.asarray(image).astype(int)
    ops = _ops()
    fill = (124, 116, 104)

    def apply(name, argument):
        return np.asarray(ops[name][1](image, argument, fill)).astype(int)

    np.testing.assert_array_equal(apply("Invert", None), 255 - p)
    np.testing.assert_array_equal(apply("Solarize", 100), np.where(p >= 100, 255 - p, p))
    np.testing.assert_array_equal(apply("SolarizeAdd", 30),
                                  np.where(p < 128, np.minimum(255, p + 30), p))
    np.testing.assert_array_equal(apply("Posterize", 2), p & 0b11000000)
    # a translation by a whole number of pixels moves pixels exactly and fills the rest
    moved = apply("TranslateXRel", 3 / 16)  # output (x, y) = input (x + 3, y)
    np.testing.assert_array_equal(moved[:, :13], p[:, 3:])
    np.testing.assert_array_equal(moved[:, 13:], np.broadcast_to(fill, moved[:, 13:].shape))
    moved = apply("TranslateYRel", -2 / 12)  # output (x, y) = input (x, y - 2)
    np.testing.assert_array_equal(moved[2:], p[:-2])
    np.testing.assert_array_equal(apply("Brightness", 1.0), p)  # factor 1: unchanged
    np.testing.assert_array_equal(apply("Brightness", 0.0), 0 * p)


def test_rand_augment_magnitudes_are_timms():
    ops = _ops()
    rng = np.random.default_rng(0)

    def levels(name, magnitude=9.0, n=200):
        return {round(float(ops[name][0](magnitude, rng)), 6) for _ in range(n)}

    assert levels("Rotate") == {27.0, -27.0}  # 30 degrees at M = 10
    assert levels("ShearX") == {0.27, -0.27}
    assert levels("TranslateXRel") == {0.405, -0.405}
    assert levels("ColorIncreasing") == {1.81, 0.19}  # 1 +- 0.9 M / 10
    assert levels("Color") == {1.72}  # 0.1 + 1.8 M / 10
    assert levels("PosterizeIncreasing") == {1.0}  # 4 - int(4 M / 10)
    assert levels("Posterize") == {3.0}
    assert levels("SolarizeIncreasing") == {26.0}  # 256 - int(256 M / 10)
    assert levels("SolarizeAdd") == {99.0}  # int(110 M / 10)
    config = rand_augment("rand-m9-mstd0.5-inc1")
    assert (config.ops, config.layers, config.magnitude, config.magnitude_std, config.prob) == \
        (RAND_INCREASING_OPS, 2, 9.0, 0.5, 0.5)
    assert rand_augment("rand-n2-m9").ops[4] == "Posterize"
    with pytest.raises(ValueError, match="section"):
        rand_augment("rand-m9-x3")


def test_the_evaluation_transform_resizes_the_short_side_and_takes_the_centre():
    # an image already at 256 x 384 (short side 224 / 0.875): the resize keeps it, the crop is
    # rows 16..239 and columns 80..303 (offsets rounded), then ImageNet's normalisation
    raw = np.random.default_rng(3).integers(0, 256, (256, 384, 3), dtype=np.uint8)
    transform = ImageTransform().evaluation()
    assert not transform.random and transform.crop == "resize-center"
    out = transform(Image.fromarray(raw))
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    expected = ((raw[16:240, 80:304] / 255.0 - mean) / std).transpose(2, 0, 1)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="Generator"):
        ImageTransform()(Image.fromarray(raw))


def test_the_training_transform_is_a_function_of_its_generator():
    transform = ImageTransform(image_size=8)
    image = _rgb(20, 14)
    a = transform(image, np.random.default_rng(7))
    b = transform(image, np.random.default_rng(7))
    c = transform(image, np.random.default_rng(8))
    assert a.shape == (3, 8, 8) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # erasing at probability 1 fills one box with standard normal noise
    erased = ImageTransform(image_size=64, crop="center", hflip=0, randaugment="", erase=1.0)
    plain = ImageTransform(image_size=64, crop="center", hflip=0, randaugment="", erase=0.0)
    big = _rgb(80, 70)
    diff = erased(big, np.random.default_rng(1)) != plain(big, None)
    rows, cols = np.nonzero(diff.any(0))
    box = diff[:, rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    assert box.mean() > 0.99 and 0.02 * 64 * 64 * 0.7 <= box[0].size <= 64 * 64 / 3 * 1.3


def test_mixing_draws_and_targets():
    mixing = Mixing(classes=5, smoothing=0.1)
    labels = torch.tensor([0, 3, 1, 1])
    targets = smoothed_targets(labels, 5, 0.1)
    assert torch.allclose(targets.sum(1), torch.ones(4))
    assert targets[1, 3] == pytest.approx(0.92) and targets[1, 0] == pytest.approx(0.02)
    x = torch.randn(4, 3, 10, 10)
    rng = np.random.default_rng(0)
    cut = mixup = 0
    for _ in range(200):
        draw = mixing.draw(rng, 10, 10)
        mixed, soft = mixing(x, labels, rng, draw)
        partner = torch.tensor([1, 0, 3, 2])
        if draw.box is None:  # mixup: a convex combination with the pair's other image
            mixup += 1
            torch.testing.assert_close(mixed, draw.lam * x + (1 - draw.lam) * x[partner])
        else:  # CutMix: the box comes from the partner; lam is the unpasted share
            cut += 1
            top, bottom, left, right = draw.box
            assert draw.lam == pytest.approx(1 - (bottom - top) * (right - left) / 100)
            inside = torch.zeros(10, 10, dtype=torch.bool)
            inside[top:bottom, left:right] = True
            torch.testing.assert_close(mixed[:, :, inside], x[partner][:, :, inside])
            torch.testing.assert_close(mixed[:, :, ~inside], x[:, :, ~inside])
        torch.testing.assert_close(soft, draw.lam * targets + (1 - draw.lam) * targets[partner])
    assert 60 < cut < 140 and cut + mixup == 200  # switch probability 1/2
    with pytest.raises(ValueError, match="even"):
        mixing(x[:3], labels[:3], rng)


@pytest.fixture
def folder(tmp_path):
    _image_folder(tmp_path / "train", 7)  # classes a, b; 12 x 12 PNGs
    _image_folder(tmp_path / "val", 3)
    return tmp_path


def test_the_stream_reads_permutations_and_a_ranks_part_is_its_slice(folder):
    splits = split_folders(folder)
    transform = ImageTransform(image_size=8)
    stream = ImageStream(splits["train"], transform, batch_size=4, seed=3,
                         mixing=Mixing(classes=2), workers=2)
    assert len(stream) == 14 and stream.num_classes == 2 and stream.steps_per_epoch == 3
    epoch = np.concatenate([stream.rows(step) for step in range(3)])
    assert len(set(epoch.tolist())) == 12  # one epoch: 12 distinct images, 2 left over
    assert not np.array_equal(stream.rows(0), stream.rows(3))  # a new permutation each epoch
    x, y = stream.batch(4)
    assert x.shape == (4, 3, 8, 8) and y.shape == (4, 2)
    again = ImageStream(splits["train"], transform, batch_size=4, seed=3,
                        mixing=Mixing(classes=2), workers=1)
    torch.testing.assert_close(again.batch(4), (x, y), rtol=0, atol=0)  # a fresh stream
    halves = [again.batch(4, rank, 2) for rank in range(2)]
    torch.testing.assert_close(torch.cat([h[0] for h in halves]), x, rtol=0, atol=0)
    torch.testing.assert_close(torch.cat([h[1] for h in halves]), y, rtol=0, atol=0)
    with pytest.raises(ValueError, match="even"):
        again.batch(4, 1, 4)  # parts of one image cannot be mixed in pairs
    plain = ImageStream(splits["train"], transform, batch_size=4, seed=3, workers=1)
    assert plain.batch(0)[1].dtype == torch.long
    stream.close()


def test_evaluation_covers_every_image_once_over_ranks(folder):
    splits = split_folders(folder)
    train = ImageStream(splits["train"], ImageTransform(image_size=8), batch_size=4)
    val = ImageStream(splits["val"], ImageTransform(image_size=8), batch_size=4,
                      classes=train.classes)
    whole = list(val.eval_batches(4))
    assert sum(len(b[1]) for b in whole) == 6 and whole[0][0].shape[1:] == (3, 8, 8)
    parts = [b for rank in range(2) for b in val.eval_batches(2, rank, 2)]
    assert sorted(torch.cat([b[1] for b in parts]).tolist()) == [0, 0, 0, 1, 1, 1]
    assert math.isclose(float(torch.cat([b[0] for b in parts]).sum()),
                        float(torch.cat([b[0] for b in whole]).sum()), rel_tol=1e-5)
    # a limit spreads the images over the folder, so both classes count
    spread = torch.cat([b[1] for b in val.eval_batches(4, limit=2)])
    assert spread.tolist() == [0, 1]


def test_folder_errors_name_what_is_missing(folder, tmp_path):
    with pytest.raises(FileNotFoundError, match="val"):
        split_folders(folder / "train")
    (folder / "val" / "c").mkdir()
    Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(folder / "val" / "c" / "x.png")
    train = ImageStream(folder / "train", ImageTransform(image_size=8), batch_size=2)
    with pytest.raises(ValueError, match="classes differ"):
        ImageStream(folder / "val", ImageTransform(image_size=8), batch_size=2,
                    classes=train.classes)
