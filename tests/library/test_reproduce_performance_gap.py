"""End-to-end: ``fedstats reproduce performance-gap --quick`` writes its JSON, plots and results page."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fedstats.cli.app import app
from fedstats.experiments.performance_gap import PAPER_TABLE1
from golden_helpers import check_golden

# whole reproductions (Table 1's optimisations, the activity model, plots): make test, not make test-fast
pytestmark = pytest.mark.slow


def _once(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (deterministic in its arguments) computed once per argument, a fresh copy each call."""
    cached = functools.cache(fn)
    return functools.wraps(fn)(lambda *a, **k: copy.deepcopy(cached(*a, **k)))


@pytest.fixture(scope="module", autouse=True)
def _analytic_parts_once() -> Iterator[None]:
    """Table 1, Figures 1-2 and the activity model computed once for this module's runs, not per run.

    They depend only on ``quick`` (the activity model on the data folder, with its fixed seed), are not
    checkpointed cells, and took most of each run (Table 1's optimisations about 40 s, the activity
    model's logistic fit 15 s, on a loaded 2-core machine): the four runs here get the same numbers from
    one computation (the golden check of the quick run proves they are the real ones).
    """
    import fedstats.experiments.activity as activity
    import fedstats.experiments.performance_gap as pg

    mp = pytest.MonkeyPatch()
    for name in ("table1", "figure1", "figure2"):
        mp.setattr(pg, name, _once(getattr(pg, name)))
    mp.setattr(activity, "activity_performance", functools.cache(activity.activity_performance))
    yield
    mp.undo()


def test_reproduce_performance_gap_quick(tmp_path: Path, shared_data: Path) -> None:
    out = tmp_path / "pg"
    res = CliRunner().invoke(
        app,
        [
            "reproduce",
            "performance-gap",
            "--quick",
            "--out",
            str(out),
            "--data-dir",
            str(shared_data),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["reproduction"] == "performance-gap" and summary["notes"] == []
    for name in (
        "performance-gap-quick.json",
        "performance-gap-quick.md",
        "figure1.png",
        "figure2.png",
        "appendix_c.png",
    ):
        assert (out / name).stat().st_size > 500, name
    data = json.loads((out / "performance-gap-quick.json").read_text())
    assert data["quick"] is True and "error" not in data["table2"]
    check_golden("reproduce-performance-gap-quick", data)  # the same numbers as the recorded run
    # Table 1 with the paper's rule reproduces the printed digits; the corrected split spends its budget
    for row in data["table1"]["rows"]:
        printed = PAPER_TABLE1[row["mechanism"]][row["K"]][[0.1, 0.01, 0.001].index(row["alpha"])]
        ours = row["paper_chebyshev"]
        assert (printed is None) == (ours is None)
        if printed is not None:
            assert f"{ours:.2f}" == f"{printed:.2f}"
            if row["mechanism"] == "L":
                assert row["paper_chebyshev_true_loss"] is None
            else:
                assert row["paper_chebyshev_true_loss"] > ours
    # Appendix C: the empirical MSE over the most runs is close to the theory
    for kind in ("R", "L"):
        ac = data["appendix_c"][kind]
        assert abs(ac["empirical"][-1] / ac["theoretical"] - 1) < 0.1
    # Table 2 ran on the engine with the Appendix D model (25 male and 49 female clients)
    t2 = data["table2"]
    assert t2["activity"]["n_clients"] == {"F": 49, "M": 25}
    assert all(
        r["true_loss"] <= r["epsilon"] * (1 + 1e-9)
        for r in t2["rows"]
        if r["accounting"] == "exact"
    )
    assert data["table1"]["reproduces_printed"] is True
    page = (out / "performance-gap-quick.md").read_text()
    assert "reproduces every printed cell: **yes**" in page
    assert "Quick run" in page
    # every Table 2 row is on the page, with its measured error
    for r in t2["rows"]:
        assert f"{r['mean_abs_error']:.4f} ({r['sd_abs_error']:.4f})" in page


def test_rerun_reuses_the_cells_and_other_settings_recompute(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedstats.experiments.performance_gap as pg
    from fedstats.experiments.framework import run_reproduction

    # the cells are the point here: no plots (the quick run draws them), Table 2 on 2,000 clients
    monkeypatch.setattr(pg, "plots", lambda out, doc: [])
    small = {"table2_clients": 2000}
    out = tmp_path / "pg"
    _, first = run_reproduction(
        "performance-gap", out=out, quick=True, seed=5, data_dir=shared_data, reps=2, **small
    )
    _, again = run_reproduction(
        "performance-gap", out=out, quick=True, seed=5, data_dir=shared_data, reps=2, **small
    )
    assert again["appendix_c"] == first["appendix_c"]
    assert [r["mean_abs_error"] for r in again["table2"]["rows"]] == [
        r["mean_abs_error"] for r in first["table2"]["rows"]
    ]
    assert max(r["seconds_per_run"] for r in again["table2"]["rows"]) == max(
        r["seconds_per_run"] for r in first["table2"]["rows"]
    )  # read back from the checkpoint, not recomputed
    _, other = run_reproduction(
        "performance-gap", out=out, quick=True, seed=6, data_dir=shared_data, reps=2, **small
    )
    assert other["appendix_c"]["R"]["empirical"] != first["appendix_c"]["R"]["empirical"]


def test_missing_activity_data_is_a_note_not_a_crash(tmp_path: Path) -> None:
    from fedstats.experiments.framework import run_reproduction

    empty = tmp_path / "no-data"
    empty.mkdir()
    ctx, doc = run_reproduction(
        "performance-gap", out=tmp_path / "pg", quick=True, seed=5, data_dir=empty
    )
    assert "DatasetNotFoundError" in doc["table2"]["error"]
    assert doc["notes"] == [f"Table 2 not run: {doc['table2']['error']}"]
    page = (ctx.out / "performance-gap-quick.md").read_text()
    assert "Not run: DatasetNotFoundError" in page
