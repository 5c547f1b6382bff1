"""Initializers against the handbook's worked scales and against torch.nn.init."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from actlab.init import fans, initialize_, recommended_gain, weight_bound, weight_std


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# The handbook's "Initial scales of one layer": 300 inputs, 100 outputs.
@pytest.mark.parametrize(
    ("scheme", "variance", "std", "bound"),
    [
        ("xavier", 0.005, 0.0707, 0.1225),
        ("he", 0.0067, 0.0816, 0.1414),
        ("torch-default", 1 / 900, 0.0333, 0.0577),
    ],
)
def test_handbook_scales_of_a_300_to_100_layer(scheme, variance, std, bound):
    got = weight_std(scheme, fan_in=300, fan_out=100)
    assert round(got**2, 4) == round(variance, 4)
    assert round(got, 4) == std
    assert round(weight_bound(scheme, 300, 100), 4) == bound
    # The layer itself: nn.Linear(300, 100) has weight shape (100, 300), fan-in shape[1].
    for distribution in ("normal", "uniform"):
        layer = initialize_(nn.Linear(300, 100), scheme, distribution=distribution, generator=_gen())
        measured = layer.weight.std().item()
        assert measured == pytest.approx(got, rel=0.03)  # 30000 draws: sampling error ~0.4%
        assert torch.count_nonzero(layer.bias) == 0
        if distribution == "uniform":
            assert layer.weight.abs().max().item() <= got * math.sqrt(3) + 1e-12


def test_torch_default_variance_is_a_third_of_one_over_fan_in():
    assert weight_std("torch-default", 300, 100) ** 2 == pytest.approx(1 / 900, rel=1e-12)
    # And it is nn.Linear's own: the bound of its default init is 1/sqrt(fan_in).
    fresh = nn.Linear(300, 100)
    assert fresh.weight.abs().max().item() <= weight_bound("torch-default", 300, 100) + 1e-12
    assert fresh.weight.abs().max().item() > 0.98 * weight_bound("torch-default", 300, 100)


def test_fan_in_is_read_from_shape_1_not_shape_0():
    assert fans((100, 300)) == (300, 100)
    assert fans((32, 16, 3, 3)) == (16 * 9, 32 * 9)
    layer = initialize_(nn.Linear(300, 100), "he", generator=_gen(1))
    # The pitfall (shape[0]) would give sqrt(2/100) = 0.1414; the right answer is 0.0816.
    assert layer.weight.std().item() == pytest.approx(math.sqrt(2 / 300), rel=0.03)


# torch.nn.init on the same shapes: a 300 by 500 weight (fan_in 500, fan_out 300).
TORCH_CASES = [
    ("xavier", "normal", "fan_in", lambda w: nn.init.xavier_normal_(w)),
    ("xavier", "uniform", "fan_in", lambda w: nn.init.xavier_uniform_(w)),
    ("he", "normal", "fan_in", lambda w: nn.init.kaiming_normal_(w, nonlinearity="relu")),
    ("he", "uniform", "fan_in", lambda w: nn.init.kaiming_uniform_(w, nonlinearity="relu")),
    ("he", "normal", "fan_out",
     lambda w: nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")),
    ("he", "uniform", "fan_out",
     lambda w: nn.init.kaiming_uniform_(w, mode="fan_out", nonlinearity="relu")),
    ("torch-default", "uniform", "fan_in",
     lambda w: nn.init.kaiming_uniform_(w, a=math.sqrt(5))),
]


@pytest.mark.parametrize(("scheme", "distribution", "mode", "reference"), TORCH_CASES)
def test_std_and_bound_equal_torch_nn_init(scheme, distribution, mode, reference):
    ours = initialize_(nn.Linear(500, 300), scheme, mode=mode, distribution=distribution,
                       generator=_gen(2)).weight.detach()
    torch.manual_seed(3)
    theirs = reference(torch.empty(300, 500))
    # 150000 draws each: relative sampling error of a std ~0.2%, so 1.5% is ~7 sigma.
    assert ours.std().item() == pytest.approx(theirs.std().item(), rel=0.015)
    expected = weight_std(scheme, 500, 300, mode=mode)
    assert ours.std().item() == pytest.approx(expected, rel=0.015)
    if distribution == "uniform":
        bound = weight_bound(scheme, 500, 300, mode=mode)
        for w in (ours, theirs):
            assert w.abs().max().item() <= bound + 1e-12
            assert w.abs().max().item() > 0.999 * bound


def test_handbook_stds_of_a_300_by_500_matrix():
    assert round(weight_std("xavier", 500, 300), 4) == 0.0500
    assert round(weight_std("he", 500, 300), 4) == 0.0632


def test_conv_fan_in_includes_the_kernel():
    conv = initialize_(nn.Conv2d(16, 64, 3), "he", generator=_gen(4))
    reference = nn.init.kaiming_normal_(torch.empty(64, 16, 3, 3), nonlinearity="relu")
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / (16 * 9)), rel=0.03)
    assert conv.weight.std().item() == pytest.approx(reference.std().item(), rel=0.05)
    assert torch.count_nonzero(conv.bias) == 0


def test_recursive_on_containers_and_leaves_other_modules_alone():
    model = nn.Sequential(
        nn.Conv1d(4, 8, 5), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 12, 300),
        nn.LayerNorm(300), nn.Sequential(nn.Linear(300, 200), nn.Tanh()),
    )
    norm_weight = model[4].weight.detach().clone()
    initialize_(model, "fixed-point", activation="silu", generator=_gen(5))
    gain = recommended_gain("silu")
    assert model[3].weight.std().item() == pytest.approx(gain / math.sqrt(96), rel=0.03)
    assert model[5][0].weight.std().item() == pytest.approx(gain / math.sqrt(300), rel=0.03)
    for layer in (model[0], model[3], model[5][0]):
        assert torch.count_nonzero(layer.bias) == 0
    assert torch.equal(model[4].weight, norm_weight)


def test_generator_makes_the_draw_reproducible():
    a = initialize_(nn.Linear(50, 40), "xavier", generator=_gen(7)).weight
    b = initialize_(nn.Linear(50, 40), "xavier", generator=_gen(7)).weight
    c = initialize_(nn.Linear(50, 40), "xavier", generator=_gen(8)).weight
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_orthogonal_rows_scaled_by_the_fixed_point_gain():
    layer = initialize_(nn.Linear(200, 100), "orthogonal", activation="tanh", generator=_gen(9))
    w = layer.weight.detach().double()
    gain = recommended_gain("tanh")
    assert torch.allclose(w @ w.T, gain**2 * torch.eye(100, dtype=torch.float64), atol=1e-5)
    assert w.std().item() == pytest.approx(weight_std("orthogonal", 200, 100, "tanh"), rel=0.02)


def test_explicit_gain_overrides_the_scheme():
    layer = initialize_(nn.Linear(400, 400), "xavier", gain=5 / 3, generator=_gen(10))
    assert layer.weight.std().item() == pytest.approx(5 / 3 * math.sqrt(2 / 800), rel=0.02)


# recommended_gain is the fixed-point gain; torch.nn.init.calculate_gain agrees where its
# value is the fixed point too.
@pytest.mark.parametrize(
    ("name", "param"),
    [("linear", None), ("conv1d", None), ("conv2d", None), ("conv3d", None),
     ("conv_transpose2d", None), ("relu", None), ("leaky_relu", None),
     ("leaky_relu", 0.2), ("leaky_relu", 0.0), ("leaky_relu", 1.0)],
)
def test_recommended_gain_equals_calculate_gain_where_torch_uses_the_fixed_point(name, param):
    ours = recommended_gain(name, param)
    theirs = nn.init.calculate_gain(name, param)
    assert ours == pytest.approx(theirs, abs=1e-12)


@pytest.mark.parametrize(
    ("name", "ours_published", "torch_value"),
    [("tanh", 1.5925, 5 / 3), ("sigmoid", 1.8462, 1.0), ("selu", 1.0, 0.75)],
)
def test_recommended_gain_where_it_differs_from_torch(name, ours_published, torch_value):
    ours = recommended_gain(name)
    assert round(ours, 4) == ours_published
    assert nn.init.calculate_gain(name) == pytest.approx(torch_value)
    assert abs(ours - torch_value) > 0.05


def test_bad_input_names_the_option_and_close_values():
    with pytest.raises(ValueError, match="xavier"):
        initialize_(nn.Linear(3, 3), "xavir")
    with pytest.raises(ValueError, match="mode"):
        weight_std("he", 3, 3, mode="fanin")
    with pytest.raises(ValueError, match="distribution"):
        initialize_(nn.Linear(3, 3), "he", distribution="gauss")
    with pytest.raises(ValueError, match="param"):
        recommended_gain("tanh", 0.1)


def _frozen_init_std(scheme, fan_in, fan_out, activation, mode, gain):
    """The table's formulas as :func:`initialize_` has always drawn them (written out)."""
    if gain is None:
        gain = {"xavier": 1.0, "he": math.sqrt(2.0), "torch-default": 1.0 / math.sqrt(3.0)}.get(
            scheme) or recommended_gain(activation)
    if scheme == "xavier":
        return gain * math.sqrt(2.0 / (fan_in + fan_out))
    if scheme == "torch-default":
        return gain / math.sqrt(fan_in)
    if scheme == "orthogonal":
        return gain / math.sqrt(max(fan_in, fan_out))
    return gain / math.sqrt(fan_in if mode == "fan_in" else fan_out)


