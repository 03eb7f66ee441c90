"""DAP-09 aggregator (leader and helper) on the Prio3 state: tasks, HPKE configs, uploads, the helper side.

A DAP task is a ``vdaf_tasks`` row (id: the hex of the 32-byte task id) whose ``dap`` column holds its
DAP parameters and state as JSON: the query type (time-interval only on these routes), time precision,
the collector's HPKE configuration, this aggregator's HPKE key pair, the hash of the collector's token
(leader), the helper's finished aggregation jobs with their aggregate shares (helper), the collection jobs
(leader) and the collected intervals. Reports are ``vdaf_reports`` rows keyed by their report id (hex),
which is also their ``client_id``: a second report with the same id is refused (replay protection).

* **Upload** (:func:`upload`, leader): decode the :class:`~fedstats.dap.messages.Report`, open the
  leader's input share (HPKE, DAP-09 §4.4.2), check its extensions, store it with the helper's sealed
  share, refuse a replayed id, a time in a collected interval or too far in the future.
* **Aggregation job** (:func:`helper_init`, helper): for each ``PrepareInit``, refuse a replayed report or
  one of a collected batch, open the helper's share, run ``verify_init``, combine the leader's verifier
  share with its own into the verifier message, run ``verify_next``, answer ``continue`` with the ping-pong
  ``finish(message)`` or ``reject`` with a :class:`~fedstats.dap.messages.PrepareError`; the job's answer
  is stored, so a retried job gets the same answer and adds nothing twice.
* **Aggregate share** (:func:`helper_aggregate_share`, helper): sum the jobs of the batch interval, check
  the leader's report count and checksum, seal the share to the collector.
* The leader's collection jobs are in :mod:`fedstats.service.domain.dap_leader`.

fedstats' analyst-signed task travels as the report extension
:data:`~fedstats.dap.task.FEDSTATS_TASK_EXTENSION` (the signed task's id): a task created with
``fedstats_task`` refuses reports whose extension names another task, and reports without it unless
``allow_plain`` (then a plain DAP client can upload).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fedstats.dap import messages as m
from fedstats.dap.codec import Reader, decode_all, opaque32, u64
from fedstats.dap.hpke import HpkeConfig, HpkeKeypair, open_, seal
from fedstats.dap.task import (
    FEDSTATS_TASK_EXTENSION,
    agg_share_info,
    b64decode,
    b64decode_bytes,
    input_share_info,
    report_id_checksum,
    vdaf_ctx,
    vdaf_spec_from_interop,
)
from fedstats.errors import DataError, FedstatsError, ParameterError, SecurityError
from fedstats.service.domain.tasks import ConflictError
from fedstats.service.domain.vdaf import vdaf_from_spec
from fedstats.service.store import State, Store
from fedstats.service.store.vdaf import VdafTaskRow
from fedstats.vdaf import Prio3
from fedstats.wire import auth

__all__ = [
    "DapError",
    "DapTask",
    "add_task",
    "check_token",
    "helper_aggregate_share",
    "helper_init",
    "hpke_config_list",
    "load",
    "save_state",
    "upload",
    "vdaf_spec_from_interop",
]

MAX_CLOCK_SKEW = 3600  # seconds a report's time may be ahead of this aggregator's clock


class DapError(FedstatsError):
    """A DAP request refused with a DAP problem type (DAP-09 §3.2), answered as ``application/problem+json``.

    Parameters
    ----------
    kind : str
        The problem type's last part (``invalidMessage``, ``reportRejected``, ``batchMismatch``, ...).
    detail : str
        What was wrong, naming the field.
    status : int
        The HTTP status (400 unless stated).
    """

    def __init__(self, kind: str, detail: str, status: int = 400) -> None:
        self.kind = kind
        self.status = status
        super().__init__(detail)


@dataclass(frozen=True)
class DapTask:
    """A loaded DAP task: its row, its parameters and state (``dap`` JSON) and its VDAF."""

    row: VdafTaskRow
    state: dict[str, Any]
    vdaf: Prio3

    @property
    def task_id(self) -> bytes:
        """The 32-byte task id."""
        return bytes.fromhex(self.row.id)

    @property
    def keypair(self) -> HpkeKeypair:
        """The task's HPKE key pair on this aggregator."""
        hp = self.state["hpke"]
        return HpkeKeypair(HpkeConfig.decode(bytes.fromhex(hp["config"])), bytes.fromhex(hp["sk"]))

    @property
    def collector_config(self) -> HpkeConfig:
        """The collector's HPKE configuration."""
        return HpkeConfig.decode(bytes.fromhex(self.state["collector_hpke_config"]))

    def collected(self, t: int) -> bool:
        """True if time ``t`` lies in a collected batch interval (time-interval tasks)."""
        return any(s <= t < s + d for s, d in self.state.get("collected", []))

    @property
    def query_type(self) -> int:
        """1 (time-interval) or 2 (fixed-size)."""
        return int(self.state["query_type"])


