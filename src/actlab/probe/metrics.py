"""The probe's metric vocabulary and the reductions behind it.

Every reduction comes in two halves. The *device* half (``*_raw``) runs inside a hook on the
tensors of one forward or backward pass and returns a short vector of moments, still on the
device, with no host synchronisation. The *host* half runs in float64 NumPy: ``*_stats``
pools the vectors of all passes of one recorded step into sufficient statistics that merge
exactly across passes and ranks (:mod:`actlab.probe.merge`), and ``*_metrics`` turns the
merged statistics into the final metric values. Nothing per example is ever stored.

Exact definitions (``N`` is the number of elements, all means are over every element of the
tensor unless stated otherwise):

Activation site, forward (pre-activation ``p`` = the site's input, activation ``a`` = its output)
    ``preact_neg_frac`` share of ``p < 0``; ``preact_mean``, ``preact_std`` (population std);
    ``act_mean`` (the activation bias), ``act_std``; ``sparsity`` share of ``|a| < eps``;
    ``act_max``, ``act_min``, ``act_range = act_max - act_min`` (the spike measure of
    "Bug or Feature²");
    ``saturation_frac`` (bounded activations only) share of ``a`` within ``tol`` of either
    output bound (``tol = 0.01``: tanh ``|a| > 0.99``, sigmoid ``a < 0.01`` or ``a > 0.99``).
    ``act_rms = sqrt(mean a^2)``, ``preact_rms``; ``act_nonfinite`` / ``preact_nonfinite``
    the *number* of NaN or infinite elements; ``act_absmax = max |a|`` and where it sits:
    ``act_absmax_channel`` its index in the last dimension, ``act_absmax_token`` its index
    over the flattened leading dimensions, counted over the step's passes in order (and the
    ranks in rank order: rank 0's tokens first). Non-finite elements are not dropped: they
    make the tensor's moments, counts and extremes non-finite (NaN) for that step, and the
    ``*_nonfinite`` counts say how many there were.
    Opt-in: ``act_kurtosis = n m4 / m2^2`` with ``m_k = sum (a - mean)^k`` (non-excess:
    3 for a Gaussian), ``preact_kurtosis`` likewise.

Activation site, output gradient (opt-in, eager models: ``h = dL/da``)
    ``act_grad_rms = sqrt(mean h^2)``, ``act_grad_absmax = max |h|``, ``act_grad_nonfinite``
    the number of NaN or infinite elements of ``h``.

Activation site, backward (``g = dL/dp`` for the loss ``L`` that is backpropagated)
    ``preact_grad_mean`` mean of ``g``. ``preact_grad_cov``: with ``x`` the input of the
    ``nn.Linear`` whose output is ``p`` (rows ``n`` = all leading positions, e.g. batch x
    tokens), the mean over all ``(i, k)`` of the covariance over rows
    ``Cov_n(g_ni, x_nk)``. Because the mean over ``(i, k)`` of a covariance is the covariance
    of the row sums, it is computed as ``Cov_n(sum_i g_ni, sum_k x_nk) / (d_out * d_in)`` in
    O(rows * (d_out + d_in)). It is exactly the covariance part of the mean weight gradient:
    ``mean(dL/dW) = rows * (mean_i E[g_i] * mean_k E[x_k] + preact_grad_cov)``. Equivalently
    it is the covariance over rows of the row means ``mean_i g_ni`` and ``mean_k x_nk``; a
    module called at several places (fed by Linears of different widths) pools those pairs
    over all its passes.

Linear / conv weight ``w`` (``w_0`` at probe creation, ``w_prev`` at the previous record)
    ``weight_mean``, ``weight_std`` (population), ``weight_neg_frac``;
    ``drift_z = mean|w - w_0| / std(w_0)`` ("Bug or Feature²"'s Z-score); ``dist_from_init =
    ||w - w_0||_F``; ``update_norm = ||w - w_prev||_F``;
    ``update_ratio = update_norm / ||w||_F``; ``grad_norm = ||dL/dw||_F`` and
    ``grad_mean = mean(dL/dw)`` of the gradient accumulated in the recorded step.

Block
    ``hidden_mean``: mean of the block's output over all elements and inputs ("Rethinking
    Activation Functions" §2.2).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from actlab.probe.merge import (
    Stat,
    Stats,
    argmax_rows,
    comoments_rows,
    moments4_rows,
    moments_rows,
)

ACT_FORWARD = (
    "preact_neg_frac", "preact_mean", "preact_std", "act_mean", "act_std", "sparsity",
    "act_max", "act_min", "act_range", "saturation_frac", "act_rms", "preact_rms",
    "act_nonfinite", "preact_nonfinite", "act_absmax", "act_absmax_token",
    "act_absmax_channel",
)
ACT_BACKWARD = ("preact_grad_mean", "preact_grad_cov")
WEIGHT_STATE = ("weight_mean", "weight_std", "weight_neg_frac", "drift_z", "dist_from_init",
                "update_norm", "update_ratio")
WEIGHT_GRAD = ("grad_norm", "grad_mean")
BLOCK = ("hidden_mean",)
ALL_METRICS = ACT_FORWARD + ACT_BACKWARD + WEIGHT_STATE + WEIGHT_GRAD + BLOCK
#: opt-in families (not in the default set): fourth moments, and the gradient at the output
ACT_KURTOSIS = ("act_kurtosis", "preact_kurtosis")
ACT_OUTPUT_GRAD = ("act_grad_rms", "act_grad_absmax", "act_grad_nonfinite")

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def stat_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype statistics are reduced in: float32 for half types and non-floats."""
    return torch.float32 if dtype in _LOW_PRECISION or not dtype.is_floating_point else dtype


