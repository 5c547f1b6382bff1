"""The compiled (one-pass, shifted) forward statistics equal the eager (two-pass) ones."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch

from actlab.probe import metrics as M

pytestmark = pytest.mark.xdist_group("processes")  # inductor's compile workers (conftest.py)

# mean, m2 of p and of a are computed differently; counts and extremes must agree exactly
_MOMENTS = [0, 1, 3, 4]
_EXACT = [2, 5, 6, 7, 8]


@functools.cache
def _compiled_forward_raw() -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.compile(M.forward_raw, backend="inductor", fullgraph=True)


def _inputs(offset: float, scale: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    p = offset + scale * torch.randn(257, 129, generator=gen, dtype=torch.float64)
    p[0, 0] = offset + 200 * scale  # an outlier where a cheap shift would look first
    p[1, :7] = 0.0  # exact zeros: neither negative nor dense after tanh
    return p.to(dtype), torch.tanh(p).to(dtype)


@pytest.mark.parametrize("bounds", [None, (-1.0, 1.0)])
@pytest.mark.parametrize(("offset", "scale"), [(0.0, 1.0), (1e4, 1.0), (-3.0, 1e-3)])
def test_compiled_equals_eager_in_float64(bounds: tuple[float, float] | None, offset: float,
                                          scale: float) -> None:
    p, a = _inputs(offset, scale, torch.float64)
    eager = M.forward_raw(p, a, 1e-7, bounds, 0.01)
    compiled = _compiled_forward_raw()(p, a, 1e-7, bounds, 0.01)
    assert torch.equal(compiled[_EXACT], eager[_EXACT])
    torch.testing.assert_close(compiled[_MOMENTS], eager[_MOMENTS], rtol=1e-10, atol=1e-12)


def test_compiled_variance_float32_no_cancellation_when_mean_dominates() -> None:
    # |mean| = 1e4 std: raw power sums in float32 (sum x^2 - n mean^2) would lose every digit
    p, a = _inputs(1e4, 1.0, torch.float32)
    raw = _compiled_forward_raw()(p, a, 1e-7, None, 0.01).double()
    ref = p.double().reshape(-1)
    m2 = ref.var(correction=0) * ref.numel()
    assert float(raw[1] / m2) == pytest.approx(1.0, abs=1e-4)
    assert float(raw[0]) == pytest.approx(float(ref.mean()), abs=1e-3)
    # within a few times the eager two-pass error
    eager = M.forward_raw(p, a, 1e-7, None, 0.01).double()
    assert abs(float(raw[1] / m2) - 1) <= max(4 * abs(float(eager[1] / m2) - 1), 1e-6)
