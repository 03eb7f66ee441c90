"""``fedstats reproduce bit-pushing``: Cormode & Markov (2021), Figures 1-3 (bit pushing vs baselines)."""

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


def bit_pushing(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path(
        "results/bit-pushing"
    ),
    quick: Annotated[bool, typer.Option("--quick", help="Small version (under a minute).")] = False,
    reps: Annotated[
        int | None, typer.Option("--reps", min=2, help="Repetitions per point (default 100).")
    ] = None,
    data_dir: DataDirOption = None,
    json_flag: JsonOption = False,
    seed: SeedOption = None,
) -> None:
    """Reproduce bit pushing's Figures 1-3: JSON, PNG plots and a results page (resumable)."""
    from fedstats.experiments.bit_pushing import NAME, run_bit_pushing

    state = state_from(ctx, json_flag=json_flag, seed=seed, data_dir=data_dir)
    randomness = RandomSource(state.seed if state.seed is not None else 2021)
    with progress_for(state) as progress:
        doc = run_bit_pushing(
            out,
            quick=quick,
            data_dir=state.data_dir,
            randomness=randomness,
            progress=progress,
            reps=reps,
        )
    name = f"{NAME}-quick" if quick else NAME
    payload = {
        "out": str(out),
        "files": [f"{name}.json", f"{name}.md", *doc["plots"]],
        "seconds": round(float(doc["timings"]["total_s"]), 1),
        "repetitions": doc["repetitions"],
        "notes": doc["notes"],
        "release_note": randomness.release_note,
    }
    emit(state, payload)


def register_reproduce(app: typer.Typer) -> None:
    """Add ``bit-pushing`` to the ``reproduce`` group."""
    app.command("bit-pushing")(bit_pushing)
