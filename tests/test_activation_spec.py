"""Spec grammar, canonical strings, errors, registration and shift=theory."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import actlab
from actlab.activations import is_bounded, parse_spec, resolve_elementwise
from actlab.activations.base import Activation
from actlab.activations.spec import SpecError, canonical_spec, unregister_activation

ISSUE_NAMES = ["relu", "leaky_relu", "prelu", "elu", "selu", "gelu", "silu", "sigmoid", "tanh",
               "softplus", "mish", "relu2", "gelu2", "identity", "noisy_relu", "sugar"]


def test_all_issue_names_available_and_build() -> None:
    names = actlab.available_activations()
    for name in ISSUE_NAMES:
        assert name in names
        module = actlab.activation(name)
        assert isinstance(module, Activation) and module.spec == name
    assert "swish" not in names and actlab.activation("swish").spec == "silu"


@pytest.mark.parametrize(("spec", "canonical"), [
    ("swish", "silu"),
    ("SiLU:beta=1", "silu"),
    ("leaky_relu:slope=0.01", "leaky_relu"),
    ("leaky_relu:slope=0.10", "leaky_relu:slope=0.1"),
    ("gelu:topk=0.1:adaptive:tanh", "gelu:tanh:adaptive:topk=0.1"),
    ("relu:shift=theory:q=0.3333333333333333", "relu:shift=theory"),
    ("relu:q=0.5:shift=theory", "relu:shift=theory:q=0.5"),
    ("relu2:clip=50.0", "relu2:clip=50"),
    ("silu:learnable:beta=1.5", "silu:beta=1.5:learnable"),
    ("gelu:freeze_after=10:momentum=0.1:adaptive", "gelu:adaptive:momentum=0.1:freeze_after=10"),
    (" elu : alpha=2 ", "elu:alpha=2"),
])
def test_canonical_spec(spec: str, canonical: str) -> None:
    assert canonical_spec(spec) == canonical
    assert actlab.activation(spec).spec == canonical
    assert canonical_spec(canonical) == canonical  # idempotent
    assert canonical in repr(actlab.activation(spec))


def test_parse_spec_fields() -> None:
    parsed = actlab.parse_spec("gelu:tanh:shift=0.1:adaptive:momentum=0.2")
    assert parsed.name == "gelu"
    assert parsed.flags == frozenset({"tanh", "adaptive"})
    assert parsed.options == {"shift": 0.1, "momentum": 0.2}
    assert parse_spec("relu:shift=theory").options["shift"] == "theory"


@pytest.mark.parametrize(("spec", "must_name"), [
    ("rellu", "'relu'"),
    ("gelux", "'gelu'"),
    ("swissh", "'swish'"),
    ("relu:shfit=0.1", "'shift'"),
    ("leaky_relu:slop=0.1", "'slope'"),
    ("gelu:tahn", "'tanh'"),
    ("relu:topk", "'topk'"),        # needs a value
    ("relu:adaptive=1", "'adaptive'"),  # a flag
    ("relu:momentum=0.1", "'adaptive'"),  # needs adaptive
    ("relu:q=0.5", "'q'"),
    ("relu:shift=0.1:shift=0.2", "'shift'"),
])
def test_unknown_or_malformed_names_the_closest(spec: str, must_name: str) -> None:
    with pytest.raises(ValueError) as info:
        actlab.activation(spec)
    assert isinstance(info.value, SpecError)
    assert must_name in str(info.value)


@pytest.mark.parametrize(("spec", "option"), [
    ("relu:topk=0", "topk"), ("relu:topk=1.5", "topk"), ("relu:clip=-1", "clip"),
    ("leaky_relu:slope=nan", "slope"), ("relu:shift=inf", "shift"), ("relu:shift=abc", "shift"),
    ("softplus:beta=0", "beta"), ("gelu:adaptive:momentum=0", "momentum"),
    ("gelu:adaptive:freeze_after=0", "freeze_after"), ("relu:shift=theory:q=-1", "q"),
    ("elu:alpha=inf", "alpha"),
])
def test_out_of_range_names_the_option(spec: str, option: str) -> None:
    with pytest.raises(SpecError, match=f"'{option}'"):
        actlab.activation(spec)


def test_shift_theory_relu_closed_form() -> None:
    for q in (1 / 3, 1.0, 0.25):
        module = actlab.activation(f"relu:shift=theory:q={q!r}")
        assert module.shift == pytest.approx(math.sqrt(q / (2 * math.pi)), abs=1e-12)


@pytest.mark.parametrize(("name", "published"), [
    ("relu", 0.230), ("gelu", 0.115), ("swish", 0.077), ("sigmoid", 0.500)])
def test_shift_theory_matches_rethinking_table_1(name: str, published: float) -> None:
    assert round(actlab.activation(f"{name}:shift=theory").shift, 3) == published


def test_shift_is_subtracted() -> None:
    x = torch.randn(5, 9, dtype=torch.float64)
    for spec in ("relu", "sigmoid", "gelu", "identity", "tanh:clip=0.5"):
        plain = actlab.activation(spec).double()(x)
        shifted = actlab.activation(f"{spec}:shift=0.3").double()(x)
        assert torch.allclose(shifted, plain - 0.3, rtol=0, atol=1e-15)
    x_before = x.clone()
    actlab.activation("identity:shift=1")(x)
    assert torch.equal(x, x_before)  # never modifies the caller's tensor


def test_resolve_elementwise_includes_parameters_clip_and_numeric_shift() -> None:
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    f, df = resolve_elementwise("leaky_relu:slope=0.2:clip=1.5:shift=0.25:adaptive:topk=0.5")
    expected = torch.where(x > 0, x, 0.2 * x).clamp_max(1.5) - 0.25
    assert torch.allclose(f(x), expected, rtol=0, atol=1e-15)
    slope = torch.where(x > 0, 1.0, 0.2).to(torch.float64)
    assert torch.allclose(df(x), torch.where(x > 1.5, 0.0, slope).to(torch.float64))
    f_theory, _ = resolve_elementwise("relu:shift=theory")
    assert torch.equal(f_theory(x), torch.relu(x))  # shift=theory excluded


def test_bounded() -> None:
    assert is_bounded("sigmoid") and is_bounded("tanh:shift=0.1")
    assert not is_bounded("relu") and not is_bounded("gelu")
    assert actlab.activation("tanh").bounded and not actlab.activation("silu").bounded
    assert actlab.activation("sigmoid").bounds == (0.0, 1.0)
    assert actlab.activation("tanh:clip=0.5:shift=0.25").bounds == (-1.25, 0.25)
    assert actlab.activation("sigmoid:shift=theory:topk=0.5").bounds == pytest.approx((-0.5, 0.5))
    assert actlab.activation("sigmoid:adaptive").bounds is None
    assert actlab.activation("relu").bounds is None
    x = torch.linspace(-30, 30, 301)
    for spec in ("tanh:clip=0.5:shift=0.25", "sigmoid:shift=0.7:topk=0.3"):
        module = actlab.activation(spec)
        low, high = module.bounds
        y = module(x.reshape(1, -1))
        assert float(y.min()) >= low - 1e-6 and float(y.max()) <= high + 1e-6


@pytest.fixture
def clean_registry():
    """Remove the test's user activations afterwards, so other tests see built-ins only."""
    yield
    for name in ("cube_scaled", "no_slope"):
        if name in actlab.available_activations():
            unregister_activation(name)


