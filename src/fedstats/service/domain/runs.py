"""Tasks and runs on the server: check-in, journaled rounds, replay after a restart, results.

A **task** is an immutable configuration (:mod:`.tasks`), identified by the SHA-256 of its canonical JSON.
A **run** executes it; this module holds its requests (creation, check-in, work, reports, view), and
:mod:`.driver` the background part that advances it:

1. *check-in*: devices that accepted the task join with the number of records they hold and receive
   contiguous *slots* (the protocol's global client indices), at most the task's
   ``max_records_per_client`` (default 1: a device holding more contributes its first records); the
   check-in closes when ``cohort_size`` **devices** answered (joined, or refused the task and said why:
   :mod:`.refusals`) or its deadline passes (on the monotonic clock: :mod:`.clock`); with fewer than
   ``min_clients`` devices the run aborts and releases nothing;
2. *rounds*: the server drives the analysis's protocol generator (:mod:`fedstats.wire.registry`); each yielded
   :class:`~fedstats.engine.rounds.Round` is journaled (name, encoder, canonical parameters, dim, bound,
   client range, deadline) and offered to the devices whose slots intersect its client range; each device
   sends the sum of its records' reports and their count; the round closes when every expected device
   reported or at the deadline (the others are dropouts); with fewer records than the round's share of
   ``min_clients`` (the fraction ``min_clients / devices`` of the round's records) the round aborts and the run releases nothing; otherwise the exact sum is committed to
   the journal *before* the generator receives it;
   a *secure* task (``secure_aggregation``) adds a ``seeding`` step between check-in and the first round
   (the members reveal the contributions they committed to at check-in) and computes each round's sum by
   secure aggregation among the devices instead of from their reports (:mod:`.secure`);
3. the generator's :class:`~fedstats.results.AnalysisResult` is stored in the transaction that turns the
   run's ledger reservation into a spend (:mod:`.ledger`): a result is never readable before it is paid.

Every run has a 32-byte **public seed**: a plain run's is drawn by the server when the run is created and
stated to the devices (it shapes public choices only, such as which records report which bit, never a
device's privacy: a device's randomness is its own); a secure run's is the seed its members agreed by
commit-then-reveal (:mod:`fedstats.wire.seeding`), which each device verifies. The plan of the rounds is a
function of the task, the cohort size and this seed (:func:`fedstats.wire.registry.plan_for`), so a device
replays it: each round's work item carries the public seed, the cohort size and the journaled
``(total, n_clients)`` of the earlier rounds, and the device derives the round itself and refuses one that
differs (:mod:`fedstats.client`). A restarted server rebuilds each live run the same way, from the journal.
Each replayed round's parameters must hash to the journaled digest, or the run aborts (a protocol that
does not replay deterministically must not release anything).

The privacy charge reserved for a run is the analysis's privacy loss
(:func:`fedstats.wire.registry.privacy_loss_for`: epsilon, delta and rho where the mechanism gives it), the
same loss the devices reserve on their own budgets.
"""

from __future__ import annotations

import json
import math
import secrets
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from fedstats import wire
from fedstats.errors import DataError, ParameterError, SecurityError
from fedstats.service.domain import batched, ledger
from fedstats.service.domain.clock import DEADLINES
from fedstats.service.domain.refusals import refusal_view
from fedstats.service.domain.reports import report_problems
from fedstats.service.domain.secure_devices import secure_work
from fedstats.service.domain.tasks import ConflictError, NotFoundError, task_config, task_envelope
from fedstats.service.store import State
from fedstats.service.store.rows import Cohort, FinishedRun, LiveRun, PutReport, RoundRow, RunRow
from fedstats.wire.registry import privacy_loss_for
from fedstats.wire.tasks import check_task_current

__all__ = [
    "EXACT",
    "Upload",
    "cancel_run",
    "checkin",
    "client_work",
    "client_work_json",
    "create_run",
    "load_run",
    "locked_run",
    "put_uploads",
    "run_view",
    "screen_uploads",
    "submit_report",
    "upload_report",
]


