"""The operator API (``/v1/admin/...``): tasks, runs, budgets, devices, operators and the audit log.

Every endpoint takes an operator's bearer token. Writes that reserve or store something
(``POST /v1/admin/tasks``, ``POST /v1/admin/runs``) accept an ``Idempotency-Key`` header
(:mod:`fedstats.service.domain.idempotency`): a retry with the same key and body gets the first answer. List endpoints are
paginated with ``limit`` (1..500, default 50) and ``offset``, and answer
``{"items": [...], "total", "limit", "offset", "next_offset"}`` (``next_offset`` is null on the last
page). Documented for operators in ``docs/admin.md``.
"""

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from fedstats.errors import BudgetExceededError
from fedstats.service.domain import devices, idempotency, ledger, operators, runs, tasks
from fedstats.service.http import edge as http
from fedstats.service.http.context import Changed, Operator, StoreDep
from fedstats.service.http.schemas import (
    BudgetIn,
    BudgetOut,
    ErrorOut,
    Identifier,
    IdPath,
    RunIn,
    RunOut,
    SignedTaskIn,
    TaskOut,
)
from fedstats.service.store import State, Store

__all__ = [
    "OperatorIn",
    "OperatorToken",
    "Page",
    "PageOf",
    "Paging",
    "ReinstateIn",
    "rotate_token",
    "router",
]

RUN_STATUSES = ("checkin", "seeding", "running", "done", "aborted")

Limit = Annotated[int, Query(ge=1, le=500, description="Items per page (1..500).")]
Offset = Annotated[int, Query(ge=0, le=10**9, description="Items to skip.")]
IdemKey = Annotated[
    str | None,
    Header(
        alias=idempotency.HEADER,
        max_length=256,
        description="Optional: a retry with the same key and body returns the first answer "
        "(one write); the same key with another body is a 422.",
    ),
]


class Page(BaseModel):
    """One page of a list."""

    items: list[dict[str, Any]]
    total: int
    limit: int
    offset: int
    next_offset: int | None


class ReinstateIn(BaseModel):
    """Reinstate a revoked device; with ``certificate``, under a new key (re-keying)."""

    certificate: dict[str, Any] | None = Field(
        default=None,
        description="A new device certificate for this client id, issued by a trusted authority "
        "(the 'certificate' of the identity written by 'fedstats enroll client --force'): its key "
        "replaces the enrolled one.",
    )


class OperatorToken(BaseModel):
    """An operator's new bearer token (shown once; the old one stops working)."""

    name: str
    token: str


class OperatorIn(BaseModel):
    """A new operator."""

    name: Identifier = Field(description="The operator's name (unique): an identifier.")


class Paging:
    """A page of a list asked by an operator (the list endpoints' dependency: ``limit``, ``offset``)."""

    def __init__(
        self,
        store: StoreDep,
        actor: Operator,  # noqa: ARG002 - authentication dependency
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> None:
        self.store, self.limit, self.offset = store, limit, offset

    def read(self, query: Callable[[State, int, int], tuple[list[dict[str, Any]], int]]) -> Page:
        """The page that ``query(tx, limit, offset)`` reads (its items and the list's total)."""
        with self.store.transaction(read_only=True) as tx:
            items, total = query(tx, self.limit, self.offset)
        nxt = self.offset + len(items)
        return Page(
            items=items,
            total=total,
            limit=self.limit,
            offset=self.offset,
            next_offset=nxt if nxt < total else None,
        )


PageOf = Annotated[Paging, Depends()]


def _once(
    store: Store,
    actor: str,
    key: str | None,
    request: Request,
    body: BaseModel,
    write: Callable[[State], idempotency.Answer],
) -> idempotency.Answer:
    """``write`` once per ``Idempotency-Key`` of ``actor`` (:func:`~.idempotency.run_once` of the POST)."""
    path, sent = request.url.path, body.model_dump(mode="json")
    return idempotency.run_once(store, actor, idempotency.check_key(key), "POST", path, sent, write)


def _answer(ans: idempotency.Answer) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if ans.replayed else None
    return JSONResponse(ans.body, status_code=ans.status, headers=headers)


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut},
    403: {"model": ErrorOut},
    404: {"model": ErrorOut},
    409: {"model": ErrorOut},
    422: {"model": ErrorOut},
}

router = APIRouter(
    prefix="/v1/admin", tags=["admin"], responses=_ERRORS, route_class=http.StrictRoute
)
"""The operator endpoints (strict JSON bodies: no NaN/Infinity, bounded depth, as every route of the app).

The state, the operator and the change publisher come through the dependencies of
:mod:`fedstats.service.http.context`."""


