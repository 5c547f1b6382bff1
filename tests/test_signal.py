"""Deep MLP stacks and the per-layer signal measurements, against brute-force autograd."""

from __future__ import annotations

import math

import pytest
import torch

from actlab.init import weight_std as _weight_std
from actlab.measure.signal import (
    dead_unit_share,
    half_squared_error,
    logistic_cross_entropy,
    predicted_profile,
    signal_profile,
    weight_grad_norms,
)
from actlab.nn.deep_mlp import DeepMLP, deep_mlp


def weight_std(scheme: str, fan_in: int, fan_out: int, **kwargs) -> float:
    """The standard deviations the deep MLP stacks draw: the handbook convention."""
    return _weight_std(scheme, fan_in, fan_out, convention="handbook", **kwargs)


def _batch(n: int, width: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, width, generator=g, dtype=torch.float64),
            torch.randn(n, 1, generator=g, dtype=torch.float64))


def test_weight_std_formulas():
    assert weight_std("xavier", 300, 100) == pytest.approx(math.sqrt(2 / 400))
    assert weight_std("he", 300, 100) == pytest.approx(math.sqrt(2 / 300))
    assert weight_std("he", 300, 100, gain=2.0) == pytest.approx(2 / math.sqrt(300))
    assert weight_std("torch-default", 300, 100) == pytest.approx(1 / 30)
    assert weight_std("std", 5, 5, std=0.01) == 0.01
    # SiLU's fixed-point gain, published as 1.6765.
    assert weight_std("fixed-point", 1, 1, activation="silu") == pytest.approx(1.6765, abs=5e-5)


def test_weight_std_rejects_unknown_scheme_with_suggestion():
    with pytest.raises(ValueError, match="xavier"):
        weight_std("xavir", 3, 3)


def test_drawn_weights_have_the_scheme_std_and_zero_bias():
    model = deep_mlp(400, 400, 2, 1, activation="relu", scheme="he", seed=1)
    for layer in model.hidden:
        assert float(layer.weight.detach().std()) == pytest.approx(math.sqrt(2 / 400), rel=0.02)
        assert torch.count_nonzero(layer.bias) == 0
    ortho = deep_mlp(8, 8, 1, 1, activation="tanh", scheme="orthogonal", gain=1.5, seed=0)
    w = ortho.hidden[0].weight.detach()
    assert torch.allclose(w @ w.T, 2.25 * torch.eye(8, dtype=torch.float64), atol=1e-12)


def test_same_seed_same_network_and_trace_matches_forward():
    a = deep_mlp(3, 6, 4, 2, activation="gelu", scheme="xavier", seed=5)
    b = deep_mlp(3, 6, 4, 2, activation="gelu", scheme="xavier", seed=5)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    x, _ = _batch(7, 3)
    trace = a.trace(x)
    assert torch.equal(trace.output, a(x))
    assert len(trace.net_inputs) == 4 and trace.net_inputs[0].shape == (7, 6)


def test_residual_and_layer_norm_match_manual_computation():
    model = deep_mlp(4, 4, 2, 1, activation="tanh", scheme="he", norm="layer", residual=True,
                     seed=2)
    x, _ = _batch(5, 4)
    a = x
    for linear in model.hidden:
        z = linear(a)
        zn = (z - z.mean(-1, keepdim=True)) / torch.sqrt(z.var(-1, unbiased=False, keepdim=True) + 1e-5)
        a = a + torch.tanh(zn)
    assert torch.allclose(model(x), model.output(a), atol=1e-12)


@pytest.mark.parametrize("activation", ["tanh", "elu", "gelu"])
def test_gradients_of_a_small_stack_pass_gradcheck(activation):
    model = deep_mlp(2, 3, 3, 1, activation=activation, scheme="xavier", seed=0)
    x, y = _batch(4, 2)
    params = tuple(model.parameters())

    def cost(*flat):
        out = torch.func.functional_call(model, dict(zip(
            [n for n, _ in model.named_parameters()], flat)), (x,))
        return logistic_cross_entropy(out, (y > 0).double()).mean()

    assert torch.autograd.gradcheck(cost, tuple(p.detach().clone().requires_grad_(True)
                                                for p in params))


