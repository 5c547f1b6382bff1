"""Data for diffusion: digits in [-1, 1], image folders (PIL files written here), latent shards."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from actlab.data.digits import load_digits, load_digits_pixels
from actlab.data.image_folder import load_image_folder
from actlab.data.latents import SD_VAE_SCALE, LatentShards, write_latent_shard

# ---------------------------------------------------------------- digits


def test_digits_pixels_span_minus_one_to_one_with_the_fixed_split():
    data = load_digits_pixels()
    assert data.x_train.shape == (1438, 1, 8, 8) and data.x_test.shape == (359, 1, 8, 8)
    assert data.x_train.dtype == torch.float32
    assert float(data.x_train.min()) == -1.0 and float(data.x_train.max()) == 1.0
    # sklearn's pixels are integers 0..16, so every value is k / 8 - 1
    k = (data.x_test.double() + 1) * 8
    assert torch.equal(k, k.round())
    reference = load_digits(standardize=False)
    assert torch.equal(data.y_train, reference.y_train)
    torch.testing.assert_close(data.x_test, reference.x_test * 2 - 1)
    from sklearn.datasets import load_digits as sk

    images = sk().images
    assert sorted(data.x_train.sum(dim=(1, 2, 3)).round().tolist()
                  + data.x_test.sum(dim=(1, 2, 3)).round().tolist()) == sorted(
        np.round((images / 8 - 1).sum(axis=(1, 2))).tolist())


def test_digits_pixels_upsampled_rgb_stay_in_range():
    data = load_digits_pixels(image_size=32, channels=3)
    assert data.x_train.shape == (1438, 3, 32, 32)
    assert float(data.x_train.min()) >= -1.0 and float(data.x_train.max()) <= 1.0
    assert float(data.x_train.min()) == -1.0  # blank corners stay blank
    assert torch.equal(data.x_train[:, 0], data.x_train[:, 2])
    with pytest.raises(ValueError, match="channels"):
        load_digits_pixels(channels=2)


# ---------------------------------------------------------------- image folders


def _save(path, array, mode=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(array, dtype=np.uint8), mode).save(path)


def _solid(h, w, rgb):
    return np.broadcast_to(np.asarray(rgb, dtype=np.uint8), (h, w, 3)).copy()


def _signed(pixels):
    return np.asarray(pixels, dtype=np.float64) / 127.5 - 1


def test_solid_images_any_size_become_their_colour(tmp_path):
    _save(tmp_path / "a" / "wide.png", _solid(23, 37, (200, 30, 90)))
    _save(tmp_path / "a" / "tall.png", _solid(50, 9, (0, 255, 128)))
    data = load_image_folder(tmp_path, image_size=8)
    assert data.x.shape == (2, 3, 8, 8) and data.x.dtype == torch.float32
    assert [p.name for p in data.files] == ["tall.png", "wide.png"]  # sorted by name
    for i, rgb in enumerate([(0, 255, 128), (200, 30, 90)]):
        expected = np.broadcast_to(_signed(rgb)[:, None, None], (3, 8, 8))
        np.testing.assert_allclose(data.x[i].numpy(), expected, atol=1e-6)
    stretched = load_image_folder(tmp_path, image_size=8, center_crop=False)
    np.testing.assert_allclose(stretched.x.numpy(), data.x.numpy(), atol=1e-6)


def test_center_crop_of_two_colour_images_is_exact(tmp_path):
    a, b = (10, 20, 30), (240, 200, 160)
    wide = _solid(16, 32, a)
    wide[:, 16:] = b  # left half a, right half b
    tall = _solid(48, 16, a)
    tall[20:] = b  # top 20 rows a, then b
    _save(tmp_path / "c" / "1_wide.png", wide)
    _save(tmp_path / "c" / "2_tall.png", tall)
    data = load_image_folder(tmp_path, image_size=8)

    def expected(img):
        # a 2x2 box halving (exact: the colour edges fall on even rows/columns), after which
        # the shorter side is 8 (no resize), then the central 8 x 8 square
        half = img.reshape(img.shape[0] // 2, 2, img.shape[1] // 2, 2, 3).mean(axis=(1, 3))
        top, left = (half.shape[0] - 8) // 2, (half.shape[1] - 8) // 2
        return _signed(half[top:top + 8, left:left + 8]).transpose(2, 0, 1)

    np.testing.assert_allclose(data.x[0].numpy(), expected(wide), atol=1e-6)
    np.testing.assert_allclose(data.x[1].numpy(), expected(tall), atol=1e-6)
    # the crop keeps columns 4..11 of the halved wide image: four of each colour
    assert np.allclose(data.x[0, :, :, :4].numpy(), _signed(a)[:, None, None], atol=1e-6)
    assert np.allclose(data.x[0, :, :, 4:].numpy(), _signed(b)[:, None, None], atol=1e-6)
    # and rows 8..15 of the halved tall one: two rows of a, six of b
    assert np.allclose(data.x[1, :, :2].numpy(), _signed(a)[:, None, None], atol=1e-6)
    assert np.allclose(data.x[1, :, 2:].numpy(), _signed(b)[:, None, None], atol=1e-6)


def test_classes_sorted_labels_filters_and_limits(tmp_path):
    for name, grey in (("zebra", 0), ("apple", 100), ("mango", 200)):
        for i in range(3):
            _save(tmp_path / name / f"img{i}.png", _solid(8, 8, (grey + i,) * 3))
    _save(tmp_path / "mango" / "extra.JPG", _solid(8, 8, (50, 50, 50)))  # upper-case suffix
    _save(tmp_path / "apple" / ".hidden.png", _solid(8, 8, (9, 9, 9)))
    _save(tmp_path / ".cache" / "x.png", _solid(8, 8, (9, 9, 9)))
    (tmp_path / "apple" / "notes.txt").write_text("not an image")
    data = load_image_folder(tmp_path, image_size=4)
    assert data.classes == ("apple", "mango", "zebra") and data.num_classes == 3
    assert data.y.tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2] and len(data) == 10
    assert [p.name for p in data.files[3:7]] == ["extra.JPG", "img0.png", "img1.png", "img2.png"]
    first_pixel = np.round((data.x[:, 0, 0, 0].numpy() + 1) * 127.5)
    np.testing.assert_allclose(first_pixel, [100, 101, 102, 50, 200, 201, 202, 0, 1, 2], atol=1)
    limited = load_image_folder(tmp_path, image_size=4, limit_per_class=2)
    assert limited.y.tolist() == [0, 0, 1, 1, 2, 2]


def test_channel_conversion(tmp_path):
    rgb = (200, 30, 90)
    _save(tmp_path / "k" / "colour.png", _solid(6, 6, rgb))
    _save(tmp_path / "k" / "grey.png", np.full((6, 6), 77, dtype=np.uint8), "L")
    grey = load_image_folder(tmp_path, image_size=6, channels=1)
    assert grey.x.shape == (2, 1, 6, 6)
    luma = (rgb[0] * 299 + rgb[1] * 587 + rgb[2] * 114) / 1000  # ITU-R 601-2, PIL's "L"
    np.testing.assert_allclose(grey.x[0].numpy(), _signed(luma), atol=1.01 / 127.5)
    np.testing.assert_allclose(grey.x[1].numpy(), _signed(77), atol=1e-6)
    colour = load_image_folder(tmp_path, image_size=6, channels=3)
    np.testing.assert_allclose(colour.x[1].numpy(), _signed(np.full((3, 6, 6), 77)), atol=1e-6)


def test_jpeg_is_read_close_to_its_colour(tmp_path):
    path = tmp_path / "j" / "photo.jpeg"
    path.parent.mkdir()
    Image.fromarray(_solid(16, 16, (120, 60, 200))).save(path, quality=95)
    data = load_image_folder(tmp_path, image_size=8)
    expected = np.broadcast_to(_signed((120, 60, 200))[:, None, None], (3, 8, 8))
    np.testing.assert_allclose(data.x[0].numpy(), expected, atol=4 / 127.5)  # lossy codec


def test_image_folder_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        load_image_folder(tmp_path / "missing", image_size=8)
    (tmp_path / "loose.png").write_bytes(b"")
    with pytest.raises(ValueError, match="no class sub-folders"):
        load_image_folder(tmp_path, image_size=8)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("")
    with pytest.raises(ValueError, match="empty.*holds no images"):
        load_image_folder(tmp_path, image_size=8)
    (tmp_path / "empty" / "broken.png").write_bytes(b"not a png at all")
    with pytest.raises(ValueError, match="cannot read image .*broken.png"):
        load_image_folder(tmp_path, image_size=8)
    with pytest.raises(ValueError, match="channels"):
        load_image_folder(tmp_path, image_size=8, channels=4)
    with pytest.raises(ValueError, match="image_size"):
        load_image_folder(tmp_path, image_size=0)


# ---------------------------------------------------------------- latent shards


def _numbered(start, n, shape=(4, 3, 3)):
    """Latents whose every value is the example's global index plus its position / 1000."""
    base = np.arange(start, start + n, dtype=np.float32).reshape(n, 1, 1, 1)
    return (base + np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 1000)


