"""Long-poll wake-ups (:mod:`fedstats.service.changes`): a run's state change wakes its population only."""

from __future__ import annotations

import asyncio
import threading

from fedstats.service.changes import Changes


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
