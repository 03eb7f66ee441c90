"""``fedstats calibrate gaussian`` and ``fedstats privacy explain``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from fedstats.cli.app import app
from fedstats.privacy.analysis import analytic_gaussian_delta, analytic_gaussian_sigma

runner = CliRunner()


def _json(args: list[str]) -> dict[str, Any]:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def test_calibrate_gaussian_json() -> None:
    out = _json(
        [
            "calibrate",
            "gaussian",
            "--epsilon",
            "20",
            "--delta",
            "1e-8",
            "--sensitivity",
            "2",
            "--json",
        ]
    )
    assert out["sigma"] == analytic_gaussian_sigma(epsilon=20.0, delta=1e-8, sensitivity=2.0)
    assert out["delta_achieved"] <= 1e-8
    assert out["delta_achieved"] == analytic_gaussian_delta(
        epsilon=20.0, sigma=out["sigma"], sensitivity=2.0
    )


def test_calibrate_gaussian_grid_and_human_output() -> None:
    out = _json(
        [
            "calibrate",
            "gaussian",
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--resolution-bits",
            "10",
            "--json",
        ]
    )
    assert out["discrete_delta_achieved"] <= 1e-5 and out["integer_sensitivity"] == 1024
    res = runner.invoke(app, ["calibrate", "gaussian", "--epsilon", "1", "--delta", "1e-5"])
    assert res.exit_code == 0 and "sigma" in res.stdout


def test_classical_refuses_then_warns() -> None:
    res = runner.invoke(
        app, ["calibrate", "gaussian", "--epsilon", "2", "--delta", "1e-5", "--classical"]
    )
    assert res.exit_code == 2
    assert "--epsilon" in res.stderr and "Traceback" not in res.output
    res = runner.invoke(
        app,
        [
            "calibrate",
            "gaussian",
            "--epsilon",
            "2",
            "--delta",
            "1e-5",
            "--classical",
            "--allow-large-epsilon",
            "--json",
        ],
    )
    assert res.exit_code == 0 and "warning" in res.stderr
    assert json.loads(res.stdout)["method"] == "classical"


def test_invalid_calibration_is_one_line_error() -> None:
    res = runner.invoke(app, ["calibrate", "gaussian", "--epsilon", "1", "--delta", "1.5"])
    assert res.exit_code == 2 and res.stderr.startswith("error: --delta=1.5")


@pytest.mark.parametrize(
    ("args", "eps"),
    [
        (["rr", "--epsilon", "1.5"], 1.5),
        (["grr", "--epsilon", "2", "--k", "9"], 2.0),
        (["laplace", "--epsilon", "0.5"], 0.5),
        (["gaussian", "--epsilon", "1", "--delta", "1e-6"], 1.0),
        (["harmony", "--epsilon", "1"], 1.0),
        (["duchi", "--epsilon", "1"], 1.0),
        (["piecewise", "--epsilon", "3"], 3.0),
    ],
)
def test_explain_reports_computed_loss(args: list[str], eps: float) -> None:
    out = _json(["privacy", "explain", *args, "--json"])
    assert out["epsilon"] == pytest.approx(eps, rel=1e-9)
    assert "release_grid" in out and out["explanation"]


def test_explain_dithering_and_errors() -> None:
    out = _json(["privacy", "explain", "dithering", "--bit-depth", "2", "--json"])
    assert out["epsilon"] is None and out["non_finite"]["epsilon"] == "inf"  # strict JSON
    assert "NOT differentially private" in out["explanation"]
    res = runner.invoke(app, ["privacy", "explain", "grr", "--epsilon", "1"])
    assert res.exit_code == 2 and "--k" in res.stderr
    res = runner.invoke(app, ["privacy", "explain", "nope", "--epsilon", "1"])
    assert res.exit_code == 2
    res = runner.invoke(
        app, ["privacy", "explain", "laplace", "--epsilon", "1", "--resolution-bits", "0"]
    )
    assert res.exit_code == 0 and "simulation only" in res.stdout
