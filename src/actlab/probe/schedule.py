"""When a probe records: every N steps, logarithmically spaced steps, or an explicit list.

A schedule answers one question, ``due(step)``, for 0-based training steps. It is pure
Python arithmetic, so asking costs nothing on the device.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from actlab.errors import ConfigError


class Schedule:
    """Base class: decides whether a 0-based training step is recorded."""

    def due(self, step: int) -> bool:
        """True when ``step`` is recorded."""
        raise NotImplementedError

    def steps(self, until: int) -> list[int]:
        """All recorded steps in ``[0, until)``; handy for planning and tests."""
        return [s for s in range(until) if self.due(s)]


@dataclass(frozen=True)
class Every(Schedule):
    """Record steps ``offset, offset + n, offset + 2n, ...``."""

    n: int
    offset: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise ConfigError("every", f"must be an integer >= 1, got {self.n!r}")
        if self.offset < 0:
            raise ConfigError("offset", f"must be >= 0, got {self.offset!r}")

    def due(self, step: int) -> bool:
        """True on every ``n``-th step from ``offset`` on."""
        return step >= self.offset and (step - self.offset) % self.n == 0


@dataclass
class LogSpaced(Schedule):
    """Record step 0 and the steps ``floor(10 ** (j / per_decade))``, j = 0, 1, 2, ...

    With ``per_decade=10`` this gives 0, 1, 2, 3, 5, 6, 7, 10, 12, 15, 19, 25, ... : dense
    early in training, where drift and overshoot happen, sparse later.
    """

    per_decade: int = 10
    _cache: list[int] = field(default_factory=lambda: [0], repr=False)
    _j: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.per_decade, int) or self.per_decade < 1:
            raise ConfigError("per_decade", f"must be an integer >= 1, got {self.per_decade!r}")

    def _extend_to(self, step: int) -> None:
        while self._cache[-1] < step:
            value = math.floor(10 ** (self._j / self.per_decade) + 1e-9)
            self._j += 1
            if value > self._cache[-1]:
                self._cache.append(value)

    def due(self, step: int) -> bool:
        """True when ``step`` is one of the logarithmically spaced steps."""
        self._extend_to(step)
        i = bisect.bisect_left(self._cache, step)
        return i < len(self._cache) and self._cache[i] == step


@dataclass(frozen=True)
class AtSteps(Schedule):
    """Record exactly the listed steps."""

    at: frozenset[int]

    def due(self, step: int) -> bool:
        """True when ``step`` was listed."""
        return step in self.at


def as_schedule(every: int | str | Iterable[int] | Schedule) -> Schedule:
    """Turn the ``every=`` argument of :class:`~actlab.probe.probe.Probe` into a schedule.

    ``int`` -> :class:`Every`; ``"log"`` or ``"log:<per_decade>"`` -> :class:`LogSpaced`;
    an iterable of ints -> :class:`AtSteps`; a :class:`Schedule` is returned as is.
    """
    if isinstance(every, Schedule):
        return every
    if isinstance(every, bool):
        raise ConfigError("every", f"must be an int, 'log', a list of steps or a Schedule, got {every!r}")
    if isinstance(every, int):
        return Every(every)
    if isinstance(every, str):
        name, _, arg = every.partition(":")
        if name != "log":
            raise ConfigError("every", f"unknown schedule {every!r}; did you mean 'log' or 'log:10'?")
        try:
            return LogSpaced(int(arg)) if arg else LogSpaced()
        except ValueError as exc:
            raise ConfigError("every", f"'log:<per_decade>' needs an integer, got {arg!r}") from exc
    try:
        steps = [int(s) for s in every]
    except TypeError as exc:
        raise ConfigError("every", f"must be an int, 'log', a list of steps or a Schedule, got {every!r}") from exc
    if any(s < 0 for s in steps):
        raise ConfigError("every", "listed steps must be >= 0")
    return AtSteps(frozenset(steps))


@dataclass(frozen=True)
class AlsoAt(Schedule):
    """``schedule``'s steps and the listed ``steps`` too (e.g. a run's last step)."""

    schedule: Schedule
    steps_too: frozenset[int]

    def due(self, step: int) -> bool:
        """Whether ``step`` is recorded."""
        return step in self.steps_too or self.schedule.due(step)

