"""Stopping a server while devices hold long polls logs no traceback (issue 42, item 5), on both stores.

uvicorn cancels the requests still running 3 s after the stop signal; each cancelled long poll used to log
``Exception in ASGI application`` and a traceback. They are now answered 503 (``Retry-After``) and the
devices retry.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx

from service_helpers import Deployment


def _polling(dep: Deployment, n: int, timeout: float = 120.0) -> None:
    """Wait until ``n`` devices are enrolled (each then holds its long poll)."""
    deadline = time.monotonic() + timeout
    with dep.admin() as a:
        while time.monotonic() < deadline:
            got = a.get("/v1/admin/devices", params={"limit": 50})
            if got.status_code == 200 and got.json()["total"] >= n:
                return
            time.sleep(0.2)
    raise AssertionError(f"{n} devices did not enroll in {timeout} s")


def test_stopping_with_long_polling_devices_logs_no_traceback(
    deployment: Deployment, tmp_path: Path
) -> None:
    dep = deployment
    data = tmp_path / "data.csv"
    data.write_text("value\n0.5\n")
    devices = [
        dep.start_client(f"holder-{i}", data, "--wait", "60", "--max-seconds", "120")
        for i in range(3)
    ]
    try:
        _polling(dep, 3)
        time.sleep(1.0)  # the devices' polls are held now (nothing to do for 60 s)
        assert dep.proc is not None
        dep.proc.send_signal(signal.SIGTERM)
        dep.proc.wait(30)
        log = (dep.root / f"server-{dep.port}.log").read_text(errors="replace")
        assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]
        try:  # the server is gone: nothing answers
            httpx.get(f"{dep.url}/healthz", verify=False, timeout=2)
            raise AssertionError("the server still answers")
        except httpx.HTTPError:
            pass
    finally:
        for proc in devices:
            proc.kill()
            proc.wait(10)
