"""Percentile Centering, RMSNorm and make_norm against PyTorch references."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actlab.nn.norms import (
    PercentileBatchNorm,
    PercentileLayerNorm,
    RMSNorm,
    make_norm,
    parse_norm,
    percentile,
)


def _flatten_reduce(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    keep = [d for d in range(x.dim()) if d not in dims]
    return x.permute(*keep, *dims).reshape(*[x.shape[d] for d in keep], -1)


@pytest.mark.parametrize("shape,dims,q,interpolation", [
    ((6, 37), (1,), 0.3, "linear"), ((6, 37), (1,), 0.5, "linear"),
    ((4, 3, 5, 5), (0, 2, 3), 0.73, "linear"), ((50,), (0,), 0.9, "linear"),
    ((3, 9), (1,), 0.0, "linear"), ((3, 9), (1,), 1.0, "linear"), ((3, 9), (1,), 1.0, "midpoint"),
    ((2, 4, 10), (2,), 0.125, "linear"), ((6, 37), (1,), 0.3, "lower"),
    ((6, 37), (1,), 0.3, "higher"), ((6, 37), (1,), 0.3, "nearest"), ((6, 37), (1,), 0.3, "midpoint"),
])
def test_percentile_matches_torch_quantile_forward_and_backward(shape, dims, q, interpolation):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(shape, dtype=torch.float64, generator=gen, requires_grad=True)
    ours = percentile(x, q, dims, interpolation=interpolation)
    ref = torch.quantile(_flatten_reduce(x, dims), q, dim=-1, interpolation=interpolation)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    upstream = torch.randn(ref.shape, dtype=torch.float64, generator=gen)
    (g_ours,) = torch.autograd.grad(ours, x, upstream)
    (g_ref,) = torch.autograd.grad(ref, x, upstream)
    torch.testing.assert_close(g_ours, g_ref, rtol=0, atol=1e-12)
    # The gradient reaches at most two elements per reduced group.
    assert int((g_ours != 0).sum()) <= 2 * ref.numel()


def test_percentile_with_ties_matches_quantile():
    x = torch.tensor([[1.0, 2.0, 2.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0], [5.0, 1.0, 1.0, 4.0, 4.0]])
    for q in (0.1, 0.3, 0.45, 0.6, 0.8, 0.95):
        torch.testing.assert_close(percentile(x, q, -1), torch.quantile(x, q, dim=-1))


def test_percentile_keepdim_and_errors():
    x = torch.randn(2, 3, 4)
    assert percentile(x, 0.5, (0, 2), keepdim=True).shape == (1, 3, 1)
    with pytest.raises(ValueError, match="q must be"):
        percentile(x, 1.5)
    with pytest.raises(ValueError, match="interpolation"):
        percentile(x, 0.5, interpolation="cubic")


def test_rmsnorm_matches_torch_rmsnorm_with_gradients():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    ours = RMSNorm(16).double()
    ref = nn.RMSNorm(16, eps=1e-6).double()
    with torch.no_grad():
        w = torch.rand(16, dtype=torch.float64, generator=gen) + 0.5
        ours.weight.copy_(w)
        ref.weight.copy_(w)
    y1, y2 = ours(x), ref(x)
    torch.testing.assert_close(y1, y2)
    g = torch.randn_like(y1)
    torch.testing.assert_close(torch.autograd.grad(y1, x, g)[0], torch.autograd.grad(y2, x, g)[0])
    # no centering: a shifted input keeps a non-zero mean
    with torch.no_grad():
        assert float(ours(x + 3.0).mean()) > 0.5


def test_percentile_layernorm_sets_fraction_negative_and_matches_formula():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(32, 101, dtype=torch.float64, generator=gen) * 2 + 0.7
    x.requires_grad_(True)
    norm = PercentileLayerNorm(101, q=0.8).double()
    y = norm(x)
    # (x - Q(q)) / sqrt(var + eps): exactly 80 of 101 entries per row fall below zero
    assert ((y < 0).sum(-1) == 80).all()
    ref = (x - torch.quantile(x, 0.8, dim=-1, keepdim=True)) / torch.sqrt(
        x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    torch.testing.assert_close(y, ref)
    g = torch.randn_like(y)
    torch.testing.assert_close(torch.autograd.grad(y, x, g)[0], torch.autograd.grad(ref, x, g)[0])


def test_percentile_batchnorm_gradcheck_and_channel_fraction():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 2, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    norm = PercentileBatchNorm(3, q=0.3).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5, generator=gen)
        norm.bias.uniform_(-0.1, 0.1, generator=gen)
    # Finite differences agree away from ties (piecewise linear in the selected element).
    assert torch.autograd.gradcheck(lambda t: PercentileBatchNorm(3, q=0.3).double()(t), (x,))
    norm.bias.data.zero_()
    y = norm(x)
    frac = (y < 0).double().mean(dim=(0, 2, 3))
    # 24 values per channel, q = 0.3: rank 6.9 -> 7 values strictly below the percentile
    torch.testing.assert_close(frac, torch.full((3,), 7 / 24, dtype=torch.float64), atol=1e-12, rtol=0)


def test_batch_flavour_at_median_with_symmetric_data_is_batchnorm_like_and_eval_uses_running():
    gen = torch.Generator().manual_seed(4)
    base = torch.randn(64, 6, generator=gen)
    x = torch.cat([base, -base]) * 1.5 + 2.0  # symmetric per channel: median == mean
    ours = PercentileBatchNorm(6, q=0.5, momentum=0.1)
    ref = nn.BatchNorm1d(6, momentum=0.1)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.running_var, ref.running_var)
    torch.testing.assert_close(ours.running_center, ref.running_mean, atol=1e-6, rtol=1e-6)
    ours.eval()
    ref.eval()
    probe = torch.randn(5, 6, generator=gen)
    torch.testing.assert_close(ours(probe), ref(probe), atol=1e-5, rtol=1e-5)


def test_accumulation_stop_freezes_statistics_and_stops_computing_them():
    gen = torch.Generator().manual_seed(5)
    norm = PercentileLayerNorm(16, q=0.7, freeze_after=3, momentum=0.5)
    for _ in range(3):
        norm(torch.randn(8, 4, 16, generator=gen) + 1.0)
    assert norm.frozen and norm.stats_computed == 3 and int(norm.num_batches_tracked) == 3
    center, var = norm.running_center.clone(), norm.running_var.clone()
    assert center.shape == (4, 1)  # one running value per token position
    x = (torch.randn(8, 4, 16, generator=gen) * 3 - 5).requires_grad_(True)
    y = norm(x)
    assert norm.stats_computed == 3  # nothing computed any more
    torch.testing.assert_close(norm.running_center, center)
    torch.testing.assert_close(y, (x - center) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias)
    # gradients reach the input and the affine parameters, not the frozen statistics
    y.sum().backward()
    assert x.grad is not None and norm.weight.grad is not None
    # the same holds in the batch flavour
    bn = PercentileBatchNorm(4, freeze_after=2)
    for _ in range(4):
        bn(torch.randn(8, 4, generator=gen))
    assert bn.stats_computed == 2 and int(bn.num_batches_tracked) == 2


def test_layernorm_flavour_state_dict_round_trip():
    a = PercentileLayerNorm(8, freeze_after=1)
    a(torch.randn(3, 5, 8))
    b = PercentileLayerNorm(8, freeze_after=1)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(a(x), b(x))


@pytest.mark.parametrize("name,shape,channels_first", [
    ("none", (4, 8), False), ("rmsnorm", (4, 3, 8), False), ("layernorm", (4, 8), False),
    ("batchnorm", (4, 3, 8), False), ("percentile", (4, 8), False),
    ("batchnorm", (4, 8, 5, 5), True), ("layernorm", (4, 8, 5, 5), True),
    ("percentile:q=0.9", (4, 8, 5, 5), True), ("percentile-layernorm:q=0.2", (4, 8, 5, 5), True),
])
def test_make_norm_shapes_and_backward(name, shape, channels_first):
    norm = make_norm(name, 8, channels_first=channels_first)
    x = torch.randn(shape, requires_grad=True)
    y = norm(x)
    assert y.shape == x.shape
    y.square().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_make_norm_layernorm_is_torch_layernorm_over_channels():
    x = torch.randn(2, 8, 3, 3)
    norm = make_norm("layernorm", 8, channels_first=True)
    ref = nn.functional.layer_norm(x.movedim(1, -1), (8,)).movedim(-1, 1)
    torch.testing.assert_close(norm(x), ref)


def test_make_norm_options_and_errors():
    norm = make_norm("percentile:q=0.25,freeze_after=7", 4)
    assert isinstance(norm, PercentileLayerNorm) and norm.q == 0.25 and norm.freeze_after == 7
    assert make_norm("percentile", 4, q=0.6).q == 0.6
    assert parse_norm("RMSNorm") == ("rmsnorm", {})
    with pytest.raises(ValueError, match="did you mean layernorm"):
        make_norm("layrnorm", 4)
    with pytest.raises(ValueError, match="freeze_after"):
        make_norm("percentile:freez_after=3", 4)
    with pytest.raises(ValueError, match="only apply to percentile"):
        make_norm("layernorm:q=0.3", 4)
    with pytest.raises(ValueError, match="q must be"):
        make_norm("percentile:q=1.5", 4)


@pytest.mark.parametrize("flavour,shape,q", [("layer", (3, 4, 9), 0.3), ("layer", (5, 6), 1.0),
                                             ("batch", (5, 3, 2, 3), 0.5), ("batch", (7, 4), 0.3)])
def test_fused_backward_matches_autograd_of_quantile_formula(flavour, shape, q):
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(shape, dtype=torch.float64, generator=gen, requires_grad=True)
    c = shape[-1] if flavour == "layer" else shape[1]
    norm = (PercentileLayerNorm if flavour == "layer" else PercentileBatchNorm)(c, q=q).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5, generator=gen)
        norm.bias.uniform_(-0.5, 0.5, generator=gen)
    if flavour == "layer":
        center = torch.quantile(x, q, dim=-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        ref = (x - center) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias
    else:
        dims = (0, *range(2, x.dim()))
        bshape = [1, c] + [1] * (x.dim() - 2)
        center = torch.quantile(_flatten_reduce(x, dims), q, dim=-1).view(bshape)
        var = x.var(dims, unbiased=False, keepdim=True)
        ref = (x - center) / torch.sqrt(var + 1e-5) * norm.weight.view(bshape) + norm.bias.view(bshape)
    y = norm(x)
    torch.testing.assert_close(y, ref)
    g = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    ours = torch.autograd.grad(y, (x, norm.weight, norm.bias), g)
    theirs = torch.autograd.grad(ref, (x, norm.weight, norm.bias), g)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(lambda t: norm(t), (x,))


@pytest.mark.parametrize("flavour,shape", [("layer", (4, 3, 11)), ("batch", (3, 4, 5, 2))])
@pytest.mark.parametrize("affine,bias", [(False, False), (True, False)])
def test_fused_backward_without_bias_or_affine_matches_autograd(flavour, shape, affine, bias):
    # the backward's fused sums take separate branches when weight or bias is missing
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(shape, dtype=torch.float64, generator=gen, requires_grad=True)
    c = shape[-1] if flavour == "layer" else shape[1]
    cls = PercentileLayerNorm if flavour == "layer" else PercentileBatchNorm
    norm = cls(c, q=0.65, affine=affine, bias=bias).double()
    dims = (-1,) if flavour == "layer" else (0, *range(2, x.dim()))
    bshape = [-1] if flavour == "layer" else [1, c] + [1] * (x.dim() - 2)
    flat = x if flavour == "layer" else _flatten_reduce(x, dims)
    center = torch.quantile(flat, 0.65, dim=-1, keepdim=flavour == "layer")
    center = center if flavour == "layer" else center.view(bshape)
    ref = (x - center) / torch.sqrt(x.var(dims, unbiased=False, keepdim=True) + 1e-5)
    params = [x]
    if affine:
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5, generator=gen)
        ref = ref * norm.weight.view(bshape)
        params.append(norm.weight)
    y = norm(x)
    torch.testing.assert_close(y, ref)
    g = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    for a, b in zip(torch.autograd.grad(y, params, g), torch.autograd.grad(ref, params, g)):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(lambda t: norm(t), (x,))


@pytest.mark.parametrize("flavour,shape", [("layer", (6, 5)), ("layer", (3, 4, 5)), ("batch", (6, 5)),
                                           ("batch", (3, 5, 2, 2))])
def test_frozen_and_eval_paths_match_the_affine_formula_with_gradients(flavour, shape):
    gen = torch.Generator().manual_seed(12)
    c = 5
    norm = (PercentileLayerNorm if flavour == "layer" else PercentileBatchNorm)(c, freeze_after=2).double()
    for _ in range(2):
        norm(torch.randn(shape, dtype=torch.float64, generator=gen) + 0.5)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5, generator=gen)
        norm.bias.uniform_(-0.5, 0.5, generator=gen)
    x = torch.randn(shape, dtype=torch.float64, generator=gen, requires_grad=True)
    y = norm(x)
    if flavour == "layer":
        center, var, bshape = norm.running_center, norm.running_var, [-1]
    else:
        bshape = [1, c] + [1] * (len(shape) - 2)
        center, var = norm.running_center.view(bshape), norm.running_var.view(bshape)
    ref = (x - center) / torch.sqrt(var + norm.eps) * norm.weight.view(bshape) + norm.bias.view(bshape)
    torch.testing.assert_close(y, ref)
    g = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    params = (x, norm.weight, norm.bias)
    for a, b in zip(torch.autograd.grad(y, params, g), torch.autograd.grad(ref, params, g)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("use_numpy", [True, False])
def test_both_selection_paths_give_the_order_statistics_with_ties(use_numpy):
    from actlab.nn.percentile import _select_neighbours

    gen = torch.Generator().manual_seed(13)
    flat = torch.randint(0, 4, (50, 9), generator=gen).double()  # many ties
    for lower in range(8):
        below, bi, above, ai = _select_neighbours(flat, lower, True, use_numpy=use_numpy)
        ordered = flat.sort(-1).values
        torch.testing.assert_close(below[:, 0], ordered[:, lower])
        torch.testing.assert_close(above[:, 0], ordered[:, lower + 1])
        torch.testing.assert_close(flat.gather(1, bi), below)
        torch.testing.assert_close(flat.gather(1, ai), above)
        if use_numpy:  # two different elements share the gradient, as in torch.quantile
            assert (bi != ai).all()
        else:  # a tied upper neighbour may reuse the lower one's element
            assert ((bi != ai) | (below == above)).all()


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("channels_first", [False, True])
def test_percentile_norms_under_bfloat16_autocast_compute_in_float32(frozen, channels_first):
    # Autocast runs LayerNorm and BatchNorm in float32; the percentile norms do the same: the
    # output and gradients equal the norm applied outside autocast to the bfloat16 input
    # widened to float32 (their backward once met bfloat16 inputs and float32 weights).
    from actlab.nn.norms import make_norm

    spec = "percentile:q=0.3" + (":freeze_after=1" if frozen else "")
    shape = (4, 8, 3, 3) if channels_first else (4, 5, 8)
    a = make_norm(spec, 8, channels_first=channels_first)
    b = make_norm(spec, 8, channels_first=channels_first)
    g = torch.Generator().manual_seed(0)
    for _step in range(2):  # the frozen ones freeze after the first step
        x = torch.randn(*shape, generator=g).to(torch.bfloat16)
        xa = x.clone().requires_grad_()
        xb = x.float().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ya = a(xa)
        yb = b(xb)
        assert ya.dtype == torch.float32
        torch.testing.assert_close(ya, yb, rtol=0, atol=0)
        weights = torch.randn(yb.shape, generator=g)
        (ya * weights).sum().backward()
        (yb * weights).sum().backward()
        torch.testing.assert_close(xa.grad.float(), xb.grad.bfloat16().float())
        torch.testing.assert_close(a.weight.grad, b.weight.grad, rtol=0, atol=0)
    assert a.running_center.dtype == torch.float32
    assert (a.stats_computed, b.stats_computed) == ((1, 1) if frozen else (2, 2))
