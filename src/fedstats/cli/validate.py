"""``fedstats validate``: the seeded Monte Carlo bias-and-coverage table of every analysis on real data.

Writes ``validation.json``, ``README.md`` and ``coverage.png`` to ``--out`` (default
``results/validation``); see :func:`fedstats.experiments.validation.run_validation` and
``docs/validation.md``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console

from fedstats.cli._common import (
    DataDirOption,
    JsonOption,
    SeedOption,
    emit,
    out_path,
    state_from,
    stderr_console,
)


def validate(
    ctx: typer.Context,
    quick: Annotated[
        bool, typer.Option("--quick", help="A small slice (under 2 minutes): checks the pipeline.")
    ] = False,
    out_text: Annotated[
        str, typer.Option("--out", help="Output folder (default results/validation).")
    ] = "results/validation",
    runs: Annotated[
        int | None,
        typer.Option("--runs", min=2, help="Runs per cell (default 400; 100 with --quick)."),
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", min=1, help="Processes computing cells (default 2).")
    ] = 2,
    cells: Annotated[
        str | None,
        typer.Option(
            "--cells", help="Only these cell ids (comma-separated; ids as in validation.json)."
        ),
    ] = None,
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="With --cells: replace or add these cells' rows in the report already in --out, "
            "keeping the others (same grid, seed and runs).",
        ),
    ] = False,
    data_dir: DataDirOption = None,
    json_flag: JsonOption = False,
    seed: SeedOption = None,
) -> None:
    """Monte Carlo bias and 95% CI coverage of every analysis and protocol on real columns."""
    from fedstats.experiments.validation import DEFAULT_SEED, run_validation

    state = state_from(ctx, json_flag=json_flag, seed=seed, data_dir=data_dir)
    if update and cells is None:
        from fedstats.errors import ParameterError

        raise ParameterError("--update", update, "only with --cells (the cells to replace or add)")
    out = out_path(out_text)
    assert out is not None
    the_seed = DEFAULT_SEED if state.seed is None else state.seed
    err = stderr_console()

    def progress(cell: Any, seconds: float) -> None:
        if not state.quiet and not state.json:
            err.print(f"  {cell.id}: {cell.runs} runs, {seconds:.1f} s")

    doc = run_validation(
        out,
        quick=quick,
        runs=runs,
        seed=the_seed,
        data_dir=state.data_dir,
        workers=workers,
        progress=progress,
        cells=None if cells is None else [c.strip() for c in cells.split(",") if c.strip()],
        update=update,
    )
    flagged = [
        f"{r['id']} ({r['target']}): {', '.join(r['flags'])}" for r in doc["cells"] if r["flags"]
    ] + [f"{t['id']} (decision): {', '.join(t['flags'])}" for t in doc["tests"] if t["flags"]]
    payload = {
        "out": str(out),
        "files": ["validation.json", "README.md", "coverage.png"],
        "seconds": round(doc["seconds"], 1),
        "rows": doc["summary"]["rows"],
        "flagged": doc["summary"]["flagged"],
        "flags": flagged,
        "seed": the_seed,
        "release_note": doc["release_note"],
    }

    def render(console: Console) -> None:
        console.print(
            f"validation table: {payload['rows']} rows, {payload['flagged']} flagged, "
            f"{payload['seconds']} s; written to {out}/ (README.md, validation.json, coverage.png)"
        )
        for line in flagged:
            console.print(f"  FLAG {line}")
        console.print(f"seed {the_seed}: {doc['release_note']}")

    emit(state, payload, render)


def register(app: typer.Typer) -> None:
    """Add ``validate`` to the command group."""
    app.command("validate")(validate)
