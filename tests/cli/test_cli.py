"""The command line: global options, the demo, and the one-line error convention (exit code 2)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from fedstats import __version__
from fedstats.cli.app import app
from fedstats.errors import DataError
from fedstats.experiments.demo import REQUIRED_KEYS
from golden_helpers import check_golden

runner = CliRunner()


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_version_and_help() -> None:
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and __version__ in res.stdout
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0 and "demo" in res.stdout


@pytest.fixture(scope="module")
def demo_json() -> Any:
    """One seeded demo run shared by the tests below (the demo runs every analysis, so it is slow)."""
    return _json(runner.invoke(app, ["--seed", "5", "--json", "demo"]))


def test_demo_json_has_every_required_key_and_exact_rows(demo_json: Any) -> None:
    data = demo_json
    names = [row["name"] for row in data["analyses"]]
    assert "chi2 (exact, federated sum)" in names and "mean age (exact, federated sum)" in names
    for row in data["analyses"]:
        assert set(REQUIRED_KEYS) <= set(row)
    exact = {r["name"]: r for r in data["analyses"]}
    assert exact["mean age (exact, federated sum)"]["truth"] == pytest.approx(38.64358543876172)
    assert abs(exact["chi2 (exact, federated sum)"]["error"]) < 1e-6
    assert data["release_note"] == "reproducible (seeded) run: not for release"


def test_golden_seeded_demo_gives_the_same_numbers_as_the_recorded_run(demo_json: Any) -> None:
    """Refactors keep results: ``fedstats --seed 5 --json demo`` equals tests/golden/demo_seed5.json."""
    check_golden("demo_seed5", demo_json["analyses"])


def test_seeded_demo_is_reproducible_and_json_flag_works_after_the_command(demo_json: Any) -> None:
    again = _json(runner.invoke(app, ["demo", "--json", "--seed", "5"]))
    assert again == demo_json


def test_human_readable_demo_prints_a_table(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [
        {
            "name": "mean age",
            "dataset": "adult",
            "estimate": 38.6,
            "truth": 38.64,
            "error": -0.04,
            "epsilon": 1.0,
            "delta": 1e-6,
        },
        {
            "name": "chi2",
            "dataset": "adult",
            "estimate": 3236.8,
            "truth": None,
            "error": None,
            "epsilon": None,
        },
    ]
    monkeypatch.setattr("fedstats.cli.demo.run_demo", lambda *_a, **_k: rows)
    res = runner.invoke(app, ["--quiet", "demo"])
    assert res.exit_code == 0
    assert "fedstats demo" in res.stdout and "mean age" in res.stdout
    assert "eps=1, delta=1e-06" in res.stdout and "not private" in res.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["no-such-command"],
        ["--seed", "-1", "demo"],
        ["demo", "--no-such-option"],
        ["--seed", "x", "demo"],
    ],
)
def test_usage_errors_give_one_line_and_exit_2(args: list[str]) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "Traceback" not in res.output


def test_fedstats_errors_give_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise DataError("column 'age' has a NaN value")

    monkeypatch.setattr("fedstats.cli.demo.run_demo", broken)
    res = runner.invoke(app, ["demo", "--json"])
    assert res.exit_code == 2
    assert res.stderr.strip() == "error: column 'age' has a NaN value"
    assert res.stdout == ""


def test_demo_mode_applies_only_with_network_and_names_its_choices() -> None:
    for args in (["demo", "--mode", "prio3"], ["demo", "--network", "--mode", "foo"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        assert res.output.count("\n") == 1 and "--mode" in res.output, res.output


def test_demo_network_prio3_reports_the_aggregators_result_beside_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The table row of the two-aggregator demo: the network's value, the honest devices' exact value as
    truth, whether it equals the engine's, the rejections (the demo runs in tests/service/test_prio3_service.py)."""
    import fedstats.cli.prio3_demo as p3

    row = {
        "analysis": "bitpushing.mean",
        "network": 36.5,
        "engine": 36.25,
        "truth": 38.0,
        "agree": False,
        "rounds": [{"accepted": 39, "rejected": 1}],
    }
    monkeypatch.setattr(p3, "run_prio3_demo", lambda: [row])
    got = _json(runner.invoke(app, ["demo", "--network", "--mode", "prio3", "--json"]))
    (r,) = got["analyses"]
    assert (r["estimate"], r["truth"], r["error"]) == (36.5, 38.0, -1.5)
    assert "DIFFERS from the in-process engine" in r["name"]
    assert "prio3" in r["name"] and "[1]" in r["name"]


def test_the_prio3_demo_truth_is_pearson_s_chi_square_of_the_table() -> None:
    from scipy.stats import chi2_contingency

    from fedstats.cli.prio3_demo import _chi2_exact

    rng = np.random.default_rng(4)
    x, y = (
        rng.integers(0, 5, 300),
        rng.integers(1, 3, 300),
    )  # column 0 of y is empty
    x[x == 3] = 4  # an empty row: dropped, as FED-chi^2 with drop_empty does
    table = np.zeros((5, 3))
    np.add.at(table, (x, y), 1)
    table = table[table.sum(1) > 0][:, table.sum(0) > 0]
    want = chi2_contingency(table, correction=False)[0]
    assert _chi2_exact(x, y) == pytest.approx(want, rel=1e-12)
