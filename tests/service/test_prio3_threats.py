"""The Prio3 threat model (docs/vdaf.md, "Trust model"): each row's test, the attacks refused and the
attacks that succeed (the documented limits).

Real aggregators: two ``fedstats server --vdaf`` processes (HTTPS, SQLite; one module-scoped pair) with
unmodified devices (:class:`fedstats.client.vdaf.Prio3Uploader`, :class:`~fedstats.client.vdaf.Prio3Device`)
for the omitting leader and the device's batch floor. The attacks of a malicious aggregator on the
protocol's arithmetic run against the in-process pair of ``test_prio3_service.py`` (its ``pair`` fixture on
the memory store): the malicious leader is the leader's own job code (:func:`fedstats.service.domain.vdaf.
run_leader_jobs`) with a ``send`` that rewrites what goes to the helper and what comes back.
"""

from __future__ import annotations

import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from fedstats.client.policy import Policy
from fedstats.client.vdaf import Prio3Device, Prio3Task, Prio3Uploader, collect
from fedstats.errors import DataError
from fedstats.service.domain import ledger
from fedstats.service.domain import vdaf as domain
from fedstats.service.http.vdaf import helper_transport
from fedstats.service.store import Store, open_store
from fedstats.wire.tasks import DEFAULT_MIN_BATCH_SIZE, task_id
from service_helpers import Deployment
from test_prio3_service import COUNT, HELPER_URL, LEADER_URL, Pair, shard_report
from test_prio3_service import pair as pair  # the in-process pair fixture

Send = Callable[[str, dict[str, Any]], dict[str, Any]]


# -- two aggregator processes ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def aggregators(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Deployment, Deployment]]:
    """A leader and a helper process (``fedstats server --vdaf``), one CA and one device authority."""
    root = tmp_path_factory.mktemp("aggregators")
    leader = Deployment(root / "leader", f"sqlite:///{root / 'leader.db'}")
    helper = Deployment(root / "helper", f"sqlite:///{root / 'helper.db'}")
    helper.certs = leader.certs  # the dev CA's certificate names 127.0.0.1: both serve it
    shutil.copytree(leader.root / "authority", helper.root / "authority", dirs_exist_ok=True)
    for dep in (leader, helper):  # each aggregator's ledger covers the signed task below
        store = open_store(dep.db)
        with store.transaction() as tx:
            for scope, name in (("population", "default"), ("analyst", "alice")):
                ledger.set_budget(tx, scope, name, epsilon=100.0, delta=1e-3, actor="test")
        store.close()
    starts = [
        threading.Thread(
            target=leader.start, args=("--vdaf", "--vdaf-peer-ca", str(leader.certs["ca"]))
        ),
        threading.Thread(target=helper.start, args=("--vdaf",)),
    ]
    for t in starts:
        t.start()
    for t in starts:
        t.join(300)
    try:
        assert leader.proc is not None and helper.proc is not None
        yield leader, helper
    finally:
        leader.kill()
        helper.kill()


def _bare_task(leader: Deployment, helper: Deployment) -> tuple[Prio3Task, str]:
    """A Count task on both aggregators (the operators' act on each database), default batch floor."""
    tid, key, token, ctx = (
        secrets.token_hex(32),
        secrets.token_bytes(32),
        secrets.token_urlsafe(32),
        b"t",
    )
    for dep, role, peer in ((leader, "leader", helper.url), (helper, "helper", leader.url)):
        store = open_store(dep.db)
        try:
            domain.create_task(
                store,
                task_id=tid,
                role=role,
                vdaf=COUNT,
                verify_key=key,
                ctx=ctx,
                peer_url=peer,
                peer_token=token,
            )
        finally:
            store.close()
    return Prio3Task(tid, COUNT, ctx, leader.url, helper.url), token


def _omitting_job(store: Store, task_id_: str, report_ids: list[str], send: Send) -> None:
    """A leader's aggregation job over the reports it chooses (its own job code, its own selection)."""
    job_id, now = secrets.token_hex(16), time.time()
    with store.transaction() as tx:
        tx.add_vdaf_job(
            task_id_, job_id, report_ids, now, lease_owner="evil", lease_until=now + 300
        )
        assert tx.take_vdaf_reports(task_id_, report_ids, job_id) == len(report_ids)
        row = domain.task_row(tx, task_id_)
    vdaf = domain.vdaf_from_spec(COUNT)
    assert domain._leader_job(store, vdaf, row, job_id, report_ids, send, ("evil", 1)) is not None


