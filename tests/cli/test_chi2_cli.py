"""``fedstats chi2`` and ``fedstats entropy`` through the typer app: JSON output, routes and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from typer.testing import CliRunner

from fedstats.cli.app import app

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture(scope="module")
def csv_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    n = 3000
    a = rng.integers(0, 4, n)
    b = (a + rng.integers(0, 2, n)) % 5  # dependent on a
    df = pd.DataFrame({"a": a, "b": b, "site": rng.integers(0, 20, n)})
    path = tmp_path_factory.mktemp("chi2") / "data.csv"
    df.to_csv(path, index=False)
    return path


def test_chi2_json_on_adult_secure_by_default() -> None:
    code, out, err = _run(
        "--seed", "1", "chi2", "adult", "--x", "occupation", "--y", "native_country", "--json"
    )
    assert code == 0, err
    d = json.loads(out)
    for key in ("statistic", "ci", "p_value", "dof", "exact_statistic", "multiplicative_error"):
        assert key in d
    assert d["route"] == "secure" and d["dof"] == 14 * 41 and d["n_clients"] == 100
    assert d["ci"][0] <= d["statistic"] <= d["ci"][1]
    assert d["release_note"]


def test_chi2_csv_with_client_column_matches_exact(csv_file: Path) -> None:
    code, out, err = _run(
        "--seed",
        "2",
        "chi2",
        str(csv_file),
        "--x",
        "a",
        "--y",
        "b",
        "--client-column",
        "site",
        "--no-secure",
        "--decoder",
        "geometric",
        "--json",
    )
    assert code == 0, err
    d = json.loads(out)
    df = pd.read_csv(csv_file)
    ref = scipy.stats.chi2_contingency(pd.crosstab(df.a, df.b).to_numpy(), correction=False)
    assert d["exact_statistic"] == pytest.approx(ref[0]) and d["dof"] == ref[2]
    assert d["n_clients"] == 20 and d["route"] == "serial" and d["decoder"] == "geometric"


def test_entropy_and_g_test(csv_file: Path) -> None:
    code, out, err = _run(
        "--seed",
        "3",
        "entropy",
        str(csv_file),
        "--column",
        "b",
        "--clients",
        "10",
        "--encoding-size",
        "100",
        "--json",
    )
    assert code == 0, err
    d = json.loads(out)
    counts = pd.read_csv(csv_file).b.value_counts().to_numpy()
    assert d["exact_entropy"] == pytest.approx(scipy.stats.entropy(counts))
    assert d["n_categories"] == 5 and d["route"] == "secure"
    code, out, err = _run(
        "--seed",
        "3",
        "chi2",
        str(csv_file),
        "--x",
        "a",
        "--y",
        "b",
        "--test",
        "g",
        "--clients",
        "10",
        "--no-secure",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["test"] == "g-test"
    assert json.loads(out)["analysis"] == "entropy.g_test"


def test_dropout_runs_on_the_secure_route_with_the_plain_result(csv_file: Path) -> None:
    args = ("chi2", str(csv_file), "--x", "a", "--y", "b", "--clients", "20", "--json")
    code, out, err = _run("--seed", "2", *args, "--dropout", "0.25")
    assert code == 0, err
    d = json.loads(out)
    assert d["route"] == "secure" and d["n_dropped"] == 5 and d["n_clients"] == 15
    code, out, err = _run("--seed", "2", *args, "--dropout", "0.25", "--backend", "serial")
    assert code == 0, err
    plain = json.loads(out)
    assert plain["route"] == "serial" and plain["statistic"] == d["statistic"]


def test_entropy_fd_step_flag(csv_file: Path) -> None:
    args = ("entropy", str(csv_file), "--column", "b", "--clients", "10", "--no-secure")
    code, out, err = _run(
        "--seed", "3", *args, "--encoding-size", "50", "--fd-step", "0.1", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["fd_step"] == 0.1
    code, out, err = _run(*args, "--fd-step", "0.7")
    assert code == 2 and out == ""
    assert err.strip().startswith("error:") and "--fd-step" in err
    code, _, err = _run(*args, "--delta", "0.1")
    assert code == 2 and "--delta" in err  # the old name is gone


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--x", "nope", "--y", "b"), "--x"),
        (("--x", "a", "--y", "b", "--encoding-size", "1"), "--encoding-size"),
        (("--x", "a", "--y", "b", "--decoder", "median"), "decoder"),
        (("--x", "a", "--y", "b", "--dropout", "1.5"), "dropout"),
        (("--x", "a", "--y", "b", "--clients", "0"), "--clients"),
        (("--x", "a", "--y", "b", "--secure", "--backend", "serial"), "--backend"),
    ],
)
def test_chi2_bad_input_exits_2_with_one_line(
    csv_file: Path, args: tuple[str, ...], needle: str
) -> None:
    code, out, err = _run("chi2", str(csv_file), "--no-secure", *args)
    assert code == 2
    assert out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]


def test_count_column(tmp_path: Path) -> None:
    df = pd.DataFrame({"x": [0, 0, 1, 1], "y": [0, 1, 0, 1], "n": [30, 10, 5, 40]})
    path = tmp_path / "counts.csv"
    df.to_csv(path, index=False)
    code, out, err = _run(
        "chi2",
        str(path),
        "--x",
        "x",
        "--y",
        "y",
        "--count-column",
        "n",
        "--clients",
        "2",
        "--no-secure",
        "--json",
    )
    assert code == 0, err
    ref = scipy.stats.chi2_contingency(np.array([[30, 10], [5, 40]]), correction=False)
    assert json.loads(out)["exact_statistic"] == pytest.approx(ref[0])
    df.loc[2, "n"] = -5
    df.to_csv(path, index=False)
    code, out, err = _run("chi2", str(path), "--x", "x", "--y", "y", "--count-column", "n")
    assert code == 2 and out == "" and "negative" in err and len(err.strip().splitlines()) == 1
    code, _, err = _run("entropy", str(path), "--column", "x", "--count-column", "n")
    assert code == 2 and "negative" in err


def test_empty_row_and_missing_file(tmp_path: Path) -> None:
    # a category present only with zero counts gives an empty row of the summed table
    df = pd.DataFrame({"x": [0, 0, 1, 1, 2], "y": [0, 1, 0, 1, 0], "n": [30, 10, 5, 40, 0]})
    path = tmp_path / "empty.csv"
    df.to_csv(path, index=False)
    code, out, err = _run(
        "chi2", str(path), "--x", "x", "--y", "y", "--count-column", "n", "--clients", "2"
    )
    assert code == 2 and out == "" and "empty row" in err
    code, out, err = _run(
        "chi2",
        str(path),
        "--x",
        "x",
        "--y",
        "y",
        "--count-column",
        "n",
        "--clients",
        "2",
        "--drop-empty",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["dof"] == 1
    code, _, err = _run("chi2", str(tmp_path / "missing.csv"), "--x", "a", "--y", "b")
    assert code == 2 and err.startswith("error:")
    code, _, err = _run("entropy", "adult", "--column", "no_such_column")
    assert code == 2 and "--column" in err


def test_many_clients_use_the_fast_path(monkeypatch: pytest.MonkeyPatch, csv_file: Path) -> None:
    monkeypatch.setattr("fedstats.cli._tables.MAX_TABLE_ENTRIES", 100)
    code, out, err = _run(
        "--seed", "4", "chi2", str(csv_file), "--x", "a", "--y", "b", "--clients", "500", "--json"
    )
    assert code == 0, err
    d = json.loads(out)
    assert d["route"].startswith("simulation") and d["n_clients"] == 500
    assert d["ci"][0] <= d["statistic"] <= d["ci"][1]
