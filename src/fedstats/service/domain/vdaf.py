"""The two-aggregator mode (Prio3, DAP-like): tasks, uploads, aggregation jobs and collection; no HTTP.

Two aggregators, the **leader** and the **helper**, each with its own database, hold the same Prio3 task
(the VDAF variant and its parameters, the application context, and a ``verify_key`` that the two share and
nobody else knows). A device shards its measurement (:meth:`fedstats.vdaf.Prio3.shard`) and uploads the
leader's input share to the leader and the helper's to the helper, each in a signed request; either share
alone is uniformly random. The leader drives aggregation in **jobs** of up to ``batch_size`` reports
(:func:`run_leader_jobs`):

1. it claims pending reports (a job row, so that a crash or a second leader process never takes a report
   twice) and runs ``verify_init`` on the whole batch (:meth:`~fedstats.vdaf.Prio3.verify_init_batch`);
2. it sends the helper the job: report ids (the Prio3 nonces), public shares and its verifier shares;
3. the helper (:func:`helper_job`) looks its input shares up, runs ``verify_init`` on the batch, combines
   both verifier shares into the verifier messages, runs ``verify_next``, adds the output shares of the
   valid reports to its aggregate share, records every report's fate, and answers with its own verifier
   shares (or the reason it has none: ``missing_at_helper``, ``replayed``); the answer is stored with the
   job, so a retried job gets the same answer and adds nothing twice;
4. the leader combines the same verifier shares, decides the same way and adds its output shares.

A rejected report is counted with its reason (``invalid_proof``, ``missing_at_helper``, ``replayed``).
Collection (:func:`collect`) freezes the task (no more uploads or jobs), adds this aggregator's share of
DP noise (drawn once; a repeated collection returns the same answer) and returns its aggregate share with
the counts; the collector combines the two answers (:func:`fedstats.client.vdaf.unshard`). Trust: the helper never sees a
leader's input share nor the leader a helper's, so a report stays secret unless the two collude; a report
that is not a valid encoding is rejected as long as one aggregator follows the protocol; each aggregator's
noise alone makes the release DP, so it is private if at least one aggregator is honest
(``docs/vdaf.md``, "Two-aggregator mode").
"""

from __future__ import annotations

import functools
import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats import wire
from fedstats.errors import DataError, ParameterError, SecurityError
from fedstats.privacy.mechanisms.samplers import sample_discrete_gaussian, sample_discrete_laplace
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
    VerifierShares,
    VerifyState,
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
    "collect",
    "create_signed",
    "create_task",
    "helper_job",
    "join_signed",
    "open_round",
    "run_leader_jobs",
    "signed_info",
    "task_info",
    "upload_report",
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
class Noise:
    """An aggregator's share of DP noise, added to its aggregate share at collection.

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

    mechanism: str
    parameter: float

    def __post_init__(self) -> None:
        if self.mechanism not in ("discrete_gaussian", "discrete_laplace"):
            raise ParameterError(
                "noise.mechanism", self.mechanism, "'discrete_gaussian' or 'discrete_laplace'"
            )
        high = 2.0**84 if self.mechanism == "discrete_gaussian" else 2.0**41
        p = self.parameter
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= high:
            raise ParameterError("noise.parameter", p, f"a number in (0, {high:g}]")

    def sample(self, size: int, rng: Any) -> np.ndarray:
        """``size`` integers ``(size,)`` int64 from the mechanism, drawn from ``rng`` (a generator)."""
        if self.mechanism == "discrete_gaussian":
            return sample_discrete_gaussian(float(self.parameter), size, rng)
        return sample_discrete_laplace(float(self.parameter), size, rng)

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


def task_row(tx: State, task_id: str, *, lock: bool = False) -> VdafTaskRow:
    """The task in the open transaction ``tx`` (``lock``: its row lock). Raises NotFoundError."""
    ok = isinstance(task_id, str) and len(task_id) == 64 and set(task_id) <= _HEX_DIGITS
    row = tx.vdaf_task(task_id, lock=lock) if ok else None  # no lookup of a malformed id
    if row is None:
        raise NotFoundError(f"no Prio3 task {task_id!r}")
    return row


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
    if (
        not isinstance(peer_token, str)
        or not 32 <= len(peer_token) <= 512
        or not peer_token.isprintable()
    ):
        raise ParameterError("peer_token", "not that", "32 to 512 printable characters")
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


def _signed_row(tx: State, signed_id: str, *, lock: bool = False) -> VdafSignedRow:
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
    if (
        not isinstance(peer_token, str)
        or not 32 <= len(peer_token) <= 512
        or not peer_token.isprintable()
    ):
        raise ParameterError("peer_token", "not that", "32 to 512 printable characters")
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
    row = _signed_row(tx, signed_id)
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
        row = _signed_row(tx, signed_id, lock=True)
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
                verify_key=row.verify_key,
                peer_url=row.peer_url,
                peer_token=row.peer_token,
                peer_token_hash=row.peer_token_hash,
                population=row.population,
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
        row = _signed_row(tx, signed_id, lock=True)
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
        row = _signed_row(tx, signed_id, lock=True)
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


# -- uploads ----------------------------------------------------------------------------------------


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


# -- aggregation --------------------------------------------------------------------------------------


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
        idx = np.asarray(present)
        sub_state = VerifyState(
            state.out_shares[idx],
            None
            if state.corrected_joint_rand_seeds is None
            else [state.corrected_joint_rand_seeds[i] for i in present],
            state.ok[idx],
        )
        mine = VerifierShares(
            shares.verifiers[idx],
            None
            if shares.joint_rand_parts is None
            else [shares.joint_rand_parts[i] for i in present],
            shares.ok[idx],
        )
        out, ok = _decide(
            vdaf, row.ctx, sub_state, [mine, vdaf.decode_verifier_shares(helper_shares)]
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
        tx.add_vdaf_job(task_id, job_id, ids, time.time())
        # reports the helper never received are counted in its answer, not in its table
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


# -- collection ---------------------------------------------------------------------------------------


def collect(store: Store, task_id: str, rng: Any) -> dict[str, Any]:
    """Freeze the task and return this aggregator's (noised) aggregate share, once.

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
    ConflictError
        If fewer than ``min_batch_size`` reports were accepted, or (leader) a job is unfinished.
    """
    with store.transaction() as tx:
        row = task_row(tx, task_id, lock=True)
        if row.collection is not None:
            done: dict[str, Any] = json.loads(row.collection)
            return done
        signed = None if row.signed_id is None else _signed_row(tx, row.signed_id, lock=True)
        if signed is not None and signed.status != "open":
            raise ConflictError(f"Prio3 task {signed.id} is {signed.status}")
        unfinished = tx.count_vdaf_jobs(task_id, "running")
        if unfinished:
            raise ConflictError(f"{unfinished} aggregation job(s) unfinished")
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