def _stat_dtype(t: torch.Tensor) -> torch.Tensor:
    # Half-precision moments are too coarse; reduce in float32 (float64 stays float64).
    return t if t.dtype == stat_dtype(t.dtype) else t.float()


# Counting with comparisons (``(p < 0).sum()``) and ``torch.var_mean`` are slow CPU paths
# (bool intermediates, Welford loops: 10-100x a plain sum). The device halves below use
# float ops only (sum, dot, clamp, sign), which vectorise, reuse one scratch buffer, and count
# exactly: ``sign(clamp(p, max=0))`` is -1 exactly where p < 0 and 0 elsewhere.
# Variances are centred moments ``m2 = sum (x - mean)^2`` (eagerly two passes over the data,
# compiled one shifted pass: :func:`_shifted_moments`; no cancellation when
# ``|mean| >> std``); passes and ranks merge them with the parallel formulas of
# :mod:`actlab.probe.merge`. Square roots and the metrics' divisions happen on the host.
def _count_negative(t: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """Number of elements < 0 (as a float tensor); overwrites ``scratch``."""
    return -torch.clamp(t, max=0, out=scratch).sign_().sum()


def _count_above(t: torch.Tensor, threshold: float, scratch: torch.Tensor) -> torch.Tensor:
    """Number of elements > ``threshold`` (as a float tensor); ``scratch`` may be ``t``."""
    return torch.sub(t, threshold, out=scratch).relu_().sign_().sum()


def _count_nonfinite(t: torch.Tensor, scratch: torch.Tensor,
                     mean: torch.Tensor | None = None) -> torch.Tensor:
    """Number of NaN or infinite elements (float ops: ``t * 0`` is NaN exactly there);
    overwrites ``scratch``. On the CPU a finite ``mean`` of ``t`` proves there are none (a
    NaN or an infinity makes the sum non-finite) and is read for free (no device to wait
    for), which skips the count in the common case."""
    if mean is not None and t.device.type == "cpu" and not torch.compiler.is_compiling() \
            and math.isfinite(float(mean)):
        return torch.zeros((), dtype=t.dtype)
    return torch.mul(t, 0, out=scratch).nan_to_num_(nan=1.0).sum()


#: locations travel in the statistics dtype: a token index is split at 2^24 (exact in float32)
_SPLIT = 1 << 24


def _location(idx: torch.Tensor, channels: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """``[token // 2^24, token % 2^24, channel]`` of a flat index (``channels`` = last dim)."""
    token = idx // channels
    return [(token // _SPLIT).to(dtype), (token % _SPLIT).to(dtype), (idx % channels).to(dtype)]


def _centred(t: torch.Tensor, scratch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, sum (t - mean)^2)`` of a flat tensor; overwrites ``scratch``."""
    mean = t.sum() / max(t.numel(), 1)
    torch.sub(t, mean, out=scratch)
    return mean, scratch @ scratch


@torch.compiler.assume_constant_result  # a constant under torch.compile, not a graph break
def _float_below(value: float, dtype: torch.dtype) -> float:
    """The largest ``dtype`` number below ``value``."""
    return _float_below_cached(value, dtype)


@functools.lru_cache(maxsize=64)
def _float_below_cached(value: float, dtype: torch.dtype) -> float:
    v = torch.tensor(value, dtype=dtype)
    return float(torch.nextafter(v, torch.zeros((), dtype=dtype)))


def forward_raw(p: torch.Tensor, a: torch.Tensor, eps: float,
                bounds: tuple[float, float] | None, tol: float,
                scratch: torch.Tensor | None = None) -> torch.Tensor:
    """Device-side statistics of one forward pass through a site.

    Returns ``[mean p, m2 p, #(p < 0), mean a, m2 a, #(|a| >= eps), max a, min a,
    #saturated, #nonfinite p, #nonfinite a, max |a|, token_hi, token_lo, channel]`` with
    ``m2 = sum (x - mean)^2`` (``#saturated`` is 0 for unbounded sites) and the location of
    ``max |a|``: its channel (index in the last dimension) and its token (index over the
    flattened leading dimensions) ``= token_hi * 2^24 + token_lo``.
    ``scratch``: a reusable flat buffer of at least ``max(p.numel(), a.numel())`` elements in
    the statistics dtype (allocating an activation-sized buffer on every pass costs page
    faults on CPU).
    """
    channels = a.shape[-1] if a.dim() else 1
    p = _stat_dtype(p.detach()).reshape(-1)
    a = _stat_dtype(a.detach()).to(p.dtype).reshape(-1)
    if torch.compiler.is_compiling() and p.numel() and a.numel():
        return _forward_raw_fused(p, a, eps, bounds, tol, channels)
    size = max(p.numel(), a.numel())
    if scratch is None or scratch.numel() < size or scratch.dtype != p.dtype:
        scratch = torch.empty(size, dtype=p.dtype, device=p.device)
    buf_p, buf_a = scratch[:p.numel()], scratch[:a.numel()]
    neg = _count_negative(p, buf_p)
    mean_p, m2_p = _centred(p, buf_p)
    bad_p = _count_nonfinite(p, buf_p, mean_p)
    mean_a, m2_a = _centred(a, buf_a)
    bad_a = _count_nonfinite(a, buf_a, mean_a)
    a_min, a_max = torch.aminmax(a)
    torch.abs(a, out=buf_a)
    absmax, where = buf_a.max(0)
    # |a| < eps  <=>  not |a| > eps', with eps' the float just below eps
    dense = _count_above(buf_a, _float_below(eps, a.dtype), buf_a)
    if bounds is None:
        sat = torch.zeros((), dtype=a.dtype, device=a.device)
    else:
        # a < low + tol  or  a > high - tol   <=>   |a - centre| > half_width - tol
        low, high = bounds
        centre, half = (low + high) / 2, (high - low) / 2
        torch.sub(a, centre, out=buf_a).abs_()
        sat = _count_above(buf_a, half - tol, buf_a)
    return torch.stack([mean_p, m2_p, neg, mean_a, m2_a, dense, a_max, a_min, sat, bad_p, bad_a,
                        absmax, *_location(where, channels, a.dtype)])


# Samples in the shift of the one-pass moments: |mean - shift| ~ std / sqrt(samples).
_SHIFT_SAMPLES = 256


def _shifted_moments(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, sum (t - mean)^2)`` of a non-empty flat tensor in one pass over it.

    The sums of ``d = t - c`` and ``d^2`` with ``c`` the mean of a strided sample give
    ``m2 = sum d^2 - (sum d)^2 / n``. The subtraction cancels only the share
    ``n (mean - c)^2 / sum d^2 ~ 1 / samples`` of ``sum d^2`` (under a bit), so the result
    is as accurate as the two-pass one, also when ``|mean| >> std``, and a compiler fuses
    both sums with the other reductions of the same tensor into a single loop.
    """
    n = t.numel()
    shift = t[::max(n // _SHIFT_SAMPLES, 1)].mean()
    d = t - shift
    s1, s2 = d.sum(), (d * d).sum()
    return shift + s1 / n, s2 - s1 * (s1 / n)


def _forward_raw_fused(p: torch.Tensor, a: torch.Tensor, eps: float,
                       bounds: tuple[float, float] | None, tol: float,
                       channels: int) -> torch.Tensor:
    """:func:`forward_raw` under ``torch.compile``: the same vector from plain reductions
    over ``p`` and ``a`` (each read once); the eager path's in-place scratch arithmetic would
    make inductor materialise every intermediate."""
    mean_p, m2_p = _shifted_moments(p)
    mean_a, m2_a = _shifted_moments(a)
    neg = (p < 0).to(p.dtype).sum()
    dense = (a.abs() > _float_below(eps, a.dtype)).to(a.dtype).sum()
    if bounds is None:
        sat = torch.zeros((), dtype=a.dtype, device=a.device)
    else:
        low, high = bounds
        centre, half = (low + high) / 2, (high - low) / 2
        sat = ((a - centre).abs() > half - tol).to(a.dtype).sum()
    bad_p = (~torch.isfinite(p)).to(p.dtype).sum()
    bad_a = (~torch.isfinite(a)).to(a.dtype).sum()
    absmax, where = a.abs().max(0)
    return torch.stack([mean_p, m2_p, neg, mean_a, m2_a, dense, a.amax(), a.amin(), sat, bad_p,
                        bad_a, absmax, *_location(where, channels, a.dtype)])


def forward_stats(raw: np.ndarray, n_pre: np.ndarray, n_post: np.ndarray,
                  channels: np.ndarray) -> Stats:
    """Sufficient statistics of the ``forward_raw`` rows of several passes (passes x 15);
    ``channels``: each pass's last dimension (its tokens are ``n_post / channels``)."""
    tokens = n_post / channels
    location = raw[:, 12] * _SPLIT + raw[:, 13]
    return {
        "pre": moments_rows(n_pre, raw[:, 0], raw[:, 1]),
        "post": moments_rows(n_post, raw[:, 3], raw[:, 4]),
        "counts": Stat("sum", raw[:, [2, 5, 8, 9, 10]].sum(axis=0)),
        "max": Stat("max", raw[:, 6].max(keepdims=True)),
        "min": Stat("min", raw[:, 7].min(keepdims=True)),
        "absmax": argmax_rows(np.stack([raw[:, 11], tokens, location, raw[:, 14]], axis=1)),
    }


def forward_metrics(stats: Stats, bounded: bool) -> dict[str, float]:
    """Forward metrics of a site from (merged) :func:`forward_stats`."""
    n_p, mean_p, m2_p = stats["pre"].value
    n_a, mean_a, m2_a = stats["post"].value
    neg, dense, sat, bad_p, bad_a = stats["counts"].value
    a_max, a_min = float(stats["max"].value[0]), float(stats["min"].value[0])
    absmax, _, token, channel = stats["absmax"].value
    out = {
        "preact_neg_frac": float(neg / n_p),
        "preact_mean": float(mean_p),
        "preact_std": float(np.sqrt(max(m2_p / n_p, 0.0))),
        "act_mean": float(mean_a),
        "act_std": float(np.sqrt(max(m2_a / n_a, 0.0))),
        "sparsity": float(1.0 - dense / n_a),
        "act_max": a_max,
        "act_min": a_min,
        "act_range": a_max - a_min,
        "act_rms": _rms(n_a, mean_a, m2_a),
        "preact_rms": _rms(n_p, mean_p, m2_p),
        "act_nonfinite": float(bad_a),
        "preact_nonfinite": float(bad_p),
        "act_absmax": float(absmax),
        "act_absmax_token": float(token),
        "act_absmax_channel": float(channel),
    }
    if bounded:
        out["saturation_frac"] = float(sat / n_a)
    return out


def _rms(n: float, mean: float, m2: float) -> float:
    """``sqrt(mean x^2)`` from ``[n, mean, m2]``: ``mean x^2 = m2 / n + mean^2``."""
    return float(np.sqrt(max(m2 / n + mean * mean, 0.0))) if n else float("nan")


# ----------------------------------------------------------------------------- kurtosis
def _central4(t: torch.Tensor) -> list[torch.Tensor]:
    """``[mean, m2, m3, m4]`` of a flat tensor, ``m_k = sum (t - mean)^k`` (two passes)."""
    mean = t.sum() / max(t.numel(), 1)
    d = t - mean
    d2 = d * d
    return [mean, d2.sum(), (d2 * d).sum(), (d2 * d2).sum()]


def kurtosis_raw(p: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Device-side ``[mean, m2, m3, m4]`` of ``p`` then of ``a`` for one forward pass."""
    p = _stat_dtype(p.detach()).reshape(-1)
    a = _stat_dtype(a.detach()).to(p.dtype).reshape(-1)
    return torch.stack([*_central4(p), *_central4(a)])


def kurtosis_stats(raw: np.ndarray, n_pre: np.ndarray, n_post: np.ndarray) -> Stats:
    """``moments4`` statistics of ``p`` and ``a`` from ``kurtosis_raw`` rows (passes x 8)."""
    return {"pre": moments4_rows(n_pre, *raw[:, 0:4].T),
            "post": moments4_rows(n_post, *raw[:, 4:8].T)}


def _kurtosis(value: np.ndarray) -> float:
    n, _, m2, _, m4 = value
    return float(n * m4 / (m2 * m2)) if m2 > 0 else float("nan")


def kurtosis_metrics(stats: Stats) -> dict[str, float]:
    """``act_kurtosis`` and ``preact_kurtosis`` (non-excess) from merged statistics."""
    return {"act_kurtosis": _kurtosis(stats["post"].value),
            "preact_kurtosis": _kurtosis(stats["pre"].value)}


# ----------------------------------------------------------------------------- output gradient
def output_grad_raw(h: torch.Tensor) -> torch.Tensor:
    """Device-side ``[sum h^2, max |h|, #nonfinite h]`` of ``h = dL/da`` for one backward."""
    flat = _stat_dtype(h.detach()).reshape(-1)
    sumsq = flat @ flat
    if flat.device.type == "cpu" and math.isfinite(float(sumsq)):  # none (free on the CPU)
        bad = torch.zeros((), dtype=flat.dtype)
    else:
        bad = (~torch.isfinite(flat)).to(flat.dtype).sum()
    return torch.stack([sumsq, flat.abs().amax(), bad])


def output_grad_stats(raw: np.ndarray, numel: np.ndarray, scale: float = 1.0) -> Stats:
    """Sums and extremes of ``output_grad_raw`` rows; ``scale`` multiplies ``h`` (the probe's
    ``1 / world size``, as for :func:`backward_stats`)."""
    return {"sums": Stat("sum", [raw[:, 0].sum() * scale * scale, raw[:, 2].sum(),
                                 float(np.sum(numel))]),
            "absmax": Stat("max", raw[:, 1].max(keepdims=True) * scale)}


def output_grad_metrics(stats: Stats) -> dict[str, float]:
    """``act_grad_rms``, ``act_grad_absmax`` and ``act_grad_nonfinite``."""
    sumsq, bad, n = stats["sums"].value
    return {"act_grad_rms": float(np.sqrt(sumsq / n)) if n else float("nan"),
            "act_grad_absmax": float(stats["absmax"].value[0]),
            "act_grad_nonfinite": float(bad)}


def histogram_raw(t: torch.Tensor, bins: int, low: float, high: float) -> torch.Tensor:
    """Counts of ``t`` in ``bins`` equal bins over ``[low, high]``; values outside are
    clamped into the edge bins so the counts add up to ``t.numel()``."""
    t = _stat_dtype(t.detach()).clamp(low, high)
    return torch.histc(t, bins=bins, min=low, max=high)


# ----------------------------------------------------------------------------- backward
def input_row_sums(x: torch.Tensor) -> torch.Tensor:
    """``sum_k x_nk`` for every row ``n`` of a Linear layer's input (leading dims flattened)."""
    x = _stat_dtype(x.detach())
    return x.reshape(-1, x.shape[-1]).sum(dim=1)


def backward_raw(g: torch.Tensor, x_rows: torch.Tensor | None) -> torch.Tensor:
    """Device-side moments of ``g = dL/dp`` for one backward pass.

    Returns ``[mean_g, cov, mean_G, mean_X]`` where ``G``/``X`` are the row sums of ``g`` and
    of the feeding layer's input and ``cov = mean_n (G_n - mean G)(X_n - mean X)`` (two-pass,
    so no cancellation); the last three are 0 when there is no input row sum.
    """
    g = _stat_dtype(g.detach())
    mean_g = g.mean()
    if x_rows is None:
        zero = torch.zeros((), dtype=g.dtype, device=g.device)
        return torch.stack([mean_g, zero, zero, zero])
    rows_g = g.reshape(-1, g.shape[-1]).sum(dim=1)
    x_rows = x_rows.to(rows_g.dtype)
    mean_rg, mean_rx = rows_g.mean(), x_rows.mean()
    cov = ((rows_g - mean_rg) * (x_rows - mean_rx)).mean()
    return torch.stack([mean_g, cov, mean_rg, mean_rx])


def backward_stats(raw: np.ndarray, numel: np.ndarray, rows: np.ndarray,
                   fan: np.ndarray | None, scale: float = 1.0) -> Stats:
    """Sufficient statistics of ``backward_raw`` rows; ``fan`` holds ``d_out * d_in`` per pass
    (None: no covariance). ``scale`` multiplies ``g`` (the probe's ``1 / world size``: each
    rank's loss is its own mean, the global loss their mean)."""
    out = {"grad": Stat("sum", [(numel * raw[:, 0]).sum() * scale, numel.sum()])}
    if fan is not None and len(rows):
        # the co-moment of the row means G / d_out (scaled like g) and X / d_in: passes fed by
        # Linears of different widths (a module called at several places) pool consistently
        d_out = numel / rows
        d_in = fan / d_out
        out["cov"] = comoments_rows(rows, raw[:, 2] * scale / d_out, raw[:, 3] / d_in,
                                    rows * raw[:, 1] * scale / fan)
    return out


def backward_metrics(stats: Stats) -> dict[str, float]:
    """Backward metrics of a site from (merged) :func:`backward_stats`."""
    total, count = stats["grad"].value
    out = {"preact_grad_mean": float(total / count) if count else float("nan")}
    if "cov" in stats:
        n, _, _, c = stats["cov"].value
        out["preact_grad_cov"] = float(c / n)
    return out


# ----------------------------------------------------------------------------- weights
def weight_raw_(w: torch.Tensor, w0: torch.Tensor, w_prev: torch.Tensor,
                m0: torch.Tensor) -> torch.Tensor:
    """Device-side statistics of one weight (its local shard under FSDP) against its initial
    and previously recorded values: ``[mean w, m2 w, #(w < 0), sum |w - w0|,
    sum (w - w0)^2, sum (w - w_prev)^2, mean w0, m2 w0]`` (``m2 = sum (x - mean)^2``).

    ``w0`` and ``w_prev`` are contiguous snapshots in the statistics dtype, ``m0`` the
    ``[mean, m2]`` of ``w0``; ``w_prev`` doubles as the scratch tensor (no allocation) and
    holds ``w`` on return.
    """
    flat = _stat_dtype(w.detach()).reshape(-1)
    prev = w_prev.view(-1)
    prev.sub_(flat)
    update_sq = prev @ prev
    torch.sub(w0.view(-1), flat, out=prev)
    dist_sq = prev @ prev
    l1 = prev.abs_().sum()
    neg = _count_negative(flat, prev)
    mean, m2 = _centred(flat, prev)
    prev.copy_(flat)
    return torch.stack([mean, m2, neg, l1, dist_sq, update_sq, m0[0], m0[1]])


def initial_moments(w0: torch.Tensor) -> torch.Tensor:
    """``[mean, m2]`` of a weight snapshot (``drift_z`` divides by its std)."""
    flat = w0.reshape(-1)
    mean = flat.sum() / max(flat.numel(), 1)
    centred = flat - mean
    return torch.stack([mean, centred @ centred])


def weight_stats(raw: np.ndarray, n: int) -> Stats:
    """Sufficient statistics of one ``weight_raw_`` row of a weight (shard) of ``n`` elements."""
    return {
        "w": moments_rows(n, raw[0], raw[1]),
        "w0": moments_rows(n, raw[6], raw[7]),
        "sums": Stat("sum", [raw[2], raw[3], raw[4], raw[5]]),
    }


def weight_metrics(stats: Stats) -> dict[str, float]:
    """Weight metrics from (merged) :func:`weight_stats`."""
    n, mean, m2 = stats["w"].value
    _, _, m2_0 = stats["w0"].value
    neg, l1, dist_sq, update_sq = stats["sums"].value
    std0 = np.sqrt(max(m2_0 / n, 0.0))
    norm = np.sqrt(max(m2 + n * mean * mean, 0.0))
    update = np.sqrt(update_sq)
    return {
        "weight_mean": float(mean),
        "weight_std": float(np.sqrt(max(m2 / n, 0.0))),
        "weight_neg_frac": float(neg / n),
        "drift_z": float(l1 / n / std0) if std0 > 0 else float("nan"),
        "dist_from_init": float(np.sqrt(dist_sq)),
        "update_norm": float(update),
        "update_ratio": float(update / norm) if norm > 0 else float("nan"),
    }


def grad_raw(grad: torch.Tensor) -> torch.Tensor:
    """Device-side ``[sum g^2, sum g]`` of an accumulated weight gradient (or its shard)."""
    flat = _stat_dtype(grad.detach()).reshape(-1)
    return torch.stack([flat @ flat, flat.sum()])


def grad_stats(raw: np.ndarray, n: int) -> Stats:
    """Sufficient statistics of one ``grad_raw`` row: ``[sum g^2, sum g, n]`` (summed)."""
    return {"grad": Stat("sum", [raw[0], raw[1], n])}


def grad_metrics(stats: Stats) -> dict[str, float]:
    """``grad_norm`` and ``grad_mean`` from (merged) :func:`grad_stats`."""
    sumsq, total, n = stats["grad"].value
    return {"grad_norm": float(np.sqrt(sumsq)), "grad_mean": float(total / n)}
