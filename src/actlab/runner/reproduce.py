"""``actlab reproduce``: run every registered experiment and write ``index.html``.

Every experiment is planned first (in :data:`PREFERRED_ORDER`: cheap, foundational ones
first; unknown names after, alphabetically); then the units of all of them share one
pool. With several workers they start longest first (longest-processing-time-first list
scheduling), each unit's time estimated from :data:`UNIT_TIMES`, a table recorded by an
earlier quick reproduction; with one worker they run in-process, experiment by
experiment. An experiment's summary, claims and report are written as soon as its last
unit is done, and the index is rewritten each time. A failing experiment is listed in the
index and the rest still run.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from actlab.errors import did_you_mean
from actlab.runner.atomic import atomic_write_json
from actlab.runner.backends import run_indexed
from actlab.runner.driver import (
    PreparedRun,
    RunOptions,
    check_run_options,
    finish_run,
    prepare_run,
    refuse_to_discard,
)
from actlab.runner.execute import error_headline
from actlab.runner.experiment import list_experiments
from actlab.runner.references import reference_summary
from actlab.runner.report import write_index
from actlab.runner.rundir import RunDir
from actlab.runner.schedule import (  # noqa: F401 - UNIT_TIMES, load_unit_times: the old home
    FALLBACK_UNIT_S,
    UNIT_THREADS,
    UNIT_TIMES,
    Progress,
    default_workers,
    estimates,
    load_unit_times,
)

UNIT_TIMES_FILE = "unit_times.json"  # written into OUT by every reproduction

PREFERRED_ORDER = (
    "gallery",
    "worked-example", "signal", "pitfalls", "dead-units", "normalization", "init-study",
    "teacher-student", "shift-sweep", "size-sweep", "ablations",
    "drift", "sparsity", "sparse-activations", "relufication", "accumulation-stop",
    "bias-component", "vit-shift", "dit-shift", "dit-percentile",
    "lm-shift", "lm-drift", "spikes", "gated-ffn", "pretrained-profile", "relufy-pretrained",
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


def unit_estimates(runs: dict[str, PreparedRun], table: dict[str, dict[str, float]]) -> dict[str, list[float]]:
    """Estimated seconds of each unit still to run, per experiment
    (:func:`actlab.runner.schedule.estimates`)."""
    return {name: estimates(name, [task.unit_id for task in run.tasks], table)
            for name, run in runs.items()}


def _new_entry(name: str, description: str) -> dict[str, Any]:
    return {"experiment": name, "description": description, "report": None, "status": "ok",
            "problems": [], "claims": []}


def _record_failure(entry: dict[str, Any], exc: BaseException, out: Path, scale: str) -> None:
    entry["status"] = "failed"
    entry["problems"] = [error_headline("".join(traceback.format_exception(exc)))]
    if (out / entry["experiment"] / scale / "report.html").exists():
        entry["report"] = f"{entry['experiment']}/{scale}/report.html"


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def reproduce(scale: str, only: list[str] | None, options: RunOptions, echo=print) -> ReproduceOutcome:
    """Run the experiments at ``scale`` into ``options.out`` (run name = scale) and write the index.

    ``options.workers`` processes share the units of all experiments (see the module
    docstring); each experiment is finished as soon as its last unit is saved.
    """
    check_run_options(options)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    registered = list_experiments()
    names = ordered_experiments(only)
    for name in names:  # refused before any experiment starts, not one by one as failures
        refuse_to_discard(RunDir(out / name / scale), options)
    entries = {name: _new_entry(name, registered[name].description) for name in names}
    runs: dict[str, PreparedRun] = {}
    # One bar for the whole reproduction; one torch thread per unit whatever the worker count,
    # so a reproduction's numbers do not depend on --workers (thread count changes reductions).
    run_options = replace(options, progress=False, threads=UNIT_THREADS)
    for name in names:
        try:
            runs[name] = prepare_run(name, scale, options=replace(run_options, name=scale))
        except Exception as exc:  # noqa: BLE001 - one experiment failing must not stop the rest
            _record_failure(entries[name], exc, out, scale)
            echo(f"== {name} ({scale}): {entries[name]['problems'][0]}")

    table = load_unit_times()
    estimates = unit_estimates(runs, table)
    queue = [(name, i) for name, run in runs.items() for i in range(len(run.tasks))]
    if options.workers > 1:  # longest first; ties keep reproduction order
        queue.sort(key=lambda item: -estimates[item[0]][item[1]])
    total = sum(sum(e) for e in estimates.values())
    echo(f"reproduce ({scale}): {len(queue)} units of {len(runs)} experiments on "
         f"{options.workers} worker(s), {'longest first' if options.workers > 1 else 'in order'}; "
         f"estimated {_minutes(total / options.workers)} (min:s) from "
         f"{'the recorded unit times' if table else f'{FALLBACK_UNIT_S:g} s a unit (no recorded times)'}")
    remaining = {name: len(run.tasks) for name, run in runs.items()}
    times: dict[str, dict[str, float]] = {name: {} for name in runs}
    started = time.monotonic()
    bar = _progress_bar(len(queue), options)

    def finish(name: str) -> None:
        entry, run = entries[name], runs[name]
        try:
            run.drop_empty_work_dir()
            outcome = finish_run(run)
            entry["report"] = f"{name}/{scale}/report.html"
            entry["claims"] = outcome.claims
            entry["problems"] = outcome.failure_lines() + [f"diverged: {d['label']}" for d in outcome.diverged]
            if not outcome.ok:
                entry["status"] = "failed"
            held = [c.get("held") for c in outcome.claims]
            done = sum(r == 0 for r in remaining.values())
            bar.write_or_echo(
                f"== {name} ({scale}) [{done}/{len(runs)} done, {_minutes(time.monotonic() - started)}]: "
                f"{outcome.path}: {outcome.n_units} units, {len(outcome.failed)} failed, "
                f"{len(outcome.diverged)} diverged; claims held {held.count(True)}/{len(held)} "
                f"(at reference scale: {reference_summary(name)})", echo)
        except Exception as exc:  # noqa: BLE001 - one experiment failing must not stop the rest
            _record_failure(entry, exc, out, scale)
        write_index(out, list(entries.values()), scale)  # keep the index current while the rest runs

    def on_done(k: int, record: dict[str, Any]) -> None:
        name, i = queue[k]
        runs[name].save_unit(record)
        if "elapsed_s" in record:
            times[name][record["id"]] = record["elapsed_s"]
        remaining[name] -= 1
        bar.update(1)
        if remaining[name] == 0:
            finish(name)

    write_index(out, list(entries.values()), scale)
    for name in [n for n, left in remaining.items() if left == 0]:  # resumed: nothing to run
        finish(name)
    try:
        run_indexed([runs[n].tasks[i] for n, i in queue], on_done, options.workers,
                    [runs[n].configs[i] for n, i in queue])
    finally:
        bar.close()
        _write_unit_times(out / UNIT_TIMES_FILE, scale, options.workers, times)
    index = write_index(out, list(entries.values()), scale)
    return ReproduceOutcome(index, list(entries.values()))


def _write_unit_times(path: Path, scale: str, workers: int, times: dict[str, dict[str, float]]) -> None:
    """Record this reproduction's unit times (the format of :data:`UNIT_TIMES`, which is a
    copy of one quick reproduction's file); units resumed from earlier runs keep no time."""
    atomic_write_json(path, {"scale": scale, "workers": workers, "cpu_count": os.cpu_count(),
                      "experiments": {n: dict(sorted(t.items())) for n, t in times.items() if t}})


def _progress_bar(total: int, options: RunOptions) -> Progress:
    return Progress(total, "reproduce", options.progress)
