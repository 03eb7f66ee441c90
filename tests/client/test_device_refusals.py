"""The device's side of issue 42 (items 4 and 7), without a server: what it tells when it refuses, its data
read again when the file changed, the runs it counts after a restart, the budget file on disk before it
returns, and errors that name the clock."""

from __future__ import annotations

import os
import socket
import ssl
import stat
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedstats.client import Device, LocalBudget
from fedstats.client.checks import _connect_failure
from fedstats.client.data import DeviceData
from fedstats.client.policy import RefusedTask
from fedstats.client.refusals import RESTARTED, refusal_code, refusal_message
from fedstats.errors import BudgetExceededError, DataError, SecurityError
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.wire import auth
from fedstats.wire.enrollment import init_authority, issue_identity
from fedstats.wire.refusals import MAX_MESSAGE, REASONS


def test_refusal_codes_and_messages() -> None:
    cases = [
        (DataError("category column colour must hold integer codes"), "offer", "data_invalid"),
        (RefusedTask("local budget: epsilon 11 > 10"), "offer", "budget_exhausted"),
        (BudgetExceededError("no room"), "round", "budget_exhausted"),
        (
            RefusedTask("privacy loss epsilon 8 exceeds the policy's max_epsilon 4"),
            "offer",
            "policy_refused",
        ),
        (SecurityError("the task expired (not_after 1)"), "offer", "task_expired"),
        (SecurityError("the task signature must be 64 bytes"), "offer", "task_unverified"),
        (SecurityError("round 1 differs from the task's plan"), "round", "round_mismatch"),
        (RuntimeError("?"), "offer", "other"),
    ]
    for exc, stage, code in cases:
        assert refusal_code(exc, stage) == code, (exc, code)
        assert code in REASONS
    assert refusal_message("a\x00b\nc\td  e") == "a b c d e"
    long = refusal_message("x" * 1000)
    assert len(long) == MAX_MESSAGE and long.endswith("...")


def test_data_is_read_again_when_the_file_changed(tmp_path: Path) -> None:
    f = tmp_path / "data.csv"
    f.write_text("colour\nred\nblue\n")
    data = DeviceData(f)
    assert data.columns["colour"].dtype.kind == "O" and not data.refresh()  # unchanged: not read
    f.write_text("colour\n1\n0\n1\n")
    os.utime(f, ns=(time.time_ns(), time.time_ns() + 10**9))  # a new modification time
    assert data.refresh() and data.n_records == 3
    assert data.columns["colour"].tolist() == [1, 0, 1]
    f.write_text("")  # half-written: refused, the columns read before are kept
    with pytest.raises(DataError, match=r"data\.csv"):
        data.refresh()
    assert data.n_records == 3
    assert not DeviceData({"v": np.zeros(2)}).refresh()  # columns in memory: never read again


def test_the_budget_file_is_fsynced_file_and_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before reserve/spend/release return (the device then checks in or uploads), the new file and
    the folder holding its name are flushed to disk."""
    kinds: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        kinds.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    budget = LocalBudget(tmp_path / "budget.json")
    budget.reserve("r1", PrivacyLoss(1.0, 0.0))
    assert kinds == ["file", "folder"]
    budget.spend("r1", PrivacyLoss(1.0, 0.0))
    budget.unspend("r1")
    assert budget.status("r1") == "reserved" and budget.release("r1")
    assert kinds == ["file", "folder"] * 4


@pytest.fixture
def device(tmp_path: Path) -> Device:
    """A device whose server is never reached: its work lists are handed to it."""
    init_authority(tmp_path / "authority")
    ident = issue_identity(tmp_path / "authority", "dev-1", "default", tmp_path / "dev-1.json")
    budget = LocalBudget(tmp_path / "budget.json")
    budget.reserve("before-restart", PrivacyLoss(1.0, 0.0))
    budget.spend("before-restart", PrivacyLoss(1.0, 0.0))
    dev = Device("http://127.0.0.1:9", ident, {"value": np.zeros(1)}, budget=budget)
    told: list[tuple[str, str]] = []
    dev.tell_refusal = lambda rid, code, message: told.append((rid, code))  # type: ignore[method-assign]
    dev.told = told  # type: ignore[attr-defined]
    return dev


def _work(rounds: list[str] = (), finished: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "offers": [],
        "reveals": [],
        "rounds": [{"run_id": r, "round": 0} for r in rounds],
        "finished": [{"run_id": r, "status": "done"} for r in finished],
    }


def test_runs_counts_a_run_it_rejoins_after_a_restart(
    device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run(runs=1)`` after a restart: the run it was in (its budget file holds the charge) is listed
    again; the device refuses its rounds (it no longer holds the task), says so, counts it, and stops
    once it finished. A run it holds no charge for is refused as not accepted and not counted."""
    lists = iter(
        [
            _work(finished=["old"]),  # finished before the restart: not counted
            _work(rounds=["before-restart", "never-joined"], finished=["old"]),
            _work(finished=["old", "never-joined"]),
            _work(finished=["old", "never-joined", "before-restart"]),
        ]
    )
    polls: list[int] = []

    def step(wait: float = 0.0) -> dict[str, Any]:
        polls.append(1)
        work = next(lists)
        device._handle(work)
        return work

    monkeypatch.setattr(device, "register", lambda: None)
    monkeypatch.setattr(device, "step", step)
    device.connected = True
    device.run(runs=1, wait=0.0, poll=0.01, max_seconds=10)
    assert len(polls) == 4  # stopped when (and not before) the rejoined run finished
    assert device.rejoined.runs == {"before-restart"}
    assert device.refused["before-restart"] == RESTARTED
    assert "did not accept" in device.refused["never-joined"]
    assert device.told == [("before-restart", "restarted"), ("never-joined", "round_mismatch")]
    assert device.budget.status("before-restart") == "spent"  # its charge stays


