"""Secure aggregation over the network: the server's side of secure runs (seed, sessions, journal, replay).

A task with ``"secure_aggregation": {"max_session": m}`` computes every round's sum by the
malicious-server protocol of :mod:`fedstats.secagg` (Bell et al. 2020) between the devices and the server:

* **Seed.** Check-in carries a commitment; once the cohort is fixed the run is ``seeding`` until every
  member has revealed (:mod:`fedstats.wire.seeding`; the commitment list each member checks and reveals
  against carries every member's slots, so the seed transcript binds the cohort); the run's public seed
  fixes every session id (hence every communication graph), every round's partition into sessions and
  FED-chi^2's projection seed. A member that does not reveal before the deadline is a *withholder*:
  named in the transcript and excluded from the task's later cohorts; the run goes on without it where
  the sessions use the complete graph and enough members revealed (:func:`continues_without`), else it
  aborts (nothing was computed, the ledger reservation is released).
* **Sessions.** The server does not choose them: a secure round's participants (the members whose slots
  meet its client range) are ordered by a PRF keyed by the run seed and cut into ``ceil(d / m)``
  near-equal sessions of at least the task's ``min_session_size``
  (:func:`fedstats.wire.seeding.sessions_of`, :func:`partition`); fewer participants abort the round.
  Each device derives the same partition from the cohort and seed it verified, and refuses a session it
  is not derived into, or with other members, another roster order, index or size. The sessions' sums are
  added exactly, as the in-process ``secure`` route does. Each session runs the five stages of
  :data:`STAGES`; a stage's messages are requests a device may repeat (the same bytes are accepted once,
  other bytes refused), and a stage closes when every device it addressed has answered or at its
  deadline, or, with the task's ``secure_aggregation.quiet_seconds``, once its quorum answered and the
  stage has been quiet that long (:func:`quiet_close`); a device that missed it is a dropout with the
  protocol's semantics (:data:`fedstats.secagg.DROPOUT_STAGES`). A session that loses its quorum aborts, and so does the round
  and the run: no partial sum is ever released.
* **Journal and replay.** Every message, in both directions, is stored (``secure_messages``) in the
  transaction that moves the session on. :class:`SecAggServer` is deterministic given its roster and the
  messages it received, so a restarted server (or another process that took over the run's lease)
  rebuilds the session by replaying the journal stage by stage, and checks that the rebuilt messages are
  those journaled before going on; a divergence aborts the run rather than release anything.
* **Identities.** The roster lists the members' enrolled Ed25519 keys; instead of an authority's
  signature over it (the authority is offline), the devices check each member's enrollment certificate
  (:class:`fedstats.client.secure.CertificateRosterVerifier`) and that the session id follows from the
  run's seed.

This module is the driver's part (sessions, journal, replay); the devices' requests are handled in
:mod:`.secure_devices`.

What the server never sees is any device's report: only the masked vectors and, per session, their sum.
Per-report range checks are not possible under secure aggregation (the protocol has no proofs of
range): a device can shift the sum by up to the ring size, as in Bell et al.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedstats import wire
from fedstats.errors import DataError, ProtocolAbortError, SecurityError
from fedstats.secagg.collusion import COMPLETE_UP_TO, session_parameters
from fedstats.secagg.identity import SIGNATURE_BYTES, SessionRoster
from fedstats.secagg.messages import (
    AdvertiseKeys,
    ConsistencySignature,
    EncryptedShares,
    MaskedInput,
    SetupMessage,
    UnmaskResponse,
)
from fedstats.secagg.params import SecAggParameters
from fedstats.secagg.quantize import check_overflow
from fedstats.secagg.server import SecAggServer
from fedstats.service.domain import secure_tree
from fedstats.service.domain.changes import ArrivalGate
from fedstats.service.store import State
from fedstats.service.store.rows import RoundRow, RunRow
from fedstats.service.store.secure import EnrolledRow, MemberRow, SecureSessionRow, UpMessage
from fedstats.wire import seeding
from fedstats.wire.registry import config_for, lookup
from fedstats.wire.tasks import min_session_size

__all__ = [
    "BITS",
    "STAGES",
    "TRAFFIC",
    "SessionCache",
    "StageTraffic",
    "advance_sessions",
    "close_seeding",
    "cohort",
    "continues_without",
    "is_secure",
    "open_sessions",
    "partition",
    "quiet_close",
    "reporting_floor",
    "session_bounds",
]

STAGES = seeding.STAGES

# the message type a device sends at each stage
UP_MESSAGES = (AdvertiseKeys, EncryptedShares, MaskedInput, ConsistencySignature, UnmaskResponse)

BITS = seeding.BITS

_EMPTY_SIGNATURE = b"\x00" * SIGNATURE_BYTES


def is_secure(cfg: dict[str, Any]) -> bool:
    """Whether a (normalized) task runs its rounds through secure aggregation."""
    return cfg.get("secure_aggregation") is not None


session_bounds = seeding.session_bounds


def ordered_members(tx: State, run_id: str) -> list[MemberRow]:
    """A run's members in slot order."""
    return tx.members_in_order(run_id)


