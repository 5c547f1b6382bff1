"""Running an experiment (or a sweep over a grid) into a run directory.

:func:`run_experiment` is three steps: :func:`prepare_run` plans the units and skips
finished ones when resuming; a backend executes the rest while each unit is saved as it
ends; :func:`finish_run` assembles ``metrics.csv``, calls the experiment's ``summarize``
and ``claims`` and writes the report (``actlab reproduce`` interleaves the middle step of
many runs). It raises only for user errors (bad config, unknown experiment); failures of
units or of ``summarize`` are recorded and returned in :class:`RunOutcome`.
"""

from __future__ import annotations

import json
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actlab.device import use_strict_float32
from actlab.errors import ConfigError
from actlab.runner.atomic import dumps
from actlab.runner.backends import BACKENDS, run_local, run_ray, threads_per_worker
from actlab.runner.claims_figure import draw_claims_figure
from actlab.runner.config import build_config, config_to_dict
from actlab.runner.env import environment
from actlab.runner.execute import UnitTask, error_headline, module_root
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    STATUS_FAILED,
    STATUS_OK,
    Experiment,
    RunContext,
    get_experiment,
)
from actlab.runner.multiprocess import check_nproc
from actlab.runner.per_seed import judge_over_seeds, seed_records, seeds_of
from actlab.runner.plan import Plan, PlannedUnit, default_run_name, make_plan, point_label, slug
from actlab.runner.rejudge import SEED_SUMMARIES
from actlab.runner.rundir import RunDir, sort_rows, table_frame
from actlab.runner.schedule import Progress, longest_first, reorder
from actlab.runner.sinks import MlflowSink, Sink, TensorBoardSink, flatten


@dataclass
class RunOptions:
    """How and where to run (everything that does not change the numbers)."""

    out: Path = Path("runs")
    name: str | None = None  # run name; default from scale, overrides, grid and seeds
    resume: bool = False
    overwrite: bool = False  # without resume: discard the finished units of an earlier run
    backend: str = "local"
    workers: int = 1
    address: str | None = None
    device: str = "cpu"
    tensorboard: str | None = None
    mlflow: str | None = None
    command: list[str] | None = None  # recorded in env.json (default: sys.argv)
    progress: bool | None = None  # None: progress bars only on a TTY
    threads: int | None = None  # torch threads of every unit; None: see unit_threads
    nproc: int = 1  # processes per unit: > 1 runs each unit data-parallel under torchrun


@dataclass
class RunOutcome:
    """What happened in a run: where it is, which units failed or diverged, the summary."""

    experiment: str
    path: Path
    n_units: int
    n_skipped: int
    failed: list[dict[str, Any]] = field(default_factory=list)
    diverged: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    summary_error: str | None = None
    claims: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no unit failed and ``summarize`` worked."""
        return not self.failed and self.summary_error is None

    def failure_lines(self) -> list[str]:
        """One line per failure, for the CLI's final message."""
        lines = [f"{self.experiment} unit {f['label']}: {f['error']}" for f in self.failed]
        if self.summary_error:
            lines.append(f"{self.experiment} summarize: {error_headline(self.summary_error)}")
        return lines


def check_device(device: str) -> str:
    """Validate ``--device`` (``cpu``, ``cuda`` or ``cuda:N``)."""
    import torch

    if device == "cpu":
        return device
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ConfigError("--device", "cuda is not available on this machine")
        return device
    raise ConfigError("--device", f"must be cpu, cuda or cuda:N, got {device!r}")


def unit_label(point: dict[str, Any], unit: dict[str, Any], seeds: list[int] | tuple[int, ...]) -> str:
    """Readable label of a unit, e.g. ``lr=0.1 act=relu seeds=0,1``."""
    parts = [point_label(point), point_label(unit), "seeds=" + ",".join(map(str, seeds))]
    return " ".join(p for p in parts if p)


