"""The image classifier recipe on its own: activation statistics against forward hooks,
fit_and_measure against a plain PyTorch loop, divergence, and the config helpers."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from actlab.data.images import load_image_data
from actlab.errors import ConfigError
from actlab.nn.classifiers import build_classifier
from actlab.recipes.image_classifier import (
    activation_statistics,
    adam_settings,
    check_cifar_dir,
    data_label,
    fit_and_measure,
    load_config_data,
    record_diverged,
)
from actlab.runner.experiment import UnitResult
from actlab.surgery import find_activations
from actlab.train.settings import TrainSettings

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits():
    return load_image_data()


def _config(**overrides):
    fields = {"steps": 7, "batch_size": 32, "lr": 1e-3, "vit_lr": 3e-3, "cifar_dir": "",
              "cifar_limit": 0}
    return SimpleNamespace(**{**fields, **overrides})


@torch.no_grad()
def _hook_statistics(model: torch.nn.Module, x: torch.Tensor, batch_size: int) -> dict:
    """Per activation site: negative-input share and |output| < 1e-7 share over all of x,
    from our own forward hooks, in eval mode."""
    sites = find_activations(model)
    seen: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {name: [] for name in sites}
    handles = [module.register_forward_hook(
        lambda _m, inp, out, name=name: seen[name].append((inp[0].detach(), out.detach())))
        for name, module in sites.items()]
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(x), batch_size):
            model(x[start:start + batch_size])
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    stats = {}
    for name, pairs in seen.items():
        pre = torch.cat([p.reshape(-1) for p, _ in pairs]).double()
        out = torch.cat([o.reshape(-1) for _, o in pairs]).double()
        stats[name] = {"preact_neg_frac": float((pre < 0).double().mean()),
                       "sparsity": float((out.abs() < 1e-7).double().mean())}
    return stats


@pytest.mark.parametrize("kind,activation,pre_norm", [("mlp", "relu", None),
                                                      ("resnet", "relu2", "batchnorm"),
                                                      ("vit", "gelu", "layernorm")])
def test_activation_statistics_match_forward_hooks(digits, kind, activation, pre_norm):
    model = build_classifier(kind, digits, activation, pre_norm=pre_norm, seed=1)
    model.train()  # the recipe measures in eval mode (BatchNorm's running statistics)
    x = digits.x_test[:150]
    expected = _hook_statistics(model, x, batch_size=64)
    stats = activation_statistics(model, x, batch_size=64)  # 3 uneven batches, pooled
    assert model.training
    assert set(stats) == set(expected) | {"mean"} and len(expected) >= 2
    for name, ref in expected.items():
        for metric, value in ref.items():
            assert stats[name][metric] == pytest.approx(value, abs=1e-9), (name, metric)
    for metric in ("preact_neg_frac", "sparsity"):
        assert stats["mean"][metric] == pytest.approx(
            float(np.mean([ref[metric] for ref in expected.values()])), abs=1e-9)
    if activation == "relu":  # ReLU's zeros: its negative inputs (and the tiny positive ones)
        for name in expected:
            s, neg = stats[name]["sparsity"], stats[name]["preact_neg_frac"]
            assert neg - 1e-12 <= s < neg + 1e-3


def test_activation_statistics_of_a_model_without_sites_is_empty():
    model = torch.nn.Linear(4, 3)
    assert activation_statistics(model, torch.randn(5, 4)) == {}


def test_fit_and_measure_matches_a_plain_loop(digits):
    settings = TrainSettings(optimizer="adam", lr=2e-3, steps=30, batch_size=100)
    model = build_classifier("mlp", digits, "relu", seed=0)
    plain = copy.deepcopy(model)
    out = fit_and_measure(model, digits, settings, seed=5)

    # The same update written out: Adam, seeded epochs of randperm batches (last partial
    # batch dropped), cross-entropy.
    gen = torch.Generator().manual_seed(5)
    opt = torch.optim.Adam(plain.parameters(), lr=2e-3)
    n, bs = len(digits.x_train), 100
    order, position, losses = None, 0, []
    plain.train()
    for _ in range(30):
        if order is None or position + bs > n:
            order, position = torch.randperm(n, generator=gen), 0
        idx = order[position:position + bs]
        position += bs
        loss = F.cross_entropy(plain(digits.x_train[idx]), digits.y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))

    assert out.status == "ok" and out.steps == 30 and out.seconds >= 0
    for p, q in zip(model.parameters(), plain.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert out.final_loss == pytest.approx(float(np.mean(losses[-10:])), rel=1e-5)
    plain.eval()
    with torch.no_grad():
        accuracy = float((plain(digits.x_test).argmax(-1) == digits.y_test).double().mean())
    assert out.accuracy == pytest.approx(accuracy)
    ref = _hook_statistics(plain, digits.x_test, batch_size=512)
    assert out.neg_frac == pytest.approx(np.mean([r["preact_neg_frac"] for r in ref.values()]),
                                         abs=1e-6)
    assert out.sparsity == pytest.approx(np.mean([r["sparsity"] for r in ref.values()]),
                                         abs=1e-6)
    assert 0.2 < out.sparsity < 0.9 and out.accuracy > 0.5


def test_fit_and_measure_records_divergence(digits):
    x = digits.x_train[:64].clone()
    x[:, 0] = math.nan  # the first loss is already non-finite
    data = SimpleNamespace(x_train=x, y_train=digits.y_train[:64], x_test=digits.x_test,
                           y_test=digits.y_test)
    model = build_classifier("mlp", digits, "relu", seed=0)
    out = fit_and_measure(model, data, TrainSettings(steps=20, batch_size=32), seed=0)
    assert out.status == "diverged" and out.steps < 20
    assert all(math.isnan(v) for v in (out.accuracy, out.neg_frac, out.sparsity, out.final_loss))

    result = UnitResult()
    record_diverged(result, out.status, "mlp", 0, out.steps, "before")
    assert result.status == "diverged"
    assert len(result.rows) == 1
    run, seed, step, layer, metric, value = result.rows[0]
    assert (run, seed, step, layer, metric) == ("mlp", 0, out.steps, "before", "train_loss")
    assert math.isnan(value)


def test_adam_settings_per_model_kind():
    config = _config(steps=11, batch_size=16, lr=1e-3, vit_lr=5e-3)
    mlp, vit = adam_settings(config, "mlp"), adam_settings(config, "vit")
    assert (mlp.optimizer, mlp.lr, mlp.steps, mlp.batch_size) == ("adam", 1e-3, 11, 16)
    assert (vit.optimizer, vit.lr) == ("adam", 5e-3)


def test_data_from_config_and_cifar_checks(tmp_path, digits):
    data = load_config_data(_config())
    assert torch.equal(data.x_train, digits.x_train) and data_label(_config()) == "digits"
    check_cifar_dir("")  # digits: nothing to check
    with pytest.raises(ConfigError) as info:
        check_cifar_dir(str(tmp_path / "missing"))
    assert info.value.field == "cifar_dir"

    from test_data_files import _write_fake_cifar  # the CIFAR loader's own test helper

    _write_fake_cifar(tmp_path / "cifar" / "cifar-10-batches-py", 8, np.random.default_rng(0))
    folder = str(tmp_path / "cifar")
    check_cifar_dir(folder)
    config = _config(cifar_dir=folder, cifar_limit=12)
    data = load_config_data(config)
    assert len(data.x_train) == 12 and data_label(config) == "cifar10"
    assert data_label(_config(), "digits (all)") == "digits (all)"
