"""Which spec is this module? The inverse of :func:`~actlab.activations.spec_activation.activation`.

:func:`spec_of` names the spec of an actlab activation module and of the activation modules
of ``torch.nn``, ``transformers.activations`` and ``timm.layers`` that compute an actlab
function, with their settings (a leaky slope, PReLU's learned weight, a Hardtanh's range), so
``activation(spec_of(m))`` computes what ``m`` computes. The other libraries are recognised by
their classes' module and name: nothing here imports transformers or timm.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from actlab.activations.base import Activation
from actlab.activations.grammar import ParsedSpec, parse_spec
from actlab.activations.special import LearnableSiLUCore, PReLUCore, XIELUCore
from actlab.errors import SpecError

Namer = Callable[[Any], str]


def _number(value: float | Tensor) -> str:
    """The shortest decimal that gives ``value`` back in its own precision (float32 weights
    as ``0.1``, not ``0.10000000149011612``); the module built from it holds the same value."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise SpecError(f"a spec holds one number per option, not a tensor of {value.numel()}")
        if value.dtype == torch.float64:
            return repr(float(value))
        # float32 and narrower (bfloat16, float16) are exact in float32
        return np.format_float_positional(np.float32(float(value)), unique=True, trim="0")
    return repr(float(value))


def _softplus_spec(m: nn.Softplus) -> str:
    if m.threshold != 20:
        raise SpecError(f"{m!r}: actlab's softplus keeps PyTorch's linear shortcut at the "
                        f"default threshold 20 only, not {m.threshold}")
    return f"softplus:beta={_number(m.beta)}"


def _prelu_spec(m: nn.PReLU) -> str:
    if m.weight.numel() != 1:
        raise SpecError(f"{m!r}: a PReLU with one slope per channel (num_parameters="
                        f"{m.weight.numel()}) has no spec; actlab's prelu learns one slope")
    return f"prelu:slope={_number(m.weight.detach().reshape(()))}"


def _gelu_spec(m: nn.GELU) -> str:
    return "gelu:tanh" if m.approximate == "tanh" else "gelu"


# torch.nn classes, looked up along the module's class hierarchy (ReLU6 before Hardtanh).
_TORCH: dict[type, Namer] = {
    nn.ReLU: lambda m: "relu",
    nn.ReLU6: lambda m: "relu6",
    nn.LeakyReLU: lambda m: f"leaky_relu:slope={_number(m.negative_slope)}",
    nn.PReLU: _prelu_spec,
    nn.ELU: lambda m: f"elu:alpha={_number(m.alpha)}",
    nn.SELU: lambda m: "selu",
    nn.CELU: lambda m: f"celu:alpha={_number(m.alpha)}",
    nn.GELU: _gelu_spec,
    nn.SiLU: lambda m: "silu",
    nn.Mish: lambda m: "mish",
    nn.Hardswish: lambda m: "hardswish",
    nn.Hardsigmoid: lambda m: "hardsigmoid",
    nn.Hardtanh: lambda m: f"hardtanh:min_val={_number(m.min_val)}:max_val={_number(m.max_val)}",
    nn.Sigmoid: lambda m: "sigmoid",
    nn.Tanh: lambda m: "tanh",
    nn.Softplus: _softplus_spec,
    nn.Softsign: lambda m: "softsign",
    nn.LogSigmoid: lambda m: "logsigmoid",
    nn.Tanhshrink: lambda m: "tanhshrink",
    nn.Identity: lambda m: "identity",
}

# The lowest GELU value; a lower clip of transformers' ClippedGELU below it changes nothing.
_GELU_MIN = -0.17


def _clipped_gelu_spec(m: Any) -> str:
    if m.min > _GELU_MIN or m.max <= 0:
        raise SpecError(f"{type(m).__name__}(min={m.min}, max={m.max}): actlab clips from "
                        f"above only (clip=C, C > 0), and GELU stays above {_GELU_MIN}")
    return f"gelu:clip={_number(m.max)}"


def _xielu_spec(m: Any) -> str:
    with torch.no_grad():  # as its forward computes them, in the parameters' precision
        alpha_p = torch.nn.functional.softplus(m.alpha_p.detach())
        alpha_n = m.beta.detach() + torch.nn.functional.softplus(m.alpha_n.detach())
    return (f"xielu:alpha_p={_number(alpha_p.reshape(()))}:alpha_n={_number(alpha_n.reshape(()))}"
            f":beta={_number(m.beta.detach().reshape(()))}:eps={_number(m.eps.detach().reshape(()))}")


_HF = "transformers.activations."
_TIMM = "timm.layers.activations."
_TIMM_ME = "timm.layers.activations_me."

# transformers.activations and timm.layers classes without settings, by "module.ClassName".
_FIXED: dict[str, str] = {
    _HF + "GELUActivation": "gelu",  # its C and its Python form both compute x Φ(x)
    _HF + "GELUTanh": "gelu:tanh",
    _HF + "NewGELUActivation": "gelu:tanh",
    _HF + "FastGELUActivation": "gelu:tanh",
    _HF + "AccurateGELUActivation": "gelu:tanh",
    _HF + "QuickGELUActivation": "silu:beta=1.702",
    _HF + "SiLUActivation": "silu",
    _HF + "MishActivation": "mish",
    _HF + "LinearActivation": "identity",
    _HF + "LaplaceActivation": "laplace",
    _HF + "ReLUSquaredActivation": "relu2",
    _HF + "SqrtSoftplusActivation": "sqrtsoftplus",
    _TIMM + "Swish": "silu", _TIMM + "Mish": "mish", _TIMM + "Sigmoid": "sigmoid",
    _TIMM + "Tanh": "tanh", _TIMM + "HardSwish": "hardswish",
    _TIMM + "HardSigmoid": "hardsigmoid", _TIMM + "HardMish": "hard_mish",
    _TIMM + "GELU": "gelu", _TIMM + "GELUTanh": "gelu:tanh",
    _TIMM + "QuickGELU": "silu:beta=1.702",
    _TIMM_ME + "SwishMe": "silu", _TIMM_ME + "MishMe": "mish",
    _TIMM_ME + "HardSwishMe": "hardswish", _TIMM_ME + "HardSigmoidMe": "hardsigmoid",
    _TIMM_ME + "HardMishMe": "hard_mish",
}
# ... and those whose settings enter the spec.
_BY_NAME: dict[str, Namer] = {
    _HF + "ClippedGELUActivation": _clipped_gelu_spec,
    _HF + "XIELUActivation": _xielu_spec,
    _TIMM + "PReLU": _prelu_spec,  # nn.PReLU with an inplace argument, forward F.prelu
}


