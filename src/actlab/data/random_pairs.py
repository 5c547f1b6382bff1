"""Random regression pairs: inputs and targets drawn independently from N(0, 1).

With no relation between ``x`` and ``y``, whatever a network does to its weights while
fitting them under MSE is a property of the optimization, not of the data ("Bug or Feature²" §3).
"""

from __future__ import annotations

import torch
from torch import Tensor


def random_pairs(n: int, in_dim: int, out_dim: int, *, seed: int = 0,
                 dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """``n`` pairs ``(x, y)`` with ``x ~ N(0, I_in_dim)`` and ``y ~ N(0, I_out_dim)`` independent."""
    if n < 1 or in_dim < 1 or out_dim < 1:
        raise ValueError(f"n, in_dim and out_dim must be >= 1, got {n}, {in_dim}, {out_dim}")
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, in_dim, generator=generator, dtype=dtype)
    y = torch.randn(n, out_dim, generator=generator, dtype=dtype)
    return x, y
