"""Verdicts over seeds: a claim is held only when its interval clears the bar.

One rule for the whole project (the statistics are written out in ``docs/runner.md``):

- A claim's *sample* is its check computed on each seed alone (the runner summarises every
  seed by itself). For a leaf ``value OP bound`` the judged quantity is ``value - bound``:
  *paired* (the default) when the two sides of a seed share initial weights and batches, so
  the per-seed differences form one sample; *unpaired* (Welch) when they cannot (other
  widths, other architectures). A bar that is a constant is the paired case with a constant.
- The interval is the two-sided 95 % Student t-interval of the mean difference (Welch's for
  unpaired samples). *Held* when the whole interval satisfies the check, *not held* when the
  whole interval violates it, *undecided* otherwise, with the number of seeds that would
  separate it at the observed spread.
- ``within`` is an equivalence claim: two one-sided tests against the margin, i.e. held when
  the 95 % interval lies inside ``[-tol, tol]`` (each side at 2.5 %), not held when it lies
  wholly outside. ``within-factor`` does the same on the log ratio.
- ``in`` (a rank, a best-of, a categorical label) is held when the label is allowed in every
  seed and in the pooled run (three seeds at least), not held when it is allowed in none.
- ``all-of`` is an intersection-union test: every part held at 95 % (no correction), not
  held when one part is violated at the Bonferroni level ``1 - 0.05/k``. ``any-of`` is the
  dual: held when one part is held at ``1 - 0.05/k`` (Holm's first step), not held when every
  part is violated at 95 %.
- A claim with one seed is undecided unless declared ``deterministic`` (a closed form, a
  theory check, an exact count); a deterministic claim is judged on its value alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from actlab.runner.claims import COMBINATORS

LEVEL = 0.95  # the project's one confidence level (two-sided)
ALPHA = 1.0 - LEVEL
MIN_RANK_SEEDS = 3  # a label judged stable over fewer seeds says little
MAX_SEEDS_ESTIMATE = 10_000

# Why a claim is undecided: the two kinds the fidelity header counts apart.
TOO_FEW_SEEDS = "too few seeds"
SPANS_BAR = "interval spans the bar"


@dataclass(frozen=True)
class Interval:
    """A two-sided confidence interval of a mean (or a difference of means)."""

    low: float
    high: float
    mean: float
    n: int
    df: float

    def as_list(self) -> list[float]:
        """``[low, high]`` for ``claims.json``."""
        return [float(self.low), float(self.high)]


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def t_interval(sample: Sequence[float], level: float = LEVEL) -> Interval | None:
    """Student's t-interval of the mean of ``sample`` (non-finite entries dropped).

    ``None`` with fewer than two finite values. A sample without spread gives an interval
    of width zero (the mean is then known exactly at that sample).
    """
    x = _finite(sample)
    n = len(x)
    if n < 2:
        return None
    mean = math.fsum(x) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in x) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return Interval(mean - half, mean + half, mean, n, n - 1)


def welch_interval(a: Sequence[float], b: Sequence[float],
                   level: float = LEVEL) -> Interval | None:
    """Welch's interval of ``mean(a) - mean(b)`` for unpaired samples (``None`` if either has
    fewer than two finite values). ``n`` is the smaller sample's size."""
    xa, xb = _finite(a), _finite(b)
    if len(xa) < 2 or len(xb) < 2:
        return None
    ma, mb = math.fsum(xa) / len(xa), math.fsum(xb) / len(xb)
    va = math.fsum((v - ma) ** 2 for v in xa) / (len(xa) - 1) / len(xa)
    vb = math.fsum((v - mb) ** 2 for v in xb) / (len(xb) - 1) / len(xb)
    se = math.sqrt(va + vb)
    if se == 0.0:
        return Interval(ma - mb, ma - mb, ma - mb, min(len(xa), len(xb)), math.inf)
    df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return Interval(ma - mb - half, ma - mb + half, ma - mb, min(len(xa), len(xb)), df)


