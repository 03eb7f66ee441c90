"""``fedstats secagg simulate`` and ``fedstats secagg params``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from fedstats.cli.app import app
from fedstats.secagg import find_parameters

runner = CliRunner()


def _json(args: list[str]) -> dict[str, Any]:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


@pytest.mark.parametrize(
    "stage", ["advertise", "share", "masked_input", "consistency", "unmask", "random"]
)
def test_simulate_is_exact_with_dropouts(stage: str) -> None:
    data = _json(
        [
            "secagg",
            "simulate",
            "--clients",
            "30",
            "--length",
            "100",
            "--dropout",
            "0.1",
            "--dropout-stage",
            stage,
            "--bits",
            "32",
            "--json",
            "--seed",
            "1",
        ]
    )
    assert data["correct"] is True
    assert data["clients"] == 30 and data["bits"] == 32
    assert sum(data["dropped"].values()) == 3
    expected_in = 27 if stage in ("advertise", "share", "masked_input") else None
    if expected_in is not None:
        assert data["included"] == expected_in
    for key in ("client_seconds", "server_seconds", "bytes_per_client", "k", "t"):
        assert data[key] > 0
    assert data["bytes_per_client"] > 100 * 4  # the masked vector at the modulus width
    assert data["threat_model"] == "malicious" and "inconsistent_dropout_claims" in data["stops"]
    assert set(data["bytes_per_client_by_stage"]) == {
        "advertise",
        "share",
        "masked_input",
        "consistency",
        "unmask",
    }


def test_simulate_without_json_and_overrides() -> None:
    res = runner.invoke(
        app, ["secagg", "simulate", "--clients", "6", "--length", "3", "--k", "5", "--t", "3"]
    )
    assert res.exit_code == 0, res.output
    assert "correct" in res.stdout and "True" in res.stdout


def test_simulate_errors_are_one_line() -> None:
    res = runner.invoke(
        app, ["secagg", "simulate", "--clients", "10", "--length", "3", "--dropout", "0.5"]
    )
    assert res.exit_code == 2
    assert res.stderr.startswith("error:") and len(res.stderr.strip().splitlines()) == 1
    res = runner.invoke(
        app, ["secagg", "simulate", "--clients", "10", "--length", "3", "--bits", "8"]
    )
    assert res.exit_code == 2 and "--bits" in res.stderr
    res = runner.invoke(app, ["secagg", "simulate", "--clients", "10", "--length", "3", "--k", "4"])
    assert res.exit_code == 2
    # (k, t) without security against a malicious server are refused, naming the option
    weak = ["secagg", "simulate", "--clients", "10", "--length", "3", "--k", "2", "--t", "1"]
    res = runner.invoke(app, weak)
    assert res.exit_code == 2 and res.stderr.startswith("error: --t=1")
    res = runner.invoke(app, [*weak, "--threat-model", "semi-honest", "--json"])
    assert res.exit_code == 0, res.output
    assert "inconsistent_dropout_claims" not in json.loads(res.stdout)["stops"]


def test_params_command_matches_finder() -> None:
    data = _json(["secagg", "params", "--clients", "1000", "--json"])
    p = find_parameters(1000, corrupt_fraction=0.05, dropout_rate=0.1)
    assert (data["k"], data["t"], data["min_survivors"]) == (p.k, p.t, p.min_survivors)
    assert data["log2_security_failure"] <= -40
    semi = _json(
        ["secagg", "params", "--clients", "1000", "--threat-model", "semi-malicious", "--json"]
    )
    assert (semi["k"], semi["t"]) == (p.k, p.t) and set(semi["stops"]) < set(data["stops"])
