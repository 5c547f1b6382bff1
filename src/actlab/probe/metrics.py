"""The probe's metric vocabulary and the reductions behind it.

Every reduction comes in two halves. The *device* half (``*_raw``) runs inside a hook on the
tensors of one forward or backward pass and returns a short vector of moments, still on the
device, with no host synchronisation. The *host* half (``combine_*``) runs when the table is
read: it pools the vectors of all passes of one recorded step into the final metric values,
in float64 NumPy. Nothing per example is ever stored.

Exact definitions (``N`` is the number of elements, all means are over every element of the
tensor unless stated otherwise):

Activation site, forward (pre-activation ``p`` = the site's input, activation ``a`` = its output)
    ``preact_neg_frac`` share of ``p < 0``; ``preact_mean``, ``preact_std`` (population std);
    ``act_mean`` (the activation bias), ``act_std``; ``sparsity`` share of ``|a| < eps``;
    ``act_max``, ``act_min``, ``act_range = act_max - act_min`` (the spike measure of seed 003);
    ``saturation_frac`` (bounded activations only) share of ``a`` within ``tol`` of either
    output bound (``tol = 0.01``: tanh ``|a| > 0.99``, sigmoid ``a < 0.01`` or ``a > 0.99``).

Activation site, backward (``g = dL/dp`` for the loss ``L`` that is backpropagated)
    ``preact_grad_mean`` mean of ``g``. ``preact_grad_cov``: with ``x`` the input of the
    ``nn.Linear`` whose output is ``p`` (rows ``n`` = all leading positions, e.g. batch x
    tokens), the mean over all ``(i, k)`` of the covariance over rows
    ``Cov_n(g_ni, x_nk)``. Because the mean over ``(i, k)`` of a covariance is the covariance
    of the row sums, it is computed as ``Cov_n(sum_i g_ni, sum_k x_nk) / (d_out * d_in)`` in
    O(rows * (d_out + d_in)). It is exactly the covariance part of the mean weight gradient:
    ``mean(dL/dW) = rows * (mean_i E[g_i] * mean_k E[x_k] + preact_grad_cov)``.

Linear / conv weight ``w`` (``w_0`` at probe creation, ``w_prev`` at the previous record)
    ``weight_mean``, ``weight_std`` (population), ``weight_neg_frac``;
    ``drift_z = mean|w - w_0| / std(w_0)`` (seed 003's Z-score); ``dist_from_init =
    ||w - w_0||_F``; ``update_norm = ||w - w_prev||_F``; ``grad_norm = ||dL/dw||_F`` and
    ``grad_mean = mean(dL/dw)`` of the gradient accumulated in the recorded step.

Block
    ``hidden_mean``: mean of the block's output over all elements and inputs (seed 000 §2.2).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

ACT_FORWARD = (
    "preact_neg_frac", "preact_mean", "preact_std", "act_mean", "act_std", "sparsity",
    "act_max", "act_min", "act_range", "saturation_frac",
)
ACT_BACKWARD = ("preact_grad_mean", "preact_grad_cov")
WEIGHT_STATE = ("weight_mean", "weight_std", "weight_neg_frac", "drift_z", "dist_from_init",
                "update_norm")
WEIGHT_GRAD = ("grad_norm", "grad_mean")
BLOCK = ("hidden_mean",)
ALL_METRICS = ACT_FORWARD + ACT_BACKWARD + WEIGHT_STATE + WEIGHT_GRAD + BLOCK

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _stat_dtype(t: torch.Tensor) -> torch.Tensor:
    # Half-precision moments are too coarse; reduce in float32 (float64 stays float64).
    return t.float() if t.dtype in _LOW_PRECISION or not t.is_floating_point() else t


# Counting with comparisons (``(p < 0).sum()``) and ``torch.var_mean`` are slow CPU paths
# (bool intermediates, Welford loops: 10-100x a plain sum). The helpers below count and
# take moments with float ops only (dot, clamp, sign, sum), which vectorise, need at most one
# scratch tensor, and count exactly: ``sign(clamp(p, max=0))`` is -1 exactly where p < 0.
def _mean_var(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and population variance as ``E[x^2] - E[x]^2`` (one dot product, no scratch).

    Accumulated in the tensor's dtype; the relative error of the variance is about
    ``machine eps * (1 + mean^2 / var)``, negligible unless ``|mean| >> std``.
    """
    flat = t.reshape(-1)
    n = max(flat.numel(), 1)
    mean = flat.sum() / n
    return mean, ((flat @ flat) / n - mean * mean).clamp(min=0)


def _count_negative(t: torch.Tensor) -> torch.Tensor:
    """Number of elements < 0 (as a float tensor)."""
    return -t.clamp(max=0).sign_().sum()


def _count_above(t: torch.Tensor, threshold: float, *, scratch: bool = False) -> torch.Tensor:
    """Number of elements > ``threshold``; ``scratch=True`` lets it overwrite ``t``."""
    shifted = t.sub_(threshold) if scratch else t - threshold
    return shifted.relu_().sign_().sum()


@functools.lru_cache(maxsize=64)
def _float_below(value: float, dtype: torch.dtype) -> float:
    """The largest ``dtype`` number below ``value``."""
    v = torch.tensor(value, dtype=dtype)
    return float(torch.nextafter(v, torch.zeros((), dtype=dtype)))