def seeds_needed(distance: float, sd: float, level: float = LEVEL,
                 unpaired: bool = False) -> int | None:
    """About how many seeds would make the interval's half-width smaller than ``distance``
    (how far the mean sits from the bar) at the observed spread ``sd``.

    The smallest ``n >= 2`` with ``t(n-1) * sd * sqrt(k / n) < distance`` (``k`` = 2 for two
    unpaired arms of ``n`` seeds each, whose sds are pooled in ``sd``); ``None`` when the mean
    sits on the bar (no number of seeds separates it) or beyond :data:`MAX_SEEDS_ESTIMATE`.
    """
    if not (math.isfinite(distance) and math.isfinite(sd)) or distance <= 0:
        return None
    if sd == 0:
        return 2
    arms = 2.0 if unpaired else 1.0
    for n in range(2, MAX_SEEDS_ESTIMATE + 1):
        if float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd * math.sqrt(arms / n) < distance:
            return n
    return None


def bonferroni_level(k: int, level: float = LEVEL) -> float:
    """The per-test level that keeps the family-wise level ``level`` over ``k`` tests."""
    return 1.0 - (1.0 - level) / max(1, k)


def holm(pvalues: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected at family-wise ``alpha``."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    rejected = [False] * len(pvalues)
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (len(pvalues) - rank):
            break
        rejected[i] = True
    return rejected


def tost(sample: Sequence[float], margin: float, level: float = LEVEL) -> bool | None:
    """Two one-sided tests: is the mean of ``sample`` within ``(-margin, margin)``?

    Each one-sided test at ``(1 - level) / 2``, which is the same as the two-sided ``level``
    interval lying inside the margin (the project's rule; conservative against the textbook
    90 % interval). ``None`` with fewer than two values.
    """
    interval = t_interval(sample, level)
    if interval is None:
        return None
    return -margin < interval.low and interval.high < margin


# ------------------------------------------------------------------ judging a sample
@dataclass
class Verdict:
    """The verdict on a sample: ``held`` (three-valued), its interval on the claim's main
    quantity, the seeds it rests on, the seeds that would separate an undecided one, why."""

    held: bool | None
    interval: Interval | None = None
    n: int = 0
    seeds_needed: int | None = None
    reason: str = ""

    def fields(self) -> dict[str, Any]:
        """The ``claims.json`` columns this verdict fills."""
        return {"held": self.held, "n": self.n,
                "interval": self.interval.as_list() if self.interval else None,
                "seeds_needed": self.seeds_needed, "reason": self.reason}


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, str):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _difference_interval(op: str, pooled: Mapping[str, Any], seeds: Sequence[Mapping[str, Any]],
                         paired: bool, level: float) -> tuple[Interval | None, float, float]:
    """The interval of the leaf's judged quantity and the bounds ``(low_bar, high_bar)`` it is
    compared with: ``value - bound`` against 0 for the inequalities, ``value - reference``
    against ``±tol`` for ``within``, the log ratio against ``±log(factor)`` for
    ``within-factor``."""
    values = [_number(s.get("value")) for s in seeds]
    if op in ("within", "within-factor"):
        margin = _number(pooled.get("bound"))
        refs = [_number(s.get("reference")) for s in seeds]
        ref_pooled = _number(pooled.get("reference"))
        refs = [ref if ref is not None else ref_pooled for ref in refs]
        pairs = [(v, r) for v, r in zip(values, refs) if v is not None and r is not None]
        if margin is None:
            return None, math.nan, math.nan
        if op == "within":
            return t_interval([v - r for v, r in pairs], level), -margin, margin
        if margin <= 0 or any(v <= 0 or r <= 0 for v, r in pairs):
            return None, math.nan, math.nan
        log_margin = math.log(margin)
        return t_interval([math.log(v / r) for v, r in pairs], level), -log_margin, log_margin
    bounds = [_number(s.get("bound")) for s in seeds]
    pooled_bound = _number(pooled.get("bound"))
    bounds = [b if b is not None else pooled_bound for b in bounds]
    finite_bounds = [b for b in bounds if b is not None]
    constant = len(set(finite_bounds)) <= 1
    if paired or constant:
        diffs = [v - b for v, b in zip(values, bounds) if v is not None and b is not None]
        return t_interval(diffs, level), 0.0, 0.0
    return welch_interval([v for v in values if v is not None], finite_bounds, level), 0.0, 0.0


