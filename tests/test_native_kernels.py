"""The opt-in one-pass C++ kernels against the ATen path, autograd and finite differences."""

from __future__ import annotations

import warnings

import pytest
import torch

import actlab
from actlab.activations import native

SHIFT_SPECS = ["relu:shift=theory", "leaky_relu:slope=0.2:shift=0.3", "gelu:shift=0.115",
               "silu:shift=0.2"]
ADAPTIVE_SPECS = ["relu:adaptive", "leaky_relu:slope=0.2:adaptive", "gelu:adaptive",
                  "silu:adaptive"]


@pytest.fixture(scope="module")
def built():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if native.build() is None:
            pytest.skip(f"native kernels cannot be built here: {native.build_error()}")
    yield
    native.enable(False)


def _run(spec: str, x: torch.Tensor, grad: torch.Tensor, use_native: bool):
    assert native.enable(use_native) is use_native
    x = x.detach().clone().requires_grad_(True)
    y = actlab.activation(spec)(x)
    (gx,) = torch.autograd.grad(y, x, grad)
    return y.detach(), gx


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


@pytest.mark.parametrize("spec", SHIFT_SPECS + ADAPTIVE_SPECS)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-13), (torch.float32, 1e-6)])
def test_native_equals_aten_path(built, spec, dtype, tol):
    """Forward and gradient agree with the ATen ops, on rows whose length is not a multiple
    of the vector width (so the scalar tails run too)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 301, generator=g, dtype=dtype) * 3
    grad = torch.randn(37, 301, generator=g, dtype=dtype)
    y_native, gx_native = _run(spec, x, grad, True)
    y_aten, gx_aten = _run(spec, x, grad, False)
    assert _relative(y_native, y_aten) < tol
    assert _relative(gx_native, gx_aten) < tol


@pytest.mark.parametrize("spec", ["relu:shift=0.25", "leaky_relu:slope=0.1:shift=0.5"])
def test_piecewise_linear_shift_is_exact(built, spec):
    x = torch.linspace(-25, 25, 1001, dtype=torch.float32).reshape(7, 143)
    grad = torch.ones_like(x)
    assert torch.equal(_run(spec, x, grad, True)[0], _run(spec, x, grad, False)[0])


@pytest.mark.parametrize("spec", ["gelu:shift=0.115", "silu:adaptive", "relu:adaptive"])
def test_native_gradcheck(built, spec):
    """Finite differences in float64 (points away from ReLU's kink)."""
    native.enable(True)
    module = actlab.activation(spec)
    x = torch.tensor([[-1.3, 0.4, 2.2, -0.7, 0.9], [0.3, -2.1, 1.7, 0.6, -0.2]],
                     dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))


def test_known_values_of_the_centred_relu(built):
    native.enable(True)
    x = torch.tensor([[1.0, -2.0, 3.0, 0.0]], requires_grad=True)
    y = actlab.activation("relu:adaptive")(x)
    assert torch.allclose(y, torch.tensor([[0.0, -1.0, 2.0, -1.0]]))
    y.backward(torch.tensor([[4.0, 0.0, 0.0, 0.0]]))
    # grad wrt y centred: (3, -1, -1, -1); times relu'(x) = (1, 0, 1, 0)
    assert torch.equal(x.grad, torch.tensor([[3.0, 0.0, -1.0, 0.0]]))


def test_nan_and_inf_propagate(built):
    x = torch.tensor([[float("nan"), float("inf"), -float("inf"), 1.0, -1.0]])
    grad = torch.ones_like(x)
    for spec in ("relu:shift=0.5", "silu:shift=0.5"):
        a, b = _run(spec, x, grad, True)[0], _run(spec, x, grad, False)[0]
        assert torch.allclose(a, b, equal_nan=True), spec
    gelu = _run("gelu:shift=0.5", x, grad, True)[0][0]
    assert gelu[0].isnan() and gelu[1] == float("inf")  # float32 ATen gives nan at +inf
    assert torch.allclose(gelu[3:], _run("gelu:shift=0.5", x, grad, False)[0][0, 3:])


def test_unsupported_inputs_fall_back_to_aten(built):
    """Non-contiguous input, channel-wise centring of 4-D input and gelu's tanh form use the
    ATen path and still give the right values."""
    g = torch.Generator().manual_seed(1)
    cases = [
        ("relu:shift=0.3", torch.randn(16, 9, generator=g).t()),  # transposed
        ("gelu:adaptive", torch.randn(2, 5, 3, 3, generator=g)),  # centred over dim 1
        ("gelu:tanh:shift=0.1", torch.randn(4, 33, generator=g)),
    ]
    for spec, x in cases:
        grad = torch.randn(x.shape, generator=g)
        y_native, gx_native = _run(spec, x, grad, True)
        y_aten, gx_aten = _run(spec, x, grad, False)
        assert torch.equal(y_native, y_aten) and torch.equal(gx_native, gx_aten), spec


def test_double_backward_with_native_forward(built):
    """Hessian-vector products still work (the backward of the backward is ATen's)."""
    g = torch.Generator().manual_seed(2)
    x0 = torch.randn(6, 11, generator=g, dtype=torch.float64)
    v = torch.randn(6, 11, generator=g, dtype=torch.float64)

    def hvp(use_native: bool) -> torch.Tensor:
        native.enable(use_native)
        x = x0.clone().requires_grad_(True)
        y = actlab.activation("silu:adaptive")(x)
        (gx,) = torch.autograd.grad((y**2).sum(), x, create_graph=True)
        return torch.autograd.grad((gx * v).sum(), x)[0]

    assert _relative(hvp(True), hvp(False)) < 1e-12


def test_disabled_means_not_used(built, monkeypatch):
    native.enable(False)
    calls = []
    monkeypatch.setattr(native, "shift_forward", lambda *a: calls.append(a))
    actlab.activation("relu:shift=0.2")(torch.randn(3, 4))
    assert calls == [] and not native.enabled()


def test_a_failed_build_warns_and_falls_back(monkeypatch):
    import torch.utils.cpp_extension as cpp

    def broken(**_kwargs):
        raise RuntimeError("no compiler\nerror: g++ not found")

    monkeypatch.setattr(native, "_module", None)
    monkeypatch.setattr(native, "_extensions", {})
    monkeypatch.setattr(native, "_build_errors", {})
    monkeypatch.setattr(cpp, "load", broken)
    with pytest.warns(RuntimeWarning, match="g\\+\\+ not found"):
        assert native.enable() is False
    assert "g++ not found" in native.build_error()
    x = torch.randn(5, 7)
    assert torch.equal(actlab.activation("relu:shift=0.2")(x), torch.relu(x) - 0.2)
    native.enable(False)


def test_parallel_chunks_give_the_same_result(built):
    """Large enough for at::parallel_for to split the work over threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        g = torch.Generator().manual_seed(3)
        x = torch.randn(300, 1000, generator=g)
        grad = torch.randn(300, 1000, generator=g)
        for spec in ("relu:shift=0.2", "gelu:adaptive"):
            y_native, gx_native = _run(spec, x, grad, True)
            y_aten, gx_aten = _run(spec, x, grad, False)
            assert _relative(y_native, y_aten) < 1e-6 and _relative(gx_native, gx_aten) < 1e-6
    finally:
        torch.set_num_threads(threads)
