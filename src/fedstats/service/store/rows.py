"""The frozen dataclasses the store's core queries take and return (never ORM rows or bare tuples).

Each is one row, or one aggregate, of the tables in :mod:`.tables` as the domain layer needs it; the
core query group (:class:`~fedstats.service.store.core.CoreQueries`) is typed with them, in memory and in
SQL alike.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AuditEntry",
    "BudgetRow",
    "ChargeRow",
    "ClientRow",
    "ClosedRound",
    "Cohort",
    "FinishedRun",
    "IdempotentAnswer",
    "LiveRun",
    "PopulationCount",
    "PutReport",
    "PutUp",
    "RefusalRow",
    "ReportRow",
    "RoundRow",
    "RoundSummary",
    "RoundTotal",
    "RunLease",
    "RunRow",
    "RunSummary",
    "TaskSummary",
]


@dataclass(frozen=True)
class ClientRow:
    """An enrolled device (``clients`` row).

    Attributes
    ----------
    id, public_key, population, authority : str
    not_after : float
        Expiry of its certificate (Unix seconds).
    revoked : bool
        Whether an operator revoked it.
    certificate : str or None
        The enrollment certificate as registered (JSON).
    """

    id: str
    public_key: str
    population: str
    authority: str
    not_after: float
    revoked: bool
    certificate: str | None


@dataclass(frozen=True)
class BudgetRow:
    """A privacy budget (``budgets`` row)."""

    scope: str
    name: str
    epsilon: float
    delta: float


@dataclass(frozen=True)
class ChargeRow:
    """A run's privacy charge (``ledger`` row)."""

    run_id: str
    population: str
    analyst: str
    epsilon: float
    delta: float
    rho: float | None
    status: str
    label: str
    mechanisms: str | None = None  # JSON list of MechanismSpec dicts, or None (not described)


@dataclass(frozen=True)
class IdempotentAnswer:
    """The stored request and answer of an idempotency key."""

    method: str
    path: str
    request_hash: str
    status_code: int
    response: str


@dataclass(frozen=True)
class ReportRow:
    """A stored report (``reports`` row)."""

    client_id: str
    vector: str
    count: int
    excluded: str | None


@dataclass(frozen=True)
class RoundRow:
    """A journaled round (``rounds`` row, without its total)."""

    run_id: str
    index: int
    name: str
    encode: str
    params: str
    params_digest: str
    dim: int
    bound: int
    lo: int
    hi: int
    status: str
    deadline: float


@dataclass(frozen=True)
class LiveRun:
    """A live run as a device's work list sees it: the run, the device's membership, the open round."""

    run_id: str
    task_id: str
    status: str
    checkin_deadline: float
    n_clients: int | None
    public_seed: str | None
    slot_start: int | None
    slot_count: int | None
    reveal: str | None
    round: RoundRow | None
    reported: bool = False
    """Whether the device has a report in the open round (``round``)."""


@dataclass(frozen=True)
class RunRow:
    """A run (``runs`` row).

    Attributes
    ----------
    id, task_id, analyst : str
    status : str
        ``checkin``, ``seeding``, ``running``, ``done`` or ``aborted``.
    created_at, checkin_deadline : float
        Unix seconds.
    n_clients : int or None
        Records in the cohort, fixed when check-in closes.
    secret : str
    result, error : str or None
        The released result (JSON) once done; the reason once aborted.
    finished_at : float or None
    lease_owner : str or None
        The server process advancing the run, until ``lease_until``.
    lease_until : float or None
    public_seed : str or None
        The run's public seed (hex).
    lease_epoch : int
        The fencing token: every claim of the lease increments it.
    cohort_head : str or None
        A tree-seeded secure run's cohort tree head (hex of
        :meth:`fedstats.wire.cohort_tree.TreeHead.to_bytes`, 90 digits); None for any other run.
    """

    id: str
    task_id: str
    analyst: str
    status: str
    created_at: float
    checkin_deadline: float
    n_clients: int | None
    secret: str
    result: str | None
    error: str | None
    finished_at: float | None
    lease_owner: str | None
    lease_until: float | None
    public_seed: str | None
    lease_epoch: int
    cohort_head: str | None = None


@dataclass(frozen=True)
class RunLease:
    """A live run's lease (``runs.lease_*``): who advances it, until when, under which fencing token."""

    run_id: str
    lease_owner: str | None
    lease_until: float | None
    lease_epoch: int


@dataclass(frozen=True)
class ClosedRound:
    """A closed round as journaled: what a replay of the plan checks and the sum it feeds back."""

    index: int
    params_digest: str
    encode: str
    total: str | None
    n_clients: int | None


@dataclass(frozen=True)
class RoundTotal:
    """A closed round's journaled sum (canonical JSON) and the records it sums."""

    index: int
    total: str
    n_clients: int


@dataclass(frozen=True)
class RoundSummary:
    """A round as the run's view lists it (``n_clients``: records summed once closed)."""

    index: int
    name: str
    status: str
    lo: int
    hi: int
    n_clients: int | None


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """A done or aborted run a device was a member of."""

    run_id: str
    status: str


@dataclass(frozen=True)
class Cohort:
    """A run's cohort so far: its devices and the records (slots) they hold."""

    devices: int
    records: int


@dataclass(frozen=True)
class RunSummary:
    """A run as the dashboard lists it."""

    run_id: str
    task_id: str
    created_at: float
    finished_at: float | None


@dataclass(frozen=True)
class PopulationCount:
    """A population's enrolled devices, how many are revoked, and the newest enrolment (Unix s)."""

    population: str
    enrolled: int
    revoked: int
    last_enrolled: float | None


@dataclass(frozen=True)
class TaskSummary:
    """A stored task's id, who created it and when."""

    task_id: str
    created_by: str
    created_at: float


@dataclass(frozen=True)
class AuditEntry:
    """An audit record (``audit`` row)."""

    ts: float
    actor: str
    action: str
    run_id: str | None
    detail: str


@dataclass(frozen=True)
class PutReport:
    """One upload for :meth:`CoreQueries.put_report` and :meth:`CoreQueries.put_reports`."""

    nonce: tuple[str, float]
    expect: tuple[str, int, int]
    run_id: str
    index: int
    client_id: str
    vector: str
    count: int
    digest: str


@dataclass(frozen=True)
class RefusalRow:
    """A device's refusal of a run (``refusals`` row).

    Attributes
    ----------
    run_id, client_id : str
    reason : str
        A reason code (:data:`fedstats.service.domain.refusals.REASONS`).
    message : str
        What the device said (at most 300 characters, no control character).
    refused_at : float
        Unix seconds (the server's clock).
    """

    run_id: str
    client_id: str
    reason: str
    message: str
    refused_at: float


@dataclass(frozen=True)
class PutUp:
    """One device's stage message with its request's nonce, for :meth:`SecureQueries.put_up_messages`.

    Attributes
    ----------
    client_id, nonce : str
        The signed request's single-use nonce (``nonces`` row).
    ts : float
        The request's timestamp (Unix seconds).
    run_id : str
    index, number, stage : int
        The round, the session and the stage the message answers.
    client_index : int
        The sender's roster index.
    payload : bytes
    digest : str
        SHA-256 hex of ``payload``.
    """

    client_id: str
    nonce: str
    ts: float
    run_id: str
    index: int
    number: int
    stage: int
    client_index: int
    payload: bytes
    digest: str
