"""``actlab reproduce``: run every registered experiment and write ``index.html``.

Experiments run one after another in :data:`PREFERRED_ORDER` (cheap, foundational ones
first; unknown names after, alphabetically). A failing experiment is listed in the index
and the next one starts.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from actlab.errors import did_you_mean
from actlab.runner.driver import RunOptions, run_experiment
from actlab.runner.execute import error_headline
from actlab.runner.experiment import list_experiments
from actlab.runner.references import reference_summary
from actlab.runner.report import write_index

PREFERRED_ORDER = (
    "gallery",
    "worked-example", "signal", "pitfalls", "dead-units", "normalization", "init-study",
    "teacher-student", "shift-sweep", "size-sweep", "ablations",
    "drift", "sparsity", "sparse-activations", "relufication", "accumulation-stop",
    "bias-component", "vit-shift",
    "lm-shift", "spikes", "gated-ffn", "pretrained-profile", "relufy-pretrained",
)


def ordered_experiments(names: list[str] | None = None) -> list[str]:
    """Registered experiments (or the subset ``names``) in reproduction order."""
    registered = list_experiments()
    if names:
        unknown = [n for n in names if n not in registered]
        if unknown:
            hint = did_you_mean(unknown[0], registered, n=3, cutoff=0.4, prefix="; ")
            raise ValueError(f"--only: unknown experiment {unknown[0]!r}{hint}")
    chosen = set(names) if names else set(registered)
    rank = {name: i for i, name in enumerate(PREFERRED_ORDER)}
    return sorted(chosen, key=lambda n: (rank.get(n, len(rank)), n))


@dataclass
class ReproduceOutcome:
    """Per-experiment entries of the index and where it was written."""

    index: Path
    entries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Entries of experiments that did not finish cleanly."""
        return [e for e in self.entries if e["status"] != "ok"]


def reproduce(scale: str, only: list[str] | None, options: RunOptions, echo=print) -> ReproduceOutcome:
    """Run the experiments at ``scale`` into ``options.out`` (run name = scale) and write the index."""
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    registered = list_experiments()
    entries: list[dict[str, Any]] = []
    for name in ordered_experiments(only):
        entry: dict[str, Any] = {"experiment": name, "description": registered[name].description,
                                 "report": None, "status": "ok", "problems": [], "claims": []}
        echo(f"== {name} ({scale})")
        try:
            outcome = run_experiment(name, scale, options=replace(options, name=scale))
            entry["report"] = f"{name}/{scale}/report.html"
            entry["claims"] = outcome.claims
            entry["problems"] = outcome.failure_lines() + [
                f"diverged: {d['label']}" for d in outcome.diverged
            ]
            if not outcome.ok:
                entry["status"] = "failed"
            held = [c.get("held") for c in outcome.claims]
            echo(f"   {outcome.path}: {outcome.n_units} units, {len(outcome.failed)} failed, "
                 f"{len(outcome.diverged)} diverged; claims held {held.count(True)}/{len(held)} "
                 f"(at reference scale: {reference_summary(name)})")
        except Exception as exc:  # noqa: BLE001 - one experiment failing must not stop the rest
            entry["status"] = "failed"
            entry["problems"] = [error_headline("".join(traceback.format_exception(exc)))]
            report = out / name / scale / "report.html"
            if report.exists():
                entry["report"] = f"{name}/{scale}/report.html"
        entries.append(entry)
        write_index(out, entries, scale)  # keep the index current while the rest runs
    index = write_index(out, entries, scale)
    return ReproduceOutcome(index, entries)
