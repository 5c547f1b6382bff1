"""Addressable claims: ids, comparisons and the checks a run's claims must pass.

A claim's ``id`` is ``experiment/condition/what-is-claimed`` in lower-case kebab-case
parts joined by ``/`` (e.g. ``teacher-student/relu/shifted-ends-lower``); it stays the same
when the claim's wording changes, so runs can be compared claim by claim. ``value`` is the
number measured, ``comparison`` how it is judged against ``threshold``:

- ``"<"``, ``"<="``, ``">"``, ``">="``: ``value OP threshold``;
- ``"within"``: ``|value - reference| <= threshold``, ``reference`` being a number;
- ``"within-factor"``: ``reference / threshold <= value <= reference * threshold``;
- ``"compound"``: ``held`` combines several conditions (or a categorical verdict) named in
  the claim's text, of which ``value``/``threshold`` are the main number; :func:`compare`
  does not decide it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

ID_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*(?:/[a-z0-9.]+(?:-[a-z0-9.]+)*)+$")
SIMPLE = ("<", "<=", ">", ">=")
COMPARISONS = (*SIMPLE, "within", "within-factor", "compound", "")


def slug(text: Any) -> str:
    """Lower-case kebab-case form of ``text`` for an id part (``"leaky_relu-lr4"`` -> ``leaky-relu-lr4``)."""
    out = re.sub(r"[^a-z0-9.]+", "-", str(text).lower()).strip("-")
    return re.sub(r"-?\.-?", ".", out) or "x"


def claim_id(*parts: Any) -> str:
    """An id from its parts, each made a :func:`slug` (``claim_id("drift", "relu", "x y")``)."""
    return "/".join(slug(p) for p in parts)


def compare(value: float | None, comparison: str, threshold: float | None,
            reference: float | None = None) -> bool | None:
    """The verdict of ``value`` against ``threshold``; ``None`` when it cannot be decided.

    Undecided when the value or threshold is missing or not finite, or the comparison is not
    a simple one (``"compound"``, ``""``). Raises ``ValueError`` on an unknown comparison.
    """
    if comparison not in COMPARISONS:
        raise ValueError(f"unknown comparison {comparison!r}; use one of {', '.join(COMPARISONS[:-1])}")
    if value is None or threshold is None or comparison in ("compound", ""):
        return None
    if not (math.isfinite(value) and math.isfinite(threshold)):
        return None
    if comparison in ("within", "within-factor"):
        if reference is None:
            return None
        if comparison == "within":
            return abs(value - reference) <= threshold
        return reference / threshold <= value <= reference * threshold
    return {"<": value < threshold, "<=": value <= threshold,
            ">": value > threshold, ">=": value >= threshold}[comparison]


def claim_problems(claims: Iterable[Any]) -> list[str]:
    """Lines naming each bad id, repeated id and verdict that contradicts its comparison.

    ``claims`` are :class:`~actlab.runner.experiment.Claim` objects or their dicts; an
    empty list means they are addressable and consistent.
    """
    problems, seen = [], set()
    for claim in claims:
        row = claim if isinstance(claim, dict) else vars(claim)
        cid = row.get("id", "")
        if not ID_PATTERN.match(cid or ""):
            problems.append(f"claim id {cid!r} is not experiment/condition/kebab-case-slug")
        key = (row.get("point", ""), cid)
        if key in seen:
            problems.append(f"claim id {cid!r} repeated")
        seen.add(key)
        comparison = row.get("comparison", "")
        if comparison not in COMPARISONS:
            problems.append(f"claim {cid!r}: unknown comparison {comparison!r}")
            continue
        verdict = compare(row.get("value"), comparison, row.get("threshold"), row.get("reference"))
        if verdict is not None and row.get("held") is not None and verdict != row.get("held"):
            problems.append(f"claim {cid!r}: held={row.get('held')} but {row.get('value')} "
                            f"{comparison} {row.get('threshold')} is {verdict}")
    return problems


def largest_gap(*pairs: tuple[Iterable[float], Iterable[float]]) -> float:
    """Largest ``|measured - published|`` over ``(measured, published)`` sequence pairs.

    A NaN gap counts as infinite, so ``largest_gap(...) <= tol`` holds exactly when every
    entry is within ``tol``; sequences of unequal length raise ``ValueError``.
    """
    gaps = [abs(float(a) - float(b)) for measured, published in pairs
            for a, b in zip(measured, published, strict=True)]
    return max((g if g == g else math.inf for g in gaps), default=0.0)


def fmt_or_na(value: float | None, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, ``"n/a"`` when missing or not finite."""
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"
