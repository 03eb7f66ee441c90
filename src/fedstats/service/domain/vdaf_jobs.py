"""The two-aggregator mode's aggregation jobs (Prio3): the leader's leased jobs, the helper's side; no HTTP.

Part of :mod:`fedstats.service.domain.vdaf` (which re-exports every public name).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fedstats.errors import DataError, ParameterError, SecurityError
from fedstats.service.domain.tasks import ConflictError
from fedstats.service.domain.vdaf_tasks import REASONS, _hex, task_row, vdaf_from_spec
from fedstats.service.domain.vdaf_upload import MISSING_CLIENT
from fedstats.service.store import State, Store
from fedstats.service.store.vdaf import VdafTaskRow
from fedstats.vdaf import Prio3

__all__ = ["helper_job", "run_leader_jobs"]


def _add_agg(vdaf: Prio3, old: bytes | None, new: np.ndarray) -> bytes:
    acc = new if old is None else vdaf.field.add(vdaf.decode_agg_share(bytes(old)), new)
    return vdaf.encode_agg_share(acc)


def _finish(
    tx: State,
    vdaf: Prio3,
    task_id: str,
    job_id: str,
    fates: dict[str, str | None],
    agg: np.ndarray,
    response: dict[str, Any] | None,
    lease: tuple[str, int] | None = None,
) -> bool:
    """Record a job's outcome in the open transaction; False if the job was already finished.

    ``lease``: the leader's ``(owner, epoch)`` of the job; if the job's lease is no longer exactly that
    (another leader process took it over), nothing is written (fencing) and False is returned.
    """
    task = task_row(tx, task_id, lock=True)
    if lease is not None:
        held = tx.vdaf_job(task_id, job_id)
        if held is None or (held.lease_owner, held.lease_epoch) != lease:
            return False
    if not tx.finish_vdaf_job(task_id, job_id, None if response is None else json.dumps(response)):
        return False
    accepted = [r for r, why in fates.items() if why is None]
    for reason in sorted({why for why in fates.values() if why is not None}):
        tx.set_vdaf_fates(task_id, [r for r, why in fates.items() if why == reason], job_id, reason)
    tx.set_vdaf_fates(task_id, accepted, job_id, None)
    tx.set_vdaf_totals(
        task_id,
        agg_share=_add_agg(vdaf, task.agg_share, agg),
        accepted=task.accepted + len(accepted),
        rejected=task.rejected + len(fates) - len(accepted),
    )
    return True


def _verify_batch(
    vdaf: Prio3,
    row: VdafTaskRow,
    agg_id: int,
    nonces: list[bytes],
    publics: list[bytes],
    shares: list[bytes],
) -> tuple[Any, Any]:
    """``verify_init`` on a batch of stored reports: (state, verifier shares)."""
    public = [vdaf.decode_public_share(p) for p in publics]
    inputs = vdaf.decode_input_shares(agg_id, shares)
    return vdaf.verify_init_batch(
        row.verify_key,
        row.ctx,
        agg_id,
        nonces,
        None if not vdaf.uses_joint_rand else [p for p in public if p is not None],
        inputs,
    )


def _decide(
    vdaf: Prio3, ctx: bytes, state: Any, shares: Sequence[Any]
) -> tuple[np.ndarray, np.ndarray]:
    """Combine both aggregators' verifier shares, finish verification: (output shares, ok)."""
    messages, ok = vdaf.verifier_shares_to_message_batch(ctx, list(shares))
    out, ok_next = vdaf.verify_next_batch(state, messages)
    return out, ok & ok_next


