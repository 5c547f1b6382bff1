"""The sparse decode kernel (actlab.nn.sparse_kernel) against dense products.

Exactness: with small-integer inputs and weights every partial sum is an integer below 2^24,
so float32 sums are exact in any order, and the kernel must equal the dense product bit for
bit (bfloat16 holds these integers exactly too). Random floats are compared with a float64
product within float32 rounding of the terms' absolute sum.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from actlab.activations import native
from actlab.nn import sparse_kernel
from actlab.nn.ffn import FFN, GatedFFN
from actlab.nn.sparse_calibration import SiteThresholds
from actlab.nn.sparse_ffn import sparse_ffn
from actlab.nn.sparse_kernel import active_inputs, sparse_linear, sparse_rows

SPARSITIES = (0.0, 0.3, 0.5, 0.7, 0.85, 0.95, 1.0)
TOKENS = (1, 2, 5, 16)


@pytest.fixture(scope="module")
def kernel():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if sparse_kernel.extension() is None:
            pytest.skip("the sparse decode kernel cannot be built here: "
                        f"{native.build_error() or 'no C++ compiler'}")
    return [isa for isa in sparse_kernel.ISAS if sparse_kernel.isa_supported(isa)]


def _ints(*shape: int, gen: torch.Generator, low: int = -3, high: int = 4) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=gen).float()


def _sparse_ints(tokens: int, n: int, sparsity: float, gen: torch.Generator) -> torch.Tensor:
    """Small non-zero integers, each entry zero with probability ``sparsity`` (i.i.d.)."""
    values = torch.randint(1, 4, (tokens, n), generator=gen).float()
    signs = torch.randint(0, 2, (tokens, n), generator=gen).float() * 2 - 1
    return values * signs * (torch.rand(tokens, n, generator=gen) >= sparsity)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", TOKENS)
def test_cols_equals_dense_exactly_at_every_sparsity(kernel, dtype, tokens):
    """in=260 and out=2100 are not multiples of any vector width (tails run); 16 tokens
    split the output into several column blocks (2048 columns at most each)."""
    gen = torch.Generator().manual_seed(tokens)
    wt = _ints(260, 2100, gen=gen)
    bias = _ints(2100, gen=gen)
    for sparsity in SPARSITIES:
        x = _sparse_ints(tokens, 260, sparsity, gen)
        dense = x @ wt + bias
        for isa in kernel:
            out = sparse_linear(x, wt.to(dtype), bias, dense_above=1.0, backend="kernel",
                                isa=isa)
            assert out.dtype == torch.float32
            assert torch.equal(out, dense), (isa, sparsity)


def test_all_zero_and_all_active_inputs(kernel):
    gen = torch.Generator().manual_seed(1)
    wt, bias = _ints(70, 90, gen=gen), _ints(90, gen=gen)
    for isa in kernel:
        zero = torch.zeros(3, 70)
        idx, xc = active_inputs(zero, backend="kernel")
        assert idx.numel() == 0 and xc.shape == (3, 0)
        out = sparse_linear(zero, wt, bias, backend="kernel", isa=isa)
        assert torch.equal(out, bias.expand(3, 90))
        assert torch.equal(sparse_linear(zero, wt, None, backend="kernel", isa=isa),
                           torch.zeros(3, 90))
        full = _sparse_ints(3, 70, 0.0, gen)
        assert active_inputs(full, backend="kernel")[0].tolist() == list(range(70))
        out = sparse_linear(full, wt, bias, dense_above=1.0, backend="kernel", isa=isa)
        assert torch.equal(out, full @ wt + bias)


def test_one_active_input_is_one_row(kernel):
    gen = torch.Generator().manual_seed(2)
    wt = torch.randn(50, 33, generator=gen)
    x = torch.zeros(2, 50)
    x[1, 17] = 2.5
    for isa in kernel:
        out = sparse_linear(x, wt, backend="kernel", isa=isa)
        assert torch.equal(out[0], torch.zeros(33))
        assert torch.equal(out[1], 2.5 * wt[17])  # one product, rounded once either way


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_random_floats_within_rounding(kernel, dtype):
    gen = torch.Generator().manual_seed(3)
    wt = torch.randn(333, 401, generator=gen).to(dtype)
    x = torch.randn(7, 333, generator=gen) * (torch.rand(7, 333, generator=gen) > 0.6)
    reference = x.double() @ wt.double()
    # float32 summation of k terms: error at most about k * 2^-24 * sum |terms|
    bound = 333 * 2.0**-24 * (x.abs().double() @ wt.abs().double())
    for isa in kernel:
        out = sparse_linear(x, wt, dense_above=1.0, backend="kernel", isa=isa).double()
        assert ((out - reference).abs() <= bound).all(), isa


def test_threshold_masks_small_magnitudes_and_keeps_nan(kernel):
    x = torch.tensor([[0.5, -0.2, 0.3, 0.0, -0.31],
                      [0.1, 0.29, -0.3, float("nan"), 0.05]])
    idx, xc = active_inputs(x, 0.3, backend="kernel")
    # |x| <= 0.3 counts as zero; NaN is never <= anything, so it stays active
    assert idx.tolist() == [0, 3, 4]
    assert torch.equal(xc[0], torch.tensor([0.5, 0.0, -0.31]))
    assert xc[1, 0] == 0 and xc[1, 1].isnan() and xc[1, 2] == 0
    wt = torch.ones(5, 4)
    out = sparse_linear(x, wt, threshold=0.3, backend="kernel")
    assert torch.allclose(out[0], torch.full((4,), 0.5 - 0.31))
    assert out[1].isnan().all()  # as the dense product propagates it


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 3, 4, 9])
def test_rows_equals_dense_rows_exactly(kernel, dtype, tokens):
    gen = torch.Generator().manual_seed(tokens)
    w = _ints(300, 263, gen=gen)
    x = _ints(tokens, 263, gen=gen)
    idx = torch.tensor([5, 0, 299, 17, 17, 100, 101])  # any order, repeats allowed
    dense = x @ w.t()
    for isa in kernel:
        out = sparse_rows(x, w.to(dtype), idx, backend="kernel", isa=isa)
        assert torch.equal(out, dense[:, idx]), isa
    bias = _ints(300, gen=gen)
    assert torch.equal(sparse_rows(x, w, idx, bias, backend="kernel"),
                       F.linear(x, w, bias)[:, idx])


def test_one_and_two_threads_give_identical_results(kernel):
    """Threads take disjoint column blocks, each column summed in the same order."""
    gen = torch.Generator().manual_seed(4)
    wt = torch.randn(512, 3000, generator=gen)
    x = torch.randn(4, 512, generator=gen) * (torch.rand(4, 512, generator=gen) > 0.5)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = sparse_linear(x, wt, dense_above=1.0, backend="kernel")
        torch.set_num_threads(2)
        two = sparse_linear(x, wt, dense_above=1.0, backend="kernel")
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


def _which_ran(x: torch.Tensor, w: torch.Tensor, threshold: float, **kw) -> str:
    """Which product :func:`sparse_linear` ran: the kernel reads ``weight_t``, the dense
    product ``weight``; giving ``weight = 2 W`` beside ``weight_t = W^T`` tells them apart."""
    masked = torch.where(x.abs() <= threshold, 0.0, x)
    out = sparse_linear(x, w.t().contiguous(), threshold=threshold, weight=2 * w, **kw)
    if torch.allclose(out, F.linear(masked, 2 * w), atol=1e-5):
        return "dense"
    assert torch.allclose(out, F.linear(masked, w), atol=1e-5)
    return "kernel"


def test_dense_above_break_even_runs_torch(kernel):
    """Above the active share ``dense_above`` torch's dense product runs, on the masked input
    (its result equals F.linear of the masked input), and the kernel below it."""
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(40, 64, generator=gen)
    x = torch.randn(2, 64, generator=gen)  # |x| > 0.5 for about 62 % of entries, 85 % union
    assert _which_ran(x, w, 0.5, dense_above=0.2, backend="kernel") == "dense"
    assert _which_ran(x, w, 0.5, dense_above=1.0, backend="kernel") == "kernel"
    assert _which_ran(x.bfloat16().float(), w, 0.0, dense_above=0.0) == "dense"


def test_small_matrix_gate_decides_by_bytes_and_tokens(monkeypatch):
    """dense_above: DENSE_ABOVE first; a matrix of at most SMALL_MATRIX_BYTES takes
    BREAK_EVEN_SMALL's share for its tokens per call (1, or 2 and more), a larger one
    BREAK_EVEN's by dtype."""
    monkeypatch.setattr(sparse_kernel, "SMALL_MATRIX_BYTES", 1000)
    monkeypatch.setattr(sparse_kernel, "BREAK_EVEN_SMALL", {1: 0.25, 2: 0.5})
    monkeypatch.setattr(sparse_kernel, "BREAK_EVEN", {(torch.float32, 1): 0.75,
                                                      (torch.float32, 2): 0.875})
    f32 = torch.float32
    assert sparse_kernel.dense_above(f32, 1, 1000) == 0.25
    assert sparse_kernel.dense_above(f32, 8, 1000) == 0.5
    assert sparse_kernel.dense_above(f32, 1, 1001) == 0.75
    assert sparse_kernel.dense_above(f32, 8, 1001) == 0.875
    assert sparse_kernel.dense_above(f32, 8) == 0.875  # bytes unknown: the large table
    assert sparse_kernel.dense_above(torch.bfloat16, 1, 10**9) == 1.0  # not in the table
    monkeypatch.setattr(sparse_kernel, "DENSE_ABOVE", 2.0)
    assert sparse_kernel.dense_above(f32, 1, 1000) == 2.0


