"""End to end: a real ``fedstats server`` process and real client processes on 127.0.0.1.

Each analysis runs over the network and is compared with the same protocol run in process by the engine:
exact sums are equal; private estimates lie within 4 standard errors of the in-process exact value (a
bound that a correct run exceeds with probability below 1e-4).

The tests of what the store must do (a refused request stores nothing and burns its nonce once, a cut
upload stores nothing, the ledger's arithmetic) run on SQLite and on PostgreSQL (``deployment``; PostgreSQL
skipped only when no PostgreSQL server answers at 127.0.0.1:5432, outside CI). The runs of every analysis,
the dropouts, the long poll and the restarts from the journal run on one server on the production store,
PostgreSQL (``production``): they test the protocol between devices and server processes, which no store
query decides, and the store's own semantics are the parity class's (tests/service/test_service_state.py).
"""

from __future__ import annotations

import json
import math
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy import select

from deadlines import scaled
from fedstats.engine import Engine, InMemoryPopulation
from fedstats.randomness import RandomSource
from fedstats.service.store import open_store
from fedstats.service.store.tables import Audit, LedgerCharge, Report, RoundRecord
from fedstats.wire.registry import plan_for
from service_helpers import (
    Deployment,
    free_port,
    wait_run,
    write_shards,
)

N_RECORDS = 600
N_PROCS = 3
DIM = 4


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20261123)
    group = rng.integers(0, 2, N_RECORDS)
    value = np.clip(np.where(group == 0, 0.6, 0.1) + 0.3 * rng.standard_normal(N_RECORDS), -1, 1)
    x = np.clip(rng.uniform(0.2, 0.8, (N_RECORDS, DIM)) + 0.1 * group[:, None], 0, 1)
    return {"group": group, "value": value, "x": x}


TASKS: dict[str, dict[str, Any]] = {
    "exact-mean": {
        "analysis": "exact-mean",
        "params": {"column": "value", "clip": 1.0, "frac_bits": 20},
        "privacy": {"epsilon": None, "population": "default"},
    },
    "bitpushing-mean": {
        "analysis": "bitpushing-mean",
        "params": {
            "column": "value",
            "low": -1.0,
            "high": 1.0,
            "resolution": 1 / 64,
            "method": "adaptive",
        },
        "privacy": {"epsilon": 2.0, "population": "default"},
    },
    "bitpushing-onebit": {
        "analysis": "bitpushing-mean",
        "params": {
            "column": "value",
            "low": -1.0,
            "high": 1.0,
            "resolution": 1 / 64,
            "method": "weighted",
        },
        "privacy": {"epsilon": 2.0, "population": "default"},
    },
    "bitpushing-variance": {
        "analysis": "bitpushing-variance",
        "params": {
            "column": "value",
            "low": -1.0,
            "high": 1.0,
            "resolution": 1 / 64,
            "method": "weighted",
            "mean_fraction": 0.3,
        },
        "privacy": {"epsilon": 2.0, "population": "default"},
    },
    "performance-gap": {
        "analysis": "performance-gap",
        "params": {"mechanism": "R"},
        "privacy": {"epsilon": 3.0, "population": "default"},
    },
    "performance-gap-laplace": {
        "analysis": "performance-gap",
        "params": {"mechanism": "L"},
        "privacy": {"epsilon": 3.0, "population": "default"},
    },
    "heterogeneity": {
        "analysis": "heterogeneity",
        "params": {"dim": DIM, "statistic": "dispersion"},
        "privacy": {"epsilon": 3.0, "delta": 1e-6, "population": "default"},
        # distributed noise shares are private only inside the secure sum
        "secure_aggregation": {"max_session": N_PROCS, "min_session_size": N_PROCS},
    },
}


