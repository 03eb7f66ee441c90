"""``fedstats reproduce fed-chi2``: Pang et al. (ICML 2023), Figures 1, 2, 5 and Section 4.2 (Table 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedstats.cli._common import (
    DataDirOption,
    JsonOption,
    SeedOption,
    WorkersOption,
    emit,
    progress_for,
    state_from,
)
from fedstats.randomness import RandomSource


def fed_chi2(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("results/fed-chi2"),
    quick: Annotated[bool, typer.Option("--quick", help="Small version (under a minute).")] = False,
    data_dir: DataDirOption = None,
    workers: WorkersOption = None,
    json_flag: JsonOption = False,
    seed: SeedOption = None,
) -> None:
    """Reproduce FED-chi^2 / FED-H: JSON results, PNG plots and a results page (resumable)."""
    from fedstats.experiments.fed_chi2 import NAME, run_fed_chi2

    state = state_from(ctx, json_flag=json_flag, seed=seed, data_dir=data_dir)
    randomness = RandomSource(state.seed if state.seed is not None else 2023)
    with progress_for(state) as progress:
        doc = run_fed_chi2(
            out,
            quick=quick,
            data_dir=state.data_dir,
            randomness=randomness,
            workers=workers,
            progress=progress,
        )
    payload = {
        "out": str(out),
        "files": [f"{NAME}.json", f"{NAME}.md", *doc["plots"]],
        "seconds": round(float(doc["timings"]["total_s"]), 1),
        "notes": doc["notes"],
        "release_note": randomness.release_note,
    }
    emit(state, payload)


def register_reproduce(app: typer.Typer) -> None:
    """Add ``fed-chi2`` to the ``reproduce`` group."""
    app.command("fed-chi2")(fed_chi2)