def _write_both_formats(folder):
    """Shards written directly with numpy and safetensors.numpy (not the module's writer)."""
    from safetensors.numpy import save_file

    folder.mkdir()
    np.save(folder / "a.npy", _numbered(0, 5))
    np.save(folder / "a.labels.npy", np.arange(5) % 3)
    save_file({"latents": _numbered(5, 4), "labels": np.array([3, 4, 0, 1])},
              str(folder / "b.safetensors"))
    np.save(folder / "c.npy", _numbered(9, 3).astype(np.float16))
    np.save(folder / "c.labels.npy", np.array([2, 2, 6], dtype=np.int32))
    return np.concatenate([_numbered(0, 9), _numbered(9, 3).astype(np.float16)]).astype(
        np.float32), np.array([0, 1, 2, 0, 1, 3, 4, 0, 1, 2, 2, 6])


def test_shards_in_both_formats_read_in_order_and_scaled(tmp_path):
    latents, labels = _write_both_formats(tmp_path / "s")
    (tmp_path / "s" / "README.md").write_text("ignored")
    shards = LatentShards(tmp_path / "s")
    assert len(shards) == 12 and shards.latent_shape == (4, 3, 3) and shards.num_classes == 7
    assert [s.format for s in shards.shards] == ["npy", "safetensors", "npy"]
    x, y = shards.get(np.arange(12))
    assert x.dtype == torch.float32 and y.dtype == torch.long
    np.testing.assert_array_equal(x.numpy(), latents)
    assert y.tolist() == labels.tolist()
    x, y = shards.get([11, 0, 6, 5, 2])
    np.testing.assert_array_equal(x.numpy(), latents[[11, 0, 6, 5, 2]])
    assert y.tolist() == labels[[11, 0, 6, 5, 2]].tolist()
    assert SD_VAE_SCALE == 0.18215  # "Bug or Feature²" App. D.4
    scaled = LatentShards(tmp_path / "s", scale=SD_VAE_SCALE, num_classes=10)
    np.testing.assert_allclose(scaled.get([7])[0].numpy(), latents[[7]] * 0.18215, rtol=1e-6)
    assert scaled.num_classes == 10
    with pytest.raises(ValueError, match="num_classes"):
        LatentShards(tmp_path / "s", num_classes=5)
    with pytest.raises(IndexError):
        shards.get([12])