def add_task(store: Store, params: Mapping[str, Any], *, config_id: int | None = None) -> DapTask:
    """Create a DAP task on this aggregator (the interop design's ``add_task`` parameters).

    Parameters
    ----------
    params : mapping
        ``task_id`` (base64url, 32 bytes), ``role`` (``leader`` or ``helper``), ``leader`` and ``helper``
        (URLs), ``vdaf`` (an interop VDAF object or fedstats' description), ``vdaf_verify_key``
        (base64url, 32 bytes), ``leader_authentication_token``, ``collector_authentication_token``
        (leader), ``query_type`` (1 time-interval, 2 fixed-size), ``min_batch_size`` (>= 1),
        ``max_batch_size`` (fixed-size, optional),
        ``time_precision`` (seconds, >= 1), ``collector_hpke_config`` (base64url of an ``HpkeConfig``);
        optional ``fedstats_task`` (hex id of the analyst-signed task) and ``allow_plain`` (bool).
    config_id : int, optional
        This aggregator's HPKE config id for the task (random by default).

    Raises
    ------
    ParameterError
        If a parameter is missing or out of range (named).
    ConflictError
        If the task exists with other parameters.
    """
    p = dict(params)

    def need(key: str) -> Any:
        if p.get(key) in (None, ""):
            raise ParameterError(
                key, p.get(key), "a value (see the interop test design's add_task)"
            )
        return p[key]

    task_id = b64decode(str(need("task_id")), "task_id", 32)
    role = need("role")
    if role not in ("leader", "helper"):
        raise ParameterError("role", role, "'leader' or 'helper'")
    vdaf_obj = need("vdaf")
    spec = (
        vdaf_spec_from_interop(vdaf_obj)
        if str(vdaf_obj.get("type", "")).startswith("Prio3")
        else dict(vdaf_obj)
    )
    vdaf_from_spec(spec)  # validates
    verify_key = b64decode(str(need("vdaf_verify_key")), "vdaf_verify_key", 32)
    query_type = int(p.get("query_type", 1))
    if query_type not in (m.QUERY_TIME_INTERVAL, m.QUERY_FIXED_SIZE):
        raise ParameterError(
            "query_type", p.get("query_type"), "1 (time_interval) or 2 (fixed_size)"
        )
    max_batch = p.get("max_batch_size")
    if max_batch is not None and int(max_batch) < 1:
        raise ParameterError("max_batch_size", max_batch, "an integer >= 1 or null")
    min_batch = int(need("min_batch_size"))
    precision = int(need("time_precision"))
    if min_batch < 1 or precision < 1:
        raise ParameterError(
            "min_batch_size/time_precision", (min_batch, precision), "integers >= 1"
        )
    collector_cfg = HpkeConfig.decode(
        b64decode_bytes(str(need("collector_hpke_config")), "collector_hpke_config")
    )
    token = str(need("leader_authentication_token"))
    state: dict[str, Any] = {
        "version": m.DAP_VERSION,
        "query_type": query_type,
        "max_batch_size": None if max_batch is None else int(max_batch),
        "time_precision": precision,
        "collector_hpke_config": collector_cfg.encode().hex(),
        "fedstats_task": p.get("fedstats_task"),
        "allow_plain": bool(p.get("allow_plain", p.get("fedstats_task") is None)),
        "leader": str(need("leader")).rstrip("/"),
        "helper": str(need("helper")).rstrip("/"),
        "collected": [],
        "jobs": {},
        "collections": {},
        "agg_shares": {},
    }
    if role == "leader":
        state["collector_token_hash"] = auth.hash_token(str(need("collector_authentication_token")))
    cid = secrets.randbelow(256) if config_id is None else config_id
    kp = HpkeKeypair.generate(cid)
    state["hpke"] = {"config": kp.config.encode().hex(), "sk": kp.private_key.hex()}
    row = VdafTaskRow(
        id=task_id.hex(),
        role=role,
        vdaf=json.dumps(spec, sort_keys=True),
        ctx=vdaf_ctx(task_id),
        verify_key=verify_key,
        peer_url=state["helper"] if role == "leader" else state["leader"],
        peer_token=token if role == "leader" else None,
        peer_token_hash=auth.hash_token(token) if role == "helper" else None,
        population="dap",
        min_batch_size=min_batch,
        noise=None,
        created_at=time.time(),
        dap=json.dumps(state, sort_keys=True),
    )
    with store.transaction() as tx:
        old = tx.vdaf_task(row.id, lock=True)
        if old is not None:
            if (
                old.dap is None
                or old.role != role
                or old.vdaf != row.vdaf
                or old.verify_key != verify_key
            ):
                raise ConflictError(f"task {m.DAP_VERSION} {row.id} exists with other parameters")
            return _loaded(old)
        tx.add_vdaf_task(row)
    return _loaded(row)


