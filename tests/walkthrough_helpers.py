"""A documented walkthrough run as a shell script in the background, on SQLite and PostgreSQL side by side.

Used by tests/e2e/test_deploy_walkthrough.py (docs/deploy.md) and tests/e2e/test_vdaf_walkthrough.py
(docs/vdaf.md): each builds its script from its page's ``bash`` blocks and checks what the script left in its
folder; starting, stopping and waiting for the script are here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from service_helpers import pg_reachable, pg_schema


class ScriptRun:
    """A shell script started in its own folder and process group (with this Python's tools on PATH).

    Parameters
    ----------
    tmp_path : Path
        The folder the script runs in (``walkthrough.sh`` is written there).
    script : str
    timeout : float
        Seconds from the start that :meth:`finish` waits.
    unset : tuple of str
        Environment variables removed for the script (the ones its commands would otherwise read).
    """

    def __init__(
        self, tmp_path: Path, script: str, timeout: float, unset: tuple[str, ...] = ()
    ) -> None:
        self.tmp_path = tmp_path
        self.timeout = timeout
        (tmp_path / "walkthrough.sh").write_text(script)
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        for k in unset:
            env.pop(k, None)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            ["bash", str(tmp_path / "walkthrough.sh")],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        """Kill what the script started in the background (servers, devices), whatever happened."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def finish(self) -> str:
        """Wait for the script (``timeout`` from its start); fail unless it exited 0.

        Returns
        -------
        str
            The tails of the ``*.log`` files it left (for the caller's assertion messages).
        """
        proc = self.proc
        try:
            left = max(1.0, self.timeout - (time.monotonic() - self.started))
            out, _ = proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(
                f"the walkthrough did not finish in {self.timeout} s:\n{out.decode()[-4000:]}"
            )
        finally:
            self.stop()
        log = out.decode(errors="replace")
        logs = "".join(
            f"\n--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in sorted(self.tmp_path.glob("*.log"))
        )
        assert proc.returncode == 0, f"walkthrough failed ({proc.returncode}):\n{log[-4000:]}{logs}"
        return logs


def both_stores(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    start: Callable[[Path, str, tuple[str, ...] | None], Any],
    pg_schemas: int = 1,
) -> Iterator[dict[str, Any]]:
    """Start the walkthrough on PostgreSQL (when it answers) and on SQLite at once; yield them by store.

    ``start(folder, db, pg_urls)`` starts one (``pg_urls``: ``pg_schemas`` fresh schemas, None on SQLite).
    The PostgreSQL entry is the skip reason when PostgreSQL does not answer (or, in CI, the failure that
    :func:`pg_reachable` raised): :func:`check_store` turns it into a skip or a failure.
    """
    with ExitStack() as stack:
        started: dict[str, Any] = {}
        try:
            reason = pg_reachable()
        except pytest.fail.Exception as exc:  # CI: the PostgreSQL test fails, the SQLite one runs
            reason = exc
        if reason is None:
            urls = tuple(stack.enter_context(pg_schema()) for _ in range(pg_schemas))
            pg = start(tmp_path_factory.mktemp(f"{name}-pg"), "postgresql", urls)
            stack.callback(pg.stop)
            started["postgresql"] = pg
        else:
            started["postgresql"] = reason
        sqlite = start(tmp_path_factory.mktemp(f"{name}-sqlite"), "sqlite", None)
        stack.callback(sqlite.stop)
        started["sqlite"] = sqlite
        yield started


def check_store(started: dict[str, Any], kind: str) -> None:
    """Check the walkthrough of store ``kind`` (skip or fail as :func:`both_stores` recorded)."""
    got = started[kind]
    if isinstance(got, BaseException):
        raise got
    if isinstance(got, str):
        pytest.skip(got)
    got.check()
