"""Activation library: elementwise functions, shifts, sparsity and gated units, built from spec strings.

The entry points: :func:`activation` (a module from a spec string such as ``"gelu:tanh"`` or
``"relu:shift=theory"``, or from a torch / transformers / timm activation), :func:`spec_of`
(the inverse), :func:`act_layer` (a spec as a class for ``act_layer=``), :func:`parse_spec`,
:func:`register_activation`, :func:`available_activations`, :func:`resolve_elementwise`,
:func:`is_bounded`; :func:`calibrate_shifts_` measures ``shift=measured``. Names are
imported on first use.
"""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "Activation": ".base",
    "ParsedSpec": ".grammar",
    "canonical_spec": ".grammar",
    "parse_spec": ".grammar",
    "SpecActivation": ".spec_activation",
    "activation": ".spec_activation",
    "make_activation": ".spec_activation",
    "act_layer": ".layer",
    "spec_of": ".interop",
    "available_activations": ".registry",
    "is_bounded": ".registry",
    "register_activation": ".registry",
    "resolve_elementwise": ".registry",
    "calibrate_shifts_": ".calibrate",
})
