"""Top-K by threshold: the running/frozen threshold, the Gaussian forms, and the one grammar
of running statistics shared with the norms."""

from __future__ import annotations

import copy
import warnings
from statistics import NormalDist

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

import actlab
from actlab.activations.running import check_freeze_after, check_momentum, default_momentum
from actlab.activations.sparse import kept_count, topk_sparsify
from actlab.errors import SpecError
from actlab.nn.norms import PercentileLayerNorm, parse_norm


def _warm(module: torch.nn.Module, batches: list[torch.Tensor]) -> None:
    for b in batches:
        module(b)


def _stationary(
    n_batches: int, rows: int = 64, cols: int = 256, seed: int = 0
) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(rows, cols, generator=gen) for _ in range(n_batches)]


# ----------------------------------------------------------------------- one grammar
def test_running_options_share_range_and_default() -> None:
    assert check_momentum("0.5") == 0.5 and check_freeze_after("7") == 7
    for bad in (0, 1.5, float("nan"), "x"):
        with pytest.raises(ValueError, match="momentum"):
            check_momentum(bad)
    for bad in (0, -1, 2.5, "2.5", True):
        with pytest.raises(ValueError, match="freeze_after"):
            check_freeze_after(bad)
    # the paper's pair: gamma = 0.9999 with T_warm = 50,000 ("Bug or Feature²" §7)
    assert 1 - default_momentum(50_000) == pytest.approx(0.9999, abs=1e-12)
    assert default_momentum(2) == 1.0
    # the norms read both options with the same range and default
    with pytest.raises(ValueError, match="freeze_after"):
        parse_norm("percentile:freeze_after=0")
    with pytest.raises(ValueError, match="momentum"):
        parse_norm("percentile:momentum=1.5")
    with pytest.raises(SpecError, match="freeze_after"):
        actlab.activation("gelu:topk=0.1:freeze_after=0")
    assert PercentileLayerNorm(8, freeze_after=500).momentum == default_momentum(500)
    assert PercentileLayerNorm(8).momentum == 0.1  # BatchNorm's without Accumulation Stop


@pytest.mark.parametrize(
    "spec, why",
    [
        ("gelu:freeze_after=5", "running statistic"),
        ("gelu:momentum=0.1", "running statistic"),
        ("gelu:topk=0.1:gaussian:freeze_after=5", "running statistic"),
        ("gelu:gaussian", "needs 'topk=K'"),
        ("gelu:topk=0.1:gaussian:gaussian_shift", "exclude each other"),
        ("gelu:topk=0.1:gausian", "did you mean 'gaussian'"),
    ],
)
def test_bad_combinations_raise_clear_spec_errors(spec: str, why: str) -> None:
    with pytest.raises(SpecError, match=why):
        actlab.activation(spec)


def test_canonical_spelling() -> None:
    assert (
        actlab.activation("gelu:freeze_after=500:topk=0.1").spec == "gelu:topk=0.1:freeze_after=500"
    )
    assert actlab.activation("gelu:gaussian:topk=0.1").spec == "gelu:topk=0.1:gaussian"


# --------------------------------------------------------------------- frozen threshold
def test_frozen_keeps_k_within_the_row_spread_of_the_kth_value() -> None:
    k_frac, n = 0.1, 256
    module = actlab.activation(f"gelu:topk={k_frac}:freeze_after=20")
    train = _stationary(20)
    _warm(module, train)
    assert module.topk_running.frozen
    x = _stationary(1, seed=1)[0]
    y = F.gelu(x)
    k = kept_count(k_frac, n)
    kth = y.topk(k, dim=-1).values[:, -1]
    out = module(x)
    kept = (out != 0).double().mean(-1)
    # a row keeps K exactly at its own k-th value; the frozen cut is one number, so a row's
    # kept share moves by the share of its entries between its k-th value and the cut:
    # bounded by the rows' k-th values within one sd of their mean
    lo, hi = kth.mean() - kth.std(), kth.mean() + kth.std()
    share_lo = (y > hi).double().mean(-1).mean()
    share_hi = (y > lo).double().mean(-1).mean()
    assert share_lo <= kept.mean() <= share_hi
    # per row: K +- the spread, in kept-share units: a row whose k-th value lies within two
    # sds of the cut keeps between its shares above kth + 2 sd and above kth - 2 sd; by
    # Chebyshev at least 3/4 of the rows have their k-th value that close to the mean (the
    # cut is the mean over training batches of the same distribution)
    spread = 2 * kth.std()
    row_lo = (y > (kth + spread)[:, None]).double().mean(-1)
    row_hi = (y > (kth - spread)[:, None]).double().mean(-1)
    within = ((row_lo <= kept) & (kept <= row_hi)).double().mean()
    assert within >= 0.75
    assert abs(float(kept.mean()) - k_frac) <= float(share_hi - share_lo) / 2
    # share of entries where the frozen mask and exact Top-K differ, reported and bounded by
    # the entries lying between each row's k-th value and the frozen cut
    exact = topk_sparsify(y, k_frac) != 0
    differ = float(((out != 0) != exact).double().mean())
    thr = module.topk_running.threshold
    between = float(
        ((y - thr) * (y - kth[:, None]) < 0).double().mean() + (y == kth[:, None]).double().mean()
    )
    print(f"share of entries differing from exact Top-K: {differ:.4f} (bound {between:.4f})")
    assert differ <= between + 1e-12


