"""The two-aggregator mode (Prio3) over HTTP: a leader and a helper app in process, each with its own
database (SQLite files, and PostgreSQL schemas when reachable), signed devices, a malicious device."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from fedstats.client.vdaf import Prio3Task, Prio3Uploader, collect, shard_report
from fedstats.errors import DataError, ParameterError
from fedstats.service.domain.operators import add_operator, trust_authority
from fedstats.service.http.app import ServerSettings, create_app
from fedstats.service.http.vdaf import add_vdaf_routes
from fedstats.service.store import Store, open_store
from fedstats.wire import auth
from fedstats.wire.enrollment import init_authority, issue_identity
from service_helpers import pg_reachable, pg_schema

LEADER_URL = "http://127.0.0.1:18001"
HELPER_URL = "http://127.0.0.2:18002"

HIST = {"type": "histogram", "length": 4, "chunk_length": 2}
COUNT = {"type": "count"}


@dataclass
class Pair:
    """Two aggregators in process, their operator clients and an authority for devices."""

    root: Path
    leader: TestClient
    helper: TestClient
    stores: tuple[Store, Store]

    def task(
        self, spec: dict[str, Any], *, noise: dict[str, Any] | None = None, **kw: Any
    ) -> Prio3Task:
        """A bare Prio3 task (one variant, no analysis) on both aggregators, made by the domain layer.

        Over HTTP a Prio3 task comes only as an analyst's signed envelope (tests/service/test_prio3_signed.py);
        these tests exercise the upload, aggregation and collection of one round task.
        """
        from fedstats.service.domain import vdaf as domain

        # a few reports per test: the default floor (10) is the subject of test_prio3_signed.py
        kw.setdefault("min_batch_size", 1)
        task_id = secrets.token_hex(32)
        key, token, ctx = os.urandom(32), secrets.token_urlsafe(32), b"fedstats prio3 test"
        for store, role, peer in (
            (self.stores[0], "leader", HELPER_URL),
            (self.stores[1], "helper", LEADER_URL),
        ):
            domain.create_task(
                store,
                task_id=task_id,
                role=role,
                vdaf=spec,
                verify_key=key,
                ctx=ctx,
                peer_url=peer,
                peer_token=token,
                noise=domain.Noise.from_json(noise),
                **kw,
            )
        return Prio3Task(task_id, spec, ctx, LEADER_URL, HELPER_URL)

    def device(self, name: str, population: str = "default") -> Prio3Uploader:
        ident = issue_identity(
            self.root / "authority", name, population, self.root / f"{name}.json"
        )
        up = Prio3Uploader(ident, clients={LEADER_URL: self.leader, HELPER_URL: self.helper})
        for c in (self.leader, self.helper):
            # registration with the device API of each server (no bearer token on device requests)
            up._post(str(c.base_url), "/v1/client/register", {"certificate": ident["certificate"]})
        return up

    def info(self, task: Prio3Task, which: TestClient) -> dict[str, Any]:
        r = which.get(f"/v1/vdaf/tasks/{task.task_id}")
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out


@contextmanager
def _pair(root: Path, urls: tuple[str, str], batch_size: int = 7) -> Iterator[Pair]:
    pub = init_authority(root / "authority")
    stores = (open_store(urls[0]), open_store(urls[1]))
    tokens = []
    for s in stores:
        trust_authority(s, pub)
        tokens.append(add_operator(s, "alice"))
    with ExitStack() as stack:
        # the helper as `fedstats server --vdaf` builds it; the leader with a transport to the helper
        settings = ServerSettings(vdaf=True, vdaf_batch_size=batch_size)
        helper_app = create_app(stores[1], settings, run_driver=False)
        helper = stack.enter_context(TestClient(helper_app, base_url=HELPER_URL))
        helper.headers["Authorization"] = f"Bearer {tokens[1]}"

        def transport(peer_url: str, token: str) -> Any:
            assert peer_url == HELPER_URL

            def send(task_id: str, job: dict[str, Any]) -> dict[str, Any]:
                r = helper.post(
                    f"/v1/vdaf/tasks/{task_id}/jobs",
                    json=job,
                    headers={"Authorization": f"Bearer {token}"},
                )
                if r.status_code != 200:
                    raise DataError(f"helper refused: {r.status_code} {r.text}")
                out: dict[str, Any] = r.json()
                return out

            return send

        leader_app = create_app(stores[0], run_driver=False)
        add_vdaf_routes(
            leader_app,
            stores[0],
            transport=transport,
            batch_size=batch_size,
            rng_factory=lambda: np.random.default_rng(5),
        )
        leader = stack.enter_context(TestClient(leader_app, base_url=LEADER_URL))
        leader.headers["Authorization"] = f"Bearer {tokens[0]}"
        try:
            yield Pair(root, leader, helper, stores)
        finally:
            for s in stores:
                s.close()


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    if request.param == "memory":
        with _pair(tmp_path, ("memory://", "memory://")) as p:
            yield p
        return
    if request.param == "sqlite":
        urls = (f"sqlite:///{tmp_path / 'leader.db'}", f"sqlite:///{tmp_path / 'helper.db'}")
        with _pair(tmp_path, urls) as p:
            yield p
        return
    why = pg_reachable()
    if why:
        pytest.skip(why)
    with pg_schema() as lu, pg_schema() as hu, _pair(tmp_path, (lu, hu)) as p:
        yield p


def _bad_upload(pair: Pair, task: Prio3Task, dev: Prio3Uploader, encoded: list[int]) -> None:
    """A malicious device: an encoding outside the variant's range, with an honestly computed proof."""
    vdaf = task.prio3()
    nonce = os.urandom(16)
    batch = vdaf.shard_encoded(task.ctx, vdaf.field.array([encoded]), [nonce])
    public = vdaf.encode_public_share(
        None if batch.public_shares is None else batch.public_shares[0]
    )
    shares = [vdaf.encode_input_share(s, 0) for s in batch.input_shares]
    dev.upload_shares(task, nonce.hex(), public, shares)