def create_run(tx: State, task_id: str, analyst: str) -> str:
    """Start a run of a task, reserving its privacy charge first (in the caller's transaction).

    Raises
    ------
    NotFoundError
        If the task does not exist.
    SecurityError
        If the task or its analyst's certificate expired (nothing is reserved).
    BudgetExceededError
        If the population's or the analyst's budget cannot cover the task.
    """
    cfg = task_config(tx, task_id)
    envelope = task_envelope(tx, task_id)
    if envelope is None:
        raise ConflictError(f"task {task_id} was stored unsigned: devices would refuse it")
    # an expired task, or one whose analyst's certificate expired (not renewed, revoked): 403
    check_task_current(cfg, envelope["certificate"])
    run_id = str(uuid.uuid4())
    loss = privacy_loss_for(cfg)
    if math.isfinite(loss.epsilon):  # an infinite loss is a non-private task: no DP charge
        ledger.reserve(
            tx,
            run_id=run_id,
            population=cfg["privacy"]["population"],
            analyst=analyst,
            charge=ledger.Charge.of(loss, f"{cfg['analysis']} {task_id[:12]}"),
        )
    now = time.time()
    tx.add_run(
        id=run_id,
        task_id=task_id,
        analyst=analyst,
        status="checkin",
        created_at=now,
        # measured on the monotonic clock in this process (clock.DEADLINES)
        checkin_deadline=DEADLINES.set((run_id, "checkin"), float(cfg["deadlines"]["checkin"])),
        secret=secrets.token_hex(32),  # unused since the plan is keyed by the public seed
        # a plain run's public seed is stated now; a secure run's is agreed after check-in
        public_seed=None if cfg.get("secure_aggregation") is not None else new_public_seed(),
        lease_epoch=0,
    )
    ledger.audit(tx, analyst, "create-run", run_id, task_id=task_id)
    return run_id


def cancel_run(tx: State, run_id: str, actor: str) -> str:
    """Cancel a live run (in the caller's transaction); return its population.

    The run becomes ``aborted`` with the error ``"cancelled by <actor>"`` (devices see it finished), as
    the driver aborts a run: its privacy reservation is released if no round's sum was journaled yet,
    else spent (a journaled sum already shaped later rounds). Its lease is cleared and its fencing token
    (``lease_epoch``) incremented, so the process that was advancing it writes nothing more to it.

    Raises
    ------
    NotFoundError
        If there is no such run.
    ConflictError
        If the run is already done or aborted.
    """
    run = load_run(tx, run_id, lock=True)
    if run.status not in ("checkin", "seeding", "running"):
        raise ConflictError(f"run {run_id} is already {run.status}: nothing to cancel")
    reason = f"cancelled by {actor}"
    used = tx.any_closed_round(run_id)
    tx.update_run(
        run_id,
        status="aborted",
        error=reason,
        finished_at=time.time(),
        lease_owner=None,
        lease_until=None,
        lease_epoch=run.lease_epoch + 1,
    )
    if not used:
        ledger.release(tx, run_id, actor=actor, reason=reason)
    else:
        ledger.spend(tx, run_id, actor=actor)
    ledger.audit(tx, actor, "cancel", run_id, reason=reason)
    return str(task_config(tx, run.task_id)["privacy"]["population"])


def new_public_seed() -> str:
    """A plain run's public seed: 32 fresh random bytes (hex), stated to the devices."""
    return secrets.token_hex(32)


def load_run(tx: State, run_id: str, *, lock: bool = False) -> RunRow:
    """The run ``run_id``, read fresh, optionally locked (``FOR NO KEY UPDATE``) to the transaction's end.

    Raises
    ------
    NotFoundError
        If there is no such run.
    """
    run = tx.run(run_id, lock=lock)
    if run is None:
        raise NotFoundError(f"no run {run_id!r}")
    return run


def locked_run(tx: State, run_id: str, held: dict[Any, Any] | None) -> RunRow:
    """:func:`load_run` locked, read once per transaction for work that does not write the run row.

    ``held`` is shared by the requests of one transaction (a batch of check-ins or reveals): the row the
    first read and locked is the one every later one would read (no other transaction can change it
    until this one ends, and none of them does). None: read as :func:`load_run` does.

    Raises
    ------
    NotFoundError
        If there is no such run.
    """
    if held is None:
        return load_run(tx, run_id, lock=True)
    run = held.get(("run", run_id))
    if run is None:
        run = held[("run", run_id)] = load_run(tx, run_id, lock=True)
    return cast(RunRow, run)


