"""The two-aggregator mode's tasks (Prio3): VDAF variants, DP noise shares, tasks and signed tasks; no HTTP.

Part of :mod:`fedstats.service.domain.vdaf` (which re-exports every public name): a task's creation and
description on one aggregator, the analyst-signed tasks with their rounds, slots and charges, and the
check of the aggregator-to-aggregator token. Uploads are :mod:`~fedstats.service.domain.vdaf_upload`,
aggregation jobs :mod:`~fedstats.service.domain.vdaf_jobs`, collection
:mod:`~fedstats.service.domain.vdaf_collect`.
"""

from __future__ import annotations

import functools
import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats import wire
from fedstats.errors import ParameterError, SecurityError
from fedstats.privacy.mechanisms.aggregator_noise import AggregatorNoise
from fedstats.service.domain import ledger
from fedstats.service.domain.tasks import ConflictError, NotFoundError
from fedstats.service.store import State, Store
from fedstats.service.store.vdaf import VdafSignedRow, VdafTaskRow
from fedstats.vdaf import (
    Prio3,
    Prio3Count,
    Prio3Histogram,
    Prio3MultihotCountVec,
    Prio3Sum,
    Prio3SumVec,
)
from fedstats.wire import auth
from fedstats.wire.registry import privacy_loss_for
from fedstats.wire.tasks import DEFAULT_MIN_BATCH_SIZE, verify_task
from fedstats.wire.tasks import task_id as task_id_of

__all__ = [
    "REASONS",
    "Noise",
    "abandon_signed",
    "charge_id",
    "check_peer_token",
    "create_signed",
    "create_task",
    "join_signed",
    "open_round",
    "signed_info",
    "signed_row",
    "task_info",
    "task_row",
    "vdaf_from_spec",
]

# why a report was left out of the aggregate
REASONS = ("invalid_proof", "missing_at_helper", "replayed")

_VARIANTS: dict[str, tuple[Callable[..., Prio3], tuple[str, ...]]] = {
    "count": (Prio3Count, ()),
    "sum": (Prio3Sum, ("max_measurement",)),
    "sumvec": (Prio3SumVec, ("length", "max_measurement", "chunk_length")),
    "histogram": (Prio3Histogram, ("length", "chunk_length")),
    "multihot": (Prio3MultihotCountVec, ("length", "max_weight", "chunk_length")),
}
_MAX_OUTPUT = 100_000  # longest aggregate a task may have
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def vdaf_from_spec(spec: Mapping[str, Any]) -> Prio3:
    """The Prio3 instance (two aggregators) of a task's VDAF description.

    Parameters
    ----------
    spec : mapping
        ``{"type": "count"}``, ``{"type": "sum", "max_measurement": M}``, ``{"type": "sumvec",
        "length": L, "max_measurement": M, "chunk_length": C}``, ``{"type": "histogram", "length": L,
        "chunk_length": C}`` or ``{"type": "multihot", "length": L, "max_weight": W, "chunk_length": C}``;
        integers as in :mod:`fedstats.vdaf.prio3` (``max_measurement`` up to 2^64, the others up to
        10^6), outputs of at most 100,000 entries.

    Returns
    -------
    Prio3

    Raises
    ------
    ParameterError
        If the type is unknown, a parameter is missing, unknown or out of range (named ``vdaf.<key>``).
    """
    if not isinstance(spec, Mapping):
        raise ParameterError("vdaf", spec, "an object with a 'type' and the variant's parameters")
    kind = spec.get("type")
    if kind not in _VARIANTS:
        raise ParameterError("vdaf.type", kind, f"one of {sorted(_VARIANTS)}")
    keys = _VARIANTS[str(kind)][1]
    extra = set(spec) - set(keys) - {"type"}
    if extra:
        raise ParameterError(f"vdaf.{sorted(extra)[0]}", "present", f"only the keys {list(keys)}")
    args: dict[str, int] = {}
    for k in keys:
        v = spec.get(k)
        high = 2**64 if k == "max_measurement" else 10**6
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= high:
            raise ParameterError(f"vdaf.{k}", v, f"an integer in [1, {high}]")
        args[k] = v
    if args.get("length", 1) > _MAX_OUTPUT:
        raise ParameterError("vdaf.length", args["length"], f"an integer in [1, {_MAX_OUTPUT}]")
    return _prio3(str(kind), tuple(sorted(args.items())))