@pytest.mark.parametrize(
    ("spec", "draw"),
    [(COUNT, lambda rng: int(rng.integers(0, 2))), (HIST, lambda rng: int(rng.integers(0, 4)))],
)
def test_honest_devices_give_the_exact_sum_and_a_cheat_is_rejected(
    pair: Pair, spec: dict[str, Any], draw: Any
) -> None:
    rng = np.random.default_rng(11)
    task = pair.task(spec)
    values = [draw(rng) for _ in range(17)]
    for i, v in enumerate(values):
        pair.device(f"d{i}").upload(task, v)
    # the cheats: a "bit" of 2 (Count), a histogram vector with two ones (Histogram)
    cheat = [2] if spec is COUNT else [1, 1, 0, 0]
    _bad_upload(pair, task, pair.device("mallory"), cheat)
    # and a device that tampers with its proof share (the leader's share is sent in full)
    vdaf = task.prio3()
    rid, public, shares = shard_report(task, draw(rng))
    leader_share = bytearray(shares[0])
    flip = vdaf.flp.MEAS_LEN * vdaf.field.ENCODED_SIZE  # the first proof element
    leader_share[flip] ^= 1
    pair.device("trudy").upload_shares(task, rid, public, [bytes(leader_share), shares[1]])

    r = pair.leader.post(f"/v1/vdaf/tasks/{task.task_id}/aggregate", json={})
    assert r.status_code == 200, r.text
    assert r.json()["jobs"] == 3  # 19 reports in jobs of 7
    got = collect(task, pair.leader, pair.helper)
    want = [sum(values)] if spec is COUNT else np.bincount(values, minlength=4).tolist()
    assert got.result == want
    assert (got.accepted, got.rejected) == (17, 2)
    for side in (pair.leader, pair.helper):
        info = pair.info(task, side)
        assert info["status"] == "collected"
        assert info["reports"] == {"accepted": 17, "rejected": 2}
        assert info["rejected_by_reason"] == {"invalid_proof": 2}


