"""The operator API against real server processes (SQLite and PostgreSQL): exactly-once run creation
with ``Idempotency-Key`` (a lost reply plus retries, concurrent retries), paginated lists, run
cancellation, device revocation and re-keying, operator tokens; and the device's ``--runs N`` and
connection-failure exits."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fedstats.client import Device, LocalBudget, Policy
from fedstats.client import _HTTPError as DeviceHTTPError
from fedstats.service.store import open_store
from fedstats.wire.enrollment import issue_identity
from service_helpers import FEDSTATS, Deployment, free_port, pg_reachable

TASK: dict[str, Any] = {
    "analysis": "bitpushing-mean",
    "params": {"column": "value", "low": 0.0, "high": 1.0, "method": "weighted"},
    "privacy": {"epsilon": 0.5, "population": "default"},
    "cohort_size": 50,  # never filled here: runs stay in check-in until cancelled
    "deadlines": {"checkin": 600.0, "round": 60.0},
}


def _task(deployment: Deployment, label: str) -> str:
    with deployment.admin() as a:
        r = a.post("/v1/admin/tasks", json=deployment.sign({**TASK, "label": label}))
        assert r.status_code == 201, r.text
        return str(r.json()["task_id"])


def _budget(deployment: Deployment, epsilon: float) -> None:
    """A fresh population budget of ``epsilon`` (the analyst's is large)."""
    with deployment.admin() as a:
        for scope, name, eps in (("population", "default", epsilon), ("analyst", "alice", 1e5)):
            got = a.get(f"/v1/admin/budgets/{scope}/{name}")
            spent = got.json()["spent_epsilon"] if got.status_code == 200 else 0.0
            r = a.put(
                f"/v1/admin/budgets/{scope}/{name}", json={"epsilon": spent + eps, "delta": 0.0}
            )
            assert r.status_code == 200, r.text


def _runs_of(deployment: Deployment, task_id: str) -> list[dict[str, Any]]:
    with deployment.admin() as a:
        r = a.get("/v1/admin/runs", params={"task_id": task_id, "limit": 500})
        assert r.status_code == 200, r.text
        return list(r.json()["items"])


def _reserved(deployment: Deployment) -> float:
    with deployment.admin() as a:
        return float(a.get("/v1/admin/budgets/population/default").json()["spent_epsilon"])


def _cancel_live(deployment: Deployment) -> None:
    """Cancel every live run (earlier tests' runs would be offered to the devices of the next)."""
    with deployment.admin() as a:
        for status in ("checkin", "seeding", "running"):
            for run in a.get("/v1/admin/runs", params={"status": status, "limit": 500}).json()[
                "items"
            ]:
                a.post(f"/v1/admin/runs/{run['run_id']}/cancel")


def _lost_post(deployment: Deployment, path: str, body: dict[str, Any], key: str) -> None:
    """Send a POST over TLS and hang up without reading the answer (the reply is lost)."""
    raw = json.dumps(body).encode()
    req = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {deployment.token}\r\n"
        f"Idempotency-Key: {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n"
    ).encode() + raw
    ctx = ssl.create_default_context(cafile=str(deployment.certs["ca"]))
    with socket.create_connection(("127.0.0.1", deployment.port), timeout=10) as sock:
        with ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            tls.sendall(req)
    # closed before any byte of the answer was read


def test_a_lost_reply_and_retries_make_one_run_and_one_reservation(deployment: Deployment) -> None:
    _budget(deployment, 10.0)
    tid = _task(deployment, "lost-reply")
    before = _reserved(deployment)
    _lost_post(deployment, "/v1/admin/runs", {"task_id": tid}, "lost-1")
    ids = set()
    with deployment.admin() as a:
        for _ in range(5):
            r = a.post(
                "/v1/admin/runs", json={"task_id": tid}, headers={"Idempotency-Key": "lost-1"}
            )
            assert r.status_code == 201, r.text
            ids.add(r.json()["run_id"])
    assert len(ids) == 1
    assert [x["run_id"] for x in _runs_of(deployment, tid)] == list(ids)
    assert _reserved(deployment) == pytest.approx(before + 0.5)
    # without a key every POST is a new run (so the assertions above can fail)
    with deployment.admin() as a:
        r1 = a.post("/v1/admin/runs", json={"task_id": tid})
        r2 = a.post("/v1/admin/runs", json={"task_id": tid})
    assert r1.json()["run_id"] != r2.json()["run_id"]
    assert len(_runs_of(deployment, tid)) == 3
    assert _reserved(deployment) == pytest.approx(before + 1.5)


