"""Deadlines on the monotonic clock, and every abort before a release gives the reservation back (issue 42,
item 7); refusals recorded through the domain (item 4). On the memory store, the driver in this process.

The clock is stepped where the code reads it (:mod:`fedstats.service.domain.clock`: ``wall`` for the
stored deadlines, ``monotonic`` for how long they last).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fedstats.errors import ParameterError
from fedstats.service.domain import clock, refusals, runs, secure
from fedstats.service.domain.driver import Driver
from fedstats.service.store.memory import MemoryStore
from test_service_domain import N, _answer_round, _started


def _view(store: MemoryStore, run_id: str) -> dict[str, Any]:
    with store.transaction(read_only=True) as tx:
        return runs.run_view(tx, run_id)


def _charge(store: MemoryStore, run_id: str) -> str:
    with store.transaction(read_only=True) as tx:
        c = tx.charge_of(run_id)
        assert c is not None
        return c.status


def _check_in(store: MemoryStore, run_id: str, devices: list[str]) -> None:
    for cid in devices:
        with store.transaction() as tx:
            runs.checkin(tx, run_id, cid, 1)


@pytest.fixture
def memory() -> MemoryStore:
    return MemoryStore()


class _Stepped:
    """``clock.wall`` and ``clock.monotonic`` with offsets the test moves."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.wall_offset = 0.0
        self.mono_offset = 0.0
        real_wall, real_mono = clock.wall, clock.monotonic
        monkeypatch.setattr(clock, "wall", lambda: real_wall() + self.wall_offset)
        monkeypatch.setattr(clock, "monotonic", lambda: real_mono() + self.mono_offset)


def test_a_wall_clock_step_neither_aborts_nor_extends_a_round(
    memory: MemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task's deadlines are 60 s. Stepping the server's wall clock 10 minutes ahead does not end
    the check-in or the open round (it aborted the run in flight before); stepping it 10 minutes back
    does not extend them: 61 s on the monotonic clock end the round, which aborts (too few reports)
    and gives its reservation back."""
    steps = _Stepped(monkeypatch)
    rid = _started(memory, tmp_path, "clock step")
    devices = [f"dev-{i}" for i in range(N)]
    drv = Driver(memory, owner="server-a")
    _check_in(memory, rid, devices[:2])  # fewer than min_clients (N - 2): waiting for more
    steps.wall_offset = 600.0
    drv.tick()
    assert _view(memory, rid)["status"] == "checkin"  # not closed (and not aborted) by the step
    _check_in(memory, rid, devices[2:])
    drv.tick()  # the cohort is complete: check-in closes, round 0 opens
    drv.tick()
    assert [r["status"] for r in _view(memory, rid)["rounds"]] == ["open"]
    steps.wall_offset = -600.0  # stepped back: the deadline must not move 10 minutes away
    drv.tick()
    assert _view(memory, rid)["status"] == "running"
    _answer_round(memory, rid, devices[:1], drv)  # one report: fewer than the round needs
    steps.wall_offset = 600.0  # forward again: still within the 60 s
    drv.tick()
    assert [r["status"] for r in _view(memory, rid)["rounds"]] == ["open"]
    steps.mono_offset = 61.0  # 61 s of real time: the deadline passed, whatever the wall says
    drv.tick()
    view = _view(memory, rid)
    assert view["status"] == "aborted" and "fewer than the" in view["error"], view
    assert _charge(memory, rid) == "released"


@pytest.mark.parametrize("path", ["checkin deadline", "refusals", "cancel", "round deadline"])
def test_every_abort_before_a_release_gives_the_reservation_back(
    path: str, memory: MemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Check-in deadline, devices' refusals, an operator's cancel, a round's deadline with no sum
    journaled: the run is aborted and its ledger charge released (devices give theirs back when they
    see it finished: tests/client/test_device_refusals.py)."""
    steps = _Stepped(monkeypatch)
    rid = _started(memory, tmp_path, f"abort {path}")
    devices = [f"dev-{i}" for i in range(N)]
    drv = Driver(memory, owner="server-a")
    assert _charge(memory, rid) == "reserved"
    if path == "checkin deadline":
        _check_in(memory, rid, devices[:1])
        steps.mono_offset = 61.0
    elif path == "refusals":
        for cid in devices:
            with memory.transaction() as tx:
                refusals.record_refusal(tx, rid, cid, "default", "data_invalid", "column value")
    elif path == "cancel":
        _check_in(memory, rid, devices)
        with memory.transaction() as tx:
            runs.cancel_run(tx, rid, "alice")
    else:
        _check_in(memory, rid, devices)
        drv.tick()
        drv.tick()
        steps.mono_offset = 61.0
    for _ in range(3):
        drv.tick()
    view = _view(memory, rid)
    assert view["status"] == "aborted", view
    assert _charge(memory, rid) == "released"
    if path == "refusals":  # closed at once (every device answered), led by the devices' reason
        assert view["error"].startswith(f"{N} of {N} devices refused: column value ({N})")
        assert view["refusals"]["by_reason"] == {"data_invalid": N}


def test_a_secure_seeding_abort_releases_too(
    memory: MemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The secure path's abort before any round (no member revealed its seed contribution)."""
    rid = _started(memory, tmp_path, "secure abort")
    monkeypatch.setattr(secure, "is_secure", lambda cfg: True)  # a seeding step, no reveal comes
    monkeypatch.setattr(
        secure,
        "close_seeding",
        lambda s, run, deadline, cfg=None, gate=None: "no member revealed its contribution",
    )
    _check_in(memory, rid, [f"dev-{i}" for i in range(N)])
    drv = Driver(memory, owner="server-a")
    for _ in range(3):
        drv.tick()
    view = _view(memory, rid)
    assert view["status"] == "aborted" and "revealed" in view["error"], view
    assert _charge(memory, rid) == "released"


def test_a_refusal_is_checked_at_the_edge(memory: MemoryStore, tmp_path: Path) -> None:
    """A reason outside the codes, a message too long or with a control character: 422 naming the
    field; a device refuses a run once (the first reason stays)."""
    rid = _started(memory, tmp_path, "refusal edge")
    bad = [
        ("because", "x", "reason"),
        ("other", "", "message"),
        ("other", "x" * 301, "message"),
        ("other", "bad\x00byte", "message"),
        ("other", "new\nline", "message"),
    ]
    for reason, message, field in bad:
        with pytest.raises(ParameterError, match=field), memory.transaction() as tx:
            refusals.record_refusal(tx, rid, "dev-0", "default", reason, message)
    with memory.transaction() as tx:
        assert refusals.record_refusal(tx, rid, "dev-0", "default", "other", "café, 300 chars ok")
        assert not refusals.record_refusal(tx, rid, "dev-0", "default", "data_invalid", "again")
        with pytest.raises(runs.NotFoundError):
            refusals.record_refusal(tx, rid, "dev-1", "another population", "other", "x")
    assert _view(memory, rid)["refusals"]["by_reason"] == {"other": 1}
