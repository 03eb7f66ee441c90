"""The simulating commands run on every route: same seed, same JSON estimate on serial, process and dask.

Each command is run with ``--backend serial``, ``--backend process --workers 2`` and ``--backend dask
--workers 2`` (a LocalCluster of 2 worker processes, started and shut down by the command), with several
shards per round (``--shard-size`` of one block); the JSON outputs must be identical apart from the
route's name (``make test-fast`` runs only the gap on dask: see ``OTHER_ROUTES``). A bad ``--backend`` (or a ``--scheduler`` where it does not apply) is one error line and
exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from fedstats.cli.app import app

runner = CliRunner()
PROCESS = ["--backend", "process", "--workers", "2"]
DASK = ["--backend", "dask", "--workers", "2"]
ROUTES = (PROCESS, DASK)
# every command opens its route through the same code (cli/_common.open_backend): the gap runs on dask in
# make test-fast, the other commands only in make test (a LocalCluster starts for each, 2-4 s); the
# process pool (plain pickle, stricter than dask's cloudpickle) runs every command's rounds in both
OTHER_ROUTES = [
    pytest.param(PROCESS, id="process"),
    pytest.param(DASK, id="dask", marks=pytest.mark.slow),
]
SHARD = ["--shard-size", "65536"]  # one engine block per shard: several tasks per round


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    rng = np.random.default_rng(11)
    root = tmp_path_factory.mktemp("scale_cli")
    g = rng.choice(["A", "B"], 60)
    gap = pd.DataFrame(
        {"group": g, "rate": np.where(g == "A", 0.8, 0.6) + rng.uniform(-0.1, 0.1, 60)}
    )
    mean = pd.DataFrame({"v": rng.integers(0, 16, 80)})
    x = rng.integers(0, 3, 400)
    chi = pd.DataFrame({"x": x, "y": (x + rng.integers(0, 2, 400)) % 3})
    out = {}
    for name, df in (("gap", gap), ("mean", mean), ("chi2", chi)):
        out[name] = root / f"{name}.csv"
        df.to_csv(out[name], index=False)
    return out


def _run(args: list[str]) -> dict[str, Any]:
    res = runner.invoke(app, ["--seed", "7", "--quiet", *args, "--json"])
    assert res.exit_code == 0, res.output
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def _without_route(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k not in ("route", "backend", "retries")}


def _check_routes(args: list[str], key: str, routes: tuple[list[str], ...] = ROUTES) -> None:
    serial = _run([*args, "--backend", "serial", *SHARD])
    assert isinstance(serial[key], float)
    assert serial["backend"] == "serial" and serial["retries"] == 0
    for route in routes:
        other = _run([*args, *route, *SHARD])
        assert other[key] == serial[key], route
        assert other["backend"] == route[1] and other["retries"] == 0, route
        assert _without_route(other) == _without_route(serial), route


def test_gap_same_estimate_on_every_route(tables: dict[str, Path]) -> None:
    args = ["gap", str(tables["gap"]), "--group-column", "group", "--value-column", "rate"]
    _check_routes([*args, "--clients", "300000", "--epsilon", "1"], "gap")


@pytest.mark.parametrize("route", OTHER_ROUTES)
def test_mean_same_estimate_on_every_route(tables: dict[str, Path], route: list[str]) -> None:
    args = ["mean", str(tables["mean"]), "--column", "v", "--low", "0", "--high", "15"]
    _check_routes([*args, "--clients", "300000", "--epsilon", "1"], "estimate", (route,))


@pytest.mark.parametrize("route", OTHER_ROUTES)
def test_chi2_same_statistic_on_every_route(tables: dict[str, Path], route: list[str]) -> None:
    args = ["chi2", str(tables["chi2"]), "--x", "x", "--y", "y", "--clients", "200"]
    _check_routes(args, "statistic", (route,))


def test_bad_route_options_are_one_line_and_exit_2(tables: dict[str, Path]) -> None:
    args = ["gap", str(tables["gap"]), "--group-column", "group", "--value-column", "rate"]
    bad = (
        (["--backend", "gpu"], "--backend"),
        (["--backend", "process", "--scheduler", "tcp://127.0.0.1:1"], "--scheduler"),
        (["--backend", "dask", "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--workers"),
    )
    for options, name in bad:
        res = runner.invoke(app, [*args, "--epsilon", "1", "--clients", "1000", *options])
        assert res.exit_code == 2, options
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and name in lines[0], lines
        assert res.stdout == ""