@functools.lru_cache(maxsize=64)
def _prio3(kind: str, args: tuple[tuple[str, int], ...]) -> Prio3:
    """The Prio3 instance of a checked spec, built once per process (an upload or job reuses it)."""
    return _VARIANTS[kind][0](**dict(args))


@dataclass(frozen=True)
class Noise(AggregatorNoise):
    """An aggregator's share of DP noise, added to its aggregate share at collection.

    The route's :class:`~fedstats.privacy.mechanisms.aggregator_noise.AggregatorNoise` as a task's JSON
    gives it: checked against the samplers' own limits, errors naming ``noise.mechanism`` and
    ``noise.parameter``.

    Each aggregator draws ``OUTPUT_LEN`` independent integers from the mechanism and adds them (mod p) to
    its aggregate share. Calibrate the parameter so that one aggregator's noise alone gives the release its
    (epsilon, delta): a dishonest aggregator's own additions depend only on its share, which is independent
    of the measurements, so they are post-processing, and the release is DP if at least one aggregator is
    honest (with both honest the variance doubles).

    Attributes
    ----------
    mechanism : {"discrete_gaussian", "discrete_laplace"}
    parameter : float
        The discrete Gaussian's ``sigma2`` (in (0, 2^84]) or the discrete Laplace's ``scale`` (in
        (0, 2^41]) of :mod:`fedstats.privacy.mechanisms.samplers`.
    """

    def __post_init__(self) -> None:
        if self.mechanism not in ("discrete_gaussian", "discrete_laplace"):
            raise ParameterError(
                "noise.mechanism", self.mechanism, "'discrete_gaussian' or 'discrete_laplace'"
            )
        high = 2.0**84 if self.mechanism == "discrete_gaussian" else 2.0**41
        p = self.parameter
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= high:
            raise ParameterError("noise.parameter", p, f"a number in (0, {high:g}]")

    def to_json(self) -> dict[str, Any]:
        """``{"mechanism": ..., "parameter": ...}``."""
        return {"mechanism": self.mechanism, "parameter": float(self.parameter)}

    @classmethod
    def from_json(cls, data: Any) -> Noise | None:
        """Parse ``{"mechanism", "parameter"}`` (None: no noise). Raises ParameterError."""
        if data is None:
            return None
        if not isinstance(data, Mapping) or set(data) != {"mechanism", "parameter"}:
            raise ParameterError("noise", data, "null or {mechanism, parameter}")
        return cls(str(data["mechanism"]), data["parameter"])


# -- tasks ------------------------------------------------------------------------------------------


def _hex(name: str, value: Any, size: int | None = None, *, max_size: int = 1 << 22) -> bytes:
    try:
        raw = bytes.fromhex(value) if isinstance(value, str) else None
    except ValueError:
        raw = None
    if raw is None or (size is not None and len(raw) != size) or len(raw) > max_size:
        what = f"{size} bytes" if size is not None else f"at most {max_size} bytes"
        raise ParameterError(
            name, "not that" if raw is None else f"{len(raw)} bytes", f"hex of {what}"
        )
    return raw


def task_row(tx: State, task_id: str, *, lock: bool = False, share: bool = False) -> VdafTaskRow:
    """The task in the open transaction ``tx`` (``lock``: its row lock; ``share``: in share mode).

    Raises NotFoundError.
    """
    ok = isinstance(task_id, str) and len(task_id) == 64 and set(task_id) <= _HEX_DIGITS
    row = (
        tx.vdaf_task(task_id, lock=lock, share=share) if ok else None
    )  # no lookup of a malformed id
    if row is None or row.dap is not None:  # a DAP task is served by the DAP routes only
        raise NotFoundError(f"no Prio3 task {task_id!r}")
    return row


def _check_peer_token(token: Any) -> None:
    """Refuse an aggregator-to-aggregator bearer token that is not 32 to 512 printable characters."""
    if not isinstance(token, str) or not 32 <= len(token) <= 512 or not token.isprintable():
        raise ParameterError("peer_token", "not that", "32 to 512 printable characters")