# -- the run's seed -----------------------------------------------------------------------------


def continues_without(cfg: dict[str, Any], revealed: int) -> str | None:
    """Why a secure run cannot continue without its withholders (None: it continues).

    It continues when every session the task can form uses the complete graph
    (``max_session <= COMPLETE_UP_TO``, :func:`fedstats.secagg.collusion.session_parameters`: there no
    seed picks anyone's neighbours, so a server choosing which reveals to drop chooses nothing that
    helps it isolate a member) and ``revealed`` members still fill the task's ``min_clients`` and
    ``min_session_size``. In a sparser session every seed is another draw of the graph, and a server that
    could name any set of members withholders would choose among that many seeds: there a withholder
    aborts the run (``docs/secagg.md``, "An abort costs its cause").
    """
    opts = cfg["secure_aggregation"]
    if int(opts["max_session"]) > COMPLETE_UP_TO:
        return (
            f"sessions of up to {opts['max_session']} members (above {COMPLETE_UP_TO}) use a sparse "
            "graph, which a seed chosen among the members' reveals could grind"
        )
    need = max(int(cfg["min_clients"]), min_session_size(opts))
    if revealed < need:
        return f"{revealed} member(s) revealed; the task needs {need}"
    return None


def close_seeding(
    tx: State,
    run: RunRow,
    deadline: float,
    cfg: dict[str, Any] | None = None,
    gate: ArrivalGate | None = None,
) -> RunRow | str | None:
    """Fix the run's seed once every member revealed, or at ``deadline`` without the withholders.

    ``run`` is the run's row as loaded (and locked) in ``tx``; ``cfg`` its task's configuration. Past
    the deadline the members that committed and did not reveal are **withholders**: recorded (named in
    the transcript by their empty reveal, excluded from the later cohorts of the task,
    :meth:`~fedstats.service.store.secure.SecureQueries.add_withholders`), and the run continues without
    them when :func:`continues_without` allows (their slots stay in the cohort; they are in no session,
    like dropouts), else aborts. Without ``cfg`` any withholder aborts. While it waits, ``gate`` (the
    driver's :class:`~fedstats.service.domain.changes.ArrivalGate`) is told how many reveals are missing.

    Returns
    -------
    RunRow or str or None
        The run as now stored (its seed fixed, status ``running``); the reason to abort it; None while
        waiting for reveals.
    """
    if run.cohort_head is not None:  # a tree run: its committee reveals
        return secure_tree.close_seeding(tx, run, deadline, gate)
    left = tx.unrevealed(run.id) if time.time() <= deadline else 0
    if left:
        if gate is not None:  # the reveal handlers wake a pass at the last one
            gate.looked(("reveal", run.id), left)
        return None  # one count per driver pass while the reveals come in, not n rows each
    rows = ordered_members(tx, run.id)
    missing = [m.client_id for m in rows if m.reveal is None]
    if missing:
        if time.time() <= deadline:
            return None
        tx.add_withholders(run.task_id, run.id, missing, time.time())
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        why = (
            "no task configuration"
            if cfg is None
            else continues_without(cfg, len(rows) - len(missing))
        )
        if why is not None:
            return (
                f"{len(missing)} member(s) did not reveal their seed contribution before the deadline "
                f"({shown}; excluded from the task's later runs) and the run cannot go on without "
                f"them: {why}"
            )
    entries = [(m.client_id, str(m.commitment), m.slot_start, m.slot_count) for m in rows]
    reveals = [None if m.reveal is None else bytes.fromhex(m.reveal) for m in rows]
    keys = [c.public_key for c in enrolled_rows(tx, [m.client_id for m in rows])]
    seed = seeding.run_seed(run.id, entries, reveals, keys).hex()
    tx.start_secure_run(run.id, seed)
    return dataclasses.replace(run, public_seed=seed, status="running")