def test_stationary_input_kept_fraction_converges_to_k() -> None:
    k_frac = 0.1
    module = actlab.activation(f"gelu:topk={k_frac}:freeze_after=200")
    _warm(module, _stationary(200, rows=32))
    test = torch.cat(_stationary(20, rows=32, seed=5))
    kept = float((module(test) != 0).double().mean())
    # the pooled kept share of 640 x 256 entries: its sampling sd is sqrt(K(1-K)/N) ~ 0.0007;
    # the EMA over the last ~40 steps averages 40 x 32 rows' k-th values, their mean's sd
    # shifts the share by far less than 0.01
    assert kept == pytest.approx(k_frac, abs=0.01)


def test_warmup_is_exact_and_eval_does_not_update() -> None:
    module = actlab.activation("gelu:topk=0.1:freeze_after=3")
    x = _stationary(1)[0]
    assert torch.equal(module(x), topk_sparsify(F.gelu(x), 0.1))
    assert int(module.topk_running.steps) == 1
    expected = F.gelu(x).topk(kept_count(0.1, 256), dim=-1).values[:, -1].mean()
    assert float(module.topk_running.threshold) == pytest.approx(float(expected), rel=1e-6)
    module.eval()
    before = module.topk_running.threshold.clone()
    out = module(x)
    assert int(module.topk_running.steps) == 1 and torch.equal(
        module.topk_running.threshold, before
    )
    assert torch.equal(out, torch.where(F.gelu(x) > before, F.gelu(x), 0.0))


def test_ema_with_momentum() -> None:
    module = actlab.activation("identity:topk=0.5:momentum=0.25:freeze_after=3")
    values = [torch.tensor([[1.0, 3.0]]), torch.tensor([[1.0, 7.0]]), torch.tensor([[1.0, 11.0]])]
    expected = [3.0, 4.0, 5.75]  # first copies, then (1 - m) r + m v
    for v, e in zip(values, expected):
        module(v)
        assert float(module.topk_running.threshold) == pytest.approx(e)
    assert module.topk_running.frozen


def test_state_dict_to_and_torch_func() -> None:
    module = actlab.activation("gelu:topk=0.1:freeze_after=2")
    _warm(module, _stationary(2))
    state = module.state_dict()
    assert set(state) == {"topk_running.threshold", "topk_running.steps"}
    fresh = actlab.activation("gelu:topk=0.1:freeze_after=2")
    fresh.load_state_dict(state)
    x = _stationary(1, seed=3)[0]
    assert fresh.topk_running.frozen and torch.equal(fresh(x), module(x))
    double = copy.deepcopy(module).double()
    assert double.topk_running.threshold.dtype == torch.float64
    assert torch.equal(double(x.double()), module(x.double()))
    # functional_call with other buffers, and vmap over stacked states of the frozen path
    other = {k: v.clone() for k, v in module.named_buffers()}
    other["topk_running.threshold"] += 0.5
    shifted = functional_call(module, other, (x,))
    assert torch.equal(
        shifted, torch.where(F.gelu(x) > other["topk_running.threshold"], F.gelu(x), 0.0)
    )
    members = [copy.deepcopy(module) for _ in range(3)]
    for i, m in enumerate(members):
        m.topk_running.threshold += 0.1 * i
    _, buffers = stack_module_state(members)
    batched = vmap(lambda b, xx: functional_call(module, b, (xx,)))(buffers, x.expand(3, *x.shape))
    for i, m in enumerate(members):  # the same mask; GELU under vmap differs by an ulp
        eager = m(x)
        assert torch.equal(batched[i] != 0, eager != 0)
        assert torch.allclose(batched[i], eager, rtol=1e-6, atol=0)


# ----------------------------------------------------------------------------- Gaussian
def test_gaussian_threshold_against_its_formula() -> None:
    x = _stationary(1)[0].double()
    for spec in (
        "gelu:topk=0.2:gaussian",
        "silu:topk=0.2:gaussian",
        "relu2:clip=3:topk=0.2:gaussian",
    ):
        module = actlab.activation(spec)
        f, _ = actlab.activations.resolve_elementwise(module.parsed.canonical.split(":topk")[0])
        y = f(x)
        z = NormalDist().inv_cdf(1 - 0.2)
        for row_y, row_out in zip(y, module(x)):
            values = row_y.tolist()
            mean = sum(values) / len(values)
            sd = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
            cutoff = mean + sd * z
            expected = torch.tensor([v if v > cutoff else 0.0 for v in values], dtype=torch.float64)
            assert torch.allclose(row_out, expected, atol=1e-12)


