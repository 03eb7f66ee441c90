"""The ``fedstats`` command: global options and the registry of subcommand modules.

Each module named in ``_COMMANDS`` defines ``register(app: typer.Typer) -> None`` adding its command(s);
it is imported only when one of its commands runs (:class:`LazyGroup`). Global options go before the command: ``fedstats --seed 1 --json demo``; most commands also take
``--json`` and ``--seed`` after their name.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from fedstats import __version__
from fedstats.cli._common import CliState, FedstatsGroup

_COMMANDS: dict[str, str] = {
    "demo": "fedstats.cli.demo",
    "datasets": "fedstats.cli.datasets",
    "reproduce": "fedstats.cli.reproduce",
    "mean": "fedstats.cli.mean",
    "variance": "fedstats.cli.mean",
    "gap": "fedstats.cli.gap",
    "gap-plan": "fedstats.cli.gap",
    "secagg": "fedstats.cli.secagg",
    "heterogeneity": "fedstats.cli.heterogeneity",
    "calibrate": "fedstats.cli.privacy",
    "privacy": "fedstats.cli.privacy",
    "chi2": "fedstats.cli.chi2",
    "entropy": "fedstats.cli.entropy",
    "examples": "fedstats.cli.examples",
    "server": "fedstats.cli.server",
    "client": "fedstats.cli.client",
    "enroll": "fedstats.cli.enroll",
    "admin": "fedstats.cli.admin",
    "validate": "fedstats.cli.validate",
}
"""Command name -> the module whose ``register`` adds it (imported only when the command runs)."""

_COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(_COMMANDS.values()))


class LazyGroup(FedstatsGroup):
    """The top-level group: a command's module is imported when that command is looked up.

    ``fedstats mean ...`` then loads the modules of ``mean`` only (not the server's, secure aggregation's
    or the other analyses'): about half of the start-up time. ``--help`` lists every command, loading all.
    """

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command, in the order of :data:`_COMMANDS`."""
        return list(dict.fromkeys([*_COMMANDS, *super().list_commands(ctx)]))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """Load the module of ``cmd_name`` on first use, then look it up."""
        module = _COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            sub = typer.Typer(
                add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None
            )
            importlib.import_module(module).register(sub)
            for name, command in typer.main.get_group(sub).commands.items():
                self.add_command(command, name)
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    name="fedstats",
    cls=LazyGroup,
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


def main() -> None:
    """Entry point of the ``fedstats`` script."""
    app()
