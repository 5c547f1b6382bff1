"""Activation library: elementwise functions, shifts, sparsity and gated units, built from spec strings.

Main entry points (in :mod:`actlab.activations.spec`): :func:`activation`,
:func:`parse_spec`, :func:`register_activation`, :func:`available_activations`,
:func:`resolve_elementwise`, :func:`is_bounded`; :func:`calibrate_shifts_` (in
:mod:`actlab.activations.calibrate`) measures ``shift=measured``.
"""

from __future__ import annotations

from actlab.activations.base import Activation
from actlab.activations.calibrate import calibrate_shifts_
from actlab.activations.spec import (
    ParsedSpec,
    SpecActivation,
    activation,
    available_activations,
    canonical_spec,
    is_bounded,
    parse_spec,
    register_activation,
    resolve_elementwise,
)

__all__ = [
    "Activation",
    "ParsedSpec",
    "SpecActivation",
    "activation",
    "available_activations",
    "calibrate_shifts_",
    "canonical_spec",
    "is_bounded",
    "parse_spec",
    "register_activation",
    "resolve_elementwise",
]
