"""The report hot path on SQLite and PostgreSQL: group commit, direct routes, trusted device rows.

**Group commit** of report uploads (:class:`fedstats.service.http.fastpath.UploadBatcher`).

Uploads that arrive while a batch is being written are written together, in one transaction: the test
holds the first batch until the other uploads are pending, so the grouping is deterministic. Inside the
group each upload must still get the answer it would get alone:

* the same signed request sent twice in one batch: one stored, the other refused as a replay (401);
* a request replayed from an earlier, committed batch: 401;
* a report the round's checks refuse (a wrong count): its own 422, the others stored;
* the batch's transaction failing as a whole: every upload written alone, all stored.

The run then closes with every device's record summed (nothing lost, nothing counted twice).

**Direct routes** (:class:`~fedstats.service.http.fastpath.DirectRoutes`): the poll and the upload answer
errors exactly as through the router.

**Device rows** (:class:`~fedstats.service.http.deps.DeviceAuth`): while the devices' counter is unchanged
the cached rows are used without a re-read per device; a revocation written by another process reaches
this one within ``recheck`` seconds.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from fedstats.client import Device
from fedstats.randomness import RandomSource
from fedstats.service.domain import runs
from fedstats.service.domain.operators import add_operator, trust_authority
from fedstats.service.http import deps
from fedstats.service.http.app import ServerSettings, create_app
from fedstats.service.store import open_store
from fedstats.wire import auth
from fedstats.wire.enrollment import init_authority, issue_analyst, issue_identity
from fedstats.wire.tasks import sign_task
from service_helpers import store_url

N = 12


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with store_url(request.param, tmp_path / "group.db") as u:
        yield u


class _Captured(Exception):
    """Raised by :class:`_Capture` instead of sending: the request was recorded."""


class _Capture:
    """Stands in for a device's HTTP client: records the next POST (signed, as sent) without sending."""

    def __init__(self, http: TestClient) -> None:
        self.http = http
        self.request: tuple[str, str, bytes, dict[str, str]] | None = None

    def request_(self, method: str, path: str, **kw: Any) -> Any:
        if method == "POST":
            self.request = (method, path, kw["content"], dict(kw["headers"]))
            raise _Captured
        return self.http.request(method, path, **kw)


def _capture(d: Device, http: TestClient, work: dict[str, Any]) -> tuple[str, str, bytes, dict]:
    cap = _Capture(http)
    d._http = type("H", (), {"request": staticmethod(cap.request_)})()
    try:
        d._handle(work)
    except _Captured:
        pass
    finally:
        d._http = http
    assert cap.request is not None
    return cap.request


@contextmanager
def _round(
    root: Path, url: str, **settings: Any
) -> Iterator[tuple[TestClient, Any, list[Device], list, str, dict]]:
    """A one-round bit-pushing run with ``N`` devices checked in, the round open and polled."""
    init_authority(root / "authority")
    analyst = issue_analyst(root / "authority", "ana", ["default"], root / "ana.json")
    task = {
        "analysis": "bitpushing-mean",
        "params": {"column": "value", "low": -1.0, "high": 1.0, "method": "weighted"},
        "privacy": {"epsilon": 2.0, "population": "default"},
        "cohort_size": N,
        "min_clients": N,
        "deadlines": {"checkin": 600, "round": 600},
        "label": f"group-{url[:8]}-{root.name}",
    }
    rng = np.random.default_rng(5)
    store = open_store(url)
    try:
        token = add_operator(store, "alice")
        trust_authority(store, (root / "authority" / "authority.pub").read_text().strip())
        app = create_app(store, ServerSettings(rate=1e6, burst=1e6, tick=0.05, **settings))
        with TestClient(app) as http:
            admin = {"Authorization": f"Bearer {token}"}
            for path in ("population/default", "analyst/alice"):
                r = http.put(
                    f"/v1/admin/budgets/{path}", json={"epsilon": 1e3, "delta": 1e-3}, headers=admin
                )
                assert r.status_code == 200, r.text
            r = http.post("/v1/admin/tasks", json=sign_task(task, analyst), headers=admin)
            assert r.status_code in (200, 201), r.text
            r = http.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]}, headers=admin)
            run_id = r.json()["run_id"]
            devices = []
            for i in range(N):
                ident = issue_identity(
                    root / "authority", f"dev-{i}", "default", root / "ids" / f"dev-{i}.json"
                )
                d = Device(
                    "https://127.0.0.1",
                    ident,
                    {"value": rng.uniform(-1, 1, 1)},
                    randomness=RandomSource(i),
                )
                d._http = http
                d.register()
                d.step()
                assert d.joined, d.refused
                devices.append(d)
            deadline = time.monotonic() + 60
            works: list[dict[str, Any]] = []
            while not works:
                assert time.monotonic() < deadline, "the round did not open"
                got = [d._send("GET", "/v1/client/work", b"").json() for d in devices]
                if all(len(w["rounds"]) == 1 for w in got):
                    works = got
                else:
                    time.sleep(0.05)
            yield http, app, devices, works, run_id, admin
    finally:
        store.close()


