"""The one-block model of "Rethinking Activation Functions", App. B.1.2 (eq. 29).

``f(x) = B(φ(Ax) − b1)``: an up-projection ``A`` (``m × d_in``), an elementwise activation
(a spec string, so the shift ``b`` is part of it: ``"relu:shift=theory"``) and a
down-projection ``B`` (``d_out × m``), no biases, no normalisation, no residual. Weights are
drawn from ``U[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` as in the controlled model (App. A, eq. 11),
so unit-variance inputs give pre-activations of variance about 1/3.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from actlab.activations.spec_activation import make_activation


class OneBlock(nn.Module):
    """``f(x) = B(φ(Ax) − b1)`` with ``up`` = ``A`` and ``down`` = ``B`` (bias-free ``nn.Linear``)."""

    def __init__(
        self,
        d_in: int,
        m: int,
        d_out: int,
        activation: str | nn.Module = "relu",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("d_in", d_in), ("m", m), ("d_out", d_out)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")
        self.up = nn.Linear(d_in, m, bias=False)
        self.act = make_activation(activation)
        self.down = nn.Linear(m, d_out, bias=False)
        with torch.no_grad():
            for linear in (self.up, self.down):
                bound = 1.0 / math.sqrt(linear.in_features)
                linear.weight.uniform_(-bound, bound, generator=generator)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., d_in) -> (..., d_out)``."""
        return self.down(self.act(self.up(x)))