def test_batches_are_seeded_distinct_and_consistent(tmp_path):
    _write_both_formats(tmp_path / "s")
    shards = LatentShards(tmp_path / "s")
    x, y = shards.batch(3, 8, generator_seed=1)
    assert x.shape == (8, 4, 3, 3)
    index = x[:, 0, 0, 0].round().long()  # each latent carries its global index
    assert len(set(index.tolist())) == 8  # drawn without replacement
    labels = shards.get(np.arange(12))[1]
    assert torch.equal(y, labels[index])
    again = LatentShards(tmp_path / "s")
    for step in (3, 0, 5):  # any order of steps gives the same batches
        assert torch.equal(again.batch(step, 8, generator_seed=1)[0],
                           shards.batch(step, 8, generator_seed=1)[0])
    assert not torch.equal(shards.batch(4, 8, generator_seed=1)[0], x)
    assert not torch.equal(shards.batch(3, 8, generator_seed=2)[0], x)
    stream = shards.batches(8, generator_seed=1, start=3)
    assert torch.equal(next(stream)[0], x)
    assert torch.equal(next(stream)[0], shards.batch(4, 8, generator_seed=1)[0])
    with pytest.raises(ValueError, match="batch_size"):
        shards.batch(0, 13)


def test_writer_round_trip_both_formats(tmp_path):
    rng = np.random.default_rng(0)
    lat = rng.standard_normal((6, 4, 2, 2)).astype(np.float32)
    lab = rng.integers(0, 5, size=6)
    folder = tmp_path / "w"
    folder.mkdir()
    written = write_latent_shard(folder / "p0.npy", lat[:2], lab[:2])
    assert [p.name for p in written] == ["p0.npy", "p0.labels.npy"]
    write_latent_shard(folder / "p1.safetensors", torch.from_numpy(lat[2:]),
                       torch.from_numpy(lab[2:]))
    np.testing.assert_array_equal(np.load(folder / "p0.npy"), lat[:2])  # plain numpy files
    shards = LatentShards(folder, scale=2.0)
    x, y = shards.get(np.arange(6))
    np.testing.assert_allclose(x.numpy(), lat * 2.0, rtol=1e-6)
    assert y.tolist() == lab.tolist()
    bf16 = torch.from_numpy(lat[:2]).bfloat16()
    write_latent_shard(tmp_path / "bf.safetensors", bf16, [0, 1])
    with pytest.raises(ValueError, match="bfloat16"):
        write_latent_shard(tmp_path / "bf.npy", bf16, [0, 1])
    with pytest.raises(ValueError, match="labels must be"):
        write_latent_shard(tmp_path / "bad.npy", lat[:3], lab[:2])
    with pytest.raises(ValueError, match="NAME.safetensors or NAME.npy"):
        write_latent_shard(tmp_path / "bad.pt", lat[:2], lab[:2])


