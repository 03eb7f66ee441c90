"""Tasks on the server: immutable configurations signed by analysts, identified by their SHA-256.

:func:`fedstats.wire.tasks.normalize_task` checks a configuration and fills in its defaults (the result is
what gets hashed and signed); :func:`create_task` verifies an analyst's signed envelope against the trusted
authorities and stores it once; :func:`task_config` reads the task back (cached: the id hashes it) and
:func:`task_envelope` the envelope devices are offered. The server never signs a task: it holds no analyst
key, so it can relay a task but not create or alter one.

The ``tasks.config`` column holds the canonical JSON of the envelope (rows written before tasks were signed
hold the bare task; such tasks have no envelope, and devices refuse them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from fedstats import wire
from fedstats.errors import FedstatsError
from fedstats.service.domain import ledger
from fedstats.service.store import State
from fedstats.wire.tasks import normalize_task, task_id, verify_task

__all__ = [
    "ConflictError",
    "NotFoundError",
    "create_task",
    "normalize_task",
    "page_tasks",
    "task_config",
    "task_envelope",
]


class ConflictError(FedstatsError):
    """A request that is valid but conflicts with the run's state (HTTP 409)."""


class NotFoundError(FedstatsError):
    """A named run, task or round does not exist (HTTP 404)."""


def trusted_authorities(tx: State) -> dict[str, str]:
    """The trusted enrollment authorities: fingerprint -> public key (hex)."""
    return tx.authorities()


def create_task(tx: State, envelope: Mapping[str, Any], actor: str) -> tuple[str, bool]:
    """Verify an analyst's signed task envelope and store it (idempotent); return its id and whether new.

    Parameters
    ----------
    tx : State
        The open transaction.
    envelope : mapping
        ``{"task", "certificate", "signature"}`` (:func:`fedstats.wire.tasks.sign_task`).
    actor : str
        The operator posting it (audit log).

    Raises
    ------
    SecurityError
        If the envelope does not verify against a trusted authority (HTTP 403); nothing is stored.
    """
    task = verify_task(envelope, trusted_authorities(tx))
    tid = task_id(task)
    stored = {
        "task": task,
        "certificate": dict(envelope["certificate"]),
        "signature": str(envelope["signature"]),
    }
    if tx.add_task(tid, wire.dumps(stored), actor, time.time()):
        ledger.audit(
            tx,
            actor,
            "create-task",
            None,
            task_id=tid,
            analyst=str(envelope["certificate"]["body"].get("analyst")),
        )
        return tid, True
    return tid, False


def task_config(tx: State, task_id: str) -> dict[str, Any]:
    """The (normalized) configuration of a stored task.

    Raises
    ------
    NotFoundError
        If there is no such task.
    """
    cached = _TASK_CACHE.get(task_id)
    if cached is not None:
        return cached
    got = _read(tx, task_id)[0]
    if len(_TASK_CACHE) > 10000:
        _TASK_CACHE.clear()
    _TASK_CACHE[task_id] = got
    return got


def task_envelope(tx: State, task_id: str) -> dict[str, Any] | None:
    """The signed envelope of a stored task, as the analyst posted it (None for an unsigned legacy row).

    Read from ``tx`` at every call (a run's offer keeps it): the same configuration signed by two
    analysts has one id, so a process holding two stores may hold two envelopes of one id.

    Raises
    ------
    NotFoundError
        If there is no such task.
    """
    return _read(tx, task_id)[1]


def _read(tx: State, tid: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(configuration, envelope)`` of a stored task (envelope None for an unsigned legacy row)."""
    config = tx.task_json(tid)
    if config is None:
        raise NotFoundError(f"no task {tid!r}")
    data: dict[str, Any] = wire.loads(config)
    if set(data) == {"task", "certificate", "signature"}:
        return dict(data["task"]), data
    return data, None  # a task stored before tasks were signed


# configurations by id, for every store of the process: the id hashes the configuration, so one id is one
# configuration wherever it is stored (its envelope is not cached: see task_envelope)
_TASK_CACHE: dict[str, dict[str, Any]] = {}


def page_tasks(
    tx: State,
    limit: int,
    offset: int,
    *,
    analysis: str | None = None,
    population: str | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """One page of the stored tasks, newest first, as the operator lists them, and how many match.

    The page and the filters (``analysis``, the configuration's ``privacy.population``) are applied in
    the query (:meth:`~fedstats.service.store.core.CoreQueries.page_tasks`); only the page's
    configurations are read.

    Returns
    -------
    items : list of dict
        ``task_id``, ``analysis``, ``population``, ``epsilon``, ``delta``, ``cohort_size``, ``label``,
        ``secure`` (a secure-aggregation task), ``created_by`` and ``created_at`` (Unix seconds).
    total : int
        The number of tasks that match the filters.
    """
    rows, total = tx.page_tasks(limit, offset, analysis=analysis, population=population)
    items = []
    for t in rows:
        conf = task_config(tx, t.task_id)
        items.append(
            {
                "task_id": t.task_id,
                "analysis": conf.get("analysis"),
                "population": conf["privacy"]["population"],
                "epsilon": conf["privacy"].get("epsilon"),
                "delta": conf["privacy"].get("delta"),
                "cohort_size": conf.get("cohort_size"),
                "label": conf.get("label", ""),
                "secure": conf.get("secure_aggregation") is not None,
                "created_by": t.created_by,
                "created_at": t.created_at,
            }
        )
    return items, total