def create_task(
    store: Store,
    *,
    task_id: str,
    role: str,
    vdaf: Mapping[str, Any],
    verify_key: bytes,
    ctx: bytes,
    peer_url: str,
    peer_token: str,
    population: str = "default",
    min_batch_size: int = DEFAULT_MIN_BATCH_SIZE,
    noise: Noise | None = None,
) -> dict[str, Any]:
    """Create a Prio3 task on this aggregator (an operator's act, done alike on both aggregators).

    Parameters
    ----------
    store : Store
    task_id : str
        64 hex digits (32 random bytes), the same on both aggregators.
    role : {"leader", "helper"}
    vdaf : mapping
        The variant and its parameters (:func:`vdaf_from_spec`).
    verify_key : bytes
        32 bytes, shared by the two aggregators only.
    ctx : bytes
        Prio3's application context (at most 255 bytes), the same for devices and aggregators.
    peer_url : str
        The other aggregator's base URL (``https://...``).
    peer_token : str
        The bearer token of aggregator-to-aggregator requests (at least 32 characters); the leader keeps
        it, the helper keeps its SHA-256 only.
    population : str
        The device population whose enrolled devices may upload.
    min_batch_size : int
        Collection is refused below this many accepted reports, in [1, 10^9]; default
        :data:`fedstats.wire.tasks.DEFAULT_MIN_BATCH_SIZE` (10).
    noise : Noise, optional
        This aggregator's DP noise (None: exact aggregate).

    Returns
    -------
    dict
        The task's public description (:func:`task_info`).

    Raises
    ------
    ParameterError
        If a parameter is out of range.
    ConflictError
        If a task of that id exists with other parameters (an identical one is accepted again).
    """
    if not isinstance(task_id, str) or len(task_id) != 64:
        raise ParameterError("task_id", task_id, "64 hex digits")
    _hex("task_id", task_id, 32)
    if role not in ("leader", "helper"):
        raise ParameterError("role", role, "'leader' or 'helper'")
    vdaf_from_spec(vdaf)  # a mapping of a known variant with valid parameters, or ParameterError
    spec = dict(vdaf)
    if not isinstance(verify_key, bytes) or len(verify_key) != 32:
        raise ParameterError("verify_key", "not 32 bytes", "32 bytes")
    if not isinstance(ctx, bytes) or len(ctx) > 255:
        raise ParameterError("ctx", "too long", "at most 255 bytes")
    if (
        not isinstance(peer_url, str)
        or not peer_url.startswith(("https://", "http://"))
        or not peer_url.isprintable()
        or len(peer_url) > 2048
    ):
        raise ParameterError(
            "peer_url", peer_url, "an https:// URL (printable, <= 2048 characters)"
        )
    _check_peer_token(peer_token)
    if (
        not isinstance(population, str)
        or not 1 <= len(population) <= 128
        or not population.isprintable()
    ):
        raise ParameterError("population", population, "1 to 128 printable characters")
    if (
        isinstance(min_batch_size, bool)
        or not isinstance(min_batch_size, int)
        or not 1 <= min_batch_size <= 10**9
    ):
        raise ParameterError("min_batch_size", min_batch_size, "an integer in [1, 10^9]")
    new = VdafTaskRow(
        id=task_id,
        role=role,
        vdaf=json.dumps(spec, sort_keys=True),
        ctx=ctx,
        verify_key=verify_key,
        peer_url=peer_url.rstrip("/"),
        peer_token=peer_token if role == "leader" else None,
        peer_token_hash=auth.hash_token(peer_token) if role == "helper" else None,
        population=population,
        min_batch_size=min_batch_size,
        noise=None if noise is None else json.dumps(noise.to_json(), sort_keys=True),
        created_at=time.time(),
    )
    with store.transaction() as tx:
        old = tx.vdaf_task(task_id)
        if old is not None:
            if old.parameters() != new.parameters():
                raise ConflictError(f"Prio3 task {task_id} exists with other parameters")
        else:
            tx.add_vdaf_task(new)
        return _info(tx, task_id)


def task_info(store: Store, task_id: str) -> dict[str, Any]:
    """A task's public description: id, role, VDAF, ctx (hex), population, status and report counts.

    Raises
    ------
    NotFoundError
        If there is no such task.
    """
    with store.transaction(read_only=True) as tx:
        return _info(tx, task_id)