def _loaded(row: VdafTaskRow) -> DapTask:
    return DapTask(row, json.loads(row.dap or "{}"), vdaf_from_spec(json.loads(row.vdaf)))


def load(tx: State, task_id: bytes, *, lock: bool = False) -> DapTask:
    """The DAP task in the open transaction. Raises DapError ``unrecognizedTask`` (404) if absent."""
    row = tx.vdaf_task(task_id.hex(), lock=lock)
    if row is None or row.dap is None:
        raise DapError("unrecognizedTask", f"no DAP task {task_id.hex()}", 404)
    return _loaded(row)


def save_state(tx: State, task: DapTask) -> None:
    """Write the task's DAP state (the caller holds its lock)."""
    tx.set_vdaf_dap(task.row.id, json.dumps(task.state, sort_keys=True))


def check_token(task: DapTask, token: str | None, *, collector: bool) -> None:
    """Check a request's ``DAP-Auth-Token``: the collector's on the leader, the leader's on the helper.

    Raises
    ------
    DapError
        ``unauthorizedRequest`` (403) if it is missing or wrong, or this aggregator has the wrong role.
    """
    want = task.state.get("collector_token_hash") if collector else task.row.peer_token_hash
    role_ok = task.row.role == ("leader" if collector else "helper")
    if (
        not role_ok
        or not token
        or not want
        or not secrets.compare_digest(str(want), auth.hash_token(token))
    ):
        raise DapError("unauthorizedRequest", "missing or wrong DAP-Auth-Token for this task", 403)


def hpke_config_list(store: Store, task_id: bytes) -> m.HpkeConfigList:
    """The HPKE configurations of this aggregator for a task (``GET /hpke_config?task_id=``)."""
    with store.transaction(read_only=True) as tx:
        return m.HpkeConfigList((load(tx, task_id).keypair.config,))


def _open_share(
    task: DapTask, role: m.Role, md: m.ReportMetadata, public: bytes, ct: m.HpkeCiphertext
) -> bytes:
    """Open this aggregator's input share and check its extensions; return the VDAF input share."""
    kp = task.keypair
    if ct.config_id != kp.config.id:
        raise DapError(
            "outdatedConfig", f"HPKE config id {ct.config_id} is not this task's ({kp.config.id})"
        )
    aad = m.InputShareAad(task.task_id, md, public).encode()
    plain = m.PlaintextInputShare.decode(open_(kp, input_share_info(role), ct, aad))
    want = task.state.get("fedstats_task")
    ext = {e.extension_type: e.extension_data for e in plain.extensions}
    got = ext.get(FEDSTATS_TASK_EXTENSION)
    if got is None and not task.state.get("allow_plain"):
        raise DapError(
            "reportRejected",
            "this task takes only reports of fedstats devices (the signed-task extension)",
        )
    if got is not None and (want is None or got != bytes.fromhex(want)):
        raise DapError("reportRejected", "the report's signed-task extension names another task")
    return plain.payload


