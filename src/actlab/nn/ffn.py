"""Position-wise feed-forward blocks: the plain FFN and gated FFNs (GLU, ReGLU, GEGLU, SwiGLU).

Plain:  ``down(act(up(x)))``                      width ``hidden`` = m.
Gated:  ``down(act(gate_proj(x)) * up(x))``       width ``hidden`` = g.

Without biases a plain FFN has ``2 d m`` weights and a gated one ``3 d g``, so
:func:`matched_width` gives ``g = 2m/3`` (rounded) for a parameter-matched comparison.

FLOP convention of :func:`ffn_flops_per_token`: one multiply-add counts as 2 FLOPs, so a
``d_in -> d_out`` matrix-vector product is ``2 d_in d_out``; a bias add is ``d_out``; the
gating product is ``g``. Activation function evaluations are not counted (their cost in
FLOPs is not well defined: a GELU is one erf, a ReLU one comparison). This is the count
``torch.utils.flop_counter`` gives for the matrix products, plus the elementwise terms.
"""

from __future__ import annotations

from torch import Tensor, nn

from actlab.activations.spec_activation import activation, make_activation
from actlab.errors import ConfigError, config_check, did_you_mean
from actlab.nn.norm_spec import parse_norm
from actlab.nn.norms import make_norm

__all__ = [
    "FFN",
    "FFN_KINDS",
    "GATE_KINDS",
    "GatedFFN",
    "checked_block_parts",
    "ffn_flops_per_token",
    "ffn_param_count",
    "gated_ffn",
    "matched_width",
]

# The named gated variants and the gate activation each uses (Shazeer 2020).
GATE_KINDS: dict[str, str] = {"glu": "sigmoid", "reglu": "relu", "geglu": "gelu",
                              "swiglu": "silu"}
#: What a transformer block's ``ffn`` field may be: the plain FFN or a named gated one.
FFN_KINDS = ("plain", *GATE_KINDS)


def checked_block_parts(ffn: str, norm: str, activation_spec: str | None = None) -> str:
    """Check a transformer config's ``ffn`` kind, ``norm`` spec and (for a plain FFN)
    ``activation`` spec; return the ffn kind in lower case.

    Raises :class:`~actlab.errors.ConfigError` naming the field and the closest valid names.
    """
    kind = ffn.lower()
    if kind not in FFN_KINDS:
        hint = did_you_mean(kind, FFN_KINDS, n=2, prefix="; ")
        raise ConfigError("ffn", f"unknown kind {kind!r}{hint} (valid: {', '.join(FFN_KINDS)})")
    if norm is not None:
        config_check("norm", parse_norm, norm)
    if activation_spec is not None and kind == "plain":
        config_check("activation", activation, activation_spec)
    return kind