def _run_prefix(point: dict[str, Any]) -> str:
    label = point_label(point)
    return f"{label}/" if label else ""


def _first_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            return key
    return "?"


def _config_record(plan: Plan, name: str, grid: dict[str, list[str]]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "experiment": plan.experiment.name,
        "name": name,
        "scale": plan.scale,
        "seeds": plan.seeds,
        "overrides": {k: str(v) for k, v in plan.overrides.items()},
        "grid": grid,
        "points": [
            {"point": p, "config": config_to_dict(c)} for p, c in zip(plan.points, plan.configs)
        ],
    }
    if not grid:
        record["config"] = config_to_dict(plan.configs[0])
    if plan.scale == "paper":  # every preset value with its source (runner.paper)
        record["paper"] = plan.experiment.paper.record()
    return json.loads(dumps(record))


def _check_round_trip(plan: Plan) -> None:
    """Workers rebuild configs from JSON; refuse configs that would not come back equal."""
    cls = plan.experiment.Config
    for config in plan.configs:
        if build_config(cls, config_to_dict(config)) != config:
            raise ConfigError(
                "--workers", f"{cls.__name__} does not survive a JSON round trip; use --workers 1"
            )


def _sinks(options: RunOptions) -> list[Sink]:
    sinks: list[Sink] = []
    if options.tensorboard:
        sinks.append(TensorBoardSink(options.tensorboard))
    if options.mlflow:
        sinks.append(MlflowSink(options.mlflow))
    return sinks


def _tasks(plan: Plan, todo: list[PlannedUnit], run_dir: RunDir, options: RunOptions) -> list[UnitTask]:
    experiment = plan.experiment
    module = type(experiment).__module__
    root = module_root(module)
    pooled = options.backend == "ray" or options.workers > 1
    # Every local unit sets its thread count, in-process too: a unit that changed it (or
    # a pool worker reused across experiments) must not pass it on to the next unit.
    threads = unit_threads(options)
    show = options.progress if options.progress is not None else sys.stderr.isatty()
    tasks = []
    for unit in todo:
        config = plan.config_for(unit.point)
        tasks.append(
            UnitTask(
                experiment=experiment.name,
                module=module,
                module_root=root,
                config=config_to_dict(config),
                point=unit.point,
                unit=unit.unit,
                seeds=list(unit.seeds),
                unit_id=unit.id,
                workdir=str(run_dir.work_dir / unit.id),
                device=options.device,
                threads=threads,
                quiet=pooled or not show or options.nproc > 1,
                nproc=options.nproc,
            )
        )
    return tasks


def unit_threads(options: RunOptions) -> int:
    """Torch threads every unit of a run sets: this process's count in-process (as
    ``OMP_NUM_THREADS`` or torch's default left it), ``cores // workers`` in a local pool,
    one per Ray task on a cluster or with one worker; ``options.threads`` when set (reproduce
    pins one thread per unit, so any ``--workers`` gives the same bits)."""
    import torch

    if options.threads is not None:
        return options.threads
    if options.backend == "ray":
        return 1 if options.address or options.workers == 1 else threads_per_worker(options.workers)
    return threads_per_worker(options.workers) if options.workers > 1 else torch.get_num_threads()


