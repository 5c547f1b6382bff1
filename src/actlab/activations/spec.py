"""Spec strings: one parser, one registry, one module type for every activation.

Grammar: ``NAME`` followed by zero or more ``:OPTION``, where an option is ``key=value``
or a bare flag, e.g. ``gelu``, ``gelu:tanh``, ``leaky_relu:slope=0.1``,
``relu:shift=theory``, ``relu:shift=measured``, ``silu:beta=1.5:learnable``,
``gelu:adaptive:momentum=0.1``, ``relu2:clip=50``, ``gelu:topk=0.1``,
``gelu:topk=0.1:freeze_after=500``, ``gelu:topk=0.1:gaussian``.

Options valid on every name, applied in this order after the function:
``clip=C`` (clamp at C from above), ``shift=B|theory|measured`` (subtract a constant;
``theory`` uses the Gaussian mean at pre-activation variance ``q``, default 1/3;
``measured`` the module's mean output on data, set by
:func:`actlab.activations.calibrate.calibrate_shifts_`), ``adaptive``
(subtract the per-example feature mean), ``topk=K`` (keep the fraction K of largest
outputs per example; with the flag ``gaussian`` those above the row's mean + std *
Phi^-1(1 - K), with ``gaussian_shift`` Gemma 3n's ``relu(x - cutoff)`` before the function).
``momentum=`` and ``freeze_after=`` apply to the running statistics of ``adaptive`` and of
``topk`` (its threshold), with the one meaning and range of
:mod:`actlab.activations.running`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NoReturn

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.activations import elementwise as ew
from actlab.activations.base import Activation, functorch_transforms_active
from actlab.activations.fused import fused_kernel, fused_shift_center
from actlab.activations.running import check_freeze_after, check_momentum
from actlab.activations.shift import AdaptiveCenter, feature_dim
from actlab.activations.sparse import topk_sparsify
from actlab.activations.special import (
    LearnableSiLUCore,
    NoisyReLUCore,
    PReLUCore,
    relu_output_writable,
    sugar,
)
from actlab.activations.threshold import (
    TopKThreshold,
    fused_frozen_mask,
    fused_gaussian_mask,
    gaussian_mask,
    gaussian_shift,
)
from actlab.errors import ShiftNotCalibratedError, SpecError, did_you_mean
from actlab.theory.quadrature import expectation

__all__ = [
    "ActivationDef",
    "ParsedSpec",
    "SpecActivation",
    "activation",
    "base_spec",
    "available_activations",
    "canonical_spec",
    "is_bounded",
    "make_activation",
    "parse_spec",
    "register_activation",
    "resolve_elementwise",
    "split_spec",
    "theory_shift",
    "unregister_activation",
]

ElementFn = Callable[..., Tensor]

DEFAULT_Q = 1.0 / 3.0

# Options accepted on every name; value-less ones are flags.
COMMON_OPTIONS = ("clip", "shift", "q", "adaptive", "topk", "gaussian", "gaussian_shift",
                  "momentum", "freeze_after")
COMMON_FLAGS = ("adaptive", "gaussian", "gaussian_shift")
# The options of running statistics and the options that keep one.
RUNNING_OPTIONS = ("momentum", "freeze_after")
GAUSSIAN_FLAGS = ("gaussian", "gaussian_shift")
# The shifts given by a word instead of a number.
SHIFT_WORDS = ("theory", "measured")


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


# ------------------------------------------------------------------------------- parsing
@dataclass(frozen=True)
class ParsedSpec:
    """A parsed, validated spec: canonical ``name``, ``options`` and ``flags``.

    ``options`` maps option names to values: floats, ``"theory"`` for ``shift=theory``,
    ``"measured"`` for ``shift=measured``,
    an int for ``freeze_after``. ``flags`` holds the bare flags (``tanh``, ``learnable``,
    ``adaptive``, ``gaussian``, ``gaussian_shift``). Options equal to their default are dropped, so equal specs compare equal.
    """

    name: str
    options: dict[str, Any]
    flags: frozenset[str]

    @property
    def canonical(self) -> str:
        """The canonical spec string (alias resolved, defaults dropped, fixed order)."""
        return _format(self)

    @property
    def params(self) -> dict[str, Any]:
        """The function's own keyword parameters (numeric options with defaults, flags)."""
        defn = _REGISTRY[self.name]
        out: dict[str, Any] = {k: self.options.get(k, v) for k, v in defn.params.items()}
        out.update({f: f in self.flags for f in defn.flags})
        return out

    def __str__(self) -> str:
        return self.canonical