# -- sessions -----------------------------------------------------------------------------------


def _roster(tx: State, run: RunRow, index: int, number: int, members: list[str]) -> SessionRoster:
    if run.cohort_head is not None:  # a tree run's roster is bound (secure_tree.bound_roster)
        return secure_tree.bound_roster(tx, run, index, number, members)
    keys = [bytes.fromhex(c.public_key) for c in enrolled_rows(tx, members)]
    sid = seeding.session_id(bytes.fromhex(str(run.public_seed)), index, number)
    return SessionRoster(seeding.task_id_bytes(run.id), sid, tuple(keys), _EMPTY_SIGNATURE)


def parameters_of(row: SecureSessionRow) -> SecAggParameters:
    """The protocol parameters journaled with a session."""
    return SecAggParameters(**json.loads(row.params))


def digest_of(data: bytes) -> str:
    """SHA-256 (hex) of a journaled message."""
    return hashlib.sha256(data).hexdigest()


def _sent(stage: int, msg: Any) -> Any:
    """The message as journaled and sent: a setup message without its roster.

    The roster (the members' identity keys in roster order, ``32 n`` bytes) is committed once per run in
    the seed transcript every member verified (:func:`fedstats.wire.seeding.commitments_digest` with the
    keys); each device derives its session's roster from it and refuses a setup message that carries
    another. Sending it again to every member of every session cost ``32 n^2`` bytes per session.
    """
    if stage == 0 and isinstance(msg, SetupMessage):
        return dataclasses.replace(msg, roster=b"")
    return msg


def _store_down(
    tx: State, row: SecureSessionRow, stage: int, out: dict[int, Any], cache: SessionCache
) -> None:
    """Journal a stage's messages to the devices: one multi-row insert (a session has up to 10^3).

    The serialized messages are also handed to ``cache`` (:attr:`SessionCache.journaled`): once the
    transaction committed, the caller publishes them to this process's devices' endpoint
    (:func:`fedstats.service.domain.secure_devices.publish_downs`), which then serves these very bytes
    instead of reading the stage back from the store.
    """
    if not out:
        return
    messages = []
    # each message is let go once serialized (``out`` is emptied): the stage's messages are not held
    # twice, as objects and as bytes (at the share stage, n messages of k ciphertexts each)
    for i in list(out):
        data = _sent(stage, out.pop(i)).to_bytes()
        messages.append((int(i), data, digest_of(data)))
    tx.add_down_messages(row.run_id, row.round_index, row.number, stage, messages, time.time())
    cache.journaled.append(
        ((row.run_id, row.round_index, row.number, stage), {i: data for i, data, _ in messages})
    )


def cohort(tx: State, run_id: str) -> list[seeding.Slots]:
    """The run's cohort ``(client_id, slot_start, slot_count)`` in slot order (fixed once seeding began)."""
    return [(m.client_id, m.slot_start, m.slot_count) for m in ordered_members(tx, run_id)]