def _pooled(experiment: Experiment, config: Any, records: list[dict[str, Any]],
            ctx: RunContext) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``summarize`` and ``claims`` of ``records`` as they are, both as JSON-ready data."""
    table = table_frame(sort_rows(records))
    results = [{key: r[key] for key in ("id", "point", "unit", "seeds", "status", "error", "data")}
               for r in records]
    summary = experiment.summarize(config, table, results, ctx)
    summary = json.loads(dumps(summary if summary is not None else {}))
    claims = [json.loads(dumps(claim)) for claim in experiment.claims(summary) or []]
    return summary, claims


def summarize_seeds(experiment: Experiment, config: Any, records: list[dict[str, Any]],
                    ctx: RunContext
                    ) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """Summary, claims judged over seeds, and every seed's own summary, of one grid point.

    With two or more seeds each seed is summarised alone (figures off) and every claim is
    judged on the sample of its per-seed checks (:mod:`actlab.runner.verdicts`). The third
    item, ``seed_summaries.json``'s content, is ``{"seeds": [...], "summaries": [...],
    "error": str}`` so claims can be judged again later without the units.
    """
    summary, claims = _pooled(experiment, config, records, ctx)
    seeds = seeds_of(records)
    summaries: list[dict[str, Any]] = []
    per_seed: dict[int, list[dict[str, Any]]] = {}
    error = ""
    if len(seeds) >= 2 and any(not c.get("deterministic") for c in claims):
        quiet = RunContext(out_dir=ctx.out_dir, figures_dir=ctx.figures_dir, draw=False)
        try:
            for seed in seeds:
                seed_summary, per_seed[seed] = _pooled(experiment, config,
                                                       seed_records(records, seed), quiet)
                summaries.append(seed_summary)
        except Exception as exc:  # noqa: BLE001 - a summary that needs several seeds
            per_seed, summaries = {}, []
            error = f"a single seed's summary fails ({error_headline(exc)})"
    claims = judge_over_seeds(claims, per_seed, len(seeds), error)
    return summary, claims, {"seeds": seeds if summaries else [], "summaries": summaries,
                             "error": error}


def summarize_records(experiment: Experiment, config: Any, records: list[dict[str, Any]],
                      ctx: RunContext) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``summarize`` and ``claims`` (judged over seeds) of one grid point from its unit
    records (as saved under ``units/``), both as JSON-ready data; figures go to
    ``ctx.figures_dir``."""
    summary, claims, _ = summarize_seeds(experiment, config, records, ctx)
    return summary, claims


def _summarize(
    plan: Plan, records: list[dict[str, Any]], run_dir: RunDir
) -> tuple[Any, list[dict[str, Any]]]:
    """Call ``summarize``/``claims`` per grid point; return summary.json content and claims."""
    sweep = len(plan.points) > 1 or bool(plan.points[0])
    summaries, seed_summaries = [], []
    claims: list[dict[str, Any]] = []
    for point, config in zip(plan.points, plan.configs):
        mine = [r for r in records if r["point"] == point]
        figures = run_dir.figures_dir / slug(point_label(point)) if sweep else run_dir.figures_dir
        ctx = RunContext(out_dir=run_dir.path, figures_dir=figures)
        summary, point_claims, by_seed = summarize_seeds(plan.experiment, config, mine, ctx)
        draw_claims_figure(point_claims, ctx)
        claims += [{**claim, "point": point_label(point)} for claim in point_claims]
        summaries.append({"point": point, "summary": summary})
        seed_summaries.append({"point": point, **by_seed})
    content = {"points": summaries} if sweep else summaries[0]["summary"]
    run_dir.write_json(SEED_SUMMARIES, {"points": seed_summaries} if sweep else seed_summaries[0])
    return content, claims


@dataclass
class PreparedRun:
    """A planned run whose directory, config and environment are written: the units still
    to execute (``tasks``, with their config objects in ``configs``) and how to finish it.

    :func:`prepare_run` makes one, a backend executes ``tasks`` while :meth:`save_unit`
    stores each record as it arrives, and :func:`finish_run` assembles the results. Several
    prepared runs can share one pool (``actlab reproduce``).
    """

    plan: Plan
    run_dir: RunDir
    run_name: str
    outcome: RunOutcome
    tasks: list[UnitTask]
    configs: list[Any]
    sinks: list[Sink] = field(default_factory=list)

    def save_unit(self, record: dict[str, Any]) -> None:
        """Store one finished unit (``units/<id>.json``) and pass it to the sinks."""
        self.run_dir.save_unit(record)
        for sink in self.sinks:
            sink.unit(record, _run_prefix(record["point"]))

    def drop_empty_work_dir(self) -> None:
        """Remove ``work/`` once no unit left files there."""
        work = self.run_dir.work_dir
        if work.exists() and not any(work.iterdir()):
            work.rmdir()


