"""Norm spec strings: ``"percentile:q=0.7:freeze_after=100"`` to a name and options.

The grammar is the activations' (:func:`~actlab.activations.grammar.split_spec`);
:func:`actlab.nn.norms.make_norm` builds the module a spec names.
"""

from __future__ import annotations

import warnings

from actlab.activations.grammar import split_spec
from actlab.activations.running import check_freeze_after, check_momentum
from actlab.config import register_spec_kind
from actlab.errors import did_you_mean

NORM_NAMES = ("none", "rmsnorm", "layernorm", "batchnorm", "percentile",
              "percentile-layernorm", "percentile-batchnorm")
_NORM_OPTIONS = {"q": float, "freeze_after": int, "momentum": float, "eps": float}
_RUNNING_CHECKS = {"freeze_after": check_freeze_after, "momentum": check_momentum}


def parse_norm(spec: str) -> tuple[str, dict[str, float | int]]:
    """Split ``"percentile:q=0.7:freeze_after=100"`` into a name and options.

    The grammar is the activations' (:func:`~actlab.activations.grammar.split_spec`). The old
    comma form (``percentile:q=0.7,freeze_after=100``) is still read, with a
    ``DeprecationWarning``. Unknown names or options raise ``ValueError`` naming the
    closest valid ones.
    """
    if isinstance(spec, str) and "," in spec:
        colon_form = spec.replace(",", ":")
        warnings.warn(f"norm spec {spec!r}: separate options with ':' ({colon_form!r}); "
                      "the comma form is deprecated", DeprecationWarning, stacklevel=2)
        spec = colon_form
    name, pieces = split_spec(spec, "norm")
    if name not in NORM_NAMES:
        raise ValueError(f"unknown norm {name!r}{did_you_mean(name, NORM_NAMES, prefix='; ')} "
                         f"(valid: {', '.join(NORM_NAMES)})")
    options: dict[str, float | int] = {}
    for key, value in pieces:
        if value is None or key not in _NORM_OPTIONS:
            hint = did_you_mean(key, _NORM_OPTIONS, n=2, prefix="; ")
            raise ValueError(f"bad norm option {key!r} in {spec!r}{hint} "
                             f"(valid: {', '.join(f'{k}=...' for k in _NORM_OPTIONS)})")
        try:
            options[key] = _NORM_OPTIONS[key](value)
        except ValueError:
            raise ValueError(f"norm option {key} needs a {_NORM_OPTIONS[key].__name__}, got {value!r}") from None
        if key in _RUNNING_CHECKS:  # the range every running statistic shares
            try:
                options[key] = _RUNNING_CHECKS[key](options[key])
            except ValueError as exc:
                raise ValueError(f"norm spec {spec!r}: {exc}") from None
    if options and not name.startswith("percentile") and set(options) - {"eps", "momentum"}:
        raise ValueError(f"options {sorted(options)} only apply to percentile norms, got {spec!r}")
    return name, options


# Config fields declared with checked(spec="norm") are checked by parsing.
register_spec_kind("norm", parse_norm)