def _task(name: str, **over: Any) -> dict[str, Any]:
    t = dict(TASKS[name])
    t.update(  # cohort_size and min_clients count devices; each holds N_RECORDS / N_PROCS records
        cohort_size=N_PROCS,
        min_clients=2,
        max_records_per_client=N_RECORDS // N_PROCS,
        deadlines={"checkin": scaled(150.0), "round": scaled(150.0)},
        label=f"{name} {time.time()}",
    )
    t.update(over)
    return t


def _in_process(name: str, data: dict[str, np.ndarray], private: bool = True) -> Any:
    t = TASKS[name]
    eps = t["privacy"]["epsilon"] if private else None
    params = dict(t["params"])
    if name.startswith("performance-gap") and not private:
        return float(
            data["value"][data["group"] == 0].mean() - data["value"][data["group"] == 1].mean()
        )
    task = {
        "analysis": t["analysis"],
        "version": 1,
        "params": params,
        "privacy": {"epsilon": eps, "delta": t["privacy"].get("delta") if private else None},
    }
    gen = plan_for(task, n_clients=N_RECORDS, public_seed=_plan_seed(RandomSource(5)))
    return Engine(randomness=RandomSource(6)).run(gen, InMemoryPopulation(data))


def _plan_seed(randomness: RandomSource) -> bytes:
    """A plain run's 32-byte public seed, drawn from ``randomness`` (replays give the same rounds)."""
    return bytes(randomness.public("plan", "seed").integers(0, 256, size=32).tolist())


def _exact_mean(values: np.ndarray) -> Any:
    """The exact-mean task's protocol run in process on ``values`` (one record each)."""
    task = {
        "analysis": "exact-mean",
        "version": 1,
        "params": TASKS["exact-mean"]["params"],
        "privacy": {"epsilon": None, "delta": None},
    }
    return Engine().run(
        plan_for(task, n_clients=len(values), public_seed=_plan_seed(RandomSource())),
        InMemoryPopulation({"value": values}),
    )


def prepare_deployment(dep: Deployment) -> None:
    """Budgets for the module's runs (the ``deployment`` fixture of tests/conftest.py calls it)."""
    with dep.admin() as a:
        assert (
            a.put(
                "/v1/admin/budgets/population/default", json={"epsilon": 100.0, "delta": 1e-3}
            ).status_code
            == 200
        )
        assert (
            a.put(
                "/v1/admin/budgets/analyst/alice", json={"epsilon": 100.0, "delta": 1e-3}
            ).status_code
            == 200
        )


def _clients(dep: Deployment, shards: list[Path], tag: str, runs: int) -> list[Any]:
    return [
        dep.start_client(
            f"{tag}-{i}",
            p,
            "--allow-non-private",
            "--runs",
            str(runs),
            "--max-seconds",
            "300",
            "--seed",
            str(100 + i),
            "--budget-epsilon",
            "100",
            "--budget-delta",
            "0.001",
            # the heterogeneity task's secure sessions have N_PROCS devices (the default floor is 10)
            "--min-session-size",
            str(N_PROCS),
        )
        for i, p in enumerate(shards)
    ]