def test_signal_profile_matches_per_example_autograd():
    model = deep_mlp(5, 6, 3, 1, activation="tanh", scheme="he", seed=3)
    x, y = _batch(4, 5)
    profile = signal_profile(model, x, y)
    assert all(p.grad is None for p in model.parameters())  # caller's grads untouched
    per_example = {i: [] for i in range(3)}
    deltas = {i: [] for i in range(3)}
    for k in range(4):
        model.zero_grad()
        trace = model.trace(x[k:k + 1], retain_grad=True)
        half_squared_error(trace.output, y[k:k + 1]).sum().backward()
        for i, (layer, z) in enumerate(zip(model.hidden, trace.net_inputs)):
            per_example[i].append(layer.weight.grad.norm() ** 2)
            deltas[i].append(z.grad.pow(2).sum())
    for i in range(3):
        assert profile.per_example_grad_rms[i] == pytest.approx(
            float(torch.stack(per_example[i]).mean().sqrt()), rel=1e-12)
        assert profile.error_rms[i] == pytest.approx(
            float((torch.stack(deltas[i]).sum() / (4 * 6)).sqrt()), rel=1e-12)
    model.zero_grad()
    half_squared_error(model(x), y).mean().backward()
    for i, layer in enumerate(model.hidden):
        assert profile.batch_grad_norm[i] == pytest.approx(float(layer.weight.grad.norm()), rel=1e-12)
    acts = model.trace(x).activations
    assert profile.activation_std[1] == pytest.approx(float(acts[1].detach().std(unbiased=False)))


def test_weight_grad_norms_equal_backward():
    model = deep_mlp(2, 5, 3, 1, activation="relu", scheme="he", seed=4)
    x, y = _batch(9, 2)
    labels = (y.reshape(-1) > 0).double()
    norms = weight_grad_norms(model, x, labels)
    logistic_cross_entropy(model(x), labels).mean().backward()
    assert norms == pytest.approx([float(layer.weight.grad.norm()) for layer in model.linears],
                                  rel=1e-12)


def test_dead_unit_share_counts_units_off_everywhere():
    z = torch.tensor([[-1.0, 2.0, 0.0], [-0.5, -1.0, 0.0]])
    total, per_layer = dead_unit_share([z, torch.ones(2, 3)])
    assert per_layer == [pytest.approx(2 / 3), 0.0]
    assert total == pytest.approx(2 / 6)


def test_relu_he_prediction_is_the_closed_form():
    width, depth = 64, 5
    stds = [math.sqrt(2 / width)] * (depth + 1)
    pred = predicted_profile([width] * (depth + 1) + [1], stds, "relu", output_error_second_moment=3.0)
    assert pred.net_input_std == pytest.approx([math.sqrt(2.0)] * depth, rel=1e-10)
    # ReLU He: activation variance = q (1/2 - 1/(2 pi)) with q = 2.
    assert pred.activation_std[2] == pytest.approx(math.sqrt(2 * (0.5 - 1 / (2 * math.pi))), rel=1e-10)
    # error into the last hidden layer: v_out * 3 * 1/2; each layer below: x (n v / 2) = 1.
    expected = (2 / width) * 3.0 * 0.5
    assert [e**2 for e in pred.error_rms] == pytest.approx([expected] * depth, rel=1e-10)


def test_wide_network_follows_the_prediction():
    width, depth = 256, 5
    model = deep_mlp(width, width, depth, 1, activation="tanh", scheme="xavier", gain=5 / 3, seed=0)
    x, y = _batch(300, width, seed=123)
    measured = signal_profile(model, x, y)
    stds = [weight_std("xavier", layer.in_features, layer.out_features, gain=5 / 3)
            for layer in model.linears]
    pred = predicted_profile([width] * (depth + 1) + [1], stds, "tanh",
                             output_error_second_moment=measured.output_error_second_moment)
    for m, p in zip(measured.net_input_std, pred.net_input_std):
        assert m == pytest.approx(p, rel=0.05)
    for m, p in zip(measured.error_rms, pred.error_rms):
        assert m == pytest.approx(p, rel=0.25)


def test_bad_model_arguments_raise():
    from actlab.errors import ConfigError

    with pytest.raises(ConfigError):
        DeepMLP(2, 0, 3)
    with pytest.raises(ConfigError):
        DeepMLP(2, 4, 3, norm="group")
    with pytest.raises(ValueError, match="relu"):
        DeepMLP(2, 4, 3, activation="rleu")