def test_small_matrix_gate_switches_the_product(kernel, monkeypatch):
    """sparse_linear, and the swapped TEAL forward's lean path, run the dense product for a
    small matrix whose active share is above BREAK_EVEN_SMALL, the kernel otherwise."""
    gen = torch.Generator().manual_seed(6)
    w = torch.randn(40, 64, generator=gen)  # 10 KiB
    x = torch.randn(1, 64, generator=gen)
    share = float((x.abs() > 0.5).float().mean())
    monkeypatch.setattr(sparse_kernel, "SMALL_MATRIX_BYTES", 40 * 64 * 4)
    monkeypatch.setattr(sparse_kernel, "BREAK_EVEN_SMALL", {1: share - 0.05, 2: 1.0})
    assert _which_ran(x, w, 0.5) == "dense"
    assert _which_ran(x.expand(3, 64), w, 0.5) == "kernel"  # 3 tokens: the other entry
    monkeypatch.setattr(sparse_kernel, "BREAK_EVEN_SMALL", {1: share + 0.05, 2: 1.0})
    assert _which_ran(x, w, 0.5) == "kernel"
    monkeypatch.setattr(sparse_kernel, "SMALL_MATRIX_BYTES", 40 * 64 * 4 - 1)
    monkeypatch.setattr(sparse_kernel, "BREAK_EVEN_SMALL", {1: 0.0, 2: 0.0})
    assert _which_ran(x, w, 0.5) == "kernel"  # not small: BREAK_EVEN (float32: 1.0)
    out = sparse_kernel.project(x, w.t().contiguous(), 2 * w, None, 0.5)
    assert torch.allclose(out, F.linear(torch.where(x.abs() <= 0.5, 0.0, x), w), atol=1e-5)


