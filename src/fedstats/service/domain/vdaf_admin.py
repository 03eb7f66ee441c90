"""The operator's and the devices' views of signed Prio3 tasks: lists, released results, closing; no HTTP.

Besides the protocol itself (:mod:`fedstats.service.domain.vdaf`), an aggregator keeps

* the list of its signed Prio3 tasks with each round's batch and its counts (uploaded, aggregated,
  accepted, rejected, pending) for ``fedstats admin prio3 list`` and the dashboard (:func:`list_signed`);
* the result a collector released (``fedstats admin collect`` stores it on the leader): written once,
  with an audit entry (:func:`store_result`);
* a task's end: after its last collection the operator **closes** it (:func:`close_signed`); devices
  then neither join nor answer it, and it leaves their work list;
* the devices' work list (:func:`device_work`): the open signed tasks of the device's population and the
  index of the round that takes uploads, with a tag (its digest) for long polling.

Each function is one :meth:`~fedstats.service.store.Store.transaction`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from fedstats import wire
from fedstats.errors import ParameterError
from fedstats.service.domain import ledger
from fedstats.service.domain.tasks import ConflictError
from fedstats.service.domain.vdaf_tasks import signed_row
from fedstats.service.store import State, Store
from fedstats.service.store.vdaf import VdafSignedRow, VdafTaskRow
from fedstats.service.store.vdaf_results import VdafResultRow

__all__ = [
    "MAX_RESULT_BYTES",
    "close_signed",
    "device_work",
    "list_signed",
    "signed_summaries",
    "signed_summary",
    "store_result",
]

MAX_RESULT_BYTES = 1 << 20
"""Largest released result (its JSON) the leader keeps for a task."""


def _batch(tx: State, r: VdafTaskRow) -> dict[str, Any]:
    """One round's batch: its counts by fate."""
    by: dict[str, int] = {"accepted": 0, "rejected": 0, "pending": 0}
    for c in tx.vdaf_report_counts(r.id):
        by[c.status] = by.get(c.status, 0) + c.count
    announced = json.loads(r.announcement or "{}")
    return {
        "round": r.round_index,
        "batch_id": r.id,
        "status": r.status,
        "name": announced.get("name"),
        "vdaf": announced.get("vdaf"),
        "client_range": announced.get("client_range"),
        "min_batch_size": r.min_batch_size,
        "uploaded": sum(by.values()),
        "aggregated": by["accepted"] + by["rejected"],
        "accepted": by["accepted"],
        "rejected": by["rejected"],
        "pending": by["pending"],
    }


def _summary(tx: State, row: VdafSignedRow) -> dict[str, Any]:
    task: dict[str, Any] = wire.loads(row.envelope)["task"]
    route = task.get("prio3") or {}
    stored = tx.vdaf_result(row.id)
    charge = tx.charge_of(row.charge_id) if row.charge_id is not None else None
    return {
        "task_id": row.id,
        "role": row.role,
        "status": row.status,
        "population": row.population,
        "analysis": task.get("analysis"),
        "label": task.get("label"),
        "epsilon": (task.get("privacy") or {}).get("epsilon"),
        "cohort_size": task.get("cohort_size"),
        "min_batch_size": route.get("min_batch_size"),
        "leader": route.get("leader"),
        "helper": route.get("helper"),
        "created_by": row.created_by,
        "created_at": row.created_at,
        "charge": None if charge is None else charge.status,
        "batches": [_batch(tx, r) for r in tx.vdaf_rounds_of(row.id)],
        "result": None if stored is None else json.loads(stored.result),
        "task": task,
    }


def list_signed(store: Store, population: str | None = None) -> list[dict[str, Any]]:
    """The signed Prio3 tasks on this aggregator, newest first, with their batches and released results.

    Returns
    -------
    list of dict
        Per task: ``task_id, role, status (open, closed, abandoned), population, analysis, label,
        epsilon, cohort_size, min_batch_size, leader, helper, created_by, created_at, charge`` (the
        ledger charge's status), ``batches`` (per round: ``round, batch_id, status, name, vdaf,
        client_range, min_batch_size, uploaded, aggregated, accepted, rejected, pending``), ``result``
        (the released result stored here, or None) and ``task`` (the signed task).
    """
    with store.transaction(read_only=True) as tx:
        return signed_summaries(tx, population)


def signed_summaries(tx: State, population: str | None = None) -> list[dict[str, Any]]:
    """:func:`list_signed` in the caller's transaction ``tx`` (the operator dashboard's)."""
    return [_summary(tx, row) for row in tx.vdaf_signed_list(population)]


