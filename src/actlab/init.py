"""Weight initializers: Xavier, He, PyTorch's default, the fixed-point gain, orthogonal.

Every scheme draws weights of standard deviation ``gain / sqrt(fan)`` (normal) or on
``[-r, r]`` with ``r = sqrt(3) · std`` (uniform), and sets biases to zero:

=================  ======================================  ==============================
scheme             std                                     default gain
=================  ======================================  ==============================
``xavier``         gain · sqrt(2 / (fan_in + fan_out))      1 (pass ``gain=`` for tanh)
``he``             gain / sqrt(fan)                         √2 (He's constant for ReLU)
``torch-default``  gain / sqrt(fan_in)                      1/√3 (``nn.Linear``'s own)
``fixed-point``    gain / sqrt(fan)                         the activation's 1/sqrt(E f²)
``orthogonal``     gain / sqrt(max(fan_in, fan_out))        the activation's fixed-point
=================  ======================================  ==============================

``fan`` is ``fan_in`` or ``fan_out`` by ``mode``. The fan-in of a weight in PyTorch's
``(out, in, *kernel)`` layout is ``shape[1] · prod(kernel)``, never ``shape[0]``.

:func:`recommended_gain` is the fixed-point gain. It equals
``torch.nn.init.calculate_gain`` for ``linear``/``conv``/``identity``, ``relu`` and
``leaky_relu`` (any slope), where PyTorch's value is the fixed point too, and differs where
PyTorch chose another value: ``tanh`` 5/3 vs 1.5925, ``sigmoid`` 1 vs 1.8462, ``selu`` 3/4
vs 1 (SELU's E f² at unit variance is 1 by construction).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import nn

from actlab.config import register_spec_kind
from actlab.errors import ConfigError, did_you_mean

SCHEMES = ("xavier", "he", "torch-default", "fixed-point", "orthogonal")
#: The schemes of ``weight_std(..., convention="handbook")``: also a fixed ``std``.
HANDBOOK_SCHEMES = (*SCHEMES, "std")
CONVENTIONS = ("init", "handbook")
MODES = ("fan_in", "fan_out")
DISTRIBUTIONS = ("normal", "uniform")
# A uniform draw on [-r, r] has std r / sqrt(3): the bound that matches a given std.
UNIFORM_BOUND_PER_STD = math.sqrt(3.0)

# torch.nn.init.calculate_gain names that are linear maps (gain 1 in both conventions).
_LINEAR_NAMES = (
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "identity",
)


def _choice(field: str, value: str, valid: tuple[str, ...]) -> str:
    if value in valid:
        return value
    hint = did_you_mean(str(value), valid, n=3, cutoff=0.4, prefix="; ")
    raise ValueError(f"{field}: unknown value {value!r}{hint} (valid: {', '.join(valid)})")


def fans(shape: torch.Size | tuple[int, ...]) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight of shape ``(out, in, *kernel)``.

    >>> fans((100, 300))
    (300, 100)
    """
    if len(shape) < 2:
        raise ValueError(f"shape: a weight needs at least 2 dimensions, got {tuple(shape)}")
    receptive = math.prod(shape[2:])
    return int(shape[1]) * receptive, int(shape[0]) * receptive


def recommended_gain(nonlinearity: str, param: float | None = None) -> float:
    """The fixed-point gain 1/sqrt(E f(z)²), z ~ N(0, 1), of an activation.

    ``nonlinearity`` is any activation spec (``"silu"``, ``"leaky_relu:slope=0.2"``) or one of
    PyTorch's linear names (``"linear"``, ``"conv2d"`` ...: gain 1). ``param`` is the
    negative slope of ``leaky_relu`` as in ``torch.nn.init.calculate_gain`` (default 0.01).

    >>> round(recommended_gain("relu") ** 2, 12)
    2.0
    """
    if nonlinearity in _LINEAR_NAMES:
        return 1.0
    spec = nonlinearity
    if param is not None:
        if nonlinearity != "leaky_relu":
            raise ValueError(f"param: only leaky_relu takes a param, not {nonlinearity!r}")
        spec = f"leaky_relu:slope={float(param)!r}"
    from actlab.theory.gaussian import gain

    return gain(spec)


def _default_gain(scheme: str, activation: str, handbook: bool = False) -> float:
    if scheme == "xavier":
        return 1.0
    if scheme == "he":
        return math.sqrt(2.0)
    if scheme == "torch-default":
        return 1.0 / math.sqrt(3.0)
    if handbook:
        if scheme == "orthogonal":
            return 1.0
        from actlab.theory import moments

        return float(moments(activation, 1.0).gain)  # fixed-point
    return recommended_gain(activation)  # fixed-point, orthogonal


