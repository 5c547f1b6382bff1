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
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from actlab.activations.spec_activation import make_activation
from actlab.nn import residual_stack


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
        exactly. ``self`` is not modified. The new activations (and their shift buffers) are
        created on the device of ``self``'s parameters.
        """
        twin = copy.deepcopy(self)
        device = next(self.parameters()).device
        for block in twin.blocks:
            block.act = make_activation(activation).to(device)
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
        return residual_stack.ensemble_forward(self, params, buffers, x)

    def fused_tensors(self, params: Mapping[str, Tensor], buffers: Mapping[str, Tensor]
                      ) -> tuple[list[Tensor], ...] | None:
        """This model's tensors in ``params``/``buffers`` (keyed as in ``named_parameters``
        and ``named_buffers``), as the fused path takes them: per block, in block order,
        ``(LayerNorm weights, LayerNorm biases, up weights, down weights, activation
        offsets)``. ``None`` if one is missing (a custom activation without ``offset``)."""
        out = []
        for keys in self._fused_keys():
            if len(keys) != len(self.blocks) or any(k not in params and k not in buffers
                                                     for k in keys):
                return None
            out.append([params[k] if k in params else buffers[k] for k in keys])
        return tuple(out)

    def _fused_keys(self) -> list[list[str | None]]:
        """The names of :meth:`fused_tensors`' groups, found once per block structure (the
        walk over every named tensor would otherwise run on every training step)."""
        signature = tuple(id(b.act) for b in self.blocks)
        cached = self.__dict__.get("_fused_keys_cache")
        if cached is not None and cached[0] == signature:
            return cached[1]
        names = {id(t): n for n, t in (*self.named_parameters(), *self.named_buffers())}
        groups = (
            [b.norm.weight for b in self.blocks], [b.norm.bias for b in self.blocks],
            [b.up.weight for b in self.blocks], [b.down.weight for b in self.blocks],
            [getattr(b.act, "offset", None) for b in self.blocks],
        )
        keys = [[names.get(id(t)) for t in group if t is not None] for group in groups]
        self.__dict__["_fused_keys_cache"] = (signature, keys)
        return keys

    def extra_repr(self) -> str:
        return (
            f"d={self.d}, m={self.m}, L={self.L}, activation={self.activation_spec!r}, "
            f"norm={self.norm!r}, bias={self.bias}"
        )
