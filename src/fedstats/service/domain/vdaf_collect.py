"""The two-aggregator mode's collection (Prio3): an aggregator's noised aggregate share, once; no HTTP.

Part of :mod:`fedstats.service.domain.vdaf` (which re-exports every public name).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fedstats.service.domain import ledger
from fedstats.service.domain.tasks import ConflictError
from fedstats.service.domain.vdaf_jobs import run_leader_jobs
from fedstats.service.domain.vdaf_tasks import Noise, signed_row, task_row, vdaf_from_spec
from fedstats.service.store import Store

__all__ = ["UnaggregatedError", "collect"]


class UnaggregatedError(ConflictError):
    """Collection refused: this aggregator holds reports that were never in an aggregation job (409).

    On the helper these are reports the leader acknowledged (each came with the leader's receipt) and
    left out of every job; on the leader, reports that arrived after its last job (aggregate again).
    """


def collect(store: Store, task_id: str, rng: Any) -> dict[str, Any]:
    """Freeze the task and return this aggregator's (noised) aggregate share, once.

    Nothing is released while this aggregator holds a report that was never in an aggregation job: every
    report the helper holds came with the leader's receipt
    (:func:`~fedstats.service.domain.vdaf_upload.upload_receipt`), so a leader that leaves a report it
    acknowledged out of its jobs gets nothing from the helper (``docs/vdaf.md``, "Trust model").

    The leader calls :func:`run_leader_jobs` before (the HTTP layer does), so that no job is left
    unfinished; the collector asks the leader first, then the helper.

    Parameters
    ----------
    store : Store
    task_id : str
    rng : generator
        The noise's randomness (:class:`fedstats.randomness.SecureGenerator` in a deployment).

    Returns
    -------
    dict
        ``{"task_id", "role", "agg_share" (hex), "accepted", "rejected", "jobs", "noise"}``; the same
        answer to every later call.

    Raises
    ------
    UnaggregatedError
        If this aggregator holds a report that was never in an aggregation job (the helper: an omission
        by the leader; nothing is released, the task stays open and the collection may be asked again).
    ConflictError
        If fewer than ``min_batch_size`` reports were accepted, or (leader) a job is unfinished.
    """
    with store.transaction() as tx:
        row = task_row(tx, task_id, lock=True)
        if row.collection is not None:
            done: dict[str, Any] = json.loads(row.collection)
            return done
        signed = None if row.signed_id is None else signed_row(tx, row.signed_id, lock=True)
        if signed is not None and signed.status != "open":
            raise ConflictError(f"Prio3 task {signed.id} is {signed.status}")
        unfinished = tx.count_vdaf_jobs(task_id, "running")
        if unfinished:
            raise ConflictError(f"{unfinished} aggregation job(s) unfinished")
        pending = sum(c.count for c in tx.vdaf_report_counts(task_id) if c.status == "pending")
        if pending and row.role == "helper":
            raise UnaggregatedError(
                f"{pending} report(s) that the leader acknowledged were never in an aggregation job: "
                "the helper releases its aggregate share only once the leader has aggregated every "
                "report it received"
            )
        if pending:
            raise UnaggregatedError(f"{pending} report(s) not aggregated yet; aggregate them first")
        if row.accepted < row.min_batch_size:
            raise ConflictError(
                f"{row.accepted} reports accepted, fewer than the task's minimum batch "
                f"size {row.min_batch_size}"
            )
        vdaf = vdaf_from_spec(json.loads(row.vdaf))
        f = vdaf.field
        agg = (
            f.zeros(vdaf.flp.OUTPUT_LEN)
            if row.agg_share is None
            else vdaf.decode_agg_share(row.agg_share)
        )
        noise = Noise.from_json(json.loads(row.noise) if row.noise else None)
        if noise is not None:
            agg = f.add(agg, f.array(noise.sample(vdaf.flp.OUTPUT_LEN, rng)))
        answer = {
            "task_id": task_id,
            "role": row.role,
            "agg_share": vdaf.encode_agg_share(agg).hex(),
            "accepted": row.accepted,
            "rejected": row.rejected,
            "jobs": tx.count_vdaf_jobs(task_id, "done"),
            "noise": None if noise is None else noise.to_json(),
        }
        tx.set_vdaf_collected(task_id, json.dumps(answer))
        if signed is not None and signed.charge_id is not None:
            # the first release of any round of the task spends its reservation (idempotent)
            ledger.spend(tx, signed.charge_id, actor=signed.created_by)
    return answer


Send = Callable[[str, dict[str, Any]], dict[str, Any]]
Transport = Callable[[str, str], Send]
"""``transport(peer_url, peer_token)`` -> ``send(task_id, job)`` (the HTTP layer's, to the helper)."""


def aggregate_pending(
    store: Store, task_id: str, transport: Transport, *, batch_size: int, owner: str | None
) -> dict[str, int]:
    """The operator's aggregation: on the leader, every pending report in jobs with the helper.

    The helper is reached through ``transport(peer_url, peer_token)`` of the task's row
    (:func:`~fedstats.service.domain.vdaf_jobs.run_leader_jobs`); on the helper nothing is done (its jobs
    come from the leader) and the counts are zero.
    """
    with store.transaction(read_only=True) as tx:
        row = task_row(tx, task_id)
    if row.role != "leader":
        return {"jobs": 0, "accepted": 0, "rejected": 0}
    send = transport(row.peer_url, str(row.peer_token))
    return run_leader_jobs(store, task_id, send, batch_size=batch_size, owner=owner)


def aggregate_and_collect(
    store: Store,
    task_id: str,
    transport: Transport,
    fresh: Callable[[], Any],
    *,
    batch_size: int,
    owner: str | None,
    attempts: int = 3,
) -> dict[str, Any]:
    """Aggregate what is pending (:func:`aggregate_pending`), then :func:`collect` with a fresh generator.

    The leader aggregates again when reports arrived between its last job and the collection (at most
    ``attempts`` times); the helper refuses at once (an omission by the leader: nothing is released).

    Raises
    ------
    UnaggregatedError
        On the helper, or on the leader after ``attempts`` tries.
    """
    for attempt in range(attempts):
        aggregate_pending(store, task_id, transport, batch_size=batch_size, owner=owner)
        try:
            return collect(store, task_id, fresh())
        except UnaggregatedError:
            with store.transaction(read_only=True) as tx:
                leads = task_row(tx, task_id).role == "leader"
            if not leads or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
