"""Exception types shared across actlab.

The input errors derive from ``ValueError`` so callers can catch bad input generically;
:class:`ShiftNotCalibratedError` is a ``RuntimeError`` (a model used before a step it needs).
:func:`did_you_mean` is the one "did you mean" hint for every name lookup;
:func:`config_check` turns any checker's ``ValueError`` into a :class:`ConfigError`;
:func:`renamed_keywords` keeps a renamed keyword argument working for one release, with a
``DeprecationWarning`` that names the new one.
"""

from __future__ import annotations

import difflib
import functools
import warnings
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class SpecError(ValueError):
    """An activation spec string that cannot be parsed or has an invalid option."""


class ShiftNotCalibratedError(RuntimeError):
    """A ``shift=measured`` activation used before
    :func:`actlab.activations.calibrate.calibrate_shifts_` measured its shift."""


class ConfigError(ValueError):
    """An invalid experiment configuration field.

    The message always starts with the field name, e.g. ``"lr: must be > 0, got -1"``.
    """

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        self.why = why
        super().__init__(f"{field}: {why}")


def config_check(field: str, check: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``check(*args, **kwargs)``, with a ``ValueError`` it raises re-raised as
    ``ConfigError(field, message)``: how a config field is validated by the code that
    parses it (an activation spec, a norm name, a model config).
    """
    try:
        return check(*args, **kwargs)
    except ValueError as exc:
        raise ConfigError(field, str(exc)) from None


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 3, cutoff: float = 0.4,
                 fallback: bool = False, quote: bool = False, prefix: str = "",
                 suffix: str = "") -> str:
    """The hint for an unknown name: ``"did you mean a, b?"`` naming the closest ``choices``.

    With no close match it returns ``""``, or with ``fallback`` the full list
    (``"valid: a, b, c"``). ``quote`` writes the names as Python strings (``'a'``), for
    names that may contain spaces or punctuation. A non-empty hint is preceded by ``prefix`` (e.g. ``"; "``), so
    callers can append it to their message whether or not there is one; ``suffix`` likewise
    follows a non-empty hint.
    """
    valid = [str(c) for c in choices]
    close = difflib.get_close_matches(str(word), valid, n=n, cutoff=cutoff)
    show = repr if quote else str
    if close:
        return f"{prefix}did you mean {', '.join(map(show, close))}?{suffix}"
    if fallback and valid:
        return f"{prefix}valid: {', '.join(map(show, sorted(valid)))}{suffix}"
    return ""


def renamed_keywords(**renames: str) -> Callable[[F], F]:
    """Decorator: keyword arguments renamed in the public API (``old="new"``) still work for
    one release.

    A call that passes ``old=`` gets a ``DeprecationWarning`` naming ``new=`` (pointing at
    the caller) and runs exactly as if it had passed ``new=``; passing both is a
    ``TypeError``. On ``__init__`` the warning names the class.
    """

    def decorate(fn: F) -> F:
        what = fn.__qualname__.rsplit("<locals>.", 1)[-1].removesuffix(".__init__")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(f"{what}() got {old}= and {new}=: {old}= is the old name "
                                    f"of {new}=, pass {new}= only")
                warnings.warn(f"{what}(): the keyword {old}= is renamed {new}=; {old}= still "
                              f"works in this release and will be removed in the next",
                              DeprecationWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