def partition(tx: State, run: RunRow, rec: RoundRow, cfg: dict[str, Any]) -> list[list[str]]:
    """The members of each session of a secure round, in roster order (:func:`seeding.sessions_of`).

    The devices derive the same partition from the verified cohort and seed, and refuse any other.

    Raises
    ------
    ProtocolAbortError
        If a session would be smaller than the task's ``min_session_size``.
    """
    if run.cohort_head is not None:  # a tree run: sessions from positions
        return secure_tree.partition(tx, run, rec, cfg)
    opts = cfg["secure_aggregation"]
    max_session = int(opts["max_session"])
    # the withholders (no reveal in a seeded run) hold their slots but join no session
    return seeding.sessions_of(
        [
            (m.client_id, m.slot_start, m.slot_count)
            for m in ordered_members(tx, run.id)
            if m.reveal
        ],
        bytes.fromhex(str(run.public_seed)),
        rec.index,
        (rec.lo, rec.hi),
        max_session,
        min_session_size(opts),
    )


def open_sessions(
    tx: State, run: RunRow, rec: RoundRow, cfg: dict[str, Any], cache: SessionCache
) -> None:
    """Create the sessions of a secure round and journal their stage-0 (setup) messages.

    ``run`` and ``rec`` are the run's and the round's rows (read: ``id``, ``public_seed``; ``index``,
    ``lo``, ``hi``, ``dim``, ``bound``).

    Raises
    ------
    OverflowRiskError
        If a session's sum could wrap modulo 2^64.
    ProtocolAbortError
        If the round's participants cannot form sessions of the task's ``min_session_size``.
    """
    slots: dict[str, tuple[int, int]] | None = None
    for number, members in enumerate(partition(tx, run, rec, cfg)):
        if slots is None:
            slots = tx.member_slots(run.id)
        records = _member_records(slots, members, rec.lo, rec.hi)
        # the session sums sum(records) reports of |entry| <= bound: it must not wrap mod 2^64
        check_overflow(
            value_bits=int(rec.bound).bit_length() + 1,
            n_clients=max(2, sum(records)),
            bits=BITS,
            headroom=0,
        )
        params = session_parameters(len(members))  # complete graph for small sessions
        deadline = time.time() + float(cfg["deadlines"]["round"])
        row = SecureSessionRow(
            run_id=run.id,
            round_index=rec.index,
            number=number,
            members=json.dumps(members),
            params=json.dumps(dataclasses.asdict(params)),
            session=seeding.session_id(
                bytes.fromhex(str(run.public_seed)), rec.index, number
            ).hex(),
            stage=0,
            deadline=deadline,
            status="open",
        )
        tx.add_secure_session(row)
        server = SecAggServer(
            params, length=rec.dim, bits=BITS, roster=_roster(tx, run, rec.index, number, members)
        )
        _store_down(tx, row, 0, server.setup(), cache)
        cache.put(row, server, 0)


@dataclass
class _Live:
    server: SecAggServer
    stage: int
    rejected: set[int] = field(default_factory=set)


