"""``fedstats reproduce performance-gap``: Juarez & Korolova (2023), Tables 1-2, Figures 1-2, Appendix C."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedstats.cli._common import (
    DataDirOption,
    JsonOption,
    SeedOption,
    emit,
    progress_for,
    state_from,
)
from fedstats.randomness import RandomSource


def performance_gap(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path(
        "results/performance-gap"
    ),
    quick: Annotated[bool, typer.Option("--quick", help="Small version (under a minute).")] = False,
    data_dir: DataDirOption = None,
    json_flag: JsonOption = False,
    seed: SeedOption = None,
) -> None:
    """Reproduce the performance-gap paper: JSON results, PNG plots and a results page."""
    from fedstats.experiments.performance_gap import run_performance_gap

    state = state_from(ctx, json_flag=json_flag, seed=seed, data_dir=data_dir)
    randomness = RandomSource(state.seed if state.seed is not None else 0)
    with progress_for(state) as progress:
        res = run_performance_gap(
            out, quick=quick, data_dir=state.data_dir, randomness=randomness, progress=progress
        )
    payload = {
        "out": str(out),
        "files": ["performance-gap.json", "performance-gap.md", *res["plots"]],
        "seconds": res["seconds"],
        "table2": "error" not in res["table2"],
        "release_note": randomness.release_note,
    }
    emit(state, payload)


def register_reproduce(app: typer.Typer) -> None:
    """Add ``performance-gap`` to the ``reproduce`` group."""
    app.command("performance-gap")(performance_gap)
