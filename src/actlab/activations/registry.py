"""The registry API: add and remove activations, list them, and ask what a spec denotes.

:func:`register_activation` adds a user activation to the table of
:mod:`actlab.activations.definitions` (where the built-ins are); :func:`resolve_elementwise`
gives the elementwise function (and derivative) a spec stands for, which the theory code
integrates, and :func:`theory_shift` its Gaussian mean, the one definition of
``shift=theory``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from actlab.activations.definitions import (
    _ALIASES,
    _REGISTRY,
    COMMON_OPTIONS,
    ActivationDef,
    ElementFn,
    _add,
)
from actlab.activations.grammar import DEFAULT_Q, ParsedSpec, _closest, base_spec, parse_spec
from actlab.errors import SpecError
from actlab.theory.quadrature import expectation


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
    Table 1 (ReLU 0.230, GELU 0.115, Swish 0.077, sigmoid 0.500). Learnable activations
    (``prelu``, ``xielu``, ``silu:learnable``) give it at their initial parameters.

    Raises :class:`SpecError` when the mean is not finite (a user function that is NaN or
    infinite somewhere the Gaussian reaches, or whose mean diverges): no shift to subtract.
    """
    base = base_spec(spec)
    value = expectation(resolve_elementwise(base)[0], q)
    if not math.isfinite(value):
        raise SpecError(f"{base!r}: its Gaussian mean at q={q:g} is {value}, so shift=theory "
                        "has no value; give a number (shift=B) or use shift=measured")
    return value
