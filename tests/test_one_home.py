"""One home per concept: the shift is the activation's buffer on every path, one spec
grammar for norms, one "did you mean" helper, native kernels that describe themselves."""

from __future__ import annotations

import math
import types

import pytest
import torch
from torch.func import functional_call, grad, stack_module_state, vmap

import actlab
from actlab.activations import native
from actlab.activations.base import functorch_transforms_active
from actlab.errors import ConfigError, config_check, did_you_mean
from actlab.nn.norms import parse_norm
from actlab.nn.residual_mlp import ResidualMLP

RELU_SHIFT = 1 / math.sqrt(6 * math.pi)  # E ReLU(Z), Z ~ N(0, 1/3): eq. 16 of "Rethinking Activation Functions"


def test_functorch_check_exists_and_tells_transforms_apart():
    # The one private PyTorch call: if PyTorch renames it, this fails loudly.
    assert callable(torch._C._are_functorch_transforms_active)
    assert functorch_transforms_active() is False
    seen = []

    def f(x: torch.Tensor) -> torch.Tensor:
        seen.append(functorch_transforms_active())
        return x * 2

    vmap(f)(torch.ones(3, 2))
    grad(lambda x: f(x).sum())(torch.ones(2))
    assert seen == [True, True]


def test_shift_is_a_buffer_that_follows_to_and_is_not_saved():
    act = actlab.activation("relu:shift=theory")
    assert dict(act.named_buffers())["offset"].dtype == torch.float64
    assert act.shift == pytest.approx(RELU_SHIFT, abs=1e-14)
    assert "offset" not in act.state_dict()  # derived from the spec, not a checkpoint's state
    act.to(torch.float32)
    assert act.offset.dtype == torch.float32
    plain = actlab.activation("relu")
    assert float(plain.offset) == 0.0  # every module has one: same structure shifted or not


@pytest.mark.parametrize(("spec", "plain"), [
    ("relu:shift=theory", "relu"), ("gelu:shift=0.115", "gelu"), ("silu:shift=-0.3", "silu"),
    ("tanh:shift=0.2", "tanh"), ("relu:shift=0.1:topk=0.5", "relu:topk=0.5"),
])
def test_eager_vmap_and_grad_subtract_the_same_shift(spec, plain):
    act = actlab.activation(spec).double()
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    b = act.shift
    base = actlab.activation(plain).double()
    if "topk" not in spec:  # eager and vmap both give f(x) - b
        torch.testing.assert_close(act(x), base(x) - b, rtol=0, atol=1e-15)
        torch.testing.assert_close(vmap(act)(x), base(x) - b, rtol=0, atol=1e-15)
    torch.testing.assert_close(vmap(act)(x), act(x), rtol=0, atol=1e-15)
    # gradients: autograd through the eager fast path equals torch.func.grad
    (g_eager,) = torch.autograd.grad(act(x).square().sum(), x)
    g_func = vmap(grad(lambda row: act(row).square().sum()))(x.detach())
    torch.testing.assert_close(g_eager, g_func, rtol=0, atol=1e-12)


def test_shift_of_stacked_members_comes_from_each_members_buffer():
    # Members that differ only in their shift stack into one ensemble; each brings its own.
    models = [ResidualMLP(3, 5, 2, activation=a, generator=torch.Generator().manual_seed(0))
              for a in ("relu:shift=0", "relu:shift=theory", "relu:shift=0.5")]
    params, buffers = stack_module_state(models)
    template = models[0]
    x = torch.randn(3, 7, 3)
    stacked = vmap(lambda p, b, xi: functional_call(template, (p, b), (xi,)))(params, buffers, x)
    for i, model in enumerate(models):
        torch.testing.assert_close(stacked[i], model(x[i]), rtol=1e-6, atol=1e-6)
    assert not torch.allclose(stacked[0], stacked[1])


@pytest.mark.parametrize("specs", [("relu:shift=0", "relu:shift=theory", "relu:shift=0.5"),
                                   ("relu", "relu", "relu")])
