"""The controlled residual MLP of "Rethinking Activation Functions" (eq. 2).

Each of ``L`` blocks updates the residual stream ``x`` of width ``d`` through an MLP of
width ``m``::

    pre-norm  (default):  x <- x + W2 phi(W1 LN(x))
    post-norm:            x <- LN(x + W2 phi(W1 x))

There is no embedding and no output head: the model maps ``R^d -> R^d``. Weights are drawn
from ``U[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` (App. A; also PyTorch's ``nn.Linear`` default),
as are biases when ``bias=True``. LayerNorm keeps its affine parameters (PyTorch's
default): without them a bias-free shifted student cannot produce the input-independent
offset that the unshifted teacher's blocks add.

``forward(x, return_stats=True)`` also returns, per block, the mean of the residual
stream after the block and the mean of the activation's output (both over every element
of the batch), which the teacher-student experiments track over training; computing them
inside the forward keeps them vmappable and cheaper than hooks.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor, nn

from actlab.activations.base import Activation
from actlab.errors import SpecError


def make_activation(spec: str | nn.Module) -> nn.Module:
    """An activation module from a spec string (via ``actlab.activation``) or a module (copied).

    A fixed shift (``relu:shift=theory``, ``gelu:shift=0.115``) is applied here as
    ``phi(z) - b`` with ordinary tensor ops around the registry's unshifted module: the
    registry's fast shifted kernels are ``torch.autograd.Function``s without functorch
    support, and the ensemble (vmap) and curvature tools (grad, jvp) need it. The shift
    value is the registry's own (so ``theory`` means the same everywhere).
    """
    if isinstance(spec, nn.Module):
        return copy.deepcopy(spec)
    if not isinstance(spec, str):
        raise SpecError(f"activation: expected a spec string or nn.Module, got {spec!r}")
    try:
        from actlab.activations.spec import activation
    except ImportError:  # the spec registry is optional at import time
        return _FallbackActivation(spec)
    module = activation(spec)  # validates the whole spec, resolves shift=theory
    tokens = spec.strip().split(":")
    if not any(t.strip().startswith("shift=") for t in tokens):
        return module
    shift = float(getattr(module, "shift", 0.0) or 0.0)
    base = ":".join(t for t in tokens if not t.strip().startswith(("shift=", "q=")))
    return ShiftedActivation(activation(base), shift, spec)


class ShiftedActivation(Activation):
    """``phi(z) - shift`` around an unshifted activation module (vmap/grad-friendly).

    The shift is a buffer, so models that differ only in their shift (``shift=0`` included)
    have the same structure and can be stacked into one vmapped ensemble group.
    """

    shift: Tensor

    def __init__(self, base: nn.Module, shift: float, spec: str = "") -> None:
        super().__init__()
        self.base = base
        # float64, so a float64 model gets the exact shift; 0-dim, so it never promotes x
        self.register_buffer("shift", torch.tensor(float(shift), dtype=torch.float64))
        self.spec = spec or f"{getattr(base, 'spec', base)}:shift={shift}"

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) - self.shift


class _FallbackActivation(Activation):
    """Minimal ``name[:shift=B|theory]`` activations, used only if the spec registry is absent."""

    _FUNCTIONS = {
        "relu": torch.relu,
        "gelu": nn.functional.gelu,
        "silu": nn.functional.silu,
        "swish": nn.functional.silu,
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
    }

    def __init__(self, spec: str) -> None:
        super().__init__()
        import difflib

        name, *options = spec.strip().lower().split(":")
        if name not in self._FUNCTIONS:
            close = difflib.get_close_matches(name, self._FUNCTIONS, n=3, cutoff=0.4)
            raise SpecError(f"unknown activation {name!r}; did you mean {', '.join(close)}?")
        self.spec = spec
        self.fn = self._FUNCTIONS[name]
        self.shift = 0.0
        for option in options:
            key, _, value = option.partition("=")
            if key != "shift":
                raise SpecError(f"option {key!r} needs the activation registry (only shift here)")
            self.shift = gaussian_mean(self.fn) if value == "theory" else float(value)

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x) - self.shift if self.shift else self.fn(x)


def gaussian_mean(fn, variance: float = 1 / 3, points: int = 80) -> float:
    """E[fn(Z)] for Z ~ N(0, variance) by Gauss-Hermite quadrature (float64)."""
    import numpy as np

    nodes, weights = np.polynomial.hermite_e.hermegauss(points)
    z = torch.as_tensor(nodes * math.sqrt(variance), dtype=torch.float64)
    values = fn(z).numpy()
    return float((weights * values).sum() / math.sqrt(2 * math.pi))


class ResidualBlock(nn.Module):
    """One block ``x + W2 phi(W1 LN(x))`` (pre-norm) or ``LN(x + W2 phi(W1 x))`` (post-norm)."""

    def __init__(self, d: int, m: int, activation: str | nn.Module, norm: str, bias: bool) -> None:
        super().__init__()
        self.norm_position = norm
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, m, bias=bias)
        self.act = make_activation(activation)
        self.down = nn.Linear(m, d, bias=bias)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The new residual stream and the activation's output."""
        if self.norm_position == "pre":
            a = self.act(self.up(self.norm(x)))
            return x + self.down(a), a
        a = self.act(self.up(x))
        return self.norm(x + self.down(a)), a


