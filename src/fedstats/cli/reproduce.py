"""``fedstats reproduce NAME``: reproductions of the papers' tables and figures.

Each module named in ``_REPRODUCE_MODULES`` defines ``register_reproduce(app: typer.Typer) -> None`` that
adds one subcommand to the ``reproduce`` group.
"""

from __future__ import annotations

import importlib

import typer

from fedstats.cli._common import FedstatsGroup

_REPRODUCE_MODULES: tuple[str, ...] = (
    "fedstats.cli.reproduce_fed_chi2",
    "fedstats.cli.reproduce_performance_gap",
    "fedstats.cli.reproduce_bit_pushing",
    "fedstats.cli.reproduce_heterogeneity",
)

reproduce_app = typer.Typer(
    cls=FedstatsGroup,
    help="Reproduce the papers' experiments (JSON results, PNG plots, a markdown results page).",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add the ``reproduce`` group and its subcommands to the app."""
    for name in _REPRODUCE_MODULES:
        importlib.import_module(name).register_reproduce(reproduce_app)
    app.add_typer(reproduce_app, name="reproduce")