def _pack(time_: int, leader_share: bytes, helper_ct: m.HpkeCiphertext) -> bytes:
    return u64(time_) + opaque32(leader_share) + helper_ct.encode()


def unpack(data: bytes) -> tuple[int, bytes, m.HpkeCiphertext]:
    """A stored leader report: its time, the leader's input share and the helper's sealed share."""

    def read(r: Reader) -> tuple[int, bytes, m.HpkeCiphertext]:
        return r.u64(), r.opaque32(), m.HpkeCiphertext.read(r)

    return decode_all(data, "stored report", read)


def upload(store: Store, task_id: bytes, body: bytes, *, now: float | None = None) -> None:
    """Store an uploaded report on the leader (``PUT /tasks/{task-id}/reports``; DAP-09 §4.4.2).

    Raises
    ------
    DapError
        ``invalidMessage`` (malformed report), ``outdatedConfig`` (unknown HPKE config id),
        ``reportRejected`` (does not open, replayed id, collected batch, extension refused),
        ``reportTooEarly`` (time too far ahead), ``unrecognizedTask`` (404).
    """
    clock = time.time() if now is None else now
    try:
        report = m.Report.decode(body)
    except DataError as exc:
        raise DapError("invalidMessage", f"Report: {exc}") from None
    md = report.metadata
    with store.transaction(read_only=True) as tx:
        task = load(tx, task_id)
    if task.row.role != "leader":
        raise DapError("unrecognizedTask", "this aggregator is not the task's leader", 404)
    if md.time > clock + MAX_CLOCK_SKEW:
        raise DapError(
            "reportTooEarly", f"report time {md.time} is ahead of this aggregator's clock"
        )
    if task.query_type == m.QUERY_TIME_INTERVAL and task.collected(md.time):
        raise DapError("reportRejected", "the report's batch interval was already collected")
    try:
        leader_share = _open_share(
            task, m.Role.LEADER, md, report.public_share, report.leader_encrypted_input_share
        )
    except (SecurityError, DataError) as exc:
        raise DapError("reportRejected", f"leader input share: {exc}") from None
    rid = md.report_id.hex()
    with store.transaction() as tx:
        if tx.vdaf_report_of(task.row.id, rid, rid) is not None:
            raise DapError("reportRejected", f"report id {rid} was already uploaded (replay)")
        packed = _pack(md.time, leader_share, report.helper_encrypted_input_share)
        tx.add_vdaf_report(task.row.id, rid, rid, report.public_share, packed, clock)


def _prep_helper(task: DapTask, init: m.PrepareInit, seen: set[bytes]) -> tuple[m.PrepareResp, Any]:
    """The helper's step for one report: its response and its output share (None if rejected)."""
    md = init.report_share.metadata
    rid = md.report_id

    def reject(err: m.PrepareError) -> tuple[m.PrepareResp, Any]:
        return m.PrepareResp(rid, m.PrepareResp.REJECT, error=err), None

    if rid in seen:
        return reject(m.PrepareError.REPORT_REPLAYED)
    seen.add(rid)
    if task.query_type == m.QUERY_TIME_INTERVAL and task.collected(md.time):
        return reject(m.PrepareError.BATCH_COLLECTED)
    rs = init.report_share
    if rs.encrypted_input_share.config_id != task.keypair.config.id:
        return reject(m.PrepareError.HPKE_UNKNOWN_CONFIG_ID)
    try:
        share = _open_share(task, m.Role.HELPER, md, rs.public_share, rs.encrypted_input_share)
    except SecurityError:
        return reject(m.PrepareError.HPKE_DECRYPT_ERROR)
    except (DataError, DapError):
        return reject(m.PrepareError.INVALID_MESSAGE)
    if init.message.type != m.PingPongMessage.INITIALIZE or init.message.prep_share is None:
        return reject(m.PrepareError.INVALID_MESSAGE)
    v, ctx = task.vdaf, task.row.ctx
    try:
        state, mine = v.verify_init(task.row.verify_key, ctx, 1, rid, rs.public_share, share)
        msg = v.verifier_shares_to_message(ctx, [init.message.prep_share, mine])
        out = v.verify_next(state, msg)
    except (SecurityError, DataError, ParameterError):
        return reject(m.PrepareError.VDAF_PREP_ERROR)
    return m.PrepareResp(
        rid, m.PrepareResp.CONTINUE, message=m.PingPongMessage(2, prep_msg=msg)
    ), out


