"""Commands ``run``, ``sweep``, ``report`` and ``reproduce`` of the ``actlab`` CLI.

Set ``ACTLAB_EXPERIMENT_MODULES=pkg.mod1,pkg.mod2`` to register experiments that live
outside ``actlab.experiments`` (they are imported before the experiment is looked up).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import click

from actlab.cli import main
from actlab.errors import ConfigError
from actlab.runner.config import parse_assignments
from actlab.runner.driver import RunOptions, RunOutcome, run_experiment
from actlab.runner.plan import parse_grid
from actlab.runner.schedule import UNIT_THREADS

PLUGIN_VARIABLE = "ACTLAB_EXPERIMENT_MODULES"


def load_plugins() -> None:
    """Import the modules named in ``$ACTLAB_EXPERIMENT_MODULES`` (comma-separated)."""
    for name in filter(None, (m.strip() for m in os.environ.get(PLUGIN_VARIABLE, "").split(","))):
        importlib.import_module(name)


def _scale(quick: bool, full: bool, paper: bool = False) -> str:
    if quick + full + paper > 1:
        raise click.UsageError("--quick, --full and --paper exclude each other")
    return "quick" if quick else "full" if full else "paper" if paper else "default"


def _finish(outcomes: list[RunOutcome]) -> None:
    """Print where results are; exit 1 naming failures."""
    lines = []
    for outcome in outcomes:
        click.echo(f"{outcome.experiment}: {outcome.path} ({outcome.n_units} units, "
                   f"{outcome.n_skipped} resumed, {len(outcome.diverged)} diverged, "
                   f"{len(outcome.failed)} failed)")
        for item in outcome.diverged:
            click.echo(f"  diverged: {item['label']}")
        lines += outcome.failure_lines()
    if lines:
        click.echo(f"error: {len(lines)} failure(s):", err=True)
        for line in lines:
            click.echo(f"  {line}", err=True)
        sys.exit(1)


def _workers(workers: int | None, device: str, nproc: int = 1) -> int:
    """``--workers``, or every core on the CPU (one on a GPU) when not given; with
    ``--nproc N`` every unit takes N processes, so the CPU default is ``cores // N``."""
    from actlab.runner.schedule import default_workers

    if workers is not None:
        return workers
    return max(1, default_workers(device) // max(1, nproc)) if device == "cpu" else default_workers(device)


def _threads(threads: int) -> int | None:
    """``--threads``: 0 leaves each unit torch's default (``None`` for the runner)."""
    if threads < 0:
        raise ConfigError("--threads", f"must be >= 0, got {threads}")
    return threads or None


def _use_native(native: bool, device: str) -> None:
    """``--native``: build the opt-in C++ kernels now and turn them on for this process and
    the worker processes it starts (through the environment). They are CPU kernels, so
    asking for them together with a CUDA device is refused before any work."""
    if not native:
        return
    if device != "cpu":
        raise ConfigError("--native", f"the native kernels run on the CPU only; drop --native "
                                      f"or use --device cpu (got --device {device})")
    from actlab.activations import native as kernels

    os.environ[kernels.ENV_VAR] = "1"
    click.echo("native kernels: building or loading (about a minute the first time) ...")
    if not kernels.enable():
        click.echo(f"native kernels unavailable, using ATen ops ({kernels.build_error()})", err=True)
        os.environ[kernels.ENV_VAR] = "0"
        return
    from actlab.nn.residual_stack import extension

    extension()  # ResidualMLP's fused ensemble kernels, built now rather than mid-run


PAPER_HELP = ("Use the documents' setting (model, optimiser, schedule, steps, batch, evaluation; "
              "every value's source in config.json) on your data: --set data=PATH. "
              "`actlab run --list` marks the experiments that have one; `actlab plan` prices it.")

NATIVE_HELP = ("Use the opt-in C++ kernels: one-pass shifted/adaptive activations and "
               "ResidualMLP's fused ensemble training (same results to rounding; needs a C++ "
               "compiler, built once).")


def _common(function):
    """Options shared by ``run`` and ``sweep``."""
    options = [
        click.option("--quick", is_flag=True, help="Use the experiment's quick scale."),
        click.option("--full", is_flag=True, help="Use the experiment's full scale."),
        click.option("--paper", is_flag=True, help=PAPER_HELP),
        click.option("--seeds", type=int, default=None, help="Number of seeds (values 0..N-1)."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config field."),
        click.option("--out", type=click.Path(file_okay=False), default="runs", show_default=True,
                     help="Root folder of run directories."),
        click.option("--name", default=None, help="Run name (default: from scale, --set, --grid, seeds)."),
        click.option("--resume", is_flag=True, help="Skip units already finished in the run directory."),
        click.option("--overwrite", is_flag=True,
                     help="Discard the finished units of an earlier run of this name (without "
                          "--resume or --overwrite such a run directory is refused)."),
        click.option("--workers", type=int, default=None,
                     help="Parallel processes, longest unit first [default: the number of cores "
                          "with --device cpu, else 1; never more than the units]."),
        click.option("--threads", type=int, default=UNIT_THREADS, show_default=True,
                     help="Torch threads of every unit (as reproduce: the numbers then do not "
                          "depend on --workers); 0: torch's default."),
        click.option("--nproc", type=int, default=1, show_default=True,
                     help="Processes per unit: each unit runs data-parallel under torchrun "
                          "(DDP, gloo on the CPU, NCCL on N GPUs), its batches sharded by rank; "
                          "the results do not depend on N. Experiments that support it: "
                          "lm-shift, dit-shift, dit-percentile, vit-shift."),
        click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N."),
        click.option("--native", is_flag=True, help=NATIVE_HELP),
        click.option("--tensorboard", default=None, metavar="DIR", help="Also log scalars to TensorBoard."),
        click.option("--mlflow", default=None, metavar="URI", is_flag=False, flag_value="mlruns",
                     help="Also log to MLflow; a path (or no value: ./mlruns) is a local file store."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@main.command("run")
@click.argument("experiment", required=False)
@click.option("--list", "list_only", is_flag=True, help="List the registered experiments.")
@_common
def run_command(experiment, list_only, quick, full, paper, seeds, sets, out, name, resume, overwrite,
                workers, threads, device, native, tensorboard, mlflow, nproc):
    """Run EXPERIMENT into OUT/EXPERIMENT/NAME (config, env, metrics, summary, figures, report)."""
    load_plugins()
    if list_only:
        from actlab.runner.experiment import list_experiments

        click.echo(f"{'experiment':24s} {'paper':5s} description  (paper: has a --paper preset)")
        for key, cls in list_experiments().items():
            marker = "yes" if cls.paper is not None else "-"
            click.echo(f"{key:24s} {marker:5s} {cls.description}")
        return
    if not experiment:
        raise click.UsageError("missing EXPERIMENT (or use --list)")
    _use_native(native, device)
    options = RunOptions(out=Path(out), name=name, resume=resume, overwrite=overwrite,
                         workers=_workers(workers, device, nproc), threads=_threads(threads),
                         device=device, tensorboard=tensorboard, mlflow=mlflow,
                         command=list(sys.argv), nproc=nproc)
    outcome = run_experiment(experiment, _scale(quick, full, paper), parse_assignments(sets), None,
                             seeds, options)
    _finish([outcome])


@main.command("sweep")
@click.argument("experiment")
@click.option("--grid", multiple=True, required=True, metavar="KEY=V1,V2",
              help="Values of one field (repeatable; use | to separate values containing commas).")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True)
@click.option("--address", default=None, help="Ray cluster address (default: start a local instance).")
@_common
def sweep_command(experiment, grid, backend, address, quick, full, paper, seeds, sets, out, name,
                  resume, overwrite, workers, threads, device, native, tensorboard, mlflow,
                  nproc):
    """Run EXPERIMENT over every combination of --grid values, as one resumable run directory."""
    load_plugins()
    _use_native(native, device)
    if workers is None and backend == "ray":
        workers = 1  # Ray: one task per unit on the cluster's own resources
    options = RunOptions(out=Path(out), name=name, resume=resume, overwrite=overwrite,
                         backend=backend, workers=_workers(workers, device, nproc),
                         threads=_threads(threads), nproc=nproc,
                         address=address, device=device, tensorboard=tensorboard, mlflow=mlflow,
                         command=list(sys.argv))
    outcome = run_experiment(experiment, _scale(quick, full, paper), parse_assignments(sets),
                             parse_grid(grid), seeds, options)
    _finish([outcome])


@main.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
def report_command(run_dir):
    """(Re)write RUN_DIR/report.html from the files in RUN_DIR."""
    from actlab.runner.report import write_report

    click.echo(str(write_report(run_dir)))


@main.command("reproduce")
@click.option("--quick", is_flag=True, help="Quick scale (minutes per experiment).")
@click.option("--full", is_flag=True, help="Full scale.")
@click.option("--only", default=None, metavar="A,B", help="Only these experiments.")
@click.option("--out", type=click.Path(file_okay=False), default="runs", show_default=True)
@click.option("--resume", is_flag=True, help="Skip units already finished.")
@click.option("--overwrite", is_flag=True,
              help="Discard finished units of an earlier reproduction in OUT (without --resume "
                   "or --overwrite such an OUT is refused).")
@click.option("--workers", type=int, default=None,
              help="Parallel processes sharing the units of all experiments, longest first "
                   "[default: the number of cores with --device cpu, else 1]; 1 runs in-process, "
                   "experiment by experiment.")
@click.option("--device", default="cpu", show_default=True)
@click.option("--native", is_flag=True, help=NATIVE_HELP)
def reproduce_command(quick, full, only, out, resume, overwrite, workers, device, native):
    """Run every registered experiment and write OUT/index.html with the headline findings.

    The units of all experiments share one pool of --workers processes, started longest
    first by the unit times recorded in actlab/runner/unit_times.json; every unit runs
    with one torch thread, so the numbers do not depend on --workers. Each
    experiment's summary, claims and report are written when its last unit ends, and
    OUT/index.html is kept current; OUT/unit_times.json records this run's unit times.
    """
    from actlab.runner.reproduce import default_workers, reproduce

    load_plugins()
    _use_native(native, device)
    if workers is None:
        workers = default_workers(device)
    names = [n.strip() for n in only.split(",") if n.strip()] if only else None
    options = RunOptions(out=Path(out), resume=resume, overwrite=overwrite, workers=workers,
                         device=device, command=list(sys.argv))
    outcome = reproduce(_scale(quick, full), names, options, echo=click.echo)
    from actlab.runner.report import origin_counts

    click.echo(origin_counts([c for e in outcome.entries for c in e.get("claims", [])]))
    click.echo(f"index: {outcome.index}")
    if outcome.failed:
        click.echo(f"error: {len(outcome.failed)} experiment(s) failed:", err=True)
        for entry in outcome.failed:
            click.echo(f"  {entry['experiment']}: {'; '.join(entry['problems'])}", err=True)
        sys.exit(1)
