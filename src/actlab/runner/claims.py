"""Addressable claims: ids, comparisons and the checks a run's claims must pass.

A claim's ``id`` is ``experiment/condition/what-is-claimed`` in lower-case kebab-case
parts joined by ``/`` (e.g. ``teacher-student/relu/shifted-ends-lower``); it stays the same
when the claim's wording changes, so runs can be compared claim by claim. ``value`` is the
number measured, ``comparison`` how it is judged against ``threshold``:

- ``"<"``, ``"<="``, ``">"``, ``">="``: ``value OP threshold``;
- ``"within"``: ``|value - reference| <= threshold``, ``reference`` being a number;
- ``"within-factor"``: ``reference / threshold <= value <= reference * threshold``;
- ``"in"``: a label among allowed labels (a categorical verdict);
- ``"all-of"`` / ``"any-of"``: several of the above, judged together;

Claims are declared as data with :class:`ClaimSpec`: an id, a text and a "measured" template
filled from the numbers (each threshold written once), a :class:`Check` (or
:func:`all_of` / :func:`any_of` of tests), the source's key with the section, figure or
table, and an optional precondition that leaves the claim undecided. :meth:`ClaimSpec.judge`
computes ``held``; no experiment writes it.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actlab.runner.experiment import Claim

ID_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*(?:/[a-z0-9.]+(?:-[a-z0-9.]+)*)+$")
SIMPLE = ("<", "<=", ">", ">=")
NUMERIC_OPS = (*SIMPLE, "within", "within-factor")  # the leaves that compare numbers
LEAF_OPS = (*NUMERIC_OPS, "in")
COMBINATORS = ("all-of", "any-of")
COMPARISONS = (*LEAF_OPS, *COMBINATORS, "")


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
    a simple one (``"in"``, a combinator or ``""``: judge those through their
    :class:`Check`). Raises ``ValueError`` on an unknown comparison.
    """
    if comparison not in COMPARISONS:
        raise ValueError(f"unknown comparison {comparison!r}; use one of {', '.join(COMPARISONS[:-1])}")
    if value is None or threshold is None or comparison in ("in", *COMBINATORS, ""):
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
        check = row.get("check")
        if (row.get("n") or 0) >= 2 and not row.get("deterministic"):
            # judged on its sample by the runner: the pooled value alone does not decide it
            if row.get("held") is not None and row.get("interval") is None and check and \
                    check.get("op") not in ("in", *COMBINATORS):
                problems.append(f"claim {cid!r}: held={row['held']} over {row['n']} seeds "
                                "without an interval")
        else:
            verdict = (check_from_dict(check).verdict() if check else
                       compare(row.get("value"), comparison, row.get("threshold"),
                               row.get("reference")))
            if verdict is not None and row.get("held") is not None and verdict != row.get("held"):
                problems.append(f"claim {cid!r}: held={row.get('held')} but {row.get('value')} "
                                f"{comparison} {row.get('threshold')} is {verdict}")
        if row.get("precondition") and row.get("held") is not None:
            problems.append(f"claim {cid!r}: precondition failed "
                            f"({row['precondition']}) but held={row['held']}")
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


# ------------------------------------------------------------------ claims as data
@dataclass(frozen=True)
class Check:
    """One judged condition: ``value OP bound`` (see the module docstring for the operators).

    ``bound`` is the threshold (``<`` ... ``>=``), the tolerance (``within``) or the factor
    (``within-factor``); ``reference`` the number ``within``/``within-factor`` compare to;
    for ``in``, ``value`` is a label and ``allowed`` the labels that make it hold.
    """

    op: str
    value: float | str | None
    bound: float | None = None
    reference: float | None = None
    allowed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.op not in LEAF_OPS:
            raise ValueError(f"unknown operator {self.op!r}; use one of {', '.join(LEAF_OPS)}")
        if self.op == "in":
            if not self.allowed:
                raise ValueError("operator 'in' needs allowed labels")
        else:  # numbers as plain floats (numpy and torch scalars serialise as JSON then)
            for name in ("value", "bound", "reference"):
                number = getattr(self, name)
                if number is not None:
                    object.__setattr__(self, name, float(number))
        if self.op in ("within", "within-factor") and self.reference is None:
            raise ValueError(f"operator {self.op!r} needs a reference")

    def verdict(self) -> bool | None:
        """Whether the condition holds; ``None`` when a number is missing or not finite."""
        if self.op == "in":
            return None if self.value is None else str(self.value) in self.allowed
        value = None if self.value is None else float(self.value)
        return compare(value, self.op, self.bound, self.reference)

    def leaves(self) -> list[Check]:
        """This test, as the one leaf of itself."""
        return [self]

    def as_dict(self) -> dict[str, Any]:
        """JSON form (``claims.json``'s ``check``), read back by :func:`check_from_dict`."""
        out: dict[str, Any] = {"op": self.op, "value": self.value}
        if self.op == "in":
            out["allowed"] = list(self.allowed)
        else:
            out["bound"] = self.bound
            if self.reference is not None:
                out["reference"] = self.reference
        return out


