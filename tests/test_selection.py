"""Selection-based Top-K and Percentile Centering (ATen and native paths) against torch.topk,
torch.quantile and dense references: values and gradients, with ties, NaN and ±inf rows, and
rows shorter than the vector width; the frozen path's single fused op; the throughput clock."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from actlab.activations import native
from actlab.activations.sparse import kept_count, topk_sparsify
from actlab.experiments.accumulation_stop import AccumulationStop, throughput
from actlab.nn.norms import PercentileBatchNorm, PercentileLayerNorm


@pytest.fixture(params=["aten", "native"])
def path(request):
    """Run a test on the ATen path and, where the C++ kernels build, on the native path."""
    if request.param == "native":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            native.enable(True)
            if native.selection() is None:
                native.enable(False)
                pytest.skip(f"native kernels cannot be built here: {native.build_error()}")
    else:
        native.enable(False)
    yield request.param
    native.enable(False)


# -- Top-K -------------------------------------------------------------------------------

def _topk_reference(y: torch.Tensor, fraction: float, dim: int) -> torch.Tensor:
    k = kept_count(fraction, y.shape[dim])
    values, indices = torch.topk(y, k, dim=dim)
    return torch.zeros_like(y).scatter(dim, indices, values)


@pytest.mark.parametrize("shape", [(37, 301), (5, 3, 7), (64, 3), (4, 6, 5, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_topk_equals_topk_and_scatter(path, shape, dtype):
    """Distinct values: the same output and gradient as torch.topk + scatter, exactly."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen, dtype=dtype)
    grad = torch.randn(shape, generator=gen, dtype=dtype)
    dim = 1 if len(shape) == 4 else -1
    for fraction in (0.1, 0.5, 0.34):
        xa = x.clone().requires_grad_(True)
        xb = x.clone().requires_grad_(True)
        ours = topk_sparsify(xa, fraction)
        ref = _topk_reference(xb, fraction, dim)
        assert torch.equal(ours, ref)
        (ga,) = torch.autograd.grad(ours, xa, grad)
        (gb,) = torch.autograd.grad(ref, xb, grad)
        assert torch.equal(ga, gb)


def _check_exact_k(y: torch.Tensor, out: torch.Tensor, grad_in: torch.Tensor, k: int) -> None:
    """Per row: exactly k entries kept (the gradient says which), every entry above the k-th
    largest among them, and the kept values are torch.topk's (as multisets)."""
    kept = grad_in != 0
    assert (kept.sum(-1) == k).all()
    ref_values = torch.topk(y, k, dim=-1).values
    ours_values = torch.where(kept, y, -math.inf).topk(k, dim=-1).values
    torch.testing.assert_close(ours_values, ref_values, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.where(kept, y, 0.0).nan_to_num(), out.nan_to_num())
    kth = ref_values[:, -1:]
    assert (kept | ~(y > kth)).all()  # nothing strictly above the threshold is dropped


def test_topk_ties_nan_and_infinities_keep_exactly_k(path):
    nan, inf = math.nan, math.inf
    y = torch.tensor([
        [1.0, 2.0, 2.0, 2.0, 2.0, 0.0, -1.0, 3.0],  # ties at the threshold
        [0.0] * 8,  # all tied
        [nan, 1.0, 2.0, nan, 0.5, -inf, inf, 3.0],  # NaN counts as largest
        [nan, nan, nan, nan, 1.0, 2.0, nan, 0.0],  # more NaNs than k
        [-inf, -inf, -inf, -inf, -inf, -inf, 1.0, -inf],  # -inf ties
        [inf, inf, inf, inf, 0.0, 1.0, 2.0, 3.0],  # +inf beyond k
    ], dtype=torch.float64)
    for fraction in (0.1, 0.3, 0.5):
        k = kept_count(fraction, y.shape[-1])
        x = y.clone().requires_grad_(True)
        out = topk_sparsify(x, fraction)
        (g,) = torch.autograd.grad(out, x, torch.ones_like(out))
        _check_exact_k(y, out.detach(), g, k)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 9, 17])
def test_topk_rows_shorter_than_the_vector_width(path, n):
    gen = torch.Generator().manual_seed(n)
    y = torch.randint(-3, 4, (50, n), generator=gen).double()  # many ties
    for fraction in (0.2, 0.5, 0.9):
        x = y.clone().requires_grad_(True)
        out = topk_sparsify(x, fraction)
        (g,) = torch.autograd.grad(out, x, torch.ones_like(out))
        _check_exact_k(y, out.detach(), g, kept_count(fraction, n))


