"""Checked configs: the dataclasses every recipe and experiment is configured with.

Config checks are field metadata: each bound, choice or spec kind is written once, on the
field it constrains, and checked once, when the config is built.

A config subclasses :class:`CheckedConfig` (a plain dataclass mix-in) and declares its
fields with :func:`checked`::

    @dataclass
    class Config(CheckedConfig):
        steps: int = checked(100, ge=1)
        lr: float = checked(1e-3, gt=0)
        q: float = checked(0.9, gt=0, lt=1)
        norm: str = checked("layer", choices=("layer", "batch"))
        activations: tuple[str, ...] = checked(("relu",), spec="activation", nonempty=True)

        def check(self) -> None:  # rules that tie fields together
            if self.batch_size > self.n_train:
                raise ConfigError("batch_size", f"must be <= n_train ({self.n_train})")

Bounds apply to a number or to each item of a sequence. Every failure is one
:class:`~actlab.errors.ConfigError` naming the field: ``"steps: must be >= 1, got 0"``,
``"lr: must be > 0, got -1.0"``, ``"q: must be in (0, 1), got 1.5"``,
``"norm: must be one of layer, batch, got 'lyer'; did you mean layer?"``.

A ``spec`` kind names a registry that must accept the value (:func:`register_spec_kind`);
:func:`choose` checks one value against a list outside a dataclass. (This module was
``actlab.runner.fields``, which re-exports it.)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from actlab.errors import ConfigError, config_check, did_you_mean

_CHECK_KEY = "actlab_check"


_SPEC_KINDS: dict[str, Callable[[str], Any]] = {}


def register_spec_kind(kind: str, checker: Callable[[str], Any]) -> None:
    """Let ``checked(spec=kind)`` fields be checked by ``checker`` (a ``ValueError`` refuses).

    The registries above this module register their kinds where they are defined:
    ``"activation"`` (:mod:`actlab.activations.spec_activation`), ``"init"``
    (:mod:`actlab.init`) and ``"norm"`` (:mod:`actlab.nn.norm_spec`);
    :mod:`actlab.runner.fields` imports all three, so every experiment config has them.
    """
    _SPEC_KINDS[kind] = checker


@dataclass(frozen=True)
class FieldCheck:
    """The constraints of one config field (see :func:`checked`)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None
    spec: str | None = None
    nonempty: bool = False

    def describe(self) -> str:
        """The constraint as text for ``--help``-style listings, e.g. ``"in (0, 1)"``."""
        parts = [_bounds_text(self)] if _has_bounds(self) else []
        if self.choices is not None:
            parts.append("one of " + ", ".join(map(str, self.choices)))
        if self.spec:
            parts.append(f"{self.spec} spec")
        if self.nonempty:
            parts.append("at least one")
        return "; ".join(p for p in parts if p)

    def __call__(self, name: str, value: Any) -> None:
        """Raise ``ConfigError(name, ...)`` if ``value`` breaks a constraint."""
        items = list(value) if isinstance(value, (list, tuple)) else None
        if self.nonempty and not items:
            raise ConfigError(name, "needs at least one value")
        for item in items if items is not None else [value]:
            self._check_one(name, item)

    def _check_one(self, name: str, item: Any) -> None:
        if item is None:
            return
        if _has_bounds(self) and not _within(self, item):
            raise ConfigError(name, f"must be {_bounds_text(self)}, got {item!r}")
        if self.choices is not None and item not in self.choices:
            hint = did_you_mean(str(item), [str(c) for c in self.choices], prefix="; ")
            raise ConfigError(name, f"must be one of {', '.join(map(str, self.choices))}, "
                                    f"got {item!r}{hint}")
        if self.spec is not None:
            if self.spec not in _SPEC_KINDS:
                raise ValueError(f"unknown spec kind {self.spec!r} "
                                 f"(valid: {', '.join(sorted(_SPEC_KINDS))})")
            config_check(name, _SPEC_KINDS[self.spec], item)


def _has_bounds(check: FieldCheck) -> bool:
    return any(b is not None for b in (check.ge, check.gt, check.le, check.lt))


def _within(check: FieldCheck, x: Any) -> bool:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return False  # nan and ±inf are outside every bound
    return ((check.ge is None or x >= check.ge) and (check.gt is None or x > check.gt)
            and (check.le is None or x <= check.le) and (check.lt is None or x < check.lt))


def _bounds_text(check: FieldCheck) -> str:
    low = (f"[{check.ge:g}" if check.ge is not None else f"({check.gt:g}"
           if check.gt is not None else None)
    high = (f"{check.le:g}]" if check.le is not None else f"{check.lt:g})"
            if check.lt is not None else None)
    if low and high:
        return f"in {low}, {high}"
    if low:
        return (">= " if low[0] == "[" else "> ") + low[1:]
    return ("<= " if high[-1] == "]" else "< ") + high[:-1]


def choose(name: str, value: str, valid: Sequence[str]) -> str:
    """``value`` if it is one of ``valid``, else a :class:`ConfigError` naming ``name``."""
    if value not in valid:
        hint = did_you_mean(str(value), valid, n=2, suffix=" ")
        raise ConfigError(name, f"unknown {value!r}; {hint}valid: {', '.join(valid)}")
    return value


def checked(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING,
            ge: float | None = None, gt: float | None = None, le: float | None = None,
            lt: float | None = None, choices: Sequence[Any] | None = None,
            spec: str | None = None, nonempty: bool = False) -> Any:
    """A dataclass field carrying its own check (bounds, choices, a spec kind, non-empty).

    ``ge``/``gt``/``le``/``lt`` bound a number, or every item of a list or tuple;
    ``choices`` lists the allowed values; ``spec`` names a registry that must accept each
    value (``"activation"``, ``"init"`` or ``"norm"``); ``nonempty`` refuses an empty list.
    ``None`` always passes (an optional field that is unset).
    """
    check = FieldCheck(ge, gt, le, lt, None if choices is None else tuple(choices), spec, nonempty)
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={_CHECK_KEY: check})


def field_checks(config: Any) -> dict[str, FieldCheck]:
    """The :class:`FieldCheck` of every checked field of the dataclass ``config`` (or class)."""
    return {f.name: f.metadata[_CHECK_KEY] for f in dataclasses.fields(config)
            if _CHECK_KEY in f.metadata}


def check_fields(config: Any) -> None:
    """Run every field's declared check on the dataclass instance ``config``."""
    for name, check in field_checks(config).items():
        check(name, getattr(config, name))


class CheckedConfig:
    """Mix-in for config dataclasses: on construction the fields' declared checks run, then
    :meth:`check`, the place for rules that tie several fields together."""

    def __post_init__(self) -> None:
        check_fields(self)
        self.check()

    def check(self) -> None:
        """Cross-field rules (none by default); raise ``ConfigError`` naming the field."""


def check_plain_activations(field_name: str, specs: Sequence[str]) -> None:
    """``ConfigError`` on ``field_name`` for a spec that already carries options
    (``relu:shift=0.1``): experiments that add the shift themselves take plain names."""
    for spec in specs:
        if ":" in spec:
            raise ConfigError(field_name, f"give plain names (the shift is added), got {spec!r}")
