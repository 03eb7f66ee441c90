"""``docs/vdaf.md``'s walkthrough, executed: every shell command of it, in order, in an empty folder.

The ``bash`` blocks of the section "Walkthrough: from nothing to a collected result" are joined into one
script (``set -euo pipefail``: a failing command fails the test) and run with the installed ``fedstats``
and ``python`` first on the PATH, on free ports instead of 8443 (the leader) and 8444 (the helper). The
block marked ``# default: sqlite`` runs on SQLite; with PostgreSQL reachable, a second run uses the block
marked ``# alternative: postgresql`` instead (its two URLs pointed at two fresh schemas); the two run side
by side, each in its own folder with its own aggregators and devices. From ``fedstats enroll`` to
``fedstats admin collect`` with ``fedstats client run --prio3`` devices: the released result must be
printed as "estimate [interval] (privacy spent: ...)", kept on the leader, the task closed with one batch
of three accepted reports, and every device must have stopped by itself. Background processes are
stopped at the end, whatever happens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service_helpers import free_port
from walkthrough_helpers import ScriptRun, both_stores, check_store

DOC = Path(__file__).resolve().parents[2] / "docs" / "vdaf.md"
SECTION = "## Walkthrough: from nothing to a collected result"
TIMEOUT = 420.0  # the whole walkthrough, a loaded machine included (190 s at load average 24)


def walkthrough_blocks() -> list[str]:
    """The ``bash`` blocks of the walkthrough section, in order."""
    text = DOC.read_text()
    assert SECTION in text, f"{DOC} has no section {SECTION!r}"
    section = re.split(r"^## ", text.split(SECTION, 1)[1], flags=re.M)[0]
    return re.findall(r"^```bash\n(.*?)^```", section, flags=re.M | re.S)


def script_for(db: str, ports: tuple[int, int], pg_urls: tuple[str, str] | None = None) -> str:
    """The walkthrough as one script, for SQLite (``db == "sqlite"``) or PostgreSQL (``pg_urls``)."""
    lines = ["set -euo pipefail"]
    for block in walkthrough_blocks():
        first = block.lstrip().splitlines()[0] if block.strip() else ""
        if first.startswith("# default: sqlite") and db != "sqlite":
            continue
        if first.startswith("# alternative: postgresql"):
            if db != "postgresql":
                continue
            assert pg_urls is not None
            block = re.sub(r'export LEADER_DB="[^"]*"', f'export LEADER_DB="{pg_urls[0]}"', block)
            block = re.sub(r'export HELPER_DB="[^"]*"', f'export HELPER_DB="{pg_urls[1]}"', block)
        lines.append(block)
    return "\n".join(lines).replace("8443", str(ports[0])).replace("8444", str(ports[1]))


def test_the_walkthrough_uses_only_the_tools() -> None:
    text = "\n".join(walkthrough_blocks())
    for step in (
        "fedstats enroll init",
        "fedstats enroll analyst",
        "fedstats enroll client",
        "fedstats server add-operator",
        "--vdaf",
        "fedstats admin tasks sign",
        "fedstats admin prio3 provision",
        "fedstats client run --prio3",
        "fedstats admin collect",
        "fedstats admin prio3 list",
        "fedstats admin tasks list",
    ):
        assert step in text, step
    assert text.count("fedstats server --db") == 2  # the leader and the helper
    assert "/v1/vdaf" not in text  # no Prio3 route by hand: the commands only
    assert "verify_key" not in text and "peer_token" not in text  # no secret typed or kept


class _Walkthrough(ScriptRun):
    """One walkthrough started in the background (its own folder, ports and process group)."""

    def __init__(self, tmp_path: Path, db: str, pg_urls: tuple[str, ...] | None = None) -> None:
        urls = None if pg_urls is None else (pg_urls[0], pg_urls[1])
        script = script_for(db, (free_port(), free_port()), urls)
        unset = ("FEDSTATS_SERVER", "FEDSTATS_TOKEN", "FEDSTATS_CA", "FEDSTATS_HELPER_TOKEN")
        super().__init__(tmp_path, script, TIMEOUT, unset)

    def check(self) -> None:
        """Wait for the walkthrough (TIMEOUT from its start) and check what it left in its folder."""
        tmp_path = self.tmp_path
        self.finish()
        line = (tmp_path / "result.txt").read_text().splitlines()[0]
        assert re.fullmatch(
            r"-?[0-9.e+-]+ \[-?[0-9.e+-]+, -?[0-9.e+-]+\] \(privacy spent: epsilon 1, delta 0\)",
            line,
        ), line
        tid = (tmp_path / "task.id").read_text().strip()
        (task,) = [t for t in json.loads((tmp_path / "prio3.json").read_text())["items"]]
        assert task["task_id"] == tid and task["status"] == "closed", task
        assert task["result"]["epsilon"] == 1.0 and task["result"]["n_reports"] == 3
        assert [(b["uploaded"], b["accepted"], b["rejected"]) for b in task["batches"]] == [
            (3, 3, 0)
        ]
        listed = json.loads((tmp_path / "tasks.json").read_text())["items"]
        assert [(t["task_id"], t["route"], t["status"]) for t in listed] == [
            (tid, "prio3", "closed")
        ]
        for i in range(3):  # each device sent one report, with a few requests, and stopped itself
            text = (tmp_path / f"device-{i}.log").read_text()
            assert "reported round 0" in text, text
            got = re.search(r"prio3: (\d+) requests", text)
            assert got is not None and int(got[1]) <= 20, text


@pytest.fixture(scope="module")
def walkthroughs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both walkthroughs, started at once (each mostly waits); each test checks its own."""
    yield from both_stores(tmp_path_factory, "vdaf-walkthrough", _Walkthrough, pg_schemas=2)


def test_the_walkthrough_runs_on_sqlite(walkthroughs: dict[str, Any]) -> None:
    check_store(walkthroughs, "sqlite")


def test_the_walkthrough_runs_on_postgresql(walkthroughs: dict[str, Any]) -> None:
    check_store(walkthroughs, "postgresql")