def checkin(
    tx: State,
    run_id: str,
    client_id: str,
    records: int,
    commitment: str | None = None,
    *,
    population: str | None = None,
    held: dict[Any, Any] | None = None,
) -> dict[str, int]:
    """Add a device to a run's cohort; idempotent (a second check-in returns the same slots).

    ``commitment`` (64 hex digits, :func:`fedstats.wire.seeding.commitment`) is required by a secure
    task and refused otherwise. The run row is locked (check-ins of one run are serialized, so slots
    never overlap); the cohort so far is read as one aggregate row. ``population``: the device's
    (from its certificate); given, a run of another population is refused before anything else.
    ``held``: shared by the check-ins of one transaction (:func:`locked_run`); the run row, the
    cohort, and the batch's devices' member rows and withholder status are read by the first and
    kept (only check-ins add members, under the run's lock).

    Raises
    ------
    SecurityError
        If ``population`` is given and the run's task is for another population.
    ConflictError
        If the check-in is closed, the cohort already has ``cohort_size`` devices, or (a secure task)
        the device withheld its seed reveal in an earlier run of the task.
    ParameterError
        If ``records`` < 1, or the commitment is missing, malformed or not expected.
    """
    if records < 1:
        raise ParameterError("records", records, "an integer >= 1")
    run = locked_run(tx, run_id, held)
    cfg = task_config(tx, run.task_id)
    if population is not None and cfg["privacy"]["population"] != population:
        raise SecurityError("this run is for another population")
    m = batched.batch_member(tx, run_id, client_id, held)  # the batch's devices read at once
    if m is not None:
        return {"slot_start": m.slot_start, "slot_count": m.slot_count}
    if run.status != "checkin" or DEADLINES.passed((run_id, "checkin"), run.checkin_deadline):
        raise ConflictError(f"run {run_id} is not accepting check-ins")
    if cfg.get("secure_aggregation") is not None:
        if not (isinstance(commitment, str) and len(commitment) == 64):
            raise ParameterError("commitment", commitment, "64 hex digits (a secure task)")
        try:
            bytes.fromhex(commitment)
        except ValueError:
            raise ParameterError("commitment", commitment, "64 hex digits") from None
        if batched.batch_withholder(tx, run.task_id, client_id, held):  # an abort costs its cause
            raise ConflictError(
                "this device did not reveal its seed contribution in an earlier run of this task: it "
                "is excluded from the task's later cohorts"
            )
    elif commitment is not None:
        raise ParameterError("commitment", commitment, "none (the task is not secure)")
    cohort = held.get(("cohort", run_id)) if held is not None else None
    if cohort is None:
        cohort = tx.cohort(run_id)
    devices, used = cohort.devices, cohort.records
    if devices >= int(cfg["cohort_size"]):  # cohort_size counts devices
        raise ConflictError(f"run {run_id} has a full cohort ({devices} devices)")
    count = min(int(records), int(cfg.get("max_records_per_client", 1)))
    row = (run_id, client_id, used, count, time.time(), commitment)
    if not batched.write_later(held, "members", row, tx.add_members):
        tx.add_member(*row)
    if held is not None:
        held[("cohort", run_id)] = Cohort(devices + 1, used + count)
        batched.note_member(held, run_id, client_id, (used, count), commitment, None)
    return {"slot_start": used, "slot_count": count}


def _slots_in(start: int, count: int, lo: int, hi: int) -> tuple[int, int]:
    """The part ``[a, b)`` of slots ``[start, start + count)`` inside ``[lo, hi)`` (``a == b``: none)."""
    a = max(start, lo)
    return a, max(a, min(start + count, hi))


def client_work(
    tx: State,
    client_id: str,
    population: str,
    device_runs: tuple[list[LiveRun], list[FinishedRun]] | None = None,
) -> dict[str, Any]:
    """What a device may do now: runs open for check-in, and rounds waiting for its report.

    Every device asks this at every poll and stage (unless its cached answer is still valid, see
    :mod:`fedstats.service.http.device`), so it costs a few small statements, none reading more than
    this device's rows: the live runs with this device's membership and their open round (one join), the
    device's own report or secure-stage messages (key columns only, no payloads), and the finished runs
    it was in. ``device_runs``, if given, is the device's
    :meth:`~fedstats.service.store.core.CoreQueries.device_runs` as already read in this transaction
    (for a batch of polls, :meth:`~fedstats.service.store.core.CoreQueries.device_runs_many`).
    """
    offers, reveals, rounds, finished = _work_parts(tx, client_id, population, device_runs)
    return {
        "offers": [o for _, o in offers],
        "reveals": reveals,
        "rounds": [static | mine for _, static, mine in rounds],
        "finished": finished,
    }


