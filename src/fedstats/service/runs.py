"""Tasks and runs on the server: check-in, journaled rounds, replay after a restart, results.

A **task** is an immutable configuration (:func:`normalize_task`), identified by the SHA-256 of its
canonical JSON. A **run** executes it:

1. *check-in*: devices that accepted the task join with the number of records they hold and receive
   contiguous *slots* (the protocol's global client indices); the check-in closes when the cohort is full or
   its deadline passes; with fewer than ``min_clients`` records the run aborts and releases nothing;
2. *rounds*: the server drives the analysis's protocol generator (:mod:`.registry`); each yielded
   :class:`~fedstats.engine.rounds.Round` is journaled (name, encoder, canonical parameters, dim, bound,
   client range, deadline) and offered to the devices whose slots intersect its client range; each device
   sends the sum of its records' reports and their count; the round closes when every expected device
   reported or at the deadline (the others are dropouts); with fewer records than the round's share of
   ``min_clients`` the round aborts and the run releases nothing; otherwise the exact sum is committed to
   the journal *before* the generator receives it;
3. the generator's :class:`~fedstats.results.AnalysisResult` is stored in the transaction that turns the
   run's ledger reservation into a spend (:mod:`.ledger`): a result is never readable before it is paid.

A restarted server rebuilds each live run by replaying its generator from the journal: the same task
parameters, cohort size and run secret (the key of the run's server-side randomness: public seeds and any
server noise are drawn from it, so they are sampled once and redrawn identically), and the journaled sums.
Each replayed round's parameters must hash to the journaled digest, or the run aborts (a protocol that
does not replay deterministically must not release anything).
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import threading
import time
import uuid
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import DataError, FedstatsError, ParameterError, SecurityError
from fedstats.randomness import RandomSource
from fedstats.results import AnalysisResult, to_jsonable
from fedstats.service import ledger, wire
from fedstats.service.models import Report, RoundRecord, Run, RunMember, Task
from fedstats.service.registry import encoder_name, lookup, protocol_for
from fedstats.service.store import Store

__all__ = [
    "Driver",
    "checkin",
    "client_work",
    "create_run",
    "create_task",
    "normalize_task",
    "run_view",
    "submit_report",
]

log = logging.getLogger("fedstats.service")

_INT64 = 2**63 - 1


class ConflictError(FedstatsError):
    """A request that is valid but conflicts with the run's state (HTTP 409)."""


class NotFoundError(FedstatsError):
    """A named run, task or round does not exist (HTTP 404)."""


