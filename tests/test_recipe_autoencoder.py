"""The autoencoder recipe against references: a plain PyTorch Adam loop from the same start
and batch order, hand-computed checkpoint measures, and closed-form least squares for the
scale-aware fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from actlab.activations.spec import SpecActivation
from actlab.nn.autoencoder import image_similarity
from actlab.recipes.autoencoder import (
    PARTS,
    build_autoencoder,
    grid_steps,
    load_images,
    measure_checkpoint,
    scale_aware_fit,
    train_autoencoder,
)
from actlab.train.settings import TrainSettings

WIDTHS, STEPS, BATCH = (4, 8), 6, 8


pytestmark = pytest.mark.usefixtures("one_thread")


def _images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def _settings(**kw) -> TrainSettings:
    return TrainSettings(**{"optimizer": "adam", "lr": 1e-2, "steps": STEPS, "batch_size": BATCH,
                            "loss": "half_sse", **kw})


def test_training_equals_a_plain_adam_loop_and_its_checkpoints():
    x_train, x_eval = _images(24), _images(5, seed=1)
    checkpoints = [0, 2, STEPS]
    run = train_autoencoder(x_train, x_eval, activation="relu:shift=theory", settings=_settings(),
                            seed=4, checkpoints=checkpoints, widths=WIDTHS, convs_per_stage=1,
                            loss_every=2, n_show=2, grid_points=2)
    # the reference: the same initial weights, seeded permutations, half SSE, torch's Adam
    model = build_autoencoder(1, "relu:shift=theory", 4, widths=WIDTHS, convs_per_stage=1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(4)
    order, pos = None, 0
    with torch.no_grad():
        train_mse, test_mse = {}, {0: float((model(x_eval) - x_eval).pow(2).mean())}
    for step in range(1, STEPS + 1):
        if order is None or pos + BATCH > len(x_train):
            order, pos = torch.randperm(len(x_train), generator=g), 0
        batch = x_train[order[pos:pos + BATCH]]
        pos += BATCH
        loss = 0.5 * (model(batch) - batch).pow(2).flatten(1).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        train_mse[step] = 2 * float(loss.detach()) / batch[0].numel()
        with torch.no_grad():
            test_mse[step] = float((model(x_eval) - x_eval).pow(2).mean())
    assert run.status == "ok" and run.steps == STEPS
    for a, b in zip(run.model.parameters(), model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    rows = {(s, m): v for s, m, v in run.rows}
    assert sorted(s for s, m in rows if m == "train_loss") == [1, 3, 5, STEPS]
    assert sorted(s for s, m in rows if m == "test_loss") == checkpoints
    for (step, metric), value in rows.items():
        if metric == "train_loss":
            assert value == pytest.approx(train_mse[step], rel=1e-5)
        elif metric == "test_loss":
            assert value == pytest.approx(test_mse[step], rel=1e-5)
    # an update's loss line comes before its checkpoint's metrics
    assert [m for s, m, _ in run.rows if s == STEPS][:2] == ["train_loss", "test_loss"]
    assert run.images["steps"] == grid_steps(checkpoints, 2)
    assert np.asarray(run.images["input"]).shape == (2, 1, 8, 8)
    for part in PARTS:
        assert np.asarray(run.images[part]).shape == (len(run.images["steps"]), 2, 1, 8, 8)


def test_initial_weights_depend_on_the_seed_not_the_activation():
    a = build_autoencoder(1, "relu", 0, widths=WIDTHS)
    b = build_autoencoder(1, "relu:shift=theory", 0, widths=WIDTHS)
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name
    conv = a.encoder[0]
    assert float(conv.bias.detach().abs().max()) == 0.0  # zero biases, as torchvision's VGG
    fan_out = conv.weight.shape[0] * 9
    assert float(conv.weight.detach().std()) == pytest.approx(math.sqrt(2 / fan_out), rel=0.5)


def test_measure_checkpoint_equals_a_hand_decomposition():
    model = build_autoencoder(1, "relu", 0, widths=WIDTHS)
    x = _images(6)
    stats, parts = measure_checkpoint(model, x)
    with torch.no_grad():
        h = model.encode(x)
        h_bias = h.mean(1, keepdim=True).expand_as(h)
        full, bias = model.decode(h), model.decode(h_bias)
        dev = model.decode(h - h_bias)
    torch.testing.assert_close(parts["full"], full)
    torch.testing.assert_close(parts["bias"], bias)
    torch.testing.assert_close(parts["dev"], dev, rtol=1e-4, atol=1e-5)
    assert stats["test_loss"] == pytest.approx(float((full - x).pow(2).mean()), rel=1e-6)
    assert stats["bias_share"] == pytest.approx(float(h_bias.pow(2).sum() / h.pow(2).sum()),
                                                rel=1e-5)
    f, b = full.flatten(1).numpy(), bias.flatten(1).numpy()
    corr = np.mean([np.corrcoef(b[i], f[i])[0, 1] for i in range(len(f))])
    assert stats["bias_correlation"] == pytest.approx(float(corr), rel=1e-4)
    assert stats["bias_r2"] == scale_aware_fit(bias, full, "bias")["bias_r2"]


def test_scale_aware_fit_of_the_least_squares_decode_is_the_squared_correlation():
    # Regressing the full decode on a part (slope and intercept per image, closed form) gives
    # the best affine decode; its R² is the squared Pearson correlation.
    g = torch.Generator().manual_seed(0)
    full = torch.randn(5, 1, 8, 8, generator=g, dtype=torch.float64) + 0.3
    part = 0.4 * full + 0.5 * torch.randn(5, 1, 8, 8, generator=g, dtype=torch.float64)
    f, p = full.flatten(1).numpy(), part.flatten(1).numpy()
    fitted = np.stack([np.c_[p[i], np.ones_like(p[i])] @ np.linalg.lstsq(
        np.c_[p[i], np.ones_like(p[i])], f[i], rcond=None)[0] for i in range(len(f))])
    fit = scale_aware_fit(torch.from_numpy(fitted).reshape(full.shape), full, "bias")
    r2 = np.mean([np.corrcoef(p[i], f[i])[0, 1] ** 2 for i in range(len(f))])
    assert fit["bias_r2"] == pytest.approx(float(r2), rel=1e-9)
    energy = np.mean((fitted ** 2).sum(1) / (f ** 2).sum(1))
    assert fit["bias_energy"] == pytest.approx(float(energy), rel=1e-9)
    # the image's own mean explains nothing; the image itself everything
    flat_mean = full.mean(dim=(1, 2, 3), keepdim=True).expand_as(full)
    assert scale_aware_fit(flat_mean, full, "x")["x_r2"] == pytest.approx(0.0, abs=1e-12)
    assert scale_aware_fit(full, full, "x") == {"x_r2": 1.0, "x_energy": 1.0}


def test_scale_aware_fit_tells_a_faint_copy_from_the_image():
    # A faint copy correlates perfectly with the image but reproduces little of it: the
    # scale-aware R² and energy say so (reference: the formulas in numpy, per image).
    full = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(0)) + 0.3
    faint = 0.1 * full
    assert image_similarity(faint, full).min() > 0.999
    fit = scale_aware_fit(faint, full, "bias")
    f, p = full.numpy().reshape(5, -1), faint.numpy().reshape(5, -1)
    r2 = 1 - ((f - p) ** 2).sum(1) / ((f - f.mean(1, keepdims=True)) ** 2).sum(1)
    assert fit["bias_r2"] == pytest.approx(float(r2.mean()), rel=1e-5)
    assert fit["bias_energy"] == pytest.approx(float(((p ** 2).sum(1) / (f ** 2).sum(1)).mean()),
                                               rel=1e-5)
    assert fit["bias_r2"] < 0.3 and fit["bias_energy"] == pytest.approx(0.01, rel=1e-4)
    assert not np.isnan(scale_aware_fit(torch.zeros_like(full), full, "x")["x_r2"])


def test_measured_shifts_are_each_relus_mean_at_init_layer_by_layer():
    x_train = _images(40)
    run = train_autoencoder(x_train, _images(4, seed=1), activation="relu:shift=measured",
                            settings=_settings(steps=1), seed=2, checkpoints=[0, 1],
                            widths=WIDTHS, convs_per_stage=1, calibration_batches=3)
    # the reference: the same initial weights walked layer by layer through the same three
    # seeded training batches, each ReLU's mean taken and subtracted before the next layer
    model = build_autoencoder(1, "relu", 2, widths=WIDTHS, convs_per_stage=1)
    order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(2))
    hs = list(x_train[order[: 3 * BATCH]].split(BATCH))
    expected = {}
    with torch.no_grad():
        layers = [(f"{half}.{n}", m) for half in ("encoder", "decoder")
                  for n, m in model.get_submodule(half).named_children()]
        for name, layer in layers:
            hs = [layer(h) for h in hs]
            if isinstance(layer, SpecActivation):
                mean = float(sum(h.double().sum() for h in hs)) / sum(h.numel() for h in hs)
                hs = [h - mean for h in hs]
                expected[name] = mean
    assert list(run.shifts) == list(expected) and len(expected) == 4
    assert list(run.shifts.values()) == pytest.approx(list(expected.values()), rel=1e-5)
    assert all(0 < b < 0.4 for b in expected.values())  # ReLU means: positive, not 0.23 each
    # shift=theory reports its Gaussian b = 0.23 in every layer, uncalibrated
    plain = train_autoencoder(x_train, _images(4, seed=1), activation="relu:shift=theory",
                              settings=_settings(steps=1), seed=2, checkpoints=[0],
                              widths=WIDTHS, convs_per_stage=1)
    assert list(plain.shifts.values()) == pytest.approx([0.2303] * 4, abs=1e-4)


def test_grid_steps_are_log_spaced_trained_checkpoints():
    checkpoints = [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    shown = grid_steps(checkpoints, 4)
    assert set(shown) <= set(checkpoints) - {0} and shown[-1] == 1000 and len(shown) <= 4
    assert grid_steps([0, 3, 6], 5) == [3, 6]


def test_load_images_gives_digits_at_the_asked_size():
    x_train, x_eval, name = load_images(image_size=16, n_eval=10)
    assert name == "digits" and x_eval.shape == (10, 1, 16, 16)
    assert x_train.shape[1:] == (1, 16, 16) and len(x_train) > 1000


def test_a_diverging_autoencoder_is_recorded_not_raised():
    run = train_autoencoder(_images(32), _images(4, seed=1), activation="relu",
                            settings=_settings(optimizer="sgd", lr=1e12), seed=0,
                            checkpoints=[0, 3, STEPS], widths=WIDTHS)
    assert run.status == "diverged"
    losses = [v for _, m, v in run.rows if m == "test_loss"]
    assert math.isnan(losses[-1]) and run.rows[-1][0] == run.steps + 1


def test_the_loss_must_be_half_sse():
    with pytest.raises(ValueError, match="half_sse"):
        train_autoencoder(_images(8), _images(2), activation="relu",
                          settings=_settings(loss="mse_mean"), seed=0, checkpoints=[0])
