"""The DAP-09 aggregator's domain on two memory stores, the leader calling the helper in process.

Proves: a collection returns the exact Prio3 sum of the valid reports and counts a tampered one as
rejected at the helper; a replayed report id is refused at upload and inside an aggregation job; a retried
aggregation job gets the stored answer and adds nothing twice; the helper refuses an aggregate share whose
report count or checksum differs from its own (an omitting or padding leader); nothing is released below
``min_batch_size``; wrong tokens and the wrong role are refused; the signed-task extension is enforced.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from fedstats.dap import messages as m
from fedstats.dap.client import Client
from fedstats.dap.collector import Collector
from fedstats.dap.hpke import HpkeKeypair
from fedstats.dap.task import FEDSTATS_TASK_EXTENSION, b64encode, report_id_checksum
from fedstats.service.domain import dap, dap_leader
from fedstats.service.store import Store, open_store
from fedstats.vdaf import Prio3Sum

L, H = "https://leader.test", "https://helper.test"
TP = 3600
NOW = 1_800_000_000 - 1_800_000_000 % TP


@dataclass
class Pair:
    leader: Store
    helper: Store
    task_id: bytes
    collector_kp: HpkeKeypair
    vdaf: Prio3Sum
    calls: list[tuple[str, str]]

    def helper_call(
        self, method: str, url: str, body: bytes, media: str, token: str
    ) -> tuple[int, bytes]:
        self.calls.append((method, url.rsplit("/", 1)[-1]))
        try:
            if "/aggregation_jobs/" in url:
                jid = dap.b64decode(url.rsplit("/", 1)[1], "job", 16)
                return 200, dap.helper_init(self.helper, self.task_id, jid, body, token)
            return 200, dap.helper_aggregate_share(self.helper, self.task_id, body, token)
        except dap.DapError as exc:
            return exc.status, f"{exc.kind}: {exc}".encode()

    def upload(
        self, value: int, *, extensions: tuple[m.Extension, ...] = (), tamper: bool = False
    ) -> m.Report:
        vdaf = Prio3Sum(max_measurement=255)
        if tamper:  # a malicious client: the leader's measurement share is off by one bit
            real = vdaf.shard

            def shard(*args: Any) -> tuple[bytes, list[bytes]]:
                public, shares = real(*args)
                return public, [bytes([shares[0][0] ^ 1]) + shares[0][1:], shares[1]]

            vdaf.shard = shard  # type: ignore[method-assign]
        client = Client(
            leader=L,
            helper=H,
            task_id=self.task_id,
            vdaf=vdaf,
            time_precision=TP,
            extensions=extensions,
        )
        client._configs = {L: self.config(self.leader), H: self.config(self.helper)}
        report = client.prepare(value, time=NOW + 5)
        dap.upload(self.leader, self.task_id, report.encode(), now=NOW)
        return report

    def config(self, store: Store) -> Any:
        return dap.hpke_config_list(store, self.task_id).configs[0]

    def poll(self, job: bytes) -> bytes | None:
        return dap_leader.poll_collection(self.leader, self.task_id, job, "coll", self.helper_call)

    def start(self, job: bytes, start: int = NOW, duration: int = TP) -> None:
        req = m.CollectionReq(m.Query(1, batch_interval=m.Interval(start, duration)))
        dap_leader.create_collection(self.leader, self.task_id, job, req.encode(), "coll")


def _pair(**extra: Any) -> Pair:
    kp = HpkeKeypair.generate(1)
    task_id = os.urandom(32)
    params = {
        "task_id": b64encode(task_id),
        "leader": L,
        "helper": H,
        "vdaf": {"type": "Prio3Sum", "bits": "8"},
        "leader_authentication_token": "lead",
        "collector_authentication_token": "coll",
        "vdaf_verify_key": b64encode(os.urandom(32)),
        "query_type": 1,
        "min_batch_size": 3,
        "time_precision": TP,
        "collector_hpke_config": b64encode(kp.config.encode()),
        **extra,
    }
    stores = [open_store("memory://"), open_store("memory://")]
    for store, role in zip(stores, ("leader", "helper"), strict=True):
        dap.add_task(store, dict(params, role=role))
    return Pair(stores[0], stores[1], task_id, kp, Prio3Sum(max_measurement=255), [])


@pytest.fixture
def pair() -> Iterator[Pair]:
    p = _pair()
    yield p
    p.leader.close()
    p.helper.close()


def _open(p: Pair, body: bytes) -> int:
    col = Collector(
        leader=L, task_id=p.task_id, auth_token="coll", hpke_keypair=p.collector_kp, vdaf=p.vdaf
    )

    class Resp:
        status_code, content, text = 200, body, ""

    col._send = lambda *a, **k: Resp()  # type: ignore[method-assign,assignment,return-value]
    result = col.poll(b"j" * 16, m.Query(1, batch_interval=m.Interval(NOW, TP)))
    assert result is not None
    return int(result.aggregate)


def test_collection_is_the_exact_sum_and_a_tampered_report_is_rejected(pair: Pair) -> None:
    for v in (3, 200, 7):
        pair.upload(v)
    pair.upload(9, tamper=True)
    pair.start(b"c" * 16)
    out = pair.poll(b"c" * 16)
    assert out is not None
    collection = m.Collection.decode(out)
    assert collection.report_count == 3
    assert collection.interval == m.Interval(NOW, TP)
    assert _open(pair, out) == 210
    assert pair.poll(b"c" * 16) == out  # a repeated poll returns the stored collection
    with pair.helper.transaction(read_only=True) as tx:
        counts = {(c.status, c.reason): c.count for c in tx.vdaf_report_counts(pair.task_id.hex())}
    assert counts == {("accepted", None): 3, ("rejected", "vdaf_prep_error"): 1}
    with pytest.raises(dap.DapError, match="already collected"):  # the batch is closed
        pair.upload(1)


def test_replay_is_refused_at_upload_and_in_a_job(pair: Pair) -> None:
    report = pair.upload(1)
    with pytest.raises(dap.DapError, match="already uploaded") as err:
        dap.upload(pair.leader, pair.task_id, report.encode(), now=NOW)
    assert err.value.kind == "reportRejected"
    init = m.PrepareInit(
        m.ReportShare(report.metadata, report.public_share, report.helper_encrypted_input_share),
        m.PingPongMessage(0, prep_share=b"\x00" * 16),
    )
    req = m.AggregationJobInitReq(b"", m.PartialBatchSelector(1), (init, init)).encode()
    resp = m.AggregationJobResp.decode(
        dap.helper_init(pair.helper, pair.task_id, b"a" * 16, req, "lead")
    )
    assert resp.prepare_resps[1].error == m.PrepareError.REPORT_REPLAYED
    assert resp.prepare_resps[0].error == m.PrepareError.VDAF_PREP_ERROR  # a garbage verifier share
    # the same job again: the stored answer; another job with the report: replayed
    assert dap.helper_init(pair.helper, pair.task_id, b"a" * 16, req, "lead") == resp.encode()
    again = m.AggregationJobResp.decode(
        dap.helper_init(pair.helper, pair.task_id, b"b" * 16, req, "lead")
    )
    assert {r.error for r in again.prepare_resps} == {m.PrepareError.REPORT_REPLAYED}
    with pytest.raises(dap.DapError) as err:
        dap.helper_init(pair.helper, pair.task_id, b"a" * 16, req[:-1] + b"\x01", "lead")
    assert err.value.status in (400, 409)


def test_helper_refuses_a_count_or_checksum_that_differs(pair: Pair) -> None:
    reports = [pair.upload(v) for v in (1, 2, 3, 4)]
    pair.start(b"c" * 16)
    assert pair.poll(b"c" * 16) is not None
    other = _pair()
    for v in (1, 2, 3):
        other.upload(v)
    other.start(b"d" * 16)
    # the leader claims the reports, then lies about the count: the helper refuses
    dap_leader._claim(other.leader, other.task_id, (b"d" * 16).hex(), m.Interval(NOW, TP), 1000)
    with other.leader.transaction(read_only=True) as tx:
        task = dap.load(tx, other.task_id)
    for job in task.state["collections"][(b"d" * 16).hex()]["jobs"]:
        dap_leader._run_job(other.leader, task, (b"d" * 16).hex(), job, other.helper_call)
    ids = [r.metadata.report_id for r in reports[:3]]
    sel = m.BatchSelector(1, batch_interval=m.Interval(NOW, TP))
    for count, checksum in ((2, report_id_checksum(ids[:2])), (3, report_id_checksum(ids))):
        req = m.AggregateShareReq(sel, b"", count, checksum).encode()
        with pytest.raises(dap.DapError) as err:
            dap.helper_aggregate_share(other.helper, other.task_id, req, "lead")
        assert err.value.kind == "batchMismatch"


def test_nothing_is_released_below_min_batch_size(pair: Pair) -> None:
    pair.upload(5)
    pair.upload(6)
    pair.start(b"c" * 16)
    assert pair.poll(b"c" * 16) is None
    assert not any(name == "aggregate_shares" for _, name in pair.calls)
    pair.upload(7)
    out = pair.poll(b"c" * 16)
    assert out is not None and _open(pair, out) == 18


def test_tokens_roles_and_extension(pair: Pair) -> None:
    query = m.CollectionReq(m.Query(1, batch_interval=m.Interval(NOW, TP))).encode()
    with pytest.raises(dap.DapError) as err:
        dap_leader.create_collection(pair.leader, pair.task_id, b"c" * 16, query, "wrong")
    assert (err.value.kind, err.value.status) == ("unauthorizedRequest", 403)
    with pytest.raises(dap.DapError) as err:
        empty = m.AggregationJobInitReq(b"", m.PartialBatchSelector(1), ()).encode()
        dap.helper_init(pair.helper, pair.task_id, b"a" * 16, empty, "coll")
    assert err.value.status == 403
    report = pair.upload(1)
    with pytest.raises(dap.DapError) as err:  # an upload to the helper
        dap.upload(pair.helper, pair.task_id, report.encode(), now=NOW)
    assert err.value.status == 404
    with pytest.raises(dap.DapError) as err:  # misaligned batch interval
        pair.start(b"e" * 16, start=NOW + 1)
    assert err.value.kind == "batchInvalid"
    signed = _pair(fedstats_task="ab" * 32)
    with pytest.raises(dap.DapError, match="signed-task extension"):
        signed.upload(1)  # a plain client, and the task does not allow plain clients
    with pytest.raises(dap.DapError, match="another task"):
        signed.upload(1, extensions=(m.Extension(FEDSTATS_TASK_EXTENSION, b"\x01" * 32),))
    signed.upload(1, extensions=(m.Extension(FEDSTATS_TASK_EXTENSION, bytes.fromhex("ab" * 32)),))
    both = _pair(
        fedstats_task="ab" * 32, allow_plain=True
    )  # fedstats devices and plain DAP clients
    both.upload(1)
    both.upload(1, extensions=(m.Extension(FEDSTATS_TASK_EXTENSION, bytes.fromhex("ab" * 32)),))
    with pytest.raises(dap.DapError, match="another task"):
        both.upload(1, extensions=(m.Extension(FEDSTATS_TASK_EXTENSION, b"\x01" * 32),))


def test_fixed_size_current_batch_takes_at_most_max_batch_size() -> None:
    p = _pair(query_type=2, max_batch_size=4)
    value = {p.upload(v).metadata.report_id.hex(): v for v in (1, 2, 4, 8, 16, 32)}
    query = m.CollectionReq(m.Query(2, fixed_size_query=m.FixedSizeQuery(None))).encode()
    dap_leader.create_collection(p.leader, p.task_id, b"f" * 16, query, "coll")
    out = p.poll(b"f" * 16)
    assert out is not None
    collection = m.Collection.decode(out)
    batch_id = collection.partial_batch_selector.batch_id
    assert batch_id is not None and collection.report_count == 4
    col = Collector(
        leader=L, task_id=p.task_id, auth_token="coll", hpke_keypair=p.collector_kp, vdaf=p.vdaf
    )

    class Resp:
        status_code, content, text = 200, out, ""

    col._send = lambda *a, **k: Resp()  # type: ignore[method-assign,assignment,return-value]
    result = col.poll(b"f" * 16, m.Query(2, fixed_size_query=m.FixedSizeQuery(None)))
    assert result is not None and result.batch_id == batch_id
    with p.leader.transaction(read_only=True) as tx:
        pending = tx.vdaf_pending(p.task_id.hex(), 10)
    assert len(pending) == 2  # four reports in the batch, two left for the next one
    assert result.aggregate == 63 - sum(value[r] for r in pending)
    by_id = m.CollectionReq(m.Query(2, fixed_size_query=m.FixedSizeQuery(batch_id))).encode()
    with pytest.raises(dap.DapError, match="by_batch_id"):
        dap_leader.create_collection(p.leader, p.task_id, b"g" * 16, by_id, "coll")
    with pytest.raises(
        dap.DapError, match="query type"
    ):  # a time-interval query on a fixed-size task
        p.start(b"h" * 16)