def test_ensemble_members_each_get_their_own_shift(specs):
    # The ensemble's skeleton is member 0; whether or not it is shifted itself, every
    # member's output is its own eager output (the skeleton skips the subtraction only
    # when no member has a shift).
    from actlab.train.ensemble import Ensemble

    models = [ResidualMLP(3, 5, 2, activation=a, generator=torch.Generator().manual_seed(i))
              for i, a in enumerate(specs)]
    x = torch.randn(3, 7, 3)
    out = Ensemble(models).call(x)["default"]
    for i, model in enumerate(models):
        torch.testing.assert_close(out[i], model(x[i]), rtol=1e-6, atol=1e-6)


def test_residual_mlp_hands_the_fused_path_its_tensors():
    model = ResidualMLP(3, 5, 2, activation="gelu:shift=theory")
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    ln_w, ln_b, up, down, shifts = model.fused_tensors(params, buffers)
    for i, block in enumerate(model.blocks):
        assert ln_w[i] is block.norm.weight and ln_b[i] is block.norm.bias
        assert up[i] is block.up.weight and down[i] is block.down.weight
        assert shifts[i] is block.act.offset
    del params["blocks.1.up.weight"]
    assert model.fused_tensors(params, buffers) is None


def test_kind_table_check_rejects_a_mismatch():
    good = types.SimpleNamespace(kinds=lambda: dict(native.KINDS), __name__="ext")
    native.check_kinds(good)
    swapped = {**native.KINDS, "gelu": native.KINDS["silu"], "silu": native.KINDS["gelu"]}
    bad = types.SimpleNamespace(kinds=lambda: swapped, __name__="ext")
    with pytest.raises(RuntimeError, match="kinds"):
        native.check_kinds(bad)


def test_compiled_extensions_export_the_kind_table():
    if not native.enable():
        pytest.skip(f"native kernels unavailable: {native.build_error()}")
    try:
        assert dict(native.build().kinds()) == native.KINDS
        from actlab.nn import residual_stack

        ext = residual_stack.extension()
        if ext is not None:
            assert dict(ext.kinds()) == native.KINDS
    finally:
        native.enable(False)


def test_norms_take_the_colon_grammar_and_warn_on_commas():
    assert parse_norm("percentile:q=0.7:freeze_after=100") == (
        "percentile", {"q": 0.7, "freeze_after": 100})
    with pytest.warns(DeprecationWarning, match="percentile:q=0.7:freeze_after=100"):
        assert parse_norm("percentile:q=0.7,freeze_after=100") == (
            "percentile", {"q": 0.7, "freeze_after": 100})
    with pytest.raises(ValueError, match="did you mean freeze_after"):
        parse_norm("percentile:freeze_afer=3")
    with pytest.raises(ValueError, match="given twice"):
        parse_norm("percentile:q=0.7:q=0.8")
    with pytest.raises(ValueError, match="did you mean layernorm"):
        parse_norm("layernrom")


def test_did_you_mean():
    assert did_you_mean("reul", ["relu", "gelu", "tanh"], n=1) == "did you mean relu?"
    assert did_you_mean("reul", ["relu"], quote=True, prefix="; ") == "; did you mean 'relu'?"
    assert did_you_mean("zzz", ["relu", "gelu"]) == ""
    assert did_you_mean("zzz", ["relu", "gelu"], fallback=True) == "valid: gelu, relu"


def test_config_check_names_the_field_and_keeps_the_checkers_message():
    assert config_check("norm", parse_norm, "rmsnorm") == parse_norm("rmsnorm")
    with pytest.raises(ConfigError, match=r"^activations: .*relu") as info:
        config_check("activations", actlab.activation, "reluu")
    assert info.value.field == "activations" and info.value.__cause__ is None
    from actlab.nn.gpt import GPTConfig

    # keyword arguments go to the checker (a model config's fields)
    with pytest.raises(ConfigError, match=r"^variants: ffn: unknown kind 'swigl'"):
        config_check("variants", GPTConfig, ffn="swigl")
    with pytest.raises(TypeError):  # only ValueErrors are config errors
        config_check("x", int, None)
