"""The spec grammar: one tokenizer (shared with the norms) and one parser for activations.

Grammar: ``NAME`` followed by zero or more ``:OPTION``, where an option is ``key=value``
or a bare flag, e.g. ``gelu``, ``gelu:tanh``, ``leaky_relu:slope=0.1``,
``relu:shift=theory``, ``relu:shift=measured``, ``silu:beta=1.5:learnable``,
``gelu:adaptive:momentum=0.1``, ``relu2:clip=50``, ``gelu:topk=0.1``,
``gelu:topk=0.1:freeze_after=500``, ``gelu:topk=0.1:gaussian``, ``gelu:topk=0.05:channel``.

Options valid on every name, applied in this order after the function:
``clip=C`` (clamp at C from above), ``shift=B|theory|measured`` (subtract a constant;
``theory`` uses the Gaussian mean at pre-activation variance ``q``, default 1/3;
``measured`` the module's mean output on data, set by
:func:`actlab.activations.calibrate.calibrate_shifts_`), ``adaptive``
(subtract the per-example feature mean), ``topk=K`` (keep the fraction K of largest
outputs per example; with the flag ``gaussian`` those above the row's mean + std *
Phi^-1(1 - K), with ``gaussian_shift`` Gemma 3n's ``relu(x - cutoff)`` before the function;
with ``channel`` the fraction K of whole channels of (N, C, H, W) activations, ranked by their
mean over H x W: :func:`actlab.activations.sparse.channel_topk`).
``momentum=`` and ``freeze_after=`` apply to the running statistics of ``adaptive`` and of
``topk`` (its threshold), with the one meaning and range of
:mod:`actlab.activations.running`.

The parser validates names and options against the definitions
(:mod:`actlab.activations.definitions`); the registry API is
:mod:`actlab.activations.registry`, the module built from a parsed spec
:mod:`actlab.activations.spec_activation`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from actlab.activations.definitions import (
    _ALIASES,
    _REGISTRY,
    COMMON_FLAGS,
    COMMON_OPTIONS,
    _finite,
)
from actlab.activations.running import check_freeze_after, check_momentum
from actlab.errors import SpecError, did_you_mean

# The pre-activation variance q of ``shift=theory`` when the spec gives none.
DEFAULT_Q = 1.0 / 3.0

# The options of running statistics and the options that keep one.
RUNNING_OPTIONS = ("momentum", "freeze_after")
GAUSSIAN_FLAGS = ("gaussian", "gaussian_shift")
# The shifts given by a word instead of a number.
SHIFT_WORDS = ("theory", "measured")


@dataclass(frozen=True)
class ParsedSpec:
    """A parsed, validated spec: canonical ``name``, ``options`` and ``flags``.

    ``options`` maps option names to values: floats, ``"theory"`` for ``shift=theory``,
    ``"measured"`` for ``shift=measured``,
    an int for ``freeze_after``. ``flags`` holds the bare flags (``tanh``, ``learnable``,
    ``adaptive``, ``gaussian``, ``gaussian_shift``). Options equal to their default are dropped, so equal specs compare equal.
    """

    name: str
    options: dict[str, Any]
    flags: frozenset[str]

    @property
    def canonical(self) -> str:
        """The canonical spec string (alias resolved, defaults dropped, fixed order)."""
        return _format(self)

    @property
    def params(self) -> dict[str, Any]:
        """The function's own keyword parameters (numeric options with defaults, flags)."""
        defn = _REGISTRY[self.name]
        out: dict[str, Any] = {k: self.options.get(k, v) for k, v in defn.params.items()}
        out.update({f: f in self.flags for f in defn.flags})
        return out

    def __str__(self) -> str:
        return self.canonical