def test_concurrent_retries_make_one_run(deployment: Deployment) -> None:
    _budget(deployment, 10.0)
    tid = _task(deployment, "concurrent")
    before = _reserved(deployment)
    barrier = threading.Barrier(8)
    got: list[tuple[int, str, str | None]] = []

    def go() -> None:
        with deployment.admin() as a:
            barrier.wait()
            r = a.post(
                "/v1/admin/runs", json={"task_id": tid}, headers={"Idempotency-Key": "conc-1"}
            )
            got.append(
                (r.status_code, r.json().get("run_id"), r.headers.get("idempotent-replayed"))
            )

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [g[0] for g in got] == [201] * 8
    assert len({g[1] for g in got}) == 1
    assert sum(g[2] == "true" for g in got) == 7  # one write, seven replays
    assert len(_runs_of(deployment, tid)) == 1
    assert _reserved(deployment) == pytest.approx(before + 0.5)


def test_the_same_key_with_another_body_is_a_422(deployment: Deployment) -> None:
    _budget(deployment, 10.0)
    t1, t2 = _task(deployment, "key-a"), _task(deployment, "key-b")
    with deployment.admin() as a:
        r = a.post("/v1/admin/runs", json={"task_id": t1}, headers={"Idempotency-Key": "k-reuse"})
        assert r.status_code == 201
        bad = a.post("/v1/admin/runs", json={"task_id": t2}, headers={"Idempotency-Key": "k-reuse"})
        assert bad.status_code == 422
        assert "Idempotency-Key" in bad.json()["detail"]
        assert _runs_of(deployment, t2) == []
        # a task posted with the key gets its first answer too; a bad key is a 422
        env = deployment.sign({**TASK, "label": "task-key"})
        first = a.post("/v1/admin/tasks", json=env, headers={"Idempotency-Key": "t-1"})
        again = a.post("/v1/admin/tasks", json=env, headers={"Idempotency-Key": "t-1"})
        assert first.status_code == again.status_code == 201
        assert first.json() == again.json() and first.json()["created"] is True
        assert (
            a.post(
                "/v1/admin/runs", json={"task_id": t1}, headers={"Idempotency-Key": "a b"}
            ).status_code
            == 422
        )


def test_lists_are_paginated_and_filtered(deployment: Deployment) -> None:
    _budget(deployment, 10.0)
    tid = _task(deployment, "pages")
    with deployment.admin() as a:
        made = [a.post("/v1/admin/runs", json={"task_id": tid}).json()["run_id"] for _ in range(3)]
        seen: list[str] = []
        offset: int | None = 0
        while offset is not None:
            page = a.get(
                "/v1/admin/runs", params={"task_id": tid, "limit": 2, "offset": offset}
            ).json()
            assert len(page["items"]) <= 2 and page["total"] == 3
            seen += [x["run_id"] for x in page["items"]]
            offset = page["next_offset"]
        assert sorted(seen) == sorted(made)
        assert a.get("/v1/admin/runs", params={"limit": 0}).status_code == 422
        assert a.get("/v1/admin/runs", params={"limit": 501}).status_code == 422
        assert a.get("/v1/admin/runs", params={"status": "nope"}).status_code == 422
        a.post(f"/v1/admin/runs/{made[0]}/cancel")
        aborted = a.get("/v1/admin/runs", params={"task_id": tid, "status": "aborted"}).json()
        assert [x["run_id"] for x in aborted["items"]] == [made[0]]
        tasks = a.get("/v1/admin/tasks", params={"limit": 500}).json()
        assert tid in {t["task_id"] for t in tasks["items"]}
        ops = a.get("/v1/admin/operators").json()
        assert [o["name"] for o in ops["items"]] == ["alice"] and "token" not in str(ops)
        for path in (
            "/v1/admin/runs",
            "/v1/admin/tasks",
            "/v1/admin/devices",
            "/v1/admin/operators",
        ):
            assert (
                httpx.get(
                    deployment.url + path,
                    verify=ssl.create_default_context(cafile=str(deployment.certs["ca"])),
                ).status_code
                == 401
            )


def _device(deployment: Deployment, ident: Path | dict[str, Any], n: int = 1) -> Device:
    return Device(
        deployment.url,
        ident,
        {"value": np.full(n, 0.5)},
        ca=deployment.certs["ca"],
        policy=Policy(max_epsilon=5.0),
        budget=LocalBudget(None, epsilon=1000.0),
    )


