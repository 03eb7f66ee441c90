"""Prio3 run from the tools: long-polling devices (``Prio3Runs``), the collector of ``fedstats admin
collect``, results kept on the leader, closing, and the lists of ``admin prio3 list``.

Two aggregators in process (``test_prio3_signed``'s pair, SQLite), 20 unmodified devices each in its own
thread long-polling the leader: the number of requests a device makes is bounded by the rounds it answers,
not by the time it waits (the issue's 20 devices made 20,678 requests in 6 minutes by polling).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fedstats.analyses._prio3_tasks import round_task_id
from fedstats.cli.admin_prio3 import collect
from fedstats.client.policy import LocalBudget, Policy
from fedstats.client.vdaf import Answer, Prio3Device
from fedstats.client.vdaf_runs import Prio3Runs
from fedstats.wire.tasks import task_id
from test_prio3_signed import FLOOR, HELPER_URL, LEADER_URL, ROUTE, Pair, _pair

N_DEVICES = 20


class _Api:
    """The admin CLI's client shape (``call``, ``http``) over a test client."""

    def __init__(self, http: Any) -> None:
        self.http = http

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        r = self.http.request(method, path, json=body, params=kw.get("params"))
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    urls = (f"sqlite:///{tmp_path / 'leader.db'}", f"sqlite:///{tmp_path / 'helper.db'}")
    with _pair(tmp_path, urls) as p:
        yield p


def _device(pair: Pair, i: int, age: float) -> Prio3Device:
    return Prio3Device(
        pair.identity(f"device-{i}"),
        {"value": age},
        policy=Policy(max_epsilon=4.0, **FLOOR),
        budget=LocalBudget(None),
        clients={LEADER_URL: pair.leader, HELPER_URL: pair.helper},
    )


def test_long_polling_devices_and_the_collector_release_close_and_list(pair: Pair) -> None:
    config = {
        "analysis": "bitpushing-mean",
        "params": {"column": "value", "low": 0.0, "high": 100.0, "method": "basic"},
        "privacy": {"epsilon": 2.0, "population": "default"},
        "cohort_size": N_DEVICES,
        "min_clients": N_DEVICES,
        "max_records_per_client": 1,
        "deadlines": {"checkin": 60, "round": 60},
        "prio3": ROUTE,
        "label": "ages by the tools",
    }
    envelope = pair.sign(config)
    tid = task_id(envelope["task"])
    assert all(r.status_code == 200 for r in pair.create(envelope))
    loops = [Prio3Runs(_device(pair, i, 20.0 + i), LEADER_URL) for i in range(N_DEVICES)]
    errors: list[BaseException] = []

    def run(loop: Prio3Runs) -> None:
        try:
            loop.run(wait=20.0, poll=0.2, runs=1, max_seconds=120)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(lp,), daemon=True) for lp in loops]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while sum(len(lp.device.tasks) for lp in loops) < N_DEVICES:  # every device joined
        assert time.monotonic() < deadline and not errors, errors
        time.sleep(0.1)
    leader, helper = _Api(pair.leader), _Api(pair.helper)
    payload = collect(leader, helper, tid, round_timeout=60)
    for side in (pair.leader, pair.helper):
        assert side.post(f"/v1/vdaf/tasks/{tid}/close").status_code == 200
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)  # each stopped: its task left the work list
    # every device sent its one report, and made a handful of requests, not thousands
    assert all(list(lp.answers.values()) == [Answer.SENT] for lp in loops)
    per_device = [lp.requests for lp in loops]
    print(f"requests per device: max {max(per_device)}, mean {sum(per_device) / N_DEVICES:.1f}")
    assert max(per_device) <= 16, per_device
    # the result: stored once on the leader, "estimate [interval] (privacy spent)"
    assert payload["n_reports"] == N_DEVICES and payload["epsilon"] == 2.0
    listed = leader.call("GET", "/v1/vdaf/tasks")["items"]
    (mine,) = [t for t in listed if t["task_id"] == tid]
    assert mine["status"] == "closed" and mine["result"] == payload
    assert [(b["uploaded"], b["aggregated"], b["rejected"]) for b in mine["batches"]] == [
        (N_DEVICES, N_DEVICES, 0)
    ]
    again = pair.leader.post(f"/v1/vdaf/tasks/{tid}/result", json={"result": {"estimate": 1}})
    assert again.status_code == 409  # one result per task
    # closed: no device joins it any more, and it is in no work list
    late = _device(pair, N_DEVICES, 30.0)
    with pytest.raises(Exception, match="409"):
        late.join(LEADER_URL, tid)
    assert Prio3Runs(late, LEADER_URL).step() == []