def forward_raw(p: torch.Tensor, a: torch.Tensor, eps: float,
                bounds: tuple[float, float] | None, tol: float) -> torch.Tensor:
    """Device-side moments of one forward pass through a site.

    Returns ``[mean_p, var_p, negfrac_p, mean_a, var_a, sparse_a, max_a, min_a, sat_a]``
    (``sat_a`` is 0 for unbounded sites).
    """
    p = _stat_dtype(p.detach())
    a = _stat_dtype(a.detach()).to(p.dtype)
    n_p, n_a = max(p.numel(), 1), max(a.numel(), 1)
    mean_p, var_p = _mean_var(p)
    mean_a, var_a = _mean_var(a)
    neg = _count_negative(p) / n_p
    abs_a = a.abs()
    # |a| < eps  <=>  not |a| > eps', with eps' the float just below eps
    sparse = 1.0 - _count_above(abs_a, _float_below(eps, a.dtype)) / n_a
    a_min, a_max = torch.aminmax(a)
    if bounds is None:
        sat = torch.zeros((), dtype=a.dtype, device=a.device)
    else:
        # a < low + tol  or  a > high - tol   <=>   |a - centre| > half_width - tol
        low, high = bounds
        centre, half = (low + high) / 2, (high - low) / 2
        sat = _count_above((a - centre).abs_(), half - tol, scratch=True) / n_a
    return torch.stack([mean_p, var_p, neg, mean_a, var_a, sparse, a_max, a_min, sat])


def _pooled_mean_var(means: np.ndarray, variances: np.ndarray, n: np.ndarray) -> tuple[float, float]:
    total = n.sum()
    mean = float((n * means).sum() / total)
    var = float((n * (variances + (means - mean) ** 2)).sum() / total)
    return mean, var


def combine_forward(raw: np.ndarray, n_pre: np.ndarray, n_post: np.ndarray,
                    bounded: bool) -> dict[str, float]:
    """Pool the ``forward_raw`` rows of several passes (``raw``: passes x 9) into metrics."""
    mean_p, var_p = _pooled_mean_var(raw[:, 0], raw[:, 1], n_pre)
    mean_a, var_a = _pooled_mean_var(raw[:, 3], raw[:, 4], n_post)
    a_max, a_min = float(raw[:, 6].max()), float(raw[:, 7].min())
    out = {
        "preact_neg_frac": float((n_pre * raw[:, 2]).sum() / n_pre.sum()),
        "preact_mean": mean_p,
        "preact_std": float(np.sqrt(max(var_p, 0.0))),
        "act_mean": mean_a,
        "act_std": float(np.sqrt(max(var_a, 0.0))),
        "sparsity": float((n_post * raw[:, 5]).sum() / n_post.sum()),
        "act_max": a_max,
        "act_min": a_min,
        "act_range": a_max - a_min,
    }
    if bounded:
        out["saturation_frac"] = float((n_post * raw[:, 8]).sum() / n_post.sum())
    return out


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


def combine_backward(raw: np.ndarray, numel: np.ndarray, rows: np.ndarray,
                     fan: np.ndarray | None) -> dict[str, float]:
    """Pool ``backward_raw`` rows; ``fan`` holds ``d_out * d_in`` per pass (None: no cov)."""
    out = {"preact_grad_mean": float((numel * raw[:, 0]).sum() / numel.sum())}
    if fan is not None:
        total = rows.sum()
        mean_rg = (rows * raw[:, 2]).sum() / total
        mean_rx = (rows * raw[:, 3]).sum() / total
        # pooled covariance of the row sums, then the mean over (i, k)
        cov = (rows * (raw[:, 1] + (raw[:, 2] - mean_rg) * (raw[:, 3] - mean_rx))).sum() / total
        out["preact_grad_cov"] = float(cov / fan[0])
    return out


# ----------------------------------------------------------------------------- weights
def weight_raw_(w: torch.Tensor, w0: torch.Tensor, w_prev: torch.Tensor,
                std0: torch.Tensor) -> torch.Tensor:
    """Device-side ``[weight_mean, weight_std, weight_neg_frac, drift_z, dist_from_init,
    update_norm]`` of one weight against its initial and previously recorded values.

    ``w0`` and ``w_prev`` are contiguous snapshots in the statistics dtype; ``w_prev`` doubles
    as the scratch tensor (no allocation) and holds ``w`` on return.
    """
    flat = _stat_dtype(w.detach()).reshape(-1)
    n = max(flat.numel(), 1)
    mean, var = _mean_var(flat)
    prev = w_prev.view(-1)
    prev.sub_(flat)
    update = (prev @ prev).sqrt()
    neg = -prev.copy_(flat).clamp_(max=0).sign_().sum() / n
    prev.copy_(w0.view(-1)).sub_(flat)
    dist = (prev @ prev).sqrt()
    drift = prev.abs_().sum() / n / std0
    prev.copy_(flat)
    return torch.stack([mean, var.sqrt(), neg, drift, dist, update])


def grad_raw(grad: torch.Tensor) -> torch.Tensor:
    """Device-side ``[grad_norm, grad_mean]`` of an accumulated weight gradient."""
    flat = _stat_dtype(grad.detach()).reshape(-1)
    return torch.stack([(flat @ flat).sqrt(), flat.sum() / max(flat.numel(), 1)])
