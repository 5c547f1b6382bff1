"""Compare the ``summary.json`` files of two reproductions (behaviour kept across a refactor).

    python tools/compare_summaries.py BEFORE_DIR AFTER_DIR [--rtol 1e-6] [--only NAME ...]

Both directories are ``actlab reproduce --out`` folders (``<experiment>/<name>/summary.json``)
or single run folders. Every number is compared to ``rtol`` relative (``atol`` for values near
zero); strings, booleans and list lengths must be equal. Keys that measure the clock (their
name contains ``seconds``, ``time``, ``ms_per``, ``per_s``, ``speed``, ``throughput`` or
``wall``, ends in ``_s``, or is a timed ratio or spread; everything below such a key) are
skipped. Prints one line per difference and exits 1 if any.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

# Keys that hold wall-clock measurements (and the ratios and spreads made of them).
CLOCK = re.compile(r"seconds|time|ms_per|speed|throughput|wall|elapsed|per_s|_s$"
                   r"|ratio_to_layernorm|ratio_noise|seed_spread", re.IGNORECASE)


def _differences(a: Any, b: Any, path: str, rtol: float, atol: float) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}: key {k!r} only in {'before' if k in a else 'after'}"
               for k in sorted(set(a) ^ set(b), key=str) if not CLOCK.search(str(k))]
        for key in sorted(set(a) & set(b), key=str):
            if not CLOCK.search(str(key)):
                out += _differences(a[key], b[key], f"{path}.{key}", rtol, atol)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b))
                for d in _differences(x, y, f"{path}[{i}]", rtol, atol)]
    numbers = (int, float)
    if (isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool)
            and not isinstance(b, bool)):
        if math.isnan(a) and math.isnan(b):
            return []
        if a == b or abs(a - b) <= max(atol, rtol * max(abs(a), abs(b))):
            return []
        return [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def summaries(root: Path) -> dict[str, Path]:
    """``{relative folder: summary.json}`` for every summary under ``root``."""
    return {str(p.parent.relative_to(root)): p for p in sorted(root.rglob("summary.json"))}


def compare_keys(before: Path, after: Path, only: list[str] | None = None) -> list[str]:
    """The run folders compared: those of either side, restricted to the experiments ``only``."""
    keys = sorted(set(summaries(before)) | set(summaries(after)))
    return [k for k in keys if k.split("/")[0] in only] if only else keys


def compare(before: Path, after: Path, *, rtol: float = 1e-6, atol: float = 1e-12,
            only: list[str] | None = None) -> list[str]:
    """Every difference between the summaries under ``before`` and ``after``."""
    a, b = summaries(before), summaries(after)
    out: list[str] = []
    for key in compare_keys(before, after, only):
        if key not in a or key not in b:
            out.append(f"{key}: summary only in {'before' if key in a else 'after'}")
            continue
        out += _differences(json.loads(a[key].read_text()), json.loads(b[key].read_text()),
                            key, rtol, atol)
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line: print the differences; exit 1 if there are any."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rtol", type=float, default=1e-6)
    parser.add_argument("--atol", type=float, default=1e-12)
    parser.add_argument("--only", nargs="*", help="experiment names to compare (A B or A,B)")
    args = parser.parse_args(argv)
    only = [n for item in args.only or [] for n in item.split(",") if n] or None
    diffs = compare(args.before, args.after, rtol=args.rtol, atol=args.atol, only=only)
    for line in diffs:
        print(line)
    n = len(compare_keys(args.before, args.after, only))
    print(f"{len(diffs)} difference(s) over {n} summaries", file=sys.stderr)
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