class FFN(nn.Module):
    """Plain two-layer feed-forward block ``down(act(norm(up(x))))``.

    Args:
        d_model: input and output width d.
        hidden: intermediate width m.
        activation: any activation spec string (see :func:`actlab.activation`) or a module
            (deep-copied, see :func:`~actlab.activations.spec_activation.make_activation`).
        bias: biases on both projections.
        norm: a :func:`~actlab.nn.norms.make_norm` name for a norm over the m pre-activations
            of each token (``"none"``: no norm); ``"percentile:q=0.7"`` is Percentile
            Centering, which sets the activation's sparsity ("Bug or Feature²" §4).
        norm_bias: the norm's learned shift (off keeps a Percentile Centering level fixed).
    """

    def __init__(self, d_model: int, hidden: int, activation: str | nn.Module = "gelu",
                 bias: bool = True, norm: str = "none", norm_bias: bool = True) -> None:
        super().__init__()
        _check_widths(d_model, hidden)
        self.up = nn.Linear(d_model, hidden, bias=bias)
        self.norm = make_norm(norm, hidden, bias=norm_bias)
        self.act = make_activation(activation)
        self.down = nn.Linear(hidden, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block to ``x`` of shape (..., d_model)."""
        return self.down(self.act(self.norm(self.up(x))))


class GatedFFN(nn.Module):
    """Gated feed-forward block ``down(act(gate_proj(x)) * up(x))``.

    Args:
        d_model: input and output width d.
        hidden: intermediate width g (use :func:`matched_width` to match a plain FFN).
        gate: activation spec of the gate branch; "sigmoid" is GLU, "relu" ReGLU, "gelu"
            GEGLU, "silu" SwiGLU; any other spec works too, or a module (deep-copied).
        bias: biases on the three projections (off by default, as in the GLU-variants paper).
    """

    def __init__(self, d_model: int, hidden: int, gate: str | nn.Module = "silu",
                 bias: bool = False) -> None:
        super().__init__()
        _check_widths(d_model, hidden)
        self.gate_proj = nn.Linear(d_model, hidden, bias=bias)
        self.up = nn.Linear(d_model, hidden, bias=bias)
        self.act = make_activation(gate)
        self.down = nn.Linear(hidden, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block to ``x`` of shape (..., d_model)."""
        return self.down(self.act(self.gate_proj(x)) * self.up(x))

    @classmethod
    def glu(cls, d_model: int, hidden: int, bias: bool = False) -> GatedFFN:
        """GLU: sigmoid gate."""
        return cls(d_model, hidden, GATE_KINDS["glu"], bias)

    @classmethod
    def reglu(cls, d_model: int, hidden: int, bias: bool = False) -> GatedFFN:
        """ReGLU: ReLU gate."""
        return cls(d_model, hidden, GATE_KINDS["reglu"], bias)

    @classmethod
    def geglu(cls, d_model: int, hidden: int, bias: bool = False) -> GatedFFN:
        """GEGLU: exact GELU gate."""
        return cls(d_model, hidden, GATE_KINDS["geglu"], bias)

    @classmethod
    def swiglu(cls, d_model: int, hidden: int, bias: bool = False) -> GatedFFN:
        """SwiGLU: SiLU gate."""
        return cls(d_model, hidden, GATE_KINDS["swiglu"], bias)


def gated_ffn(kind: str, d_model: int, hidden: int, bias: bool = False) -> GatedFFN:
    """Build a named gated FFN: ``kind`` is one of "glu", "reglu", "geglu", "swiglu"."""
    key = kind.lower()
    if key not in GATE_KINDS:
        from actlab.errors import did_you_mean

        hint = did_you_mean(key, GATE_KINDS, n=2, quote=True, prefix="; ")
        raise ValueError(f"unknown gated FFN kind {kind!r}{hint} (valid: {sorted(GATE_KINDS)})")
    return GatedFFN(d_model, hidden, GATE_KINDS[key], bias)


def matched_width(d_model: int, hidden: int, multiple_of: int = 1, *, bias: bool = False) -> int:
    """Gated width g whose FFN has the parameter count of a plain FFN of width ``hidden``.

    Without biases ``3 d g = 2 d m`` gives ``g = 2m/3``; with biases on both kinds
    ``3dg + 2g + d = 2dm + m + d`` gives ``g = m (2d + 1) / (3d + 2)``. The result is
    rounded to the nearest multiple of ``multiple_of`` (halves up), at least one multiple.
    Example: ``matched_width(6, 12) == 8`` (both have 144 weights).
    """
    _check_widths(d_model, hidden)
    if multiple_of < 1:
        raise ValueError(f"multiple_of must be >= 1, got {multiple_of}")
    if bias:
        exact = hidden * (2 * d_model + 1) / (3 * d_model + 2)
    else:
        exact = 2 * hidden / 3
    units = int(exact / multiple_of + 0.5)
    return max(1, units) * multiple_of


def ffn_param_count(d_model: int, hidden: int, *, gated: bool = False,
                    bias: bool | None = None) -> int:
    """Exact number of parameters of :class:`FFN` (``gated=False``) or :class:`GatedFFN`.

    ``bias=None`` uses each class's default (plain: with biases, gated: without).
    Activations with learnable parameters (prelu, noisy_relu, learnable silu) add theirs.
    """
    _check_widths(d_model, hidden)
    with_bias = (not gated) if bias is None else bias
    matrices = 3 if gated else 2
    count = matrices * d_model * hidden
    if with_bias:
        count += (matrices - 1) * hidden + d_model
    return count


def ffn_flops_per_token(d_model: int, hidden: int, *, gated: bool = False,
                        bias: bool | None = None) -> int:
    """Exact forward FLOPs per token (one position) of a plain or gated FFN.

    A multiply-add is 2 FLOPs: each projection costs ``2 d_in d_out``, each bias add
    ``d_out``, the gating product ``hidden``; activation evaluations are not counted.
    ``bias=None`` uses each class's default (plain: with biases, gated: without).
    """
    _check_widths(d_model, hidden)
    with_bias = (not gated) if bias is None else bias
    matrices = 3 if gated else 2
    flops = matrices * 2 * d_model * hidden
    if with_bias:
        flops += (matrices - 1) * hidden + d_model
    if gated:
        flops += hidden
    return flops


def _check_widths(d_model: int, hidden: int) -> None:
    for label, value in (("d_model", d_model), ("hidden", hidden)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive integer, got {value!r}")
