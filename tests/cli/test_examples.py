"""The shipped example files (built from Adult), ``fedstats.datasets.example`` and ``fedstats examples``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fedstats import __version__
from fedstats.cli.app import app
from fedstats.datasets import EXAMPLES, example, example_names, load_adult
from fedstats.datasets._build_examples import (
    N_TABLE_CLIENTS,
    VECTOR_STRIDE,
    build_client_tables,
    fit_logistic,
    write_examples,
)
from fedstats.errors import ParameterError

runner = CliRunner()


@pytest.fixture(scope="module")
def adult_test() -> pd.DataFrame:
    return load_adult("test")


def test_every_example_matches_its_recorded_size_and_sha256() -> None:
    assert example_names() == ("predictions.csv", "client_tables.csv", "client_vectors.csv")
    for name, info in EXAMPLES.items():
        path = example(name)
        data = path.read_bytes()
        assert len(data) == info.size
        assert hashlib.sha256(data).hexdigest() == info.sha256
        assert example(name.removesuffix(".csv")) == path  # the suffix may be left off


@given(st.text(min_size=1, max_size=30))
@settings(max_examples=50, deadline=None)
def test_unknown_example_name_names_the_parameter_and_the_choices(name: str) -> None:
    if name in EXAMPLES or f"{name}.csv" in EXAMPLES:
        return
    with pytest.raises(ParameterError) as err:
        example(name)
    assert err.value.name == "name" and "predictions.csv" in err.value.accepted


def test_predictions_are_the_test_split_with_a_consistent_correctness(
    adult_test: pd.DataFrame,
) -> None:
    df = pd.read_csv(example("predictions"))
    assert list(df.columns) == ["sex", "race", "correct", "confidence"]
    assert df.shape[0] == adult_test.shape[0] == 16_281
    assert (df["sex"].to_numpy() == adult_test["sex"].to_numpy()).all()
    assert (df["race"].to_numpy() == adult_test["race"].to_numpy()).all()
    assert set(df["correct"].unique()) <= {0, 1}
    conf = df["confidence"].to_numpy()
    assert ((conf >= 0) & (conf <= 1)).all()
    # correct iff the model gave the true class probability >= 1/2 (4-decimal rounding at the boundary)
    assert (conf[df["correct"].to_numpy() == 1] >= 0.5).all()
    assert (conf[df["correct"].to_numpy() == 0] <= 0.5).all()
    # a real model, not a constant: far better than always predicting "<=50K" (76.4% of the test split)
    majority = float((adult_test["income"] == "<=50K").mean())
    assert df["correct"].mean() > majority + 0.05


def test_client_tables_hold_every_adult_row_once() -> None:
    adult = load_adult("all")
    df = pd.read_csv(example("client_tables"))
    assert list(df.columns) == ["client", "education", "sex", "income", "count"]
    assert int(df["count"].sum()) == adult.shape[0] and (df["count"] >= 1).all()
    assert set(df["client"].unique()) == set(range(N_TABLE_CLIENTS))
    got = df.groupby(["education", "sex", "income"])["count"].sum().sort_index()
    want = adult.groupby(["education", "sex", "income"]).size().sort_index()
    pd.testing.assert_series_equal(got, want, check_names=False)
    # client c holds the rows i with i mod 50 == c
    per_client = df.groupby("client")["count"].sum().to_numpy()
    assert (per_client == np.bincount(np.arange(adult.shape[0]) % N_TABLE_CLIENTS)).all()
    pd.testing.assert_frame_equal(build_client_tables(adult), df)


def test_client_vectors_are_in_the_unit_cube_with_the_income_label(
    adult_test: pd.DataFrame,
) -> None:
    df = pd.read_csv(example("client_vectors"))
    rows = adult_test.iloc[::VECTOR_STRIDE]
    assert df.shape == (rows.shape[0], 5)
    x = df.drop(columns="label").to_numpy()
    assert ((x >= 0) & (x <= 1)).all()
    assert (df["label"].to_numpy() == (rows["income"] == ">50K").to_numpy()).all()
    assert np.allclose(df["age"] * 73 + 17, rows["age"].to_numpy(), atol=0.01)


def test_rebuilding_gives_the_shipped_files(tmp_path: Path) -> None:
    written = write_examples(tmp_path)
    assert set(written) == set(EXAMPLES)
    for name in ("client_tables.csv", "client_vectors.csv"):  # integers and fixed scalings: exact
        assert (tmp_path / name).read_bytes() == example(name).read_bytes()
    new, old = pd.read_csv(tmp_path / "predictions.csv"), pd.read_csv(example("predictions"))
    # the model's probabilities may differ in the last bits on another platform, nothing more
    assert (new["correct"] == old["correct"]).mean() > 0.999
    assert np.max(np.abs(new["confidence"] - old["confidence"])) <= 2e-4


def test_fit_logistic_reaches_the_penalised_optimum() -> None:
    rng = np.random.default_rng(3)
    x = np.column_stack([np.ones(500), rng.normal(size=(500, 3))])
    y = (rng.random(500) < 1 / (1 + np.exp(-(x @ [0.5, 1.0, -2.0, 0.0])))).astype(float)
    w = fit_logistic(x, y, penalty=1.0)
    p = 1 / (1 + np.exp(-(x @ w)))
    grad = x.T @ (y - p) - np.r_[0.0, w[1:]]
    assert np.max(np.abs(grad)) < 1e-8
    assert np.allclose(fit_logistic(x, y, penalty=1.0), w, atol=0, rtol=0)  # deterministic


def test_cli_copies_every_file_and_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "new" / "dir"
    res = runner.invoke(app, ["examples", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    files = json.loads(res.stdout)["files"]
    assert [f["name"] for f in files] == list(EXAMPLES)
    for name in EXAMPLES:
        assert (out / name).read_bytes() == example(name).read_bytes()
    (out / "predictions.csv").write_text("mine\n")
    res = runner.invoke(app, ["examples", "--out", str(out)])
    assert res.exit_code == 2
    assert res.stderr.startswith("error: --out=") and "--force" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert (out / "predictions.csv").read_text() == "mine\n"  # untouched
    res = runner.invoke(app, ["examples", "--out", str(out), "--force", "--json"])
    assert res.exit_code == 0, res.output
    assert [f["replaced"] for f in json.loads(res.stdout)["files"]] == [True, True, True]
    assert (out / "predictions.csv").read_bytes() == example("predictions").read_bytes()
    assert sorted(p.name for p in out.iterdir()) == sorted(EXAMPLES)  # no temporary files left


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--out", "{file}"], "--out"),  # a file, not a folder
        (["--out", "{file}/sub"], "--out"),  # cannot be created
        (["--out", "/dev/null"], "--out"),
        (["--force"], "--force"),  # --force without --out
    ],
)
def test_cli_bad_output_is_one_error_line_and_leaves_nothing(
    tmp_path: Path, args: list[str], option: str
) -> None:
    target = tmp_path / "a_file"
    target.write_text("x")
    argv = ["examples", *(a.format(file=target) for a in args)]
    res = runner.invoke(app, argv)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: {option}=") and len(res.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_cli_lists_the_files_in_the_package() -> None:
    res = runner.invoke(app, ["--json", "examples"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["out"] is None
    assert [Path(f["path"]) for f in data["files"]] == [example(n) for n in EXAMPLES]


@pytest.mark.parametrize(
    "argv", [["--version", "--json"], ["--json", "--version"], ["--version", "--json", "demo"]]
)
def test_version_json_is_one_object(argv: list[str]) -> None:
    res = runner.invoke(app, argv)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"version": __version__}


def test_version_text() -> None:
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout == f"fedstats {__version__}\n"


def test_cli_failure_midway_removes_the_files_it_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedstats.cli.examples as cli_examples

    calls: list[Path] = []
    real = cli_examples.atomic_write_bytes

    def fail_second(path: Path | str, data: bytes) -> None:
        calls.append(Path(path))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(cli_examples, "atomic_write_bytes", fail_second)
    (tmp_path / "keep.txt").write_text("mine")
    res = runner.invoke(app, ["examples", "--out", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert "No space left on device" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert len(calls) == 2  # the first file was written, then removed again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_getting_started_python_blocks_run(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    page = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) >= 2
    for code in blocks:
        exec(compile(code, str(page), "exec"), {"__name__": "getting_started"})
        assert capsys.readouterr().out.strip()  # each block prints its result
