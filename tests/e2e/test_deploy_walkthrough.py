"""``docs/deploy.md``'s walkthrough, executed: every shell command of it, in order, in an empty folder.

The ``bash`` blocks of the section "Walkthrough: from nothing to a released result" are joined into one
script (``set -euo pipefail``: a failing command fails the test) and run with the installed ``fedstats``
and ``python`` first on the PATH, on a free port instead of 8443. The block marked ``# default: sqlite``
runs on SQLite; with PostgreSQL reachable, a second run uses the block marked ``# alternative:
postgresql`` instead (its URL pointed at a fresh schema); the two run side by side, each in its own
folder, on its own port, with its own server and devices. Every run the walkthrough starts must be
released (``done``, with a result), one per registered analysis, and the ledger must hold the private
ones' charges; the task of step 10, on a category column holding text, must be refused by every device
with the reason (``data_invalid``, naming the column) in ``fedstats admin runs show``. Background processes (server, devices) are stopped at the end, whatever happens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fedstats.wire.registry import ANALYSES
from service_helpers import free_port
from walkthrough_helpers import ScriptRun, both_stores, check_store

DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
SECTION = "## Walkthrough: from nothing to a released result"
TIMEOUT = (
    420.0  # the whole walkthrough, a loaded machine included; it takes about a minute when idle
)


def walkthrough_blocks() -> list[str]:
    """The ``bash`` blocks of the walkthrough section, in order."""
    text = DOC.read_text()
    assert SECTION in text, f"{DOC} has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1]
    section = re.split(r"^## ", section, flags=re.M)[0]
    return re.findall(r"^```bash\n(.*?)^```", section, flags=re.M | re.S)


def script_for(db: str, port: int, pg_url: str | None = None) -> str:
    """The walkthrough as one script, for SQLite (``db == "sqlite"``) or PostgreSQL (``pg_url``)."""
    lines = ["set -euo pipefail"]
    for block in walkthrough_blocks():
        first = block.lstrip().splitlines()[0] if block.strip() else ""
        if first.startswith("# default: sqlite") and db != "sqlite":
            continue
        if first.startswith("# alternative: postgresql"):
            if db != "postgresql":
                continue
            assert pg_url is not None
            block = re.sub(r'export DB="[^"]*"', f'export DB="{pg_url}"', block)
        lines.append(block)
    return "\n".join(lines).replace("8443", str(port))


def test_the_walkthrough_has_every_step() -> None:
    blocks = walkthrough_blocks()
    text = "\n".join(blocks)
    for step in (
        "fedstats enroll init",
        "fedstats enroll analyst",
        "fedstats enroll client",
        "fedstats server dev-certs",
        "fedstats server add-operator",
        "fedstats server --db",
        "/v1/admin/budgets/population/",
        "fedstats admin budgets set analyst",
        "fedstats admin tasks sign",
        "/v1/admin/tasks",
        "/v1/admin/runs",
        "fedstats admin runs wait",
        "fedstats client run",
        "/v1/admin/audit",
    ):
        assert step in text, step
    # every curl that sends a body says it is JSON
    for call in re.findall(r"curl[^\n]*(?:\\\n[^\n]*)*", text):
        if " -d " in call or "--data" in call:
            assert "Content-Type: application/json" in call, call
    # one task per registered analysis
    named = set(re.findall(r"cat > tasks/([\w-]+)\.json", text))
    assert named == {name for name, _ in ANALYSES}
    assert sum(b.lstrip().startswith("# alternative: postgresql") for b in blocks) == 1
    assert sum(b.lstrip().startswith("# default: sqlite") for b in blocks) == 1


class _Walkthrough(ScriptRun):
    """One walkthrough started in the background (its own folder, port and process group)."""

    def __init__(self, tmp_path: Path, db: str, pg_urls: tuple[str, ...] | None = None) -> None:
        pg_url = None if pg_urls is None else pg_urls[0]
        super().__init__(tmp_path, script_for(db, free_port(), pg_url), TIMEOUT)

    def check(self) -> None:
        """Wait for the walkthrough (TIMEOUT from its start) and check what it left in its folder."""
        tmp_path = self.tmp_path
        logs = self.finish()

        runs = (tmp_path / "runs.txt").read_text().split()
        assert len(runs) == len(ANALYSES)
        analyses = set()
        for run in runs:
            r = json.loads((tmp_path / f"result-{run}.json").read_text())
            assert r["status"] == "done" and r["result"], (
                r["status"],
                r["error"],
                r["rounds"],
                logs,
            )
            analyses.add(r["task_id"])
        assert len(analyses) == len(ANALYSES)  # one run per distinct task
        # the ledger: every private task's run spent its charge on the population's budget
        private = sum(
            json.loads(p.read_text())["privacy"].get("epsilon") is not None
            for p in (tmp_path / "tasks").glob("*.json")
        )
        audit = json.loads((tmp_path / "audit.json").read_text())
        spends = [a for a in audit if a["action"] == "spend"]
        assert len(spends) == private, audit
        # step 10: text in a category column; every device refuses, the operator reads why
        refused = json.loads((tmp_path / "refused-run.json").read_text())
        assert refused["status"] == "aborted" and not refused["result"], refused
        assert refused["refusals"]["by_reason"] == {"data_invalid": 5}, (refused["refusals"], logs)
        (message,) = refused["refusals"]["messages"]
        assert "column x must hold integer codes" in message["message"], message
        assert refused["error"].startswith("5 of 5 devices refused: category column x"), refused


@pytest.fixture(scope="module")
def walkthroughs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both walkthroughs, started at once: each mostly waits (for its server and devices to start, its
    runs' rounds, its polls), so side by side they take little longer than one. Each test checks its
    own."""
    yield from both_stores(tmp_path_factory, "walkthrough", _Walkthrough)


def test_the_walkthrough_runs_on_sqlite(walkthroughs: dict[str, Any]) -> None:
    check_store(walkthroughs, "sqlite")


def test_the_walkthrough_runs_on_postgresql(walkthroughs: dict[str, Any]) -> None:
    check_store(walkthroughs, "postgresql")