def test_an_omitting_leader_is_refused_at_collection(
    aggregators: tuple[Deployment, Deployment],
) -> None:
    """A leader whose jobs take the victim's report (then 9 more) and leave the others pending gets no
    aggregate share from the helper: every report the helper holds came with the leader's receipt."""
    leader, helper = aggregators
    task, token = _bare_task(leader, helper)
    values = np.random.default_rng(4).integers(0, 2, 20)
    values[0] = 1
    ids = []
    for i, v in enumerate(values):  # unmodified devices: the leader first, then the helper
        device = Prio3Uploader(leader.identity(f"omit-{i}"), ca=leader.certs["ca"])
        device.register(task)
        ids.append(device.upload(task, int(v)))
        device.close()
    store = open_store(leader.db)
    send = helper_transport(leader.certs["ca"])(helper.url, token)
    with helper.admin() as h, leader.admin() as c:
        path = f"/v1/vdaf/tasks/{task.task_id}"
        _omitting_job(store, task.task_id, ids[:1], send)  # the victim alone
        r = h.post(f"{path}/collect")
        assert r.status_code == 409 and "19 report(s) that the leader acknowledged" in r.text, (
            r.text
        )
        # nine more: the helper's count reaches the batch floor, the omission still stops it
        _omitting_job(store, task.task_id, ids[1:10], send)
        assert h.get(path).json()["reports"] == {"accepted": 10, "pending": 10}
        r = h.post(f"{path}/collect")
        assert r.status_code == 409 and "10 report(s)" in r.text, r.text
        assert h.get(path).json()["status"] == "open"  # nothing released, nothing frozen
        # the leader that aggregates every report it acknowledged gets the release (all 20)
        got = collect(task, c, h)
    store.close()
    assert (got.result, got.accepted, got.rejected) == ([int(values.sum())], 20, 0)


def test_a_device_refuses_a_task_below_its_batch_floor(
    aggregators: tuple[Deployment, Deployment],
) -> None:
    """An unmodified device refuses a signed Prio3 task whose min_batch_size is below its Policy floor
    (default 10): nothing reserved, nothing uploaded."""
    leader, helper = aggregators
    task = {
        "analysis": "performance-gap",
        "params": {"mechanism": "R"},
        "privacy": {"epsilon": 2.0, "population": "default"},
        "cohort_size": 12,
        "min_clients": 11,
        "max_records_per_client": 1,
        "prio3": {"leader": leader.url, "helper": helper.url, "noise": None, "min_batch_size": 1},
    }
    envelope = leader.sign(task)
    tid = task_id(envelope["task"])
    key, token = secrets.token_hex(32), secrets.token_urlsafe(32)
    for dep, role in ((leader, "leader"), (helper, "helper")):
        with dep.admin() as c:
            body = {"envelope": envelope, "role": role, "verify_key": key, "peer_token": token}
            r = c.post("/v1/vdaf/tasks", json=body)
            assert r.status_code == 200, r.text
    ident = leader.identity("floor-0")
    device = Prio3Device(ident, {"group": 1, "value": 0.5}, ca=leader.certs["ca"])
    try:
        assert Policy().min_batch_size == DEFAULT_MIN_BATCH_SIZE == 10
        assert not device.join(leader.url, tid)
        assert "min_batch_size 1 is below the policy's min_batch_size 10" in device.refused[tid]
        assert not device.tasks and device.budget.charges == {}
    finally:
        device.close()


# -- the in-process pair: a malicious aggregator's arithmetic --------------------------------------

MEMORY = pytest.mark.parametrize("pair", ["memory"], indirect=True)


def _peer(pair: Pair, task: Prio3Task) -> tuple[Send, bytes]:
    """The leader's channel to the helper (its peer token) and the task's verify key."""
    with pair.stores[0].transaction(read_only=True) as tx:
        row = domain.task_row(tx, task.task_id)

    def send(tid: str, job: dict[str, Any]) -> dict[str, Any]:
        r = pair.helper.post(
            f"/v1/vdaf/tasks/{tid}/jobs",
            json=job,
            headers={"Authorization": f"Bearer {row.peer_token}"},
        )
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    return send, row.verify_key