def check_run_options(options: RunOptions) -> None:
    """Refuse a bad ``--backend``, ``--workers`` or ``--device`` before any work."""
    if options.backend not in BACKENDS:
        raise ConfigError("--backend", f"must be one of {', '.join(BACKENDS)}, got {options.backend!r}")
    if options.workers < 1:
        raise ConfigError("--workers", f"must be >= 1, got {options.workers}")
    check_device(options.device)
    check_nproc(options.nproc, device=options.device, backend=options.backend,
                workers=options.workers)



def refuse_to_discard(run_dir: RunDir, options: RunOptions) -> None:
    """Without ``--resume``, a run directory holding finished units is refused unless
    ``--overwrite`` says to discard them (then a note says how many go)."""
    if options.resume:
        return
    finished = run_dir.finished_units()
    if not finished:
        return
    if not options.overwrite:
        raise ConfigError("--overwrite", f"{run_dir.path} holds {len(finished)} finished "
                                         "unit(s): --resume continues that run, --overwrite "
                                         "discards it, or choose another --name")
    print(f"note: discarding {len(finished)} finished unit(s) of {run_dir.path} (--overwrite)",
          file=sys.stderr)


def prepare_run(
    name: str,
    scale: str = "default",
    overrides: dict[str, Any] | None = None,
    grid: dict[str, list[str]] | None = None,
    n_seeds: int | None = None,
    options: RunOptions | None = None,
) -> PreparedRun:
    """Plan experiment ``name``, write its ``config.json`` and ``env.json`` and list the
    units still to run (all of them, or those not finished when resuming)."""
    options = options or RunOptions()
    check_run_options(options)
    experiment = get_experiment(name)
    check_nproc(options.nproc, device=options.device, backend=options.backend,
                workers=options.workers, experiment=experiment)
    grid = dict(grid or {})
    plan = make_plan(experiment, scale, overrides, grid, n_seeds)
    run_name = options.name or default_run_name(
        scale, plan.overrides, grid, len(plan.seeds), experiment.default_seeds
    )
    if slug(run_name) != run_name:
        raise ConfigError("--name", f"use letters, digits and ._=,+- only, e.g. {slug(run_name)!r}")
    run_dir = RunDir(Path(options.out) / experiment.name / run_name)
    config_record = _config_record(plan, run_name, grid)
    if options.resume:
        old = run_dir.read_json("config.json")
        if old is not None and old != config_record:
            key = _first_difference(old, config_record)
            raise ConfigError(
                "--resume",
                f"{run_dir.path} was run with a different {key}; use another --name or drop --resume",
            )
    if options.backend == "ray" or options.workers > 1 or options.nproc > 1:
        _check_round_trip(plan)
    refuse_to_discard(run_dir, options)
    run_dir.prepare(options.resume)
    run_dir.write_json("config.json", config_record)
    use_strict_float32()  # as every unit does; env.json then records the flags units run under
    env = environment(options.device, options.command)
    env["torch_threads"] = unit_threads(options)  # what the units run with, pooled or not
    env["nproc"] = options.nproc  # processes per unit (--nproc)
    if experiment.host_only and options.device != "cpu":
        env["computes_on"] = "cpu"
        print(f"note: {experiment.name} computes on the CPU ({experiment.host_only})",
              file=sys.stderr)
    run_dir.write_json("env.json", env)

    todo = [u for u in plan.units if not (options.resume and run_dir.finished_unit(u.id))]
    outcome = RunOutcome(experiment.name, run_dir.path, len(plan.units), len(plan.units) - len(todo))
    sinks = _sinks(options)
    params = flatten(config_record.get("config") or {"grid": grid})
    for sink in sinks:
        sink.start(experiment.name, run_name, params)
    return PreparedRun(plan, run_dir, run_name, outcome, _tasks(plan, todo, run_dir, options),
                       [plan.config_for(u.point) for u in todo], sinks)