def test_every_analysis_matches_the_in_process_engine(production: Deployment) -> None:
    data = _data()
    shards = write_shards(production.root, data, N_PROCS)
    # clients first: on a loaded machine a client process needs seconds to start; they poll meanwhile
    procs = _clients(production, shards, "all", len(TASKS))
    with production.admin() as a:
        run_ids = {}
        for name in TASKS:
            r = a.post("/v1/admin/tasks", json=production.sign(_task(name)))
            assert r.status_code == 201, r.text
            r = a.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]})
            assert r.status_code == 201, r.text
            run_ids[name] = r.json()["run_id"]
        try:
            results = {name: wait_run(a, rid, scaled(240)) for name, rid in run_ids.items()}
        finally:
            for p in procs:
                p.kill()
                p.wait()
    for name, res in results.items():
        assert res["status"] == "done", (name, res["error"])
        assert res["n_clients"] == N_RECORDS and res["devices"] == N_PROCS
    # exact sums: the same number as the engine in process
    exact = _in_process("exact-mean", data)
    assert results["exact-mean"]["result"]["estimate"] == exact.estimate
    assert results["exact-mean"]["result"]["n_clients"] == N_RECORDS
    # the result states what it stands on: devices, records and the per-device cap
    assert results["exact-mean"]["result"]["n_devices"] == N_PROCS
    assert results["exact-mean"]["result"]["n_records"] == N_RECORDS
    assert results["exact-mean"]["result"]["max_records_per_client"] == N_RECORDS // N_PROCS
    # adaptive bit pushing ran two rounds, weighted one; both within 4 SE of the exact mean
    assert len(results["bitpushing-mean"]["rounds"]) == 2
    assert len(results["bitpushing-onebit"]["rounds"]) == 1
    truth_mean = float(data["value"].mean())
    for name in ("bitpushing-mean", "bitpushing-onebit"):
        r = results[name]["result"]
        assert abs(r["estimate"] - truth_mean) <= 4 * r["standard_error"], name
    var = results["bitpushing-variance"]["result"]
    assert len(results["bitpushing-variance"]["rounds"]) == 2  # mean stage, then squared deviations
    assert abs(var["estimate"] - float(data["value"].var())) <= 4 * var["standard_error"]
    truth_gap = _in_process("performance-gap", data, private=False)
    for name, mech in (("performance-gap", "R"), ("performance-gap-laplace", "L")):
        gap = results[name]["result"]
        assert gap["mechanism"] == mech, name
        assert abs(gap["estimate"] - truth_gap) <= 4 * gap["standard_error"], name
    het = results["heterogeneity"]["result"]
    truth_disp = _in_process("heterogeneity", data, private=False).dispersion.estimate
    # the interval is a 95% one (a correct run misses it 1 time in 20): the test uses 4 SE like the others
    disp = het["dispersion"]
    assert disp["interval"][0] <= disp["estimate"] <= disp["interval"][1]
    assert abs(disp["estimate"] - truth_disp) <= 4 * disp["standard_error"]
    assert het["secure"] is True and het["noise"] == "distributed"
    # the ledger charged each private run exactly once, and spent it
    store = open_store(production.db, migrate=False)
    with store.session() as s:
        for name, rid in run_ids.items():
            charges = (
                s.execute(select(LedgerCharge).where(LedgerCharge.run_id == rid)).scalars().all()
            )
            if TASKS[name]["privacy"]["epsilon"] is None:
                assert charges == []
            else:
                assert [c.status for c in charges] == ["spent"]
    store.close()


def test_server_sigkilled_in_each_round_completes_with_one_charge(production: Deployment) -> None:
    data = _data()
    shards = write_shards(production.root, data, N_PROCS)
    with production.admin() as a:
        r = a.post("/v1/admin/tasks", json=production.sign(_task("heterogeneity")))
        rid = a.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]}).json()["run_id"]
    production.kill()
    production.start(crash_after="journaled:0")
    procs = _clients(production, shards, "crash", 1)
    try:
        for nxt in ("journaled:1", None):
            assert production.proc is not None
            production.proc.wait(
                scaled(240)
            )  # killed itself with SIGKILL right after journaling the round
            assert production.proc.returncode == -9
            production.start(crash_after=nxt)
        with production.admin() as a:
            res = wait_run(a, rid, scaled(240))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert res["status"] == "done", res["error"]
    store = open_store(production.db, migrate=False)
    with store.session() as s:
        charges = s.execute(select(LedgerCharge).where(LedgerCharge.run_id == rid)).scalars().all()
        spends = (
            s.execute(
                select(Audit).where(Audit.run_id == rid, Audit.action.in_(("spend", "release")))
            )
            .scalars()
            .all()
        )
        rounds = s.execute(select(RoundRecord).where(RoundRecord.run_id == rid)).scalars().all()
    assert [c.status for c in charges] == ["spent"]
    assert [a_.action for a_ in spends] == [
        "spend",
        "release",
    ]  # one spend, one release of a result
    assert [r_.status for r_ in rounds] == ["closed", "closed"]
    # the same result as replaying the journal from scratch (nothing was drawn a second time)
    from fedstats.service.domain.driver import Driver

    with store.transaction(read_only=True) as tx:
        run = tx.run(rid)
        assert run is not None
        replayed = Driver(store)._rebuild(tx, run)
    assert (
        json.loads(json.dumps(replayed.value.to_dict(), default=str))["estimate"]
        == res["result"]["estimate"]
    )
    store.close()


