"""The validation report: seeded Monte Carlo bias and coverage of every analysis on real data.

``fedstats validate`` (or :func:`run_validation`) runs, for every analysis and protocol, many seeded runs
per (method, data, epsilon, n) cell and writes ``validation.json``, ``README.md`` (one table per analysis
with a PASS/FLAG column) and ``coverage.png`` to ``results/validation/``. The cells are in
:mod:`.cells`, the statistics and the rules of the FLAG column in :mod:`.report`; the choices are
documented in ``docs/validation.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from fedstats._validation import check_int
from fedstats.errors import ParameterError
from fedstats.experiments.validation.cells import Cell, cell_grid, run_cell
from fedstats.experiments.validation.report import (
    NOT_UNBIASED,
    released_bias,
    summarize_estimates,
    summarize_test,
    write_json,
    write_markdown,
    write_plot,
)

__all__ = ["DEFAULT_OUT", "DEFAULT_SEED", "Cell", "cell_grid", "run_validation"]

DEFAULT_OUT = Path("results/validation")
DEFAULT_SEED = 2026
"""Seed of the committed report (``--seed`` changes it)."""


def _timed(
    cell: Cell, seed: int, data_dir: str | None
) -> tuple[dict[str, list[dict[str, Any]]], float]:
    t = time.perf_counter()
    recs = run_cell(cell, seed, data_dir)
    return recs, time.perf_counter() - t


def _rows(
    cell: Cell, recs: dict[str, list[dict[str, Any]]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    head = {
        "id": cell.id,
        "analysis": cell.analysis,
        "method": cell.method,
        "data": cell.data,
        "epsilon": cell.epsilon,
        "n": cell.n,
    }
    cells, tests = [], []
    for target, rs in recs.items():
        n_mean = [r["n"] for r in rs if "n" in r]
        claimed = target not in NOT_UNBIASED
        row = {**head, "target": target, **summarize_estimates(rs, unbiased=claimed)}
        if n_mean:
            row["n"] = round(sum(n_mean) / len(n_mean))
        cells.append(row)
        if cell.analysis in ("chi2", "chi2_api"):
            tests.append(
                {**head, "target": target, **summarize_test(rs, null=cell.method == "independence")}
            )
    return cells, tests


def run_validation(
    out: str | Path = DEFAULT_OUT,
    *,
    quick: bool = False,
    runs: int | None = None,
    seed: int = DEFAULT_SEED,
    data_dir: str | Path | None = None,
    workers: int = 2,
    cells: Sequence[str] | None = None,
    progress: Callable[[Cell, float], None] | None = None,
    update: bool = False,
) -> dict[str, Any]:
    """Run the validation table and write ``validation.json``, ``README.md`` and ``coverage.png``.

    Parameters
    ----------
    out : str or path-like, default ``results/validation``
        Output folder (created; each file is written to a temporary file and renamed).
    quick : bool, default False
        The ``--quick`` slice (about a minute on one core) instead of the full table (< 20 minutes on
        two cores).
    runs : int, optional
        Runs per cell, >= 2 (default 400 in the full table, 100 in the quick slice; see
        :func:`~fedstats.experiments.validation.cells.cell_grid`).
    seed : int, default 2026
        Seed of every run (run ``r`` of a cell uses ``RandomSource(seed).child("validation", id, r)``); the
        report is marked "seeded, not for release".
    data_dir : str or path-like, optional
        Folder of the real data sets (default: the usual search, then the embedded copies).
    workers : int, default 2
        Processes computing cells (1: in this process). The numbers do not depend on it.
    cells : sequence of str, optional
        Only these cell ids (of the chosen grid), in grid order.
    progress : callable, optional
        Called as ``progress(cell, seconds)`` after each cell.
    update : bool, default False
        With ``cells``: read the report already in ``out`` (same grid and seed) and replace or add the rows
        of these cells only, keeping every other row, so a report can gain cells without re-running the
        others; ``command`` then records both runs and ``seconds`` is their sum.

    Returns
    -------
    dict
        The JSON document: ``settings``, ``cells`` (one row per cell and estimated quantity),
        ``tests`` (chi-square decisions), ``summary``, ``timing`` (seconds per cell), ``seconds``.

    Raises
    ------
    ParameterError
        If ``runs`` < 2, ``workers`` < 1, ``seed`` < 0 or a cell id is unknown; with ``update``, if
        ``cells`` is not given or the report in ``out`` is missing or of another grid, seed or runs.
    """
    if runs is not None:
        check_int("runs", runs, low=2)
    check_int("workers", workers, low=1)
    check_int("seed", seed, low=0)
    grid = cell_grid(quick=quick, runs=runs)
    if cells is not None:
        known = {c.id for c in grid}
        unknown = [c for c in cells if c not in known]
        if unknown:
            raise ParameterError(
                "cells", unknown, "ids of the chosen grid: " + ", ".join(sorted(known))
            )
        wanted = set(cells)
        grid = [c for c in grid if c.id in wanted]
    if update and cells is None:
        raise ParameterError("update", update, "only with cells (the cells to replace or add)")
    old = _previous(Path(out), quick, runs, seed) if update else None
    dd = None if data_dir is None else str(data_dir)
    t0 = time.perf_counter()
    results: list[tuple[dict[str, list[dict[str, Any]]], float]] = []
    if workers == 1 or len(grid) == 1:
        for c in grid:
            results.append(_timed(c, seed, dd))
            if progress is not None:
                progress(c, results[-1][1])
    else:
        # the slowest cells first, so the two workers finish together
        order = sorted(range(len(grid)), key=lambda i: -_cost(grid[i]))
        done: dict[int, tuple[dict[str, list[dict[str, Any]]], float]] = {}
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futs = {i: pool.submit(_timed, grid[i], seed, dd) for i in order}
            for i in order:
                done[i] = futs[i].result()
                if progress is not None:
                    progress(grid[i], done[i][1])
        results = [done[i] for i in range(len(grid))]
    rows: list[dict[str, Any]] = []
    tests: list[dict[str, Any]] = []
    for c, (recs, _) in zip(grid, results, strict=True):
        r, t = _rows(c, recs)
        rows += r
        tests += t
    seconds = time.perf_counter() - t0
    flagged = sum(r["verdict"] == "FLAG" for r in rows) + sum(t["verdict"] == "FLAG" for t in tests)
    cmd = "fedstats validate" + (" --quick" if quick else "") + (f" --runs {runs}" if runs else "")
    cmd += f" --seed {seed}"
    doc: dict[str, Any] = {
        "report": "validation",
        "command": cmd,
        "release_note": "reproducible (seeded) run: not for release",
        "settings": {
            "quick": quick,
            "seed": seed,
            "runs": runs or "default",
            "workers": workers,
            "cells": len(grid),
        },
        "summary": {"rows": len(rows) + len(tests), "flagged": flagged},
        "cells": rows,
        "tests": tests,
        "timing": {c.id: round(t, 3) for c, (_, t) in zip(grid, results, strict=True)},
        "seconds": seconds,
    }
    if old is not None:
        doc = _updated(old, doc, grid, cell_grid(quick=quick, runs=runs))
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "validation.json", doc)
    write_markdown(folder / "README.md", doc)
    write_plot(folder / "coverage.png", doc)
    return doc


def _previous(out: Path, quick: bool, runs: int | None, seed: int) -> dict[str, Any]:
    """The report in ``out`` that an update extends, checked to be of the same grid, seed and runs."""
    import json

    path = out / "validation.json"
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ParameterError("update", str(path), "an existing validation.json to update") from None
    st = doc.get("settings", {})
    if (st.get("quick"), st.get("seed"), st.get("runs")) != (quick, seed, runs or "default"):
        raise ParameterError(
            "update",
            str(path),
            f"a report of the same grid (quick={quick}), seed ({seed}) and runs ({runs or 'default'})",
        )
    return doc


def _updated(
    old: dict[str, Any], new: dict[str, Any], ran: list[Cell], full: list[Cell]
) -> dict[str, Any]:
    """``old`` with the rows, tests and timings of the cells ``ran`` replaced by ``new``'s, in grid order."""
    ids = {c.id for c in ran}
    order = {c.id: i for i, c in enumerate(full)}

    def merged(key: str) -> list[dict[str, Any]]:
        rows = [r for r in old[key] if r["id"] not in ids] + new[key]
        return sorted(rows, key=lambda r: order.get(r["id"], len(order)))

    doc = dict(old)
    # the rows kept from the old report are judged by the current rules too (released bias)
    doc["cells"], doc["tests"] = [released_bias(r) for r in merged("cells")], merged("tests")
    doc["timing"] = {**old["timing"], **new["timing"]}
    doc["timing"] = {c.id: doc["timing"][c.id] for c in full if c.id in doc["timing"]}
    doc["seconds"] = float(old["seconds"]) + float(new["seconds"])
    doc["settings"] = {**old["settings"], "cells": len(doc["timing"])}
    doc["command"] = (
        f"{old['command']}, then {new['command']} --update --cells (the {len(ids)} cells in "
        "validation.json's updated_cells)"
    )
    doc["updated_cells"] = sorted(
        {*old.get("updated_cells", []), *ids}, key=lambda i: order.get(i, 0)
    )
    flagged = sum(r["verdict"] == "FLAG" for r in doc["cells"]) + sum(
        t["verdict"] == "FLAG" for t in doc["tests"]
    )
    doc["summary"] = {"rows": len(doc["cells"]) + len(doc["tests"]), "flagged": flagged}
    return doc


_COST = {
    "mean": 1.0,
    "variance": 1.3,
    "performance_gap": 4.0,
    "heterogeneity": 12.0,
    "chi2": 8.0,
    "chi2_api": 8.0,
}


def _cost(cell: Cell) -> float:
    """A rough relative cost of a cell (for scheduling only)."""
    return (
        _COST.get(cell.analysis, 1.0)
        * cell.runs
        * (3.0 if cell.n is None and cell.analysis in ("mean", "variance") else 1.0)
        * (20.0 if cell.n is None and cell.analysis == "chi2_api" else 1.0)
    )
