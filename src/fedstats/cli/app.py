"""The ``fedstats`` command: global options and the registry of subcommand modules.

Each module named in ``_COMMAND_MODULES`` defines ``register(app: typer.Typer) -> None`` adding its
command(s). Global options go before the command: ``fedstats --seed 1 --json demo``; most commands also take
``--json`` and ``--seed`` after their name.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Annotated

import typer

from fedstats import __version__
from fedstats.cli._common import CliState, FedstatsGroup

_COMMAND_MODULES: tuple[str, ...] = (
    "fedstats.cli.demo",
    "fedstats.cli.datasets",
    "fedstats.cli.reproduce",
    "fedstats.cli.mean",
    "fedstats.cli.gap",
    "fedstats.cli.secagg",
    "fedstats.cli.heterogeneity",
    "fedstats.cli.privacy",
    "fedstats.cli.chi2",
    "fedstats.cli.examples",
    "fedstats.cli.server",
    "fedstats.cli.client",
    "fedstats.cli.enroll",
)

app = typer.Typer(
    name="fedstats",
    cls=FedstatsGroup,
    help="Private federated analytics: DP statistics over many clients with secure aggregation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(ctx: typer.Context, value: bool) -> None:
    # not eager, so the eager --json is already in ctx.params whatever the order on the command line
    if value:
        as_json = bool(ctx.params.get("json_flag"))
        typer.echo(json.dumps({"version": __version__}) if as_json else f"fedstats {__version__}")
        raise typer.Exit(0)


@app.callback()
def _global(
    ctx: typer.Context,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed", min=0, help="Seed for a reproducible run (marked 'not for release')."
        ),
    ] = None,
    json_flag: Annotated[
        bool, typer.Option("--json", is_eager=True, help="Print one JSON object on stdout.")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bars or messages.")
    ] = False,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            envvar="FEDSTATS_DATA",
            help="Folder of the real datasets (default ../shared/data).",
        ),
    ] = None,
    version: Annotated[  # noqa: ARG001 - typer passes the eager option
        bool, typer.Option("--version", callback=_version, help="Show the version.")
    ] = False,
) -> None:
    """Global options."""
    ctx.obj = CliState(seed=seed, json=json_flag, quiet=quiet, data_dir=data_dir)


for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    """Entry point of the ``fedstats`` script."""
    app()