def helper_init(
    store: Store, task_id: bytes, job_id: bytes, body: bytes, token: str | None
) -> bytes:
    """The helper's side of an aggregation job (``PUT /tasks/{id}/aggregation_jobs/{job}``; DAP-09 §4.5.1).

    Returns the encoded :class:`~fedstats.dap.messages.AggregationJobResp`. A retried job (same body)
    gets the stored answer; the same job id with another body is refused.

    Raises
    ------
    DapError
        ``unauthorizedRequest``, ``invalidMessage`` (malformed, or not a time-interval job with an empty
        aggregation parameter), ``unrecognizedTask``.
    """
    try:
        req = m.AggregationJobInitReq.decode(body)
    except DataError as exc:
        raise DapError("invalidMessage", f"AggregationJobInitReq: {exc}") from None
    if req.aggregation_parameter:
        raise DapError("invalidMessage", "Prio3 takes an empty aggregation parameter")
    batch_id = req.partial_batch_selector.batch_id
    jid = job_id.hex()
    digest = auth.hash_token(body.hex())
    with store.transaction() as tx:
        task = load(tx, task_id, lock=True)
        check_token(task, token, collector=False)
        if req.partial_batch_selector.query_type != task.query_type:
            raise DapError("invalidMessage", f"the task's query type is {task.query_type}")
        done = task.state["jobs"].get(jid)
        if done is not None:
            if done["request"] != digest:
                raise DapError(
                    "invalidMessage", f"aggregation job {jid} exists with another request", 409
                )
            job = tx.vdaf_job(task.row.id, jid)
            return bytes.fromhex(job.response or "") if job is not None else b""
        seen: set[bytes] = set()
        resps, accepted, agg, times = [], [], None, []
        for init in req.prepare_inits:
            rid = init.report_share.metadata.report_id
            if tx.vdaf_report_of(task.row.id, rid.hex(), rid.hex()) is not None:
                resp, out = m.PrepareResp(rid, 2, error=m.PrepareError.REPORT_REPLAYED), None
                seen.add(rid)
            else:
                resp, out = _prep_helper(task, init, seen)
                if (
                    resp.result != m.PrepareResp.REJECT
                    or resp.error != m.PrepareError.REPORT_REPLAYED
                ):
                    tx.add_vdaf_report(task.row.id, rid.hex(), rid.hex(), b"", b"", time.time())
                    reason = (
                        None
                        if out is not None
                        else resp.error.name.lower()
                        if resp.error
                        else "rejected"
                    )
                    tx.set_vdaf_fates(task.row.id, [rid.hex()], jid, reason)
            resps.append(resp)
            if out is not None:
                accepted.append(rid)
                times.append(init.report_share.metadata.time)
                agg = out if agg is None else task.vdaf.field.add(agg, out)
        answer = m.AggregationJobResp(tuple(resps)).encode()
        tx.add_vdaf_job(
            task.row.id,
            jid,
            [r.report_share.metadata.report_id.hex() for r in req.prepare_inits],
            time.time(),
        )
        tx.finish_vdaf_job(task.row.id, jid, answer.hex())
        task.state["jobs"][jid] = {
            "request": digest,
            "agg": None if agg is None else task.vdaf.encode_agg_share(agg).hex(),
            "count": len(accepted),
            "checksum": report_id_checksum(accepted).hex(),
            "min": min(times) if times else None,
            "max": max(times) if times else None,
            "batch_id": None if batch_id is None else batch_id.hex(),
            "collected": False,
        }
        save_state(tx, task)
    return answer