def signed_summary(store: Store, signed_id: str) -> dict[str, Any]:
    """One signed Prio3 task as :func:`list_signed` describes it.

    Raises
    ------
    NotFoundError
        If there is no such task.
    """
    with store.transaction(read_only=True) as tx:
        return _summary(tx, signed_row(tx, signed_id))


def store_result(store: Store, signed_id: str, result: Any, actor: str) -> dict[str, Any]:
    """Keep the result the collector released for a signed Prio3 task (on its leader), once.

    Parameters
    ----------
    result : dict
        The released result (JSON object, at most :data:`MAX_RESULT_BYTES` as JSON).
    actor : str
        The operator storing it (audit log).

    Returns
    -------
    dict
        The task's summary (:func:`list_signed`), with the stored result.

    Raises
    ------
    NotFoundError
        If there is no such task.
    ParameterError
        If ``result`` is not a JSON object or is too large (HTTP 422).
    ConflictError
        If this aggregator is not the task's leader, no round was collected, or another result is
        stored already (storing the same one again is harmless).
    """
    if not isinstance(result, Mapping):
        raise ParameterError("result", type(result).__name__, "a JSON object")
    text = json.dumps(result, sort_keys=True, allow_nan=False)
    if len(text) > MAX_RESULT_BYTES:
        raise ParameterError("result", f"{len(text)} bytes", f"at most {MAX_RESULT_BYTES} bytes")
    with store.transaction() as tx:
        row = signed_row(tx, signed_id, lock=True)
        if row.role != "leader":
            raise ConflictError("results are kept on the task's leader")
        if not any(r.status == "collected" for r in tx.vdaf_rounds_of(signed_id)):
            raise ConflictError(f"no round of Prio3 task {signed_id} was collected")
        old = tx.vdaf_result(signed_id)
        if old is not None:
            if json.loads(old.result) != json.loads(text):
                raise ConflictError(f"Prio3 task {signed_id} has another released result")
        else:  # the task's row is locked: no other request stores one meanwhile
            tx.add_vdaf_result(VdafResultRow(signed_id, text, actor, time.time()))
            ledger.audit(tx, actor, "release-prio3-result", row.charge_id, task_id=signed_id)
        return _summary(tx, row)


def close_signed(store: Store, signed_id: str, actor: str) -> dict[str, Any]:
    """Close a signed Prio3 task after its last collection: no device joins or answers it any more.

    Closing again is harmless. A task none of whose rounds was collected is abandoned instead
    (``POST .../abandon``: its reservation is released).

    Returns
    -------
    dict
        The task's summary (:func:`list_signed`).

    Raises
    ------
    NotFoundError
        If there is no such task.
    ConflictError
        If it was abandoned, no round was collected, or a round is still open (collect it first).
    """
    with store.transaction() as tx:
        row = signed_row(tx, signed_id, lock=True)
        if row.status == "closed":
            return _summary(tx, row)
        if row.status != "open":
            raise ConflictError(f"Prio3 task {signed_id} is {row.status}")
        rounds = tx.vdaf_rounds_of(signed_id)
        if not rounds:
            raise ConflictError(
                f"no round of Prio3 task {signed_id} was collected: abandon it instead"
            )
        if rounds[-1].status != "collected":
            raise ConflictError(f"round {rounds[-1].round_index} is still open: collect it first")
        tx.set_vdaf_signed_status(signed_id, "closed")
        ledger.audit(tx, actor, "close-prio3-task", row.charge_id, task_id=signed_id)
        return _summary(tx, signed_row(tx, signed_id))


def device_work(store: Store, population: str) -> tuple[str, bytes]:
    """A device's Prio3 work list on this aggregator, and its tag (for long polling).

    Returns
    -------
    (str, bytes)
        The tag (the list's digest, hex) and the list's JSON: ``{"tasks": [{"task_id", "role", "rounds"
        (rounds opened so far), "open" (the index of the round taking uploads, or None)}, ...]}``, the
        open signed tasks of ``population``, oldest first.
    """
    with store.transaction(read_only=True) as tx:
        items = []
        for row in reversed(tx.vdaf_signed_list(population)):
            if row.status != "open":
                continue
            rounds = tx.vdaf_rounds_of(row.id)
            last = rounds[-1] if rounds else None
            items.append(
                {
                    "task_id": row.id,
                    "role": row.role,
                    "rounds": len(rounds),
                    "open": last.round_index
                    if last is not None and last.status == "open"
                    else None,
                }
            )
    body = {"tasks": items}
    return wire.digest(body), json.dumps(body, separators=(",", ":")).encode()