def _info(tx: State, task_id: str) -> dict[str, Any]:
    row = task_row(tx, task_id)
    by_status: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for c in tx.vdaf_report_counts(task_id):
        status, reason, n = c.status, c.reason, c.count
        by_status[status] = by_status.get(status, 0) + n
        if reason is not None:
            reasons[reason] = reasons.get(reason, 0) + n
    return {
        "task_id": row.id,
        "role": row.role,
        "vdaf": json.loads(row.vdaf),
        "ctx": row.ctx.hex(),
        "population": row.population,
        "min_batch_size": row.min_batch_size,
        "noise": json.loads(row.noise) if row.noise else None,
        "status": row.status,
        "reports": by_status,
        "rejected_by_reason": reasons,
    }


# -- tasks signed by analysts ----------------------------------------------------------------------


def charge_id(signed_id: str) -> str:
    """The id of a signed Prio3 task's charge on an aggregator's ledger: ``"prio3-"`` + 30 hex digits."""
    return "prio3-" + signed_id[:30]


def signed_row(tx: State, signed_id: str, *, lock: bool = False) -> VdafSignedRow:
    """The signed Prio3 task ``signed_id`` in the open transaction ``tx``.

    Parameters
    ----------
    tx : State
        An open transaction.
    signed_id : str
        The signed task's id (64 hex digits); a malformed id is not looked up.
    lock : bool, optional
        Whether to take its row lock (until the transaction ends).

    Returns
    -------
    VdafSignedRow
        Its row.

    Raises
    ------
    NotFoundError
        If there is no such task.
    """
    ok = isinstance(signed_id, str) and len(signed_id) == 64 and set(signed_id) <= _HEX_DIGITS
    row = tx.vdaf_signed(signed_id, lock=lock) if ok else None
    if row is None:
        raise NotFoundError(f"no signed Prio3 task {signed_id!r}")
    return row


def _signed_task(row: VdafSignedRow) -> dict[str, Any]:
    task: dict[str, Any] = wire.loads(row.envelope)["task"]
    return task


def create_signed(
    store: Store,
    envelope: Any,
    *,
    role: str,
    verify_key: bytes,
    peer_token: str,
    actor: str,
) -> dict[str, Any]:
    """Store an analyst's signed Prio3 task on this aggregator and reserve its privacy loss.

    The envelope is verified against the authorities this server trusts
    (:func:`fedstats.wire.tasks.verify_task`) and must carry a ``prio3`` section; the peer's URL comes from
    the task (the leader's peer is the task's helper and the other way round). The operator adds only this
    aggregator's secrets, which stay out of the envelope: the ``verify_key`` the two aggregators share and
    the peer token. In the same transaction the task's privacy loss
    (:func:`fedstats.wire.registry.privacy_loss_for`, the loss every device reserves) is reserved on this
    aggregator's ledger (population and ``actor`` budgets, charge id :func:`charge_id`); a non-private task
    (infinite epsilon) is charged nowhere.

    Parameters
    ----------
    store : Store
    envelope : mapping
        ``{"task", "certificate", "signature"}`` (:func:`fedstats.wire.tasks.sign_task`).
    role : {"leader", "helper"}
    verify_key : bytes
        32 bytes, shared by the two aggregators only.
    peer_token : str
        The aggregator-to-aggregator bearer token, 32 to 512 printable characters.
    actor : str
        The operator creating it (the analyst budget charged, audit log).

    Returns
    -------
    dict
        :func:`signed_info`.

    Raises
    ------
    SecurityError
        If the envelope does not verify, or its task has no ``prio3`` section (nothing is stored).
    ParameterError
        If the role, key or token is out of range.
    ConflictError
        If the task exists here with other secrets (the same creation again is accepted).
    BudgetExceededError
        If a budget cannot cover the task's loss (nothing is stored).
    """
    if role not in ("leader", "helper"):
        raise ParameterError("role", role, "'leader' or 'helper'")
    if not isinstance(verify_key, bytes) or len(verify_key) != 32:
        raise ParameterError("verify_key", "not 32 bytes", "32 bytes")
    _check_peer_token(peer_token)
    with store.transaction() as tx:
        task = verify_task(envelope, tx.authorities())
        if task.get("prio3") is None:
            raise SecurityError("the signed task is not a Prio3 task (no prio3 section)")
        tid = task_id_of(task)
        route = task["prio3"]
        new = VdafSignedRow(
            id=tid,
            role=role,
            envelope=wire.dumps(
                {
                    "task": task,
                    "certificate": dict(envelope["certificate"]),
                    "signature": str(envelope["signature"]),
                }
            ),
            verify_key=verify_key,
            peer_url=route["helper"] if role == "leader" else route["leader"],
            peer_token=peer_token if role == "leader" else None,
            peer_token_hash=auth.hash_token(peer_token) if role == "helper" else None,
            population=str(task["privacy"]["population"]),
            status="open",
            charge_id=None,
            created_by=actor,
            created_at=time.time(),
        )
        old = tx.vdaf_signed(tid, lock=True)
        if old is not None:
            if old.parameters() != new.parameters():
                raise ConflictError(f"Prio3 task {tid} exists with other parameters")
            return _signed_info(tx, tid)
        loss = privacy_loss_for(task)
        charged = None
        if np.isfinite(loss.epsilon):  # an infinite loss is a non-private task: no DP charge
            charged = charge_id(tid)
            ledger.reserve(
                tx,
                run_id=charged,
                population=new.population,
                analyst=actor,
                charge=ledger.Charge.of(loss, f"prio3 {task['analysis']} {tid[:12]}"),
            )
        tx.add_vdaf_signed(VdafSignedRow(**{**new.__dict__, "charge_id": charged}))
        ledger.audit(tx, actor, "create-prio3-task", charged, task_id=tid, role=role)
        return _signed_info(tx, tid)