def test_reports_missing_at_the_helper_repeated_and_after_collection(pair: Pair) -> None:
    task = pair.task(COUNT)
    devs = [pair.device(f"d{i}") for i in range(4)]
    for d in devs[:3]:
        d.upload(task, 1)
    # a device that uploads to the leader only: rejected at aggregation, with its reason
    rid, public, shares = shard_report(task, 1)
    path = f"/v1/vdaf/tasks/{task.task_id}/reports"
    first = devs[3]._post(
        LEADER_URL,
        path,
        {"report_id": rid, "public_share": public.hex(), "input_share": shares[0].hex()},
    )
    # the same upload again is acknowledged as a duplicate (the same receipt); another report of the
    # same device is refused
    again = devs[3]._post(
        LEADER_URL,
        path,
        {"report_id": rid, "public_share": public.hex(), "input_share": shares[0].hex()},
    )
    assert again == {"accepted": True, "duplicate": True, "receipt": first["receipt"]}
    with pytest.raises(DataError, match="409"):
        devs[3].upload(task, 0)
    got = collect(task, pair.leader, pair.helper)
    assert (got.result, got.accepted, got.rejected) == ([3], 3, 1)
    assert pair.info(task, pair.leader)["rejected_by_reason"] == {"missing_at_helper": 1}
    # collected: no more uploads, the same answer again
    with pytest.raises(DataError, match="409"):
        pair.device("late").upload(task, 1)
    assert collect(task, pair.leader, pair.helper) == got


def test_authentication_and_refusals(pair: Pair) -> None:
    task = pair.task(COUNT, min_batch_size=3)
    job = {"job_id": secrets.token_hex(16), "reports": []}
    jobs = f"/v1/vdaf/tasks/{task.task_id}/jobs"
    # the helper's job endpoint wants the peer token, not an operator's
    assert pair.helper.post(jobs, json=job).status_code == 403
    assert pair.helper.post(jobs, json=job, headers={"Authorization": ""}).status_code == 401
    # uploads must be signed by an enrolled device of the task's population
    reports = f"/v1/vdaf/tasks/{task.task_id}/reports"
    assert pair.leader.post(reports, json={}).status_code == 401
    other = pair.device("outsider", population="elsewhere")
    with pytest.raises(DataError, match="403"):
        other.upload(task, 1)
    # a malformed share is refused at upload (422), naming the problem
    dev = pair.device("d0")
    with pytest.raises(DataError, match="422"):
        dev._post(
            LEADER_URL, reports, {"report_id": "00" * 16, "public_share": "", "input_share": "00"}
        )
    # operators only on the admin side of the task
    assert (
        pair.leader.get(
            f"/v1/vdaf/tasks/{task.task_id}", headers={"Authorization": "Bearer x"}
        ).status_code
        == 401
    )
    # below the minimum batch size nothing is released
    dev.upload(task, 1)
    r = pair.leader.post(f"/v1/vdaf/tasks/{task.task_id}/collect")
    assert r.status_code == 409 and "minimum batch size" in r.text
    # a task created again with other parameters is a conflict
    from fedstats.service.domain import vdaf as domain
    from fedstats.service.domain.tasks import ConflictError

    with pytest.raises(ConflictError):
        domain.create_task(
            pair.stores[0],
            task_id=task.task_id,
            role="leader",
            vdaf=HIST,
            verify_key=bytes(32),
            ctx=b"",
            peer_url=HELPER_URL,
            peer_token="t" * 40,
        )
    # and an operator cannot create an unsigned Prio3 task over HTTP (403: no envelope verifies)
    r = pair.leader.post(
        "/v1/vdaf/tasks",
        json={
            "task_id": task.task_id,
            "role": "leader",
            "vdaf": HIST,
            "verify_key": "00" * 32,
            "peer_token": "t" * 40,
        },
    )
    assert r.status_code in (403, 422), r.text
    # a replayed signed upload (same nonce) is refused, and writes nothing
    raw = b'{"report_id":"' + b"11" * 16 + b'","public_share":"","input_share":""}'
    dev2 = pair.device("d2")
    headers = auth.sign_request(dev2._key, dev2.client_id, "POST", reports, raw)
    headers["content-type"] = "application/json"
    first = pair.leader.post(reports, content=raw, headers=headers)
    assert first.status_code == 422  # malformed shares: the transaction (and its nonce) rolled back
    assert pair.leader.post(reports, content=raw, headers=headers).status_code == 422  # not 403
    rid, public, shares = shard_report(task, 1)
    raw = json.dumps(
        {"report_id": rid, "public_share": public.hex(), "input_share": shares[0].hex()}
    ).encode()
    headers = auth.sign_request(dev2._key, dev2.client_id, "POST", reports, raw)
    headers["content-type"] = "application/json"
    assert pair.leader.post(reports, content=raw, headers=headers).status_code == 200
    before = pair.info(task, pair.leader)["reports"]
    again = pair.leader.post(reports, content=raw, headers=headers)
    assert again.status_code == 403 and "nonce" in again.text
    assert pair.info(task, pair.leader)["reports"] == before


