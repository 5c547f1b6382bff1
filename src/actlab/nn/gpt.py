"""A small GPT (decoder-only transformer) in one readable module, after nanoGPT's ``model.py``.

Pre-norm blocks ``x = x + attn(norm1(x)); x = x + mlp(norm2(x))``, learned position
embeddings (or rotary ones, ``positions="rotary"``), a final norm and a language-model head
tied to the token embedding. What the experiments vary is explicit in :class:`GPTConfig`:

* ``activation``: any actlab spec string for the MLP of a plain FFN (``"gelu"``,
  ``"gelu:adaptive"``, ``"relu2:clip=50"`` ...);
* ``ffn``: ``"plain"`` (:class:`~actlab.nn.ffn.FFN` of width ``mlp_ratio * n_embd``) or a
  gated kind ``"glu" | "reglu" | "geglu" | "swiglu"`` (:class:`~actlab.nn.ffn.GatedFFN`) whose
  width comes from :func:`~actlab.nn.ffn.matched_width`, so plain and gated models have the
  same parameter count; the gated kind fixes the gate activation and ``activation`` is unused;
* ``norm``: ``"layernorm" | "rmsnorm" | "percentile" | "none"`` (any name
  :func:`~actlab.nn.norms.make_norm` accepts, options included: ``"percentile:q=0.7"``);
* ``mlp_norm``: a norm between the plain FFN's up-projection and its activation (``"none"``
  by default); ``"percentile:q=0.7"`` with ``mlp_norm_bias=False`` zeroes 70 % of a ReLU's
  inputs per token, the Percentile Centering of "Bug or Feature²" §4 in a GPT;
* ``positions``: ``"learned"`` (a ``block_size x n_embd`` embedding added to the tokens, as in
  nanoGPT) or ``"rotary"`` (no position parameters: queries and keys of every head rotated by
  position, the first half of each head's channels paired with the second, base 10,000, as
  in the released code of "Bug or Feature²").

The blocks are ``model.blocks`` (an ``nn.ModuleList``), each returning the residual stream,
so ``actlab.Probe(model, blocks=model.blocks)`` records hidden-state means per block, and
each block's MLP activation is ``model.blocks[i].mlp.act`` (found by
:func:`actlab.find_activations`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.errors import ConfigError, config_check
from actlab.nn.ffn import (
    FFN,
    FFN_KINDS,
    GATE_KINDS,
    GatedFFN,
    checked_block_parts,
    ffn_flops_per_token,
    ffn_param_count,
    matched_width,
)
from actlab.nn.norm_spec import parse_norm
from actlab.nn.norms import make_norm

__all__ = ["FFN_KINDS", "GPT", "GPTConfig", "POSITIONS"]

POSITIONS = ("learned", "rotary")
ROTARY_BASE = 10_000.0

@dataclass
class GPTConfig:
    """Shape and components of a :class:`GPT`.

    ``mlp_ratio`` sets the plain FFN width ``m = mlp_ratio * n_embd``; gated FFNs get the
    parameter-matched width ``matched_width(n_embd, m, multiple_of, bias=bias)``.
    """

    vocab_size: int = 256
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    mlp_ratio: float = 4.0
    activation: str = "gelu"
    ffn: str = "plain"
    norm: str = "layernorm"
    dropout: float = 0.0
    bias: bool = True
    multiple_of: int = 1
    init_std: float = 0.02
    positions: str = "learned"
    mlp_norm: str = "none"
    mlp_norm_bias: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "multiple_of"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise ConfigError("n_head", f"must divide n_embd={self.n_embd}, got {self.n_head}")
        if not self.mlp_ratio > 0:
            raise ConfigError("mlp_ratio", f"must be > 0, got {self.mlp_ratio}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("dropout", f"must be in [0, 1), got {self.dropout}")
        if not self.init_std > 0:
            raise ConfigError("init_std", f"must be > 0, got {self.init_std}")
        if self.positions not in POSITIONS:
            raise ConfigError("positions", f"must be one of {', '.join(POSITIONS)}, got "
                                           f"{self.positions!r}")
        if self.positions == "rotary" and (self.n_embd // self.n_head) % 2:
            raise ConfigError("n_head", f"rotary positions need an even head width, got "
                                        f"{self.n_embd} / {self.n_head}")
        self.ffn = checked_block_parts(self.ffn, self.norm)
        config_check("mlp_norm", parse_norm, self.mlp_norm)
        if self.gated and parse_norm(self.mlp_norm)[0] != "none":
            raise ConfigError("mlp_norm", f"applies to the plain FFN only, got ffn={self.ffn!r}")

    @property
    def gated(self) -> bool:
        """Whether the FFN is a gated one."""
        return self.ffn != "plain"

    @property
    def plain_hidden(self) -> int:
        """Width m of the plain FFN this config is matched to."""
        return max(1, round(self.mlp_ratio * self.n_embd))

    @property
    def hidden(self) -> int:
        """The FFN's intermediate width (plain m, or the parameter-matched gated width)."""
        if not self.gated:
            return self.plain_hidden
        return matched_width(self.n_embd, self.plain_hidden, self.multiple_of, bias=self.bias)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention (fused ``scaled_dot_product_attention``)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.rotary = config.positions == "rotary"
        if self.rotary:
            half = config.n_embd // config.n_head // 2
            inv_freq = ROTARY_BASE ** (-torch.arange(half, dtype=torch.float32) / half)
            self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        """Attend over the sequence of ``x`` (B, T, C), each position to itself and earlier ones."""
        batch, length, channels = x.shape
        q, k, v = self.qkv(x).split(channels, dim=2)
        shape = (batch, length, self.n_head, channels // self.n_head)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        if self.rotary:
            angles = torch.outer(torch.arange(length, device=x.device, dtype=torch.float32),
                                 self.inv_freq)
            q, k = rotate(q, angles), rotate(k, angles)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(batch, length, channels)
        return self.resid_dropout(self.proj(y))


def rotate(x: Tensor, angles: Tensor) -> Tensor:
    """Rotary position embedding of ``x`` (B, H, T, D): channel ``i`` and ``i + D/2`` of
    position ``t`` rotated by ``angles[t, i]`` (T, D/2), so that a query-key product depends on
    the positions through their difference only."""
    half = x.shape[-1] // 2
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)