def _aligned(task: DapTask, interval: m.Interval) -> None:
    tp = int(task.state["time_precision"])
    if interval.start % tp or interval.duration % tp or interval.duration == 0:
        raise DapError(
            "batchInvalid",
            f"batch interval must be a non-empty multiple of time_precision ({tp} s)",
        )


def helper_aggregate_share(store: Store, task_id: bytes, body: bytes, token: str | None) -> bytes:
    """The helper's aggregate share for a batch (``POST /tasks/{id}/aggregate_shares``; DAP-09 §4.6.3).

    Sums the aggregation jobs whose reports lie in the batch interval, checks the leader's report count
    and checksum, seals the share to the collector and marks the interval collected. A repeated request
    for the same batch gets the same answer.

    Raises
    ------
    DapError
        ``batchMismatch`` (count or checksum differ), ``invalidBatchSize`` (fewer reports than
        ``min_batch_size``), ``batchOverlap`` (overlaps a collected batch), ``batchInvalid``,
        ``invalidMessage``, ``unauthorizedRequest``, ``unrecognizedTask``.
    """
    try:
        req = m.AggregateShareReq.decode(body)
    except DataError as exc:
        raise DapError("invalidMessage", f"AggregateShareReq: {exc}") from None
    sel = req.batch_selector
    if req.aggregation_parameter:
        raise DapError("invalidMessage", "Prio3 takes an empty aggregation parameter")
    key = sel.encode().hex()
    with store.transaction() as tx:
        task = load(tx, task_id, lock=True)
        check_token(task, token, collector=False)
        if sel.query_type != task.query_type:
            raise DapError("invalidMessage", f"the task's query type is {task.query_type}")
        if sel.batch_interval is not None:
            _aligned(task, sel.batch_interval)
        old = task.state["agg_shares"].get(key)
        if old is not None:
            if (old["count"], old["checksum"]) != (req.report_count, req.checksum.hex()):
                raise DapError(
                    "batchMismatch", "the batch was collected with another report count or checksum"
                )
            return bytes.fromhex(old["answer"])
        iv = sel.batch_interval
        if iv is not None:
            for s, d in task.state["collected"]:
                if s < iv.start + iv.duration and iv.start < s + d:
                    raise DapError("batchOverlap", "the batch interval overlaps a collected one")
            jobs = [
                j
                for j in task.state["jobs"].values()
                if not j["collected"]
                and j["count"]
                and iv.contains(j["min"])
                and iv.contains(j["max"])
            ]
        else:
            assert sel.batch_id is not None
            jobs = [
                j
                for j in task.state["jobs"].values()
                if j.get("batch_id") == sel.batch_id.hex() and j["count"] and not j["collected"]
            ]
        count = sum(int(j["count"]) for j in jobs)
        checksum = 0
        agg = task.vdaf.field.zeros(task.vdaf.flp.OUTPUT_LEN)
        for j in jobs:
            checksum ^= int(j["checksum"], 16)
            agg = task.vdaf.field.add(agg, task.vdaf.decode_agg_share(bytes.fromhex(j["agg"])))
        if (count, checksum.to_bytes(32, "big")) != (req.report_count, req.checksum):
            raise DapError(
                "batchMismatch",
                f"the helper aggregated {count} reports of this batch, the leader {req.report_count}",
            )
        if count < task.row.min_batch_size:
            raise DapError(
                "invalidBatchSize",
                f"{count} reports, fewer than min_batch_size {task.row.min_batch_size}",
            )
        aad = m.AggregateShareAad(task.task_id, b"", sel).encode()
        ct = seal(
            task.collector_config,
            agg_share_info(m.Role.HELPER),
            task.vdaf.encode_agg_share(agg),
            aad,
        )
        answer = m.AggregateShare(ct).encode()
        for j in jobs:
            j["collected"] = True
        if iv is not None:
            task.state["collected"].append([iv.start, iv.duration])
        task.state["agg_shares"][key] = {
            "count": count,
            "checksum": req.checksum.hex(),
            "answer": answer.hex(),
        }
        save_state(tx, task)
    return answer