def run_leader_jobs(
    store: Store,
    task_id: str,
    send: Callable[[str, dict[str, Any]], dict[str, Any]],
    *,
    batch_size: int = 1000,
    max_jobs: int | None = None,
    owner: str | None = None,
    lease_seconds: float = 300.0,
) -> dict[str, int]:
    """The leader's aggregation: finish unfinished jobs, then turn pending reports into jobs.

    Every job is run under a **lease** (like the run driver's, :class:`fedstats.service.domain.driver.
    Driver`): claiming a job (a new one, or an unfinished one whose lease is free or expired) sets its
    owner, its expiry ``now + lease_seconds`` and increments its fencing token ``lease_epoch``, under the
    task's row lock. Two leader processes on one database therefore never run the same job at once, and a
    job whose leader crashed is taken over once its lease expired (the helper answers the resent job from
    its record, so nothing is added twice). The outcome is written only while the lease is still
    ``(owner, epoch)`` as claimed (fencing): a leader that lost its lease writes nothing.

    Parameters
    ----------
    store : Store
        The leader's database.
    task_id : str
    send : callable
        ``send(task_id, job)`` posts an aggregation job to the helper and returns its answer (the HTTP
        layer's transport, :func:`fedstats.service.http.vdaf.helper_transport`); raising leaves the job to
        be retried by the next call.
    batch_size : int
        Reports per job, in [1, 100000].
    max_jobs : int, optional
        Stop after this many jobs (default: until no report is pending).
    owner : str, optional
        This leader process's name in the leases (default: random per call).
    lease_seconds : float
        How long a claimed job is this process's, > 0 (default 300: longer than a job's helper request).

    Returns
    -------
    dict
        ``{"jobs", "accepted", "rejected"}`` of the jobs this call finished (a job that another leader
        process finished first counts there).

    Raises
    ------
    SecurityError
        If this aggregator is not the task's leader.
    ConflictError
        If the task was collected.
    DataError
        If the helper's answer is malformed.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise ParameterError("batch_size", batch_size, "an integer in [1, 100000]")
    if not 1 <= batch_size <= 100_000:
        raise ParameterError("batch_size", batch_size, "an integer in [1, 100000]")
    if isinstance(lease_seconds, bool) or not (
        isinstance(lease_seconds, (int, float)) and 0 < lease_seconds <= 86400
    ):
        raise ParameterError("lease_seconds", lease_seconds, "seconds in (0, 86400]")
    me = owner or f"leader-{secrets.token_hex(8)}"
    with store.transaction(read_only=True) as tx:
        row = task_row(tx, task_id)
    if row.role != "leader":
        raise SecurityError("only the leader drives aggregation")
    vdaf = vdaf_from_spec(json.loads(row.vdaf))
    totals = {"jobs": 0, "accepted": 0, "rejected": 0}
    while max_jobs is None or totals["jobs"] < max_jobs:
        job_id, report_ids, epoch = _claim(store, task_id, batch_size, me, float(lease_seconds))
        if job_id is None:
            break
        try:
            done = _leader_job(store, vdaf, row, job_id, report_ids, send, (me, epoch))
        except BaseException:
            _give_up(store, task_id, job_id, (me, epoch))  # any leader may retry it at once
            raise
        if done is not None:
            totals["jobs"] += 1
            totals["accepted"] += done[0]
            totals["rejected"] += done[1]
    return totals


def _give_up(store: Store, task_id: str, job_id: str, lease: tuple[str, int]) -> None:
    """Free a job's lease that this process still holds (its run failed: the helper was unreachable)."""
    try:
        with store.transaction() as tx:
            task_row(tx, task_id, lock=True)
            held = tx.vdaf_job(task_id, job_id)
            if (
                held is not None
                and (held.lease_owner, held.lease_epoch) == lease
                and held.status == "running"
            ):
                tx.lease_vdaf_job(task_id, job_id, owner=None, until=None, epoch=lease[1])
    except Exception:  # the lease then simply expires
        pass


def _claim(
    store: Store, task_id: str, batch_size: int, owner: str, lease_seconds: float
) -> tuple[str | None, list[str], int]:
    """Lease a job: an unfinished one whose lease is free or expired, else a new one.

    A new job takes up to ``batch_size`` pending reports. Returns ``(job_id, report_ids, lease_epoch)``
    (``job_id`` None: nothing to do for this process).
    """
    with store.transaction() as tx:
        task = task_row(tx, task_id, lock=True)  # serializes claims of the task's jobs
        now = time.time()
        free = tx.vdaf_claimable_job(task_id, now)
        if free is not None:
            job_id, ids, epoch = free.job_id, free.report_ids, free.lease_epoch
            tx.lease_vdaf_job(
                task_id, job_id, owner=owner, until=now + lease_seconds, epoch=epoch + 1
            )
            return job_id, ids, epoch + 1
        if task.status != "open":
            return None, [], 0
        ids = tx.vdaf_pending(task_id, batch_size)
        if not ids:
            return None, [], 0
        job_id = secrets.token_hex(16)
        tx.add_vdaf_job(
            task_id, job_id, ids, now, lease_owner=owner, lease_until=now + lease_seconds
        )
        if tx.take_vdaf_reports(task_id, ids, job_id) != len(ids):
            # another leader process took some: roll back, try again
            raise ConflictError("reports claimed concurrently; retry")
    return job_id, ids, 1