def normalize_task(config: Mapping[str, Any]) -> dict[str, Any]:
    """Check a task configuration and fill in defaults; the result is what gets hashed.

    Fields: ``analysis`` (str), ``version`` (int >= 1), ``params`` (object), ``privacy``
    (``{"epsilon", "delta", "population"}``; epsilon null for a non-private analysis), ``cohort_size``
    (records, >= 1), ``min_clients`` (records, in [1, cohort_size]), ``max_records_per_client`` (>= 1,
    default ``cohort_size``), ``deadlines`` (``{"checkin", "round"}``, seconds > 0), ``label`` (free text;
    two otherwise equal tasks with different labels are different tasks).

    Raises
    ------
    ParameterError
        If a field is missing or outside its range, or the analysis refuses its parameters.
    """
    try:
        analysis = str(config["analysis"])
        version = int(config.get("version", 1))
        params = dict(config.get("params") or {})
        privacy = dict(config.get("privacy") or {})
        cohort = int(config["cohort_size"])
        min_clients = int(config.get("min_clients", cohort))
        deadlines = dict(config.get("deadlines") or {})
    except (KeyError, TypeError, ValueError) as exc:
        raise ParameterError("task", str(exc), "analysis, cohort_size and valid fields") from None
    spec = lookup(analysis, version)
    if cohort < 2 or cohort > 10**9:
        raise ParameterError("cohort_size", cohort, "an integer in [2, 10**9]")
    if not 1 <= min_clients <= cohort:
        raise ParameterError("min_clients", min_clients, f"an integer in [1, cohort_size={cohort}]")
    max_rec = int(config.get("max_records_per_client", cohort))
    if not 1 <= max_rec <= cohort:
        raise ParameterError("max_records_per_client", max_rec, f"an integer in [1, {cohort}]")
    eps, delta = privacy.get("epsilon"), privacy.get("delta")
    population = str(privacy.get("population", "default"))
    if spec.privacy == "none":
        if eps is not None:
            raise ParameterError("privacy.epsilon", eps, f"null ({analysis} is not private)")
    else:
        if eps is None or not isinstance(eps, (int, float)) or not 0 < float(eps) < 1000:
            raise ParameterError("privacy.epsilon", eps, "a number in (0, 1000)")
        eps = float(eps)
        if spec.privacy == "distributed":
            if delta is None or not isinstance(delta, (int, float)) or not 0 < float(delta) < 1:
                raise ParameterError("privacy.delta", delta, "a number in (0, 1)")
            delta = float(delta)
        elif delta not in (None, 0, 0.0):
            raise ParameterError("privacy.delta", delta, "0 or null (pure local DP)")
        else:
            delta = 0.0
    d_checkin = float(deadlines.get("checkin", 60.0))
    d_round = float(deadlines.get("round", 60.0))
    for name, v in (("deadlines.checkin", d_checkin), ("deadlines.round", d_round)):
        if not (math.isfinite(v) and 0.05 <= v <= 7 * 86400):
            raise ParameterError(name, v, "seconds in [0.05, 604800]")
    out = {
        "analysis": analysis,
        "version": version,
        "params": wire.decode(wire.encode(params)),
        "privacy": {"epsilon": eps, "delta": delta, "population": population},
        "cohort_size": cohort,
        "min_clients": min_clients,
        "max_records_per_client": max_rec,
        "deadlines": {"checkin": d_checkin, "round": d_round},
        "label": str(config.get("label", "")),
    }
    # the analysis validates its own parameters: build the protocol and ask for its first round
    try:
        gen = protocol_for(
            analysis,
            version,
            out["params"],
            n_clients=cohort,
            epsilon=eps,
            delta=delta,
            randomness=RandomSource(),
        )
        first = next(gen)
        gen.close()
    except FedstatsError as exc:
        raise ParameterError(
            "params", str(exc), f"parameters {analysis} v{version} accepts"
        ) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ParameterError(
            "params", repr(exc), f"parameters {analysis} v{version} accepts"
        ) from None
    except StopIteration:
        raise ParameterError("params", "no rounds", "a protocol with at least one round") from None
    if encoder_name(first.encode) not in spec.encoders:
        raise SecurityError(f"{analysis} v{version} yields an unregistered encoder")
    return out


def create_task(session: Session, config: Mapping[str, Any], actor: str) -> tuple[str, bool]:
    """Store a task (idempotent); return its id and whether it was new."""
    norm = normalize_task(config)
    tid = wire.digest(norm)
    if session.get(Task, tid) is None:
        session.add(Task(id=tid, config=wire.dumps(norm), created_by=actor, created_at=time.time()))
        ledger.audit(session, actor, "create-task", None, task_id=tid)
        return tid, True
    return tid, False


def task_config(session: Session, task_id: str) -> dict[str, Any]:
    """The configuration of a stored task.

    Raises
    ------
    NotFoundError
        If there is no such task.
    """
    cached = _TASK_CACHE.get(task_id)
    if cached is not None:  # tasks are immutable: a parsed configuration stays valid
        return cached
    t = session.get(Task, task_id)
    if t is None:
        raise NotFoundError(f"no task {task_id!r}")
    cfg: dict[str, Any] = wire.loads(t.config)
    if len(_TASK_CACHE) > 10000:
        _TASK_CACHE.clear()
    _TASK_CACHE[task_id] = cfg
    return cfg


_TASK_CACHE: dict[str, dict[str, Any]] = {}