def test_cancel_stops_a_live_run_releases_its_reservation_and_devices_see_it_finished(
    deployment: Deployment,
) -> None:
    _budget(deployment, 10.0)
    tid = _task(deployment, "cancel")
    dev = _device(deployment, deployment.identity(f"cancel-{deployment.port}"))
    try:
        dev.register()
        with deployment.admin() as a:
            before = _reserved(deployment)
            rid = a.post("/v1/admin/runs", json={"task_id": tid}).json()["run_id"]
            assert _reserved(deployment) == pytest.approx(before + 0.5)
            dev.step()
            assert rid in dev.joined
            r = a.post(f"/v1/admin/runs/{rid}/cancel")
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "aborted" and r.json()["error"] == "cancelled by alice"
            assert _reserved(deployment) == pytest.approx(before)  # released: no sum was used
            assert a.post(f"/v1/admin/runs/{rid}/cancel").status_code == 409
            assert a.post("/v1/admin/runs/nope/cancel").status_code == 404
            audit = a.get("/v1/admin/audit", params={"run_id": rid}).json()
            assert [x["action"] for x in audit if x["action"] in ("cancel", "release")] == [
                "release",
                "cancel",
            ]
        work = dev.step()
        assert {"run_id": rid, "status": "aborted"} in work["finished"]
        time.sleep(1.5)  # a few driver ticks: nothing revives a cancelled run
        with deployment.admin() as a:
            assert a.get(f"/v1/admin/runs/{rid}").json()["status"] == "aborted"
    finally:
        dev.close()


def test_cancel_after_a_used_sum_keeps_the_charge_spent(deployment: Deployment) -> None:
    """A run whose journal holds a closed round: cancelling it spends the reservation (as _abort)."""
    from fedstats.service.domain import runs
    from fedstats.service.store.tables import LedgerCharge, RoundRecord

    _budget(deployment, 10.0)
    tid = _task(deployment, "cancel-spent")
    with deployment.admin() as a:
        rid = a.post("/v1/admin/runs", json={"task_id": tid}).json()["run_id"]
    store = open_store(deployment.db, migrate=False)
    try:
        with store.session() as s, s.begin():
            s.add(
                RoundRecord(
                    run_id=rid,
                    index=0,
                    name="r0",
                    encode="x",
                    params="{}",
                    params_digest="0",
                    dim=1,
                    bound=1,
                    lo=0,
                    hi=1,
                    status="closed",
                    opened_at=0.0,
                    deadline=0.0,
                    total="[1]",
                    n_clients=1,
                )
            )
        with store.transaction() as tx:
            runs.cancel_run(tx, rid, "bob")
        with store.session() as s:
            from sqlalchemy import select

            status = s.execute(
                select(LedgerCharge.status).where(LedgerCharge.run_id == rid)
            ).scalar()
    finally:
        store.close()
    assert status == "spent"
    with deployment.admin() as a:
        assert a.get(f"/v1/admin/runs/{rid}").json()["error"] == "cancelled by bob"


def test_a_revoked_device_is_refused_and_rekeyed_by_a_new_certificate(
    deployment: Deployment,
) -> None:
    _budget(deployment, 10.0)
    tid = _task(deployment, "revoke")
    cid = f"rev-{deployment.port}"
    old = _device(deployment, deployment.identity(cid))
    new_path = deployment.root / "ids" / f"{cid}-new.json"
    new_ident = issue_identity(deployment.root / "authority", cid, "default", new_path)
    new = _device(deployment, new_path)
    try:
        old.register()
        old.step()
        with deployment.admin() as a:
            listed = a.get("/v1/admin/devices", params={"status": "active", "limit": 500}).json()
            assert cid in {d["client_id"] for d in listed["items"]}
            r = a.post(f"/v1/admin/devices/{cid}/revoke")
            assert r.status_code == 200 and r.json()["status"] == "revoked"
            revoked = a.get("/v1/admin/devices", params={"status": "revoked", "limit": 500}).json()
            assert cid in {d["client_id"] for d in revoked["items"]}
            rid = a.post("/v1/admin/runs", json={"task_id": tid}).json()["run_id"]
        for attempt in (old.step, old.register, new.register):
            with pytest.raises(DeviceHTTPError) as err:
                attempt()
            assert err.value.status == 403
        with deployment.admin() as a:
            assert a.get(f"/v1/admin/runs/{rid}").json()["devices"] == 0
            # a certificate for another device, or none from a trusted authority, is refused
            other = issue_identity(
                deployment.root / "authority", "someone-else", "default", deployment.root / "o.json"
            )
            bad = a.post(
                f"/v1/admin/devices/{cid}/reinstate", json={"certificate": other["certificate"]}
            )
            assert bad.status_code == 403
            r = a.post(
                f"/v1/admin/devices/{cid}/reinstate", json={"certificate": new_ident["certificate"]}
            )
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "active"
            assert r.json()["public_key"] == new_ident["certificate"]["body"]["public_key"]
            assert a.post(f"/v1/admin/devices/{cid}/reinstate").status_code == 409
        with pytest.raises(DeviceHTTPError) as err:
            old.step()  # the old key no longer verifies
        assert err.value.status == 401
        new.register()
        new.step()
        assert rid in new.joined
        with deployment.admin() as a:
            assert a.get(f"/v1/admin/runs/{rid}").json()["devices"] == 1
            a.post(f"/v1/admin/runs/{rid}/cancel")
    finally:
        old.close()
        new.close()


