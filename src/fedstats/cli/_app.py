"""The typer application behind ``fedstats``: global options and the lazily loaded subcommands.

Imported by :mod:`fedstats.cli.app` on first use (``fedstats --version`` never imports it). A command's
module is imported when that command is looked up (:class:`LazyGroup`); ``fedstats --help`` lists every
command from the static summaries in :data:`fedstats.cli._commands.SUMMARIES`, importing none of them.
"""

from __future__ import annotations

import importlib
import json
from gettext import gettext as _
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from fedstats.cli._commands import COMMANDS as _COMMANDS
from fedstats.cli._commands import SUMMARIES as _SUMMARIES
from fedstats.cli._common import TYPER_SETTINGS, CliState, FedstatsGroup, SeedOption

__all__ = ["LazyGroup", "app"]


class LazyGroup(FedstatsGroup):
    """The top-level group: a command's module is imported when that command is looked up.

    ``fedstats mean ...`` then loads the modules of ``mean`` only (not the server's, secure aggregation's
    or the other analyses'), and ``fedstats --help`` none (it reads :data:`~fedstats.cli._commands.SUMMARIES`).
    """

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command, in the order of :data:`~fedstats.cli._commands.COMMANDS`."""
        return list(dict.fromkeys([*_COMMANDS, *super().list_commands(ctx)]))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """Load the module of ``cmd_name`` on first use, then look it up."""
        module = _COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            sub = typer.Typer(**TYPER_SETTINGS)
            importlib.import_module(module).register(sub)
            for name, command in typer.main.get_group(sub).commands.items():
                self.add_command(command, name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The ``Commands`` section of ``--help``: a command not loaded yet is described by its summary.

        Same layout and shortening as typer's (each command's first sentence, cut to the width).
        """
        commands: list[tuple[str, Any]] = []
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name)
            if cmd is None and name in _SUMMARIES:
                cmd = TyperCommand(name, help=_SUMMARIES[name], rich_markup_mode=None)
            if cmd is None or cmd.hidden:
                continue
            commands.append((name, cmd))
        if not commands:
            return
        limit = formatter.width - 6 - max(len(name) for name, _cmd in commands)
        with formatter.section(_("Commands")):
            formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in commands])


app = typer.Typer(
    name="fedstats",
    cls=LazyGroup,
    help="Private federated analytics: DP statistics over many clients with secure aggregation.",
    no_args_is_help=True,
    **TYPER_SETTINGS,
)


def _version(ctx: typer.Context, value: bool) -> None:
    # not eager, so the eager --json is already in ctx.params whatever the order on the command line
    if value:
        from fedstats import __version__

        as_json = bool(ctx.params.get("json_flag"))
        typer.echo(json.dumps({"version": __version__}) if as_json else f"fedstats {__version__}")
        raise typer.Exit(0)


@app.callback()
def _global(
    ctx: typer.Context,
    seed: SeedOption = None,
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