def test_register_user_activation(clean_registry) -> None:
    def cube_scaled(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return scale * x**3

    def d_cube_scaled(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return 3 * scale * x**2

    actlab.register_activation("cube_scaled", cube_scaled, d_cube_scaled, bounded=False,
                               scale=2.0, overwrite=True)
    assert "cube_scaled" in actlab.available_activations()
    x = torch.linspace(-2, 2, 11, dtype=torch.float64, requires_grad=True)
    module = actlab.activation("cube_scaled:scale=0.5:shift=0.1")
    assert module.spec == "cube_scaled:scale=0.5:shift=0.1"
    y = module(x)
    assert torch.allclose(y, 0.5 * x**3 - 0.1)
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert torch.allclose(grad, 1.5 * x.detach() ** 2)
    f, df = resolve_elementwise("cube_scaled:scale=0.5")
    assert torch.allclose(df(x.detach()), 1.5 * x.detach() ** 2)
    with pytest.raises(SpecError, match="'scale'"):
        actlab.activation("cube_scaled:scal=1")
    with pytest.raises(SpecError, match="already registered"):
        actlab.register_activation("cube_scaled", cube_scaled)
    with pytest.raises(SpecError, match="already registered"):
        actlab.register_activation("relu", cube_scaled)
    with pytest.raises(SpecError, match="clash"):
        actlab.register_activation("bad_one", cube_scaled, shift=1.0)
    # without a derivative, resolve_elementwise says so
    actlab.register_activation("no_slope", torch.sin, overwrite=True)
    assert resolve_elementwise("no_slope")[1] is None
    with pytest.raises(SpecError, match="built in"):
        unregister_activation("relu")


def test_modules_are_picklable_and_state_dict_roundtrips(tmp_path) -> None:
    module = actlab.activation("gelu:adaptive:momentum=0.5:freeze_after=3")
    for _ in range(5):
        module(torch.randn(4, 8))
    path = tmp_path / "act.pt"
    torch.save(module.state_dict(), path)
    fresh = actlab.activation("gelu:adaptive:momentum=0.5:freeze_after=3")
    fresh.load_state_dict(torch.load(path))
    assert int(fresh.center.steps) == 3
    assert torch.equal(fresh.center.running_mean, module.center.running_mean)
    x = torch.randn(3, 8)
    for spec in ("gelu:adaptive:momentum=0.5:freeze_after=3", "leaky_relu:slope=0.2:shift=0.1",
                 "relu:shift=theory", "prelu:clip=2", "silu:beta=2:topk=0.5"):
        module = actlab.activation(spec).eval()
        torch.save(module, tmp_path / "whole.pt")
        loaded = torch.load(tmp_path / "whole.pt", weights_only=False)
        assert loaded.spec == module.spec
        assert torch.equal(loaded(x), module(x))
        assert torch.equal(copy.deepcopy(module)(x), module(x))
