"""Command ``plan``: the cost of a run before it starts (parameters, FLOPs, memory, checkpoint
disk, GPU-hours per unit and in total; see :mod:`actlab.runner.cost`)."""

from __future__ import annotations

import json

import click

from actlab.cli import main
from actlab.cli.runner import PAPER_HELP, _scale, load_plugins
from actlab.runner.config import parse_assignments


@main.command("plan")
@click.argument("experiment")
@click.option("--quick", is_flag=True, help="Price the experiment's quick scale.")
@click.option("--full", is_flag=True, help="Price the experiment's full scale.")
@click.option("--paper", is_flag=True, help=PAPER_HELP)
@click.option("--seeds", type=int, default=None, help="Number of seeds (values 0..N-1).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config field.")
@click.option("--accelerator", default="h100", show_default=True,
              help="GPU to price on: h100, h100-pcie, h200, a100 (dense bf16 peaks).")
@click.option("--mfu", type=float, default=0.4, show_default=True,
              help="Model-FLOPs utilisation: the share of the peak a run achieves (ours).")
@click.option("--nproc", type=int, default=1, show_default=True,
              help="GPUs per unit (data parallel): the batch per GPU is the global batch / N.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON object.")
def plan_command(experiment, quick, full, paper, seeds, sets, accelerator, mfu, nproc, as_json):
    """Price EXPERIMENT at a scale: per unit parameters, FLOPs per step, steps, total FLOPs,
    memory per GPU, checkpoint disk and GPU-hours; the total over units.

    Nothing trains and no data is read: the models are built on the meta device. With
    --paper the preset's data set must still be named (--set data=PATH), as for a run.
    """
    from actlab.errors import ConfigError
    from actlab.runner.cost import plan_cost
    from actlab.runner.experiment import get_experiment
    from actlab.runner.plan import make_plan

    load_plugins()
    if not 0 < mfu <= 1:
        raise ConfigError("--mfu", f"must be in (0, 1], got {mfu}")
    if nproc < 1:
        raise ConfigError("--nproc", f"must be >= 1, got {nproc}")
    exp = get_experiment(experiment)
    plan = make_plan(exp, _scale(quick, full, paper), parse_assignments(sets), None, seeds)
    cost = plan_cost(plan, accelerator=accelerator, mfu=mfu, nproc=nproc)
    if as_json:
        click.echo(json.dumps(cost.as_dict(), indent=1))
        return
    click.echo(f"{exp.name} ({plan.scale}, {len(plan.seeds)} seed(s), {len(plan.units)} "
               f"unit(s)):")
    for line in cost.table():
        click.echo(line)
