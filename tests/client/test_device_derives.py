"""Unmodified devices against a server that deviates, over the real HTTP API (on PostgreSQL, the production
store: the ``production`` fixture).

The server proposes; the device derives. A real ``fedstats server`` process runs the task; a proxy in front
of it (:class:`deviating_server.DeviatingProxy`) rewrites what the server tells the devices, as a server
that deviates would: a swapped encoder, a removed epsilon, a changed public parameter, a round beyond the
plan, a round of another run or of another task, an unsigned task, an altered task, a task signed under a
key the authority did not certify. Each time every device refuses: it records the reason, **uploads
nothing** (no report row, no report request) and **charges nothing** on its own budget (a reservation made
at check-in is given back). The same runs without the proxy's rewrite complete (the control case), so the
refusals are the rewrites' doing.

One store suffices: what is tested is the device's derivation and refusals and the server's checks of a
task's signature, which no store query decides; the store's own semantics are the parity class's
(tests/service/test_service_state.py::TestStateParity, on the memory state, SQLite and PostgreSQL).
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from deviating_server import DeviatingProxy
from fedstats import wire
from fedstats.client import Device, LocalBudget, Policy
from fedstats.errors import SecurityError
from fedstats.randomness import RandomSource
from fedstats.service.store import open_store
from fedstats.service.store.tables import Report, RunMember
from fedstats.wire.enrollment import init_authority, issue_analyst
from fedstats.wire.tasks import sign_task, task_id
from service_helpers import Deployment

N = 40  # records, over two devices
EXACT_ENCODER = "fedstats.analyses.exact.client:encode_value"


@pytest.fixture(scope="module")
def proxy(production: Deployment) -> Iterator[DeviatingProxy]:
    with DeviatingProxy(production.url, production.certs["ca"]) as p:
        yield p


def _task(population: str, **over: Any) -> dict[str, Any]:
    t: dict[str, Any] = {
        "analysis": "bitpushing-mean",
        "params": {
            "column": "value",
            "low": -1.0,
            "high": 1.0,
            "resolution": 1 / 64,
            "method": "weighted",
        },
        "privacy": {"epsilon": 1.0, "population": population},
        "cohort_size": 2,  # devices
        "min_clients": 2,
        "max_records_per_client": N // 2,
        "deadlines": {"checkin": 30.0, "round": 2.0},
        "label": f"derive {population} {time.time()}",
    }
    t.update(over)
    return t


def _setup(production: Deployment, proxy: DeviatingProxy, population: str) -> list[Device]:
    """Two devices of a fresh population behind the proxy, and budgets for it."""
    with production.admin() as a:
        for scope, name in (("population", population), ("analyst", "alice")):
            r = a.put(f"/v1/admin/budgets/{scope}/{name}", json={"epsilon": 1000.0, "delta": 0.01})
            assert r.status_code == 200, r.text
    values = np.random.default_rng(7).uniform(-1, 1, N)
    devices = []
    for i, part in enumerate(np.array_split(values, 2)):
        ident = json.loads(production.identity(f"{population}-{i}", population).read_text())
        dev = Device(
            proxy.url,
            ident,
            {"value": part},
            policy=Policy(max_epsilon=4.0),
            budget=LocalBudget(None, epsilon=10.0, delta=1e-4),
            randomness=RandomSource(i),
        )
        dev.register()
        devices.append(dev)
    return devices


def _start(production: Deployment, task: dict[str, Any]) -> tuple[str, str]:
    with production.admin() as a:
        r = a.post("/v1/admin/tasks", json=production.sign(task))
        assert r.status_code == 201, r.text
        tid = r.json()["task_id"]
        r = a.post("/v1/admin/runs", json={"task_id": tid})
        assert r.status_code == 201, r.text
        return tid, str(r.json()["run_id"])


def _poll(devices: list[Device], stop: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not stop():
        assert time.monotonic() < deadline, [d.refused for d in devices]
        for d in devices:
            d.step()
        time.sleep(0.05)


# -- the deviations: each rewrites the work list a device receives -------------------------------------


def _rounds(change: Callable[[dict[str, Any], dict[str, Any]], None]) -> Callable[..., Any]:
    def rewrite(ctx: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def go(work: dict[str, Any]) -> dict[str, Any]:
            for rnd in work["rounds"]:
                if rnd["run_id"] == ctx["run_id"]:
                    change(rnd, ctx)
            return work

        return go

    return rewrite


def _offers(change: Callable[[dict[str, Any], dict[str, Any]], None]) -> Callable[..., Any]:
    def rewrite(ctx: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def go(work: dict[str, Any]) -> dict[str, Any]:
            for offer in work["offers"]:
                if offer["run_id"] == ctx["run_id"]:
                    change(offer, ctx)
            return work

        return go

    return rewrite


def _swap_encoder(rnd: dict[str, Any], ctx: dict[str, Any]) -> None:
    rnd["encode"] = EXACT_ENCODER  # the exact value instead of a randomized bit


def _remove_epsilon(rnd: dict[str, Any], ctx: dict[str, Any]) -> None:
    rnd["privacy"]["epsilon"] = None
    rnd["params"]["epsilon_bit"] = None


def _change_parameter(rnd: dict[str, Any], ctx: dict[str, Any]) -> None:
    rnd["params"]["epsilon_bit"] = 50.0  # the randomized bit almost never flips


def _beyond_the_plan(rnd: dict[str, Any], ctx: dict[str, Any]) -> None:
    rnd["round"] = 1  # a one-round plan, shown a second round (with a made-up first sum)
    total = wire.encode(np.zeros(int(rnd["dim"]), dtype=np.int64))
    rnd["history"] = [{"total": total, "n_clients": N}]


def _other_run(rnd: dict[str, Any], ctx: dict[str, Any]) -> None:
    rnd["run_id"] = ctx["unknown_run"]  # a run whose task the devices never accepted


def _other_task(rnd: dict[str, Any], ctx: dict[str, Any]) -> None:
    rnd["task_id"] = ctx["other_task"]  # the accepted run, now said to run another task


def _unsigned(offer: dict[str, Any], ctx: dict[str, Any]) -> None:
    offer["envelope"] = None


def _altered(offer: dict[str, Any], ctx: dict[str, Any]) -> None:
    env = copy.deepcopy(offer["envelope"])
    env["task"]["params"]["resolution"] = 1 / 2  # one option changed after signing
    offer["envelope"] = env


def _uncertified(offer: dict[str, Any], ctx: dict[str, Any]) -> None:
    offer["envelope"] = ctx["forged_envelope"]  # signed under an authority the devices did not pin
    offer["task_id"] = task_id(ctx["forged_envelope"]["task"])  # the right id: only the CA is wrong


ROUND_CASES = {
    "swapped_encoder": _rounds(_swap_encoder),
    "removed_epsilon": _rounds(_remove_epsilon),
    "changed_parameter": _rounds(_change_parameter),
    "round_beyond_the_plan": _rounds(_beyond_the_plan),
    "round_of_another_run": _rounds(_other_run),
    "round_of_another_task": _rounds(_other_task),
}
OFFER_CASES = {
    "unsigned_task": _offers(_unsigned),
    "altered_task": _offers(_altered),
    "task_of_an_uncertified_key": _offers(_uncertified),
}


EXPECTED = {  # what each refusal says
    "swapped_encoder": "differs from the task's plan in its encode",
    "removed_epsilon": "privacy parameters are not the accepted task's",
    "changed_parameter": "differs from the task's plan in its params",
    "round_beyond_the_plan": "beyond the task's plan",
    "round_of_another_run": "whose task this device did not accept",
    "round_of_another_task": "task changed",
    "unsigned_task": "signed envelope",
    "altered_task": "does not verify",
    "task_of_an_uncertified_key": "untrusted authority",
}


def _context(production: Deployment, population: str, task: dict[str, Any]) -> dict[str, Any]:
    other = _task(population, analysis="exact-mean", params={"column": "value", "clip": 1.0})
    other["privacy"] = {"epsilon": None, "population": population}
    other_task, other_run = _start(
        production, other
    )  # the devices' policy refuses it (not private)
    root = production.root / f"attacker-{uuid.uuid4().hex[:8]}"
    init_authority(root)
    forged = sign_task(task, issue_analyst(root, "mallory", [population], root / "mallory.json"))
    return {
        "other_run": other_run,
        "other_task": other_task,
        "unknown_run": str(uuid.uuid4()),
        "forged_envelope": forged,
    }


def _reports(production: Deployment, run_id: str) -> tuple[int, int]:
    store = open_store(production.db, migrate=False)
    try:
        with store.session() as s:
            reports = s.execute(select(Report).where(Report.run_id == run_id)).scalars().all()
            members = s.execute(select(RunMember).where(RunMember.run_id == run_id)).scalars().all()
        return len(reports), len(members)
    finally:
        store.close()


@pytest.mark.parametrize("case", [*ROUND_CASES, *OFFER_CASES, "control"])
def test_a_device_refuses_what_the_server_changed(
    production: Deployment, proxy: DeviatingProxy, case: str
) -> None:
    population = f"p-{case}-{uuid.uuid4().hex[:6]}"
    devices = _setup(production, proxy, population)
    task = _task(population)
    ctx = _context(production, population, task)
    _, run_id = _start(production, task)
    ctx["run_id"] = run_id
    make = ROUND_CASES.get(case) or OFFER_CASES.get(case)
    proxy.rewrite = None if make is None else make(ctx)
    try:
        if case == "control":
            _poll(
                devices,
                lambda: (
                    all(run_id in d.budget.charges for d in devices) and _done(production, run_id)
                ),
            )
            n_reports, n_members = _reports(production, run_id)
            assert (n_reports, n_members) == (2, 2)
            for d in devices:  # charged exactly the task's loss, once, and spent
                assert d.budget.charges[run_id]["status"] == "spent"
                assert d.budget.charges[run_id]["epsilon"] == 1.0
            return
        # the run a rewritten round claims to be of (the other run for "round_of_another_run")
        target = ctx["unknown_run"] if case == "round_of_another_run" else run_id
        _poll(devices, lambda: all(target in d.refused for d in devices))
        # the run's round (if any) reaches its deadline: the run aborts, and devices see it finished
        if case in ROUND_CASES:
            _poll(devices, lambda: _done(production, run_id))
            # the driver wakes the devices' polls just after it commits the abort: a poll in between
            # may still be answered from the work-list cache, so wait for what devices must end with
            _poll(devices, lambda: all(d.budget.status(run_id) is None for d in devices))
    finally:
        proxy.rewrite = None
        for d in devices:
            d.close()
    n_reports, n_members = _reports(production, run_id)
    assert n_reports == 0  # nothing uploaded ...
    assert proxy.posted(f"/v1/client/runs/{run_id}/rounds") == []
    assert proxy.posted(f"/v1/client/runs/{ctx['unknown_run']}/rounds") == []
    if case in OFFER_CASES:  # ... not even a check-in
        assert n_members == 0 and proxy.posted(f"/v1/client/runs/{run_id}/checkin") == []
    else:
        assert n_members == 2
    for d in devices:  # ... and nothing charged (a reservation made at check-in was given back)
        assert d.budget.charges == {}, d.budget.charges
        assert d.budget.spent() == (0.0, 0.0)
        assert EXPECTED[case] in d.refused[target], (case, d.refused[target])
        assert run_id not in d.accepted or case in ROUND_CASES


def _done(production: Deployment, run_id: str) -> bool:
    with production.admin() as a:
        return a.get(f"/v1/admin/runs/{run_id}").json()["status"] in ("done", "aborted")


def test_the_server_refuses_to_store_an_unsigned_altered_or_uncertified_task(
    production: Deployment,
) -> None:
    task = _task("default")
    good = production.sign(task)
    altered = copy.deepcopy(good)
    altered["task"]["privacy"]["epsilon"] = 3.0
    root = production.root / "attacker-store"
    init_authority(root)
    forged = sign_task(task, issue_analyst(root, "mallory", ["default"], root / "m.json"))
    other_population = sign_task(_task("elsewhere"), production.analyst("elsewhere"))
    other_population["task"]["privacy"]["population"] = "default"
    with production.admin() as a:
        assert a.post("/v1/admin/tasks", json=task).status_code == 422  # unsigned: not an envelope
        assert a.post("/v1/admin/tasks", json=altered).status_code == 403
        assert a.post("/v1/admin/tasks", json=forged).status_code == 403
        assert a.post("/v1/admin/tasks", json=other_population).status_code == 403
        r = a.post("/v1/admin/tasks", json=good)
        assert r.status_code == 201, r.text
        got = a.get(f"/v1/admin/tasks/{r.json()['task_id']}").json()
        assert got["envelope"] == good  # stored and relayed unchanged


def test_a_device_refuses_plain_http_beyond_loopback(production: Deployment) -> None:
    from fedstats.errors import SecurityError

    ident = json.loads(production.identity("tls-check").read_text())
    for url in ("http://example.org:8080", "http://10.1.2.3", "http://[2001:db8::1]:80"):
        with pytest.raises(SecurityError, match="http://"):
            Device(url, ident, {"value": np.zeros(2)})
    for url in ("http://127.0.0.1:9", "http://127.8.0.1", "http://localhost:1", "http://[::1]:9"):
        Device(url, ident, {"value": np.zeros(2)}).close()
    Device("https://example.org", ident, {"value": np.zeros(2)}).close()


def test_a_round_listed_again_is_derived_once_and_a_changed_one_is_checked_again(
    production: Deployment, proxy: DeviatingProxy
) -> None:
    """A device's work list shows a round at every poll (a secure round at every stage): the device
    derives it once and answers the same round again from memory; a round whose checked fields differ
    in anything (a parameter, the history) is derived and compared again, and refused."""
    population = f"p-again-{uuid.uuid4().hex[:6]}"
    devices = _setup(production, proxy, population)
    task = _task(population)
    _, run_id = _start(production, task)
    seen: list[dict[str, Any]] = []

    def keep(work: dict[str, Any]) -> dict[str, Any]:
        seen.extend(copy.deepcopy(r) for r in work["rounds"] if r["run_id"] == run_id)
        return work

    proxy.rewrite = keep
    try:
        _poll(devices, lambda: all((run_id, 0) in d.reported for d in devices))
    finally:
        proxy.rewrite = None
        for d in devices:
            d.close()
    dev = devices[0]
    rnd = next(r for r in seen if r["slot_start"] == dev.joined[run_id]["slot_start"])
    calls: list[int] = []
    inner = dev._derive_checked

    def counted(*args: Any) -> Any:
        calls.append(1)
        return inner(*args)

    dev._derive_checked = counted  # type: ignore[method-assign]
    first = dev._derive(copy.deepcopy(rnd))
    again = dev._derive({**copy.deepcopy(rnd), "deadline": 0.0, "secure": None})
    assert again is first and calls == []  # derived when it was handled: not again
    changed = copy.deepcopy(rnd)
    changed["params"]["epsilon_bit"] = 50.0
    with pytest.raises(SecurityError, match="params"):
        dev._derive(changed)
    assert calls == [1]
    assert dev._derive(copy.deepcopy(rnd)) is first and calls == [1]
