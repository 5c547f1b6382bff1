"""Start a new built-in experiment: a small runnable package in the shape of the others.

    python tools/new_experiment.py NAME [--into DIR] [--module DOTTED.NAME]

``NAME`` is the experiment's name in kebab-case (``my-study``); the package is
``src/actlab/experiments/<name_with_underscores>/`` with

* ``__init__.py``: module docstring, the config (a :class:`~actlab.runner.fields.CheckedConfig`
  with its checks as field metadata), quick/full overrides and the registered experiment
  (units, run_unit, summarize and claims delegating to the two files below);
* ``summary.py``: ``build_summary(table)``, the content of ``summary.json``;
* ``claims.py``: ``claims(summary) -> list[Claim]``.

The scaffold runs as generated: per activation it builds a deep stack at initialization and
records each layer's activation second moment; the claim asks that the last layer's stays
within a factor of the first's. Replace the measurement, summary and claims with the real
ones. The files a built-in experiment needs besides its package are printed, not written.

``--into`` and ``--module`` put the package elsewhere (a test writes into a temporary
folder on ``sys.path`` and imports it as a top-level package).
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from pathlib import Path
from string import Template

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "src" / "actlab" / "experiments"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")  # also a valid claim-id part

INIT = Template('''\
"""``$name``: what the experiment measures, in one line.

The protocol (model, data, what is recorded per unit) and the source it reproduces go here.
As generated: per activation, a ``depth`` x ``width`` stack at initialization (``init``
scheme, float64) on standard normal inputs; every hidden layer's activation second moment.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from $module.claims import claims as ${ident}_claims
from $module.summary import METRIC, build_summary
from actlab.nn.deep_mlp import deep_mlp
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, checked
from actlab.device import to_model_device


@dataclass
class ${camel}Config(CheckedConfig):
    """Activations to compare, the stack's init scheme and sizes, and the probe batch."""

    activations: tuple[str, ...] = checked(("relu", "tanh"), spec="activation", nonempty=True)
    init: str = checked("he", spec="init")
    width: int = checked(64, ge=1)
    depth: int = checked(8, ge=1)
    n_inputs: int = checked(256, ge=1)

    def check(self) -> None:
        """Rules that tie fields together (none yet); raise ``ConfigError`` naming the field."""