def _frozen_handbook_std(scheme, fan_in, fan_out, activation, gain, std):
    """The deep MLP stacks' formulas (written out): nn.Linear's own torch-default float,
    orthogonal with gain 1 over sqrt(fan_in), the fixed-point gain from theory.moments."""
    from actlab.theory import moments

    if scheme == "std":
        return float(std)
    if scheme == "torch-default":
        return (1.0 if gain is None else gain) / math.sqrt(3.0 * fan_in)
    if gain is None:
        gain = {"he": math.sqrt(2.0), "xavier": 1.0, "orthogonal": 1.0}.get(scheme)
        gain = float(moments(activation, 1.0).gain) if gain is None else gain
    if scheme == "xavier":
        return gain * math.sqrt(2.0 / (fan_in + fan_out))
    return gain / math.sqrt(fan_in)


_FANS = [(1, 1), (2, 32), (32, 32), (300, 100), (100, 300), (7, 13), (128, 1), (999, 3)]


@pytest.mark.parametrize("gain", [None, 5 / 3, 2.0])
@pytest.mark.parametrize("activation", ["relu", "tanh", "silu"])
def test_each_convention_gives_its_callers_exactly_their_former_values(activation, gain):
    """Bit for bit: ``initialize_`` / ``weight_bound`` keep the table, the deep MLP stacks
    (signal, worked example, pitfalls, ``deep_mlp``) keep the handbook's numbers."""
    from actlab.init import HANDBOOK_SCHEMES, SCHEMES

    for fan_in, fan_out in _FANS:
        for scheme in SCHEMES:
            for mode in ("fan_in", "fan_out"):
                assert weight_std(scheme, fan_in, fan_out, activation, mode, gain) == \
                    _frozen_init_std(scheme, fan_in, fan_out, activation, mode, gain)
        for scheme in HANDBOOK_SCHEMES:
            got = weight_std(scheme, fan_in, fan_out, activation=activation, gain=gain,
                             std=0.01, convention="handbook")
            assert got == _frozen_handbook_std(scheme, fan_in, fan_out, activation, gain, 0.01)


def test_the_conventions_really_differ_where_documented():
    # torch-default: the same value, not always the same float (the handbook's float64 numbers)
    pairs = [(weight_std("torch-default", n, n), weight_std("torch-default", n, n,
                                                            convention="handbook"))
             for n in range(1, 200)]
    assert all(a == pytest.approx(b, rel=1e-15) for a, b in pairs)
    assert any(a != b for a, b in pairs)
    # orthogonal: the larger fan and the fixed-point gain vs fan-in and gain 1
    assert weight_std("orthogonal", 300, 100) == recommended_gain("relu") / math.sqrt(300)
    assert weight_std("orthogonal", 100, 300, convention="handbook") == 1 / math.sqrt(100)
    with pytest.raises(ValueError, match="scheme"):
        weight_std("std", 3, 3, std=0.1)  # the table has no fixed-std scheme
    with pytest.raises(ValueError, match="std"):
        weight_std("std", 3, 3, convention="handbook")
    with pytest.raises(ValueError, match="convention"):
        weight_std("he", 3, 3, convention="deep")
