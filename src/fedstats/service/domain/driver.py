"""The run driver: advances live runs round by round, journals every sum, and replays after a restart.

See :mod:`fedstats.service.domain.runs` for the run's life cycle; :class:`Driver` is the part that runs in the
server's background task.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats import wire
from fedstats.analyses.usefulness import attach_warnings
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import FedstatsError, ParameterError, SecurityError
from fedstats.results import AnalysisResult, to_jsonable
from fedstats.service.domain import ledger, refusals, secure, secure_devices, secure_tree
from fedstats.service.domain.changes import ArrivalGate
from fedstats.service.domain.clock import DEADLINES
from fedstats.service.domain.reports import report_problems
from fedstats.service.domain.runs import load_run, new_public_seed
from fedstats.service.domain.tasks import task_config
from fedstats.service.store import State, Store, StoreUnavailable
from fedstats.service.store.rows import ReportRow, RoundRow, RunLease, RunRow
from fedstats.wire.registry import encoder_name, lookup, plan_for

__all__ = ["Driver", "excluded_metrics"]

log = logging.getLogger("fedstats.service")

_INT64 = 2**63 - 1

# -- the driver ---------------------------------------------------------------------------------------


@dataclass
class _Live:
    gen: Generator[Round, RoundSum, Any]
    index: int
    pending: Round
    # a plain round that still waited for reports at the last look at the database (the reports it
    # needed are the gate's), the round's deadline and when (monotonic) that look was
    waiting: bool = False
    deadline: float = 0.0
    checked: float = 0.0
    # the pending round's journaled fields (its parameters' canonical JSON and digest), computed once:
    # every pass over a live round compares them with the journal
    fields: dict[str, Any] | None = None


def _sum_reports(vectors: list[list[int]], dim: int) -> np.ndarray:
    tot = [0] * dim
    for v in vectors:
        for i, x in enumerate(v):
            tot[i] += x
    if all(-_INT64 <= t <= _INT64 for t in tot):
        return np.asarray(tot, dtype=np.int64)
    out = np.empty(dim, dtype=object)
    out[:] = tot
    return out


def _round_fields(rnd: Round, n: int) -> dict[str, Any]:
    lo, hi = rnd.client_range if rnd.client_range is not None else (0, n)
    return {
        "name": rnd.name,
        "encode": encoder_name(rnd.encode),
        "params": wire.dumps(dict(rnd.params)),
        "params_digest": wire.digest(dict(rnd.params)),
        "dim": int(rnd.dim),
        "bound": int(rnd.bound),
        "lo": int(lo),
        "hi": int(hi),
    }


def _required(cfg: Mapping[str, Any], n_devices: int, rec: Any) -> int:
    """Records a round must sum: the fraction ``min_clients / devices`` of its records (at least 1).

    ``min_clients`` counts devices; with one record per device (the default) this is the round's client
    range's share of ``min_clients``.
    """
    frac = int(cfg["min_clients"]) / max(1, n_devices)
    return max(1, math.ceil(frac * (int(rec.hi) - int(rec.lo)) - 1e-9))


def _n_devices(tx: State, run_id: str) -> int:
    return tx.cohort(run_id).devices


class Driver:
    """Advances the live runs it holds a lease on; one per server process.

    Several server processes may serve one database (scale-out). Each pass first *claims* the live runs
    whose lease is free, expired or its own (``SELECT ... FOR NO KEY UPDATE SKIP LOCKED`` on PostgreSQL,
    so two processes never wait on each other), setting ``lease_owner`` and ``lease_until``; a process that
    dies stops renewing, and after ``lease_seconds`` another one claims the run and rebuilds it from the
    journal. Every claim that is not the renewal of a lease this process still holds increments the run's
    ``lease_epoch`` (the *fencing token*), and the driver remembers the epoch it claimed. Every
    state-changing write of a run (check-in close, seeding, opening and closing rounds and secure stages,
    aborts, releases, the result) happens in a transaction that first re-reads the run under its row lock
    (a fresh read, never the session's cached copy) and goes on only while both the owner and the epoch
    are still its own (*fencing*): a process that lost its lease (paused past it, even if it got it back
    since) writes nothing and drops the run, rebuilding it from the journal if it claims it again.

    Parameters
    ----------
    store : Store
    crash_hook : callable, optional
        Test hook called with ``(event, run_id, round_index)`` at ``"journaled"`` (sum committed, not yet
        used), ``"opened"`` (round journaled) and ``"locked"`` (inside the transaction that closes a round,
        its run row locked and fenced); fault-injection tests kill or pause the process there.
    lease_seconds : float
        How long a claim lasts without renewal (each pass renews it), > 0 (default 30).
    owner : str, optional
        This process's name in ``lease_owner`` (default host, pid and a random suffix).
    on_change : callable, optional
        Called (from the thread running :meth:`tick`) after a pass that changed what devices see: a run
        started, seeded or finished, a round or a secure stage opened or closed. Its argument is the set
        of populations whose runs changed (only their devices' work lists can differ), or None if any
        may have. The server wakes those long-polling devices with it
        (:class:`fedstats.service.domain.changes.Changes`).
    recheck : float
        How often a waiting plain round is looked at without a report noted here, in seconds (default 1).
    gate : ArrivalGate, optional
        Told at each pass what the check-in, the seeding and each secure stage still wait for, so that the
        message handlers wake the driver only when one may close (shared with the server's
        :class:`~fedstats.service.domain.changes.Wakeup`; default a gate of its own).
    cohort_tree_above : int or None
        A secure run whose check-in closes with more devices than this seeds by its cohort tree
        (:mod:`.secure_tree`; default 64); None: never.
    """

    def __init__(
        self,
        store: Store,
        crash_hook: Any = None,
        *,
        lease_seconds: float = 30.0,
        owner: str | None = None,
        on_change: Callable[[set[str] | None], None] | None = None,
        recheck: float = 1.0,
        gate: ArrivalGate | None = None,
        cohort_tree_above: int | None = 64,
    ) -> None:
        if not lease_seconds > 0:
            raise ParameterError("lease_seconds", lease_seconds, "a number of seconds > 0")
        self.store = store
        self._live: dict[str, _Live] = {}
        self.gate = ArrivalGate() if gate is None else gate
        self._sessions = secure.SessionCache(closing=secure_devices.forget_stage, gate=self.gate)
        self._lock = threading.Lock()
        self._crash_hook = crash_hook
        self._on_change = on_change
        self._changed: set[str] = set()  # ids of the runs whose state this pass changed
        self._population: dict[str, str] = {}  # run id -> its task's population (immutable)
        self._epochs: dict[
            str, int
        ] = {}  # run id -> the lease epoch (fencing token) this process claimed
        self.lease_seconds = float(lease_seconds)
        # secure runs of more devices seed by their cohort tree (secure_tree); None: never
        self.cohort_tree_above = cohort_tree_above
        # a pass claims leases at most this often (unless poked: a run was created), and looks at a
        # waiting plain round at least this often even if this process saw no report for it (another
        # process may have taken them)
        self.recheck = float(recheck)
        self._claim_every = min(self.lease_seconds / 4, self.recheck)
        self._claimed_at = -float("inf")
        self._held: list[str] = []
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"[:64]
        self.metrics: dict[str, float] = {
            "rounds_closed": 0,
            "runs_done": 0,
            "runs_aborted": 0,
            "dropouts": 0,
            "leases_claimed": 0,
            "fenced_writes": 0,
            "driver_passes": 0,
        }
        self.excluded: dict[str, float] = {}  # reason -> reports excluded from a sum for it

    def poke(self) -> None:
        """Claim leases at the next pass (a run was created or cancelled)."""
        self._claimed_at = -float("inf")

    def _due(self, run_id: str, live: _Live) -> bool:
        """Whether a pass must look at the run in the database (False: it certainly waits still)."""
        if not live.waiting:
            return True
        if (
            DEADLINES.passed((run_id, "round", live.index), live.deadline)
            or time.monotonic() - live.checked >= self.recheck
        ):
            return True
        return self.gate.due(("round", run_id, live.index))  # enough reports noted since the look

    def _hook(self, event: str, run_id: str, index: int) -> None:
        if self._crash_hook is not None:
            self._crash_hook(event, run_id, index)

    def _claim(self) -> list[str]:
        """Claim free or expired leases, renew ours past half their time; return the runs we hold.

        At most every ``min(lease_seconds / 4, recheck)`` seconds (or after :meth:`poke`, or at the pass
        after a claim that left a live run free: its row was locked then); in between, the runs held at
        the last claim.
        """
        if time.monotonic() - self._claimed_at < self._claim_every:
            return [rid for rid in self._held if rid in self._epochs]
        self._claimed_at = time.monotonic()
        now = time.time()
        with self.store.transaction() as tx:
            for lease in tx.claim_runs(self.owner, now, now + self.lease_seconds / 2):
                self._take(tx, lease, now)
            held = tx.held_runs(self.owner)
            # a free run the claim skipped (its row locked by a check-in at that moment, SKIP LOCKED)
            # is claimed at the next pass, not a whole claim interval later
            if tx.unclaimed_runs(now):
                self._claimed_at = -float("inf")
        # a run under our name but not under the epoch we claimed (a restart under the same server_id,
        # or a claim lost and regained): claim it anew, with a new epoch, before writing anything
        stale = [h.run_id for h in held if self._epochs.get(h.run_id) != h.lease_epoch]
        if stale:
            with self.store.transaction() as tx:
                for lease in tx.claim_runs(self.owner, now, now, own=stale):
                    self._take(tx, lease, now)
        ids = [h.run_id for h in held]
        for rid in set(self._live) - set(ids):
            self._forget(rid)  # another process holds it now: our generator is stale
        for rid in set(self._epochs) - set(ids):
            self._epochs.pop(rid, None)
        self._held = ids
        return [rid for rid in ids if rid in self._epochs]

    def _take(self, tx: State, lease: RunLease, now: float) -> None:
        """Claim or renew a run's lease (row locked by the caller); a new claim gets a new epoch."""
        run_id, lease_owner, lease_until = lease.run_id, lease.lease_owner, lease.lease_until
        epoch = lease.lease_epoch
        renewal = (
            lease_owner == self.owner
            and lease_until is not None
            and lease_until >= now
            and self._epochs.get(run_id) == epoch
        )
        if not renewal:
            if lease_owner not in (None, self.owner):
                log.info(
                    json.dumps({"event": "lease_taken_over", "run_id": run_id, "from": lease_owner})
                )
            epoch += 1
            self._forget(run_id)  # whatever we knew of it may be stale: rebuild from the journal
            self._epochs[run_id] = epoch
            self.metrics["leases_claimed"] += 1
        tx.update_run(
            run_id, lease_owner=self.owner, lease_until=now + self.lease_seconds, lease_epoch=epoch
        )

    def _forget(self, run_id: str) -> None:
        self._live.pop(run_id, None)
        self.gate.forget(run_id)
        self._sessions.drop(run_id)
        # this process's caches of the run for the devices' requests (a later one reads the store)
        secure_devices.forget_run(run_id)

    def _holds(self, run: RunRow) -> bool:
        """Fencing: whether this process still holds ``run``'s lease under the epoch it claimed.

        ``run`` must have been read fresh under its row lock in the caller's write transaction
        (:func:`~fedstats.service.domain.runs.load_run` with ``lock=True``). If not, the run is dropped (its
        live state forgotten) and the caller must write nothing.
        """
        epoch = self._epochs.get(run.id)
        if run.lease_owner == self.owner and epoch is not None and run.lease_epoch == epoch:
            return True
        self._forget(run.id)
        self._epochs.pop(run.id, None)
        self.metrics["fenced_writes"] += 1
        log.warning(
            json.dumps(
                {
                    "event": "fenced",
                    "run_id": run.id,
                    "owner": run.lease_owner,
                    "epoch": run.lease_epoch,
                    "claimed_epoch": epoch,
                }
            )
        )
        return False

    def tick(self) -> bool:
        """Advance every run this process holds a lease on by as much as possible now.

        Returns
        -------
        bool
            Whether the pass changed what devices see (another pass may then advance further).
        """
        with self._lock:
            self._changed = set()
            self.metrics["driver_passes"] += 1
            self.gate.begin()  # the arrivals noted so far are in the counts this pass reads
            ids = self._claim()
            for rid in ids:
                live = self._live.get(rid)
                if live is not None and not self._due(rid, live):
                    continue  # a plain round still waiting: no statement at all
                try:
                    self._advance(rid)
                except StoreUnavailable as exc:
                    # a lock conflict or a lost connection: nothing was committed by the failed
                    # transaction; rebuild the run from the journal on the next pass
                    self._forget(rid)
                    self._sessions.advanced.clear()
                    self._sessions.uncommitted()
                    log.warning(
                        json.dumps({"event": "retry_run", "run_id": rid, "error": str(exc)[:200]})
                    )
                except Exception as exc:  # one broken run must not stop the others
                    self._sessions.uncommitted()
                    log.exception("run %s failed", rid)
                    self._abort(rid, f"internal error: {type(exc).__name__}: {exc}")
            if self._changed and self._on_change is not None:
                pops = {self._population.get(rid) for rid in self._changed}
                self._on_change(None if None in pops else {p for p in pops if p is not None})
            return bool(self._changed)

    # -- state transitions
    def _abort(self, run_id: str, reason: str) -> None:
        self._forget(run_id)
        with self.store.transaction() as s:
            run = load_run(s, run_id, lock=True)
            if run.status in ("done", "aborted") or not self._holds(run):
                return
            used = s.any_closed_round(run_id)
            reason = _with_refusals(s, run_id, reason)
            s.update_run(run_id, status="aborted", error=reason, finished_at=time.time())
            if not used:
                ledger.release(s, run_id, reason=reason)
            else:  # a journaled sum already shaped later rounds' public parameters: keep the charge
                ledger.spend(s, run_id)
            ledger.audit(s, "server", "abort", run_id, reason=reason)
        self._changed.add(run_id)
        self.metrics["runs_aborted"] += 1
        log.info(json.dumps({"event": "run_aborted", "run_id": run_id, "reason": reason}))

    def _finish(self, run_id: str, result: Any) -> None:
        self._forget(run_id)
        if isinstance(result, AnalysisResult):
            payload = attach_warnings(result).to_dict()  # "warnings": what makes it say little
        else:
            payload = {"value": to_jsonable(result)}
        with self.store.transaction() as s:
            run = load_run(s, run_id, lock=True)
            if run.status != "running" or not self._holds(run):
                return
            # what the result stands on: devices, records, and the per-device cap the task stated
            payload["n_devices"] = _n_devices(s, run_id)
            payload["n_records"] = run.n_clients
            payload["max_records_per_client"] = int(
                task_config(s, run.task_id).get("max_records_per_client", 1)
            )
            ledger.spend(s, run_id)
            s.update_run(
                run_id,
                result=json.dumps(to_jsonable(payload)),
                status="done",
                finished_at=time.time(),
            )
            ledger.audit(s, "server", "release", run_id, analysis=payload.get("analysis"))
        self._changed.add(run_id)
        self.metrics["runs_done"] += 1
        log.info(json.dumps({"event": "run_done", "run_id": run_id}))

    def _protocol(self, s: State, run: RunRow) -> Generator[Round, RoundSum, Any]:
        """The run's plan: the same generator a device replays (task, cohort size, public seed)."""
        cfg = task_config(s, run.task_id)
        assert run.n_clients is not None
        if not run.public_seed:
            raise SecurityError(f"run {run.id} has no public seed: its plan cannot be derived")
        gen: Generator[Round, RoundSum, Any] = plan_for(
            cfg, n_clients=run.n_clients, public_seed=bytes.fromhex(run.public_seed)
        )
        return gen

    def _check_encoder(self, cfg: Mapping[str, Any], rnd: Round) -> None:
        spec = lookup(cfg["analysis"], cfg["version"])
        if encoder_name(rnd.encode) not in spec.encoders:
            raise SecurityError(f"round {rnd.name!r} names an unregistered encoder")

    def _rebuild(self, s: State, run: RunRow) -> _Live | Any:
        """Replay the generator through the journaled rounds; return the live state or the result."""
        gen = self._protocol(s, run)
        cfg = task_config(s, run.task_id)
        assert run.n_clients is not None
        rnd = next(gen)
        index = 0
        for closed in s.closed_rounds(run.id):
            self._check_encoder(cfg, rnd)
            f = _round_fields(rnd, run.n_clients)
            if (
                closed.index != index
                or f["params_digest"] != closed.params_digest
                or f["encode"] != closed.encode
            ):
                raise SecurityError(f"replay of round {index} diverged from the journal")
            assert closed.total is not None and closed.n_clients is not None
            total = wire.loads(closed.total)
            try:
                rnd = gen.send(RoundSum(np.asarray(total), int(closed.n_clients)))
            except StopIteration as stop:
                return _Result(stop.value)
            index += 1
        self._check_encoder(cfg, rnd)
        return _Live(gen, index, rnd)

    def _advance(self, run_id: str) -> None:
        with self.store.transaction() as s:
            run = load_run(s, run_id, lock=True)
            if not self._holds(run):
                return
            if run_id not in self._population:
                if len(self._population) > 10000:  # a long-lived server: cheap to rebuild
                    self._population.clear()
                conf = task_config(s, run.task_id)
                self._population[run_id] = str(conf["privacy"]["population"])
            if run.status == "checkin":
                self._close_checkin(s, run)
                return
            if run.status == "seeding":
                cfg = task_config(s, run.task_id)
                deadline = run.checkin_deadline + float(cfg["deadlines"]["round"])
                # on this process's monotonic clock, as of the wall clock now (module clock)
                deadline = DEADLINES.as_wall((run.id, "seeding"), deadline)
                seeded = secure.close_seeding(s, run, deadline, cfg, gate=self.gate)
                if isinstance(seeded, str):
                    self._abort_in(s, run, seeded)
                if not isinstance(seeded, RunRow):
                    return
                run = seeded
                ledger.audit(s, "server", "seeded", run.id, seed=run.public_seed)
                self._changed.add(run.id)
            if run.status != "running":
                return
            live = self._live.get(run_id)
            if live is None:
                got = self._rebuild(s, run)
                if isinstance(got, _Result):
                    result = got.value
                    live = None
                else:
                    live = got
                    self._live[run_id] = live
        if live is None:
            self._finish(run_id, result)
            return
        while live is not None:  # one step per transaction: each reads the run afresh
            live = self._step(run_id, live)

    def _close_checkin(self, s: State, run: RunRow) -> None:
        cfg = task_config(s, run.task_id)
        cohort = s.cohort(run.id)  # cohort_size and min_clients count devices
        devices, used = cohort.devices, cohort.records
        # devices that refused the offer answered too: with them the cohort may be complete early
        refused = s.refusal_counts([run.id]).get(run.id, 0)
        left = int(cfg["cohort_size"]) - devices - refused
        if left > 0 and not DEADLINES.passed((run.id, "checkin"), run.checkin_deadline):
            self.gate.looked(("checkin", run.id), left)  # the handlers wake a pass at the last one
            return
        if devices < int(cfg["min_clients"]):
            reason = (
                f"only {devices} device(s) checked in; the task needs "
                f"min_clients={cfg['min_clients']} devices"
            )
            self._abort_in(s, run, reason)
            return
        # a secure run first fixes its public seed from the members' reveals (fedstats.wire.seeding)
        status = "seeding" if secure.is_secure(cfg) else "running"
        if status == "running" and not run.public_seed:  # a run created before plain seeds
            s.update_run(run.id, status=status, n_clients=used, public_seed=new_public_seed())
        elif (
            status == "seeding"
            and self.cohort_tree_above is not None
            and (devices > self.cohort_tree_above)
        ):  # seeded by its cohort tree's committee: the head stored with the status
            head = secure_tree.build_tree(s, run.id).head.to_bytes().hex()
            s.update_run(run.id, status=status, n_clients=used, cohort_head=head)
        else:
            s.update_run(run.id, status=status, n_clients=used)
        self._changed.add(run.id)
        ledger.audit(s, "server", "start", run.id, n_clients=used, n_devices=devices)

    def _abort_in(self, s: State, run: RunRow, reason: str) -> None:
        """Abort a run before any sum was used, inside the caller's transaction (releases the charge)."""
        reason = _with_refusals(s, run.id, reason)
        s.update_run(run.id, status="aborted", error=reason, finished_at=time.time())
        ledger.release(s, run.id, reason=reason)
        ledger.audit(s, "server", "abort", run.id, reason=reason)
        self._changed.add(run.id)
        self.metrics["runs_aborted"] += 1
        log.info(json.dumps({"event": "run_aborted", "run_id": run.id, "reason": reason}))

    def _step(self, run_id: str, live: _Live) -> _Live | None:
        """Open, or try to close, the live round; return the state to continue with, or None to stop."""
        with self.store.transaction() as s:
            run = load_run(s, run_id, lock=True)
            if not self._holds(run):
                return None
            cfg = task_config(s, run.task_id)
            assert run.n_clients is not None
            rec = s.round_row(run_id, live.index)
            if live.fields is None:
                live.fields = _round_fields(live.pending, run.n_clients)
            f = live.fields
            opened, abort = False, None
            if rec is None:
                now = time.time()
                rec = s.add_round(
                    run_id=run_id,
                    index=live.index,
                    status="open",
                    opened_at=now,
                    # measured on the monotonic clock in this process (clock.DEADLINES)
                    deadline=DEADLINES.set(
                        (run_id, "round", live.index), float(cfg["deadlines"]["round"])
                    ),
                    **f,
                )
                opened = True
                if secure.is_secure(cfg):
                    try:
                        secure.open_sessions(s, run, rec, cfg, self._sessions)
                    except FedstatsError as exc:
                        s.update_round(run_id, live.index, status="aborted")
                        abort = f"round {live.index} ({rec.name}): {exc}"
            elif rec.params_digest != f["params_digest"]:
                raise SecurityError(f"replay of round {live.index} diverged from the journal")
        # committed: this process's devices are served the stage-0 messages just journaled
        secure_devices.publish_downs(self._sessions.take_journaled())
        if abort is not None:
            self._abort(run_id, abort)
            return None
        if opened:
            self._changed.add(run_id)
            self._hook("opened", run_id, live.index)
            return None
        # closing a secure stage computes while the run's row is held (the unmasking grows with the
        # session and its dropouts: over 30 s at n = 5,000 on a loaded machine), so it may take as long
        # as a stage may last; a plain round computes nothing here and keeps the store's limit
        idle = float(cfg["deadlines"]["round"]) if secure.is_secure(cfg) else None
        with self.store.transaction(idle_seconds=idle) as s:
            run = load_run(s, run_id, lock=True)
            if not self._holds(run):
                return None
            self._hook("locked", run_id, live.index)
            rec = s.round_row(run_id, live.index)
            assert rec is not None and run.n_clients is not None
            if rec.status != "open":  # journaled by an earlier holder: rebuild from the journal
                self._live.pop(run_id, None)
                return None
            if secure.is_secure(cfg):
                quiet = cfg["secure_aggregation"].get("quiet_seconds")
                got = secure.advance_sessions(
                    s,
                    run,
                    rec,
                    self._sessions,
                    float(cfg["deadlines"]["round"]),
                    quiet_seconds=None if quiet is None else float(quiet),
                    floor=0.0 if quiet is None else secure.reporting_floor(cfg),
                )
                # the cohort's size (an aggregate over its n members) only once a sum is ready, not
                # at every pass while the stage waits for its messages
                if isinstance(got, tuple):
                    need = _required(cfg, _n_devices(s, run.id), rec)
                    if got[1] < need:
                        got = (
                            f"round {rec.index} ({rec.name}): {got[1]} record(s) in the secure "
                            f"sum, fewer than the {need} required"
                        )
            else:
                got = self._close_plain(s, run, rec, cfg)
                live.waiting = got is None
                live.deadline, live.checked = float(rec.deadline), time.monotonic()
            if isinstance(got, str):
                s.update_round(run_id, live.index, status="aborted")
                abort = got
            elif got is not None:
                total, n = got
                s.update_round(
                    run_id, live.index, total=wire.dumps(total), n_clients=n, status="closed"
                )
        # committed: this process's devices are served the stages' messages just journaled, and
        # fault-injection tests may now kill the process after a secure stage
        secure_devices.publish_downs(self._sessions.take_journaled())
        # sessions whose sums are journaled: what this process kept for their requests is released
        secure_devices.forget_sessions(self._sessions.take_finished())
        if self._sessions.advanced or got is not None:
            self._changed.add(run_id)
        for rid, idx, stage in self._sessions.advanced:
            self._hook(f"stage{stage}", rid, idx)
        self._sessions.advanced.clear()
        if got is None:
            return None
        if abort is not None:
            self._abort(run_id, abort)
            return None
        self.metrics["rounds_closed"] += 1
        self._hook("journaled", run_id, live.index)
        try:
            rnd = live.gen.send(RoundSum(total, n))
        except StopIteration as stop:
            self._finish(run_id, stop.value)
            return None
        with self.store.transaction(read_only=True) as s:
            run = load_run(s, run_id)
            self._check_encoder(task_config(s, run.task_id), rnd)
        live.index += 1
        live.pending = rnd
        live.fields = None
        live.waiting = False  # the next round: not looked at yet
        return live

    def _close_plain(
        self, s: State, run: RunRow, rec: RoundRow, cfg: Mapping[str, Any]
    ) -> tuple[np.ndarray, int] | str | None:
        """Close a plain round from its reports, in the caller's transaction.

        Returns ``(total, n_records)``, an abort reason, or None while it still waits.
        """
        assert run.n_clients is not None
        # counts in SQL first: a pass over a round that is still waiting reads no rows
        n_expected, n_got = s.round_counts(run.id, rec.index, rec.lo, rec.hi)
        if n_got < n_expected and not DEADLINES.passed((run.id, "round", rec.index), rec.deadline):
            # the report handlers wake a pass at the last one; the timed passes skip the store till then
            self.gate.looked(("round", run.id, rec.index), n_expected - n_got)
            return None
        reports = s.round_reports(run.id, rec.index)
        members = s.member_slots(run.id)
        kept: list[list[int]] = []
        n = 0
        for r, vector in self._screened(s, run, rec, reports, members):
            kept.append(vector)
            n += int(r.count)
        required = _required(cfg, len(members), rec)
        self.metrics["dropouts"] += max(0, int(n_expected) - len(reports))
        if n < required:
            return (
                f"round {rec.index} ({rec.name}): {n} record(s) reported before the deadline, "
                f"fewer than the {required} required"
            )
        return _sum_reports(kept, rec.dim), n

    def _screened(
        self,
        s: State,
        run: RunRow,
        rec: RoundRow,
        reports: list[ReportRow],
        members: Mapping[str, tuple[int, int]],
    ) -> list[tuple[ReportRow, list[int]]]:
        """The reports that may be summed, with their vectors; the others get ``reports.excluded``.

        Every report is checked again as at its upload (:func:`~.reports.report_problems`, the
        encoder's check vectorized over the round): a row written by an older server, or one whose
        device's membership changed since, is left out of the sum, logged and counted.
        """
        problems: list[str | None] = []
        vectors: list[Any] = []
        batch: list[tuple[Any, Any, int, int]] = []
        at: list[int] = []  # position in ``reports`` of each entry of ``batch``
        for i, report in enumerate(reports):
            problems.append(None)
            vectors.append(None)
            if report.excluded is not None:
                problems[i] = ""  # left out before: not counted again
                continue
            member = members.get(report.client_id)
            if member is None:
                problems[i] = "member: the device is not in the run's cohort"
                continue
            try:
                vectors[i] = json.loads(report.vector)
            except ValueError:
                problems[i] = "shape: the stored report is not JSON"
                continue
            slot_start, slot_count = member
            lo = max(slot_start, rec.lo)
            records = max(0, min(slot_start + slot_count, rec.hi) - lo)
            batch.append((vectors[i], report.count, records, lo))
            at.append(i)
        found = report_problems(
            batch, encode=rec.encode, params=rec.params, dim=rec.dim, bound=rec.bound
        )
        for i, problem in zip(at, found, strict=True):
            problems[i] = problem
        kept: list[tuple[ReportRow, list[int]]] = []
        for report, vector, problem in zip(reports, vectors, problems, strict=True):
            if problem is None:
                kept.append((report, list(vector)))
            elif problem:
                self._exclude(s, run, rec, report, problem)
        return kept

    def _exclude(
        self, s: State, run: RunRow, rec: RoundRow, report: ReportRow, problem: str
    ) -> None:
        """Set ``reports.excluded`` of a report left out of its round's sum; log and count it."""
        reason = problem.split(":", 1)[0]
        s.exclude_report(run.id, rec.index, report.client_id, problem)
        self.excluded[reason] = self.excluded.get(reason, 0) + 1
        log.warning(
            json.dumps(
                {
                    "event": "report_excluded",
                    "run_id": run.id,
                    "round": rec.index,
                    "client_id": report.client_id,
                    "reason": reason,
                    "detail": problem,
                }
            )
        )


def _with_refusals(s: State, run_id: str, reason: str) -> str:
    """An abort's reason led by the devices' refusals of the run, if any (:func:`.refusals.abort_summary`)."""
    summary = refusals.abort_summary(s, run_id)
    return reason if summary is None else f"{summary} ({reason})"


def excluded_metrics(driver: Driver) -> list[str]:
    """Prometheus lines of ``fedstats_reports_excluded_total{reason=...}`` (reports left out of sums)."""
    lines = ["# TYPE fedstats_reports_excluded_total counter"]
    for reason, v in sorted(driver.excluded.items()):
        lines.append(f'fedstats_reports_excluded_total{{reason="{reason}"}} {v:g}')
    return lines


@dataclass
class _Result:
    value: Any
