"""``fedstats demo``: run every analysis on the real data embedded in the package."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from fedstats.cli._common import (
    JsonOption,
    SeedOption,
    emit,
    fmt_value,
    progress_for,
    state_from,
)
from fedstats.experiments.demo import run_demo


def demo(
    ctx: typer.Context,
    json_flag: JsonOption = False,
    seed: SeedOption = None,
    network: bool = typer.Option(
        False, "--network", help="Run through a loopback server and 20 client processes (HTTPS)."
    ),
) -> None:
    """Run every analysis implemented so far on embedded real data and print one table."""
    state = state_from(ctx, json_flag=json_flag, seed=seed)
    randomness = state.randomness
    with progress_for(state) as progress:
        if network:
            from fedstats.cli.network_demo import run_network_demo

            rows = run_network_demo(progress=progress)
        else:
            rows = run_demo(randomness, progress)
    payload = {"analyses": rows, "seed": state.seed, "release_note": randomness.release_note}

    def render(console: Console) -> None:
        table = Table(title="fedstats demo")
        for col in ("analysis", "data", "estimate", "true value", "error", "privacy spent"):
            table.add_column(col)
        for r in rows:
            eps = r.get("epsilon")
            spent = (
                "not private"
                if eps is None
                else f"eps={fmt_value(eps)}"
                + (f", delta={fmt_value(r['delta'])}" if r.get("delta") else "")
            )
            table.add_row(
                str(r["name"]),
                str(r["dataset"]),
                fmt_value(r["estimate"]),
                fmt_value(r["truth"]),
                fmt_value(r["error"]),
                spent,
            )
        console.print(table)
        if randomness.release_note:
            console.print(f"[dim]{randomness.release_note}[/dim]")

    emit(state, payload, render)


def register(app: typer.Typer) -> None:
    """Add ``demo`` to the app."""
    app.command("demo")(demo)