def test_server_settings_switch_the_vdaf_routes_and_check_their_options(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        paths = [
            set(create_app(store, ServerSettings(vdaf=on), run_driver=False).openapi()["paths"])
            for on in (False, True)
        ]
        assert not any(p.startswith("/v1/vdaf/") for p in paths[0])
        assert "/v1/vdaf/tasks/{task_id}/reports" in paths[1]
        with pytest.raises(ParameterError, match="batch_size"):
            create_app(store, ServerSettings(vdaf=True, vdaf_batch_size=0), run_driver=False)
        with pytest.raises(ParameterError, match="peer_ca"):
            create_app(
                store,
                ServerSettings(vdaf=True, vdaf_peer_ca=str(tmp_path / "missing.pem")),
                run_driver=False,
            )
    finally:
        store.close()


@pytest.mark.parametrize(
    "args",
    [
        ["--vdaf", "--vdaf-batch-size", "0"],
        ["--vdaf", "--vdaf-batch-size", "100001"],
        ["--vdaf", "--vdaf-batch-size", "x"],
        ["--vdaf", "--vdaf-peer-ca", "/nonexistent/ca.pem"],
    ],
)
def test_server_vdaf_options_refuse_bad_values_in_one_line(args: list[str], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fedstats.cli.app import app

    db = f"sqlite:///{tmp_path / 'never.db'}"
    res = CliRunner().invoke(app, ["server", "--db", db, *args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "vdaf" in lines[0], lines
    assert not (tmp_path / "never.db").exists()  # refused before the server opened anything


def test_the_vdaf_domain_and_router_hold_no_sql() -> None:
    """Issue 28: only service/store imports SQLAlchemy or the tables."""
    import ast

    import fedstats.service.domain.vdaf as d
    import fedstats.service.domain.vdaf_group as g
    import fedstats.service.http.vdaf as h

    for mod in (d, g, h):
        tree = ast.parse(Path(str(mod.__file__)).read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {str(n.module) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        bad = {
            n for n in names if n.startswith("sqlalchemy") or n.endswith((".tables", "store.vdaf"))
        }
        if (
            mod is not h
        ):  # the domain may name the store's row dataclass, nothing else of store.vdaf
            fr = [
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module == "fedstats.service.store.vdaf"
            ]
            assert all(a.name in ("VdafTaskRow", "VdafSignedRow") for n in fr for a in n.names)
            bad.discard("fedstats.service.store.vdaf")
        assert not bad, (mod.__name__, bad)


def test_noise_is_added_once_by_each_aggregator(pair: Pair) -> None:
    noise = {"mechanism": "discrete_gaussian", "parameter": 400.0}
    task = pair.task(HIST, noise=noise)
    values = [0, 1, 1, 3, 3, 3]
    for i, v in enumerate(values):
        pair.device(f"d{i}").upload(task, v)
    got = collect(task, pair.leader, pair.helper)
    exact = np.bincount(values, minlength=4)
    diff = np.asarray(got.result) - exact
    # two discrete Gaussian shares of sigma 20: nonzero somewhere, and within 8 sigma * sqrt(2)
    assert np.any(diff != 0)
    assert np.all(np.abs(diff) < 8 * 20 * np.sqrt(2))
    assert collect(task, pair.leader, pair.helper) == got  # drawn once


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_job_retried_after_the_helper_answered_adds_nothing_twice(
    tmp_path: Path, kind: str
) -> None:
    """The leader fails after the helper committed a job: the next pass resends the same job, gets the
    same answer, and both aggregates count every report once."""
    from fedstats.client.vdaf import unshard
    from fedstats.service.domain import vdaf as domain
    from fedstats.service.domain.tasks import ConflictError

    stores = [
        open_store("memory://" if kind == "memory" else f"sqlite:///{tmp_path / f'{r}.db'}")
        for r in ("leader", "helper")
    ]
    task_id, key, token = secrets.token_hex(32), os.urandom(32), secrets.token_urlsafe(32)
    task = Prio3Task(task_id, HIST, b"ctx", LEADER_URL, HELPER_URL)
    for s, role, peer in zip(stores, ("leader", "helper"), (HELPER_URL, LEADER_URL), strict=True):
        domain.create_task(
            s,
            task_id=task_id,
            role=role,
            vdaf=HIST,
            verify_key=key,
            ctx=b"ctx",
            peer_url=peer,
            peer_token=token,
            min_batch_size=1,  # 8 reports: the default floor is test_prio3_signed.py's subject
        )
    values = [0, 3, 3, 1, 2, 3, 0, 1]
    for i, v in enumerate(values):
        rid, public, shares = shard_report(task, v)
        receipt = None
        for j, s in enumerate(stores):
            receipt = domain.upload_report(
                s,
                task_id,
                client_id=f"d{i}",
                population="default",
                report_id=rid,
                public_share=public,
                input_share=shares[j],
                leader_receipt=receipt,  # the leader's, for the helper
            ).receipt
    calls: list[str] = []

    def flaky(tid: str, job: dict[str, Any]) -> dict[str, Any]:
        answer = domain.helper_job(stores[1], tid, job)
        calls.append(job["job_id"])
        if len(calls) == 1:
            raise DataError("connection lost after the helper committed")
        return answer

    with pytest.raises(DataError, match="connection lost"):
        domain.run_leader_jobs(stores[0], task_id, flaky, batch_size=5)
    done = domain.run_leader_jobs(stores[0], task_id, flaky, batch_size=5)
    assert calls[0] == calls[1]  # the same job, resent
    assert done == {"jobs": 2, "accepted": 8, "rejected": 0}
    rng = np.random.default_rng(0)
    answers = [domain.collect(s, task_id, rng) for s in stores]
    got = unshard(task, answers[0], answers[1])
    assert got.result == np.bincount(values, minlength=4).tolist()
    assert answers[0]["jobs"] == answers[1]["jobs"] == 2
    # a job id reused with other reports is refused by the helper
    with pytest.raises(ConflictError, match="other reports"):
        domain.helper_job(
            stores[1],
            task_id,
            {
                "job_id": calls[0],
                "reports": [{"report_id": "00" * 16, "public_share": "", "verifier_share": "00"}],
            },
        )
    for s in stores:
        s.close()


def test_network_demo_two_aggregator_processes_agree_with_the_engine(tmp_path: Path) -> None:
    """Two `fedstats server --vdaf` processes (HTTPS), device processes, bit pushing and FED-chi^2: the
    in-process engine's results, the cheating device rejected by both aggregators in every round."""
    from fedstats.cli.prio3_demo import run_prio3_demo

    rows = run_prio3_demo(n_devices=12, processes=2, seed=3, cheaters=1, workdir=tmp_path)
    assert [r["agree"] for r in rows] == [True, True]
    for r in rows:
        assert r["network"] == r["engine"]
        assert all((x["accepted"], x["rejected"]) == (11, 1) for x in r["rounds"])
        assert r["rejected_in_process"] == len(r["rounds"])


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_leader_processes_never_count_a_report_twice(backend: str, tmp_path: Path) -> None:
    """Two leader workers on one database (threads here) drive the same task at once: every report is
    aggregated exactly once, at both aggregators."""
    import threading

    from fedstats.client.vdaf import unshard
    from fedstats.service.domain import vdaf as domain

    with ExitStack() as stack:
        if backend == "sqlite":
            urls = [f"sqlite:///{tmp_path / f'{r}.db'}" for r in ("leader", "helper")]
        else:
            why = pg_reachable()
            if why:
                pytest.skip(why)
            urls = [stack.enter_context(pg_schema()) for _ in range(2)]
        stores = [open_store(u) for u in urls]
        for s in stores:
            stack.callback(s.close)
        task_id, key, token = secrets.token_hex(32), os.urandom(32), secrets.token_urlsafe(32)
        task = Prio3Task(task_id, COUNT, b"c", LEADER_URL, HELPER_URL)
        for s, role in zip(stores, ("leader", "helper"), strict=True):
            domain.create_task(
                s,
                task_id=task_id,
                role=role,
                vdaf=COUNT,
                verify_key=key,
                ctx=b"c",
                peer_url=HELPER_URL,
                peer_token=token,
            )
        values = np.random.default_rng(1).integers(0, 2, 60)
        for i, v in enumerate(values):
            rid, public, shares = shard_report(task, int(v))
            receipt = None
            for j, s in enumerate(stores):
                receipt = domain.upload_report(
                    s,
                    task_id,
                    client_id=f"d{i}",
                    population="default",
                    report_id=rid,
                    public_share=public,
                    input_share=shares[j],
                    leader_receipt=receipt,  # the leader's, for the helper
                ).receipt
        totals: list[dict[str, int]] = []
        errors: list[BaseException] = []

        def leader() -> None:
            try:
                totals.append(
                    domain.run_leader_jobs(
                        stores[0],
                        task_id,
                        lambda tid, job: domain.helper_job(stores[1], tid, job),
                        batch_size=4,
                    )
                )
            except BaseException as exc:  # reported below
                errors.append(exc)

        workers = [threading.Thread(target=leader) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        assert not errors, errors
        assert sum(t["accepted"] for t in totals) == 60
        rng = np.random.default_rng(0)
        got = unshard(task, *[domain.collect(s, task_id, rng) for s in stores])
        assert (got.result, got.accepted, got.rejected) == ([int(values.sum())], 60, 0)


def test_bulk_uploads_are_each_verified_and_answered_as_alone(tmp_path: Path) -> None:
    """Issue 39: devices' signed uploads relayed in one request to each aggregator; a forged, a replayed
    and a second report are refused with the single route's status, the rest aggregate exactly."""
    with _pair(tmp_path, ("memory://", "memory://")) as pair:
        task = pair.task(COUNT)
        path = f"/v1/vdaf/tasks/{task.task_id}/reports"
        devs = [pair.device(f"d{i}") for i in range(4)]
        sharded = [shard_report(task, i % 2) for i in range(len(devs))]

        def signed(j: int, receipts: list[Any]) -> list[dict[str, Any]]:
            """Aggregator ``j``'s signed uploads (the helper's carry the leader's receipts)."""
            items = []
            for d, (rid, public, shares), receipt in zip(devs, sharded, receipts, strict=True):
                doc = {
                    "report_id": rid,
                    "public_share": public.hex(),
                    "input_share": shares[j].hex(),
                }
                if receipt is not None:
                    doc["leader_receipt"] = receipt
                body = json.dumps(doc)
                headers = auth.sign_request(d._key, d.client_id, "POST", path, body.encode())
                items.append({"headers": headers, "body": body})
            return items

        per_agg: list[list[dict[str, Any]]] = [signed(0, [None] * len(devs))]
        forged = dict(per_agg[0][0], body=per_agg[0][0]["body"].replace('"report_id": "', '"x": "'))
        second = shard_report(task, 1)
        body = json.dumps(
            {"report_id": second[0], "public_share": "", "input_share": second[2][0].hex()}
        )
        other = {
            "headers": auth.sign_request(
                devs[1]._key, devs[1].client_id, "POST", path, body.encode()
            ),
            "body": body,
        }
        # the leader first: its answers carry the receipts that the helper requires
        r = pair.leader.post(
            path + "/bulk", json={"reports": [*per_agg[0], forged, per_agg[0][2], other]}
        )
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert [x["status"] for x in results] == [200] * len(devs) + [401, 403, 409], results
        receipts = [x["receipt"] for x in results[: len(devs)]]
        assert all(isinstance(x, str) and len(x) == 64 for x in receipts)
        unreceipted = signed(1, [None] * len(devs))[0]  # the helper refuses a report without one
        r = pair.helper.post(path + "/bulk", json={"reports": [*signed(1, receipts), unreceipted]})
        assert r.status_code == 200, r.text
        assert [x["status"] for x in r.json()["results"]] == [200] * len(devs) + [403], r.json()
        assert pair.leader.post(path + "/bulk", json={"reports": []}).status_code == 422
        got = collect(task, pair.leader, pair.helper)
        assert (got.result, got.accepted, got.rejected) == ([2], 4, 0)
