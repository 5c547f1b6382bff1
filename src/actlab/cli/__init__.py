"""The ``actlab`` command line. Each sub-module adds its commands to :data:`main`.

User errors (bad spec, bad config, missing file) print one line to stderr and exit with
code 2, without a traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from actlab.errors import ConfigError, SpecError


class _Group(click.Group):
    def invoke(self, ctx: click.Context):  # noqa: D102 - click API
        try:
            return super().invoke(ctx)
        except (SpecError, ConfigError, FileNotFoundError, ValueError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="actlab")
def main() -> None:
    """actlab: measure, control and compare what activation functions do to learning."""


# Modules that define commands on `main`; each owns its own commands.
for _module in ("actlab.cli.info", "actlab.cli.runner", "actlab.cli.profile",
                "actlab.cli.trajectory", "actlab.cli.plan"):
    try:
        importlib.import_module(_module)
    except ModuleNotFoundError as _exc:  # a command module not written yet
        if _exc.name != _module:
            raise