@dataclass(frozen=True)
class Combined:
    """``all-of`` (every part holds) or ``any-of`` (some part holds) of tests, in three values:
    a part that cannot be decided makes the whole undecided unless the others settle it."""

    op: str
    parts: tuple[Check | Combined, ...]

    def __post_init__(self) -> None:
        if self.op not in COMBINATORS:
            raise ValueError(f"unknown combinator {self.op!r}; use {' or '.join(COMBINATORS)}")
        if not self.parts:
            raise ValueError(f"{self.op} needs at least one test")

    def verdict(self) -> bool | None:
        """All-of: False if a part fails, else None if one is undecided, else True; any-of dually."""
        verdicts = [p.verdict() for p in self.parts]
        settle = self.op == "any-of"  # any-of is settled by a True, all-of by a False
        if settle in verdicts:
            return settle
        return None if None in verdicts else not settle

    def leaves(self) -> list[Check]:
        """The tests at the leaves, in order (the first is the claim's main number)."""
        return [leaf for part in self.parts for leaf in part.leaves()]

    def as_dict(self) -> dict[str, Any]:
        """JSON form: ``{"op": "all-of", "parts": [...]}``."""
        return {"op": self.op, "parts": [p.as_dict() for p in self.parts]}


AnyCheck = Check | Combined


def lt(value: float | None, bound: float | None) -> Check:
    """``value < bound``."""
    return Check("<", value, bound)


def le(value: float | None, bound: float | None) -> Check:
    """``value <= bound``."""
    return Check("<=", value, bound)


def gt(value: float | None, bound: float | None) -> Check:
    """``value > bound``."""
    return Check(">", value, bound)


def ge(value: float | None, bound: float | None) -> Check:
    """``value >= bound``."""
    return Check(">=", value, bound)


def within(value: float | None, reference: float, tolerance: float) -> Check:
    """``|value - reference| <= tolerance``."""
    return Check("within", value, tolerance, reference)


def within_factor(value: float | None, reference: float, factor: float) -> Check:
    """``reference / factor <= value <= reference * factor``."""
    return Check("within-factor", value, factor, reference)


def among(label: str | None, allowed: Iterable[str]) -> Check:
    """The categorical verdict: ``label`` is one of ``allowed``."""
    return Check("in", label, allowed=tuple(str(a) for a in allowed))


def all_of(*tests: AnyCheck) -> Combined:
    """Every test holds."""
    return Combined("all-of", tuple(tests))


def any_of(*tests: AnyCheck) -> Combined:
    """At least one test holds."""
    return Combined("any-of", tuple(tests))


def check_from_dict(data: Mapping[str, Any]) -> AnyCheck:
    """A test back from its :meth:`Check.as_dict` / :meth:`Combined.as_dict` form."""
    if data["op"] in COMBINATORS:
        return Combined(data["op"], tuple(check_from_dict(p) for p in data["parts"]))
    return Check(data["op"], data.get("value"), data.get("bound"), data.get("reference"),
                tuple(data.get("allowed", ())))


