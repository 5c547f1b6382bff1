"""Every seed summarised alone, and the claims judged on those samples.

A run's ``summarize`` sees all seeds at once; the claims' verdicts need each seed's own value
(:mod:`actlab.runner.verdicts`). :func:`seed_records` cuts the unit records down to one seed
(a unit of one seed is kept whole; an ensemble unit keeps that seed's rows), the experiment
summarises each cut with figures off, and :func:`judge_over_seeds` judges every claim of the
pooled summary on the per-seed checks of the same claim id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from actlab.runner.claims import NUMERIC_OPS
from actlab.runner.verdicts import Verdict, judge_sample, one_seed_verdict

SEED_COLUMN = 1  # index of ``seed`` in a tidy row (METRIC_COLUMNS)


def seeds_of(records: Sequence[Mapping[str, Any]]) -> list[int]:
    """The sorted seeds the unit records cover."""
    return sorted({int(s) for r in records for s in r.get("seeds", [])})


def seed_records(records: Sequence[Mapping[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The records of one seed: units of that seed alone whole, ensemble units cut to its rows.

    An ensemble unit's ``data`` extras stay as they are (they describe the unit: shifts,
    theory values, figure arrays), so an experiment whose summary reads per-seed numbers from
    ``data`` must not be split this way (it then reports no sample).
    """
    mine = []
    for record in records:
        seeds = [int(s) for s in record.get("seeds", [])]
        if seed not in seeds:
            continue
        if seeds == [seed]:
            mine.append(dict(record))
        else:
            rows = [row for row in record.get("rows", []) if int(row[SEED_COLUMN]) == seed]
            mine.append({**record, "rows": rows, "seeds": [seed]})
    return mine


def check_of(claim: Mapping[str, Any]) -> dict[str, Any] | None:
    """A claim row's check as data: its ``check``, or one built from a simple ``comparison``
    with ``value``/``threshold``/``reference`` (claims written without a spec)."""
    if claim.get("check"):
        return dict(claim["check"])
    op = claim.get("comparison", "")
    if op in NUMERIC_OPS:
        return {"op": op, "value": claim.get("value"), "bound": claim.get("threshold"),
                "reference": claim.get("reference")}
    return None


def judge_over_seeds(pooled: Sequence[Mapping[str, Any]],
                     per_seed: Mapping[int, Sequence[Mapping[str, Any]]],
                     n_seeds: int, no_sample: str | Mapping[str, str] = ""
                     ) -> list[dict[str, Any]]:
    """The pooled claims with ``held``, ``n``, ``interval``, ``seeds_needed`` and ``reason``
    from their samples.

    ``per_seed`` maps each seed to its claims (computed on that seed alone); ``no_sample``
    says why there are none (a summary that cannot be split by seed), for all claims or per
    claim id. A claim under a failed
    precondition stays undecided; a deterministic one keeps its verdict on its value; one
    over fewer than two seeds is undecided.
    """
    by_seed = {seed: {c.get("id"): c for c in claims} for seed, claims in per_seed.items()}
    judged = []
    for claim in pooled:
        row = dict(claim)
        verdict: Verdict | None
        if row.get("precondition"):
            verdict = Verdict(None, n=n_seeds, reason=row["precondition"])
        elif row.get("deterministic"):
            verdict = Verdict(row.get("held"), n=n_seeds)
        elif n_seeds < 2:
            verdict = one_seed_verdict(n_seeds)
        elif not check_of(row):
            verdict = Verdict(None, n=n_seeds, reason="no check to judge on a sample")
        else:
            checks = [check_of(by_seed[s][row["id"]]) for s in sorted(by_seed)
                      if row["id"] in by_seed[s] and check_of(by_seed[s][row["id"]])]
            if len(checks) < 2:
                why = (no_sample.get(row["id"], "") if isinstance(no_sample, Mapping)
                       else no_sample) or "the claim is not computed on single seeds"
                verdict = Verdict(None, n=n_seeds, reason=f"no per-seed sample: {why}")
            else:
                verdict = judge_sample(check_of(row), checks, paired=row.get("paired", True))
        row.update(verdict.fields())
        judged.append(row)
    return judged
