"""The two-aggregator mode's uploads (Prio3): a device's report share, stored by one aggregator; no HTTP.

Part of :mod:`fedstats.service.domain.vdaf` (which re-exports every public name).

A report is **bound to both aggregators**: a device uploads to the leader first, and the leader's answer
carries a *receipt*, an HMAC under a key derived from the task's ``verify_key`` (which only the two
aggregators hold) of the task id, the report id, the device and the public share's SHA-256
(:func:`upload_receipt`). The helper stores a report only with a valid receipt. So every report the
helper holds is one that the leader acknowledged, and the helper can hold the leader to it: it releases
nothing while one of them was never in an aggregation job
(:func:`~fedstats.service.domain.vdaf_collect.collect`). A device cannot forge a receipt, so it cannot
make the helper wait for a report the leader never received.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import NamedTuple

from cryptography.hazmat.primitives import hashes, hmac

from fedstats.errors import ParameterError, SecurityError
from fedstats.service.domain.tasks import ConflictError
from fedstats.service.domain.vdaf_tasks import _hex, signed_row, task_row, vdaf_from_spec
from fedstats.service.store import State, Store
from fedstats.service.store.vdaf import VdafTaskRow

__all__ = ["MISSING_CLIENT", "Uploaded", "upload_receipt", "upload_report"]

MISSING_CLIENT = "(missing at helper) "
"""Prefix of the device column of a helper's placeholder row: a report a job named before it arrived."""

_RECEIPT_LABEL = b"fedstats prio3 upload receipt v1"


def upload_receipt(
    verify_key: bytes, task_id: str, report_id: str, client_id: str, public_share: bytes
) -> bytes:
    """The leader's receipt of a report: 32 bytes, HMAC-SHA256 (RFC 2104) under a key of the task.

    The key is ``HMAC-SHA256(verify_key, "fedstats prio3 upload receipt v1")``, so only the two aggregators
    can compute it; the message is the task id, the report id (16 bytes), the device id and the public
    share's SHA-256, each length-prefixed.

    Parameters
    ----------
    verify_key : bytes
        The task's 32-byte key shared by the two aggregators.
    task_id, report_id, client_id : str
    public_share : bytes

    Returns
    -------
    bytes
        32 bytes.
    """
    k = hmac.HMAC(verify_key, hashes.SHA256())
    k.update(_RECEIPT_LABEL)
    digest = hashes.Hash(hashes.SHA256())
    digest.update(public_share)
    h = hmac.HMAC(k.finalize(), hashes.SHA256())
    for part in (task_id.encode(), bytes.fromhex(report_id), client_id.encode(), digest.finalize()):
        h.update(len(part).to_bytes(4, "big") + part)
    return h.finalize()


class Uploaded(NamedTuple):
    """What an upload did: ``new`` (False: a repeated identical upload) and, on the leader, the receipt."""

    new: bool
    receipt: bytes | None


def upload_report(
    store: Store,
    task_id: str,
    *,
    client_id: str,
    population: str,
    report_id: str,
    public_share: bytes,
    input_share: bytes,
    leader_receipt: bytes | None = None,
    nonce: tuple[str, str, float] | None = None,
    confirm: Callable[[State], None] | None = None,
) -> Uploaded:
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
    leader_receipt : bytes, optional
        On the helper (required there): the leader's receipt of the report (:func:`upload_receipt`).
    nonce : (client_id, nonce, timestamp), optional
        The signed request's nonce, recorded in the same transaction (a replay is refused).
    confirm : callable, optional
        Called first with the open transaction (the HTTP layer re-reads a device row it verified against a
        stale cache, :meth:`fedstats.service.http.deps.DeviceAuth.confirm`); may raise.

    Returns
    -------
    Uploaded
        ``new``: True for a new report, False for a repeated identical upload (acknowledged again);
        ``receipt``: on the leader, the report's receipt (the same again for a repeated upload).

    Raises
    ------
    NotFoundError
        If there is no such task.
    ConflictError
        If the task was collected, the device already uploaded another report to it, or (helper) a job
        of the leader named this report before it arrived (it was counted missing at the helper).
    SecurityError
        If the device is of another population, the request's nonce was used before, or (helper) the
        leader's receipt is missing or wrong.
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
        if task.role == "leader":
            # the leader's upload holds the task row in share mode (FOR SHARE on PostgreSQL): its
            # collection, which locks the row for update, sees every receipt given before it, none after
            task = task_row(tx, task_id, share=True)
        vdaf = vdaf_from_spec(json.loads(task.vdaf))
        agg_id = 0 if task.role == "leader" else 1
        vdaf.decode_public_share(public_share)  # DataError on a wrong length
        vdaf.decode_input_shares(agg_id, [input_share])  # lengths and field range
        if task.population != population:
            raise SecurityError("this task is for another population")
        if task.status != "open":
            raise ConflictError("this task was collected: it takes no more reports")
        receipt = upload_receipt(task.verify_key, task_id, report_id, client_id, public_share)
        if task.role == "helper" and (
            not isinstance(leader_receipt, bytes)
            or not secrets.compare_digest(leader_receipt, receipt)
        ):
            raise SecurityError(
                "leader_receipt: missing or wrong; upload the report to the leader first and send "
                "the receipt it answers"
            )
        mine = receipt if task.role == "leader" else None
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
            if old.client_id.startswith(MISSING_CLIENT):
                raise ConflictError(
                    "this report arrived after an aggregation job counted it missing at the helper"
                )
            if not same:
                raise ConflictError("this device (or report id) already has a report in this task")
            return Uploaded(False, mine)
        tx.add_vdaf_report(task_id, report_id, client_id, public_share, input_share, time.time())
    return Uploaded(True, mine)


def _check_round_member(tx: State, task: VdafTaskRow, client_id: str) -> None:
    """Refuse a report to a round of a signed task that is not open, or from a device out of range.

    On the leader a device's slot must lie in the round's client range.
    """
    signed = signed_row(tx, str(task.signed_id))
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
