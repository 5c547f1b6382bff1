"""Spec strings: one parser, one registry, one module type for every activation.

This module is the public import path of the spec API; the code lives in one file per idea:
:mod:`~actlab.activations.definitions` (:class:`ActivationDef` and the built-ins),
:mod:`~actlab.activations.grammar` (the tokenizer shared with the norms and the parser),
:mod:`~actlab.activations.registry` (register, list, resolve, ``theory_shift``) and
:mod:`~actlab.activations.spec_activation` (:class:`SpecActivation`, :func:`activation`,
:func:`make_activation`).
"""

from __future__ import annotations

from actlab.activations.definitions import (
    COMMON_FLAGS,  # noqa: F401  (importable from here as before)
    COMMON_OPTIONS,  # noqa: F401  (importable from here as before)
    ActivationDef,
    ElementFn,  # noqa: F401  (importable from here as before)
)
from actlab.activations.grammar import (
    DEFAULT_Q,  # noqa: F401  (importable from here as before)
    GAUSSIAN_FLAGS,  # noqa: F401  (importable from here as before)
    RUNNING_OPTIONS,  # noqa: F401  (importable from here as before)
    SHIFT_WORDS,  # noqa: F401  (importable from here as before)
    ParsedSpec,
    base_spec,
    canonical_spec,
    parse_spec,
    split_spec,
)
from actlab.activations.registry import (
    activation_info,  # noqa: F401  (importable from here as before)
    available_activations,
    is_bounded,
    register_activation,
    resolve_elementwise,
    theory_shift,
    unregister_activation,
)
from actlab.activations.spec_activation import SpecActivation, activation, make_activation
from actlab.errors import ShiftNotCalibratedError, SpecError  # noqa: F401  (as before)

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
