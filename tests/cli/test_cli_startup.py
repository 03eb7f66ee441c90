"""CLI start-up (issue 28): `--version` and `--help` load no heavy library, whatever the machine's speed.

The times are in benchmarks/cli_startup.py; these tests guard the property behind them: which modules a
fresh interpreter has loaded after the command, and that the fast paths answer exactly as the full
typer application does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperCommand
from typer.testing import CliRunner

from fedstats import __version__
from fedstats.cli._commands import COMMANDS as _COMMANDS
from fedstats.cli._commands import SUMMARIES as _SUMMARIES
from fedstats.cli.app import app, main

HEAVY = ("typer", "rich", "numpy", "pandas", "pyarrow", "scipy", "matplotlib", "pydantic")

SCRIPT = "import sys; from fedstats.cli.app import main; sys.argv[0] = 'fedstats'; main()"


def _loaded_after(code: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; what it printed and which top-level packages it loaded."""
    probe = (
        "import atexit, json, sys\n"
        "def _report():\n"
        "    mods = sorted({m.split('.')[0] for m in sys.modules} | {m for m in sys.modules if "
        "m.startswith('fedstats.')})\n"
        "    sys.stderr.write('\\nMODULES ' + json.dumps(mods) + '\\n')\n"
        "atexit.register(_report)\n" + code
    )
    res = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    line = [x for x in res.stderr.splitlines() if x.startswith("MODULES ")][-1]
    return {
        "code": res.returncode,
        "stdout": res.stdout,
        "stderr": res.stderr.replace(line, "").strip(),
        "modules": set(json.loads(line.removeprefix("MODULES "))),
    }


def _script(*args: str) -> str:
    return f"sys_argv = {list(args)!r}\nimport sys; sys.argv[1:] = sys_argv\n{SCRIPT}\n"


@pytest.mark.parametrize("args", [["--version"], ["--version", "--json"], ["-q", "--version"]])
def test_version_loads_no_heavy_library(args: list[str]) -> None:
    got = _loaded_after(_script(*args))
    assert got["code"] == 0, got["stderr"]
    assert not got["modules"] & set(HEAVY), got["modules"] & set(HEAVY)
    assert not {m for m in got["modules"] if m.startswith("fedstats.cli.")} - {"fedstats.cli.app"}
    if "--json" in args:
        assert json.loads(got["stdout"]) == {"version": __version__}
    else:
        assert got["stdout"] == f"fedstats {__version__}\n"


def test_python_dash_m_fedstats_is_the_same_light_entry_point() -> None:
    got = _loaded_after(
        "import runpy, sys\nsys.argv[1:] = ['--version']\nrunpy.run_module('fedstats', run_name='__main__')\n"
    )
    assert got["code"] == 0, got["stderr"]
    assert got["stdout"] == f"fedstats {__version__}\n"
    assert not got["modules"] & set(HEAVY), got["modules"] & set(HEAVY)


def test_help_loads_typer_only_and_no_command_module() -> None:
    got = _loaded_after(_script("--help"))
    assert got["code"] == 0, got["stderr"]
    assert got["modules"] & set(HEAVY) == {"typer"}
    for module in set(_COMMANDS.values()):
        assert module not in got["modules"], module
    listed = [line.split()[0] for line in got["stdout"].split("Commands:")[1].splitlines() if line]
    assert listed == list(_COMMANDS)


def test_importing_the_cli_entry_point_loads_neither_typer_nor_pandas() -> None:
    got = _loaded_after("import fedstats.cli.app")
    assert not got["modules"] & set(HEAVY), got["modules"] & set(HEAVY)


def test_a_command_help_loads_neither_pandas_nor_its_analysis() -> None:
    got = _loaded_after(_script("mean", "--help"))
    assert got["code"] == 0, got["stderr"]
    assert "--clients" in got["stdout"]
    assert not got["modules"] & {"pandas", "pyarrow", "scipy", "numpy", "rich", "matplotlib"}
    assert "fedstats.analyses.bitpushing.api" not in got["modules"]


def test_the_aggregate_mean_of_adult_loads_neither_pandas_nor_scipy() -> None:
    """The 10^12-client mean of the benchmark reads Adult's column and draws its sums without them."""
    got = _loaded_after(
        _script(
            *"--quiet mean adult --column age --high 127 --clients 1000000000000 --epsilon 1 "
            "--backend aggregate --json".split()
        )
    )
    assert got["code"] == 0, got["stderr"]
    assert json.loads(got["stdout"])["n_clients"] == 10**12
    assert not got["modules"] & {"pandas", "pyarrow", "scipy", "matplotlib"}


@pytest.mark.parametrize(
    "module",
    [
        "fedstats.cli._tables",
        "fedstats.cli.mean",
        "fedstats.cli.chi2",
        "fedstats.cli.entropy",
        "fedstats.cli.gap",
        "fedstats.cli.privacy",
    ],
)
def test_a_command_module_loads_table_and_plot_libraries_only_when_it_runs(module: str) -> None:
    """pandas and pyarrow when a table is read, scipy when it computes, matplotlib when it plots."""
    got = _loaded_after(f"import {module}")
    assert not got["modules"] & {"pandas", "pyarrow", "scipy", "matplotlib"}, module