def test_l2_cache_bytes_is_a_size():
    """The gate's cache size: a positive byte count (the default where sysfs has none)."""
    assert sparse_kernel.l2_cache_bytes() > 0
    assert sparse_kernel.SMALL_MATRIX_BYTES == sparse_kernel.l2_cache_bytes()


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("tokens", [1, 2, 8, 16])
def test_ffn_kernel_equals_dense_exactly(kernel, gated, tokens):
    """Activation form of a ReLU FFN with integer weights: the kernel's forward equals the
    dense module's exactly at every sparsity of the hidden layer (set by the up bias)."""
    gen = torch.Generator().manual_seed(10 + tokens)
    ffn = (GatedFFN(48, 96, "relu", bias=True) if gated else FFN(48, 96, "relu")).eval()
    with torch.no_grad():
        for p in ffn.parameters():
            p.copy_(_ints(*p.shape, gen=gen, low=-2, high=3))
        x = _ints(tokens, 48, gen=gen, low=-2, high=3)
        bias = ffn.gate_proj.bias if gated else ffn.up.bias
        for shift in (-1000.0, -6.0, -2.0, 0.0, 2.0, 1000.0):  # all zero ... all active
            bias.add_(shift)
            dense = ffn(x)
            assert torch.equal(sparse_ffn(ffn, x, method="kernel"), dense), shift
            bias.sub_(shift)


@pytest.mark.parametrize("gated", [False, True])
def test_ffn_teal_kernel_equals_masked_dense(kernel, gated):
    """TEAL form: the dense FFN on masked inputs (masks by hand, torch modules) is the
    reference, at every threshold, 1-16 tokens."""
    gen = torch.Generator().manual_seed(20)
    ffn = (GatedFFN(40, 72, "silu") if gated else FFN(40, 72, "gelu")).eval()
    for tokens in (1, 5, 16):
        x = torch.randn(tokens, 40, generator=gen)
        for t_in, t_down in ((0.0, 0.0), (0.5, 0.05), (1.0, 0.2), (10.0, 1.0)):
            with torch.no_grad():
                xm = torch.where(x.abs() <= t_in, 0.0, x)
                if gated:
                    h = ffn.act(ffn.gate_proj(xm)) * ffn.up(xm)
                else:
                    h = ffn.act(ffn.up(xm))
                reference = ffn.down(torch.where(h.abs() <= t_down, 0.0, h))
                for method in ("kernel", "union"):
                    out = sparse_ffn(ffn, x, method=method,
                                     thresholds=SiteThresholds(t_in, t_down))
                    assert (out - reference).abs().max() <= 1e-5, (method, t_in, t_down)


