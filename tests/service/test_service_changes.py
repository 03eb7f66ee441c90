"""Long-poll wake-ups (:mod:`fedstats.service.domain.changes`): a run's state change wakes its population only."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from fedstats.errors import ParameterError
from fedstats.service.domain.changes import ArrivalGate, Changes, Wakeup
from fedstats.service.http.app import ServerSettings, create_app
from fedstats.service.http.fastpath import Offload
from fedstats.service.store import open_store

# in this process, no database or server process: part of make test-fast
pytestmark = pytest.mark.memory_state


async def _scenario() -> dict[str, object]:
    changes = Changes()
    changes.bind(asyncio.get_running_loop())
    before = {p: changes.generation(p) for p in ("a", "b")}
    waiters = {p: asyncio.create_task(changes.wait(p, 5.0)) for p in ("a", "b")}
    await asyncio.sleep(0.05)
    # bumped from another thread, as the run driver does
    t = threading.Thread(target=changes.bump, args=({"a"},))
    t.start()
    t.join()
    woke_a = await asyncio.wait_for(waiters["a"], 2.0)
    await asyncio.sleep(0.2)
    b_still_waiting = not waiters["b"].done()
    after = {p: changes.generation(p) for p in ("a", "b")}
    changes.bump(None)  # e.g. another server process moved the shared counter: everyone looks again
    woke_b = await asyncio.wait_for(waiters["b"], 2.0)
    timed_out = await changes.wait("c", 0.05)
    return {
        "woke_a": woke_a,
        "b_still_waiting": b_still_waiting,
        "woke_b": woke_b,
        "a_moved": after["a"] != before["a"],
        "b_same": after["b"] == before["b"],
        "all_moves_b": changes.generation("b") != after["b"],
        "timed_out": timed_out,
    }


def test_a_bump_wakes_its_population_only_and_none_wakes_all() -> None:
    got = asyncio.run(_scenario())
    assert got == {
        "woke_a": True,
        "b_still_waiting": True,
        "woke_b": True,
        "a_moved": True,
        "b_same": True,
        "all_moves_b": True,
        "timed_out": False,
    }


def test_store_work_runs_on_at_most_the_configured_threads() -> None:
    """:class:`Offload` runs blocking store work off the event loop, at most ``threads`` at once, and
    hands back each result or exception; a server with no store thread is refused."""
    lock = threading.Lock()
    running = {"now": 0, "max": 0}

    def work(i: int) -> int:
        with lock:
            running["now"] += 1
            running["max"] = max(running["max"], running["now"])
        time.sleep(0.05)
        with lock:
            running["now"] -= 1
        if i == 7:
            raise KeyError(i)
        return i * i

    async def scenario() -> list[object]:
        offload = Offload(3)
        try:
            return await asyncio.gather(
                *(offload(work, i) for i in range(12)), return_exceptions=True
            )
        finally:
            offload.close()

    got = asyncio.run(scenario())
    assert got[:7] == [i * i for i in range(7)] and isinstance(got[7], KeyError)
    assert got[8:] == [i * i for i in range(8, 12)]
    assert running["max"] == 3
    store = open_store("sqlite://")
    try:
        with pytest.raises(ParameterError, match="store_threads"):
            create_app(store, ServerSettings(store_threads=0), run_driver=False)
    finally:
        store.close()


async def _held(since_known: bool, bump: bool, seconds: float) -> tuple[int, object, float]:
    changes = Changes()
    changes.bind(asyncio.get_running_loop())
    since = changes.generation("a")
    calls: list[float] = []

    async def attempt() -> str | None:
        calls.append(time.monotonic())
        return "open"

    if bump:
        asyncio.get_running_loop().call_later(0.2, changes.bump, {"a"})
    t0 = time.monotonic()
    got = await changes.hold("a", seconds, attempt, since=since if since_known else None)
    return len(calls), got, time.monotonic() - t0


def test_a_held_request_known_to_wait_looks_only_after_a_change() -> None:
    """``hold(since=g)``: the caller knows the answer was None at generation ``g`` (e.g. it stored its
    stage message while the stage was open): no attempt (no database read) until a change after
    ``g`` or the end of its time, then attempts as usual."""
    calls, got, _ = asyncio.run(_held(True, False, 0.0))
    assert (calls, got) == (0, None)
    calls, got, took = asyncio.run(_held(True, False, 0.3))  # no change: one look when time is up
    assert (calls, got) == (1, "open") and took >= 0.29
    calls, got, took = asyncio.run(_held(True, True, 5.0))  # a change: one look, at once
    assert (calls, got) == (1, "open") and 0.15 <= took < 2.0
    calls, got, took = asyncio.run(_held(False, False, 5.0))  # no since: looks at once
    assert (calls, got) == (1, "open") and took < 1.0


async def _changed_before() -> int:
    changes = Changes()
    changes.bind(asyncio.get_running_loop())
    since = changes.generation("a")
    changes.bump({"a"})  # a change after the caller's generation: it looks at once
    calls: list[int] = []

    async def attempt() -> int | None:
        calls.append(1)
        return 1

    got = await changes.hold("a", 5.0, attempt, since=since)
    assert got == 1
    return len(calls)


def test_a_held_request_looks_at_once_when_a_change_came_since() -> None:
    assert asyncio.run(_changed_before()) == 1


def test_a_device_in_a_secure_session_is_not_read_ahead_until_it_polls_again() -> None:
    """``WorkCache.unanswered``: a device that sent a stage message after its last poll gets its next
    step from its session's stage requests, so a state change does not read its work list ahead (it
    would be discarded, unread, at the next stage); once it polls again it is read ahead as before."""
    from fedstats.service.http.fastpath import WorkCache

    cache = WorkCache(Changes(), 60.0)
    before = time.monotonic()
    for cid in ("a", "b", "c"):
        cache.polled(cid, "default")
    assert sorted(cache.unanswered("default", 600.0, before + 10.0)) == ["a", "b", "c"]
    cache.staged("b")  # b is in a session now
    with cache.away("c"):  # c is held in a stage request
        assert cache.unanswered("default", 600.0, before + 10.0) == ["a"]
    assert sorted(cache.unanswered("default", 600.0, before + 10.0)) == ["a", "c"]
    cache.polled("b", "default")  # b polls again (e.g. held for its next work list)
    assert sorted(cache.unanswered("default", 600.0, time.monotonic() + 10.0)) == ["a", "b", "c"]
    assert cache.unanswered("other", 600.0, before + 10.0) == []


def test_the_arrival_gate_is_due_at_the_last_message_the_driver_still_needed() -> None:
    gate = ArrivalGate()
    key = ("stage", "run-1", 0, 2, 3)
    assert gate.note(key)  # not looked at yet: due
    gate.begin()  # a pass begins: that arrival is in the count it reads
    gate.looked(key, 3)  # ... and the stage still needs 3
    assert not gate.note(key) and not gate.note(key)
    gate.begin()
    assert gate.note(key)  # the third since the look, though after the next pass began
    gate.looked(key, 1)  # that pass counted only 2 of them: the third is still pending
    assert gate.note(key)  # a duplicate or a fourth: due (early, never late)
    other = ("stage", "run-1", 0, 2, 4)
    gate.begin()
    gate.looked(other, 2)
    assert not gate.note(other)
    gate.forget("run-1")  # the run ended or moved away: everything is due again
    assert gate.note(other) and gate.note(("checkin", "run-1"))


def test_a_wakeup_sets_its_event_only_for_an_arrival_that_may_close() -> None:
    async def go() -> None:
        gate = ArrivalGate()
        wakeup = Wakeup(gate)
        wakeup.bind()
        gate.begin()
        gate.looked(("reveal", "r"), 2)
        wakeup.arrived(("reveal", "r"))
        began = time.monotonic()
        await wakeup.wait(0.2)  # not set: waits its timeout
        assert time.monotonic() - began >= 0.15
        wakeup.arrived(("reveal", "r"))
        began = time.monotonic()
        await wakeup.wait(5.0)  # set by the last reveal
        assert time.monotonic() - began < 1.0

    asyncio.run(go())