def create_run(session: Session, task_id: str, analyst: str) -> str:
    """Start a run of a task, reserving its privacy charge first (in the caller's transaction).

    Raises
    ------
    NotFoundError
        If the task does not exist.
    BudgetExceededError
        If the population's or the analyst's budget cannot cover the task.
    """
    cfg = task_config(session, task_id)
    run_id = str(uuid.uuid4())
    eps = cfg["privacy"]["epsilon"]
    if eps is not None:
        ledger.reserve(
            session,
            run_id=run_id,
            population=cfg["privacy"]["population"],
            analyst=analyst,
            charge=ledger.Charge(
                float(eps),
                float(cfg["privacy"]["delta"] or 0.0),
                None,
                f"{cfg['analysis']} {task_id[:12]}",
            ),
        )
    now = time.time()
    session.add(
        Run(
            id=run_id,
            task_id=task_id,
            analyst=analyst,
            status="checkin",
            created_at=now,
            checkin_deadline=now + float(cfg["deadlines"]["checkin"]),
            secret=secrets.token_hex(32),
        )
    )
    ledger.audit(session, analyst, "create-run", run_id, task_id=task_id)
    return run_id


def _run(session: Session, run_id: str, *, lock: bool = False) -> Run:
    stmt = select(Run).where(Run.id == run_id)
    if lock:
        # FOR NO KEY UPDATE: does not block the key-share locks of inserts referencing the run (reports,
        # members), so a report and the driver closing its round cannot deadlock
        stmt = stmt.with_for_update(key_share=True)
    run = session.execute(stmt).scalar_one_or_none()
    if run is None:
        raise NotFoundError(f"no run {run_id!r}")
    return run


def checkin(session: Session, run_id: str, client_id: str, records: int) -> dict[str, int]:
    """Add a device to a run's cohort; idempotent (a second check-in returns the same slots).

    Raises
    ------
    ConflictError
        If the check-in is closed or the cohort is full.
    ParameterError
        If ``records`` < 1.
    """
    if records < 1:
        raise ParameterError("records", records, "an integer >= 1")
    run = _run(session, run_id, lock=True)
    m = session.get(RunMember, (run_id, client_id))
    if m is not None:
        return {"slot_start": m.slot_start, "slot_count": m.slot_count}
    if run.status != "checkin" or time.time() > run.checkin_deadline:
        raise ConflictError(f"run {run_id} is not accepting check-ins")
    cfg = task_config(session, run.task_id)
    used = sum(
        session.execute(select(RunMember.slot_count).where(RunMember.run_id == run_id)).scalars()
    )
    free = int(cfg["cohort_size"]) - used
    if free <= 0:
        raise ConflictError(f"run {run_id} has a full cohort")
    count = min(int(records), free, int(cfg["max_records_per_client"]))
    session.add(
        RunMember(
            run_id=run_id,
            client_id=client_id,
            slot_start=used,
            slot_count=count,
            joined_at=time.time(),
        )
    )
    return {"slot_start": used, "slot_count": count}


def _overlap(member: RunMember, lo: int, hi: int) -> tuple[int, int]:
    a = max(member.slot_start, lo)
    b = min(member.slot_start + member.slot_count, hi)
    return a, max(a, b)


def client_work(session: Session, client_id: str, population: str) -> dict[str, Any]:
    """What a device may do now: runs open for check-in, and rounds waiting for its report."""
    offers = []
    rounds = []
    finished = []
    now = time.time()
    live = session.execute(select(Run).where(Run.status.in_(("checkin", "running")))).scalars()
    for run in live:
        cfg = task_config(session, run.task_id)
        if cfg["privacy"]["population"] != population:
            continue
        member = session.get(RunMember, (run.id, client_id))
        if run.status == "checkin":
            if member is None and now <= run.checkin_deadline:
                offers.append({"run_id": run.id, "task_id": run.task_id, "task": wire.encode(cfg)})
            continue
        if member is None:
            continue
        rec = session.execute(
            select(RoundRecord).where(RoundRecord.run_id == run.id, RoundRecord.status == "open")
        ).scalar_one_or_none()
        if rec is None:
            continue
        a, b = _overlap(member, rec.lo, rec.hi)
        if b <= a or session.get(Report, (run.id, rec.index, client_id)) is not None:
            continue
        rounds.append(
            {
                "run_id": run.id,
                "task_id": run.task_id,
                "analysis": cfg["analysis"],
                "version": cfg["version"],
                "privacy": cfg["privacy"],
                "round": rec.index,
                "name": rec.name,
                "encode": rec.encode,
                "params": json.loads(rec.params),
                "dim": rec.dim,
                "bound": rec.bound,
                "client_range": [rec.lo, rec.hi],
                "records": [a, b],
                "slot_start": member.slot_start,
                "n_clients": run.n_clients,
                "deadline": rec.deadline,
            }
        )
    done = session.execute(
        select(RunMember.run_id, Run.status)
        .join(Run, Run.id == RunMember.run_id)
        .where(RunMember.client_id == client_id, Run.status.in_(("done", "aborted")))
    ).all()
    finished = [{"run_id": r, "status": s} for r, s in done]
    return {"offers": offers, "rounds": rounds, "finished": finished}