def test_shard_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LatentShards(tmp_path / "nope")
    folder = tmp_path / "e"
    folder.mkdir()
    with pytest.raises(ValueError, match="holds no shards"):
        LatentShards(folder)
    np.save(folder / "a.npy", np.zeros((2, 4, 3, 3), dtype=np.float32))
    with pytest.raises(FileNotFoundError, match="a.labels.npy is missing"):
        LatentShards(folder)
    np.save(folder / "a.labels.npy", np.zeros(2, dtype=np.int64))
    np.save(folder / "b.npy", np.zeros((2, 4, 4, 4), dtype=np.float32))
    np.save(folder / "b.labels.npy", np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match=r"b.npy: latents of shape \(4, 4, 4\)"):
        LatentShards(folder)
    np.save(folder / "b.npy", np.zeros((3, 4, 3, 3), dtype=np.float32))
    with pytest.raises(ValueError, match=r"b.npy: labels must be \(3,\)"):
        LatentShards(folder)
    np.save(folder / "b.npy", np.zeros((2, 4, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="b.npy: latents must be"):
        LatentShards(folder)
    (folder / "b.npy").unlink()
    with pytest.raises(FileNotFoundError, match="b.labels.npy: its latents file b.npy"):
        LatentShards(folder)
    (folder / "b.labels.npy").unlink()
    np.save(folder / "a.labels.npy", np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="a.npy: labels must be integers"):
        LatentShards(folder)
    np.save(folder / "a.labels.npy", np.array([0, 1]))
    (folder / "z.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="z.safetensors: not a readable safetensors"):
        LatentShards(folder)
    from safetensors.numpy import save_file

    save_file({"latents": np.zeros((2, 4, 3, 3), dtype=np.float32)}, str(folder / "z.safetensors"))
    with pytest.raises(ValueError, match="z.safetensors: no tensor named 'labels'"):
        LatentShards(folder)