class _Numbers(string.Formatter):
    """``str.format`` that writes a missing or non-finite number as ``n/a``."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return "n/a"
        return super().format_field(value, format_spec)


def fill(template: str, numbers: Mapping[str, Any]) -> str:
    """``template`` with ``{name:spec}`` fields filled from ``numbers`` (``n/a`` if missing)."""
    try:
        return _Numbers().vformat(template, (), dict(numbers))
    except KeyError as exc:
        raise ValueError(f"template {template!r} names {exc} that the numbers lack") from None


@dataclass
class ClaimSpec:
    """A claim declared as data; :meth:`judge` turns it into the judged :class:`Claim`.

    ``text`` and ``measured`` are templates filled from ``numbers`` (the published values,
    thresholds and measurements, each written once); ``check`` decides ``held``; ``source`` is
    a key of :mod:`actlab.runner.sources` and ``where`` the section, figure or table;
    ``quoted`` names the numbers the source states (the paper column, checked against the
    document's text by ``tools/fidelity.py --sources``); a claim of our own quotes none.
    ``predicted`` names our own predictions among the numbers (a theory computed by actlab
    at our setting, e.g. eq. 61 at our width): they get a column of their own, never the
    paper's, so a name cannot be both quoted and predicted.
    A non-empty ``undecided_because`` (a failed precondition: too few seeds, a protocol that
    is not comparable) leaves the claim undecided whatever the test says.

    Over seeds the runner judges the claim on its sample (:mod:`actlab.runner.verdicts`): the
    same spec computed on every seed's summary alone. ``paired`` says the two sides of a check
    share initial weights and batches per seed (per-seed differences form one sample);
    ``False`` compares them as unpaired samples (Welch). ``deterministic`` declares a claim
    judged on its value alone (a closed form, a theory check, an exact count): one seed
    decides it. ``post_hoc`` says why the bar was chosen after our values were seen (empty:
    fixed before looking); such claims are counted apart in the fidelity header.
    """

    id: str
    text: str
    measured: str
    check: AnyCheck
    source: str
    where: str = ""
    numbers: Mapping[str, Any] = field(default_factory=dict)
    quoted: tuple[str, ...] = ()
    predicted: tuple[str, ...] = ()
    undecided_because: str = ""
    paired: bool = True
    deterministic: bool = False
    post_hoc: str = ""

    def judge(self) -> Claim:
        """The claim with ``held`` computed from the test (``None`` under a failed precondition)."""
        from actlab.runner.experiment import Claim
        from actlab.runner.sources import cite, source

        kind = source(self.source)
        missing = [name for name in (*self.quoted, *self.predicted) if name not in self.numbers]
        if missing:
            raise ValueError(f"claim {self.id}: quoted or predicted numbers {missing} are not "
                             "in its numbers")
        if kind.is_ours and self.quoted:
            raise ValueError(f"claim {self.id}: a claim of ours quotes no source's numbers")
        if kind.is_code and self.quoted:
            raise ValueError(f"claim {self.id}: released code has no text to check quoted "
                             "numbers against; quote none")
        if both := sorted(set(self.quoted) & set(self.predicted)):
            raise ValueError(f"claim {self.id}: {both} cannot be both quoted (the source's) and "
                             "predicted (ours)")
        main = self.check.leaves()[0]
        numeric = main.op != "in" and not isinstance(main.value, str)
        held = None if self.undecided_because else self.check.verdict()
        return Claim(fill(self.text, self.numbers), fill(self.measured, self.numbers), held,
                     cite(kind.key, self.where), id=self.id,
                     value=main.value if numeric else None, comparison=self.check.op,
                     threshold=main.bound if numeric else None,
                     reference=main.reference if numeric else None,
                     check=self.check.as_dict(), source_key=kind.key, where=self.where,
                     quoted={name: float(self.numbers[name]) for name in self.quoted},
                     predicted={name: float(self.numbers[name]) for name in self.predicted},
                     precondition=self.undecided_because, paired=self.paired,
                     deterministic=self.deterministic, reason=self.undecided_because,
                     post_hoc=self.post_hoc)


def judge_all(specs: Iterable[ClaimSpec]) -> list[Claim]:
    """:meth:`ClaimSpec.judge` of each spec, in order."""
    return [spec.judge() for spec in specs]
