"""The variance recursion against the handbook's numbers and against measured random networks."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from actlab.theory.recursion import measure_variances, predict_variances

FIELDS = ("net_input_variance", "activation_second_moment", "slope_second_moment",
          "error_variance", "weight_gradient_norm")


def test_one_300_to_100_layer_of_the_handbook():
    # Net-input variance 300·v: 1.5 (Xavier), 2 (He), 1/3 (default); after ReLU half that.
    for v, q in ((2 / 400, 1.5), (2 / 300, 2.0), (1 / 900, 1 / 3)):
        p = predict_variances([300, 100], v, "relu")
        assert p.net_input_variance[0] == pytest.approx(q, rel=1e-12)
        assert p.activation_second_moment[0] == pytest.approx(q / 2, rel=1e-12)


@pytest.mark.parametrize(("v_times_n", "factor"), [(2.0, 1.0), (1.0, 2.0**-10), (1 / 3, 6.0**-10)])
def test_ten_square_relu_layers_scale_the_variance_by_the_handbook_factor(v_times_n, factor):
    n = 64
    p = predict_variances([n] * 11, v_times_n / n, "relu")
    assert p.activation_second_moment[-1] == pytest.approx(factor, rel=1e-10)


def test_relu_weight_gradients_are_all_wrong_by_the_same_factor():
    # The c^(L-1) rule: with c times He's std every layer's gradient scales by c^(L-1).
    widths = [64] * 22  # 20 hidden layers and a linear output: L = 21 weight matrices
    acts = ["relu"] * 20 + ["identity"]
    he = predict_variances(widths, 2 / 64, acts)
    xavier = predict_variances(widths, 1 / 64, acts)
    for a, b in zip(xavier.weight_gradient_norm, he.weight_gradient_norm):
        assert a / b == pytest.approx(2.0**-10, rel=1e-10)
    flat = he.weight_gradient_norm
    assert max(flat) / min(flat) == pytest.approx(1.0, rel=1e-10)  # flat across the layers


@pytest.mark.parametrize(("gain", "published_std"), [(1.0, 0.2409), (5 / 3, 1.0858),
                                                      (1.5925, 1.0003)])
def test_tanh_net_input_std_of_layer_10_as_predicted_in_the_handbook(gain, published_std):
    p = predict_variances([256] * 11, gain**2 / 256, "tanh")
    assert round(math.sqrt(p.net_input_variance[9]), 4) == published_std


def test_per_layer_arguments_and_rows():
    p = predict_variances([10, 20, 5], [0.1, 0.2], ["tanh", "identity"], input_second_moment=2.0)
    assert p.net_input_variance[0] == pytest.approx(10 * 0.1 * 2.0)
    assert p.net_input_variance[1] == pytest.approx(20 * 0.2 * p.activation_second_moment[0])
    assert p.error_variance[1] == pytest.approx(1.0)
    assert p.error_variance[0] == pytest.approx(5 * 0.2 * 1.0 * p.slope_second_moment[0])
    assert [row["layer"] for row in p.rows()] == [1, 2]
    with pytest.raises(ValueError, match="weight_variances"):
        predict_variances([10, 20, 5], [0.1], "tanh")
    with pytest.raises(ValueError, match="widths"):
        predict_variances([10], 0.1, "tanh")


def test_measurement_equals_torch_modules_and_autograd():
    """measure_variances against nn.Linear + nn.Tanh with the same draws, by autograd."""
    widths, v, n = [7, 9, 4], 0.3, 5
    gen = torch.Generator().manual_seed(11)
    measured = measure_variances(widths, v, "tanh", n_examples=n, generator=gen)
    gen = torch.Generator().manual_seed(11)  # same draws in the same order
    x = torch.randn(n, 7, dtype=torch.float64, generator=gen)
    w1 = torch.randn(9, 7, dtype=torch.float64, generator=gen) * math.sqrt(v)
    w2 = torch.randn(4, 9, dtype=torch.float64, generator=gen) * math.sqrt(v)
    probe = torch.randn(n, 4, dtype=torch.float64, generator=gen)
    l1, l2 = nn.Linear(7, 9, bias=False).double(), nn.Linear(9, 4, bias=False).double()
    l1.weight.data, l2.weight.data = w1, w2
    z1 = l1(x)
    z1.retain_grad()
    a1 = nn.Tanh()(z1)
    z2 = l2(a1)
    z2.retain_grad()
    (nn.Tanh()(z2) * probe).sum().backward()
    z2, a1 = z2.detach(), a1.detach()
    assert measured.net_input_variance[1] == pytest.approx(float(z2.pow(2).mean()), rel=1e-12)
    assert measured.activation_second_moment[0] == pytest.approx(float(a1.pow(2).mean()), rel=1e-12)
    assert measured.error_variance[0] == pytest.approx(float(z1.grad.pow(2).mean()), rel=1e-12)
    norms = [float(torch.outer(z1.grad[i], x[i]).norm()) for i in range(n)]
    expected = math.sqrt(sum(v * v for v in norms) / n)
    assert measured.weight_gradient_norm[0] == pytest.approx(expected, rel=1e-12)


def _worst_ratio(measured, predicted, field: str) -> float:
    return max(abs(math.log(a / b)) for a, b in zip(getattr(measured, field),
                                                     getattr(predicted, field)))


# Wide random networks, 20 hidden layers of 512 units plus a 512-unit output layer, measured
# on 128 standard normal inputs. Tolerances (max over all layers, as a factor) were set from
# the spread of ten seeds, with margin. Tanh and sigmoid stay close to the average over
# networks; ReLU's per-network signal size does a random walk (a log-std of about
# sqrt(5/n) per layer), so it is held only to a factor of 3.5, which still separates
# c-scalings whose predictions differ by 2 per layer.
WIDE = [512] * 21
CASES = [
    ("tanh", 1.0, {"net_input_variance": 1.1, "activation_second_moment": 1.1,
                   "slope_second_moment": 1.03, "error_variance": 1.12,
                   "weight_gradient_norm": 1.08}),
    ("sigmoid", 1.0, {"net_input_variance": 1.35, "activation_second_moment": 1.12,
                      "slope_second_moment": 1.05, "error_variance": 1.25,
                      "weight_gradient_norm": 1.12}),
    ("relu", 2.0, {"net_input_variance": 3.5, "activation_second_moment": 3.5,
                   "slope_second_moment": 1.2, "error_variance": 2.5,
                   "weight_gradient_norm": 2.2}),
]


@pytest.mark.parametrize(("activation", "v_times_n", "tolerance"), CASES)
def test_prediction_matches_a_wide_random_network(activation, v_times_n, tolerance):
    predicted = predict_variances(WIDE, v_times_n / 512, activation)
    measured = measure_variances(WIDE, v_times_n / 512, activation, n_examples=128,
                                 generator=torch.Generator().manual_seed(0))
    for field in FIELDS:
        assert _worst_ratio(measured, predicted, field) <= math.log(tolerance[field]), field
    if activation == "relu":  # the tolerance still rejects 1.5 x He's scale
        wrong = predict_variances(WIDE, 1.5**2 * v_times_n / 512, activation)
        assert _worst_ratio(measured, wrong, "net_input_variance") > math.log(100)