def test_two_servers_one_killed_mid_run_the_other_takes_over(production: Deployment) -> None:
    """Scale-out: two server processes on one PostgreSQL database. A claims the run's lease and dies
    (SIGKILL) right after journaling round 0; B, whose clients report through it all along, takes the
    lease over once it expires, rebuilds the run from the journal and finishes it: each round journaled
    once, one ledger charge, one release, and the estimate within 4 SE of the truth."""
    if not production.db.startswith("postgresql"):
        pytest.skip("scale-out (several server processes) needs the production store, PostgreSQL")

    data = _data()
    shards = write_shards(production.root, data, N_PROCS)
    lease = ["--lease-seconds", "6"]  # long enough that a loaded machine never lets A's lease lapse
    # A on a port of its own, B on the module server's port: B stays the module's server afterwards (an
    # ordinary server; its shorter lease and name matter only beside another process), which saves the
    # restart of one more server process at the end
    production.kill()
    port_a = free_port()
    proc_a = production.spawn(port_a, *lease, "--server-id", "server-a", crash_after="journaled:0")
    with httpx.Client(
        base_url=f"https://127.0.0.1:{port_a}",
        verify=ssl.create_default_context(cafile=str(production.certs["ca"])),
        headers={"Authorization": f"Bearer {production.token}"},
        timeout=30,
    ) as a:
        r = a.post("/v1/admin/tasks", json=production.sign(_task("heterogeneity")))
        rid = a.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]}).json()["run_id"]
    store = open_store(production.db, migrate=False)
    from fedstats.service.store.tables import Run

    deadline = time.monotonic() + scaled(60)
    while True:  # A's driver claims the run on its next pass
        with store.session() as s:
            got = s.get(Run, rid)
            assert got is not None
            if got.lease_owner == "server-a":
                break
        assert time.monotonic() < deadline, "server A never claimed the run"
        time.sleep(0.1)
    production.start(*lease, "--server-id", "server-b")
    url_b = production.url
    procs = [
        production.start_client(
            f"scale-{i}",
            p,
            "--allow-non-private",
            "--runs",
            "1",
            "--max-seconds",
            "300",
            "--seed",
            str(300 + i),
            "--budget-epsilon",
            "100",
            "--budget-delta",
            "0.001",
            "--min-session-size",
            str(N_PROCS),
            url=url_b,
        )
        for i, p in enumerate(shards)
    ]
    try:
        proc_a.wait(scaled(240))  # A killed itself right after journaling round 0
        assert proc_a.returncode == -9
        with production.admin() as b:
            res = wait_run(b, rid, scaled(240))
    finally:
        for p in procs:
            p.kill()
            p.wait()
        if proc_a.poll() is None:
            proc_a.kill()
            proc_a.wait()
        if production.proc is None or production.proc.poll() is not None:
            production.start()  # the module's other tests go on with a server
    assert res["status"] == "done", res["error"]
    with store.session() as s:
        run = s.get(Run, rid)
        assert run is not None and run.lease_owner == "server-b"
        charges = s.execute(select(LedgerCharge).where(LedgerCharge.run_id == rid)).scalars().all()
        actions = (
            s.execute(
                select(Audit.action).where(
                    Audit.run_id == rid, Audit.action.in_(("spend", "release"))
                )
            )
            .scalars()
            .all()
        )
        rounds = s.execute(select(RoundRecord).where(RoundRecord.run_id == rid)).scalars().all()
    store.close()
    assert [c.status for c in charges] == ["spent"]
    assert sorted(actions) == ["release", "spend"]
    assert [r_.status for r_ in rounds] == ["closed", "closed"]
    truth = _in_process("heterogeneity", data, private=False).dispersion.estimate
    disp = res["result"]["dispersion"]
    assert abs(disp["estimate"] - truth) <= 4 * disp["standard_error"]


