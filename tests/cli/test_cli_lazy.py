"""The top-level command loads only the module of the command that runs (start-up time, issue 16)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import typer

from fedstats.cli._commands import COMMANDS as _COMMANDS


def test_the_command_table_matches_what_each_module_registers() -> None:
    for module in set(_COMMANDS.values()):
        sub = typer.Typer()
        importlib.import_module(module).register(sub)
        registered = set(typer.main.get_group(sub).commands)
        assert registered == {c for c, m in _COMMANDS.items() if m == module}, module


def test_a_command_imports_only_its_own_module() -> None:
    code = (
        "import json, sys\n"
        "from fedstats.cli.app import app\n"
        "code = app(['--json', 'datasets'], standalone_mode=False)\n"
        "mods = sorted(m for m in sys.modules if m.startswith('fedstats.'))\n"
        "print(json.dumps({'code': code, 'modules': mods}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["code"] in (0, None)  # the command returned normally
    mods = set(got["modules"])
    assert "fedstats.cli.datasets" in mods
    for other in (
        "fedstats.cli.mean",
        "fedstats.cli.server",
        "fedstats.service",
        "fedstats.secagg",
    ):
        assert other not in mods, other