def client_work_json(
    tx: State,
    client_id: str,
    population: str,
    device_runs: tuple[list[LiveRun], list[FinishedRun]] | None = None,
) -> bytes:
    """:func:`client_work` as compact JSON (``separators=(",", ":")``), what a work poll answers.

    The same list, from parts encoded once per process: an offer (made once per run too), and the
    fields of a round entry every device of the round gets (its public parameters, the plan's history,
    ~20 kB in FED-chi^2's second round), not once per device and poll; only the device's own fields
    (its records, slot and secure stage) are encoded per list.

    Parameters
    ----------
    tx, client_id, population, device_runs
        As :func:`client_work`.

    Returns
    -------
    bytes
        UTF-8 JSON whose parsed value equals :func:`client_work`'s (the keys of a round entry in
        another order).
    """
    offers, reveals, rounds, finished = _work_parts(tx, client_id, population, device_runs)
    entries = []
    for key, static, mine in rounds:
        head = _encoded(key, static)[:-1]  # without its closing brace
        entries.append(head + b"," + _compact(mine)[1:] if mine else head + b"}")
    encoded_offers = [_encoded(key, offer) for key, offer in offers]
    return (
        b'{"offers":['
        + b",".join(encoded_offers)
        + b'],"reveals":'
        + _compact(reveals)
        + b',"rounds":['
        + b",".join(entries)
        + b'],"finished":'
        + _compact(finished)
        + b"}"
    )


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _encoded(key: tuple[Any, ...], value: Any) -> bytes:
    """``_compact(value)``, kept under ``key`` (which names ``value``'s whole content) in this process."""
    got = _ENCODED.get(key)
    if got is None:
        got = _compact(value)
        if len(_ENCODED) > _ENCODED_KEPT:
            _ENCODED.clear()
        _ENCODED[key] = got
    return got


# encoded parts of work lists (see client_work_json): an offer by ("offer", run, task), the common part
# of a round entry by every value it is made of (all fixed once the round is journaled)
_ENCODED: dict[tuple[Any, ...], bytes] = {}
_ENCODED_KEPT = 256  # a live round's part is ~20 kB at most (FED-chi^2's projection): a few MB


def _work_parts(
    tx: State,
    client_id: str,
    population: str,
    device_runs: tuple[list[LiveRun], list[FinishedRun]] | None,
) -> tuple[
    list[tuple[tuple[Any, ...], dict[str, Any]]],
    list[dict[str, Any]],
    list[tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]],
    list[dict[str, Any]],
]:
    """:func:`client_work`'s offers and round entries in parts, each with a key naming its content.

    An offer is ``(key, offer)``; a round entry ``(key, common, mine)``: ``common`` holds the fields
    every device of the round gets (named by ``key``, fixed once the round is journaled and the run's
    cohort and seed are), ``mine`` the device's own.
    """
    offers: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    rounds: list[tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]] = []
    reveals: list[dict[str, Any]] = []
    live_runs, finished_runs = tx.device_runs(client_id) if device_runs is None else device_runs
    for live in live_runs:
        run_id, task_id, rec = live.run_id, live.task_id, live.round
        cfg = task_config(tx, task_id)
        if cfg["privacy"]["population"] != population:
            continue
        if live.status == "checkin":
            if live.slot_start is None and not DEADLINES.passed(
                (run_id, "checkin"), live.checkin_deadline
            ):
                offers.append((("offer", run_id, task_id), _offer(tx, run_id, task_id, cfg)))
            continue
        if live.slot_start is None or live.slot_count is None:
            continue
        if live.status == "seeding":
            if live.reveal is None:
                reveals.append({"run_id": run_id})
            continue
        if rec is None:
            continue
        a, b = _slots_in(live.slot_start, live.slot_count, rec.lo, rec.hi)
        if b <= a:
            continue
        secure_stage = None
        if cfg.get("secure_aggregation") is not None:
            secure_stage = secure_work(tx, run_id, rec, client_id)
            if secure_stage is None:
                continue
        elif live.reported:
            continue
        else:
            _seen(rec, client_id, (live.slot_start, live.slot_count))
        key = (
            "round",
            run_id,
            task_id,
            rec.index,
            rec.name,
            rec.encode,
            rec.params_digest,
            rec.dim,
            rec.bound,
            rec.lo,
            rec.hi,
            rec.deadline,
            live.n_clients,
            live.public_seed,
        )
        common = {
            "run_id": run_id,
            "task_id": task_id,
            "analysis": cfg["analysis"],
            "version": cfg["version"],
            "privacy": cfg["privacy"],
            "round": rec.index,
            "name": rec.name,
            "encode": rec.encode,
            "params": _params_of(rec),
            "dim": rec.dim,
            "bound": rec.bound,
            "client_range": [rec.lo, rec.hi],
            "n_clients": live.n_clients,
            "public_seed": live.public_seed,
            "history": _history(tx, run_id, rec.index),
            "deadline": rec.deadline,
        }
        mine = {"records": [a, b], "slot_start": live.slot_start, "secure": secure_stage}
        rounds.append((key, common, mine))
    finished = [{"run_id": f.run_id, "status": f.status} for f in finished_runs]
    return offers, reveals, rounds, finished