def _finish(http: TestClient, run_id: str, admin: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        view = http.get(f"/v1/admin/runs/{run_id}", headers=admin).json()
        if view["status"] in ("done", "aborted"):
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


def _hold_first_batch(batcher: Any, total: int) -> list[int]:
    """Make the batcher's first write wait until all ``total`` uploads are in it or queued; record sizes."""
    original = batcher.write
    sizes: list[int] = []

    def gated(uploads: list[Any]) -> Any:
        if not sizes:
            deadline = time.monotonic() + 30
            while len(uploads) + len(batcher._pending) < total and time.monotonic() < deadline:
                time.sleep(0.005)
        sizes.append(len(uploads))
        return original(uploads)

    batcher.write = gated
    return sizes


def test_uploads_that_arrive_together_share_a_transaction_and_keep_their_own_answers(
    tmp_path: Path, url: str
) -> None:
    with _round(tmp_path, url) as (http, app, devices, works, run_id, admin):
        batcher = app.state.upload_batcher
        # device 0 uploads first, alone; its request is kept to be replayed later
        replayed = _capture(devices[0], http, works[0])
        r = http.request(replayed[0], replayed[1], content=replayed[2], headers=replayed[3])
        assert r.status_code == 200 and r.json() == {"accepted": True, "duplicate": False}
        assert batcher.batches == 1
        twice = _capture(devices[1], http, works[1])
        method, path, body, _ = _capture(devices[2], http, works[2])
        wrong = json.loads(body)
        wrong["count"] = 2  # the device has one record in the round
        bad_body = json.dumps(wrong).encode()
        bad = (
            method,
            path,
            bad_body,
            auth.sign_request(devices[2]._key, "dev-2", method, path, bad_body),
        )
        bad[3]["content-type"] = "application/json"

        # the same report as `twice`, signed again (a device's retry after a lost answer)
        retry = (
            twice[0],
            twice[1],
            twice[2],
            auth.sign_request(devices[1]._key, "dev-1", *twice[:3]),
        )
        retry[3]["content-type"] = "application/json"

        def send(req: tuple[str, str, bytes, dict[str, str]]) -> tuple[int, Any]:
            r = http.request(req[0], req[1], content=req[2], headers=req[3])
            return r.status_code, r.json().get("duplicate")

        def upload(i: int) -> None:
            devices[i]._handle(works[i])

        batches_before = batcher.batches
        # N + 2 uploads: the first ones written first, the others queued behind them
        sizes = _hold_first_batch(batcher, total=N + 2)
        with ThreadPoolExecutor(16) as pool:
            plain = [pool.submit(upload, i) for i in range(3, N)]
            special = [pool.submit(send, q) for q in (twice, twice, retry, replayed, bad)]
            for f in plain:
                f.result(timeout=60)
            codes = [f.result(timeout=60) for f in special]
        # the group: everything but the one upload that came first was written in one more batch
        assert len(sizes) == 2 and sum(sizes) == N + 2 and sizes[1] >= N // 2, sizes
        # the same request twice and a retry of it: stored once, the copy refused as a replay, the
        # retry answered as a duplicate (written alone, after the batch was written again without it)
        assert sorted(codes[:3], key=str) == [(200, False), (200, True), (401, None)], codes
        # a request of an earlier batch: refused
        assert codes[3] == (401, None), codes
        # the wrong count: its own refusal, outside the batch (no batch was lost to it)
        assert codes[4] == (422, None), codes
        assert 1 <= batcher.batches - batches_before <= 2  # (none for uploads that all went alone)
        assert all(len(devices[i].reported) == 1 for i in range(3, N))
        # the refused device sends its real report now; the run sums every device once
        devices[2]._handle(works[2])
        view = _finish(http, run_id, admin)
        assert view["status"] == "done", view
        assert view["rounds"][0]["records_summed"] == N, view


def test_a_batch_whose_transaction_fails_is_written_upload_by_upload(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _round(tmp_path, url) as (http, app, devices, works, run_id, admin):
        batcher = app.state.upload_batcher
        original = runs.put_uploads
        failed = threading.Event()

        def once(tx: Any, uploads: Any, screened: Any) -> Any:
            if len(uploads) > 2 and not failed.is_set():  # the group, not the first uploads
                failed.set()
                raise RuntimeError("the batch's transaction failed")
            return original(tx, uploads, screened)

        monkeypatch.setattr(runs, "put_uploads", once)
        sizes = _hold_first_batch(batcher, total=N)
        with ThreadPoolExecutor(N) as pool:
            for f in [pool.submit(devices[i]._handle, works[i]) for i in range(N)]:
                f.result(timeout=60)
        assert failed.is_set() and len(sizes) == 2 and sum(sizes) == N, sizes
        assert all(len(d.reported) == 1 for d in devices)
        view = _finish(http, run_id, admin)
        assert view["status"] == "done", view
        assert view["rounds"][0]["records_summed"] == N, view


def test_direct_routes_answer_as_the_router_would(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poll, the upload, the check-in and the request key, taken straight to their handlers, answer
    errors exactly as the app's router and exception middleware do (the same status and body), and log
    their route's template."""
    from fedstats.service.http.fastpath import DirectRoutes

    with _round(tmp_path, url) as (http, _app, devices, works, run_id, _admin):
        d = devices[0]
        method, path, body, _ = _capture(d, http, works[0])
        good = auth.sign_request(d._key, "dev-0", method, path, body)

        def signed(m: str, p: str, b: bytes) -> dict[str, str]:
            return {
                **auth.sign_request(d._key, "dev-0", m, p, b),
                "content-type": "application/json",
            }

        cases = [
            ("POST", path, body, {}),  # unsigned: 401
            ("POST", path, body, {**good, auth.HEADER_CLIENT: "nobody"}),  # unknown device: 401
            ("POST", f"/v1/client/runs/{run_id}/rounds/7/report", body, None),  # no round 7: 404
            ("POST", f"/v1/client/runs/{run_id}/rounds/07/report", body, None),  # FastAPI's parsing
            ("POST", path, b"{not json", None),  # 422
            ("POST", path, json.dumps({"vector": [1], "count": True}).encode(), None),  # 422
            ("GET", "/v1/client/work?wait=-1", b"", None),
            ("GET", "/v1/client/work?wait=abc", b"", None),
            # the check-in and the request key (direct routes too): a member's slots again, a bad
            # record count, a malformed wait (FastAPI's parsing), an unsigned key request, one from
            # an unknown device
            ("POST", f"/v1/client/runs/{run_id}/checkin", b'{"records": 1}', None),
            ("POST", f"/v1/client/runs/{run_id}/checkin?wait=1", b'{"records": 0}', None),
            ("POST", f"/v1/client/runs/{run_id}/checkin?wait=abc", b'{"records": 1}', None),
            ("POST", "/v1/client/request-key", b"", {}),
            ("POST", "/v1/client/request-key", b"", {**good, auth.HEADER_CLIENT: "nobody"}),
        ]

        def answers() -> list[tuple[int, Any]]:
            out = []
            for m, p, b, h in cases:
                headers = signed(m, p.split("?")[0], b) if h is None else h
                r = http.request(m, p, content=b, headers=headers)
                out.append((r.status_code, r.json()))
            return out

        from starlette.middleware.exceptions import ExceptionMiddleware

        inner = ExceptionMiddleware.__call__
        crossed: list[str] = []

        async def counted(self: Any, scope: Any, receive: Any, send: Any) -> None:
            crossed.append(scope["path"])
            await inner(self, scope, receive, send)

        monkeypatch.setattr(ExceptionMiddleware, "__call__", counted)
        direct = answers()
        codes = [401, 401, 404, 404, 422, 422, 422, 422, 200, 422, 422, 401, 401]
        assert [c for c, _ in direct] == codes, direct
        assert direct[8][1] == {"slot_start": 0, "slot_count": 1}
        # only the four FastAPI must parse (a non-canonical index, a malformed wait) crossed the
        # app's inner layers; the others went straight to their handler
        assert len(crossed) == 4, crossed

        async def through(self: Any, scope: Any, receive: Any, send: Any) -> None:
            await self.app(scope, receive, send)

        monkeypatch.setattr(DirectRoutes, "__call__", through)
        assert answers() == direct
        assert len(crossed) == 4 + len(cases)


def test_livez_is_answered_on_the_event_loop_as_declared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``GET /livez`` (every device's probe before its first signed request) answers 200 ``{"status":
    "ok"}`` as JSON, is declared in ``/openapi.json`` as a plain ``GET`` of the ``ops`` tag, is logged
    under its path, and from its second request on goes straight to its handler: neither through the
    app's inner layers nor through FastAPI's thread pool (a ``def`` endpoint's hop to another thread)."""
    import logging

    import fastapi.routing
    from starlette.middleware.exceptions import ExceptionMiddleware

    app = create_app(open_store(f"sqlite:///{tmp_path / 'livez.db'}"), run_driver=False)
    crossed: list[str] = []
    pooled: list[Any] = []
    inner = ExceptionMiddleware.__call__
    pool = fastapi.routing.run_in_threadpool

    async def counted(self: Any, scope: Any, receive: Any, send: Any) -> None:
        crossed.append(scope.get("path", scope["type"]))
        await inner(self, scope, receive, send)

    async def in_pool(func: Any, *args: Any, **kwargs: Any) -> Any:
        pooled.append(func)
        return await pool(func, *args, **kwargs)

    monkeypatch.setattr(ExceptionMiddleware, "__call__", counted)
    monkeypatch.setattr(fastapi.routing, "run_in_threadpool", in_pool)
    with TestClient(app) as http, caplog.at_level(logging.INFO, logger="fedstats.service"):
        got = [http.get("/livez") for _ in range(3)]
        spec = http.get("/openapi.json").json()
    for r in got:
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        assert r.headers["content-type"] == "application/json"
    # the first request found the route through the router (and registered it as direct); the others
    # did not cross the inner layers; none ran on the thread pool
    assert crossed.count("/livez") == 1, crossed
    assert pooled == []
    logged = [json.loads(r.getMessage()) for r in caplog.records if '"request"' in r.getMessage()]
    lines = [x for x in logged if x.get("event") == "request" and x["path"] == "/livez"]
    assert [(x["method"], x["status"]) for x in lines] == [("GET", 200)] * 3, logged
    op = spec["paths"]["/livez"]
    assert list(op) == ["get"] and op["get"]["tags"] == ["ops"]
    assert op["get"]["summary"] == "Livez" and op["get"]["operationId"] == "livez_livez_get"
    assert op["get"]["description"].startswith("Liveness of the process alone")
    assert "200" in op["get"]["responses"]


def test_cached_device_rows_are_trusted_while_no_device_changed_and_a_revocation_elsewhere_arrives(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import event

    monkeypatch.setattr(deps, "REREAD", 0.5)
    with _round(tmp_path, url, recheck=0.1) as (http, app, devices, _works, _run, _admin):
        store = app.state.device_auth.store
        reads: list[str] = []

        def seen(_c: Any, _cur: Any, statement: str, *_a: Any) -> None:
            if "FROM clients" in statement:
                reads.append(statement)

        event.listen(store.engine, "before_cursor_execute", seen)
        # a device registered now: its row as committed is cached, its first request reads no row
        ident = issue_identity(
            tmp_path / "authority", "dev-new", "default", tmp_path / "ids" / "dev-new.json"
        )
        fresh = Device("https://127.0.0.1", ident, {"value": [0.5]}, randomness=RandomSource(99))
        fresh._http = http
        fresh.register()
        assert reads, "registration reads the device's row (enroll_device)"
        reads.clear()
        assert fresh._send("GET", "/v1/client/work", b"").status_code == 200
        assert reads == [], reads
        time.sleep(1.0)  # every cached row is now older than REREAD
        for d in devices:
            assert d._send("GET", "/v1/client/work", b"").status_code == 200
        # no device row was read again: the devices' counter did not move
        assert reads == [], reads
        # another process revokes device 3 (written to the database, not through this app)
        with store.transaction() as tx:
            tx.update_client("dev-3", revoked_at=time.time())
        deadline = time.monotonic() + 10
        while True:
            h = auth.sign_request(devices[3]._key, "dev-3", "GET", "/v1/client/work", b"")
            code = http.get("/v1/client/work", headers=h).status_code
            if code == 403:
                break
            assert code == 200 and time.monotonic() < deadline, code
            time.sleep(0.05)
        # the others still work (their rows read again once, the counter having moved)
        assert devices[4]._send("GET", "/v1/client/work", b"").status_code == 200


def test_polls_that_arrive_together_are_read_together_each_with_its_own_answer(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deps, "REREAD", 0.0)  # every row is confirmed in the poll's read
    with _round(tmp_path, url, recheck=0.05) as (http, app, devices, works, _run, _admin):
        store = app.state.device_auth.store
        # an operator of another process revokes device 5: the counter moves, every row is re-read
        with store.transaction() as tx:
            tx.update_client("dev-5", revoked_at=time.time())
        deadline = time.monotonic() + 10
        while app.state.device_auth.version != 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        batcher = app.state.poll_batcher
        batcher.max_inflight = 1  # one batch at a time: the grouping is then deterministic
        sizes = _hold_first_batch(batcher, total=N)
        from sqlalchemy import event

        reads: list[str] = []  # the statements reading devices' runs

        def seen(_c: Any, _cur: Any, statement: str, *_a: Any) -> None:
            if "runs.public_seed" in statement and "run_members" in statement:
                reads.append(statement)

        event.listen(store.engine, "before_cursor_execute", seen)

        def poll(d: Device) -> tuple[int, Any]:
            h = auth.sign_request(d._key, d.client_id, "GET", "/v1/client/work", b"")
            r = http.get("/v1/client/work", headers=h)
            return r.status_code, r.json()

        with ThreadPoolExecutor(N) as pool:
            got = list(pool.map(poll, devices))
        event.remove(store.engine, "before_cursor_execute", seen)
        assert len(sizes) == 2 and sum(sizes) == N and sizes[1] >= N // 2, sizes
        # one statement per batch whatever its size (device 5's refusal read none of its runs)
        assert len(reads) == 2, reads
        for i, (code, body) in enumerate(got):
            if i == 5:
                assert code == 403, body  # its own refusal, the others unaffected
            else:
                assert code == 200 and body == works[i], (i, code, body)


def test_the_access_log_can_be_turned_off_and_server_errors_are_still_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from fedstats.service.http import edge

    def requests_logged(access_log: bool) -> list[Any]:
        caplog.clear()
        app = edge.EdgeMiddleware(
            _failing_app,
            max_body=1024,
            rate=1e6,
            burst=1e6,
            counters=defaultdict(float),
            access_log=access_log,
        )
        ok = TestClient(app, raise_server_exceptions=False)
        with caplog.at_level("INFO", logger="fedstats.service"):
            assert ok.get("/fine").status_code == 200
            assert ok.get("/boom").status_code == 500
        return [r.msg.get("status") for r in caplog.records if isinstance(r.msg, edge.JsonLine)]

    assert requests_logged(True) == [200, 500]
    assert requests_logged(False) == [500]


async def _failing_app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/boom":
        raise RuntimeError("boom")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


def test_server_options_for_the_hot_path_reach_its_settings_or_are_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    from typer.testing import CliRunner

    import fedstats.service.http.app as app_module
    from fedstats.cli.app import app

    class _Stop(Exception):
        pass

    seen: list[Any] = []

    def capture(_store: Any, settings: Any, *_a: Any, **_k: Any) -> Any:
        seen.append(settings)
        raise _Stop

    monkeypatch.setattr(app_module, "create_app", capture)
    # the server command configures the root logger (level INFO, its handler): not in this process,
    # where it would make later tests' captured logs hold every library's INFO lines
    monkeypatch.setattr(logging, "basicConfig", lambda **_k: None)
    db = f"sqlite:///{tmp_path / 'x.db'}"
    runner = CliRunner()
    res = runner.invoke(app, ["server", "--db", db, "--max-wait", "40", "--no-access-log"])
    assert isinstance(res.exception, _Stop), res.output
    assert seen[0].max_wait == 40.0 and seen[0].access_log is False
    for bad in ("-1", "x", "4000"):
        res = runner.invoke(app, ["server", "--db", db, "--max-wait", bad])
        assert res.exit_code == 2, res.output
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "--max-wait" in lines[0], lines
