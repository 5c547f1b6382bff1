"""How units are scheduled: worker and thread counts, longest-first order, and progress.

``run``, ``sweep`` and ``reproduce`` share these defaults, so one command gives the numbers a
reproduction gives: every unit runs with :data:`UNIT_THREADS` torch thread (thread counts
change the order of floating-point reductions), on as many worker processes as the CPU has
cores, longest unit first by the unit times recorded in ``unit_times.json`` (a quick
reproduction's; ids hash point, unit and seeds, so only unchanged units are matched).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

UNIT_TIMES = Path(__file__).with_name("unit_times.json")  # committed: a quick run's unit times
FALLBACK_UNIT_S = 10.0  # estimate of a unit when the table knows no experiment at all
UNIT_THREADS = 1  #: torch threads of every unit, unless told otherwise
PROGRESS_EVERY_S = 30.0  # a plain progress line at least this often when stderr is no TTY


def default_workers(device: str) -> int:
    """``--workers`` when not given: every core on the CPU, one on a GPU (units in parallel
    processes would share one device)."""
    return (os.cpu_count() or 1) if device == "cpu" else 1


def load_unit_times(path: Path = UNIT_TIMES) -> dict[str, dict[str, float]]:
    """Seconds per unit id per experiment from a ``unit_times.json`` (empty if unreadable)."""
    try:
        table = json.loads(Path(path).read_text(encoding="utf-8"))["experiments"]
        return {name: {uid: float(t) for uid, t in units.items()} for name, units in table.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def estimates(experiment: str, unit_ids: Sequence[str],
              table: dict[str, dict[str, float]]) -> list[float]:
    """Estimated seconds of each unit: its recorded time when the table has its id, else the
    mean recorded unit of its experiment, else the median of those means over all
    experiments. Only the order matters, so quick-scale times also rank other scales."""
    means = {name: statistics.fmean(times.values()) for name, times in table.items() if times}
    fallback = statistics.median(means.values()) if means else FALLBACK_UNIT_S
    known = table.get(experiment, {})
    return [known.get(uid, means.get(experiment, fallback)) for uid in unit_ids]


def longest_first(experiment: str, unit_ids: Sequence[str],
                  table: dict[str, dict[str, float]] | None = None) -> list[int]:
    """Positions of ``unit_ids`` ordered longest estimate first (ties keep plan order)."""
    times = estimates(experiment, unit_ids, load_unit_times() if table is None else table)
    return sorted(range(len(unit_ids)), key=lambda i: -times[i])


class Progress:
    """Units done of a total: a tqdm bar on a terminal; otherwise (a log, CI) a plain line on
    stderr every :data:`PROGRESS_EVERY_S` seconds while units run, and one at the end.
    ``show=False`` silences both (the tests' and the Python API's choice)."""

    def __init__(self, total: int, description: str, show: bool | None = None,
                 every_s: float = PROGRESS_EVERY_S) -> None:
        tty = sys.stderr.isatty()
        self.total, self.description, self.every_s = total, description, every_s
        self.done = 0
        self.started = time.monotonic()
        from tqdm.auto import tqdm

        self._bar = tqdm(total=total, desc=description, unit="unit", file=sys.stderr,
                         disable=not (show if show is not None else tty))
        self._stop = threading.Event()
        self._ticker = None
        if show is not False and not tty and total > 0:  # a clock, not unit ends: units are long
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.every_s):
            print(self.line(), file=sys.stderr, flush=True)

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.done += n
        self._bar.update(n)

    def line(self, now: float | None = None) -> str:
        """``"<description>: 3/12 units, 5:07 elapsed"``."""
        elapsed = int((now or time.monotonic()) - self.started)
        return (f"{self.description}: {self.done}/{self.total} units, "
                f"{elapsed // 60}:{elapsed % 60:02d} elapsed")

    def write_or_echo(self, line: str, echo: Any) -> None:
        """``echo(line)`` without breaking the bar (cleared before, redrawn after)."""
        self._bar.clear()
        echo(line)
        self._bar.refresh()

    def close(self) -> None:
        """Close the bar; stop the clock, with a last line."""
        self._bar.close()
        if self._ticker is not None and not self._stop.is_set():
            self._stop.set()
            print(self.line(), file=sys.stderr, flush=True)


def reorder(items: Sequence[Any], order: Sequence[int]) -> list[Any]:
    """``items`` in the positions ``order`` gives."""
    return [items[i] for i in order]