def _leaf_side(op: str, interval: Interval, low_bar: float, high_bar: float) -> bool | None:
    """True: the whole interval satisfies the leaf; False: it wholly violates it; else None."""
    lo, hi = interval.low, interval.high
    if op == "<":
        return True if hi < 0 else False if lo >= 0 else None
    if op == "<=":
        return True if hi <= 0 else False if lo > 0 else None
    if op == ">":
        return True if lo > 0 else False if hi <= 0 else None
    if op == ">=":
        return True if lo >= 0 else False if hi < 0 else None
    # within / within-factor: inside the margin, or wholly outside it
    if low_bar <= lo and hi <= high_bar:
        return True
    return False if hi < low_bar or lo > high_bar else None


def _label_verdict(pooled: Mapping[str, Any], seeds: Sequence[Mapping[str, Any]]
                   ) -> tuple[bool | None, int, str]:
    allowed = set(pooled.get("allowed", ()))
    labels = [s.get("value") for s in seeds if s.get("value") is not None]
    n = len(labels)
    inside = sum(str(label) in allowed for label in labels)
    pooled_in = pooled.get("value") is not None and str(pooled.get("value")) in allowed
    if n < MIN_RANK_SEEDS:
        return None, n, f"{TOO_FEW_SEEDS}: a label needs {MIN_RANK_SEEDS} seeds, has {n}"
    if inside == n and pooled_in:
        return True, n, ""
    if inside == 0 and not pooled_in:
        return False, n, ""
    return None, n, f"unstable over seeds: allowed in {inside} of {n}"


def _leaf_verdict(pooled: Mapping[str, Any], seeds: Sequence[Mapping[str, Any]], paired: bool,
                  level: float) -> Verdict:
    op = pooled["op"]
    if op == "in":
        held, n, reason = _label_verdict(pooled, seeds)
        return Verdict(held, None, n, None, reason)
    interval, low_bar, high_bar = _difference_interval(op, pooled, seeds, paired, level)
    if interval is None:
        n = sum(_number(s.get("value")) is not None for s in seeds)
        lost = sum(s.get("value") is not None and _number(s.get("value")) is None for s in seeds)
        why = f"; {lost} seed(s) gave no finite value (diverged?)" if lost else ""
        return Verdict(None, None, n, None, f"{TOO_FEW_SEEDS}: n = {n}{why}" if n < 2
                       else f"no interval: values not comparable{why}")
    side = _leaf_side(op, interval, low_bar, high_bar)
    if side is not None:
        return Verdict(side, interval, interval.n)
    # how far the mean sits from the nearest bar it must clear, at the observed spread
    half = interval.high - interval.mean
    t = float(stats.t.ppf(0.5 + level / 2, interval.df)) if math.isfinite(interval.df) else 0.0
    sd = half * math.sqrt(interval.n) / t if t > 0 else 0.0
    if op in ("within", "within-factor"):
        distance = min(interval.mean - low_bar, high_bar - interval.mean)
        distance = distance if distance > 0 else abs(interval.mean - (low_bar if interval.mean <
                                                                      low_bar else high_bar))
    else:
        distance = abs(interval.mean)
    needed = seeds_needed(distance, sd, level, unpaired=not paired and interval.df != interval.n - 1)
    about = (f"about {needed} seeds would separate it at the observed spread" if needed
             else "the mean sits on the bar")
    return Verdict(None, interval, interval.n, needed,
                   f"{SPANS_BAR} with {interval.n} seeds; {about}")