class SessionCache:
    """The live :class:`SecAggServer` of each session this process advances (rebuilt by replay if absent).

    Parameters
    ----------
    closing : callable, optional
        ``closing((run_id, round_index, number, stage))`` is called when a session's stage closes, before
        the next stage's messages are computed: what this process keeps of the closing stage's
        messages for the devices' requests may be let go then (a device that still asks for one is
        answered from the store), not held beside the next stage's.
    gate : ArrivalGate, optional
        The driver's (:class:`~fedstats.service.domain.changes.ArrivalGate`): :func:`advance_sessions` tells
        it how many messages each waiting stage still needs.
    """

    def __init__(
        self,
        closing: Callable[[tuple[str, int, int, int]], None] | None = None,
        gate: ArrivalGate | None = None,
    ) -> None:
        self.closing = closing
        self.gate = gate
        self._live: dict[tuple[str, int, int], _Live] = {}
        self.advanced: list[tuple[str, int, int]] = []
        """``(run_id, round_index, new_stage)`` of each session moved on since the caller last cleared it
        (``len(STAGES)``: done); fault-injection hooks fire on it once the transaction committed."""
        self.journaled: list[tuple[tuple[str, int, int, int], dict[int, bytes]]] = []
        """``((run_id, round_index, number, stage), client_index -> payload)`` of each stage whose
        messages to the devices were journaled since the caller last took them (:meth:`take_journaled`);
        published to the devices' endpoint only once the transaction committed, dropped if it failed."""

        self.finished: list[tuple[str, int, int]] = []
        """``(run_id, round_index, number)`` of each session that ended (done) since the caller last
        took them (:meth:`take_finished`): once committed, this process's caches of it are released."""

    def take_journaled(self) -> list[tuple[tuple[str, int, int, int], dict[int, bytes]]]:
        """The stages journaled since the last call (:attr:`journaled`), which is emptied."""
        got, self.journaled = self.journaled, []
        return got

    def take_finished(self) -> list[tuple[str, int, int]]:
        """The sessions that ended since the last call (:attr:`finished`), which is emptied."""
        got, self.finished = self.finished, []
        return got

    def uncommitted(self) -> None:
        """Drop :attr:`journaled` and :attr:`finished`: their transaction failed (never served or freed)."""
        self.journaled.clear()
        self.finished.clear()

    def put(self, row: SecureSessionRow, server: SecAggServer, stage: int) -> None:
        """Remember ``server`` as session ``row`` at ``stage``."""
        self._live[(row.run_id, row.round_index, row.number)] = _Live(server, stage)

    def get(self, row: SecureSessionRow) -> _Live | None:
        """The live session if it is at the row's stage (else None: rebuild it)."""
        got = self._live.get((row.run_id, row.round_index, row.number))
        return got if got is not None and got.stage == row.stage else None

    def discard(self, run_id: str, round_index: int, number: int) -> None:
        """Forget one session (it is over)."""
        self._live.pop((run_id, round_index, number), None)

    def drop(self, run_id: str) -> None:
        """Forget every session of ``run_id`` (lease lost, failed transaction, run over)."""
        for key in [k for k in self._live if k[0] == run_id]:
            del self._live[key]


def _ups(tx: State, row: SecureSessionRow, stage: int) -> list[UpMessage]:
    """The devices' messages of ``stage`` (``client_index``, ``payload``), by client index."""
    return tx.up_messages(row.run_id, row.round_index, row.number, stage)


def _count(tx: State, row: SecureSessionRow, direction: str) -> int:
    """Messages journaled in ``direction`` at the session's current stage."""
    return tx.count_messages(row.run_id, row.round_index, row.number, row.stage, direction)


def enrolled_rows(tx: State, members: list[str]) -> list[EnrolledRow]:
    """The enrolled rows of ``members``, in their order (one query)."""
    return tx.enrolled(members)


def _downs(tx: State, row: SecureSessionRow, stage: int) -> dict[int, str]:
    return tx.down_digests(row.run_id, row.round_index, row.number, stage)


def _feed(live: _Live, ups: list[UpMessage]) -> None:
    for m in ups:
        try:
            # the device's signed request named its index: the server-read messages' signatures are
            # not checked again (SecAggServer.receive_bytes)
            live.server.receive_bytes(m.payload, sender=int(m.client_index))
        except (SecurityError, DataError):
            live.rejected.add(int(m.client_index))  # a refused message: its sender is a dropout


def _rebuild(tx: State, run: RunRow, row: SecureSessionRow, dim: int) -> _Live:
    """Replay the journal of stages before ``row.stage``; check every rebuilt message against it."""
    members = json.loads(row.members)
    roster = _roster(tx, run, row.round_index, row.number, members)
    if roster.session.hex() != row.session:
        raise SecurityError("replay: the session id no longer follows from the run seed")
    server = SecAggServer(parameters_of(row), length=dim, bits=BITS, roster=roster)
    live = _Live(server, 0)
    out: dict[int, Any] = dict(server.setup())
    for stage in range(row.stage + 1):
        journal = _downs(tx, row, stage)
        if {i: digest_of(_sent(stage, m).to_bytes()) for i, m in out.items()} != journal:
            raise SecurityError(
                f"replay of session {row.number} of round {row.round_index} diverged from the "
                f"journal at stage {STAGES[stage]}"
            )
        if stage == row.stage:
            break
        _feed(live, _ups(tx, row, stage))
        out = dict(server.advance())
        live.stage = stage + 1
    return live