class ResidualMLP(nn.Module):
    """Residual stack of ``L`` MLP blocks of width ``m`` on a stream of width ``d`` (eq. 2).

    Args:
        d: residual-stream width (input and output size).
        m: hidden width of every MLP.
        L: number of blocks.
        activation: a spec string (``"relu"``, ``"relu:shift=theory"``, ``"gelu:shift=0.115"``)
            or a module (copied into every block).
        norm: ``"pre"`` (LayerNorm on the block input) or ``"post"`` (on the residual sum).
        bias: whether the up- and down-projections have biases.
        generator: a ``torch.Generator`` for the uniform initialisation (deterministic
            models without touching the global RNG); ``None`` uses the global RNG.
    """

    def __init__(
        self,
        d: int,
        m: int,
        L: int,
        activation: str | nn.Module = "relu",
        norm: str = "pre",
        bias: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("d", d), ("m", m), ("L", L)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")
        if norm not in ("pre", "post"):
            raise ValueError(f"norm: must be 'pre' or 'post', got {norm!r}")
        self.d, self.m, self.L = d, m, L
        self.norm, self.bias = norm, bias
        self.activation_spec = activation if isinstance(activation, str) else repr(activation)
        self.blocks = nn.ModuleList(ResidualBlock(d, m, activation, norm, bias) for _ in range(L))
        self.reset_parameters(generator)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Uniform ``U[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` weights and biases; LN to (1, 0)."""
        for block in self.blocks:
            for linear in (block.up, block.down):
                bound = 1.0 / math.sqrt(linear.in_features)
                linear.weight.uniform_(-bound, bound, generator=generator)
                if linear.bias is not None:
                    linear.bias.uniform_(-bound, bound, generator=generator)
            block.norm.reset_parameters()

    def with_activation(self, activation: str | nn.Module) -> ResidualMLP:
        """A copy with identical parameters and every block's activation replaced.

        This is how paired students are built: the shifted student is the unshifted one
        with ``relu`` swapped for ``relu:shift=theory``, so their initial parameters agree
        exactly. ``self`` is not modified.
        """
        twin = copy.deepcopy(self)
        for block in twin.blocks:
            block.act = make_activation(activation)
        twin.activation_spec = activation if isinstance(activation, str) else repr(activation)
        return twin

    def forward(self, x: Tensor, return_stats: bool = False) -> Tensor | tuple[Tensor, dict]:
        """Map ``(..., d) -> (..., d)``; with ``return_stats`` also per-block statistics.

        The statistics are ``{"hidden_mean": (L,), "post_act_mean": (L,)}``: the mean over all
        elements of the residual stream after each block and of each block's activation output.
        """
        hidden, post = [], []
        for block in self.blocks:
            x, a = block(x)
            if return_stats:
                hidden.append(x.mean())
                post.append(a.mean())
        if not return_stats:
            return x
        return x, {"hidden_mean": torch.stack(hidden), "post_act_mean": torch.stack(post)}

    def ensemble_forward(self, params: dict[str, Tensor], buffers: dict[str, Tensor],
                         x: Tensor) -> Tensor | None:
        """Forward of a stacked ensemble of this architecture through the fused C++ path.

        ``params``/``buffers`` are stacked over a leading member dimension and ``x`` is
        ``(members, batch, d)``. Returns ``None`` when the path does not apply (native
        kernels off, post-norm, biases, another activation; see
        :mod:`actlab.nn.residual_stack`), and :class:`~actlab.train.ensemble.Ensemble` then
        uses vmap. Works on a ``meta`` template: only the structure of ``self`` is read.
        """
        from actlab.nn.residual_stack import ensemble_forward

        return ensemble_forward(self, params, buffers, x)

    def extra_repr(self) -> str:
        return (
            f"d={self.d}, m={self.m}, L={self.L}, activation={self.activation_spec!r}, "
            f"norm={self.norm!r}, bias={self.bias}"
        )