def test_clock_skew_errors_name_the_clock() -> None:
    with pytest.raises(SecurityError, match="the device's clock is 400 s ahead of the server's"):
        auth.check_timestamp("1000400", 300.0, now=1_000_000.0)
    with pytest.raises(SecurityError, match="the device's clock is 600 s behind the server's"):
        auth.check_timestamp("999400", 300.0, now=1_000_000.0)
    auth.check_timestamp("1000299", 300.0, now=1_000_000.0)  # within the window
    err = ssl.SSLCertVerificationError(
        1,
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate is not yet valid",
    )
    reason, permanent = _connect_failure(err, "https://h:8443")
    assert permanent and "not yet valid by this device's clock" in reason
    assert "the device's clock is behind" in reason and "--ca" not in reason
    err = ssl.SSLCertVerificationError(
        1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate has expired"
    )
    assert "expired by this device's clock" in _connect_failure(err, "https://h")[0]
    unknown = ssl.SSLCertVerificationError(1, "CERTIFICATE_VERIFY_FAILED: self-signed")
    assert "pass the server's CA with --ca" in _connect_failure(unknown, "https://h")[0]
    assert "unknown host" in _connect_failure(socket.gaierror("nope"), "https://h")[0]


@pytest.mark.parametrize(
    ("first", "retried"), [(408, True), (503, True), (400, False), (409, False)]
)
def test_a_request_is_sent_again_after_a_408_and_not_after_a_client_error(
    tmp_path: Path, first: int, retried: bool
) -> None:
    # 408: the server timed the request's headers out (a device short of CPU, as the n = 5,000 benchmark's
    # device threads were); RFC 9110 15.5.9 lets the client repeat it. A 400 or 409 is final.
    import httpx

    from fedstats.client import _HTTPError

    init_authority(tmp_path / "authority")
    ident = issue_identity(tmp_path / "authority", "dev-1", "default", tmp_path / "dev-1.json")
    dev = Device("http://127.0.0.1:9", ident, {"value": np.zeros(1)})
    seen: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(len(seen))
        return httpx.Response(first if len(seen) == 1 else 200, json={"detail": "x"})

    dev._http = httpx.Client(base_url="http://127.0.0.1:9", transport=httpx.MockTransport(answer))
    try:
        if retried:
            assert dev._send("POST", "/v1/client/work", b"", keyed=False).status_code == 200
            assert len(seen) == 2
        else:
            with pytest.raises(_HTTPError) as err:
                dev._send("POST", "/v1/client/work", b"", keyed=False)
            assert err.value.status == first and len(seen) == 1
    finally:
        dev.close()


def test_the_devices_of_a_process_share_one_tls_context_per_ca_file(tmp_path: Path) -> None:
    # a context loads its CA store (about 20 ms of CPU): the devices a process hosts or simulates that
    # trust the same file share one; an edited file is loaded again, and a file that is no PEM is refused
    import certifi

    from fedstats.client.checks import ca_context, default_context
    from fedstats.errors import ParameterError

    pem = tmp_path / "ca.pem"
    pem.write_bytes(Path(certifi.where()).read_bytes())
    first = ca_context(pem)
    assert ca_context(str(pem)) is first and ca_context(tmp_path / "." / "ca.pem") is first
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    pem.write_bytes(pem.read_bytes() + b"\n")  # edited: another size
    assert ca_context(pem) is not first
    assert default_context() is default_context()
    assert default_context().verify_mode == ssl.CERT_REQUIRED
    (tmp_path / "no.pem").write_text("not a certificate")
    with pytest.raises(ParameterError, match="ca"):
        ca_context(tmp_path / "no.pem")