@MEMORY
def test_a_helper_upload_needs_the_leaders_receipt_and_a_late_one_cannot_stall(pair: Pair) -> None:
    task = pair.task(COUNT)
    dev = pair.device("d0")
    rid, public, shares = shard_report(task, 1)
    path = f"/v1/vdaf/tasks/{task.task_id}/reports"
    body = {"report_id": rid, "public_share": public.hex(), "input_share": shares[1].hex()}
    # straight to the helper: no receipt, or a forged one, is refused (403), nothing stored
    for receipt in (None, "00" * 32):
        extra = {} if receipt is None else {"leader_receipt": receipt}
        with pytest.raises(DataError, match=r"403.*leader_receipt"):
            dev._post(HELPER_URL, path, {**body, **extra})
    assert pair.info(task, pair.helper)["reports"] == {}
    # the leader's receipt; the device uploads to the leader only, and the job counts it missing
    ack = dev._post(LEADER_URL, path, {**body, "input_share": shares[0].hex()})
    for i in range(2):
        pair.device(f"h{i}").upload(task, 1)
    assert pair.leader.post(f"{path[:-8]}/aggregate", json={}).status_code == 200
    # its late helper upload, with the valid receipt, is refused: the helper waits for nothing
    with pytest.raises(DataError, match=r"409.*counted it missing"):
        dev._post(HELPER_URL, path, {**body, "leader_receipt": ack["receipt"]})
    got = collect(task, pair.leader, pair.helper)
    assert (got.result, got.accepted, got.rejected) == ([2], 2, 1)
    for side in (pair.leader, pair.helper):
        assert pair.info(task, side)["rejected_by_reason"] == {"missing_at_helper": 1}


@MEMORY
def test_the_leader_releases_nothing_while_it_holds_unaggregated_reports(pair: Pair) -> None:
    task = pair.task(COUNT)
    pair.device("d0").upload(task, 1)
    with pytest.raises(domain.UnaggregatedError, match="not aggregated yet"):
        domain.collect(pair.stores[0], task.task_id, np.random.default_rng(0))


def _shift(vdaf: Any, encoded: str, by: int) -> str:
    """A verifier share (hex) with ``by`` added to its first element (what a deviating leader sends)."""
    f = vdaf.field
    v = vdaf.decode_verifier_shares([bytes.fromhex(encoded)]).verifiers[0]
    one = f.array([by] + [0] * (len(v) - 1))
    return str(f.encode(f.add(v, one)).hex())


@MEMORY
def test_a_leader_with_min_batch_size_minus_one_sybils_isolates_a_report(pair: Pair) -> None:
    """Documented limit: the leader makes the helper reject every honest report but the victim's (a
    shifted verifier share, indistinguishable from a cheating device) and fills the batch with its own
    enrolled devices. With min_batch_size - 1 = 9 Sybils the release is the victim's value; with 8 the
    helper refuses (fewer than min_batch_size accepted). The rejections show at the helper."""
    vdaf = domain.vdaf_from_spec(COUNT)
    for sybils, released in ((9, True), (8, False)):
        task = pair.task(COUNT, min_batch_size=DEFAULT_MIN_BATCH_SIZE)
        victim = pair.device(f"victim-{sybils}").upload(task, 1)
        honest = {pair.device(f"h{sybils}-{i}").upload(task, 1) for i in range(6)}
        for i in range(sybils):
            pair.device(f"sybil{sybils}-{i}").upload(task, 0)
        send, _key = _peer(pair, task)

        def evil(
            tid: str, job: dict[str, Any], honest: set[str] = honest, send: Send = send
        ) -> Any:
            for e in job["reports"]:
                if e["report_id"] in honest:
                    e["verifier_share"] = _shift(vdaf, e["verifier_share"], 1)
            answer = send(tid, job)
            for a in answer["reports"]:  # the leader records the same rejections as the helper
                if a["report_id"] in honest:
                    assert a["reason"] == "invalid_proof"
                    a["verifier_share"] = None
            return answer

        domain.run_leader_jobs(pair.stores[0], task.task_id, evil)
        helper = pair.info(task, pair.helper)
        assert helper["reports"] == {"accepted": 1 + sybils, "rejected": 6}
        assert helper["rejected_by_reason"] == {"invalid_proof": 6}
        if released:
            got = collect(task, pair.leader, pair.helper)
            assert got.result == [1] and got.accepted == 10  # the victim's value, Sybils sent 0
            assert victim not in honest and got.rejected == 6
        else:
            r = pair.helper.post(f"/v1/vdaf/tasks/{task.task_id}/collect")
            assert r.status_code == 409 and "minimum batch size" in r.text