def test_the_work_poll_is_held_until_a_round_opens(pair: Pair) -> None:
    config = {
        "analysis": "bitpushing-mean",
        "params": {"column": "value", "low": 0.0, "high": 100.0, "method": "basic"},
        "privacy": {"epsilon": 2.0, "population": "default"},
        "cohort_size": 10,
        "max_records_per_client": 1,
        "prio3": ROUTE,
        "label": "held polls",
    }
    envelope = pair.sign(config)
    tid = task_id(envelope["task"])
    pair.create(envelope)
    loop = Prio3Runs(_device(pair, 0, 40.0), LEADER_URL)
    loop.device.uploader._post(
        LEADER_URL, "/v1/client/register", {"certificate": loop.device.uploader._cert}
    )
    assert loop.step() == [{"task_id": tid, "role": "leader", "rounds": 0, "open": None}]
    t0 = time.monotonic()
    loop.step(wait=0.6)  # nothing changed: held, then 304
    assert time.monotonic() - t0 >= 0.5 and loop.polls == 2

    def open_later() -> None:  # on the leader only, as a collector opening it on one first
        time.sleep(0.5)
        r = pair.leader.post(f"/v1/vdaf/tasks/{tid}/rounds", json={"round": 0, "history": []})
        assert r.status_code == 200, r.text

    threading.Thread(target=open_later, daemon=True).start()
    t0 = time.monotonic()
    work = loop.step(wait=20.0)  # answered when the round opens, not after 20 s
    assert time.monotonic() - t0 < 10.0 and work[0]["open"] == 0
    # announced by the leader only: not open yet (asked again), neither refused nor uploaded
    assert loop.answers == {} and tid not in loop.device.refused
    assert loop.device.answer(tid, 0) is Answer.NOT_OPEN
    assert pair.reports(round_task_id(tid, 0)) == [{}, {}]
    r = pair.helper.post(f"/v1/vdaf/tasks/{tid}/rounds", json={"round": 0, "history": []})
    assert r.status_code == 200, r.text
    loop.step()
    assert loop.answers == {(tid, 0): Answer.SENT}
    assert pair.reports(round_task_id(tid, 0)) == [{"pending": 1}, {"pending": 1}]
    bad = httpx.Client(base_url=LEADER_URL, transport=pair.leader._transport)
    assert bad.get("/v1/vdaf/work").status_code == 401  # devices only (signed requests)


def test_provision_puts_the_task_on_both_or_on_neither(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from fedstats.cli import admin_prio3
    from fedstats.cli.admin import AdminHTTPError
    from fedstats.cli.app import app

    clients = {LEADER_URL: pair.leader, HELPER_URL: pair.helper}

    class _InProcess:  # the CLI's admin client, over the in-process aggregators
        def __init__(self, conn: Any) -> None:
            self.http = clients[conn.server.rstrip("/")]

        def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
            r = self.http.request(method, path, json=body, params=kw.get("params"))
            if r.status_code >= 400:
                raise AdminHTTPError(f"{method} {path}: HTTP {r.status_code}: {r.text[:200]}")
            return r.json()

        def close(self) -> None:
            pass

    monkeypatch.setattr(admin_prio3, "_Api", _InProcess)
    base = {
        "analysis": "bitpushing-mean",
        "params": {"column": "value", "low": 0.0, "high": 100.0, "method": "basic"},
        "privacy": {"epsilon": 2.0, "population": "default"},
        "cohort_size": 10,
        "max_records_per_client": 1,
        "prio3": ROUTE,
    }
    argv = ["--json", "admin", "--server", LEADER_URL, "--token", "t", "prio3", "provision"]
    env = {"FEDSTATS_HELPER_TOKEN": "h"}
    ok = tmp_path / "ok.signed"
    ok.write_text(json.dumps(pair.sign({**base, "label": "provisioned"})))
    res = CliRunner().invoke(app, [*argv, str(ok)], env=env)
    assert res.exit_code == 0, res.output
    shown = json.loads(res.output)
    assert len(bytes.fromhex(shown["verify_key"])) == 32 and len(shown["peer_token"]) >= 43
    assert [
        c.get(f"/v1/vdaf/tasks/{shown['task_id']}").json()["status"] for c in clients.values()
    ] == [
        "open",
        "open",
    ]
    # the leader refuses (its population budget cannot cover the task): the helper's copy is abandoned
    r = pair.leader.put(
        "/v1/admin/budgets/population/default", json={"epsilon": 3.0, "delta": 0.01}
    )
    assert r.status_code == 200, r.text
    bad = tmp_path / "bad.signed"
    envelope = pair.sign({**base, "label": "refused by the leader"})
    bad.write_text(json.dumps(envelope))
    res = CliRunner().invoke(app, [*argv, str(bad)], env=env)
    assert res.exit_code == 1, res.output
    assert [line for line in res.output.splitlines() if line.startswith("error:")], res.output
    tid = task_id(envelope["task"])
    assert pair.leader.get(f"/v1/vdaf/tasks/{tid}").status_code == 404
    helper_side = pair.helper.get(f"/v1/vdaf/tasks/{tid}").json()
    assert helper_side["status"] == "abandoned" and helper_side["charge"]["status"] == "released"