def _leader_job(
    store: Store,
    vdaf: Prio3,
    row: VdafTaskRow,
    job_id: str,
    report_ids: list[str],
    send: Callable[[str, dict[str, Any]], dict[str, Any]],
    lease: tuple[str, int] | None = None,
) -> tuple[int, int] | None:
    """One job: verify, ask the helper, decide, add; return (accepted, rejected).

    None if another process finished it first, or it was fenced (``lease``, the ``(owner, epoch)``
    claimed, no longer holds).
    """
    task_id = row.id
    with store.transaction(read_only=True) as tx:
        stored = tx.vdaf_shares(task_id, report_ids)
    ids = [r for r in report_ids if r in stored]
    nonces = [bytes.fromhex(r) for r in ids]
    publics = [stored[r].public_share for r in ids]
    state, shares = _verify_batch(
        vdaf, row, 0, nonces, publics, [stored[r].input_share for r in ids]
    )
    job = {
        "job_id": job_id,
        "reports": [
            {
                "report_id": r,
                "public_share": publics[i].hex(),
                "verifier_share": vdaf.encode_verifier_share(shares, i).hex(),
            }
            for i, r in enumerate(ids)
        ],
    }
    answer = send(task_id, job)
    theirs = answer.get("reports") if isinstance(answer, dict) else None
    if not isinstance(theirs, list) or len(theirs) != len(ids):
        raise DataError("helper answer: one entry per report of the job expected")
    fates: dict[str, str | None] = {}
    present: list[int] = []
    helper_shares: list[bytes] = []
    for i, (r, entry) in enumerate(zip(ids, theirs, strict=True)):
        if not isinstance(entry, dict) or entry.get("report_id") != r:
            raise DataError("helper answer: reports out of order")
        vs, reason = entry.get("verifier_share"), entry.get("reason")
        if vs is None:
            fates[r] = str(reason) if reason in REASONS else "invalid_proof"
        else:
            present.append(i)
            helper_shares.append(_hex("verifier_share", vs))
    agg = vdaf.field.zeros(vdaf.flp.OUTPUT_LEN)
    if present:
        mine = shares.select(present)
        out, ok = _decide(
            vdaf, row.ctx, state.select(present), [mine, vdaf.decode_verifier_shares(helper_shares)]
        )
        agg = vdaf.aggregate(out, ok)
        for k, i in enumerate(present):
            fates[ids[i]] = None if bool(ok[k]) else "invalid_proof"
    with store.transaction() as tx:
        if not _finish(tx, vdaf, task_id, job_id, fates, agg, None, lease):
            return None  # fenced, or another leader process finished it first: nothing added here
    accepted = sum(1 for why in fates.values() if why is None)
    return accepted, len(fates) - accepted