# an offer never changes (its run's task is fixed): made once per run, not at each device's poll
_OFFERS: dict[tuple[str, str], dict[str, Any]] = {}


def _offer(tx: State, run_id: str, task_id: str, cfg: dict[str, Any]) -> dict[str, Any]:
    got = _OFFERS.get((run_id, task_id))
    if got is None:
        envelope = task_envelope(tx, task_id)
        got = {"run_id": run_id, "task_id": task_id, "task": wire.encode(cfg), "envelope": envelope}
        if len(_OFFERS) > 256:
            _OFFERS.clear()
        _OFFERS[(run_id, task_id)] = got
    return got


# a round's public parameters never change once journaled: parsed once per round, not per poll
_PARAMS: dict[tuple[str, int, str], Any] = {}


def _params_of(rec: RoundRow) -> Any:
    key = (rec.run_id, rec.index, rec.params_digest)
    got = _PARAMS.get(key)
    if got is None:
        got = json.loads(rec.params)
        if len(_PARAMS) > 1024:
            _PARAMS.clear()
        _PARAMS[key] = got
    return got


# the journaled sums of a run's closed rounds never change: read once per (run, round), not per poll
_HISTORY: dict[tuple[str, int], list[Any]] = {}


def _history(tx: State, run_id: str, index: int) -> list[Any]:
    """``[{"total", "n_clients"}, ...]`` of rounds ``0 .. index - 1`` as journaled (canonically encoded).

    What a device needs to replay the plan up to round ``index`` (:mod:`fedstats.client`).
    """
    key = (run_id, index)
    got = _HISTORY.get(key)
    if got is None:
        totals = tx.closed_totals(run_id, index) if index else []
        got = [{"total": json.loads(r.total), "n_clients": r.n_clients} for r in totals]
        if len(_HISTORY) > 1024:
            _HISTORY.clear()
        _HISTORY[key] = got
    return got


# What a device's upload is checked against, as this process last read it: a round's journaled
# description and a device's slots in a run never change once written (only a round's status does, and
# the upload's statement checks it), so an upload right after the device's poll reads nothing.
_ROUND_SEEN: dict[tuple[str, int], RoundRow] = {}
_SLOTS_SEEN: dict[tuple[str, str], tuple[int, int]] = {}


def _seen(rec: RoundRow, client_id: str, slots: tuple[int, int]) -> None:
    if len(_SLOTS_SEEN) > 200_000:
        _SLOTS_SEEN.clear()
    if len(_ROUND_SEEN) > 1024:
        _ROUND_SEEN.clear()
    _ROUND_SEEN[(rec.run_id, rec.index)] = rec
    _SLOTS_SEEN[(rec.run_id, client_id)] = slots


def _problem(
    rec: RoundRow, slots: tuple[int, int], vector: Any, count: int
) -> tuple[int, int] | str:
    """The device's records ``(a, b)`` in the round if the report may be stored, else why not."""
    return _problems(rec, [(slots, vector, count)])[0]