def signed_info(store: Store, signed_id: str) -> dict[str, Any]:
    """A signed Prio3 task on this aggregator: id, role, status, its charge and its rounds.

    Raises
    ------
    NotFoundError
        If there is no such task.
    """
    with store.transaction(read_only=True) as tx:
        return _signed_info(tx, signed_id)


def _signed_info(tx: State, signed_id: str) -> dict[str, Any]:
    row = signed_row(tx, signed_id)
    charge = tx.charge_of(row.charge_id) if row.charge_id is not None else None
    return {
        "task_id": row.id,
        "role": row.role,
        "status": row.status,
        "population": row.population,
        "charge": None
        if charge is None
        else {
            "id": row.charge_id,
            "epsilon": charge.epsilon,
            "delta": charge.delta,
            "rho": charge.rho,
            "status": charge.status,
        },
        "rounds": [
            {**json.loads(r.announcement or "{}"), "status": r.status}
            for r in tx.vdaf_rounds_of(row.id)
        ],
    }


def open_round(store: Store, signed_id: str, index: int, history: Any) -> dict[str, Any]:
    """Open round ``index`` of a signed Prio3 task on this aggregator (the operator, on both).

    The aggregator derives the round itself (:func:`fedstats.analyses._prio3_tasks.derive_round`: the
    task's plan replayed with the earlier rounds' public sums ``history``, as the collector released them),
    and creates the round's Prio3 task: its id and ``ctx`` derived from the signed task's id and the index,
    its variant from the round, the operator's secrets, the task's noise and minimum batch size. Round
    ``index`` opens only after round ``index - 1`` was collected here; opening it again with the same
    history returns it unchanged.

    Returns
    -------
    dict
        The announcement devices are shown: ``{"round", "task_id", "vdaf", "name", "encode",
        "client_range", "n_clients", "history"}``.

    Raises
    ------
    NotFoundError
        If there is no such signed task.
    ConflictError
        If it was abandoned, the previous round is not collected here, the index skips a round, or the
        round exists with another history.
    SecurityError
        If the history is malformed or the round is beyond the task's plan.
    """
    from fedstats.analyses._prio3_tasks import aggregator_noise, derive_round

    with store.transaction() as tx:
        row = signed_row(tx, signed_id, lock=True)
        if row.status != "open":
            raise ConflictError(f"Prio3 task {signed_id} is {row.status}")
        rounds = tx.vdaf_rounds_of(signed_id)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= len(rounds):
            raise ConflictError(
                f"round {index!r} cannot open: rounds 0..{len(rounds) - 1} exist, the next is "
                f"{len(rounds)}"
            )
        task = _signed_task(row)
        derived = derive_round(task, signed_id, index, history)
        announced = derived.announcement(list(history))
        if index < len(rounds):
            got: dict[str, Any] = json.loads(rounds[index].announcement or "{}")
            if got != announced:
                raise ConflictError(f"round {index} is open with other public sums")
            return got
        if rounds and rounds[-1].status != "collected":
            raise ConflictError(f"round {index - 1} is not collected yet")
        route = task["prio3"]
        noise = aggregator_noise(task, derived.round)  # the round's planned noise, else the task's
        tx.add_vdaf_task(
            VdafTaskRow(
                id=derived.task_id,
                role=row.role,
                vdaf=json.dumps(derived.spec, sort_keys=True),
                ctx=derived.ctx,
                **row.peer(),
                min_batch_size=int(route["min_batch_size"]),
                noise=None if noise is None else json.dumps(noise, sort_keys=True),
                created_at=time.time(),
                signed_id=signed_id,
                round_index=index,
                announcement=json.dumps(announced, sort_keys=True),
            )
        )
        return announced


