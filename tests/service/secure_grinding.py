"""Grinding a secure run's seed by aborts, over the real HTTP API (issue 40, "an abort costs its cause").

Collected in :mod:`test_service_secure` (imported there), on that module's ``production`` server: no
server of its own.

The attacker of issue 40 runs the server and holds enrolled colluding devices: 3 in a session of 10, 4 in a
session of 20. Every other device is an unmodified :class:`fedstats.client.Device` with its default
privacy policy (its floor lowered to the sizes here only where a test says so). On the production store,
PostgreSQL (the module's ``production``; the attacks are the server's and the devices' protocol, not the
store's: the store's semantics are the parity class's, tests/service/test_service_state.py), all at once:

* **withholding** the seed reveal (the veto of the old protocol) no longer aborts the run: it goes on
  without the withholders, names them in the transcript, and excludes them from the task's next run; the
  sessions are complete graphs, so isolating the victim would take 8 of 10 (17 of 20) colluders whatever
  the seed (``docs/secagg.md``, "An abort costs its cause");
* **aborting after the reveal** (the colluders drop out at the masked input, so the session loses its
  quorum) is counted by every honest device, which stops joining the task after
  ``Policy.max_aborted_runs`` (2) such runs;
* **differencing** two exact releases: a device takes part in one run of an exact task and one exact run
  per analyst unless its policy consents to more.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import numpy as np

from deadlines import scaled
from fedstats.client import Device, LocalBudget, Policy
from fedstats.randomness import RandomSource
from fedstats.secagg.collusion import isolation_probability, neighbours_to_isolate
from fedstats.secagg.params import SecAggParameters
from fedstats.service.store import open_store
from service_helpers import Deployment, run_devices, wait_run

BP = {"column": "value", "low": -1.0, "high": 1.0, "resolution": 1 / 64, "method": "weighted"}
LOG: list[str] = []


class _Colluder(Device):
    """An attacker's enrolled device: withholds its seed reveal, or drops out at the masked input, in
    the runs of the tasks whose label the attacker gave it."""

    withhold: frozenset[str] = frozenset()
    drop: frozenset[str] = frozenset()

    def _label(self, run_id: str) -> str:
        acc = self.accepted.get(run_id)
        return "" if acc is None else str(acc.task.get("label"))

    def _reveal(self, run_id: str, wait: float = 0.0) -> None:
        if self._label(run_id) in self.withhold:
            return
        super()._reveal(run_id, wait)

    def _answer_stage(
        self, rnd: Any, stage: int, down: bytes | None, wait: float = 0.0
    ) -> tuple[bool, bytes | None, bool]:
        if stage >= 2 and self._label(str(rnd["run_id"])) in self.drop:
            return False, None, False
        return super()._answer_stage(rnd, stage, down, wait)


def _devices(
    dep: Deployment, tag: str, population: str, honest: int, colluders: int, **policy: Any
) -> tuple[list[Device], list[_Colluder]]:
    rng = np.random.default_rng(len(tag) + honest)
    out: list[Any] = []
    for i in range(honest + colluders):
        ident = json.loads(dep.identity(f"{tag}-{i}", population).read_text())
        cls = Device if i < honest else _Colluder
        out.append(
            cls(
                dep.url,
                ident,
                {"value": rng.uniform(-1, 1, 12)},
                ca=dep.certs["ca"],
                policy=Policy(min_session_size=5, **policy),
                budget=LocalBudget(None, epsilon=100.0),
                randomness=RandomSource(7 + i),
                log=lambda line, c=f"{tag}-{i}": LOG.append(f"{time.time():.2f} {c}: {line}"),
            )
        )
    return out[:honest], out[honest:]


def _task(label: str, population: str, devices: int, **over: Any) -> dict[str, Any]:
    t = {
        "analysis": "bitpushing-mean",
        "params": BP,
        "privacy": {"epsilon": 1.0, "population": population},
        "cohort_size": devices,
        "min_clients": devices // 2,
        "max_records_per_client": 12,
        "deadlines": {"checkin": scaled(4.0), "round": scaled(5.0)},
        "secure_aggregation": {"max_session": devices, "min_session_size": 5},
        "label": label,
    }
    t.update(over)
    return t


def _budgets(a: Any) -> None:
    """Budgets for the populations and the operator who runs the tasks (this module's runs only)."""
    for scope, name in (("population", "default"), ("population", "grind20"), ("analyst", "alice")):
        r = a.put(f"/v1/admin/budgets/{scope}/{name}", json={"epsilon": 1e3, "delta": 1e-3})
        assert r.status_code == 200, r.text


def _start(dep: Deployment, a: Any, task: dict[str, Any] | str) -> tuple[str, str]:
    """(task id, run id) of a new run of ``task`` (a task body, or the id of a posted task)."""
    if isinstance(task, dict):
        r = a.post("/v1/admin/tasks", json=dep.sign(task))
        assert r.status_code in (200, 201), r.text
        task = str(r.json()["task_id"])
    r = a.post("/v1/admin/runs", json={"task_id": task})
    assert r.status_code == 201, r.text
    return task, str(r.json()["run_id"])


def _register(devices: list[Any]) -> None:
    """Register every device before the runs exist: the check-in window is then spent checking in."""
    threads = [threading.Thread(target=d.register, daemon=True) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def _drive(devices: list[Any], stop: threading.Event) -> list[threading.Thread]:
    return run_devices(devices, 0.1, 2.0, 120.0, lambda _d: stop.is_set())


def _until(check: Any, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, LOG[-40:]
        time.sleep(0.2)


def _state(dep: Deployment, run_id: str) -> tuple[list[str], list[str], list[list[str]], list[Any]]:
    """A run's members, its withholders, its sessions' members (round 0) and their parameters."""
    store = open_store(dep.db)
    try:
        with store.transaction(read_only=True) as tx:
            members = [m.client_id for m in tx.members_in_order(run_id)]
            withheld = tx.withholders(run_id)
            rows = tx.secure_sessions(run_id, 0)
            sessions = [json.loads(r.members) for r in rows]
            params = [SecAggParameters(**json.loads(r.params)) for r in rows]
    finally:
        store.close()
    return members, withheld, sessions, params


def test_grinding_by_aborts_cannot_isolate_a_victim(production: Deployment) -> None:
    stamp = f"{time.time():.3f}"
    dep = production
    kind = dep.db.split(":")[0]
    honest10, coll10 = _devices(dep, f"g10-{kind}", "default", 7, 3)
    honest20, coll20 = _devices(dep, f"g20-{kind}", "grind20", 16, 4)
    labels = {k: f"{k} {stamp}" for k in ("w10", "w20", "d10")}
    for c in coll10:
        c.withhold, c.drop = frozenset({labels["w10"]}), frozenset({labels["d10"]})
    for c in coll20:
        c.withhold = frozenset({labels["w20"]})
    everyone = [*honest10, *coll10, *honest20, *coll20]
    _register(everyone)
    with dep.admin() as a:
        _budgets(a)
        task_w10, run_w10 = _start(dep, a, _task(labels["w10"], "default", 10))
        _, run_w20 = _start(dep, a, _task(labels["w20"], "grind20", 20))
        # two runs of one task at once, each aborted by the colluders' dropping out after the reveal
        d10 = _task(
            labels["d10"], "default", 10, deadlines={"checkin": scaled(4.0), "round": scaled(3.0)}
        )
        task_d10, run_d1 = _start(dep, a, d10)
        _, run_d2 = _start(dep, a, task_d10)
    stop = threading.Event()
    threads = _drive(everyone, stop)
    try:
        with dep.admin() as a:
            views = {r: wait_run(a, r, timeout=90) for r in (run_w10, run_w20, run_d1, run_d2)}
            # the withholders' seed veto failed: both runs went on without them and released a sum
            for run_id, colluders, n in ((run_w10, coll10, 10), (run_w20, coll20, 20)):
                assert views[run_id]["status"] == "done", (views[run_id], LOG[-40:])
                members, withheld, sessions, params = _state(dep, run_id)
                named = sorted(c.client_id for c in colluders)
                assert withheld == named and set(named) <= set(members)
                assert len(sessions) == 1 and not set(named) & set(sessions[0])
                p = params[0]
                assert p.n == n - len(named) and p.k == p.n - 1  # the complete graph
                need = neighbours_to_isolate(p.n, p.k, p.t, p.min_survivors)
                assert need == p.min_survivors - 1 > len(named)
                assert isolation_probability(p.n, p.k, p.t, p.min_survivors, len(named)) == 0.0
            # the aborted runs: every honest device counted both and refuses a third run of the task
            for run_id in (run_d1, run_d2):
                assert views[run_id]["status"] == "aborted", views[run_id]
                # after the seed (a session of the run's first round lost its quorum: at the masked
                # input, or earlier if honest devices busy with the other runs were late too)
                assert "secure session 0 aborted" in str(views[run_id]["error"]), views[run_id]
            _until(lambda: all(d.budget.aborted_runs(task_d10) == 2 for d in honest10))
            _, run_d3 = _start(dep, a, task_d10)
            _, run_w10b = _start(dep, a, task_w10)  # the withholders' next run of their task
            _until(lambda: all(run_d3 in d.refused for d in honest10))
            _until(lambda: all(run_w10b in c.refused for c in coll10))
            for d in honest10:
                assert "max_aborted_runs" in d.refused[run_d3], d.refused[run_d3]
            members, _, _, _ = _state(dep, run_w10b)
            assert not set(members) & {c.client_id for c in coll10}  # excluded
            for run_id in (run_d3, run_w10b):
                # a run that every device refused has already aborted, naming why (check-in closes
                # once each device checked in or refused); else the operator cancels it
                r = a.post(f"/v1/admin/runs/{run_id}/cancel")
                view = a.get(f"/v1/admin/runs/{run_id}").json()
                assert r.status_code == 200 or (
                    r.status_code == 409
                    and view["status"] == "aborted"
                    and "devices refused" in str(view["error"])
                ), (r.text, view)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for d in everyone:
            d.close()


def test_two_exact_runs_cannot_be_differenced_beyond_the_device_s_policy(
    production: Deployment,
) -> None:
    dep, stamp = production, f"{time.time():.3f}"
    kind = dep.db.split(":")[0]
    # six devices that take exact tasks (allow_non_private), one of them consenting to two runs a task
    devices, consenting = _devices(dep, f"x-{kind}", "default", 5, 0, allow_non_private=True)[0], []
    consenting = _devices(
        dep,
        f"xc-{kind}",
        "default",
        1,
        0,
        allow_non_private=True,
        max_exact_runs_per_task=2,
        max_exact_runs_per_analyst=2,
    )[0]
    everyone = [*devices, *consenting]
    _register(everyone)
    exact = {
        "analysis": "exact-mean",
        "params": {"column": "value", "clip": 1.0},
        "privacy": {"epsilon": None, "population": "default"},
        "cohort_size": 6,
        "min_clients": 1,
        "max_records_per_client": 12,
        "deadlines": {"checkin": scaled(3.0), "round": scaled(20.0)},
        "label": f"exact {stamp}",
    }
    with dep.admin() as a:
        _budgets(a)
        task, run1 = _start(dep, a, exact)
        _, run2 = _start(dep, a, task)  # the same task again: its cohort would differ in nobody
        _, run3 = _start(dep, a, {**exact, "label": f"exact other {stamp}"})  # same analyst
    stop = threading.Event()
    threads = _drive(everyone, stop)
    try:
        with dep.admin() as a:
            views = {r: wait_run(a, r, timeout=60) for r in (run1, run2, run3)}
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for d in everyone:
            d.close()
    members = {r: set(_state(dep, r)[0]) for r in (run1, run2, run3)}
    for d in devices:  # one exact release of this analyst's, whichever run came first
        joined = [r for r in (run1, run2, run3) if d.client_id in members[r]]
        assert len(joined) == 1, (d.client_id, joined, d.refused)
        assert d.budget.exact_runs(analyst="analyst-default") == 1
        refused = " ".join(d.refused.get(r, "") for r in (run1, run2, run3))
        assert "max_exact_runs" in refused, d.refused
    (c,) = consenting  # consent is the device's: two runs, of either task
    assert sum(c.client_id in members[r] for r in (run1, run2, run3)) == 2
    # no two released runs differ in only one device of the default policy: each such device is in one
    for r in (run1, run2, run3):
        if views[r]["status"] == "done":
            assert members[r], r
