"""Exception types shared across actlab.

Both derive from ``ValueError`` so callers can catch bad input generically.
"""

from __future__ import annotations


class SpecError(ValueError):
    """An activation spec string that cannot be parsed or has an invalid option."""


class ConfigError(ValueError):
    """An invalid experiment configuration field.

    The message always starts with the field name, e.g. ``"lr: must be > 0, got -1"``.
    """

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        self.why = why
        super().__init__(f"{field}: {why}")