def submit_report(
    session: Session, run_id: str, index: int, client_id: str, vector: Any, count: int
) -> bool:
    """Store a device's report; return False if the same report was already stored (idempotent retry).

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
    rec = session.execute(
        select(RoundRecord)
        .where(RoundRecord.run_id == run_id, RoundRecord.index == index)
        .with_for_update(
            read=True
        )  # reports share the round; closing it (FOR UPDATE) waits for them
    ).scalar_one_or_none()
    if rec is None:
        raise NotFoundError(f"no round {index} in run {run_id!r}")
    if not isinstance(vector, list) or len(vector) != rec.dim:
        raise DataError(f"report must be a list of {rec.dim} integers")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in vector):
        raise DataError("report entries must be integers")
    digest = wire.digest({"vector": vector, "count": count})
    old = session.get(Report, (run_id, index, client_id))
    if old is not None:
        if old.digest == digest:
            return False
        raise ConflictError(f"a different report for round {index} is already stored")
    if rec.status != "open":
        raise ConflictError(f"round {index} of run {run_id} is closed")
    member = session.get(RunMember, (run_id, client_id))
    if member is None:
        raise SecurityError("this client is not in the run's cohort")
    a, b = _overlap(member, rec.lo, rec.hi)
    if count != b - a or count < 1:
        raise DataError(f"report count must be {b - a} (records of this client in the round)")
    limit = rec.bound * count
    if any(abs(v) > limit for v in vector):
        raise DataError(f"report entries must lie within +-{limit} (bound x records)")
    session.add(
        Report(
            run_id=run_id,
            round_index=index,
            client_id=client_id,
            vector=json.dumps(vector),
            count=count,
            digest=digest,
            received_at=time.time(),
        )
    )
    return True


def run_view(session: Session, run_id: str) -> dict[str, Any]:
    """Status of a run, its rounds and, once done, its result."""
    run = _run(session, run_id)
    recs = session.execute(
        select(RoundRecord).where(RoundRecord.run_id == run_id).order_by(RoundRecord.index)
    ).scalars()
    rounds = []
    for r in recs:
        expected = session.execute(select(RunMember).where(RunMember.run_id == run_id)).scalars()
        n_exp = sum(_overlap(m, r.lo, r.hi)[1] - _overlap(m, r.lo, r.hi)[0] for m in expected)
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
    members = session.execute(select(RunMember).where(RunMember.run_id == run_id)).scalars().all()
    return {
        "run_id": run.id,
        "task_id": run.task_id,
        "analyst": run.analyst,
        "status": run.status,
        "n_clients": run.n_clients,
        "devices": len(members),
        "rounds": rounds,
        "result": json.loads(run.result) if run.result else None,
        "error": run.error,
    }


# -- the driver ---------------------------------------------------------------------------------------


@dataclass
class _Live:
    gen: Generator[Round, RoundSum, Any]
    index: int
    pending: Round


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


class Driver:
    """Advances every live run; one per server process.

    Parameters
    ----------
    store : Store
    crash_hook : callable, optional
        Test hook called with ``(event, run_id, round_index)`` at ``"journaled"`` (sum committed, not yet
        used) and ``"opened"`` (round journaled); fault-injection tests kill the process there.
    """

    def __init__(self, store: Store, crash_hook: Any = None) -> None:
        self.store = store
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()
        self._crash_hook = crash_hook
        self.metrics: dict[str, float] = {
            "rounds_closed": 0,
            "runs_done": 0,
            "runs_aborted": 0,
            "dropouts": 0,
        }

    def _hook(self, event: str, run_id: str, index: int) -> None:
        if self._crash_hook is not None:
            self._crash_hook(event, run_id, index)

    def tick(self) -> None:
        """Advance every run in check-in or running state by as much as possible now."""
        with self._lock:
            with self.store.session() as s:
                ids = list(
                    s.execute(
                        select(Run.id).where(Run.status.in_(("checkin", "running")))
                    ).scalars()
                )
            for rid in ids:
                try:
                    self._advance(rid)
                except OperationalError as exc:
                    # a lock conflict or a lost connection: nothing was committed by the failed
                    # transaction; rebuild the run from the journal on the next pass
                    self._live.pop(rid, None)
                    log.warning(
                        json.dumps({"event": "retry_run", "run_id": rid, "error": str(exc)[:200]})
                    )
                except Exception as exc:  # one broken run must not stop the others
                    log.exception("run %s failed", rid)
                    self._abort(rid, f"internal error: {type(exc).__name__}: {exc}")

    # -- state transitions
    def _abort(self, run_id: str, reason: str) -> None:
        self._live.pop(run_id, None)
        with self.store.session() as s, s.begin():
            run = _run(s, run_id, lock=True)
            if run.status in ("done", "aborted"):
                return
            used = s.execute(
                select(RoundRecord.index).where(
                    RoundRecord.run_id == run_id, RoundRecord.status == "closed"
                )
            ).first()
            run.status = "aborted"
            run.error = reason
            run.finished_at = time.time()
            if used is None:
                ledger.release(s, run_id, reason=reason)
            else:  # a journaled sum already shaped later rounds' public parameters: keep the charge
                ledger.spend(s, run_id)
            ledger.audit(s, "server", "abort", run_id, reason=reason)
        self.metrics["runs_aborted"] += 1
        log.info(json.dumps({"event": "run_aborted", "run_id": run_id, "reason": reason}))

    def _finish(self, run_id: str, result: Any) -> None:
        self._live.pop(run_id, None)
        if isinstance(result, AnalysisResult):
            payload = result.to_dict()
        else:
            payload = {"value": to_jsonable(result)}
        with self.store.session() as s, s.begin():
            run = _run(s, run_id, lock=True)
            if run.status != "running":
                return
            ledger.spend(s, run_id)
            run.result = json.dumps(to_jsonable(payload))
            run.status = "done"
            run.finished_at = time.time()
            ledger.audit(s, "server", "release", run_id, analysis=payload.get("analysis"))
        self.metrics["runs_done"] += 1
        log.info(json.dumps({"event": "run_done", "run_id": run_id}))

    def _protocol(self, s: Session, run: Run) -> Generator[Round, RoundSum, Any]:
        cfg = task_config(s, run.task_id)
        assert run.n_clients is not None
        randomness = RandomSource(None, _master=bytes.fromhex(run.secret))
        gen: Generator[Round, RoundSum, Any] = protocol_for(
            cfg["analysis"],
            cfg["version"],
            cfg["params"],
            n_clients=run.n_clients,
            epsilon=cfg["privacy"]["epsilon"],
            delta=cfg["privacy"]["delta"],
            randomness=randomness,
        )
        return gen

    def _check_encoder(self, cfg: Mapping[str, Any], rnd: Round) -> None:
        spec = lookup(cfg["analysis"], cfg["version"])
        if encoder_name(rnd.encode) not in spec.encoders:
            raise SecurityError(f"round {rnd.name!r} names an unregistered encoder")

    def _rebuild(self, s: Session, run: Run) -> _Live | Any:
        """Replay the generator through the journaled rounds; return the live state or the result."""
        gen = self._protocol(s, run)
        cfg = task_config(s, run.task_id)
        assert run.n_clients is not None
        rnd = next(gen)
        index = 0
        closed = s.execute(
            select(RoundRecord)
            .where(RoundRecord.run_id == run.id, RoundRecord.status == "closed")
            .order_by(RoundRecord.index)
        ).scalars()
        for rec in closed:
            self._check_encoder(cfg, rnd)
            f = _round_fields(rnd, run.n_clients)
            if (
                rec.index != index
                or f["params_digest"] != rec.params_digest
                or f["encode"] != rec.encode
            ):
                raise SecurityError(f"replay of round {index} diverged from the journal")
            assert rec.total is not None and rec.n_clients is not None
            total = wire.loads(rec.total)
            try:
                rnd = gen.send(RoundSum(np.asarray(total), int(rec.n_clients)))
            except StopIteration as stop:
                return _Result(stop.value)
            index += 1
        self._check_encoder(cfg, rnd)
        return _Live(gen, index, rnd)

    def _advance(self, run_id: str) -> None:
        with self.store.session() as s:
            with s.begin():
                run = _run(s, run_id, lock=True)
                if run.status == "checkin":
                    self._close_checkin(s, run)
                    return
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
            while live is not None:
                live = self._step(s, run_id, live)

    def _close_checkin(self, s: Session, run: Run) -> None:
        cfg = task_config(s, run.task_id)
        used = sum(
            s.execute(select(RunMember.slot_count).where(RunMember.run_id == run.id)).scalars()
        )
        if used < int(cfg["cohort_size"]) and time.time() <= run.checkin_deadline:
            return
        if used < int(cfg["min_clients"]):
            reason = (
                f"only {used} record(s) checked in; the task needs min_clients={cfg['min_clients']}"
            )
            run.status = "aborted"
            run.error = reason
            run.finished_at = time.time()
            ledger.release(s, run.id, reason=reason)
            ledger.audit(s, "server", "abort", run.id, reason=reason)
            self.metrics["runs_aborted"] += 1
            return
        run.status = "running"
        run.n_clients = used
        ledger.audit(s, "server", "start", run.id, n_clients=used)

    def _step(self, s: Session, run_id: str, live: _Live) -> _Live | None:
        """Open, or try to close, the live round; return the state to continue with, or None to stop."""
        with s.begin():
            run = _run(s, run_id, lock=True)
            cfg = task_config(s, run.task_id)
            assert run.n_clients is not None
            rec = s.get(RoundRecord, (run_id, live.index), with_for_update=True)
            f = _round_fields(live.pending, run.n_clients)
            if rec is None:
                now = time.time()
                s.add(
                    RoundRecord(
                        run_id=run_id,
                        index=live.index,
                        status="open",
                        opened_at=now,
                        deadline=now + float(cfg["deadlines"]["round"]),
                        **f,
                    )
                )
                opened = True
            else:
                opened = False
                if rec.params_digest != f["params_digest"]:
                    raise SecurityError(f"replay of round {live.index} diverged from the journal")
        if opened:
            self._hook("opened", run_id, live.index)
            return None
        with s.begin():
            rec = s.get(RoundRecord, (run_id, live.index), with_for_update=True)
            assert rec is not None
            # counts in SQL first: a pass over a round that is still waiting reads no rows
            n_expected = s.execute(
                select(func.count())
                .select_from(RunMember)
                .where(
                    RunMember.run_id == run_id,
                    RunMember.slot_start < rec.hi,
                    RunMember.slot_start + RunMember.slot_count > rec.lo,
                )
            ).scalar_one()
            n_got = s.execute(
                select(func.count())
                .select_from(Report)
                .where(Report.run_id == run_id, Report.round_index == live.index)
            ).scalar_one()
            if n_got < n_expected and time.time() < rec.deadline:
                return None
            reports = (
                s.execute(
                    select(Report).where(Report.run_id == run_id, Report.round_index == live.index)
                )
                .scalars()
                .all()
            )
            n = sum(r.count for r in reports)
            n_range = rec.hi - rec.lo
            required = math.ceil(int(cfg["min_clients"]) * n_range / run.n_clients - 1e-9)
            self.metrics["dropouts"] += max(0, int(n_expected) - len(reports))
            if n < max(1, required):
                rec.status = "aborted"
                reason = (
                    f"round {live.index} ({rec.name}): {n} record(s) reported before the deadline, "
                    f"fewer than the {required} required"
                )
                abort = reason
            else:
                total = _sum_reports([json.loads(r.vector) for r in reports], rec.dim)
                rec.total = wire.dumps(total)
                rec.n_clients = n
                rec.status = "closed"
                abort = None
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
        with s.begin():
            run = _run(s, run_id)
            self._check_encoder(task_config(s, run.task_id), rnd)
        live.index += 1
        live.pending = rnd
        return live


@dataclass
class _Result:
    value: Any
