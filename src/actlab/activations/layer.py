"""A spec as an activation class, for code that takes a class (timm's and torchvision's
``act_layer=`` / ``activation_layer=``) and builds one module per site with it."""

from __future__ import annotations

from typing import Any

from actlab.activations.grammar import parse_spec
from actlab.activations.spec_activation import SpecActivation


class _SpecLayer(SpecActivation):
    """Base of the classes :func:`act_layer` makes; calling one builds the spec's module."""

    parsed_spec: Any = None  # the ParsedSpec, set on each class act_layer makes

    def __new__(cls, inplace: bool = False) -> SpecActivation:  # type: ignore[misc]
        # A plain SpecActivation, not an instance of this class: it pickles, deep-copies
        # and names its spec as every other actlab module (Python then skips __init__).
        return SpecActivation(cls.parsed_spec)


def act_layer(spec: str) -> type[SpecActivation]:
    """A class whose calls build ``spec``'s activation module, for ``act_layer=`` arguments.

    ``act_layer("gelu:adaptive")`` is constructible as timm and torchvision construct their
    activation classes, with or without ``inplace=`` (``cls()``, ``cls(inplace=True)``):
    ``inplace`` is accepted and ignored, as timm's GELU does, because the module returns a new
    tensor (what it may reuse in place it already does). Each call gives a new
    :class:`~actlab.activations.spec_activation.SpecActivation`, so sites never share state.
    The spec is checked now: an invalid one raises :class:`~actlab.errors.SpecError` here.
    """
    parsed = parse_spec(spec)
    name = "ActLayer_" + "".join(c if c.isalnum() else "_" for c in parsed.canonical)
    cls = type(name, (_SpecLayer,), {"parsed_spec": parsed, "spec": parsed.canonical,
                                     "__module__": __name__,
                                     "__doc__": f"The activation {parsed.canonical!r}."})
    return cls