def _format_number(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _format(parsed: ParsedSpec) -> str:
    defn = _REGISTRY[parsed.name]
    parts = [parsed.name]
    for key in defn.params:
        if key in parsed.options:
            parts.append(f"{key}={_format_number(parsed.options[key])}")
    parts += [f for f in defn.flags + defn.module_flags if f in parsed.flags]
    for key in COMMON_OPTIONS:
        if key in COMMON_FLAGS:
            if key in parsed.flags:
                parts.append(key)
        elif key in parsed.options:
            parts.append(f"{key}={_format_number(parsed.options[key])}")
    return ":".join(parts)


def _closest(word: str, choices: list[str] | tuple[str, ...]) -> str:
    return did_you_mean(word, choices, cutoff=0.5, fallback=True, quote=True)


def _number(spec: str, key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"{spec!r}: option {key!r} needs a number, got {text!r}") from None
    return value


def _common_value(spec: str, key: str, text: str) -> Any:
    if key == "shift":
        if text in SHIFT_WORDS:
            return text
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise SpecError(f"{spec!r}: option 'shift' must be a finite number, 'theory' or "
                            f"'measured', got {text!r}"
                            + did_you_mean(text, SHIFT_WORDS, quote=True, prefix="; "))
        return value
    if key in RUNNING_OPTIONS:  # one range with the norms' (actlab.activations.running)
        check = check_freeze_after if key == "freeze_after" else check_momentum
        try:
            return check(text, f"option {key!r}")
        except ValueError as exc:
            raise SpecError(f"{spec!r}: {exc}") from None
    value = _number(spec, key, text)
    ranges = {
        "clip": (lambda v: math.isfinite(v) and v > 0, "> 0 and finite"),
        "q": (lambda v: math.isfinite(v) and v > 0, "> 0 and finite"),
        "topk": (lambda v: 0 < v <= 1, "in (0, 1]"),
    }
    ok, text_range = ranges[key]
    if not ok(value):
        raise SpecError(f"{spec!r}: option {key!r} must be {text_range}, got {text}")
    return value


def split_spec(spec: str, what: str = "activation") -> tuple[str, list[tuple[str, str | None]]]:
    """Split ``NAME:key=value:flag`` into the lower-cased name and ``[(key, value or None)]``.

    The one tokenizer of the spec grammar, shared by activations and norms
    (:func:`actlab.nn.norms.parse_norm`). Keys are lower-cased, values stripped; a flag has
    the value ``None``. Empty options, empty values and repeated keys raise
    :class:`SpecError`; ``what`` names the kind of spec in the messages.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise SpecError(f"an {what} spec must be a non-empty string, got {spec!r}")
    name, *pieces = (p.strip() for p in spec.strip().split(":"))
    options: list[tuple[str, str | None]] = []
    for piece in pieces:
        if not piece:
            raise SpecError(f"{spec!r}: empty option (two ':' in a row or a trailing ':')")
        key, has_value, text = piece.partition("=")
        key, text = key.strip().lower(), text.strip()
        if has_value and not text:
            raise SpecError(f"{spec!r}: option {key!r} needs a value ({key}=...)")
        if any(key == seen for seen, _ in options):
            raise SpecError(f"{spec!r}: option {key!r} given twice")
        options.append((key, text if has_value else None))
    return name.lower(), options


def parse_spec(spec: str) -> ParsedSpec:
    """Parse and validate a spec string; raise :class:`SpecError` (a ``ValueError``) naming
    the closest valid names or options, or the option whose value is out of range."""
    if isinstance(spec, ParsedSpec):
        return spec
    raw_name, pieces = split_spec(spec)
    name = _ALIASES.get(raw_name, raw_name)
    if name not in _REGISTRY:
        names = sorted(_REGISTRY) + sorted(_ALIASES)
        raise SpecError(f"unknown activation {raw_name!r}; {_closest(raw_name, names)}")
    defn = _REGISTRY[name]
    options: dict[str, Any] = {}
    flags: set[str] = set()
    for key, text in pieces:
        if key not in defn.option_names:
            raise SpecError(f"{spec!r}: unknown option {key!r} for {name!r}; "
                            f"{_closest(key, defn.option_names)}")
        is_flag = key in defn.flags or key in defn.module_flags or key in COMMON_FLAGS
        if is_flag:
            if text is not None:
                raise SpecError(f"{spec!r}: option {key!r} is a flag and takes no value")
            flags.add(key)
            continue
        if text is None:
            raise SpecError(f"{spec!r}: option {key!r} needs a value ({key}=...)")
        if key in defn.params:
            value = _number(spec, key, text)
            check = defn.checks.get(key, _finite)
            if not check(value):
                why = defn.check_text.get(key, "a finite number")
                raise SpecError(f"{spec!r}: option {key!r} must be {why}, got {text}")
            if value != defn.params[key]:
                options[key] = value
        else:
            options[key] = _common_value(spec, key, text)
    gaussian = [f for f in GAUSSIAN_FLAGS if f in flags]
    if gaussian and "topk" not in options:
        raise SpecError(f"{spec!r}: flag {gaussian[0]!r} sets how 'topk=K' thresholds; it needs "
                        "'topk=K'")
    if len(gaussian) > 1:
        raise SpecError(f"{spec!r}: flags 'gaussian' (mask of the output) and 'gaussian_shift' "
                        "(Gemma 3n's shift of the input) exclude each other")
    running = [k for k in RUNNING_OPTIONS if k in options]
    if running and "adaptive" not in flags and ("topk" not in options or gaussian):
        raise SpecError(f"{spec!r}: option {running[0]!r} sets a running statistic; it needs "
                        "the flag 'adaptive' or 'topk=K' (whose threshold becomes one), and "
                        "'gaussian' thresholds need none")
    if "q" in options:
        if options.get("shift") != "theory":
            raise SpecError(f"{spec!r}: option 'q' only applies with 'shift=theory'")
        if math.isclose(options["q"], DEFAULT_Q, rel_tol=0, abs_tol=1e-15):
            del options["q"]
    if options.get("shift") == 0.0:
        del options["shift"]
    return ParsedSpec(name, options, frozenset(flags))


def canonical_spec(spec: str) -> str:
    """The canonical form of ``spec`` (e.g. ``'swish:beta=1'`` -> ``'silu'``)."""
    return parse_spec(spec).canonical


def base_spec(spec: str | ParsedSpec) -> str:
    """The elementwise part of ``spec``: the function with its parameters and ``clip``, without
    shift, adaptive and topk (what the Gaussian shift of ``shift=theory`` is computed for)."""
    parsed = parse_spec(spec)
    keep = {k: v for k, v in parsed.options.items() if k not in ("shift", "q", "momentum",
                                                                   "freeze_after", "topk")}
    flags = frozenset(f for f in parsed.flags if f not in COMMON_FLAGS)
    return ParsedSpec(parsed.name, keep, flags).canonical


# ------------------------------------------------------------------------------ registry
def register_activation(
    name: str,
    fn: ElementFn,
    derivative: ElementFn | None = None,
    *,
    bounded: bool = False,
    overwrite: bool = False,
    **defaults: float,
) -> None:
    """Register a user activation under ``name``.

    ``fn(x, **params)`` must be elementwise and differentiable by autograd (the module
    uses it directly); ``derivative(x, **params)`` is its analytic derivative, used by the
    theory code (which falls back to a numerical derivative when it is ``None``).
    Keyword ``defaults`` declare numeric options, e.g.
    ``register_activation("scaled", lambda x, a: a * x, a=2.0)`` allows ``"scaled:a=3"``.
    ``bounded`` marks saturating functions. Re-registering a name needs ``overwrite=True``.
    """
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
        raise SpecError(f"activation name must be a lower-case identifier, got {name!r}")
    if name in _ALIASES:
        raise SpecError(f"{name!r} is an alias of {_ALIASES[name]!r}; choose another name")
    if name in _REGISTRY and not overwrite:
        raise SpecError(f"activation {name!r} is already registered; pass overwrite=True "
                        "to replace it")
    if not callable(fn) or (derivative is not None and not callable(derivative)):
        raise SpecError(f"activation {name!r}: fn and derivative must be callable")
    clash = [k for k in defaults if k in COMMON_OPTIONS]
    if clash:
        raise SpecError(f"activation {name!r}: parameter names {clash} clash with the "
                        f"common options {COMMON_OPTIONS}")
    params: dict[str, float | None] = {}
    for key, value in defaults.items():
        if not key.isidentifier() or key != key.lower():
            raise SpecError(f"activation {name!r}: parameter {key!r} must be a lower-case "
                            "identifier")
        try:
            params[key] = float(value)
        except (TypeError, ValueError):
            raise SpecError(f"activation {name!r}: default of {key!r} must be a number, "
                            f"got {value!r}") from None
    _add(ActivationDef(name, fn, derivative, params=params, bounded=bounded))


def unregister_activation(name: str) -> None:
    """Remove a user-registered activation (built-ins cannot be removed)."""
    defn = _REGISTRY.get(name)
    if defn is None:
        raise SpecError(f"unknown activation {name!r}; {_closest(name, sorted(_REGISTRY))}")
    if defn.builtin:
        raise SpecError(f"{name!r} is built in and cannot be unregistered")
    del _REGISTRY[name]


def available_activations() -> list[str]:
    """Sorted names of every registered activation (aliases such as ``swish`` excluded)."""
    return sorted(_REGISTRY)


def activation_info(name: str) -> ActivationDef:
    """The registry entry of ``name`` (alias resolved)."""
    return _REGISTRY[parse_spec(name).name]


def is_bounded(spec: str) -> bool:
    """True for saturating activations (sigmoid, tanh, user ones registered as bounded)."""
    return _REGISTRY[parse_spec(spec).name].bounded


def resolve_elementwise(
    spec: str,
) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor] | None]:
    """The elementwise function f of ``spec`` and its analytic derivative f' (``None`` when
    the activation has none).

    Includes the function's parameters, ``clip`` and a numeric ``shift``; excludes
    ``shift=theory``, ``shift=measured``, ``adaptive`` and ``topk``. Learnable activations give the function at
    their initial parameters; ``noisy_relu`` its eval-mode ReLU; for ``sugar`` f' is the
    surrogate gradient its backward uses. Uses the reference math (exact softplus).
    """
    parsed = parse_spec(spec)
    defn = _REGISTRY[parsed.name]
    params = parsed.params
    clip = parsed.options.get("clip")
    shift = parsed.options.get("shift")
    offset = shift if isinstance(shift, float) else 0.0

    def f(x: Tensor) -> Tensor:
        y = defn.fn(x, **params)
        if clip is not None:
            y = torch.clamp_max(y, clip)
        return y - offset if offset else y

    if defn.derivative is None:
        return f, None
    derivative = defn.derivative

    def df(x: Tensor) -> Tensor:
        slope = derivative(x, **params)
        if clip is not None:
            slope = torch.where(defn.fn(x, **params) > clip, torch.zeros_like(slope), slope)
        return slope

    return f, df


def theory_shift(spec: str | ParsedSpec, q: float = DEFAULT_Q) -> float:
    """E f(z) for z ~ N(0, q), f the elementwise part of ``spec`` (:func:`base_spec`).

    The one definition of ``shift=theory`` (eq. 15 of the "Rethinking" paper): q = 1/3 gives
    Table 1 (ReLU 0.230, GELU 0.115, Swish 0.077, sigmoid 0.500).
    """
    return expectation(resolve_elementwise(base_spec(spec))[0], q)


# -------------------------------------------------------------------------------- module
def _output_bounds(bounds: tuple[float, float] | None, clip: float | None, shift: float,
                   adaptive: bool, topk: float | None) -> tuple[float, float] | None:
    """Range of the module's outputs when the function's range is known (None otherwise)."""
    if bounds is None or adaptive:
        return None
    low, high = bounds
    if clip is not None:
        high = min(high, clip)
        low = min(low, clip)
    low, high = low - shift, high - shift
    if topk is not None:  # dropped entries are exactly 0
        low, high = min(low, 0.0), max(high, 0.0)
    return (low, high)


class SpecActivation(Activation):
    """The module built from a spec: the function, then clip, shift, adaptive and topk.

    Attributes: ``spec`` (canonical string), ``parsed`` (its :class:`ParsedSpec`),
    ``bounded`` (a saturating function), ``bounds`` (the output range ``(low, high)`` where
    known, else ``None``), ``clip``, ``shift`` (the constant subtracted, with
    ``shift=theory`` resolved at construction), ``center`` (an
    :class:`~actlab.activations.shift.AdaptiveCenter` or ``None``), ``topk``, ``topk_rule``
    (``"exact"``, ``"running"``, ``"gaussian"``, ``"gaussian_shift"`` or ``None``) and
    ``topk_running`` (the :class:`~actlab.activations.threshold.TopKThreshold` of
    ``topk=K:freeze_after=N`` / ``momentum=m``, else ``None``).

    The shift is module state: the 0-dim buffer ``offset`` (float64 until the module is
    cast), which follows ``.to()`` and which every path reads (eager, torch.func transforms,
    the fused and native kernels). Every module has it, zero without a shift, so modules
    that differ only in their shift have the same structure and stack into one vmapped
    ensemble. It is not saved in ``state_dict`` (the spec determines it), except with
    ``shift=measured``: there ``offset`` is NaN until
    :func:`~actlab.activations.calibrate.calibrate_shifts_` measures it (``measured`` is
    true, ``needs_calibration`` says whether that is still to do, and ``forward`` raises
    :class:`ShiftNotCalibratedError` until then), and it is saved, so a checkpoint keeps
    the calibrated value.
    """

    offset: Tensor

    def __init__(self, parsed: ParsedSpec) -> None:
        super().__init__()
        defn = _REGISTRY[parsed.name]
        self.spec = parsed.canonical
        self.parsed = parsed
        self.bounded = defn.bounded
        params = parsed.params
        self.clip: float | None = parsed.options.get("clip")
        shift = parsed.options.get("shift")
        self.measured = shift == "measured"
        if shift == "theory":
            shift = theory_shift(parsed, parsed.options.get("q", DEFAULT_Q))
        shift = math.nan if self.measured else float(shift or 0.0)
        self.register_buffer("offset", torch.tensor(shift, dtype=torch.float64),
                             persistent=self.measured)
        # an actlab.activations.calibrate.ShiftRecorder while calibrating (not imported: the
        # calibrate module builds on this one)
        self._recorder: Any = None
        self._members_shifted = True  # torch.func paths subtract it (see for_members)
        self.topk: float | None = parsed.options.get("topk")
        adaptive = "adaptive" in parsed.flags
        momentum, freeze_after = parsed.options.get("momentum"), parsed.options.get("freeze_after")
        self.center = AdaptiveCenter(momentum, freeze_after) if adaptive else None
        # "exact", "running" (TopKThreshold), "gaussian" or "gaussian_shift"; None without topk
        self.topk_rule: str | None = None
        self.topk_running: TopKThreshold | None = None
        if self.topk is not None:
            self.topk_rule = next((f for f in ("gaussian", "gaussian_shift") if f in parsed.flags),
                                  None)
            if self.topk_rule is None and (momentum is not None or freeze_after is not None):
                self.topk_rule = "running"
                self.topk_running = TopKThreshold(self.topk, momentum, freeze_after)
            self.topk_rule = self.topk_rule or "exact"
        self._read_offset(shift)
        self.core: nn.Module | None = None
        if parsed.name == "silu" and "learnable" in parsed.flags:
            self.core = LearnableSiLUCore(params["beta"])
        elif defn.core is not None:
            self.core = defn.core(**params)
        self._bind_kernels()

    @property
    def shift(self) -> float:
        """The constant subtracted after the function, as a float (read from ``offset``;
        NaN for a ``shift=measured`` module not calibrated yet)."""
        return float(self.offset)

    @property
    def needs_calibration(self) -> bool:
        """True for a ``shift=measured`` module whose shift has not been measured yet."""
        return self._pending

    def _read_offset(self, value: float) -> None:
        """Derive the Python-side choices from the shift ``value`` (the buffer's content)."""
        self._pending = self.measured and math.isnan(value)
        self._shifted = not self._pending and value != 0.0  # eager paths skip a zero shift
        adaptive = self.center is not None
        self.bounds = None if self._pending else _output_bounds(
            _REGISTRY[self.parsed.name].bounds, self.clip, value, adaptive, self.topk)

    def _bind_kernels(self) -> None:
        """Choose the forward kernels (plain functions, not state: rebuilt on unpickling)."""
        parsed = self.parsed
        defn = _REGISTRY[parsed.name]
        params = parsed.params
        post_ops = self.clip is not None or self._shifted or self.center is not None
        self._fn: Callable[[Tensor], Tensor] | None = None
        if self.core is not None:
            self._inplace_ok = defn.inplace_ok or parsed.name == "silu"
        else:
            kernel = defn.fast or defn.fn
            self._inplace_ok = defn.inplace_ok
            if post_ops and defn.fast_inplace is not None:
                kernel, self._inplace_ok = defn.fast_inplace, True
            self._fn = partial(kernel, **params) if params else kernel
        # Out-of-place kernel for torch.func transforms (vmap, grad, jvp), where the custom
        # autograd nodes and in-place writes of the fast paths are not allowed.
        # The core's bound __call__, not the core itself: assigning the module would register
        # it a second time (as "_plain_fn"), doubling its entries in state_dict.
        plain = self.core.__call__ if self.core is not None else (defn.fast or defn.fn)
        self._plain_fn = partial(plain, **params) if params and self.core is None else plain
        if self.clip is not None:
            self._inplace_ok = True  # clamp_max returns a fresh tensor it does not save
        # Fast path: one autograd node for function + shift/centring (see fused.py).
        plain_center = self.center is not None and self.center.momentum is None \
            and self.center.freeze_after is None
        self._fused = None
        if self.core is None and self.clip is None and (
            plain_center or (self.center is None and self._shifted)
        ):
            self._fused = fused_kernel(parsed.name, params)
        # Threshold Top-K fused with the function (one node, no extra allocation) when no
        # other option sits between them.
        self._mask_kernel = None
        if self.topk_rule in ("running", "gaussian") and self.core is None and \
                self.clip is None and not self._shifted and self.center is None:
            self._mask_kernel = fused_kernel(parsed.name, params)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__
        state = dict(state)
        state.pop("_fn", None)
        state.pop("_fused", None)
        state.pop("_mask_kernel", None)
        state.pop("_plain_fn", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        old_shift = state.pop("shift", None)  # modules pickled when the shift was a float
        state.setdefault("_members_shifted", True)
        for key, default in (("measured", False), ("_pending", False), ("_recorder", None)):
            state.setdefault(key, default)
        if "topk_rule" not in state:  # modules pickled before the threshold rules
            state["topk_rule"] = None if state.get("topk") is None else "exact"
            if "topk_running" not in state.get("_modules", {}):
                state["topk_running"] = None
        super().__setstate__(state)
        self._modules.pop("_plain_fn", None)  # modules pickled when the core was listed twice
        if "offset" not in self._buffers:
            shift = float(old_shift or 0.0)
            self.register_buffer("offset", torch.tensor(shift, dtype=torch.float64),
                                 persistent=False)
            self._shifted = shift != 0.0
        self._bind_kernels()

    def forward(self, x: Tensor) -> Tensor:
        """Apply the activation and its options."""
        if self._pending:
            self._measure(x)
        if functorch_transforms_active():
            return self._forward_out_of_place(x)
        if self._mask_kernel is not None:
            if self.topk_rule == "gaussian" and self.topk < 1.0:
                return fused_gaussian_mask(x, self._mask_kernel, self.topk)
            running = self.topk_running
            if running is not None and running.uses_threshold():
                return fused_frozen_mask(x, self._mask_kernel, running.threshold)
        if self.topk_rule == "gaussian_shift":
            x = gaussian_shift(x, self.topk)
        if self._fused is not None:
            dim = feature_dim(x) if self.center is not None else None
            y = fused_shift_center(x, self._fused, self.offset, dim)
        else:
            y = self.core(x) if self.core is not None else self._fn(x)
            if self.clip is not None:
                y = torch.clamp_max(y, self.clip)
            if self._shifted:
                y = y.sub_(self.offset) if self._inplace_ok else y - self.offset
            if self.center is not None:
                y = self.center(y, inplace=self._inplace_ok or self._shifted)
        return self._sparsify(y)

    def _sparsify(self, y: Tensor) -> Tensor:
        """The output-side Top-K of ``topk`` (``gaussian_shift`` acts on the input instead)."""
        if self.topk_rule in (None, "gaussian_shift"):
            return y
        if self.topk_running is not None:
            return self.topk_running(y)
        if self.topk_rule == "gaussian":
            return gaussian_mask(y, self.topk)
        return topk_sparsify(y, self.topk)

    def _measure(self, x: Tensor) -> NoReturn:
        """The forward of a ``shift=measured`` module before calibration: hand the unshifted
        output (function, then clip) to the recorder calibrating it, which stops the model's
        forward there; without one, raise :class:`ShiftNotCalibratedError`."""
        if self._recorder is None:
            raise ShiftNotCalibratedError(
                f"activation {self.spec!r}: the shift is not measured yet; call "
                "actlab.calibrate_shifts_(model, batches) on the initialised model (or load a "
                "state_dict saved after calibration) before using it")
        y = self.core(x) if self.core is not None else self._plain_fn(x)
        if self.clip is not None:
            y = torch.clamp_max(y, self.clip)
        raise self._recorder.stop(self, y)

    def refresh_from_buffers(self) -> None:
        """Re-derive what construction decided from ``offset`` (whether the eager paths
        subtract a shift, which kernels run, whether a measured shift is still to measure)
        after its value was written in place, as
        :meth:`actlab.train.ensemble.Ensemble.member` does when it copies a member's state
        into another member's module, and as loading a ``state_dict`` does."""
        if self.topk_running is not None:
            self.topk_running.refresh_from_buffers()
        if self.offset.is_meta:
            return
        self._read_offset(float(self.offset))
        self._bind_kernels()

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              *args: Any, **kwargs: Any) -> None:
        """Load as usual, then re-read ``offset`` (a measured shift comes with the state).

        State dicts saved when the core was also listed as ``_plain_fn`` hold its tensors
        twice; that copy is dropped (the ``core.`` entries load)."""
        for key in [k for k in state_dict if k.startswith(prefix + "_plain_fn.")]:
            del state_dict[key]
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self.refresh_from_buffers()

    def for_members(self, members: Sequence[nn.Module]) -> None:
        """Serve as the shared skeleton of ``members`` in a vmapped ensemble.

        Under torch.func the members share this module's code but each brings its own
        ``offset``, so the shift is subtracted whatever this module's own value; when no
        member has a shift, the skeleton may skip it (as eager does). Called by
        :class:`~actlab.train.ensemble.Ensemble` on its template. A ``shift=measured``
        member not calibrated yet makes the skeleton raise as that member would.
        """
        self._members_shifted = any(getattr(m, "_shifted", True) for m in members)
        self._pending = any(getattr(m, "_pending", False) for m in members)

    def _forward_out_of_place(self, x: Tensor) -> Tensor:
        """The same function with plain out-of-place ops, so torch.func can transform it."""
        if self.topk_rule == "gaussian_shift":
            x = gaussian_shift(x, self.topk)
        y = self._plain_fn(x)
        if self.clip is not None:
            y = torch.clamp_max(y, self.clip)
        if self._members_shifted:
            y = y - self.offset
        if self.center is not None:
            y = self.center(y, inplace=False)
        return self._sparsify(y)


def activation(spec: str) -> Activation:
    """Build the module for ``spec``, e.g. ``activation("gelu:adaptive")``.

    Raises :class:`~actlab.errors.SpecError` (a ``ValueError``) for unknown names or
    options (naming the closest valid ones) and out-of-range values (naming the option).
    """
    return SpecActivation(parse_spec(spec))


def make_activation(spec: str | nn.Module | Callable[[], nn.Module]) -> nn.Module:
    """The activation module for one site of a model: the one entry point every model uses.

    ``spec`` is a spec string (a new module from :func:`activation`), an ``nn.Module`` or a
    zero-argument factory (its result). A module passed in is always deep-copied, once per
    call and so once per site: two layers never share one stateful activation (learnable
    parameters, an adaptive shift's running mean), and the module passed in stays unused.

    Raises :class:`~actlab.errors.SpecError` for an invalid spec or a value of another type,
    ``TypeError`` when a factory returns something other than an ``nn.Module``.
    """
    if isinstance(spec, nn.Module):
        return copy.deepcopy(spec)
    if isinstance(spec, str):
        return activation(spec)
    if callable(spec):
        module = spec()
        if not isinstance(module, nn.Module):
            raise TypeError(f"activation factory returned {type(module).__name__}, not an nn.Module")
        return module
    raise SpecError(f"activation: expected a spec string, an nn.Module or a factory, got {spec!r}")