def _problems(
    rec: RoundRow, items: Sequence[tuple[tuple[int, int], Any, Any]]
) -> list[tuple[int, int] | str]:
    """:func:`_problem` of many ``(slots, vector, count)`` of one round (the encoder's check vectorized)."""
    out: list[tuple[int, int] | str] = []
    todo: list[int] = []
    for slots, vector, count in items:
        if not isinstance(vector, list) or len(vector) != rec.dim:
            out.append(f"report must be a list of {rec.dim} integers")
        elif not all(type(v) is int for v in vector) and any(
            isinstance(v, bool) or not isinstance(v, int) for v in vector
        ):
            out.append("report entries must be integers")
        else:
            a, b = _slots_in(slots[0], slots[1], rec.lo, rec.hi)
            if count != b - a or count < 1:
                out.append(f"report count must be {b - a} (records of this client in the round)")
            else:
                todo.append(len(out))
                out.append((a, b))
    if todo:
        reports = []
        for i in todo:
            a, b = cast(tuple[int, int], out[i])
            reports.append((items[i][1], items[i][2], b - a, a))
        verdicts = report_problems(
            reports, encode=rec.encode, params=rec.params, dim=rec.dim, bound=rec.bound
        )
        for i, problem in zip(todo, verdicts, strict=True):
            if problem is not None:
                out[i] = f"report refused: {problem}"
    return out


@dataclass(frozen=True)
class Upload:
    """A device's signed report upload, as :func:`put_uploads` writes it.

    Attributes
    ----------
    nonce : tuple of (str, float)
        The request's nonce and timestamp (recorded with the report, refusing a replay).
    run_id : str
    index : int
        The round.
    client_id : str
    vector : Any
        The report as decoded from JSON (checked here: a list of ``dim`` integers).
    count : int
        The records it sums.
    """

    nonce: tuple[str, float]
    run_id: str
    index: int
    client_id: str
    vector: Any
    count: int


EXACT: Final = "exact"
"""What :func:`put_uploads` answers for an upload the one-statement path cannot decide."""


def screen_uploads(uploads: Sequence[Upload]) -> list[tuple[RoundRow, tuple[int, int]] | None]:
    """Which uploads may be written together (:func:`put_uploads`), as :func:`upload_report`'s common case.

    No store access: an upload qualifies if this process has seen its round and the device's slots
    (the device's poll before it), the report passes the round's checks against them (the encoder's
    output check vectorized over the uploads of each round), and no earlier upload of ``uploads`` has
    its nonce or its device and round (a repeat is answered after the first, as if it came alone).

    Returns
    -------
    list
        Per upload, ``(round, slots)`` to write it against, or None (it takes :func:`upload_report`).
    """
    out: list[tuple[RoundRow, tuple[int, int]] | None] = [None] * len(uploads)
    groups: dict[tuple[str, int], list[int]] = {}
    seen: set[tuple[str, ...]] = set()
    for i, u in enumerate(uploads):
        # a repeat (the same request, or the device's second upload to the round) is answered after
        # the first, by the exact path: the set-based write takes distinct uploads only
        again = {("n", u.client_id, u.nonce[0]), ("r", u.client_id, u.run_id, str(u.index))}
        if seen & again:
            continue
        seen |= again
        if (u.run_id, u.index) in _ROUND_SEEN and (u.run_id, u.client_id) in _SLOTS_SEEN:
            groups.setdefault((u.run_id, u.index), []).append(i)
    for key, members in groups.items():
        rec = _ROUND_SEEN[key]
        items = [
            (
                _SLOTS_SEEN[(uploads[i].run_id, uploads[i].client_id)],
                uploads[i].vector,
                uploads[i].count,
            )
            for i in members
        ]
        for i, item, got in zip(members, items, _problems(rec, items), strict=True):
            if not isinstance(got, str):
                out[i] = (rec, item[0])
    return out


def put_uploads(
    tx: State,
    uploads: Sequence[Upload],
    screened: Sequence[tuple[RoundRow, tuple[int, int]] | None],
) -> list[bool | str | None]:
    """Write screened uploads (:func:`screen_uploads`) in the caller's transaction, set-based.

    One statement for them all on PostgreSQL, two on SQLite
    (:meth:`~fedstats.service.store.core.CoreQueries.put_reports`).

    Returns
    -------
    list
        Per upload: True (stored), None (a replayed nonce: nothing written), or :data:`EXACT` (not
        screened, or not stored because the round or the device's slots changed, or a report is
        already there): the caller must then discard this transaction's writes for that upload, i.e.
        roll back, and take :func:`upload_report` for it in a transaction of its own.
    """
    out: list[bool | str | None] = [EXACT] * len(uploads)
    todo = [i for i, got in enumerate(screened) if got is not None]
    items = []
    for i in todo:
        u = uploads[i]
        rec, slots = cast(tuple[RoundRow, tuple[int, int]], screened[i])
        items.append(
            PutReport(
                u.nonce,
                (rec.params_digest, slots[0], slots[1]),
                u.run_id,
                u.index,
                u.client_id,
                json.dumps(u.vector),
                u.count,
                wire.digest({"vector": u.vector, "count": u.count}),
            )
        )
    for i, (fresh, stored) in zip(todo, tx.put_reports(items, time.time()), strict=True):
        out[i] = None if not fresh else True if stored else EXACT
    return out


