"""Requests run together in one transaction (a run's check-ins or reveals): their reads and writes batched.

:class:`fedstats.service.http.batching.TransactionBatcher` runs the store work of the requests that arrive
together in one transaction; their work shares a dict, ``held`` (:func:`.runs.locked_run`), which names the
batch's devices (:data:`BATCH_CLIENTS`). The first request that needs its device's member row (or its
withholder status) reads those of all the batch's devices in one statement (:func:`batch_member`,
:func:`batch_withholder`); the rows the requests write are queued (:func:`write_later`) and written in one
statement per kind once every request ran (:func:`write_batch`). Alone (``held`` without
:data:`BATCH_CLIENTS`, or None), a request reads and writes its own rows at once.

A secure run's five statements per device (a member read, a withholder read and an insert per check-in;
a member read and an update per reveal) become five per batch (at most 32 requests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from fedstats.service.store import State
from fedstats.service.store.secure import MemberRow

__all__ = [
    "BATCH_CLIENTS",
    "BATCH_WRITES",
    "batch_member",
    "batch_withholder",
    "note_member",
    "write_batch",
    "write_later",
]


BATCH_CLIENTS: Final = "batch_clients"
"""The key of a transaction's ``held`` naming its batch's devices (a set of client ids)."""
BATCH_WRITES: Final = "batch_writes"
"""The key of the rows a batch's requests queued (:func:`write_later`), written together at its end."""


def write_later(
    held: dict[Any, Any] | None, kind: str, row: Any, write: Callable[[list[Any]], None]
) -> bool:
    """Queue ``row`` for ``write(rows)`` with the batch's other rows of ``kind``, before it commits.

    Parameters
    ----------
    held : dict or None
        The transaction's shared dict (:data:`BATCH_CLIENTS` names a batch's devices).
    kind : str
        The rows' kind (``"members"``, ``"reveals"``): one ``write`` per kind.
    row : tuple
        The arguments of one row, as ``write`` takes them in its list.
    write : callable
        ``write(rows)``, the store's bulk write (one statement on the SQL stores).

    Returns
    -------
    bool
        True if queued (the batcher calls :func:`write_batch` once every request of the transaction
        ran); False without a batch: nothing queued, the caller writes the row now.
    """
    if held is None or BATCH_CLIENTS not in held:
        return False
    queued = held.setdefault(BATCH_WRITES, {})
    queued.setdefault(kind, (write, []))[1].append(row)
    return True


def write_batch(held: dict[Any, Any]) -> None:
    """The rows the transaction's requests queued (:func:`write_later`): one write per kind."""
    for write, rows in held.get(BATCH_WRITES, {}).values():
        write(rows)


def _of_batch(
    held: dict[Any, Any] | None,
    key: tuple[str, ...],
    client_id: str,
    read: Callable[[list[str]], Any],
) -> Any:
    """``read(ids)`` of the batch's devices, read once per transaction; None if ``client_id`` is not one."""
    if held is None or client_id not in held.get(BATCH_CLIENTS, ()):
        return None
    got = held.get(key)
    if got is None:
        got = held[key] = read(sorted(held[BATCH_CLIENTS]))
    return got


def batch_member(
    tx: State, run_id: str, client_id: str, held: dict[Any, Any] | None
) -> MemberRow | None:
    """The device's member row in a run, as the batch's first read found it.

    Parameters
    ----------
    tx : State
        The open transaction.
    run_id, client_id : str
        The run and the device.
    held : dict or None
        The transaction's shared dict (:data:`BATCH_CLIENTS`); a request that changes the row in the
        transaction states it with :func:`note_member` (a repeat later in the batch finds it).

    Returns
    -------
    MemberRow or None
        The row; None if the device is not a member. Without a batch: one primary-key read.
    """
    rows = _of_batch(
        held, ("member_rows", run_id), client_id, lambda ids: tx.member_rows(run_id, ids)
    )
    return tx.member_row(run_id, client_id) if rows is None else rows.get(client_id)


def note_member(
    held: dict[Any, Any] | None,
    run_id: str,
    client_id: str,
    slots: tuple[int, int],
    commitment: str | None,
    reveal: str | None,
) -> None:
    """Keep a member row just written in the transaction for :func:`batch_member` (if it read any).

    Parameters
    ----------
    held : dict or None
        The transaction's shared dict.
    run_id, client_id : str
        The run and the device.
    slots : (int, int)
        ``(slot_start, slot_count)``.
    commitment, reveal : str or None
        The row's commitment and reveal (hex), as written.
    """
    rows = None if held is None else held.get(("member_rows", run_id))
    if rows is not None:
        rows[client_id] = MemberRow(client_id, slots[0], slots[1], commitment, reveal)


def batch_withholder(tx: State, task_id: str, client_id: str, held: dict[Any, Any] | None) -> bool:
    """Whether the device withheld a reveal in a run of the task (:meth:`~.State.is_withholder`).

    Parameters
    ----------
    tx : State
        The open transaction.
    task_id, client_id : str
        The task and the device.
    held : dict or None
        The transaction's shared dict: with a batch (:data:`BATCH_CLIENTS`), read once for all its
        devices (no request of a batch adds withholders); else one query.

    Returns
    -------
    bool
    """
    key = ("withholders", task_id)
    among = _of_batch(held, key, client_id, lambda ids: tx.withholders_among(task_id, ids))
    return tx.is_withholder(task_id, client_id) if among is None else client_id in among