def _leaves(check: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if check["op"] in COMBINATORS:
        return [leaf for part in check["parts"] for leaf in _leaves(part)]
    return [check]


def _tree_verdict(pooled: Mapping[str, Any], seeds: Sequence[Mapping[str, Any]], paired: bool,
                  k: int) -> Verdict:
    """Leaf verdicts at 95 % and at the Bonferroni level, combined three-valued."""
    if pooled["op"] not in COMBINATORS:
        return _leaf_verdict(pooled, seeds, paired, LEVEL)
    parts = []
    for i, part in enumerate(pooled["parts"]):
        seed_parts = [s["parts"][i] for s in seeds
                      if s.get("op") == pooled["op"] and len(s.get("parts", ())) > i]
        plain = _combine_part(part, seed_parts, paired, LEVEL, k)
        strict = _combine_part(part, seed_parts, paired, bonferroni_level(k), k)
        parts.append((plain, strict))
    if pooled["op"] == "all-of":  # held: every part at 95 %; not held: one part at 1 - a/k
        if any(strict.held is False for _, strict in parts):
            return Verdict(False)
        if all(plain.held is True for plain, _ in parts):
            return Verdict(True)
    else:  # any-of: held: one part at 1 - a/k; not held: every part violated at 95 %
        if any(strict.held is True for _, strict in parts):
            return Verdict(True)
        if all(plain.held is False for plain, _ in parts):
            return Verdict(False)
    reasons = [p.reason for p, _ in parts if p.reason]
    return Verdict(None, reason=reasons[0] if reasons else
                   "parts decided at 95 % but not at the family's corrected level")


def _combine_part(part: Mapping[str, Any], seeds: Sequence[Mapping[str, Any]], paired: bool,
                  level: float, k: int) -> Verdict:
    if part["op"] in COMBINATORS:
        return _tree_verdict(part, seeds, paired, k)
    return _leaf_verdict(part, seeds, paired, level)


def judge_sample(pooled: Mapping[str, Any], seeds: Sequence[Mapping[str, Any]],
                 paired: bool = True) -> Verdict:
    """The verdict of a check (its ``as_dict`` form, computed on all seeds) on the per-seed
    checks ``seeds`` (the same claim computed on each seed alone).

    The reported interval, ``n`` and seeds estimate are those of the check's first leaf, the
    claim's main number; ``held`` follows the rules of the module docstring.
    """
    leaves = _leaves(pooled)
    verdict = _tree_verdict(pooled, seeds, paired, len(leaves))
    # a single leaf is its own main number; otherwise judge the first leaf alone for its interval
    main = verdict if pooled["op"] not in COMBINATORS else _leaf_verdict(
        leaves[0], [_leaves(s)[0] for s in seeds if s], paired, LEVEL)
    reason = verdict.reason if verdict.held is None else ""
    if verdict.held is None and not reason:
        reason = main.reason
    return Verdict(verdict.held, main.interval, main.n, main.seeds_needed if verdict.held is None
                   else None, reason)


def one_seed_verdict(n: int) -> Verdict:
    """The verdict of a claim that is not deterministic and has fewer than two seeds."""
    return Verdict(None, None, n, None,
                   f"{TOO_FEW_SEEDS}: {n} seed{'s' if n != 1 else ''}; the claim compares runs "
                   "that vary with the seed, so it needs an interval over several")


def undecided_kind(reason: str) -> str:
    """``"too few seeds"``, ``"interval spans the bar"`` or ``"other"`` for a reason text."""
    if reason.startswith(TOO_FEW_SEEDS):
        return TOO_FEW_SEEDS
    if reason.startswith(SPANS_BAR):
        return SPANS_BAR
    return "other"