def test_gaussian_shift_is_gemma3n_form() -> None:
    x = _stationary(1)[0].double()
    module = actlab.activation("gelu:topk=0.05:gaussian_shift")
    # transformers' Gemma3nTextMLP._gaussian_topk, written out: p = 1 - K of the gate rows
    multiplier = torch.distributions.Normal(0, 1).icdf(torch.tensor(0.95, dtype=torch.float64))
    cutoff = x.mean(-1, keepdim=True) + x.std(-1, keepdim=True, unbiased=False) * multiplier
    assert torch.allclose(module(x), F.gelu(F.relu(x - cutoff)), atol=1e-12)


# ---------------------------------------------------------------------------- gradients
def _frozen(spec: str) -> torch.nn.Module:
    module = actlab.activation(spec)
    _warm(module, [torch.randn(8, 12, dtype=torch.float64)])
    return module.double()


@pytest.mark.parametrize(
    "spec",
    [
        "gelu:topk=0.25:freeze_after=1",
        "silu:topk=0.25:freeze_after=1",
        "gelu:topk=0.25:gaussian",
        "leaky_relu:topk=0.3:gaussian",
        "gelu:topk=0.25:gaussian_shift",
        "gelu:shift=0.1:topk=0.25:freeze_after=1",
    ],
)
def test_gradients_match_autograd_of_reference(spec: str) -> None:
    module = _frozen(spec)
    x = torch.randn(8, 12, dtype=torch.float64, requires_grad=True)
    g = torch.randn(8, 12, dtype=torch.float64)
    (ours,) = torch.autograd.grad(module(x), x, g)
    # reference: plain autograd of the formula, mask taken from the forward
    parsed = module.parsed
    f, _ = actlab.activations.resolve_elementwise(parsed.canonical.split(":topk")[0])
    if module.topk_rule == "gaussian_shift":
        from actlab.activations.threshold import gaussian_multiplier

        xr = x
        cut = xr.mean(-1, keepdim=True) + xr.std(
            -1, keepdim=True, unbiased=False
        ) * gaussian_multiplier(0.25)
        ref = f(F.relu(xr - cut))
    else:
        y = f(x)
        if module.topk_rule == "running":
            cut = module.topk_running.threshold
        else:
            yd = y.detach()
            cut = yd.mean(-1, keepdim=True) + yd.std(
                -1, keepdim=True, unbiased=False
            ) * NormalDist().inv_cdf(1 - module.topk)
        ref = torch.where(y > cut, y, 0.0)
    (theirs,) = torch.autograd.grad(ref, x, g)
    assert torch.allclose(ours, theirs, atol=1e-10)
    # finite differences (away from the mask's edges: masks are piecewise constant)
    assert torch.autograd.gradcheck(module, (x,), eps=1e-7, atol=1e-5)


def test_frozen_negative_threshold_path() -> None:
    # K large: the k-th GELU value is negative, the boolean-mask path is taken
    module = _frozen("gelu:topk=0.9:freeze_after=1")
    assert float(module.topk_running.threshold) < 0
    x = torch.randn(8, 12, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,), eps=1e-7, atol=1e-5)


# ------------------------------------------------------------------------ native kernels
@pytest.fixture()
def native_kernels():
    from actlab.activations import native

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if native.build() is None:
            pytest.skip(f"native kernels cannot be built here: {native.build_error()}")
    yield native
    native.enable(False)


@pytest.mark.parametrize("name", ["gelu", "silu", "relu", "leaky_relu"])
@pytest.mark.parametrize("fraction", [0.2, 0.9])  # cutoffs >= 0, and < 0 in some rows
def test_native_gaussian_matches_aten(native_kernels, name: str, fraction: float) -> None:
    from actlab.activations.fused import fused_kernel
    from actlab.activations.threshold import fused_gaussian_mask

    kernel = fused_kernel(name, {})
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(16, 37, generator=gen, dtype=dtype, requires_grad=True)
        g = torch.randn(16, 37, generator=gen, dtype=dtype)
        outs = []
        for use in (False, True):
            native_kernels.enable(use)
            y = fused_gaussian_mask(x, kernel, fraction)
            outs.append((y, *torch.autograd.grad(y, x, g)))
        (a, ga), (b, gb) = outs
        tol = 1e-5 if dtype == torch.float32 else 1e-12
        assert torch.equal(a != 0, b != 0)
        assert torch.allclose(a, b, atol=tol) and torch.allclose(ga, gb, atol=tol)
    native_kernels.enable(True)
    assert torch.autograd.gradcheck(
        lambda v: fused_gaussian_mask(v, kernel, fraction), (x,), eps=1e-7, atol=1e-5
    )