def _learned(module: Activation) -> str:
    """The spec of an actlab module with its learnable parameters at their values now (the
    spec's own numbers where a parameter has not moved from them)."""
    parsed: ParsedSpec = module.parsed  # type: ignore[attr-defined]
    core = getattr(module, "core", None)
    params = parsed.params
    now: dict[str, str] = {}
    if isinstance(core, PReLUCore) and core.weight.numel() == 1:
        weight = core.weight.detach().cpu().reshape(())
        if weight != torch.tensor(params["slope"], dtype=weight.dtype):
            now["slope"] = _number(weight)
    elif isinstance(core, LearnableSiLUCore):
        beta = core.beta.detach().cpu()
        if beta != torch.tensor(params["beta"], dtype=beta.dtype):
            now["beta"] = _number(beta)
    elif isinstance(core, XIELUCore):
        built = XIELUCore(**params)  # the raw parameters the spec's own numbers give
        if not (torch.equal(built.alpha_p, core.alpha_p.detach().cpu())
                and torch.equal(built.alpha_n, core.alpha_n.detach().cpu())):
            # float64 values whose inverse softplus rounds back to the same float32 parameters
            now["alpha_p"], now["alpha_n"] = (repr(v) for v in core.coefficients)
    if not now:
        return parsed.canonical
    options = {**parsed.options, **{k: float(v) for k, v in now.items()}}
    return parse_spec(ParsedSpec(parsed.name, options, parsed.flags).canonical).canonical


def spec_of(module: nn.Module | type[nn.Module]) -> str:
    """The spec string of an activation module (or class), the inverse of ``activation``.

    * an actlab activation: its canonical spec, with learnable parameters (``prelu``'s slope,
      ``silu:learnable``'s beta, ``xielu``'s coefficients) at their values now;
    * a ``torch.nn`` activation with an actlab function: ``nn.GELU(approximate="tanh")`` gives
      ``"gelu:tanh"``, ``nn.LeakyReLU(0.2)`` ``"leaky_relu:slope=0.2"``, ``nn.PReLU()`` its
      learned slope;
    * a ``transformers.activations`` or ``timm.layers`` activation: ``NewGELUActivation``
      gives ``"gelu:tanh"``, ``QuickGELUActivation`` ``"silu:beta=1.702"``, ...

    A class is built with its defaults first. ``activation(spec_of(m))`` computes what ``m``
    computes (up to the float rounding of ``gelu_fast``'s constant and of a learned
    xIELU coefficient). Raises :class:`~actlab.errors.SpecError` for a module with no spec
    (``nn.GLU``, ``nn.Softmax``, a per-channel ``nn.PReLU``), naming what it is.
    """
    if isinstance(module, type):
        module = _instance(module)
    if not isinstance(module, nn.Module):
        raise SpecError(f"spec_of: expected an nn.Module or its class, got {module!r}")
    if isinstance(module, Activation) and isinstance(getattr(module, "parsed", None), ParsedSpec):
        return _learned(module)
    if isinstance(module, Activation) and module.spec:
        return parse_spec(module.spec).canonical
    for cls in type(module).__mro__:
        qualified = f"{cls.__module__}.{cls.__qualname__}"
        namer = _TORCH.get(cls) or _BY_NAME.get(qualified)
        if qualified in _FIXED or namer is not None:
            # a subclass is named as its known base only if it computes what the base does
            if type(module).forward is not cls.forward:
                raise SpecError(f"spec_of: {type(module).__name__} derives from "
                                f"{cls.__name__} but has its own forward; actlab cannot tell "
                                "what it computes")
            return parse_spec(_FIXED[qualified] if qualified in _FIXED
                              else namer(module)).canonical
    raise SpecError(f"spec_of: {type(module).__name__} ({type(module).__module__}) has no "
                    "actlab spec; the torch.nn ones that do: "
                    + ", ".join(sorted(c.__name__ for c in _TORCH)))


def _instance(cls: type) -> nn.Module:
    """``cls()``, or a clear error when the class needs arguments."""
    if not issubclass(cls, nn.Module):
        raise SpecError(f"expected an activation module or class, got the class {cls.__name__}")
    try:
        return cls()
    except TypeError as exc:
        raise SpecError(f"{cls.__name__}() cannot be built without arguments ({exc}); pass "
                        "an instance") from None


def as_actlab(module: nn.Module | type[nn.Module], build: Callable[[str], Activation]
              ) -> Activation:
    """The actlab module computing what ``module`` (or an instance of the class) computes:
    a copy of an actlab module (its state kept), else ``build(spec_of(module))``."""
    if isinstance(module, type):
        module = _instance(module)
    if isinstance(module, Activation):
        return copy.deepcopy(module)
    return build(spec_of(module))
