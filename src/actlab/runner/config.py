"""Build and validate experiment configs (dataclasses) from defaults and ``key=value`` overrides.

Values given as strings (from the CLI's ``--set`` or ``--grid``) are converted to the
field's annotated type; lists and tuples take comma-separated items. Any problem raises
:class:`~actlab.errors.ConfigError` naming the field and why.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from actlab.errors import ConfigError, did_you_mean

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _convert(name: str, value: Any, annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in {"none", "null"}):
            if type(None) in args:
                return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(name, value, arg)
            except ConfigError as exc:
                errors.append(exc.why)
        raise ConfigError(name, "; ".join(errors) or f"cannot use {value!r}")
    if origin in (list, tuple):
        items = value
        if isinstance(value, str):
            items = [v.strip() for v in value.split(",") if v.strip()] if value.strip() else []
        if not isinstance(items, (list, tuple)):
            raise ConfigError(name, f"expected a list, got {value!r}")
        item_type = args[0] if args else str
        converted = [_convert(name, v, item_type) for v in items]
        return converted if origin is list else tuple(converted)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ConfigError(name, f"expected true/false, got {value!r}")
    if annotation is int:
        if isinstance(value, bool):
            raise ConfigError(name, f"expected an integer, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(name, f"expected an integer, got {value!r}") from None
        if not number.is_integer():
            raise ConfigError(name, f"expected an integer, got {value!r}")
        return int(number)
    if annotation is float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(name, f"expected a number, got {value!r}") from None
        if not math.isfinite(number):  # nan and ±inf alike: no setting means "infinite"
            raise ConfigError(name, f"must be a finite number, got {value!r}")
        return number
    if annotation is str:
        return str(value)
    if origin is dict or annotation is dict:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(name, f"expected JSON object: {exc}") from None
        if not isinstance(value, dict):
            raise ConfigError(name, f"expected a mapping, got {value!r}")
        return value
    if origin is typing.Literal:
        for allowed in args:
            if str(allowed) == str(value):
                return allowed
        raise ConfigError(name, f"must be one of {', '.join(map(str, args))}, got {value!r}")
    return value


def build_config(cls: type, overrides: Mapping[str, Any] | None = None, base: Any = None) -> Any:
    """Instantiate dataclass ``cls`` from ``base`` (an instance) or defaults, plus ``overrides``.

    Unknown keys raise ``ConfigError`` naming the closest fields; values are converted to the
    annotated types, then the dataclass's own ``__post_init__`` validation runs.
    """

    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    values: dict[str, Any] = {}
    if base is not None:
        values = {n: getattr(base, n) for n in fields}
    for key, raw in (overrides or {}).items():
        if key not in fields:
            hint = did_you_mean(key, fields, n=3, cutoff=0.5, prefix="; ")
            raise ConfigError(key, f"unknown field{hint} (valid: {', '.join(fields)})")
        values[key] = _convert(key, raw, hints[key])
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError("config", str(exc)) from None


def config_to_dict(config: Any) -> dict[str, Any]:
    """A JSON-friendly dict of a config dataclass (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))


def parse_assignments(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Parse ``["key=value", ...]`` into a dict; a malformed item raises ``ConfigError``."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(item or "--set", "expected key=value")
        result[key.strip()] = value.strip()
    return result
