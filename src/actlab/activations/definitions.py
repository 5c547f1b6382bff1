"""What an activation is to actlab (:class:`ActivationDef`) and the built-in ones.

Every name a spec can start with has one :class:`ActivationDef`: its elementwise reference
math and derivative, its numeric options and flags with their defaults and checks, its output
range, and the kernel (or ``core`` module) the built module runs. The built-ins are defined
here; ``_REGISTRY`` holds them and the ones users add with
:func:`actlab.activations.registry.register_activation`, ``_ALIASES`` the other names of a
built-in (``swish``). The spec grammar (:mod:`actlab.activations.grammar`) reads this table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.activations import elementwise as ew
from actlab.activations.special import (
    NoisyReLUCore,
    PReLUCore,
    XIELUCore,
    relu_output_writable,
    sugar,
)

ElementFn = Callable[..., Tensor]

# Options accepted on every name; value-less ones are flags.
COMMON_OPTIONS = ("clip", "shift", "q", "adaptive", "topk", "gaussian", "gaussian_shift",
                  "channel", "momentum", "freeze_after")
COMMON_FLAGS = ("adaptive", "gaussian", "gaussian_shift", "channel")


@dataclass(frozen=True)
class ActivationDef:
    """A registered activation.

    ``fn(x, **params)`` and ``derivative(x, **params)`` are the elementwise reference math
    (``params`` are the numeric options and ``flags``, flags passed as booleans);
    ``module_flags`` change only the module (``learnable``) and are not passed.
    ``fast(x, **params)`` is the kernel the module uses (defaults to ``fn``);
    ``inplace_ok`` says its output may be modified in place without breaking autograd
    (true when its backward does not save the output); ``fast_inplace`` is an alternative
    kernel whose output may be, used when options follow the function. ``core`` builds an ``nn.Module``
    for activations with parameters or train/eval behaviour. ``bounds`` is the output range,
    or a function of the parameters giving it; ``validate(params)`` returns what is wrong
    with a combination of parameters (``None`` when nothing), for rules that span several
    (hardtanh's ``min_val < max_val``).
    """

    name: str
    fn: ElementFn
    derivative: ElementFn | None = None
    params: dict[str, float | None] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    module_flags: tuple[str, ...] = ()
    bounded: bool = False
    bounds: tuple[float, float] | Callable[..., tuple[float, float]] | None = None
    fast: ElementFn | None = None
    inplace_ok: bool = False
    fast_inplace: ElementFn | None = None
    core: Callable[..., nn.Module] | None = None
    checks: dict[str, Callable[[float], bool]] = field(default_factory=dict)
    check_text: dict[str, str] = field(default_factory=dict)
    builtin: bool = False
    description: str = ""
    validate: Callable[[dict[str, Any]], str | None] | None = None

    @property
    def option_names(self) -> tuple[str, ...]:
        """Every option and flag valid on this name."""
        return tuple(self.params) + self.flags + self.module_flags + COMMON_OPTIONS


_REGISTRY: dict[str, ActivationDef] = {}
# The other names of a built-in: each stands for a spec (a name, or a name with options), so
# the names of torch.nn, timm's get_act_layer and transformers' ACT2FN resolve to the same
# function (tests/test_activation_names.py checks each against its module or source formula).
_ALIASES: dict[str, str] = {
    "swish": "silu",
    "log_sigmoid": "logsigmoid",
    # timm (timm/layers/create_act.py, _ACT_LAYER_DEFAULT)
    "gelu_tanh": "gelu:tanh",
    "quick_gelu": "silu:beta=1.702",  # x σ(1.702 x), in timm and transformers alike
    "hard_sigmoid": "hardsigmoid",
    "hard_swish": "hardswish",
    # transformers (transformers/activations.py, ACT2CLS)
    "gelu_python": "gelu",
    "gelu_new": "gelu:tanh",
    "gelu_pytorch_tanh": "gelu:tanh",
    "gelu_python_tanh": "gelu:tanh",
    "gelu_accurate": "gelu:tanh",
    "gelu_fast": "gelu:tanh",  # its constant 0.7978845608 is sqrt(2/pi) to 10 decimals
    "gelu_10": "gelu:clip=10",  # clip(gelu, -10, 10); GELU never goes below -0.17
    "linear": "identity",
}


def _finite(v: float) -> bool:
    return math.isfinite(v)


def _positive(v: float) -> bool:
    return math.isfinite(v) and v > 0


def _nonzero(v: float) -> bool:
    return math.isfinite(v) and v != 0


def _hardtanh_rule(params: dict[str, Any]) -> str | None:
    if params["min_val"] < params["max_val"]:
        return None
    return f"min_val ({params['min_val']}) must be below max_val ({params['max_val']})"


def _xielu_rule(params: dict[str, Any]) -> str | None:
    # the negative coefficient is stored as beta + softplus(.), so it must exceed beta
    if params["alpha_n"] > params["beta"]:
        return None
    return f"alpha_n ({params['alpha_n']}) must exceed beta ({params['beta']})"


def _add(defn: ActivationDef) -> None:
    _REGISTRY[defn.name] = defn


# ---------------------------------------------------------------------------- built-ins
def _fast_gelu(x: Tensor, tanh: bool = False) -> Tensor:
    return F.gelu(x, approximate="tanh" if tanh else "none")


def _fast_gelu2(x: Tensor, tanh: bool = False) -> Tensor:
    return _fast_gelu(x, tanh).square()


def _fast_silu(x: Tensor, beta: float = 1.0) -> Tensor:
    return F.silu(x) if beta == 1.0 else x * torch.sigmoid(beta * x)


def _fast_softplus(x: Tensor, beta: float = 1.0) -> Tensor:
    # PyTorch's threshold shortcut (x for beta*x > 20) is kept for speed; it differs
    # from the exact value by at most exp(-20) ~ 2e-9.
    return F.softplus(x, beta=beta)


def _fast_relu2(x: Tensor) -> Tensor:
    return F.relu(x).square()


def _fast_selu(x: Tensor) -> Tensor:
    return F.selu(x)


def _fast_sugar(x: Tensor, alpha: float = 1.67) -> Tensor:
    return sugar(x, alpha)


def _relu_ignoring_params(x: Tensor, **_: Any) -> Tensor:
    return ew.relu(x)


def _d_relu_ignoring_params(x: Tensor, **_: Any) -> Tensor:
    return ew.d_relu(x)


def _builtins() -> None:
    _add(ActivationDef("relu", ew.relu, ew.d_relu, fast=F.relu, fast_inplace=relu_output_writable,
                       builtin=True, description="max(0, x)"))
    _add(ActivationDef(
        "leaky_relu", ew.leaky_relu, ew.d_leaky_relu, params={"slope": 0.01},
        fast=lambda x, slope=0.01: F.leaky_relu(x, slope), inplace_ok=True,
        checks={"slope": _finite}, check_text={"slope": "a finite number"}, builtin=True,
        description="x if x > 0 else slope*x"))
    _add(ActivationDef(
        "prelu", ew.leaky_relu, ew.d_leaky_relu, params={"slope": 0.25},
        core=lambda slope=0.25: PReLUCore(slope), inplace_ok=True,
        checks={"slope": _finite}, check_text={"slope": "a finite number"}, builtin=True,
        description="leaky ReLU with a learnable slope (initial value `slope`)"))
    _add(ActivationDef(
        "elu", ew.elu, ew.d_elu, params={"alpha": 1.0},
        fast=lambda x, alpha=1.0: F.elu(x, alpha), inplace_ok=True,
        checks={"alpha": _finite}, check_text={"alpha": "a finite number"}, builtin=True,
        description="x if x > 0 else alpha*(exp(x)-1)"))
    _add(ActivationDef("selu", ew.selu, ew.d_selu, fast=_fast_selu, inplace_ok=True,
                       builtin=True, description="scaled ELU (self-normalising)"))
    _add(ActivationDef("gelu", ew.gelu, ew.d_gelu, flags=("tanh",), fast=_fast_gelu,
                       inplace_ok=True, builtin=True,
                       description="x*Phi(x); flag `tanh` for the tanh approximation"))
    _add(ActivationDef(
        "silu", ew.silu, ew.d_silu, params={"beta": 1.0}, module_flags=("learnable",),
        fast=_fast_silu, inplace_ok=True, checks={"beta": _finite},
        check_text={"beta": "a finite number"}, builtin=True,
        description="x*sigmoid(beta*x) (alias swish); flag `learnable` makes beta a parameter"))
    _add(ActivationDef("sigmoid", ew.sigmoid, ew.d_sigmoid, bounded=True, bounds=(0.0, 1.0),
                       fast=torch.sigmoid,
                       builtin=True, description="1/(1+exp(-x))"))
    _add(ActivationDef("tanh", ew.tanh, ew.d_tanh, bounded=True, bounds=(-1.0, 1.0),
                       fast=torch.tanh,
                       builtin=True, description="tanh(x)"))
    _add(ActivationDef(
        "softplus", ew.softplus, ew.d_softplus, params={"beta": 1.0}, fast=_fast_softplus,
        inplace_ok=True, checks={"beta": _positive}, check_text={"beta": "> 0 and finite"},
        builtin=True, description="log(1+exp(beta*x))/beta"))
    _add(ActivationDef("mish", ew.mish, ew.d_mish, fast=F.mish, inplace_ok=True, builtin=True,
                       description="x*tanh(softplus(x))"))
    _add(ActivationDef("relu2", ew.relu2, ew.d_relu2, fast=_fast_relu2, inplace_ok=True,
                       builtin=True, description="max(0, x)^2"))
    _add(ActivationDef("gelu2", ew.gelu2, ew.d_gelu2, flags=("tanh",), fast=_fast_gelu2,
                       inplace_ok=True, builtin=True, description="GELU(x)^2"))
    _add(ActivationDef("identity", ew.identity, ew.d_identity, fast=ew.identity,
                       inplace_ok=True, builtin=True, description="x"))
    _add(ActivationDef(
        "noisy_relu", _relu_ignoring_params, _d_relu_ignoring_params, params={"p": None, "c": 1.0, "alpha": 1.0},
        core=lambda p=None, c=1.0, alpha=1.0: NoisyReLUCore(p, c, alpha), inplace_ok=True,
        checks={"p": _finite, "c": _finite, "alpha": _finite},
        check_text={"p": "a finite number", "c": "a finite number", "alpha": "a finite number"},
        builtin=True,
        description="ReLU plus half-normal noise on negative inputs in training mode "
        "(learnable p; constants c, alpha); plain ReLU in eval mode"))
    _add(ActivationDef(
        "sugar", _relu_ignoring_params, ew.sugar_surrogate, params={"alpha": 1.67},
        fast=_fast_sugar, inplace_ok=True, checks={"alpha": _finite},
        check_text={"alpha": "a finite number"}, builtin=True,
        description="ReLU forward, B-SiLU surrogate gradient backward"))


def _fast_hard_mish(x: Tensor) -> Tensor:
    return 0.5 * x * (x + 2.0).clamp(min=0.0, max=2.0)  # timm's hard_mish, op for op


def _fast_laplace(x: Tensor, mu: float = 0.707107, sigma: float = 0.282095) -> Tensor:
    # transformers' LaplaceActivation, op for op
    return 0.5 * (1.0 + torch.erf((x - mu).div(sigma * math.sqrt(2.0))))


def _fast_sqrtsoftplus(x: Tensor) -> Tensor:
    return F.softplus(x).sqrt()  # transformers' SqrtSoftplusActivation (threshold 20 kept)


def _xielu_core(alpha_p: float = 0.8, alpha_n: float = 0.8, beta: float = 0.5,
                eps: float = -1e-6) -> nn.Module:
    return XIELUCore(alpha_p, alpha_n, beta, eps)


def _ecosystem_builtins() -> None:
    """The elementwise activations of torch.nn, timm and transformers that the first set
    lacks; their other names are in ``_ALIASES``."""
    _add(ActivationDef("relu6", ew.relu6, ew.d_relu6, bounded=True, bounds=(0.0, 6.0),
                       fast=F.relu6, inplace_ok=True, builtin=True,
                       description="min(max(0, x), 6)"))
    _add(ActivationDef(
        "hardtanh", ew.hardtanh, ew.d_hardtanh, params={"min_val": -1.0, "max_val": 1.0},
        bounded=True, bounds=lambda min_val=-1.0, max_val=1.0: (min_val, max_val),
        fast=lambda x, min_val=-1.0, max_val=1.0: F.hardtanh(x, min_val, max_val),
        inplace_ok=True, checks={"min_val": _finite, "max_val": _finite},
        check_text={"min_val": "a finite number", "max_val": "a finite number"},
        validate=_hardtanh_rule, builtin=True, description="x clamped to [min_val, max_val]"))
    _add(ActivationDef("hardsigmoid", ew.hardsigmoid, ew.d_hardsigmoid, bounded=True,
                       bounds=(0.0, 1.0), fast=F.hardsigmoid, inplace_ok=True, builtin=True,
                       description="relu6(x + 3) / 6 (alias hard_sigmoid)"))
    _add(ActivationDef("hardswish", ew.hardswish, ew.d_hardswish, fast=F.hardswish,
                       inplace_ok=True, builtin=True,
                       description="x relu6(x + 3) / 6 (alias hard_swish)"))
    _add(ActivationDef("hard_mish", ew.hard_mish, ew.d_hard_mish, fast=_fast_hard_mish,
                       inplace_ok=True, builtin=True,
                       description="timm's hard Mish: x clamp(x + 2, 0, 2) / 2"))
    _add(ActivationDef("softsign", ew.softsign, ew.d_softsign, bounded=True,
                       bounds=(-1.0, 1.0), fast=F.softsign, inplace_ok=True, builtin=True,
                       description="x / (1 + |x|)"))
    _add(ActivationDef("logsigmoid", ew.logsigmoid, ew.d_logsigmoid, fast=F.logsigmoid,
                       inplace_ok=True, builtin=True,
                       description="log sigmoid(x) (alias log_sigmoid)"))
    _add(ActivationDef("tanhshrink", ew.tanhshrink, ew.d_tanhshrink, fast=F.tanhshrink,
                       inplace_ok=True, builtin=True, description="x - tanh(x)"))
    _add(ActivationDef(
        "celu", ew.celu, ew.d_celu, params={"alpha": 1.0},
        fast=lambda x, alpha=1.0: F.celu(x, alpha), inplace_ok=True,
        checks={"alpha": _nonzero}, check_text={"alpha": "a finite non-zero number"},
        builtin=True, description="x if x > 0 else alpha*(exp(x/alpha)-1)"))
    _add(ActivationDef(
        "laplace", ew.laplace, ew.d_laplace, params={"mu": 0.707107, "sigma": 0.282095},
        bounded=True, bounds=(0.0, 1.0), fast=_fast_laplace, inplace_ok=True,
        checks={"mu": _finite, "sigma": _positive},
        check_text={"mu": "a finite number", "sigma": "> 0 and finite"}, builtin=True,
        description="normal CDF of (x - mu)/sigma (transformers' laplace)"))
    # sqrt's backward reads its output: not writable in place
    _add(ActivationDef("sqrtsoftplus", ew.sqrtsoftplus, ew.d_sqrtsoftplus,
                       fast=_fast_sqrtsoftplus, builtin=True,
                       description="sqrt(softplus(x)) (transformers' sqrtsoftplus)"))
    _add(ActivationDef(
        "xielu", ew.xielu, ew.d_xielu,
        params={"alpha_p": 0.8, "alpha_n": 0.8, "beta": 0.5, "eps": -1e-6},
        core=_xielu_core, inplace_ok=True,
        checks={"alpha_p": _positive, "alpha_n": _finite, "beta": _finite, "eps": _finite},
        check_text={"alpha_p": "> 0 and finite", "alpha_n": "a finite number",
                    "beta": "a finite number", "eps": "a finite number"},
        validate=_xielu_rule, builtin=True,
        description="xIELU with learnable alpha_p, alpha_n (initial values; transformers' "
        "xielu)"))


_builtins()
_ecosystem_builtins()
