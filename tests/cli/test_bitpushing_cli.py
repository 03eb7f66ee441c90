"""``fedstats mean`` / ``fedstats variance``: JSON keys, simulation truth, and the one-line error convention."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from fedstats.cli.app import app

runner = CliRunner()


def _json(args: list[str]) -> Any:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _error(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert res.stdout.strip() == ""
    return lines[0]


@pytest.mark.parametrize(
    ("protocol", "eps"),
    [("adaptive", None), ("adaptive", "2"), ("weighted", None), ("piecewise", "4")],
)
def test_mean_json_on_adult(protocol: str, eps: str | None) -> None:
    args = [
        "--seed",
        "1",
        "mean",
        "adult",
        "--column",
        "age",
        "--high",
        "127",
        "-p",
        protocol,
        "--json",
    ]
    args += ["--epsilon", eps] if eps else ["--no-privacy"]
    d = _json(args)
    for key in ("estimate", "ci", "bits_per_client", "truth", "error", "standard_error", "epsilon"):
        assert key in d
    assert d["truth"] == pytest.approx(38.58164675532078)  # Adult train split ages
    assert d["error"] == pytest.approx(d["estimate"] - d["truth"])
    assert abs(d["error"]) < 6 * d["standard_error"]
    assert d["ci"][0] < d["estimate"] < d["ci"][1]
    assert d["bits_per_client"] == 1.0 and d["n_clients"] == 32561
    assert d["epsilon"] == (float(eps) if eps else None)


def test_variance_with_resampled_clients_and_csv(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 1000, 5000)
    p = tmp_path / "v.csv"
    p.write_text("x\n" + "\n".join(map(str, x)) + "\n")
    d = _json(
        [
            "--seed",
            "2",
            "variance",
            str(p),
            "-c",
            "x",
            "--bit-depth",
            "10",
            "--clients",
            "200000",
            "--no-privacy",
            "--json",
        ]
    )
    assert d["n_clients"] == 200_000 and d["analysis"] == "bitpushing.variance"
    assert abs(d["error"]) < 6 * d["standard_error"]
    assert d["truth"] == pytest.approx(float(np.var(x)), rel=0.02)
    d2 = _json(["--seed", "2", "mean", str(p), "-c", "x", "--bit-depth", "10", "-s", "3", "--no-privacy",
                "--json"])  # fmt: skip
    assert d2["bits_per_client"] == 3.0


def test_bad_input_exit_code_2_one_line(tmp_path: Path) -> None:
    assert "outside the declared range" in _error(
        ["mean", "adult", "-c", "age", "--high", "50", "--out-of-range", "refuse", "--no-privacy"]
    )
    assert "--bit-depth" in _error(
        ["mean", "adult", "-c", "age", "--bit-depth", "0", "--no-privacy"]
    )
    assert "--epsilon" in _error(["mean", "adult", "-c", "age", "--high", "127", "--epsilon", "0"])
    assert "--epsilon" in _error(["mean", "adult", "-c", "age", "--high", "127", "--epsilon", "-2"])
    assert "--high" in _error(["mean", "adult", "-c", "age", "--no-privacy"])
    assert "--protocol" in _error(
        ["mean", "adult", "-c", "age", "--high", "127", "-p", "median", "--no-privacy"]
    )
    assert "--column" in _error(["mean", "adult", "-c", "nope", "--high", "127", "--no-privacy"])
    empty = tmp_path / "e.csv"
    empty.write_text("x\n")
    assert "error" in _error(["mean", str(empty), "-c", "x", "--high", "10", "--no-privacy"])
    assert "epsilon" in _error(
        ["mean", "adult", "-c", "age", "--high", "127", "-p", "duchi", "--no-privacy"]
    )
    # options the chosen protocol does not use are refused, named by their flag
    base = ["mean", "adult", "-c", "age", "--high", "127", "--epsilon", "1"]
    assert "--round1-fraction" in _error([*base, "-p", "weighted", "--round1-fraction", "0.5"])
    assert "--allocation" in _error([*base, "-p", "duchi", "--allocation", "random"])
    assert "--squash-threshold" in _error(["mean", "adult", "-c", "age", "--high", "127",
                                           "--squash-threshold", "0.15", "--no-privacy"])  # fmt: skip
    assert "--protocol" in _error(
        ["variance", "adult", "-c", "age", "--high", "127", "-p", "x", "--no-privacy"]
    )
    # a privacy choice is required, and only one
    for kind in ("mean", "variance"):
        msg = _error([kind, "adult", "-c", "age", "--high", "127"])
        assert "--epsilon" in msg and "--no-privacy" in msg
        msg = _error(
            [kind, "adult", "-c", "age", "--high", "127", "--epsilon", "1", "--no-privacy"]
        )
        assert "--no-privacy" in msg


def test_estimator_option_and_clipping_warning() -> None:
    base = [
        "--seed",
        "3",
        "mean",
        "adult",
        "-c",
        "age",
        "--high",
        "127",
        "--epsilon",
        "1",
        "--json",
        "-p",
        "adaptive",
    ]
    assert _json(base)["details"]["estimator"] == "split"  # the unbiased default
    assert _json([*base, "--estimator", "pooled"])["details"]["estimator"] == "pooled"
    assert "--estimator" in _error([*base, "--estimator", "mixed"])
    assert "--estimator" in _error([*base, "-p", "weighted", "--estimator", "pooled"])
    # a variance estimate below 0 is released unbiased (negative), with a warning naming the clipped
    # value, which stays in the details with its interval (not [0, 0])
    for seed in range(20):
        d = _json(["--seed", str(seed), "--json", "variance", "adult", "-c", "capital_gain",
                   "--high", "99999", "--clients", "300", "--epsilon", "0.5"])  # fmt: skip
        if d["estimate"] < 0:
            break
    assert d["estimate"] < 0 and d["details"]["clipped_estimate"] == 0.0
    assert d["ci"][0] < d["estimate"] < d["ci"][1]
    assert d["details"]["clipped_ci"][0] == 0.0 and d["details"]["clipped_ci"][1] > 0.0
    assert any("outside the parameter space" in w for w in d["details"]["warnings"])