def weight_std(
    scheme: str,
    fan_in: int,
    fan_out: int,
    activation: str = "relu",
    mode: str = "fan_in",
    gain: float | None = None,
    *,
    std: float | None = None,
    convention: str = "init",
) -> float:
    """Standard deviation of the weights that ``scheme`` draws for a layer with these fans.

    ``convention="init"`` (the default) is the table above, what :func:`initialize_` draws.
    ``convention="handbook"`` is what :mod:`actlab.nn.deep_mlp` draws (the handbook's
    numbers depend on it): it adds the ``std`` scheme (the fixed ``std`` given, > 0);
    ``torch-default`` is ``gain / sqrt(3 fan_in)``, ``nn.Linear``'s own float (the table's
    ``(1/√3) / sqrt(fan_in)`` differs in the last bit, which would move the handbook's
    float64 values); ``orthogonal`` is its entries' average std ``gain / sqrt(fan_in)`` with
    gain 1; the fixed-point gain comes from :func:`actlab.theory.moments`. ``std`` is used
    by the ``std`` scheme only.

    >>> round(weight_std("he", 300, 100), 4)
    0.0816
    """
    convention = _choice("convention", convention, CONVENTIONS)
    handbook = convention == "handbook"
    if handbook and scheme not in HANDBOOK_SCHEMES:
        hint = did_you_mean(scheme, HANDBOOK_SCHEMES, n=3, cutoff=0.3, prefix="; ")
        raise ValueError(f"unknown init scheme {scheme!r}{hint} "
                         f"(valid: {', '.join(HANDBOOK_SCHEMES)})")
    if not handbook:
        scheme = _choice("scheme", scheme, SCHEMES)
    mode = _choice("mode", mode, MODES)
    if scheme == "std":
        if std is None or not std > 0:
            raise ConfigError("std", f"the 'std' scheme needs a standard deviation > 0, got {std}")
        return float(std)
    if handbook and scheme == "torch-default":
        return (1.0 if gain is None else gain) / math.sqrt(3.0 * fan_in)
    if gain is None:
        gain = _default_gain(scheme, activation, handbook)
    if scheme == "xavier":
        return gain * math.sqrt(2.0 / (fan_in + fan_out))
    if scheme == "torch-default":
        return gain / math.sqrt(fan_in)
    if scheme == "orthogonal":
        return gain / math.sqrt(fan_in if handbook else max(fan_in, fan_out))
    return gain / math.sqrt(fan_in if mode == "fan_in" else fan_out)


def weight_bound(
    scheme: str,
    fan_in: int,
    fan_out: int,
    activation: str = "relu",
    mode: str = "fan_in",
    gain: float | None = None,
) -> float:
    """Bound ``r`` of the uniform distribution on ``[-r, r]`` with :func:`weight_std`'s std (√3 · std)."""
    return UNIFORM_BOUND_PER_STD * weight_std(scheme, fan_in, fan_out, activation, mode, gain)


def _layers(module: nn.Module) -> Iterator[nn.Module]:
    for sub in module.modules():
        if isinstance(sub, (nn.Linear, nn.modules.conv._ConvNd)):
            yield sub


def initialize_(
    module: nn.Module,
    scheme: str,
    activation: str = "relu",
    mode: str = "fan_in",
    distribution: str = "normal",
    gain: float | None = None,
    generator: torch.Generator | None = None,
) -> nn.Module:
    """Initialize, in place, every ``nn.Linear`` and ``nn.Conv*`` in ``module``; zero their biases.

    ``scheme`` is one of :data:`SCHEMES`, ``activation`` the spec whose gain
    ``fixed-point``/``orthogonal`` use, ``mode`` ``fan_in`` or ``fan_out`` (``he`` and
    ``fixed-point``), ``distribution`` ``normal`` or ``uniform`` (ignored by ``orthogonal``),
    ``gain`` overrides the scheme's default gain, ``generator`` makes the draw reproducible.
    Other modules (norms, embeddings) are left alone. Returns ``module``.

    >>> layer = initialize_(nn.Linear(300, 100), "he", generator=torch.Generator().manual_seed(0))
    >>> float(layer.bias.abs().max())
    0.0
    """
    scheme = _choice("scheme", scheme, SCHEMES)
    mode = _choice("mode", mode, MODES)
    distribution = _choice("distribution", distribution, DISTRIBUTIONS)
    if gain is None:
        gain = _default_gain(scheme, activation)  # resolve the activation once, not per layer
    with torch.no_grad():
        for layer in _layers(module):
            weight = layer.weight
            fan_in, fan_out = fans(weight.shape)
            if scheme == "orthogonal":
                nn.init.orthogonal_(weight, gain=gain, generator=generator)
            else:
                std = weight_std(scheme, fan_in, fan_out, activation, mode, gain)
                if distribution == "normal":
                    weight.normal_(0.0, std, generator=generator)
                else:
                    bound = UNIFORM_BOUND_PER_STD * std
                    weight.uniform_(-bound, bound, generator=generator)
            if layer.bias is not None:
                layer.bias.zero_()
    return module


def check_scheme(name: str) -> None:
    """``ValueError`` unless ``name`` is one of :data:`SCHEMES` (config fields ``spec="init"``)."""
    if name not in SCHEMES:
        raise ValueError(f"must be one of {', '.join(SCHEMES)}, got {name!r}"
                         f"{did_you_mean(name, SCHEMES, prefix='; ')}")


register_spec_kind("init", check_scheme)