def test_the_summaries_are_the_first_sentence_each_module_registers() -> None:
    """The static table cannot drift from the commands' own help, at any terminal width."""
    assert list(_SUMMARIES) == list(_COMMANDS)
    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    for name in _COMMANDS:
        real = group.get_command(ctx, name)
        assert real is not None and not real.hidden, name
        stand_in = TyperCommand(name, help=_SUMMARIES[name], rich_markup_mode=None)
        for limit in (20, 45, 63, 80, 200):
            assert stand_in.get_short_help_str(limit) == real.get_short_help_str(limit), (
                name,
                limit,
            )


@pytest.mark.parametrize("columns", ["60", "80", "200"])
def test_lazy_help_is_the_help_of_the_fully_loaded_app(
    columns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    lazy = typer.main.get_command(app)  # a fresh group: no command loaded yet
    with typer.Context(lazy, info_name="fedstats") as ctx:
        assert not lazy.commands  # type: ignore[attr-defined]
        text = lazy.get_help(ctx)
        assert not lazy.commands  # type: ignore[attr-defined]
    eager = typer.main.get_command(app)
    with typer.Context(eager, info_name="fedstats") as ctx:
        for name in _COMMANDS:
            eager.get_command(ctx, name)  # type: ignore[attr-defined]
        assert set(eager.commands) == set(_COMMANDS)  # type: ignore[attr-defined]
        assert eager.get_help(ctx) == text


@pytest.mark.parametrize("args", [["--version"], ["--json", "--version"], ["--version", "--json"]])
def test_the_fast_version_answers_as_the_typer_application(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 0
    fast = capsys.readouterr().out
    full = CliRunner().invoke(app, args)
    assert full.exit_code == 0 and full.stdout == fast


@pytest.mark.parametrize(
    "args", [["--version", "--seed", "-1"], ["--versio"], ["--seed", "x", "--version"], ["nope"]]
)
def test_other_global_options_go_through_typer_with_one_error_line(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    full = CliRunner().invoke(app, args)
    out = capsys.readouterr()
    assert exit_info.value.code == full.exit_code
    if full.exit_code == 2:
        assert out.err.startswith("error: ") and len(out.err.strip().splitlines()) == 1
    else:  # --version comes before the bad option: click answers it first, as before
        assert out.out == full.stdout


def test_version_with_standard_output_closed_is_one_error_line() -> None:
    """The CLI's convention (exit 2, one ``error:`` line), not a traceback, when stdout is shut."""
    res = subprocess.run(
        [sys.executable, "-c", "import os; os.close(1)\n" + SCRIPT, "--version"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot write the output"), lines


def test_a_device_reading_a_small_integer_csv_loads_no_pandas(tmp_path: Path) -> None:
    """``fedstats client run`` on a table of category codes starts without pandas (a quarter of its
    start-up; the Adult test starts 100 of them)."""
    from fedstats.wire.enrollment import init_authority, issue_identity

    init_authority(tmp_path / "auth")
    issue_identity(tmp_path / "auth", "d0", "default", tmp_path / "d0.json")
    (tmp_path / "d0.csv").write_text("x,y\n1,0\n15,1\n")
    got = _loaded_after(
        _script(
            *f"client run --server https://127.0.0.1:9 --identity {tmp_path / 'd0.json'} "
            f"--data {tmp_path / 'd0.csv'} --connect-timeout 0.1 --allow-non-private".split()
        )
    )
    assert got["code"] == 1 and "connection refused" in got["stderr"], got["stderr"]
    assert "fedstats.client" in got["modules"]
    assert not got["modules"] & {"pandas", "pyarrow", "scipy"}


@pytest.mark.parametrize(
    ("text", "fast"),
    [
        ("x,y\n1,2\n3,4\n", True),
        ("x,y\r\n1,2\r\n-3,004\r\n", True),
        ('x,"y"\n"1",2\n3,4\n', True),
        ("x[0],x[1],g\n1,2,0\n3,4,1\n", True),
        ("a\n-0\n123456789012345678\n", True),
        ("0,1\n5,6\n", True),
        ("a,b\n1,2.5\n", False),
        ("a,b\n1,\n", False),
        ("a,b\n1,2\n\n3,4\n", False),
        ("a,a\n1,2\n", False),
        ("a, b\n1,2\n", False),
        ("\ufeffa,b\n1,2\n", False),
        ("a\nNA\n", False),
        ("a\n+1\n", False),
        ("a\n 1\n", False),
        ("a,b\n1,2,3\n", False),
        ("a\n1234567890123456789\n", False),
    ],
)
def test_a_device_reads_an_integer_csv_without_pandas_exactly_as_pandas_does(
    tmp_path: Path, text: str, fast: bool
) -> None:
    """The columns (names, dtypes, values) are pandas' own; any other file is left to pandas."""
    import numpy as np
    import pandas as pd

    from fedstats.client import _integer_csv, load_data

    path = tmp_path / "data.csv"
    path.write_text(text, encoding="utf-8")
    plain = _integer_csv(path)
    assert (plain is not None) == fast
    frame = pd.read_csv(path)
    expected = {str(c): frame[c].to_numpy() for c in frame.columns}
    if plain is not None:
        assert list(plain) == list(expected)
        for name, column in expected.items():
            assert plain[name].dtype == column.dtype and np.array_equal(plain[name], column)
    got = load_data(path)
    if "x[0]" not in expected:
        assert list(got) == list(expected)
        assert all(np.array_equal(got[c], expected[c], equal_nan=True) for c in expected)