def test_topk_under_torch_func():
    """torch.func transforms take the topk + scatter path: vmap and grad still work."""
    x = torch.randn(4, 10, dtype=torch.float64)
    per_row = torch.func.vmap(lambda r: topk_sparsify(r, 0.3))(x)
    assert torch.equal(per_row, _topk_reference(x, 0.3, -1))
    g = torch.func.grad(lambda r: topk_sparsify(r, 0.3).sum())(x)
    assert torch.equal(g, (_topk_reference(x, 0.3, -1) != 0).double())


# -- Percentile Centering --------------------------------------------------------------

def _reference(x: torch.Tensor, q: float, weight, bias, per_channel: bool, eps: float):
    """Percentile Centering with torch.quantile and autograd (a dense computation)."""
    if per_channel:
        c = x.shape[1]
        flat = x.transpose(0, 1).reshape(c, -1)
        shape = [1, c] + [1] * (x.dim() - 2)
        center = torch.quantile(flat, q, dim=1).view(shape)
        var = flat.var(dim=1, unbiased=False).view(shape)
    else:
        shape = [-1]
        center = torch.quantile(x, q, dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
    return (x - center) * torch.rsqrt(var + eps) * weight.view(shape) + bias.view(shape)


def _layer(shape, q, dtype, gen):
    per_channel = len(shape) == 4 or (len(shape) == 2 and shape[0] > 100)
    features = shape[1] if per_channel else shape[-1]
    cls = PercentileBatchNorm if per_channel else PercentileLayerNorm
    layer = cls(features, q=q).to(dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(features, generator=gen, dtype=dtype))
        layer.bias.copy_(torch.randn(features, generator=gen, dtype=dtype))
    return layer, per_channel


def _run_both(layer, x, grad, q, per_channel):
    xa = x.clone().requires_grad_(True)
    out = layer(xa)
    ga, gwa, gba = torch.autograd.grad(out, (xa, layer.weight, layer.bias), grad)
    # the reference in float64 from the same inputs: float32 results are held to it
    xb = x.double().requires_grad_(True)
    w = layer.weight.detach().double().requires_grad_(True)
    b = layer.bias.detach().double().requires_grad_(True)
    ref = _reference(xb, q, w, b, per_channel, layer.eps)
    gb, gwb, gbb = torch.autograd.grad(ref, (xb, w, b), grad.double())
    return (out, ga, gwa, gba), (ref, gb, gwb, gbb)


@pytest.mark.parametrize("shape", [(37, 301), (6, 3, 5), (9, 2), (4, 6, 5, 7), (300, 3),
                                   (3, 2, 50, 50)])
@pytest.mark.parametrize("q", [0.7, 0.5, 0.0, 1.0])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_percentile_centering_matches_quantile_reference(path, shape, q, dtype, tol):
    """Output, input/weight/bias gradients against torch.quantile + autograd. Includes rows
    shorter than the vector width, odd lengths, and channels long enough (7500) for the
    sampled bracketing of the native selection."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(shape, generator=gen, dtype=dtype) * 2 + 0.5
    grad = torch.randn(shape, generator=gen, dtype=dtype)
    layer, per_channel = _layer(shape, q, dtype, gen)
    ours, ref = _run_both(layer, x, grad, q, per_channel)
    if dtype == torch.float32 and shape[-1] == 2:
        tol = 1e-5  # 2-element rows: the input gradient is a difference of terms ~ rstd, ~10x it
    for a, b in zip(ours, ref):
        error = float((a.double() - b).abs().max())
        assert error <= tol * max(float(b.abs().max()), 1.0), error


@pytest.mark.parametrize("q", [0.1, 0.3, 0.5, 0.75])
def test_percentile_centering_with_ties(path, q):
    """Ties: values exact; the gradient summed over each set of tied inputs matches (which
    of the tied elements takes the percentile's gradient is arbitrary, in torch.quantile too)."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randint(-2, 3, (12, 10), generator=gen).double()
    grad = torch.randn(12, 10, generator=gen, dtype=torch.float64)
    layer, _ = _layer((12, 10), q, torch.float64, gen)
    (out, gx, gw, gb), (ref, rx, rw, rb) = _run_both(layer, x, grad, q, False)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(gw, rw, rtol=0, atol=1e-12)
    torch.testing.assert_close(gb, rb, rtol=0, atol=1e-12)
    for value in x.unique():
        tied = x == value
        torch.testing.assert_close((gx * tied).sum(-1), (rx * tied).sum(-1), rtol=0, atol=1e-11)


def test_percentile_centering_nan_and_infinite_rows(path):
    """A row with NaN or ±inf is NaN throughout, as with torch.quantile; other rows unharmed."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(5, 13, generator=gen, dtype=torch.float64)
    x[1, 4] = math.nan
    x[2, 0] = math.inf
    x[3, 7], x[3, 8] = -math.inf, math.inf
    layer, _ = _layer((5, 13), 0.7, torch.float64, gen)
    grad = torch.randn(5, 13, generator=gen, dtype=torch.float64)
    (out, gx, *_), (ref, rx, *_) = _run_both(layer, x, grad, 0.7, False)
    torch.testing.assert_close(out, ref, equal_nan=True)
    bad = torch.tensor([False, True, True, True, False])
    assert out[bad].isnan().all() and gx[bad].isnan().all()
    torch.testing.assert_close(gx[~bad], rx[~bad])


def test_native_and_aten_paths_agree_on_the_running_statistics():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if not native.enable(True) or native.selection() is None:
            native.enable(False)
            pytest.skip("native kernels cannot be built here")
    x = torch.randn(8, 4, 6, 6, dtype=torch.float64)
    layers = [PercentileBatchNorm(4, q=0.3).double() for _ in range(2)]
    rows = [PercentileLayerNorm(36, q=0.3).double() for _ in range(2)]
    for use, bn, ln in zip((True, False), layers, rows):
        native.enable(use)
        bn(x)
        ln(x.reshape(8, 4, 36))
    native.enable(False)
    for a, b in (layers, rows):
        torch.testing.assert_close(a.running_center, b.running_center, rtol=0, atol=1e-14)
        torch.testing.assert_close(a.running_var, b.running_var, rtol=0, atol=1e-14)


# -- Accumulation Stop's frozen path ----------------------------------------------------

class _FullSizeOps(TorchDispatchMode):
    """Records the ops that produce a tensor of the input's size."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel, self.ops = numel, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else [out]
        if any(isinstance(o, torch.Tensor) and o.numel() == self.numel for o in outs):
            self.ops.append(str(func.overloadpacket.__name__))
        return out


@pytest.mark.parametrize("shape", [(16, 24), (3, 5, 24)])
def test_frozen_layernorm_is_one_fused_multiply_add(shape):
    """After Accumulation Stop the forward makes one full-size op (no reduction, no
    temporary); values and all gradients equal the affine map's, and gradcheck passes."""
    layer = PercentileLayerNorm(24, q=0.3, freeze_after=1).double()
    x = torch.randn(shape, dtype=torch.float64)
    layer(x)
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    assert layer.frozen
    recorder = _FullSizeOps(x.numel())
    with recorder:
        layer(x)
    assert len(recorder.ops) == 1, recorder.ops
    xa = x.clone().requires_grad_(True)
    out = layer(xa)
    grad = torch.randn_like(out)
    ours = torch.autograd.grad(out, (xa, layer.weight, layer.bias), grad)
    xb = x.clone().requires_grad_(True)
    w = layer.weight.detach().clone().requires_grad_(True)
    b = layer.bias.detach().clone().requires_grad_(True)
    ref = (xb - layer.running_center) / torch.sqrt(layer.running_var + layer.eps) * w + b
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for a, r in zip(ours, torch.autograd.grad(ref, (xb, w, b), grad)):
        torch.testing.assert_close(a, r, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda t, wt, bt: torch.nn.functional.linear(
        layer(t), torch.eye(24, dtype=torch.float64)) * wt.sum() + bt.sum(),
        (x.clone().requires_grad_(True), layer.weight, layer.bias))


def test_frozen_layernorm_without_affine_parameters():
    layer = PercentileLayerNorm(10, q=0.5, freeze_after=1, affine=False).double()
    x = torch.randn(4, 10, dtype=torch.float64)
    layer(x)
    xa = x.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(layer, (xa,))


# -- the experiment's clock -------------------------------------------------------------

def test_throughput_median_of_blocks_and_noise():
    times = np.full(40, 0.01)
    rate, noise = throughput(times)
    assert rate == pytest.approx(100.0) and noise == pytest.approx(0.0)
    times[20:] = 0.02  # the clock slows down half-way: noise is half the relative gap
    rate, noise = throughput(times)
    assert noise == pytest.approx((100 - 50) / (100 + 50))


@pytest.mark.parametrize("ratio,noise,held", [(1.02, 0.05, None), (0.97, 0.05, None),
                                              (1.2, 0.05, True), (0.8, 0.05, False),
                                              (1.1, math.nan, None)])
def test_speed_claim_is_undecided_within_noise(ratio, noise, held):
    entry = {"steps_per_s": ratio, "accuracy": 0.9, "ratio_to_layernorm": ratio,
             "ratio_noise": noise}
    summary = {"models": {"mlp": {"layernorm": {"steps_per_s": 1.0, "accuracy": 0.9},
                                  "percentile-frozen": entry}}}
    claim = AccumulationStop().claims(summary)[0]
    assert claim.held is held
