"""Top-K activation sparsity: keep the largest fraction of outputs per example."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from actlab.activations.shift import feature_dim


def kept_count(fraction: float, n: int) -> int:
    """ceil(fraction · n), at least 1 and at most n.

    The product is rounded to 9 decimals first so that e.g. 0.3 · 10 counts as 3, not 4.
    """
    return max(1, min(n, math.ceil(round(fraction * n, 9))))


def topk_sparsify(y: Tensor, fraction: float) -> Tensor:
    """Keep exactly ``kept_count(fraction, n)`` largest entries per example, zero the rest.

    ``n`` is the size of the feature dimension (:func:`feature_dim`). Ties are broken by
    ``torch.topk``, so the count is exact. The gradient flows only through kept entries.
    """
    dim = feature_dim(y)
    k = kept_count(fraction, y.shape[dim])
    if k == y.shape[dim]:
        return y
    values, indices = torch.topk(y, k, dim=dim, sorted=False)
    # scatter_ into fresh zeros: no copy of the zeros, gradient still flows to ``values``
    return torch.zeros_like(y).scatter_(dim, indices, values)
