"""The two-aggregator mode's uploads (Prio3): a device's report share, stored by one aggregator; no HTTP.

Part of :mod:`fedstats.service.domain.vdaf` (which re-exports every public name).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from fedstats.errors import ParameterError, SecurityError
from fedstats.service.domain.tasks import ConflictError
from fedstats.service.domain.vdaf_tasks import _hex, _signed_row, task_row, vdaf_from_spec
from fedstats.service.store import State, Store
from fedstats.service.store.vdaf import VdafTaskRow

__all__ = ["upload_report"]


def upload_report(
    store: Store,
    task_id: str,
    *,
    client_id: str,
    population: str,
    report_id: str,
    public_share: bytes,
    input_share: bytes,
    nonce: tuple[str, str, float] | None = None,
    confirm: Callable[[State], None] | None = None,
) -> bool:
    """Store a device's report share (its signature was checked by the caller).

    Parameters
    ----------
    store : Store
    task_id : str
    client_id, population : str
        The enrolled device and its population (must be the task's).
    report_id : str
        The report's Prio3 nonce, 32 hex digits; the same at both aggregators.
    public_share, input_share : bytes
        The draft's encodings; checked for length and field range here.
    nonce : (client_id, nonce, timestamp), optional
        The signed request's nonce, recorded in the same transaction (a replay is refused).
    confirm : callable, optional
        Called first with the open transaction (the HTTP layer re-reads a device row it verified against a
        stale cache, :meth:`fedstats.service.http.deps.DeviceAuth.confirm`); may raise.

    Returns
    -------
    bool
        True for a new report, False for a repeated identical upload (acknowledged again).

    Raises
    ------
    NotFoundError
        If there is no such task.
    ConflictError
        If the task was collected, or the device already uploaded another report to it.
    SecurityError
        If the device is of another population, or the request's nonce was used before.
    DataError
        If a share is malformed.
    """
    if not isinstance(report_id, str) or len(report_id) != 32:
        raise ParameterError("report_id", report_id, "32 hex digits")
    _hex("report_id", report_id, 16)
    with store.transaction() as tx:  # one transaction: device row, task, nonce, report
        if confirm is not None:
            confirm(tx)
        task = task_row(tx, task_id)
        vdaf = vdaf_from_spec(json.loads(task.vdaf))
        agg_id = 0 if task.role == "leader" else 1
        vdaf.decode_public_share(public_share)  # DataError on a wrong length
        vdaf.decode_input_shares(agg_id, [input_share])  # lengths and field range
        if task.population != population:
            raise SecurityError("this task is for another population")
        if task.status != "open":
            raise ConflictError("this task was collected: it takes no more reports")
        if task.signed_id is not None:
            _check_round_member(tx, task, client_id)
        if nonce is not None and not tx.use_nonce(*nonce):
            raise SecurityError("replayed request (nonce already used)")
        old = tx.vdaf_report_of(task_id, report_id, client_id)
        if old is not None:
            same = (
                old.report_id == report_id
                and old.client_id == client_id
                and old.public_share == public_share
                and old.input_share == input_share
            )
            if not same:
                raise ConflictError("this device (or report id) already has a report in this task")
            return False
        tx.add_vdaf_report(task_id, report_id, client_id, public_share, input_share, time.time())
    return True


def _check_round_member(tx: State, task: VdafTaskRow, client_id: str) -> None:
    """Refuse a report to a round of a signed task that is not open, or from a device out of range.

    On the leader a device's slot must lie in the round's client range.
    """
    signed = _signed_row(tx, str(task.signed_id))
    if signed.status != "open":
        raise ConflictError(f"Prio3 task {signed.id} is {signed.status}")
    if task.role != "leader":
        return  # the helper keeps no slots: a report missing at the leader is never aggregated
    slot = tx.vdaf_slot(signed.id, client_id)
    lo, hi = json.loads(task.announcement or "{}").get("client_range", [0, 0])
    if slot is None or not lo <= slot < hi:
        raise SecurityError(
            f"this device's slot ({slot}) is not in the round's client range [{lo}, {hi})"
        )