class Block(nn.Module):
    """Pre-norm transformer block; returns the residual stream (probe it for ``hidden_mean``)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.norm1 = make_norm(config.norm, config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.norm2 = make_norm(config.norm, config.n_embd)
        if config.gated:
            self.mlp: nn.Module = GatedFFN(config.n_embd, config.hidden, GATE_KINDS[config.ffn],
                                           bias=config.bias)
        else:
            self.mlp = FFN(config.n_embd, config.hidden, config.activation, bias=config.bias,
                           norm=config.mlp_norm, norm_bias=config.mlp_norm_bias)
        self.mlp_dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """One block: attention then MLP, each added to the residual stream."""
        x = x + self.attn(self.norm1(x))
        return x + self.mlp_dropout(self.mlp(self.norm2(x)))


class GPT(nn.Module):
    """Decoder-only transformer language model with tied input/output embeddings.

    Args:
        config: the model's shape and components.
        seed: seeds the weight initialisation (a private ``torch.Generator``; the global RNG
            is untouched). ``None`` draws from the global RNG.

    Initialisation follows GPT-2/nanoGPT: normal(0, ``init_std``) for linear and embedding
    weights, zero biases, and residual output projections (``attn.proj``, ``mlp.down``)
    scaled by ``1/sqrt(2 n_layer)``.
    """

    def __init__(self, config: GPTConfig, seed: int | None = None) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = (nn.Embedding(config.block_size, config.n_embd)
                    if config.positions == "learned" else None)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.norm_f = make_norm(config.norm, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int | None = None) -> None:
        """(Re-)initialise every weight as described in the class docstring."""
        generator = None
        if seed is not None:
            generator = torch.Generator().manual_seed(int(seed))
        std = self.config.init_std
        residual_std = std / math.sqrt(2 * self.config.n_layer)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                if module is self.lm_head:
                    continue  # tied to wte
                scale = residual_std if name.endswith(("attn.proj", "mlp.down")) else std
                _normal_(module.weight, scale, generator)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.Embedding):
                _normal_(module.weight, std, generator)

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Logits (B, T, vocab) for token ids ``idx`` (B, T) and, given ``targets``, the mean
        next-token cross-entropy (targets ``-1`` are ignored)."""
        length = idx.shape[1]
        if length > self.config.block_size:
            raise ValueError(f"sequence length {length} exceeds block_size {self.config.block_size}")
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(length, device=idx.device))
        x = self.drop(x)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.norm_f(x))
        loss = None
        if targets is not None:
            flat = logits.reshape(-1, logits.shape[-1])
            if flat.dtype in (torch.float16, torch.bfloat16):
                flat = flat.float()  # the softmax of a bf16 autocast run in float32
            loss = F.cross_entropy(flat, targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def num_params(self, embeddings: bool = True) -> int:
        """Number of distinct parameters (the tied head counted once); ``embeddings=False``
        leaves out the token and position embeddings."""
        total = sum(p.numel() for p in self.parameters())
        if not embeddings:
            total -= self.wte.weight.numel()
            total -= self.wpe.weight.numel() if self.wpe is not None else 0
        return total

    def ffn_params(self) -> int:
        """Parameters in all FFN blocks (exact count of :func:`actlab.nn.ffn.ffn_param_count`)."""
        c = self.config
        return c.n_layer * ffn_param_count(c.n_embd, c.hidden, gated=c.gated, bias=c.bias)

    def flops_per_token(self, context: int | None = None) -> int:
        """Forward FLOPs per token at sequence length ``context`` (default ``block_size``).

        Convention of :mod:`actlab.nn.ffn` (a multiply-add is 2 FLOPs, bias adds count,
        activation and norm evaluations do not): per layer the QKV and output projections,
        the attention scores and weighted values over the full ``context`` (``4 T d``; the
        causal mask is not subtracted), the FFN; plus the LM head.
        """
        c = self.config
        t = c.block_size if context is None else int(context)
        d = c.n_embd
        b = 1 if c.bias else 0
        attn = 2 * d * 3 * d + b * 3 * d + 2 * d * d + b * d + 4 * t * d
        ffn = ffn_flops_per_token(d, c.hidden, gated=c.gated, bias=c.bias)
        return c.n_layer * (attn + ffn) + 2 * d * c.vocab_size

    def extra_repr(self) -> str:
        c = self.config
        return (f"layers={c.n_layer}, d={c.n_embd}, heads={c.n_head}, ffn={c.ffn}, "
                f"hidden={c.hidden}, activation={c.activation!r}, norm={c.norm!r}")


def _normal_(weight: Tensor, std: float, generator: torch.Generator | None) -> None:
    # Draw on the CPU with the private generator, then copy to the weight's device/dtype
    # (a weight on the meta device holds no values: nothing to draw).
    if weight.is_meta:
        return
    values = torch.randn(weight.shape, generator=generator, dtype=torch.float32) * std
    weight.copy_(values.to(device=weight.device, dtype=weight.dtype))