# -- tasks
@router.post("/tasks", status_code=201, response_model=TaskOut)
def create_task(
    store: StoreDep, body: SignedTaskIn, request: Request, actor: Operator, key: IdemKey = None
) -> JSONResponse:
    """Store an analyst's signed task (or find it); its id is the SHA-256 of its canonical form.

    The envelope must verify against a trusted enrollment authority (403 otherwise); the server
    stores it unchanged and relays it to devices, which verify it again.
    """
    from fedstats import wire

    def write(s: State) -> idempotency.Answer:
        tid, new = tasks.create_task(s, body.model_dump(), actor)
        conf = tasks.task_config(s, tid)
        env = tasks.task_envelope(s, tid)
        out = TaskOut(task_id=tid, created=new, config=wire.encode(conf), envelope=env)
        return idempotency.Answer(201, out.model_dump(mode="json"))

    ans = _once(store, actor, key, request, body, write)
    return _answer(ans)


@router.get("/tasks")
def list_tasks(
    page: PageOf,
    analysis: Annotated[str | None, Query(max_length=64)] = None,
    population: Annotated[str | None, Query(max_length=128)] = None,
) -> Page:
    """Stored tasks, newest first (filters: ``analysis``, ``population``; paged in the query)."""
    return page.read(
        lambda tx, limit, offset: tasks.page_tasks(
            tx, limit, offset, analysis=analysis, population=population
        )
    )


@router.get("/tasks/{task_id}")
def get_task(store: StoreDep, task_id: IdPath, actor: Operator) -> TaskOut:  # noqa: ARG001 - authentication dependency
    """A stored task's configuration and signed envelope."""
    from fedstats import wire

    with store.transaction(read_only=True) as tx:
        conf = tasks.task_config(tx, task_id)
        env = tasks.task_envelope(tx, task_id)
    return TaskOut(task_id=task_id, created=False, config=wire.encode(conf), envelope=env)


# -- runs
@router.post("/runs", status_code=201, response_model=RunOut)
def create_run(
    store: StoreDep,
    changed: Changed,
    body: RunIn,
    request: Request,
    actor: Operator,
    key: IdemKey = None,
) -> JSONResponse:
    """Start a run; its privacy charge is reserved first (409 with spent/requested/remaining if refused).

    With an ``Idempotency-Key``, a retry (same key, same body) returns the first answer: one run,
    one reservation.
    """

    def write(s: State) -> idempotency.Answer:
        rid = runs.create_run(s, body.task_id, actor)
        return idempotency.Answer(201, RunOut(**runs.run_view(s, rid)).model_dump(mode="json"))

    try:
        ans = _once(store, actor, key, request, body, write)
    except BudgetExceededError as exc:
        with store.transaction() as tx:
            ledger.audit(tx, actor, "refuse", None, task_id=body.task_id, reason=str(exc))
        raise
    if not ans.replayed:
        with store.transaction(read_only=True) as tx:
            population = str(tasks.task_config(tx, body.task_id)["privacy"]["population"])
        changed({population})  # a new offer: wake the population's devices waiting for work
    return _answer(ans)


@router.get("/runs")
def list_runs(
    page: PageOf,
    status: Annotated[Literal[RUN_STATUSES] | None, Query()] = None,  # type: ignore[valid-type]
    task_id: Annotated[str | None, Query(max_length=64)] = None,
    analyst: Annotated[str | None, Query(max_length=128)] = None,
) -> Page:
    """Runs, newest first (filters: ``status``, ``task_id``, ``analyst``)."""
    return page.read(
        lambda tx, limit, offset: tx.page_runs(
            limit, offset, status=status, task_id=task_id, analyst=analyst
        )
    )


@router.get("/runs/{run_id}")
def get_run(store: StoreDep, run_id: IdPath, actor: Operator) -> RunOut:  # noqa: ARG001 - authentication dependency
    """A run's status, rounds and (once done and paid) result."""
    with store.transaction(read_only=True) as tx:
        return RunOut(**runs.run_view(tx, run_id))


@router.post("/runs/{run_id}/cancel")
def cancel_run(store: StoreDep, changed: Changed, run_id: IdPath, actor: Operator) -> RunOut:
    """Stop a live run: it becomes ``aborted`` with the error "cancelled by <operator>".

    Its reservation is released if no round's sum was used yet, else spent; devices see it
    finished. 409 if the run is already done or aborted.
    """
    with store.transaction() as tx:
        population = runs.cancel_run(tx, run_id, actor)
    with store.transaction(read_only=True) as tx:
        out = RunOut(**runs.run_view(tx, run_id))
    changed({population})
    return out