def upload_report(
    tx: State,
    nonce: tuple[str, float],
    run_id: str,
    index: int,
    client_id: str,
    vector: Any,
    count: int,
) -> bool | None:
    """A device's signed upload: record its nonce and store its report, in the caller's transaction.

    The common case is one statement (two on SQLite) that reads nothing back: the report is checked
    against the round and the device's slots as this process last read them (the device's poll just
    before), and stored only if the round is still open with those parameters and the device still
    holds those slots (:meth:`~fedstats.service.store.core.CoreQueries.put_report`). Otherwise (not seen
    yet, the report refused by that check, or not stored) :func:`submit_report` reads what it needs and
    answers exactly.

    Returns
    -------
    bool or None
        None if the nonce was already used (a replayed request: nothing written); else as
        :func:`submit_report`.

    Raises
    ------
    As :func:`submit_report`.
    """
    upload = Upload(nonce, run_id, index, client_id, vector, count)
    screened = screen_uploads([upload])[0]
    if screened is not None:
        got = put_uploads(tx, [upload], [screened])[0]
        if got is None or got is True:
            return got
        # not stored (the round or the slots changed, or a report is there): the nonce is used in
        # this transaction; the exact path below answers
    elif not tx.use_nonce(client_id, nonce[0], nonce[1]):
        return None
    return submit_report(tx, run_id, index, client_id, vector, count)


def submit_report(
    tx: State, run_id: str, index: int, client_id: str, vector: Any, count: int
) -> bool:
    """Store a device's report; return False if the same report was already stored (idempotent retry).

    Four primary-key statements whatever the cohort size: the round (share-locked, so closing it waits
    for the reports being written), the device's stored report if any, its membership, the insert.

    Raises
    ------
    NotFoundError
        If the round does not exist.
    ConflictError
        If the round is closed, or a *different* report from this device is already stored.
    DataError
        If the report has the wrong length, a non-integer or out-of-bound entry, or the wrong count.
    SecurityError
        If the device is not in the round's cohort.
    """
    rec = tx.round_for_report(run_id, index)
    if rec is None:
        raise NotFoundError(f"no round {index} in run {run_id!r}")
    if not isinstance(vector, list) or len(vector) != rec.dim:
        raise DataError(f"report must be a list of {rec.dim} integers")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in vector):
        raise DataError("report entries must be integers")
    digest = wire.digest({"vector": vector, "count": count})
    old = tx.report_digest(run_id, index, client_id)
    if old is not None:
        if old == digest:
            return False
        raise ConflictError(f"a different report for round {index} is already stored")
    if rec.status != "open":
        raise ConflictError(f"round {index} of run {run_id} is closed")
    member = tx.member(run_id, client_id)
    if member is None:
        raise SecurityError("this client is not in the run's cohort")
    _seen(rec, client_id, member)
    got = _problem(rec, member, vector, count)
    if isinstance(got, str):
        raise DataError(got)
    tx.add_report(run_id, index, client_id, json.dumps(vector), count, digest, time.time())
    return True


def run_view(tx: State, run_id: str) -> dict[str, Any]:
    """Status of a run, its rounds and, once done, its result."""
    run = load_run(tx, run_id)
    slots = tx.slots_of(run_id)  # once, not once per round
    rounds = []
    for r in tx.rounds_of(run_id):
        n_exp = 0
        for start, count in slots:
            a, b = _slots_in(start, count, r.lo, r.hi)
            n_exp += b - a
        rounds.append(
            {
                "index": r.index,
                "name": r.name,
                "status": r.status,
                "client_range": [r.lo, r.hi],
                "records_expected": n_exp,
                "records_summed": r.n_clients,
            }
        )
    return {
        "run_id": run.id,
        "task_id": run.task_id,
        "analyst": run.analyst,
        "status": run.status,
        "n_clients": run.n_clients,  # records in the cohort
        "devices": len(slots),
        "rounds": rounds,
        "result": json.loads(run.result) if run.result else None,
        "error": run.error,
        "refusals": refusal_view(tx, run_id),
    }