@register
class ${camel}Experiment(Experiment):
    """One line for ``actlab run --list``."""

    name = "$name"
    description = "What it measures and what it reproduces (shown in the index)."
    headline_figure = None  # or the figures/<name>.png to show in the index
    Config = ${camel}Config
    quick = {"depth": 4, "n_inputs": 64}
    full: dict = {}
    default_seeds = 3  # the fewest with which a claim's interval over seeds can clear its bar
    seeds_per_unit = 1

    def units(self, config: ${camel}Config) -> list[dict]:
        """One unit per activation."""
        return [{"activation": spec} for spec in config.activations]

    def run_unit(self, config: ${camel}Config, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Every hidden layer's activation second moment, one network per seed."""
        result = UnitResult()
        spec = unit["activation"]
        for seed in seeds:
            # Drawn on the CPU from the seed, placed on the unit's device (as on CUDA).
            model = deep_mlp(config.width, config.width, config.depth, 1, activation=spec,
                             scheme=config.init, seed=seed)
            generator = torch.Generator().manual_seed(seed)
            inputs = torch.randn(config.n_inputs, config.width, generator=generator,
                                 dtype=torch.float64)
            with torch.no_grad():
                trace = model.trace(to_model_device(model, inputs))
            for layer, a in enumerate(trace.activations, start=1):
                result.add(spec, seed, 0, str(layer), METRIC, float(a.pow(2).mean()))
        return result

    def summarize(self, config: ${camel}Config, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Per activation: the mean per-layer profile and the last/first ratio over seeds."""
        return build_summary(table)

    def claims(self, summary: dict) -> list[Claim]:
        """See ``claims.py``."""
        return ${ident}_claims(summary)
''')

SUMMARY = Template('''\
"""The ``$name`` experiment's summary: per activation, the profile over layers and its ratio."""

from __future__ import annotations

from typing import Any

from actlab.analysis import mean_and_sd, mean_or_nan, seeds_in

METRIC = "activation_second_moment"


def build_summary(table: Any) -> dict:
    """``{"seeds": [...], "activations": {spec: {"per_layer", "last_over_first", ..._sd}}}``."""
    rows = table[table["metric"] == METRIC]
    summary: dict = {"seeds": seeds_in(table), "activations": {}}
    for spec in sorted(rows["run"].unique()):
        sel = rows[rows["run"] == spec].assign(order=lambda t: t["layer"].astype(int))
        layers = sorted(sel["order"].unique())
        per_layer = [mean_or_nan(sel[sel["order"] == n]["value"].tolist()) for n in layers]
        by_seed = sel.pivot_table(index="seed", columns="order", values="value")
        mean, sd = mean_and_sd((by_seed[layers[-1]] / by_seed[layers[0]]).tolist())
        summary["activations"][spec] = {"per_layer": per_layer, "last_over_first": mean,
                                        "last_over_first_sd": sd}
    return summary
''')

CLAIMS = Template('''\
"""The claims of the ``$name`` experiment, declared as data and judged by the runner."""

from __future__ import annotations

from actlab.runner.claims import ClaimSpec, claim_id, judge_all, within_factor
from actlab.runner.experiment import Claim

NAME = "$name"


def claims(summary: dict) -> list[Claim]:
    """Per activation: the signal neither vanishes nor explodes through the stack."""
    specs = []
    for spec, entry in summary["activations"].items():
        n = {"factor": 4.0, "ratio": entry["last_over_first"], "sd": entry["last_over_first_sd"]}
        specs.append(ClaimSpec(
            id=claim_id(NAME, spec, "second-moment-kept"),
            text=f"{spec}: the last layer's activation second moment is within a factor "
                 "{factor:g} of the first layer's",
            measured="last/first {ratio:.3g} (sd over seeds {sd:.2g})",
            check=within_factor(n["ratio"], 1.0, n["factor"]),
            # a document's key and section (runner/sources.py) with the numbers it states in
            # quoted=(...); "actlab" marks a claim of our own, as this placeholder is
            source="actlab", numbers=n))
    return judge_all(specs)
''')

# Besides the package, what a built-in experiment needs before the lead can commit it:
# (file, what goes there), ``{name}``/``{package}`` filled in.
OTHER_FILES = (
    ("tests/test_{package}.py", "a quick run through actlab.runner; the claims hold at scale and "
     "fail when the numbers are wrong; config errors name their field"),
    ("docs/results/{name}/, src/actlab/runner/references.json", "a reference run: "
     "`actlab run {name}`, then `python tools/collect_references.py --runs runs {name}` "
     "(or a PENDING entry saying why in tools/collect_references.py)"),
    ("docs/results/quick_claims.json", "`actlab reproduce --quick --only {name} --out Q`, then "
     "`python tools/collect_references.py --quick Q`"),
    ("docs/fidelity.md", "`python tools/fidelity.py` (and docs/results/diagnoses.json for "
     "each claim that misses)"),
    ("src/actlab/runner/unit_times.json", "the quick units' times from Q/unit_times.json "
     "(reproduce starts the longest units first)"),
    ("tests/data/claims/{name}.json", "a recorded summary and its verdicts (tests/test_claims.py)"),
    ("docs/<topic>.md, README.md", "the protocol and command line; the row in README's table "
     "of experiments"),
)


def other_files(name: str) -> str:
    """The files besides the package that built-in experiment ``name`` needs, as text."""
    fields = {"name": name, "package": package_name(name)}
    lines = ["Other files a built-in experiment needs (not generated):"]
    for path, what in OTHER_FILES:
        lines += [f"  {path.format(**fields)}", f"      {what.format(**fields)}"]
    return "\n".join(lines)


def package_name(name: str) -> str:
    """The package of experiment ``name`` (``"my-study"`` -> ``"my_study"``); ``ValueError``
    if ``name`` is not lower-case kebab-case or gives no valid module name."""
    if not NAME_PATTERN.match(name):
        raise ValueError(f"experiment name {name!r} must be lower-case kebab-case, e.g. 'my-study'")
    package = name.replace("-", "_")
    if keyword.iskeyword(package) or not package.isidentifier():
        raise ValueError(f"{package!r} is not a valid module name")
    return package


def render(name: str, module: str) -> dict[str, str]:
    """The three files of experiment ``name`` importable as ``module``: ``{file: text}``."""
    ident = package_name(name)
    camel = "".join(part.capitalize() for part in name.split("-"))
    fields = {"name": name, "module": module, "ident": ident, "camel": camel}
    return {"__init__.py": INIT.substitute(fields), "summary.py": SUMMARY.substitute(fields),
            "claims.py": CLAIMS.substitute(fields)}


def create(name: str, into: Path = EXPERIMENTS, module: str | None = None) -> Path:
    """Write the package of ``name`` under ``into`` and return its folder.

    ``module`` is the dotted name the package is imported as (default
    ``actlab.experiments.<package>``). An existing folder is never overwritten.
    """
    package = package_name(name)
    folder = Path(into) / package
    if folder.exists():
        raise FileExistsError(f"{folder} exists; pick another name or remove it first")
    files = render(name, module or f"actlab.experiments.{package}")
    folder.mkdir(parents=True)
    for file, text in files.items():
        (folder / file).write_text(text)
    return folder


def main(argv: list[str] | None = None) -> int:
    """Command line: create the package and print the other files to write."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="experiment name, lower-case kebab-case (my-study)")
    parser.add_argument("--into", type=Path, default=EXPERIMENTS,
                        help="folder the package goes into [default: src/actlab/experiments]")
    parser.add_argument("--module", default=None,
                        help="dotted name it is imported as [default: actlab.experiments.<package>]")
    args = parser.parse_args(argv)
    try:
        folder = create(args.name, args.into, args.module)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"created {folder}/ (__init__.py, summary.py, claims.py)")
    print(f"try it: actlab run {args.name} --quick")
    print(other_files(args.name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