def helper_job(store: Store, task_id: str, job: Mapping[str, Any]) -> dict[str, Any]:
    """The helper's side of an aggregation job (its bearer token checked by the caller).

    Parameters
    ----------
    store : Store
        The helper's database.
    task_id : str
    job : mapping
        ``{"job_id": 32 hex digits, "reports": [{"report_id", "public_share", "verifier_share"}, ...]}``
        (hex strings; at most 100,000 reports).

    Returns
    -------
    dict
        ``{"job_id", "reports": [{"report_id", "verifier_share" (hex) or None, "reason", "accepted"}]}``,
        in the job's order; the same answer to a retried job.

    Raises
    ------
    NotFoundError
        If there is no such task.
    ConflictError
        If the task was collected, or the job id was used with other reports.
    ParameterError, DataError
        If the job is malformed.
    """
    job_id = job.get("job_id") if isinstance(job, Mapping) else None
    if not isinstance(job_id, str) or len(job_id) != 32:
        raise ParameterError("job_id", job_id, "32 hex digits")
    _hex("job_id", job_id, 16)
    entries = job.get("reports")
    if not isinstance(entries, list) or not 1 <= len(entries) <= 100_000:
        raise ParameterError("reports", "not a list", "a list of 1 to 100000 reports")
    ids: list[str] = []
    publics: list[bytes] = []
    leader_vs: list[bytes] = []
    for e in entries:
        if not isinstance(e, Mapping):
            raise ParameterError(
                "reports[]", e, "objects {report_id, public_share, verifier_share}"
            )
        rid = e.get("report_id")
        if not isinstance(rid, str) or len(rid) != 32:
            raise ParameterError("reports[].report_id", rid, "32 hex digits")
        _hex("reports[].report_id", rid, 16)
        ids.append(rid)
        publics.append(_hex("reports[].public_share", e.get("public_share")))
        leader_vs.append(_hex("reports[].verifier_share", e.get("verifier_share")))
    if len(set(ids)) != len(ids):
        raise ParameterError("reports", "repeated report ids", "distinct report ids")
    with store.transaction() as tx:
        row = task_row(tx, task_id, lock=True)
        if row.role != "helper":
            raise SecurityError("this aggregator is not the task's helper")
        vdaf = vdaf_from_spec(json.loads(row.vdaf))
        old = tx.vdaf_job(task_id, job_id)
        if old is not None:
            if old.report_ids != ids or old.response is None:
                raise ConflictError("this job id was used with other reports")
            answer: dict[str, Any] = json.loads(old.response)
            return answer
        if row.status != "open":
            raise ConflictError("this task was collected: it takes no more jobs")
        stored = tx.vdaf_shares(task_id, ids)
        fates: dict[str, str | None] = {}
        usable: list[int] = []
        for i, r in enumerate(ids):
            got = stored.get(r)
            if got is None:
                fates[r] = "missing_at_helper"
            elif got.job_id is not None:
                fates[r] = "replayed"
            elif got.public_share != publics[i]:
                fates[r] = "invalid_proof"  # the two aggregators hold different public shares
            else:
                usable.append(i)
        mine_enc: dict[int, bytes] = {}
        agg = vdaf.field.zeros(vdaf.flp.OUTPUT_LEN)
        if usable:
            u_ids = [ids[i] for i in usable]
            state, mine = _verify_batch(
                vdaf,
                row,
                1,
                [bytes.fromhex(r) for r in u_ids],
                [publics[i] for i in usable],
                [stored[r].input_share for r in u_ids],
            )
            theirs = vdaf.decode_verifier_shares([leader_vs[i] for i in usable])
            out, ok = _decide(vdaf, row.ctx, state, [theirs, mine])
            agg = vdaf.aggregate(out, ok)
            for k, i in enumerate(usable):
                fates[ids[i]] = None if bool(ok[k]) else "invalid_proof"
                mine_enc[i] = vdaf.encode_verifier_share(mine, k)
        answer = {
            "job_id": job_id,
            "reports": [
                {
                    "report_id": r,
                    "verifier_share": mine_enc[i].hex() if i in mine_enc else None,
                    "reason": fates[r],
                    "accepted": fates[r] is None,
                }
                for i, r in enumerate(ids)
            ],
        }
        now = time.time()
        tx.add_vdaf_job(task_id, job_id, ids, now)
        # a report the helper never received gets a placeholder row, rejected as missing: the device's
        # late upload of it is then refused, so it never waits, pending, for a job that will not come
        absent = [i for i, r in enumerate(ids) if fates[r] == "missing_at_helper"]
        for i in absent:
            tx.add_vdaf_report(task_id, ids[i], MISSING_CLIENT + ids[i], publics[i], b"", now)
        tx.set_vdaf_fates(task_id, [ids[i] for i in absent], job_id, "missing_at_helper")
        known = {r: why for r, why in fates.items() if why != "missing_at_helper"}
        replayed = {r for r, why in known.items() if why == "replayed"}
        _finish(
            tx,
            vdaf,
            task_id,
            job_id,
            {r: why for r, why in known.items() if r not in replayed},
            agg,
            answer,
        )
        if replayed or len(known) != len(fates):
            missing = len(fates) - len(known)
            t = task_row(tx, task_id)
            tx.set_vdaf_totals(
                task_id,
                agg_share=t.agg_share,
                accepted=t.accepted,
                rejected=t.rejected + missing + len(replayed),
            )
    return answer
