"""The DAP-09 leader's collection jobs: aggregate the batch with the helper, then release both shares.

A collector creates a collection job (:func:`create_collection`, ``PUT
/tasks/{id}/collection_jobs/{job}``) and polls it (:func:`poll_collection`, ``POST`` on the same URL). Each
poll of an unfinished job:

1. claims the pending reports whose time lies in the batch interval into a new aggregation job (its id and
   report ids stored in the job row and the collection's state, so a failed helper call is retried with
   the identical request, which the helper answers from its stored answer);
2. runs ``verify_init`` on each report and sends the helper the ``AggregationJobInitReq`` (ping-pong
   ``initialize`` with the leader's verifier share); with the helper's ``finish(message)`` it runs
   ``verify_next`` and adds the output share; a rejected report is counted with the helper's reason;
3. once no pending report of the interval is left and at least ``min_batch_size`` reports were accepted,
   asks the helper for its aggregate share (``AggregateShareReq`` with the report count and the checksum of
   the report ids), seals its own to the collector and stores the ``Collection``, which later polls return.

Nothing is released for a batch of fewer than ``min_batch_size`` reports: the poll answers "not ready".
HTTP to the helper goes through the ``helper`` callable the HTTP layer passes in.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from fedstats.dap import messages as m
from fedstats.dap.hpke import seal
from fedstats.dap.task import agg_share_info, b64encode, report_id_checksum
from fedstats.errors import DataError, ParameterError, SecurityError, UnavailableError
from fedstats.service.domain.dap import DapError, DapTask, check_token, load, save_state, unpack
from fedstats.service.store import Store

__all__ = ["HelperCall", "create_collection", "poll_collection"]

HelperCall = Callable[[str, str, bytes, str, str], tuple[int, bytes]]
"""``helper(method, url, body, media_type, token) -> (status, body)``: one request to the helper."""


def create_collection(
    store: Store, task_id: bytes, job_id: bytes, body: bytes, token: str | None
) -> None:
    """Create a collection job on the leader (DAP-09 §4.6.1). A repeated identical request is a no-op.

    Raises
    ------
    DapError
        ``invalidMessage`` (malformed, another query type than the task's, a fixed-size ``by_batch_id``
        query, a non-empty aggregation parameter, a job id reused with another query), ``batchInvalid`` (interval not aligned to the time precision), ``batchOverlap``
        (overlaps a collected or collecting batch), ``unauthorizedRequest``, ``unrecognizedTask``.
    """
    try:
        req = m.CollectionReq.decode(body)
    except DataError as exc:
        raise DapError("invalidMessage", f"CollectionReq: {exc}") from None
    iv = req.query.batch_interval
    if req.aggregation_parameter:
        raise DapError("invalidMessage", "Prio3 takes an empty aggregation parameter")
    fsq = req.query.fixed_size_query
    if fsq is not None and fsq.batch_id is not None:
        raise DapError(
            "invalidMessage", "by_batch_id queries are not served (a batch is collected once)"
        )
    jid = job_id.hex()
    with store.transaction() as tx:
        task = load(tx, task_id, lock=True)
        check_token(task, token, collector=True)
        if req.query.query_type != task.query_type:
            raise DapError("invalidMessage", f"the task's query type is {task.query_type}")
        tp = int(task.state["time_precision"])
        if iv is not None and (iv.start % tp or iv.duration % tp or iv.duration == 0):
            raise DapError(
                "batchInvalid",
                f"batch interval must be a non-empty multiple of time_precision ({tp} s)",
            )
        old = task.state["collections"].get(jid)
        if old is not None:
            if old["query"] != body.hex():
                raise DapError(
                    "invalidMessage", f"collection job {jid} exists with another query", 409
                )
            return
        for other in task.state["collections"].values():
            o = m.CollectionReq.decode(bytes.fromhex(other["query"])).query.batch_interval
            if iv is None or o is None:
                continue
            if o.start < iv.start + iv.duration and iv.start < o.start + o.duration:
                raise DapError(
                    "batchOverlap", "the batch interval overlaps another collection job's"
                )
        task.state["collections"][jid] = {
            "query": body.hex(),
            "agg": None,
            "count": 0,
            "rejected": 0,
            "checksum": bytes(32).hex(),
            "min": None,
            "max": None,
            "jobs": [],
            "claimed": 0,
            "batch_id": None
            if iv is not None
            else os.urandom(32).hex(),  # current_batch: a new batch
            "result": None,
        }
        save_state(tx, task)


def _claim(store: Store, task_id: bytes, jid: str, interval: m.Interval | None, limit: int) -> bool:
    """Claim up to ``limit`` pending reports into a new aggregation job; False if none.

    A time-interval collection takes the reports of its interval; a fixed-size one any pending report,
    up to the task's ``max_batch_size`` in all.
    """
    with store.transaction() as tx:
        task = load(tx, task_id, lock=True)
        c = task.state["collections"][jid]
        max_batch = task.state.get("max_batch_size")
        if interval is None and max_batch is not None:
            limit = min(limit, int(max_batch) - int(c.get("claimed", 0)))
        if limit <= 0:
            return False
        pending = tx.vdaf_pending(task.row.id, 1 << 30 if interval is not None else limit)
        if interval is not None:
            shares = tx.vdaf_shares(task.row.id, pending)
            pending = [r for r in pending if interval.contains(unpack(shares[r].input_share)[0])]
        mine = pending[:limit]
        if not mine:
            return False
        agg_job = os.urandom(16).hex()
        tx.take_vdaf_reports(task.row.id, mine, agg_job)
        tx.add_vdaf_job(task.row.id, agg_job, mine, time.time())
        c["jobs"].append(agg_job)
        c["claimed"] = int(c.get("claimed", 0)) + len(mine)
        save_state(tx, task)
        return True


def _run_job(store: Store, task: DapTask, jid: str, agg_job: str, helper: HelperCall) -> None:
    """Run (or re-run, identically) one aggregation job with the helper and add its results."""
    with store.transaction(read_only=True) as tx:
        job = tx.vdaf_job(task.row.id, agg_job)
        assert job is not None
        shares = tx.vdaf_shares(task.row.id, job.report_ids)
    v, ctx, key = task.vdaf, task.row.ctx, task.row.verify_key
    inits, states, times = [], {}, {}
    for rid_hex in job.report_ids:
        row = shares[rid_hex]
        t, leader_share, helper_ct = unpack(row.input_share)
        rid = bytes.fromhex(rid_hex)
        md = m.ReportMetadata(rid, t)
        try:
            state, vs = v.verify_init(key, ctx, 0, rid, row.public_share, leader_share)
        except (DataError, SecurityError, ParameterError):
            continue  # the leader rejects it alone; the helper never sees it
        states[rid], times[rid] = state, t
        inits.append(
            m.PrepareInit(
                m.ReportShare(md, row.public_share, helper_ct), m.PingPongMessage(0, prep_share=vs)
            )
        )
    batch_id = task.state["collections"][jid].get("batch_id")
    pbs = m.PartialBatchSelector(
        task.query_type, None if batch_id is None else bytes.fromhex(batch_id)
    )
    req = m.AggregationJobInitReq(b"", pbs, tuple(inits))
    url = f"{task.row.peer_url}/tasks/{b64encode(task.task_id)}/aggregation_jobs/{b64encode(bytes.fromhex(agg_job))}"
    status, body = helper(
        "PUT", url, req.encode(), m.AggregationJobInitReq.MEDIA_TYPE, str(task.row.peer_token)
    )
    if status >= 300:
        raise UnavailableError(
            f"the helper refused aggregation job {agg_job} ({status}): {body[:200]!r}"
        )
    try:
        resp = m.AggregationJobResp.decode(body)
    except DataError as exc:
        raise UnavailableError(f"the helper's AggregationJobResp is malformed: {exc}") from None
    if [r.report_id for r in resp.prepare_resps] != [
        i.report_share.metadata.report_id for i in inits
    ]:
        raise UnavailableError(
            "the helper's AggregationJobResp does not list the job's reports in order"
        )
    accepted: list[bytes] = []
    agg = None
    fates: dict[str | None, list[str]] = {}
    for r in resp.prepare_resps:
        reason: str | None = r.error.name.lower() if r.error is not None else "invalid_message"
        msg = r.message
        if (
            r.result == m.PrepareResp.CONTINUE
            and msg is not None
            and msg.type == 2
            and msg.prep_msg is not None
        ):
            try:
                out = v.verify_next(states[r.report_id], msg.prep_msg)
                agg = out if agg is None else v.field.add(agg, out)
                accepted.append(r.report_id)
                reason = None
            except (SecurityError, DataError):
                reason = "vdaf_prep_error"
        fates.setdefault(reason, []).append(r.report_id.hex())
    leader_rejected = [x for x in job.report_ids if bytes.fromhex(x) not in states]
    if leader_rejected:
        fates.setdefault("vdaf_prep_error", []).extend(leader_rejected)
    with store.transaction() as tx:
        task = load(tx, task.task_id, lock=True)
        if not tx.finish_vdaf_job(task.row.id, agg_job, body.hex()):
            return  # another poll finished it
        for reason, ids in fates.items():
            tx.set_vdaf_fates(task.row.id, ids, agg_job, reason)
        c = task.state["collections"][jid]
        if agg is not None:
            old = None if c["agg"] is None else v.decode_agg_share(bytes.fromhex(c["agg"]))
            c["agg"] = v.encode_agg_share(agg if old is None else v.field.add(old, agg)).hex()
        c["count"] += len(accepted)
        c["rejected"] += len(job.report_ids) - len(accepted)
        c["checksum"] = (
            (int(c["checksum"], 16) ^ int.from_bytes(report_id_checksum(accepted), "big"))
            .to_bytes(32, "big")
            .hex()
        )
        ts = [times[r] for r in accepted] + [x for x in (c["min"], c["max"]) if x is not None]
        c["min"], c["max"] = (min(ts), max(ts)) if ts else (None, None)
        save_state(tx, task)


def poll_collection(
    store: Store,
    task_id: bytes,
    job_id: bytes,
    token: str | None,
    helper: HelperCall,
    *,
    batch_size: int = 1000,
) -> bytes | None:
    """Advance a collection job; its encoded ``Collection`` once done, None while it is not (202).

    Raises
    ------
    DapError
        ``unrecognizedCollectionJob`` (404), ``unauthorizedRequest``, ``unrecognizedTask``, or the
        helper's refusal of the aggregate share (``batchMismatch``, ...), passed on.
    UnavailableError
        If the helper cannot be reached (503; the next poll retries the same requests).
    """
    jid = job_id.hex()
    with store.transaction(read_only=True) as tx:
        task = load(tx, task_id)
    check_token(task, token, collector=True)
    c = task.state["collections"].get(jid)
    if c is None:
        raise DapError("unrecognizedCollectionJob", f"no collection job {jid}", 404)
    if c["result"] is not None:
        return bytes.fromhex(c["result"])
    query = m.CollectionReq.decode(bytes.fromhex(c["query"])).query
    iv = query.batch_interval  # None: a fixed-size collection (the current batch)
    _claim(store, task_id, jid, iv, batch_size)
    with store.transaction(read_only=True) as tx:
        task = load(tx, task_id)
        jobs = [tx.vdaf_job(task.row.id, j) for j in task.state["collections"][jid]["jobs"]]
        running = [j.job_id for j in jobs if j is not None and j.status == "running"]
    for agg_job in running:
        _run_job(store, task, jid, agg_job, helper)
    if _claim(store, task_id, jid, iv, batch_size):
        return None  # more reports of the interval are pending: the next poll aggregates them
    with store.transaction(read_only=True) as tx:
        task = load(tx, task_id)
    c = task.state["collections"][jid]
    if c["count"] < task.row.min_batch_size:
        return None
    return _finish(store, task, jid, iv, helper)


def _finish(
    store: Store, task: DapTask, jid: str, iv: m.Interval | None, helper: HelperCall
) -> bytes:
    c = task.state["collections"][jid]
    batch_id = None if c.get("batch_id") is None else bytes.fromhex(c["batch_id"])
    sel = m.BatchSelector(task.query_type, batch_interval=iv, batch_id=batch_id)
    req = m.AggregateShareReq(sel, b"", int(c["count"]), bytes.fromhex(c["checksum"]))
    url = f"{task.row.peer_url}/tasks/{b64encode(task.task_id)}/aggregate_shares"
    status, body = helper(
        "POST", url, req.encode(), m.AggregateShareReq.MEDIA_TYPE, str(task.row.peer_token)
    )
    if status >= 500:
        raise UnavailableError(f"the helper answered {status} to the aggregate share request")
    if status >= 300:
        raise DapError(
            "batchMismatch", f"the helper refused the aggregate share ({status}): {body[:300]!r}"
        )
    helper_ct = m.AggregateShare.decode(body).encrypted_aggregate_share
    aad = m.AggregateShareAad(task.task_id, b"", sel).encode()
    leader_ct = seal(
        task.collector_config, agg_share_info(m.Role.LEADER), bytes.fromhex(c["agg"]), aad
    )
    tp = int(task.state["time_precision"])
    start = int(c["min"]) - int(c["min"]) % tp
    span = m.Interval(start, int(c["max"]) - start + tp)
    collection = m.Collection(
        m.PartialBatchSelector(task.query_type, batch_id),
        int(c["count"]),
        span,
        leader_ct,
        helper_ct,
    )
    with store.transaction() as tx:
        task = load(tx, task.task_id, lock=True)
        c = task.state["collections"][jid]
        if c["result"] is None:
            c["result"] = collection.encode().hex()
            if iv is not None:
                task.state["collected"].append([iv.start, iv.duration])
            save_state(tx, task)
        return bytes.fromhex(c["result"])