def _format_number(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _format(parsed: ParsedSpec) -> str:
    defn = _REGISTRY[parsed.name]
    parts = [parsed.name]
    for key in defn.params:
        if key in parsed.options:
            parts.append(f"{key}={_format_number(parsed.options[key])}")
    parts += [f for f in defn.flags + defn.module_flags if f in parsed.flags]
    for key in COMMON_OPTIONS:
        if key in COMMON_FLAGS:
            if key in parsed.flags:
                parts.append(key)
        elif key in parsed.options:
            parts.append(f"{key}={_format_number(parsed.options[key])}")
    return ":".join(parts)


def _closest(word: str, choices: list[str] | tuple[str, ...]) -> str:
    return did_you_mean(word, choices, cutoff=0.5, fallback=True, quote=True)


def _number(spec: str, key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"{spec!r}: option {key!r} needs a number, got {text!r}") from None
    return value


def _common_value(spec: str, key: str, text: str) -> Any:
    if key == "shift":
        if text in SHIFT_WORDS:
            return text
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise SpecError(f"{spec!r}: option 'shift' must be a finite number, 'theory' or "
                            f"'measured', got {text!r}"
                            + did_you_mean(text, SHIFT_WORDS, quote=True, prefix="; "))
        return value
    if key in RUNNING_OPTIONS:  # one range with the norms' (actlab.activations.running)
        check = check_freeze_after if key == "freeze_after" else check_momentum
        try:
            return check(text, f"option {key!r}")
        except ValueError as exc:
            raise SpecError(f"{spec!r}: {exc}") from None
    value = _number(spec, key, text)
    ranges = {
        "clip": (lambda v: math.isfinite(v) and v > 0, "> 0 and finite"),
        "q": (lambda v: math.isfinite(v) and v > 0, "> 0 and finite"),
        "topk": (lambda v: 0 < v <= 1, "in (0, 1]"),
    }
    ok, text_range = ranges[key]
    if not ok(value):
        raise SpecError(f"{spec!r}: option {key!r} must be {text_range}, got {text}")
    return value


def split_spec(spec: str, what: str = "activation") -> tuple[str, list[tuple[str, str | None]]]:
    """Split ``NAME:key=value:flag`` into the lower-cased name and ``[(key, value or None)]``.

    The one tokenizer of the spec grammar, shared by activations and norms
    (:func:`actlab.nn.norm_spec.parse_norm`). Keys are lower-cased, values stripped; a flag has
    the value ``None``. Empty options, empty values and repeated keys raise
    :class:`SpecError`; ``what`` names the kind of spec in the messages.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise SpecError(f"an {what} spec must be a non-empty string, got {spec!r}")
    name, *pieces = (p.strip() for p in spec.strip().split(":"))
    options: list[tuple[str, str | None]] = []
    for piece in pieces:
        if not piece:
            raise SpecError(f"{spec!r}: empty option (two ':' in a row or a trailing ':')")
        key, has_value, text = piece.partition("=")
        key, text = key.strip().lower(), text.strip()
        if has_value and not text:
            raise SpecError(f"{spec!r}: option {key!r} needs a value ({key}=...)")
        if any(key == seen for seen, _ in options):
            raise SpecError(f"{spec!r}: option {key!r} given twice")
        options.append((key, text if has_value else None))
    return name.lower(), options


def parse_spec(spec: str) -> ParsedSpec:
    """Parse and validate a spec string; raise :class:`SpecError` (a ``ValueError``) naming
    the closest valid names or options, or the option whose value is out of range."""
    if isinstance(spec, ParsedSpec):
        return spec
    raw_name, pieces = split_spec(spec)
    name, pieces = _expand_alias(spec, raw_name, pieces)
    if name not in _REGISTRY:
        names = sorted(_REGISTRY) + sorted(_ALIASES)
        raise SpecError(f"unknown activation {raw_name!r}; {_closest(raw_name, names)}")
    defn = _REGISTRY[name]
    options: dict[str, Any] = {}
    flags: set[str] = set()
    for key, text in pieces:
        if key not in defn.option_names:
            raise SpecError(f"{spec!r}: unknown option {key!r} for {name!r}; "
                            f"{_closest(key, defn.option_names)}")
        is_flag = key in defn.flags or key in defn.module_flags or key in COMMON_FLAGS
        if is_flag:
            if text is not None:
                raise SpecError(f"{spec!r}: option {key!r} is a flag and takes no value")
            flags.add(key)
            continue
        if text is None:
            raise SpecError(f"{spec!r}: option {key!r} needs a value ({key}=...)")
        if key in defn.params:
            value = _number(spec, key, text)
            check = defn.checks.get(key, _finite)
            if not check(value):
                why = defn.check_text.get(key, "a finite number")
                raise SpecError(f"{spec!r}: option {key!r} must be {why}, got {text}")
            if value != defn.params[key]:
                options[key] = value
        else:
            options[key] = _common_value(spec, key, text)
    gaussian = [f for f in GAUSSIAN_FLAGS if f in flags]
    if gaussian and "topk" not in options:
        raise SpecError(f"{spec!r}: flag {gaussian[0]!r} sets how 'topk=K' thresholds; it needs "
                        "'topk=K'")
    if len(gaussian) > 1:
        raise SpecError(f"{spec!r}: flags 'gaussian' (mask of the output) and 'gaussian_shift' "
                        "(Gemma 3n's shift of the input) exclude each other")
    if "channel" in flags:
        _check_channel(spec, options, flags)
    running = [k for k in RUNNING_OPTIONS if k in options]
    if running and "adaptive" not in flags and ("topk" not in options or gaussian):
        raise SpecError(f"{spec!r}: option {running[0]!r} sets a running statistic; it needs "
                        "the flag 'adaptive' or 'topk=K' (whose threshold becomes one), and "
                        "'gaussian' thresholds need none")
    if "q" in options:
        if options.get("shift") != "theory":
            raise SpecError(f"{spec!r}: option 'q' only applies with 'shift=theory'")
        if math.isclose(options["q"], DEFAULT_Q, rel_tol=0, abs_tol=1e-15):
            del options["q"]
    if options.get("shift") == 0.0:
        del options["shift"]
    parsed = ParsedSpec(name, options, frozenset(flags))
    wrong = defn.validate(parsed.params) if defn.validate is not None else None
    if wrong:
        raise SpecError(f"{spec!r}: {wrong}")
    return parsed


def _check_channel(spec: str, options: dict[str, Any], flags: set[str]) -> None:
    """The flag ``channel`` (structured Top-K) needs ``topk=K`` and takes no threshold rule:
    it ranks whole channels by exact selection, with no Gaussian or running cut."""
    if "topk" not in options:
        raise SpecError(f"{spec!r}: flag 'channel' keeps the fraction K of whole channels; it "
                        "needs 'topk=K' (e.g. 'gelu:topk=0.05:channel')")
    other = [f for f in GAUSSIAN_FLAGS if f in flags] + [k for k in RUNNING_OPTIONS
                                                          if k in options]
    if other:
        raise SpecError(f"{spec!r}: flag 'channel' (structured Top-K, whole channels by exact "
                        f"selection) has no threshold rule; drop {other[0]!r} or 'channel'")


def _expand_alias(spec: str, raw_name: str, pieces: list[tuple[str, str | None]]
                  ) -> tuple[str, list[tuple[str, str | None]]]:
    """The registered name and the options of ``raw_name``: an alias brings its own options
    (``quick_gelu`` is ``silu:beta=1.702``), which the spec may not give again."""
    target = _ALIASES.get(raw_name)
    if target is None:
        return raw_name, pieces
    name, preset = split_spec(target)
    fixed = {key for key, _ in preset}
    for key, _ in pieces:
        if key in fixed:
            raise SpecError(f"{spec!r}: option {key!r} is set by the name {raw_name!r} (which "
                            f"is {target!r}); start from {name!r} to choose it")
    return name, preset + pieces


def canonical_spec(spec: str) -> str:
    """The canonical form of ``spec`` (e.g. ``'swish:beta=1'`` -> ``'silu'``)."""
    return parse_spec(spec).canonical


def base_spec(spec: str | ParsedSpec) -> str:
    """The elementwise part of ``spec``: the function with its parameters and ``clip``, without
    shift, adaptive and topk (what the Gaussian shift of ``shift=theory`` is computed for)."""
    parsed = parse_spec(spec)
    keep = {k: v for k, v in parsed.options.items() if k not in ("shift", "q", "momentum",
                                                                   "freeze_after", "topk")}
    flags = frozenset(f for f in parsed.flags if f not in COMMON_FLAGS)
    return ParsedSpec(parsed.name, keep, flags).canonical