def test_operator_token_rotation_over_the_api(deployment: Deployment) -> None:
    from fedstats.service.domain.operators import add_operator

    store = open_store(deployment.db, migrate=False)
    try:
        name = f"carol-{deployment.port}"
        tok = add_operator(store, name)
    finally:
        store.close()
    verify = ssl.create_default_context(cafile=str(deployment.certs["ca"]))
    with httpx.Client(
        base_url=deployment.url, verify=verify, headers={"Authorization": f"Bearer {tok}"}
    ) as c:
        assert c.get("/v1/admin/runs").status_code == 200
        r = c.post(f"/v1/admin/operators/{name}/rotate")
        assert r.status_code == 200
        fresh = r.json()["token"]
        assert fresh != tok
        assert c.get("/v1/admin/runs").status_code == 401  # the old token stopped working
        assert (
            c.get("/v1/admin/runs", headers={"Authorization": f"Bearer {fresh}"}).status_code == 200
        )


def test_client_run_joins_exactly_n_runs(deployment: Deployment, tmp_path: Path) -> None:
    """Two runs offered at once to a device started with ``--runs 1``: it joins one, leaves when it ends.

    The device's count of its runs, which no store query decides: on the production store only
    (PostgreSQL; SQLite when PostgreSQL is unreachable)."""
    if deployment.db.startswith("sqlite") and pg_reachable() is None:
        pytest.skip("the device side does not depend on the store: run on PostgreSQL")
    _cancel_live(deployment)
    _budget(deployment, 10.0)
    tid = _task(deployment, "runs-n")
    data = tmp_path / "d.csv"
    data.write_text("value\n0.5\n")
    with deployment.admin() as a:
        rids = [a.post("/v1/admin/runs", json={"task_id": tid}).json()["run_id"] for _ in range(2)]
    cid = f"n-{deployment.port}"
    proc = deployment.start_client(cid, data, "--runs", "1", "--wait", "1", "--max-epsilon", "5")
    try:
        deadline = time.monotonic() + 60
        members: list[int] = [0, 0]
        with deployment.admin() as a:
            while time.monotonic() < deadline and sum(members) == 0:
                members = [a.get(f"/v1/admin/runs/{r}").json()["devices"] for r in rids]
                time.sleep(0.2)
            time.sleep(1.5)  # several polls: a second check-in would show now
            members = [a.get(f"/v1/admin/runs/{r}").json()["devices"] for r in rids]
            assert sorted(members) == [0, 1], members
            assert proc.poll() is None  # still waiting for its run to finish
            joined = rids[members.index(1)]
            a.post(f"/v1/admin/runs/{joined}/cancel")
        assert proc.wait(60) == 0
        with deployment.admin() as a:
            other = rids[members.index(0)]
            assert a.get(f"/v1/admin/runs/{other}").json()["devices"] == 0
            a.post(f"/v1/admin/runs/{other}/cancel")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _client_run(
    deployment: Deployment, server: str, *extra: str, ca: bool = True
) -> subprocess.CompletedProcess[str]:
    data = deployment.root / "one.csv"
    data.write_text("value\n0.5\n")
    ident = deployment.root / "ids" / "conn.json"
    if not ident.exists():
        deployment.identity("conn")
    args = [
        *FEDSTATS,
        "client",
        "run",
        "--server",
        server,
        "--identity",
        str(ident),
        "--data",
        str(data),
    ]
    if ca:
        args += ["--ca", str(deployment.certs["ca"])]
    return subprocess.run([*args, *extra], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("case", ["refused", "tls", "unknown-host"])
def test_client_run_says_why_it_never_connected(deployment: Deployment, case: str) -> None:
    if deployment.db.startswith("postgresql"):
        pytest.skip("the device side does not depend on the store")
    if case == "refused":
        got = _client_run(deployment, f"https://127.0.0.1:{free_port()}", "--connect-timeout", "1")
        want = "connection refused"
    elif case == "tls":
        got = _client_run(deployment, deployment.url, "--connect-timeout", "1", ca=False)
        want = "TLS failure"
    else:
        got = _client_run(deployment, "https://no-such-host.invalid:8443", "--connect-timeout", "1")
        want = "unknown host"
    assert got.returncode == 1, got.stderr
    lines = [x for x in got.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and want in lines[0], got.stderr
    assert "Traceback" not in got.stderr