def run_experiment(
    name: str,
    scale: str = "default",
    overrides: dict[str, Any] | None = None,
    grid: dict[str, list[str]] | None = None,
    n_seeds: int | None = None,
    options: RunOptions | None = None,
) -> RunOutcome:
    """Run experiment ``name`` at ``scale`` with ``overrides`` over ``grid`` into a run directory."""
    options = options or RunOptions()
    run = prepare_run(name, scale, overrides, grid, n_seeds, options)
    bar = Progress(len(run.tasks), f"{run.plan.experiment.name}/{run.run_name}", options.progress)

    def on_done(record: dict[str, Any]) -> None:
        run.save_unit(record)
        bar.update(1)

    try:
        if options.backend == "ray":
            run_ray(run.tasks, on_done, options.address, options.workers if options.workers > 1 else None)
        else:
            # a pool starts units in list order: longest first finishes soonest; no more
            # processes than units
            order = longest_first(run.plan.experiment.name, [t.unit_id for t in run.tasks])
            workers = max(1, min(options.workers, len(run.tasks)))
            run_local(reorder(run.tasks, order) if workers > 1 else run.tasks, on_done, workers,
                      reorder(run.configs, order) if workers > 1 else run.configs)
    finally:
        bar.close()
        run.drop_empty_work_dir()
    return finish_run(run)


def finish_run(run: PreparedRun) -> RunOutcome:
    """Once every unit of ``run`` is saved: write ``metrics.csv``, ``summary.json``,
    ``claims.json``, ``status.json`` and the report, and return the outcome."""
    plan, run_dir, outcome = run.plan, run.run_dir, run.outcome
    experiment = plan.experiment
    records = []
    for unit in plan.units:
        record = run_dir.load_unit(unit.id)
        if record is None:  # cannot happen unless the folder was tampered with meanwhile
            record = {"id": unit.id, "point": unit.point, "unit": unit.unit, "seeds": list(unit.seeds),
                      "status": STATUS_FAILED, "error": "unit record missing", "rows": [], "data": {}}
        records.append(record)
        info = {"id": unit.id, "label": unit_label(unit.point, unit.unit, unit.seeds),
                "error": error_headline(record.get("error"))}
        if record["status"] == STATUS_FAILED:
            outcome.failed.append(info)
        elif record["status"] == STATUS_DIVERGED:
            outcome.diverged.append(info)

    rows = []
    for record in records:
        prefix = _run_prefix(record["point"])
        rows.append({"rows": [[prefix + r[0], *r[1:]] for r in record["rows"]]})
    run_dir.write_metrics(sort_rows(rows))

    try:
        summary, claims = _summarize(plan, records, run_dir)
        run_dir.write_json("summary.json", summary)
        run_dir.write_json("claims.json", claims)
        outcome.summary, outcome.claims = summary, claims
    except Exception as exc:  # noqa: BLE001 - recorded and reported, the CLI exits non-zero
        outcome.summary_error = "".join(traceback.format_exception(exc)).rstrip()
        for stale in ("summary.json", "claims.json", SEED_SUMMARIES):
            run_dir.file(stale).unlink(missing_ok=True)

    counts = {s: sum(r["status"] == s for r in records) for s in (STATUS_OK, STATUS_DIVERGED, STATUS_FAILED)}
    run_dir.write_json(
        "status.json",
        {
            "experiment": experiment.name,
            "description": experiment.description,
            "name": run.run_name,
            "units": counts,
            "failed": outcome.failed,
            "diverged": outcome.diverged,
            "summary_error": outcome.summary_error,
        },
    )
    for sink in run.sinks:
        sink.finish(outcome.summary)

    from actlab.runner.report import write_report

    write_report(run_dir.path)
    return outcome
