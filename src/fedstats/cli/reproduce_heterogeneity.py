"""``fedstats reproduce heterogeneity``: paper 000's Tables 1-6 and Figure 1 (corrected), resumable."""

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


def heterogeneity_reproduction(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path(
        "results/heterogeneity"
    ),
    quick: Annotated[bool, typer.Option("--quick", help="Small version (under a minute).")] = False,
    legacy: Annotated[
        bool, typer.Option("--legacy", help="Also emulate the authors' script (published Table 1).")
    ] = False,
    reps: Annotated[
        int | None, typer.Option("--reps", min=2, help="Repetitions per table cell (default 100).")
    ] = None,
    data_dir: DataDirOption = None,
    json_flag: JsonOption = False,
    seed: SeedOption = None,
) -> None:
    """Reproduce Scott, Cormode & Maple's experiments with correct mathematics (JSON, PNG, results page)."""
    from fedstats.experiments.heterogeneity import NAME, run_heterogeneity

    state = state_from(ctx, json_flag=json_flag, seed=seed, data_dir=data_dir)
    randomness = RandomSource(state.seed if state.seed is not None else 2024)
    with progress_for(state) as progress:
        doc = run_heterogeneity(
            out,
            quick=quick,
            legacy=legacy,
            data_dir=state.data_dir,
            randomness=randomness,
            progress=progress,
            reps=reps,
        )
    name = f"{NAME}-quick" if quick else NAME
    emit(
        state,
        {
            "out": str(out),
            "files": [f"{name}.json", f"{name}.md", *doc["plots"]],
            "seconds": round(float(doc["timings"]["total_s"]), 1),
            "repetitions": doc["repetitions"],
            "legacy": doc.get("legacy"),
            "release_note": randomness.release_note,
        },
    )


def register_reproduce(app: typer.Typer) -> None:
    """Add ``heterogeneity`` to the ``reproduce`` group."""
    app.command("heterogeneity")(heterogeneity_reproduction)
