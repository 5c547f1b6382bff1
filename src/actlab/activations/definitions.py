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
    relu_output_writable,
    sugar,
)

ElementFn = Callable[..., Tensor]

# Options accepted on every name; value-less ones are flags.
COMMON_OPTIONS = ("clip", "shift", "q", "adaptive", "topk", "gaussian", "gaussian_shift",
                  "momentum", "freeze_after")
COMMON_FLAGS = ("adaptive", "gaussian", "gaussian_shift")


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
    for activations with parameters or train/eval behaviour.
    """

    name: str
    fn: ElementFn
    derivative: ElementFn | None = None
    params: dict[str, float | None] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    module_flags: tuple[str, ...] = ()
    bounded: bool = False
    bounds: tuple[float, float] | None = None
    fast: ElementFn | None = None
    inplace_ok: bool = False
    fast_inplace: ElementFn | None = None
    core: Callable[..., nn.Module] | None = None
    checks: dict[str, Callable[[float], bool]] = field(default_factory=dict)
    check_text: dict[str, str] = field(default_factory=dict)
    builtin: bool = False
    description: str = ""

    @property
    def option_names(self) -> tuple[str, ...]:
        """Every option and flag valid on this name."""
        return tuple(self.params) + self.flags + self.module_flags + COMMON_OPTIONS


_REGISTRY: dict[str, ActivationDef] = {}
_ALIASES: dict[str, str] = {"swish": "silu"}


def _finite(v: float) -> bool:
    return math.isfinite(v)


def _positive(v: float) -> bool:
    return math.isfinite(v) and v > 0


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


_builtins()