def test_bad_arguments_are_refused(kernel):
    x, wt = torch.randn(2, 8), torch.randn(8, 4)
    with pytest.raises(ValueError, match="did you mean 'avx512'"):
        sparse_linear(x, wt, backend="kernel", isa="avx51")
    with pytest.raises(ValueError, match="did you mean 'kernel'"):
        sparse_linear(x, wt, backend="kernal")
    with pytest.raises(ValueError, match=r"expected \(8, out\)"):
        sparse_linear(x, torch.randn(9, 4))
    with pytest.raises(RuntimeError, match="outside"):
        sparse_rows(x, torch.randn(4, 8), torch.tensor([4]), backend="kernel")
    with pytest.raises(ValueError, match="float32/bfloat16"):
        sparse_linear(x.double(), wt.double(), backend="kernel")


def test_without_a_compiler_the_torch_path_runs(monkeypatch):
    """No compiler: no build is tried, no warning, and every function runs its PyTorch twin
    with the same results; asking for the kernel says why it is missing."""
    monkeypatch.setattr(native, "_extensions", {})
    monkeypatch.setattr(native, "_build_errors", {})
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    assert sparse_kernel.compiler() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not sparse_kernel.available()
        gen = torch.Generator().manual_seed(6)
        wt = _ints(30, 20, gen=gen)
        x = _sparse_ints(3, 30, 0.7, gen)
        assert torch.equal(sparse_linear(x, wt), x @ wt)
        assert torch.equal(sparse_linear(x, wt, threshold=1.5),
                           torch.where(x.abs() <= 1.5, 0.0, x) @ wt)
        ffn = FFN(30, 20, "relu").eval()
        with torch.no_grad():
            assert (sparse_ffn(ffn, x) - ffn(x)).abs().max() <= 1e-5
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):
        sparse_linear(x, wt, backend="kernel")


def test_a_failed_build_warns_once_and_falls_back(monkeypatch):
    import torch.utils.cpp_extension as cpp

    def broken(**_kwargs):
        raise RuntimeError("compilation failed\nerror: immintrin.h not found")

    monkeypatch.setattr(native, "_extensions", {})
    monkeypatch.setattr(native, "_build_errors", {})
    monkeypatch.setattr(sparse_kernel, "compiler", lambda: "/usr/bin/c++")
    monkeypatch.setattr(cpp, "load", broken)
    with pytest.warns(RuntimeWarning, match="immintrin.h not found"):
        assert sparse_kernel.extension() is None
    x, wt = torch.randn(2, 6), torch.randn(6, 3)
    assert torch.allclose(sparse_linear(x, wt), x @ wt, atol=1e-6)
    with pytest.raises(RuntimeError, match="immintrin.h not found"):
        sparse_linear(x, wt, backend="kernel")


def test_summation_bound_is_tight_enough_to_catch_a_dropped_row():
    """The rounding bound used above is far below one term's size: a kernel that skipped an
    active input would fail it."""
    gen = torch.Generator().manual_seed(7)
    wt = torch.randn(333, 401, generator=gen)
    x = torch.randn(1, 333, generator=gen)
    bound = 333 * 2.0**-24 * (x.abs().double() @ wt.abs().double())
    dropped = x.clone()
    dropped[0, 100] = 0
    error = ((dropped.double() - x.double()) @ wt.double()).abs()
    assert (error > bound).float().mean() > 0.9
    assert math.isfinite(float(bound.max()))


@pytest.mark.slow
def test_benchmark_smoke_run(kernel):
    """benchmarks/sparse_decode.py on a small FFN shape: its JSON line carries the issue's
    keys and a row per form, sparsity and token count."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "sparse_decode.py"
    proc = subprocess.run([sys.executable, str(script), "--quick", "--shape", "64,96",
                           "--no-minilm", "--gpt-steps", "2", "--repeats", "1",
                           "--windows", "1"],
                          capture_output=True, text=True, timeout=300, check=True)
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("llama7b_s85_speedup", "llama7b_s50_speedup", "llama7b_s85_bandwidth_fraction"):
        assert figures[key] > 0, key
    forms = {(r["form"], r["sparsity"], r["tokens"]) for r in figures["llama7b"]}
    assert {("teal", 0.85, 1), ("activation", 0.85, 1), ("teal", 0.5, 8)} <= forms
    for row in figures["llama7b"]:
        # bound: dense bytes over the bytes of the active rows, >= 1 and 1 / (1 - s) at most
        assert 1.0 <= row["bound"] <= 1 / (1 - row["sparsity"]) + 0.5
    assert set(figures["quality"]["gpt"]) == {"dense_loss", "s0.4_loss", "s0.5_loss",
                                              "s0.7_loss", "s0.85_loss"}