@MEMORY
def test_a_leader_colluding_with_a_device_makes_the_honest_helper_accept_an_invalid_entry(
    pair: Pair,
) -> None:
    """Documented limit (robustness needs both aggregators honest): a device gives the leader its
    helper share of a Count "bit" of 10^6; the leader computes the helper's verifier share (it holds the
    verify key) and sends its negation, so the combined verifier is zero and the honest helper accepts."""
    vdaf = domain.vdaf_from_spec(COUNT)
    f = vdaf.field
    task = pair.task(COUNT)
    for i in range(5):
        pair.device(f"d{i}").upload(task, 1)
    nonce = secrets.token_bytes(16)
    batch = vdaf.shard_encoded(task.ctx, f.array([[10**6]]), [nonce])
    public = vdaf.encode_public_share(
        None if batch.public_shares is None else batch.public_shares[0]
    )
    shares = [vdaf.encode_input_share(s, 0) for s in batch.input_shares]
    pair.device("colluder").upload_shares(task, nonce.hex(), public, shares)
    send, key = _peer(pair, task)
    _state, theirs = vdaf.verify_init_batch(
        key, task.ctx, 1, [nonce], None, vdaf.decode_input_shares(1, [shares[1]])
    )

    def evil(tid: str, job: dict[str, Any]) -> Any:
        mine = None
        for e in job["reports"]:
            if e["report_id"] == nonce.hex():
                mine = vdaf.decode_verifier_shares([bytes.fromhex(e["verifier_share"])])
                e["verifier_share"] = f.encode(f.neg(theirs.verifiers[0])).hex()
        assert mine is not None
        answer = send(tid, job)
        for a in answer["reports"]:
            if a["report_id"] == nonce.hex():
                assert a["accepted"]  # the honest helper took the out-of-range entry
                a["verifier_share"] = f.encode(
                    f.neg(mine.verifiers[0])
                ).hex()  # and so does the leader
        return answer

    domain.run_leader_jobs(pair.stores[0], task.task_id, evil)
    got = collect(task, pair.leader, pair.helper)
    assert (got.result, got.accepted, got.rejected) == ([5 + 10**6], 6, 0)


@MEMORY
def test_a_helper_adding_to_its_aggregate_share_goes_unnoticed(pair: Pair) -> None:
    """Documented limit: the helper adds 1000 to its aggregate share before releasing it; the counts
    agree, the collector has nothing to compare the sum with."""
    vdaf = domain.vdaf_from_spec(COUNT)
    task = pair.task(COUNT)
    for i in range(4):
        pair.device(f"d{i}").upload(task, 1)
    assert pair.leader.post(f"/v1/vdaf/tasks/{task.task_id}/aggregate", json={}).status_code == 200
    with pair.stores[1].transaction() as tx:
        row = domain.task_row(tx, task.task_id, lock=True)
        assert row.agg_share is not None
        agg = vdaf.field.add(vdaf.decode_agg_share(row.agg_share), vdaf.field.array([1000]))
        tx.set_vdaf_totals(
            task.task_id,
            agg_share=vdaf.encode_agg_share(agg),
            accepted=row.accepted,
            rejected=row.rejected,
        )
    got = collect(task, pair.leader, pair.helper)
    assert (got.result, got.accepted, got.rejected) == ([1004], 4, 0)


@MEMORY
def test_a_helper_hiding_reports_leaves_the_honest_leader_below_its_batch_floor(pair: Pair) -> None:
    """A helper that answers "missing" (or a failed verification) for every report but the victim's:
    the honest leader rejects them too, counts them, and refuses to release a batch of one."""
    task = pair.task(COUNT, min_batch_size=DEFAULT_MIN_BATCH_SIZE)
    victim = pair.device("victim").upload(task, 1)
    for i in range(12):
        pair.device(f"d{i}").upload(task, 0)
    send, _key = _peer(pair, task)

    def hiding(tid: str, job: dict[str, Any]) -> Any:
        answer = send(tid, job)
        for a in answer["reports"]:
            if a["report_id"] != victim:
                a.update(verifier_share=None, reason="missing_at_helper", accepted=False)
        return answer

    domain.run_leader_jobs(pair.stores[0], task.task_id, hiding)
    leader = pair.info(task, pair.leader)
    assert leader["reports"] == {"accepted": 1, "rejected": 12}
    assert leader["rejected_by_reason"] == {"missing_at_helper": 12}
    r = pair.leader.post(f"/v1/vdaf/tasks/{task.task_id}/collect")
    assert r.status_code == 409 and "minimum batch size" in r.text, r.text
