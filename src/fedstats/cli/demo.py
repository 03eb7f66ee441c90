"""``fedstats demo``: run every analysis on the real data embedded in the package."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from fedstats.cli._common import (
    JsonOption,
    SeedOption,
    check_applies,
    emit,
    fmt_value,
    progress_for,
    state_from,
)
from fedstats.errors import ParameterError
from fedstats.experiments.demo import run_demo


def demo(
    ctx: typer.Context,
    json_flag: JsonOption = False,
    seed: SeedOption = None,
    network: bool = typer.Option(
        False, "--network", help="Run through a loopback server and 20 client processes (HTTPS)."
    ),
    mode: str = typer.Option(
        "server",
        "--mode",
        help="With --network: 'server' (one aggregation server, plain and secure rounds) or "
        "'prio3' (two aggregator processes verify every report's validity proof; one device cheats).",
    ),
) -> None:
    """Run every analysis implemented so far on embedded real data and print one table."""
    state = state_from(ctx, json_flag=json_flag, seed=seed)
    check_applies(ctx, "mode", network, "only with --network")
    if mode not in ("server", "prio3"):
        raise ParameterError("--mode", mode, "server or prio3")
    randomness = state.randomness
    with progress_for(state) as progress:
        if network and mode == "prio3":
            from fedstats.cli.prio3_demo import run_prio3_demo

            rows = [_prio3_row(r) for r in run_prio3_demo()]
        elif network:
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


def _prio3_row(r: dict[str, Any]) -> dict[str, Any]:
    """A row of the Prio3 network demo in the demo table's columns.

    ``truth`` is the exact statistic of the honest devices' records; ``agree`` says whether the network
    run equals the in-process engine's (``engine``) bit for bit.
    """
    rejected = sorted({int(x.get("rejected", 0)) for x in r.get("rounds", [])})
    same = "equals" if r.get("agree") else "DIFFERS from"
    return {
        **r,
        "name": r["analysis"]
        + f" [prio3, rejected per round: {rejected}; {same} the in-process engine]",
        "dataset": "adult",
        "estimate": r["network"],
        "truth": r["truth"],
        "error": float(r["network"]) - float(r["truth"]),
        "epsilon": r.get("epsilon"),
    }


def register(app: typer.Typer) -> None:
    """Add ``demo`` to the app."""
    app.command("demo")(demo)