# -- budgets
@router.get("/budgets")
def list_budgets(
    page: PageOf, scope: Annotated[Literal["population", "analyst"] | None, Query()] = None
) -> Page:
    """Budgets with spent and remaining (epsilon, delta)."""

    def query(tx: State, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        rows, total = tx.page_budgets(limit, offset, scope=scope)
        return [ledger.budget_status(tx, b.scope, b.name) or {} for b in rows], total

    return page.read(query)


@router.put("/budgets/{scope}/{name}")
def put_budget(
    store: StoreDep, scope: IdPath, name: IdPath, body: BudgetIn, actor: Operator
) -> BudgetOut:
    """Set the budget of a population or an analyst (scope ``population`` or ``analyst``).

    A budget below what its reserved and spent charges already compose to is refused (409).
    """
    if scope not in ledger.SCOPES or not 1 <= len(name) <= 128:
        raise HTTPException(404, "scope must be 'population' or 'analyst', name 1-128 characters")
    with store.transaction() as tx:  # 409 if below what is already spent or reserved
        ledger.set_budget(tx, scope, name, epsilon=body.epsilon, delta=body.delta, actor=actor)
    with store.transaction(read_only=True) as tx:
        st = ledger.budget_status(tx, scope, name)
    assert st is not None
    return BudgetOut(**st)


@router.get("/budgets/{scope}/{name}")
def get_budget(store: StoreDep, scope: IdPath, name: IdPath, actor: Operator) -> BudgetOut:  # noqa: ARG001 - authentication dependency
    """A budget with its spent and remaining (epsilon, delta)."""
    with store.transaction(read_only=True) as tx:
        st = ledger.budget_status(tx, scope, name) if scope in ledger.SCOPES else None
    if st is None:
        raise HTTPException(404, f"no budget for {scope} {name!r}")
    return BudgetOut(**st)


# -- devices
@router.get("/devices")
def list_devices(
    page: PageOf,
    population: Annotated[str | None, Query(max_length=128)] = None,
    status: Annotated[Literal["active", "revoked"] | None, Query()] = None,
) -> Page:
    """Enrolled devices (filters: ``population``, ``status``)."""
    return page.read(
        lambda tx, limit, offset: tx.page_devices(
            limit, offset, population=population, status=status
        )
    )


def _forget(request: Request, client_id: str) -> None:
    # the client API caches enrollment rows (``app.state.forget_client`` drops one at once here;
    # other server processes re-read theirs within a few seconds)
    hook = getattr(request.app.state, "forget_client", None)
    if hook is not None:
        hook(client_id)


@router.post("/devices/{client_id}/revoke")
def revoke_device(
    store: StoreDep, client_id: IdPath, request: Request, actor: Operator
) -> dict[str, Any]:
    """Revoke a device: every later signed request of it is refused (403), so it joins no run.

    Idempotent (a revoked device stays revoked since its first revocation).
    """
    with store.transaction() as tx:
        out = devices.revoke_device(tx, client_id, actor)
    _forget(request, client_id)
    return out


@router.post("/devices/{client_id}/reinstate")
def reinstate_device(
    store: StoreDep,
    client_id: IdPath,
    request: Request,
    actor: Operator,
    body: ReinstateIn | None = None,
) -> dict[str, Any]:
    """Reinstate a revoked device; with a new ``certificate``, under its new key (re-keying).

    The certificate must be a device certificate for ``client_id`` from a trusted authority
    (403 otherwise); its key, population, authority and expiry replace the enrolled ones, so the old
    key is refused from then on. 409 if the device is not revoked.
    """
    certificate = None if body is None else body.certificate
    with store.transaction() as tx:
        out = devices.reinstate_device(tx, client_id, actor, certificate)
    _forget(request, client_id)
    return out


# -- operators
@router.get("/operators")
def list_operators(page: PageOf) -> Page:
    """Operators (names and creation times; tokens are stored hashed and never shown)."""
    return page.read(lambda tx, limit, offset: tx.page_operators(limit, offset))


@router.post("/operators", status_code=201)
def add_operator(store: StoreDep, body: OperatorIn, actor: Operator) -> OperatorToken:
    """Create an operator; its bearer token is in the answer, once (stored hashed)."""
    with store.transaction() as tx:
        token = operators.add(tx, body.name, actor=actor)
    return OperatorToken(name=body.name, token=token)


@router.delete("/operators/{name}")
def remove_operator(store: StoreDep, name: IdPath, actor: Operator) -> dict[str, Any]:
    """Remove operator ``name``: its token stops working at once (not oneself, not the last)."""
    with store.transaction() as tx:
        operators.remove(tx, name, actor=actor)
    return {"name": name, "removed": True}


@router.post("/operators/{name}/rotate")
def rotate_operator_token(store: StoreDep, name: IdPath, actor: Operator) -> OperatorToken:
    """Issue a new bearer token for operator ``name``; its old token stops working at once."""
    with store.transaction() as tx:
        token = operators.rotate(tx, name, actor=actor)
    return OperatorToken(name=name, token=token)


# -- audit
@router.get("/audit")
def get_audit(
    store: StoreDep,
    actor: Operator,  # noqa: ARG001 - authentication dependency
    run_id: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[dict[str, Any]]:
    """The audit log (newest last), optionally for one run."""
    with store.transaction(read_only=True) as tx:
        rows = tx.audit_log(run_id, limit)
    return [
        {
            "ts": a.ts,
            "actor": a.actor,
            "action": a.action,
            "run_id": a.run_id,
            "detail": json.loads(a.detail),
        }
        for a in rows
    ]


def rotate_token(s: State, name: str) -> str:
    """Give operator ``name`` a new bearer token (in the caller's transaction); return it.

    Raises
    ------
    NotFoundError
        If there is no such operator.
    """
    return operators.rotate(s, name)
