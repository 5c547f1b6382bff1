"""Config checks shared by several experiments (each raises ``ConfigError`` naming the field),
and the number format of their claims' texts."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from actlab.errors import ConfigError, config_check


def require_at_least_one(config: Any, names: Iterable[str]) -> None:
    """``ConfigError`` on the first of the integer fields ``names`` that is below 1."""
    for name in names:
        if getattr(config, name) < 1:
            raise ConfigError(name, f"must be >= 1, got {getattr(config, name)}")


def require_positive(config: Any, names: Iterable[str]) -> None:
    """``ConfigError`` on the first of the fields ``names`` that is not > 0 (nan included)."""
    for name in names:
        if not getattr(config, name) > 0:
            raise ConfigError(name, f"must be > 0, got {getattr(config, name)}")


def check_activation_specs(specs: Iterable[str], field: str = "activations") -> None:
    """``ConfigError`` on ``field`` for the first spec the activation registry rejects."""
    import actlab

    for spec in specs:
        config_check(field, actlab.activation, spec)


def check_input_scale(value: str) -> None:
    """``ConfigError`` unless ``input_scale`` names a spiral scale (``unit`` or ``radius``)."""
    if value not in ("unit", "radius"):
        raise ConfigError("input_scale", f"must be 'unit' or 'radius', got {value!r}")


def fmt_or_na(value: float | None, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, ``"n/a"`` when missing or not finite."""
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"