def _member_records(
    slots: dict[str, tuple[int, int]], members: list[str], lo: int, hi: int
) -> list[int]:
    """Each member's records in ``[lo, hi)``, from ``client_id -> (slot_start, slot_count)``."""
    out = []
    for cid in members:
        start, count = slots[cid]
        a, b = max(start, lo), min(start + count, hi)
        out.append(max(0, b - a))
    return out


class StageTraffic:
    """The stage messages this server process is handling now, and when the latest arrived, per stage.

    The journal shows a stage message only once its transaction committed; on a loaded server a message
    can wait seconds between arriving and being stored (signature check, the store threads' queue). The
    quiet rule (:func:`quiet_close`) must not take that wait for silence: the devices' endpoint wraps
    each stage message in :meth:`arriving` from the moment its request reaches it, and the driver counts
    a stage as quiet only with none in flight and none arrived within the quiet period. Per process: in a
    deployment of several processes, another process's messages count once journaled (its in-flight ones
    only lengthen nothing; the rule stays sound, only less patient).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inflight: dict[tuple[str, int, int, int], int] = {}
        self._latest: dict[tuple[str, int, int, int], float] = {}

    @contextlib.contextmanager
    def arriving(self, key: tuple[str, int, int, int]) -> Iterator[None]:
        """Count one stage message ``(run_id, round, session, stage)`` in flight while the block runs."""
        with self._lock:
            self._inflight[key] = self._inflight.get(key, 0) + 1
            if len(self._latest) > 4096:
                self._latest.clear()
            self._latest[key] = time.time()
        try:
            yield
        finally:
            with self._lock:
                left = self._inflight.get(key, 1) - 1
                if left > 0:
                    self._inflight[key] = left
                else:
                    self._inflight.pop(key, None)
                self._latest[key] = time.time()

    def state(self, key: tuple[str, int, int, int]) -> tuple[int, float | None]:
        """``(in flight, latest arrival or completion)`` of a stage in this process."""
        with self._lock:
            return self._inflight.get(key, 0), self._latest.get(key)


TRAFFIC = StageTraffic()
"""This process's :class:`StageTraffic` (the devices' endpoint reports to it, the driver reads it)."""


def reporting_floor(cfg: dict[str, Any]) -> float:
    """The fraction of a session's records whose reports the task's privacy needs in the sum.

    0 unless the analysis adds distributed noise (registry privacy ``"distributed"``): its shares are
    calibrated for ``ceil(min_reporting * n)`` reports (``min_reporting``, default 1, of its config), and
    fewer give a larger epsilon. :func:`quiet_close` never closes a stage early below that floor.
    """
    if lookup(str(cfg["analysis"]), int(cfg["version"])).privacy != "distributed":
        return 0.0
    return float(getattr(config_for(cfg), "min_reporting", 1.0))


def quiet_close(
    *,
    answered: int,
    addressed: int,
    min_survivors: int,
    opened: float,
    newest: float | None,
    now: float,
    quiet_seconds: float | None,
    answered_records: int | None = None,
    session_records: int = 0,
    floor: float = 0.0,
) -> bool:
    """Whether a secure stage still short of answers may close before its deadline (the quiet rule).

    The rule (``secure_aggregation.quiet_seconds`` of the task): a stage closes early when (1) at least
    the session's quorum answered (``min_survivors``: fewer would abort the session at any close, so an
    early close never turns a round that waiting could save into an abort at this stage), (2) with a
    distributed-noise analysis, the answering members hold at least ``ceil(floor * session_records)``
    records (the reports the noise shares are calibrated for: an early close never by itself makes the
    noise in the sum fall below its target), and (3) no message of the stage arrived for
    ``quiet_seconds`` (counted from the stage's opening if none came; the driver also counts the
    messages this process is still checking or storing, :class:`StageTraffic`, and closes nothing while
    one is in flight).

    Why it is sound (``docs/secagg.md``, "Closing a stage early"): which devices are dropouts is the
    server's call in Bell et al.'s protocol (a malicious server may declare any set), so the devices'
    guarantees never depended on the server waiting; an honest device that answers after the close is
    refused (its masked input, if that was the stage, is not in the sum, and its neighbours reveal only
    shares of its mask key, never of its self mask, after the consistency check). What it costs is the
    slow devices' inputs, which is why it is opt-in.

    Parameters
    ----------
    answered, addressed : int
        Devices that answered the stage, and devices it addressed.
    min_survivors : int
        The session's quorum (:attr:`fedstats.secagg.SecAggParameters.min_survivors`).
    opened : float
        When the stage opened (Unix seconds).
    newest : float or None
        When its latest answer was journaled (None: no answer yet).
    now : float
    quiet_seconds : float or None
        The task's quiet period; None: the stage closes only when complete or at its deadline.
    answered_records : int, optional
        Records held by the answering devices (needed when ``floor`` > 0; None then refuses).
    session_records : int
        Records held by every member of the session in the round.
    floor : float
        :func:`reporting_floor` of the task, in [0, 1].

    Returns
    -------
    bool
    """
    if quiet_seconds is None or answered >= addressed or answered < min_survivors:
        return False
    if floor > 0:
        need = math.ceil(floor * session_records - 1e-9)
        if answered_records is None or answered_records < need:
            return False
    last = opened if newest is None else max(opened, newest)
    return now - last >= quiet_seconds


def _quiet(
    tx: State,
    run: RunRow,
    rec: RoundRow,
    row: SecureSessionRow,
    activity: tuple[int, int, float | None],
    now: float,
    stage_seconds: float,
    quiet_seconds: float | None,
    floor: float,
) -> bool:
    """:func:`quiet_close` for a session's current stage (its records read only when ``floor`` > 0).

    ``activity``: the stage's ``(answered, addressed, newest)``.
    """
    answered, addressed, newest = activity
    if quiet_seconds is None:
        return False
    inflight, seen = TRAFFIC.state((row.run_id, row.round_index, row.number, row.stage))
    if inflight:
        return False  # a message is being checked or stored: not quiet
    if seen is not None:
        newest = seen if newest is None else max(newest, seen)
    common: dict[str, Any] = {
        "answered": answered,
        "addressed": addressed,
        "min_survivors": parameters_of(row).min_survivors,
        # every stage's deadline is its opening plus stage_seconds
        "opened": row.deadline - stage_seconds,
        "newest": newest,
        "now": now,
        "quiet_seconds": quiet_seconds,
    }
    if floor <= 0:
        return quiet_close(**common)
    # the floor needs the answering members' records (every member's slots and the stage's messages:
    # O(n) rows): read only when the stage would close without it, not at every pass while it waits
    if not quiet_close(**common):
        return False
    records = _member_records(tx.member_slots(run.id), json.loads(row.members), rec.lo, rec.hi)
    answering = tx.up_indices(row.run_id, row.round_index, row.number, row.stage)
    return quiet_close(
        **common,
        answered_records=sum(records[i] for i in answering),
        session_records=sum(records),
        floor=floor,
    )


def advance_sessions(
    tx: State,
    run: RunRow,
    rec: RoundRow,
    cache: SessionCache,
    stage_seconds: float,
    quiet_seconds: float | None = None,
    floor: float = 0.0,
) -> tuple[np.ndarray, int] | str | None:
    """Move every open session of a secure round on by at most one stage, inside the caller's transaction.

    ``run`` and ``rec`` are the run's and the round's rows (read: ``id``, ``public_seed``; ``index``,
    ``name``, ``lo``, ``hi``, ``dim``). A stage closes when every device it addressed answered, at its
    deadline, or by :func:`quiet_close` (``quiet_seconds`` and ``floor``: the task's
    ``secure_aggregation.quiet_seconds`` and :func:`reporting_floor`).

    Returns
    -------
    tuple or str or None
        ``(total, n_records)`` once every session is done (the exact sum of the session sums, int64 or
        object), an abort reason if a session aborted, else None (still waiting).
    """
    # read without a lock: only the run's lease holder (the caller, under the run's row lock) changes a
    # session, and devices' stage messages (which take the row FOR SHARE) must not queue behind a pass
    # that only counts; the row is locked, and re-read, only to close its stage
    rows = tx.secure_sessions(run.id, rec.index)
    now = time.time()
    for j, row in enumerate(rows):
        if row.status != "open":
            continue
        if now < row.deadline:
            activity = tx.up_activity(row.run_id, row.round_index, row.number, row.stage)
            answered, newest = activity.count, activity.newest
            addressed = _count(tx, row, "down")
            waiting = answered < addressed
            if waiting and not _quiet(
                tx,
                run,
                rec,
                row,
                (answered, addressed, newest),
                now,
                stage_seconds,
                quiet_seconds,
                floor,
            ):
                if cache.gate is not None:  # the stage handlers wake a pass at the last message
                    arrivals = ("stage", row.run_id, row.round_index, row.number, row.stage)
                    cache.gate.looked(arrivals, addressed - answered)
                continue  # still waiting: counted in SQL, no payload read
        locked = tx.secure_session(row.run_id, row.round_index, row.number, lock=True)
        assert locked is not None  # sessions are never deleted
        row = rows[j] = locked
        if row.status != "open":
            continue
        key = (row.run_id, row.round_index, row.number)
        live = cache.get(row)
        if live is None:
            live = _rebuild(tx, run, row, rec.dim)
        # the stage's messages as read (n of them, O(n k) or O(n L) bytes) are parsed into the live
        # server and let go before it computes the next stage's messages, and so are the closing
        # stage's messages to the devices this process kept to serve them
        _feed(live, _ups(tx, row, row.stage))
        if cache.closing is not None:
            cache.closing((*key, row.stage))
        try:
            out = live.server.advance()
        except ProtocolAbortError as exc:
            tx.update_secure_session(*key, status="aborted", error=str(exc))
            cache.drop(run.id)
            return (
                f"round {rec.index} ({rec.name}): secure session {row.number} aborted at stage "
                f"{STAGES[row.stage]}: {exc}"
            )
        if out:
            row = rows[j] = dataclasses.replace(
                row, stage=row.stage + 1, deadline=now + stage_seconds
            )
            tx.update_secure_session(*key, stage=row.stage, deadline=row.deadline)
            _store_down(tx, row, row.stage, out, cache)
            live.stage = row.stage
            cache.put(row, live.server, row.stage)
            cache.advanced.append((run.id, rec.index, row.stage))
            continue
        cache.advanced.append((run.id, rec.index, len(STAGES)))
        members = json.loads(row.members)
        included = sorted(live.server.masked)
        records = _member_records(tx.member_slots(run.id), members, rec.lo, rec.hi)
        row = rows[j] = dataclasses.replace(
            row,
            total=wire.dumps(live.server.result().view(np.int64).astype(np.int64)),
            included=json.dumps(included),
            n_records=sum(records[i] for i in included),
            status="done",
        )
        tx.update_secure_session(
            *key, total=row.total, included=row.included, n_records=row.n_records, status="done"
        )
        # the session is over: its live server (every device's keys, signatures, unmask requests and
        # responses, O(n k) and more) is not kept through the rounds after it (a rolled-back
        # transaction finds the row open and rebuilds it by replay)
        cache.discard(*key)
        cache.finished.append(key)
    if any(r.status != "done" for r in rows):
        return None
    total: np.ndarray = np.zeros(rec.dim, dtype=np.int64)
    exact = [0] * rec.dim
    for r in rows:
        part = wire.loads(str(r.total))
        exact = [x + int(y) for x, y in zip(exact, part, strict=True)]
    if all(-(2**63) < x < 2**63 for x in exact):
        total = np.asarray(exact, dtype=np.int64)
    else:
        total = np.empty(rec.dim, dtype=object)
        total[:] = exact
    return total, sum(int(r.n_records or 0) for r in rows)