def join_signed(
    store: Store,
    signed_id: str,
    *,
    client_id: str,
    population: str,
    nonce: tuple[str, str, float] | None = None,
    confirm: Callable[[State], None] | None = None,
) -> dict[str, Any]:
    """A device joins a signed Prio3 task (signed request): the envelope, its slot, the rounds so far.

    The leader gives each device one slot (0, 1, ... in join order, fewer than the task's cohort size;
    the same slot to a device joining again); the helper gives none. A device verifies the envelope
    itself and derives every round from it (:class:`fedstats.client.vdaf.Prio3Device`).

    Returns
    -------
    dict
        ``{"envelope", "role", "slot" (None on the helper), "status", "rounds": [announcement, ...]}``.

    Raises
    ------
    NotFoundError
        If there is no such task.
    SecurityError
        If the device is of another population, or the request's nonce was used before.
    ConflictError
        If the task was abandoned, or the cohort is full.
    """
    with store.transaction() as tx:
        if confirm is not None:
            confirm(tx)
        row = signed_row(tx, signed_id, lock=True)
        if row.population != population:
            raise SecurityError("this task is for another population")
        if nonce is not None and not tx.use_nonce(*nonce):
            raise SecurityError("replayed request (nonce already used)")
        if row.status != "open":
            raise ConflictError(f"Prio3 task {signed_id} is {row.status}")
        slot = None
        if row.role == "leader":
            slot = tx.vdaf_slot(signed_id, client_id)
            if slot is None:
                cohort = int(_signed_task(row)["cohort_size"])
                slot = tx.add_vdaf_slot(signed_id, client_id)
                if slot >= cohort:
                    raise ConflictError(f"the cohort of {cohort} devices is full")
        return {
            "envelope": wire.loads(row.envelope),
            "role": row.role,
            "slot": slot,
            "status": row.status,
            "rounds": [json.loads(r.announcement or "{}") for r in tx.vdaf_rounds_of(signed_id)],
        }


def abandon_signed(store: Store, signed_id: str, actor: str) -> dict[str, Any]:
    """Abandon a signed Prio3 task before any round was collected here: its reservation is released.

    No round opens, no report is taken and nothing is collected afterwards.

    Raises
    ------
    NotFoundError
        If there is no such task.
    ConflictError
        If a round was collected here already (its release used the charge: it stays spent).
    """
    with store.transaction() as tx:
        row = signed_row(tx, signed_id, lock=True)
        if any(r.status == "collected" for r in tx.vdaf_rounds_of(signed_id)):
            raise ConflictError(
                f"a round of Prio3 task {signed_id} was collected: its charge stays"
            )
        if row.status != "abandoned":
            tx.set_vdaf_signed_status(signed_id, "abandoned")
            if row.charge_id is not None:
                ledger.release(tx, row.charge_id, actor=actor, reason="prio3 task abandoned")
            ledger.audit(tx, actor, "abandon-prio3-task", row.charge_id, task_id=signed_id)
        return _signed_info(tx, signed_id)


def check_peer_token(store: Store, task_id: str, token: str) -> None:
    """Check the bearer token of an aggregator-to-aggregator request on the helper.

    Raises
    ------
    NotFoundError
        If there is no such task.
    SecurityError
        If this aggregator is not the task's helper or the token is wrong.
    """
    with store.transaction(read_only=True) as tx:
        row = task_row(tx, task_id)
    if row.role != "helper" or not secrets.compare_digest(
        str(row.peer_token_hash or ""), auth.hash_token(token)
    ):
        raise SecurityError("not the leader of this task")