def test_forged_replayed_and_oversized_requests_are_refused(deployment: Deployment) -> None:
    import httpx

    from fedstats.client import Device
    from fedstats.wire import auth

    ident = json.loads(deployment.identity("forger").read_text())
    dev = Device(deployment.url, ident, {"value": np.zeros(3)}, ca=deployment.certs["ca"])
    dev.register()
    key = auth.private_key_from_hex(ident["private_key"])
    body = json.dumps({"vector": [1, 1], "count": 1}).encode()
    path = "/v1/client/runs/nope/rounds/0/report"
    http = httpx.Client(
        base_url=deployment.url,
        verify=ssl.create_default_context(cafile=str(deployment.certs["ca"])),
    )
    store = open_store(deployment.db, migrate=False)

    def n_reports() -> int:
        with store.session() as s:
            return len(
                s.execute(select(Report).where(Report.client_id == "forger")).scalars().all()
            )

    # wrong signature (signed by another key)
    other = auth.private_key_from_hex("11" * 32)
    h = auth.sign_request(other, "forger", "POST", path, body)
    assert http.post(path, content=body, headers=h).status_code == 401
    # unknown client
    h = auth.sign_request(key, "nobody", "POST", path, body)
    assert http.post(path, content=body, headers=h).status_code == 401
    # tampered body
    h = auth.sign_request(key, "forger", "POST", path, body)
    assert http.post(path, content=body + b" ", headers=h).status_code == 401
    # a valid signed request, then the same bytes again: the replay is refused
    reg = json.dumps({"certificate": ident["certificate"]}).encode()
    h = auth.sign_request(key, "forger", "POST", "/v1/client/register", reg)
    h["content-type"] = "application/json"
    assert http.post("/v1/client/register", content=reg, headers=h).status_code == 200
    assert http.post("/v1/client/register", content=reg, headers=h).status_code == 401
    # oversized body
    big = b"[" + b"1," * (1 << 20) + b"1]"
    h = auth.sign_request(key, "forger", "POST", path, big)
    assert http.post(path, content=big, headers=h).status_code == 413
    # missing or bad operator token
    assert (
        http.post("/v1/admin/tasks", json=deployment.sign(_task("exact-mean"))).status_code == 401
    )
    assert http.get("/v1/admin/runs/x", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert n_reports() == 0
    dev.close()
    http.close()
    store.close()


def test_budget_refusal_says_spent_requested_remaining(deployment: Deployment) -> None:
    with deployment.admin() as a:
        assert (
            a.put(
                "/v1/admin/budgets/population/small", json={"epsilon": 1.0, "delta": 0.0}
            ).status_code
            == 200
        )
        t = _task("bitpushing-onebit", privacy={"epsilon": 0.6, "population": "small"})
        tid = a.post("/v1/admin/tasks", json=deployment.sign(t)).json()["task_id"]
        assert a.post("/v1/admin/runs", json={"task_id": tid}).status_code == 201
        r = a.post("/v1/admin/runs", json={"task_id": tid})
        assert r.status_code == 409
        msg = r.json()["detail"]
        assert (
            "spent epsilon=0.6" in msg
            and "requested epsilon=0.6" in msg
            and "remaining epsilon=0.4" in msg
        )
        b = a.get("/v1/admin/budgets/population/small").json()
        assert math.isclose(b["spent_epsilon"], 0.6) and b["charges"] == 1


def _devices(deployment: Deployment, tag: str, values: np.ndarray, n: int) -> list[Any]:
    from fedstats.client import Device, LocalBudget, Policy

    out = []
    for i, part in enumerate(np.array_split(values, n)):
        ident = json.loads(deployment.identity(f"{tag}-{i}").read_text())
        out.append(
            Device(
                deployment.url,
                ident,
                {"value": part},
                ca=deployment.certs["ca"],
                policy=Policy(allow_non_private=True),
                budget=LocalBudget(None, epsilon=100.0),
                randomness=RandomSource(i),
            )
        )
    return out


@pytest.mark.parametrize("min_clients", [2, 3])
def test_a_device_that_crashes_after_checkin_is_a_dropout(
    production: Deployment, min_clients: int
) -> None:
    """Three devices check in; one never reports (crashed). Above the minimum the round closes at its
    deadline with the others' exact sum; below it the run aborts, releases nothing and gives the charge back."""
    values = _data()["value"]
    devs = _devices(production, f"drop{min_clients}", values, 3)
    for d in devs:
        d.register()
    name = "exact-mean" if min_clients == 2 else "bitpushing-onebit"
    task = _task(
        name, min_clients=min_clients, deadlines={"checkin": scaled(60.0), "round": scaled(2.0)}
    )
    with production.admin() as a:
        tid = a.post("/v1/admin/tasks", json=production.sign(task)).json()["task_id"]
        rid = a.post("/v1/admin/runs", json={"task_id": tid}).json()["run_id"]
        for d in devs:  # every device checks in
            d.step()
        deadline = time.monotonic() + scaled(60)
        while time.monotonic() < deadline:
            for d in devs[:2]:  # the third device crashed: it never polls again
                d.step()
            view = a.get(f"/v1/admin/runs/{rid}").json()
            if view["status"] in ("done", "aborted"):
                break
            time.sleep(0.1)
    for d in devs:
        d.close()
    kept = np.concatenate(np.array_split(values, 3)[:2])
    if min_clients == 2:
        assert view["status"] == "done", view["error"]
        assert (
            view["rounds"][0]["records_expected"] == 600
            and view["rounds"][0]["records_summed"] == 400
        )
        exact = _exact_mean(kept)
        assert view["result"]["estimate"] == exact.estimate
        # a retried upload (fresh signature, same report) is acknowledged and counted once; the same
        # signed request replayed is refused
        import httpx

        from fedstats.wire import auth

        store = open_store(production.db, migrate=False)
        with store.session() as s:
            rep = s.execute(
                select(Report).where(Report.run_id == rid, Report.client_id == "drop2-0")
            ).scalar_one()
        ident = json.loads((production.root / "ids" / "drop2-0.json").read_text())
        key = auth.private_key_from_hex(ident["private_key"])
        path = f"/v1/client/runs/{rid}/rounds/0/report"
        body = json.dumps({"vector": json.loads(rep.vector), "count": rep.count}).encode()
        h = auth.sign_request(key, "drop2-0", "POST", path, body)
        with httpx.Client(
            base_url=production.url,
            verify=ssl.create_default_context(cafile=str(production.certs["ca"])),
        ) as http:
            r = http.post(path, content=body, headers=h)
            assert r.status_code == 200 and r.json() == {"accepted": True, "duplicate": True}
            assert http.post(path, content=body, headers=h).status_code == 401
        with store.session() as s:
            n = len(s.execute(select(Report).where(Report.run_id == rid)).scalars().all())
        store.close()
        assert n == 2
    else:
        assert view["status"] == "aborted" and view["result"] is None
        assert "fewer than the" in view["error"]
        store = open_store(production.db, migrate=False)
        with store.session() as s:
            charge = s.execute(select(LedgerCharge).where(LedgerCharge.run_id == rid)).scalar_one()
        store.close()
        assert charge.status == "released"


def test_client_process_killed_after_checkin(production: Deployment) -> None:
    """A real client process is SIGKILLed after it checked in (the cohort still open); the round closes at
    its deadline with the other processes' exact sum."""
    data = _data()
    shards = write_shards(production.root, {"value": data["value"]}, 3)
    task = _task(
        "exact-mean", min_clients=2, deadlines={"checkin": scaled(150.0), "round": scaled(3.0)}
    )
    with production.admin() as a:
        tid = a.post("/v1/admin/tasks", json=production.sign(task)).json()["task_id"]
        rid = a.post("/v1/admin/runs", json={"task_id": tid}).json()["run_id"]
        procs = _clients(production, shards[:2], "kill", 1)
        try:
            deadline = time.monotonic() + scaled(150)
            while a.get(f"/v1/admin/runs/{rid}").json()["devices"] < 2:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            procs[1].kill()  # checked in, never reports
            procs[1].wait()
            procs.append(_clients(production, shards[2:], "kill-late", 1)[0])
            view = wait_run(a, rid, scaled(240))
        finally:
            for p in procs:
                p.kill()
                p.wait()
    assert view["status"] == "done", view["error"]
    assert view["devices"] == 3 and view["rounds"][0]["records_summed"] == 400
    kept = np.concatenate([pd_values(shards[0]), pd_values(shards[2])])
    exact = _exact_mean(kept)
    assert view["result"]["estimate"] == exact.estimate


def pd_values(path: Path) -> np.ndarray:
    import pandas as pd

    return pd.read_csv(path)["value"].to_numpy()


def test_upload_cut_mid_body_stores_nothing_and_the_retry_counts_once(
    deployment: Deployment,
) -> None:
    """A device is killed while its report is on the wire (headers and half the body sent, then the
    connection drops): the server stores nothing and does not burn the request's nonce; the device's
    retry of the same signed request is accepted once, and the run releases the exact sum of both devices."""
    import socket

    import httpx

    from fedstats import wire
    from fedstats.engine.rounds import ClientBatch, Round
    from fedstats.wire import auth
    from fedstats.wire.registry import resolve_encoder

    values = _data()["value"][:40]
    devs = _devices(deployment, "cut", values, 2)
    for d in devs:
        d.register()
    task = _task(
        "exact-mean",
        cohort_size=2,
        min_clients=2,
        max_records_per_client=20,
        deadlines={"checkin": scaled(60), "round": scaled(60)},
    )
    ident = json.loads((deployment.root / "ids" / "cut-1.json").read_text())
    key = auth.private_key_from_hex(ident["private_key"])
    ctx = ssl.create_default_context(cafile=str(deployment.certs["ca"]))
    store = open_store(deployment.db, migrate=False)

    def n_reports(rid: str) -> int:
        with store.session() as s:
            q = select(Report).where(Report.run_id == rid, Report.client_id == "cut-1")
            return len(s.execute(q).scalars().all())

    with deployment.admin() as a, httpx.Client(base_url=deployment.url, verify=ctx) as http:
        tid = a.post("/v1/admin/tasks", json=deployment.sign(task)).json()["task_id"]
        rid = a.post("/v1/admin/runs", json={"task_id": tid}).json()["run_id"]
        deadline = time.monotonic() + scaled(60)
        while a.get(f"/v1/admin/runs/{rid}").json()["devices"] < 2:  # both check in
            assert time.monotonic() < deadline
            for d in devs:
                d.step()
        rnd: dict[str, Any] = {}
        while not rnd:  # device 1 fetches its round by hand
            assert time.monotonic() < deadline
            h = auth.sign_request(key, "cut-1", "GET", "/v1/client/work", b"")
            rounds = http.get("/v1/client/work", headers=h).json()["rounds"]
            rnd = rounds[0] if rounds else {}
            time.sleep(0.05)
        fn = resolve_encoder(rnd["encode"], rnd["analysis"], rnd["version"])
        lo, hi = rnd["records"]
        spec = Round(
            rnd["name"], fn, wire.decode(rnd["params"]), dim=rnd["dim"], bound=rnd["bound"]
        )
        rep = spec.encode_checked(
            ClientBatch({"value": values[lo:hi]}, start=lo, total=rnd["n_clients"]),
            RandomSource(1).generator("c"),
        )
        path = f"/v1/client/runs/{rid}/rounds/{rnd['round']}/report"
        body = json.dumps({"vector": [int(x) for x in rep.sum(axis=0)], "count": hi - lo}).encode()
        h = auth.sign_request(key, "cut-1", "POST", path, body)
        h["content-type"] = "application/json"
        head = "".join(f"{k}: {v}\r\n" for k, v in h.items())
        raw = (
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {len(body)}\r\n{head}\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", deployment.port), timeout=scaled(10)) as sock:
            with ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
                tls.sendall(raw + body[: len(body) // 2])  # ... and the device dies here
        time.sleep(0.5)
        assert n_reports(rid) == 0
        assert a.get(f"/v1/admin/runs/{rid}").json()["status"] == "running"
        # the device restarts and retries the same signed request: accepted, once
        r = http.post(path, content=body, headers=h)
        assert r.status_code == 200 and r.json()["duplicate"] is False, r.text
        assert http.post(path, content=body, headers=h).status_code == 401  # a replay of it
        assert n_reports(rid) == 1
        while a.get(f"/v1/admin/runs/{rid}").json()["status"] == "running":
            assert time.monotonic() < deadline
            devs[0].step()
            time.sleep(0.05)
        view = a.get(f"/v1/admin/runs/{rid}").json()
    for d in devs:
        d.close()
    store.close()
    assert view["status"] == "done", view["error"]
    assert view["rounds"][0]["records_summed"] == 40
    exact = _exact_mean(values)
    assert view["result"]["estimate"] == exact.estimate


def test_a_long_poll_is_held_until_a_run_of_its_population_changes(production: Deployment) -> None:
    """``GET /v1/client/work?wait=S`` naming the list the device has: 304 after ``S`` seconds when nothing
    changes; a run offered to another population does not wake it; a run offered to its own population
    answers it within seconds, with the offer."""
    from fedstats.client import Device

    ident = json.loads(production.identity("poll-a", "poll-a").read_text())
    # the default policy refuses exact (non-private) tasks: the device never checks in
    dev = Device(production.url, ident, {"value": np.zeros(3)}, ca=production.certs["ca"])
    dev.register()
    dev.step()  # the list it has now (and its ETag)

    created: dict[str, float] = {}  # run id -> when its POST returned (time.monotonic())

    def offer_later(population: str, box: list[str]) -> threading.Thread:
        def go() -> None:
            time.sleep(0.5)  # the device's held poll is in by then
            task = _task("exact-mean", privacy={"epsilon": None, "population": population})
            with production.admin() as a:
                tid = a.post("/v1/admin/tasks", json=production.sign(task)).json()["task_id"]
                box.append(a.post("/v1/admin/runs", json={"task_id": tid}).json()["run_id"])
            created[box[-1]] = time.monotonic()

        t = threading.Thread(target=go)
        t.start()
        return t

    try:
        t0 = time.monotonic()
        assert dev.step(wait=1.5)["offers"] == []  # nothing new: held, then 304
        assert time.monotonic() - t0 >= 1.2
        other: list[str] = []
        t = offer_later("poll-b", other)
        t0 = time.monotonic()
        assert dev.step(wait=3.0)["offers"] == []  # another population's run: still held to the end
        waited = time.monotonic() - t0
        t.join()
        assert other and waited >= 2.7, waited
        # the other population's run was offered while the poll was held (it did not wake it)
        assert created[other[0]] < t0 + waited, (created[other[0]] - t0, waited)
        own: list[str] = []
        t = offer_later("poll-a", own)
        t0 = time.monotonic()
        work = dev.step(wait=20.0)
        waited = time.monotonic() - t0
        t.join()
        assert [o["run_id"] for o in work["offers"]] == own, work
        assert waited < 10.0, waited  # woken by the offer (about 0.5 s), not by the end of the wait
    finally:
        dev.close()
