"""The operator API (``/v1/admin/...``): tasks, runs, budgets, devices, operators and the audit log.

Every endpoint takes an operator's bearer token. Writes that reserve or store something
(``POST /v1/admin/tasks``, ``POST /v1/admin/runs``) accept an ``Idempotency-Key`` header
(:mod:`fedstats.service.domain.idempotency`): a retry with the same key and body gets the first answer. List endpoints are
paginated with ``limit`` (1..500, default 50) and ``offset``, and answer
``{"items": [...], "total", "limit", "offset", "next_offset"}`` (``next_offset`` is null on the last
page). Documented for operators in ``docs/admin.md``.
"""

import json
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from fedstats.errors import BudgetExceededError, SecurityError
from fedstats.service.domain import idempotency, ledger, operators, runs, tasks
from fedstats.service.http import edge as http
from fedstats.service.http.schemas import (
    NAME_PATTERN,
    BudgetIn,
    BudgetOut,
    ErrorOut,
    IdPath,
    RunIn,
    RunOut,
    SignedTaskIn,
    TaskOut,
)
from fedstats.service.store import State, Store
from fedstats.wire import auth

__all__ = ["OperatorIn", "OperatorToken", "Page", "ReinstateIn", "admin_router", "rotate_token"]

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

    name: str = Field(
        min_length=1,
        max_length=128,
        pattern=NAME_PATTERN,
        description="The operator's name (unique; no control character).",
    )


def _pageout(items: list[dict[str, Any]], total: int, limit: int, offset: int) -> Page:
    nxt = offset + len(items)
    return Page(
        items=items,
        total=total,
        limit=limit,
        offset=offset,
        next_offset=nxt if nxt < total else None,
    )


def _answer(ans: idempotency.Answer) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if ans.replayed else None
    return JSONResponse(ans.body, status_code=ans.status, headers=headers)


def admin_router(
    store: Store,
    operator: Callable[..., str],
    changed: Callable[[set[str] | None], None],
) -> APIRouter:
    """The operator endpoints over ``store``.

    Parameters
    ----------
    store : Store
    operator : callable
        The FastAPI dependency that authenticates an operator's bearer token and returns its name.
    changed : callable
        Publishes a state change of the given populations' runs (wakes their long-polling devices).
    """
    Op = Annotated[str, Depends(operator)]
    errors: dict[int | str, dict[str, Any]] = {
        401: {"model": ErrorOut},
        403: {"model": ErrorOut},
        404: {"model": ErrorOut},
        409: {"model": ErrorOut},
        422: {"model": ErrorOut},
    }
    # strict JSON bodies (no NaN/Infinity, bounded depth), as every route of the app
    r = APIRouter(
        prefix="/v1/admin", tags=["admin"], responses=errors, route_class=http.StrictRoute
    )

    # -- tasks
    @r.post("/tasks", status_code=201, response_model=TaskOut)
    def create_task(
        body: SignedTaskIn, request: Request, actor: Op, key: IdemKey = None
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

        ans = idempotency.run_once(
            store,
            actor,
            idempotency.check_key(key),
            "POST",
            request.url.path,
            body.model_dump(mode="json"),
            write,
        )
        return _answer(ans)

    @r.get("/tasks")
    def list_tasks(
        actor: Op,  # noqa: ARG001 - authentication dependency
        limit: Limit = 50,
        offset: Offset = 0,
        analysis: Annotated[str | None, Query(max_length=64)] = None,
        population: Annotated[str | None, Query(max_length=128)] = None,
    ) -> Page:
        """Stored tasks, newest first (filters: ``analysis``, ``population``)."""
        with store.transaction(read_only=True) as tx:
            items = []
            for t in tx.tasks_newest():
                tid, created_by, created_at = t.task_id, t.created_by, t.created_at
                conf = tasks.task_config(tx, tid)
                if analysis is not None and conf.get("analysis") != analysis:
                    continue
                if population is not None and conf["privacy"]["population"] != population:
                    continue
                items.append(
                    {
                        "task_id": tid,
                        "analysis": conf.get("analysis"),
                        "population": conf["privacy"]["population"],
                        "epsilon": conf["privacy"].get("epsilon"),
                        "delta": conf["privacy"].get("delta"),
                        "cohort_size": conf.get("cohort_size"),
                        "label": conf.get("label", ""),
                        "secure": conf.get("secure_aggregation") is not None,
                        "created_by": created_by,
                        "created_at": created_at,
                    }
                )
        return _pageout(items[offset : offset + limit], len(items), limit, offset)

    @r.get("/tasks/{task_id}")
    def get_task(task_id: IdPath, actor: Op) -> TaskOut:  # noqa: ARG001 - authentication dependency
        """A stored task's configuration and signed envelope."""
        from fedstats import wire

        with store.transaction(read_only=True) as tx:
            conf = tasks.task_config(tx, task_id)
            env = tasks.task_envelope(tx, task_id)
        return TaskOut(task_id=task_id, created=False, config=wire.encode(conf), envelope=env)

    # -- runs
    @r.post("/runs", status_code=201, response_model=RunOut)
    def create_run(body: RunIn, request: Request, actor: Op, key: IdemKey = None) -> JSONResponse:
        """Start a run; its privacy charge is reserved first (409 with spent/requested/remaining if refused).

        With an ``Idempotency-Key``, a retry (same key, same body) returns the first answer: one run,
        one reservation.
        """

        def write(s: State) -> idempotency.Answer:
            rid = runs.create_run(s, body.task_id, actor)
            return idempotency.Answer(201, RunOut(**runs.run_view(s, rid)).model_dump(mode="json"))

        try:
            ans = idempotency.run_once(
                store,
                actor,
                idempotency.check_key(key),
                "POST",
                request.url.path,
                body.model_dump(mode="json"),
                write,
            )
        except BudgetExceededError as exc:
            with store.transaction() as tx:
                ledger.audit(tx, actor, "refuse", None, task_id=body.task_id, reason=str(exc))
            raise
        if not ans.replayed:
            with store.transaction(read_only=True) as tx:
                population = str(tasks.task_config(tx, body.task_id)["privacy"]["population"])
            changed({population})  # a new offer: wake the population's devices waiting for work
        return _answer(ans)

    @r.get("/runs")
    def list_runs(
        actor: Op,  # noqa: ARG001 - authentication dependency
        limit: Limit = 50,
        offset: Offset = 0,
        status: Annotated[Literal[RUN_STATUSES] | None, Query()] = None,  # type: ignore[valid-type]
        task_id: Annotated[str | None, Query(max_length=64)] = None,
        analyst: Annotated[str | None, Query(max_length=128)] = None,
    ) -> Page:
        """Runs, newest first (filters: ``status``, ``task_id``, ``analyst``)."""
        with store.transaction(read_only=True) as tx:
            items, total = tx.page_runs(
                limit, offset, status=status, task_id=task_id, analyst=analyst
            )
        return _pageout(items, total, limit, offset)

    @r.get("/runs/{run_id}")
    def get_run(run_id: IdPath, actor: Op) -> RunOut:  # noqa: ARG001 - authentication dependency
        """A run's status, rounds and (once done and paid) result."""
        with store.transaction(read_only=True) as tx:
            return RunOut(**runs.run_view(tx, run_id))

    @r.post("/runs/{run_id}/cancel")
    def cancel_run(run_id: IdPath, actor: Op) -> RunOut:
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
    @r.get("/budgets")
    def list_budgets(
        actor: Op,  # noqa: ARG001 - authentication dependency
        limit: Limit = 50,
        offset: Offset = 0,
        scope: Annotated[Literal["population", "analyst"] | None, Query()] = None,
    ) -> Page:
        """Budgets with spent and remaining (epsilon, delta)."""
        with store.transaction(read_only=True) as tx:
            rows, total = tx.page_budgets(limit, offset, scope=scope)
            items = [ledger.budget_status(tx, b.scope, b.name) or {} for b in rows]
        return _pageout(items, total, limit, offset)

    @r.put("/budgets/{scope}/{name}")
    def put_budget(scope: IdPath, name: IdPath, body: BudgetIn, actor: Op) -> BudgetOut:
        """Set the budget of a population or an analyst (scope ``population`` or ``analyst``).

        A budget below what its reserved and spent charges already compose to is refused (409).
        """
        if scope not in ledger.SCOPES or not 1 <= len(name) <= 128:
            raise HTTPException(
                404, "scope must be 'population' or 'analyst', name 1-128 characters"
            )
        with store.transaction() as tx:  # 409 if below what is already spent or reserved
            ledger.set_budget(tx, scope, name, epsilon=body.epsilon, delta=body.delta, actor=actor)
        with store.transaction(read_only=True) as tx:
            st = ledger.budget_status(tx, scope, name)
        assert st is not None
        return BudgetOut(**st)

    @r.get("/budgets/{scope}/{name}")
    def get_budget(scope: IdPath, name: IdPath, actor: Op) -> BudgetOut:  # noqa: ARG001 - authentication dependency
        """A budget with its spent and remaining (epsilon, delta)."""
        with store.transaction(read_only=True) as tx:
            st = ledger.budget_status(tx, scope, name) if scope in ledger.SCOPES else None
        if st is None:
            raise HTTPException(404, f"no budget for {scope} {name!r}")
        return BudgetOut(**st)

    # -- devices
    @r.get("/devices")
    def list_devices(
        actor: Op,  # noqa: ARG001 - authentication dependency
        limit: Limit = 50,
        offset: Offset = 0,
        population: Annotated[str | None, Query(max_length=128)] = None,
        status: Annotated[Literal["active", "revoked"] | None, Query()] = None,
    ) -> Page:
        """Enrolled devices (filters: ``population``, ``status``)."""
        with store.transaction(read_only=True) as tx:
            items, total = tx.page_devices(limit, offset, population=population, status=status)
        return _pageout(items, total, limit, offset)

    def _load_device(tx: State, client_id: str) -> dict[str, Any]:
        c = tx.device_for_update(client_id)
        if c is None:
            raise tasks.NotFoundError(f"no device {client_id!r}")
        return c

    def _forget(request: Request, client_id: str) -> None:
        # the client API caches enrollment rows (``app.state.forget_client`` drops one at once here;
        # other server processes re-read theirs within a few seconds)
        hook = getattr(request.app.state, "forget_client", None)
        if hook is not None:
            hook(client_id)

    @r.post("/devices/{client_id}/revoke")
    def revoke_device(client_id: IdPath, request: Request, actor: Op) -> dict[str, Any]:
        """Revoke a device: every later signed request of it is refused (403), so it joins no run.

        Idempotent (a revoked device stays revoked since its first revocation).
        """
        with store.transaction() as tx:
            out = _load_device(tx, client_id)
            if out["revoked_at"] is None:
                now = time.time()
                tx.update_client(client_id, revoked_at=now)
                out = {**out, "revoked_at": now, "status": "revoked"}
                ledger.audit(tx, actor, "revoke-device", None, client_id=client_id)
        _forget(request, client_id)
        return out

    @r.post("/devices/{client_id}/reinstate")
    def reinstate_device(
        client_id: IdPath, request: Request, actor: Op, body: ReinstateIn | None = None
    ) -> dict[str, Any]:
        """Reinstate a revoked device; with a new ``certificate``, under its new key (re-keying).

        The certificate must be a device certificate for ``client_id`` from a trusted authority
        (403 otherwise); its key, population, authority and expiry replace the enrolled ones, so the old
        key is refused from then on. 409 if the device is not revoked.
        """
        with store.transaction() as tx:
            c = _load_device(tx, client_id)
            if c["revoked_at"] is None:
                raise tasks.ConflictError(
                    f"device {client_id!r} is not revoked (revoke it first to re-key it)"
                )
            detail: dict[str, Any] = {"client_id": client_id, "rekeyed": False}
            if body is not None and body.certificate is not None:
                try:
                    cert = auth.Certificate.from_dict(body.certificate)
                    auth.verify_certificate(cert, tasks.trusted_authorities(tx))
                except (ValueError, KeyError, TypeError) as exc:
                    raise SecurityError(f"not a device certificate: {exc}") from None
                if cert.body.get("role", "device") != "device":
                    raise SecurityError("not a device certificate")
                if cert.body.get("client_id") != client_id:
                    raise SecurityError(
                        f"the certificate is for {cert.body.get('client_id')!r}, not {client_id!r}"
                    )
                new = {
                    "public_key": str(cert.body["public_key"]),
                    "population": str(cert.body["population"]),
                    "authority": str(cert.body["authority"]),
                    "not_after": float(cert.body["not_after"]),
                    "enrolled_at": time.time(),
                }
                tx.update_client(client_id, certificate=json.dumps(cert.as_dict()), **new)
                c = {**c, **new}
                detail["rekeyed"] = True
                detail["public_key"] = c["public_key"]
            tx.update_client(client_id, revoked_at=None)
            ledger.audit(tx, actor, "reinstate-device", None, **detail)
            out = {**c, "revoked_at": None, "status": "active"}
        _forget(request, client_id)
        return out

    # -- operators
    @r.get("/operators")
    def list_operators(
        actor: Op,  # noqa: ARG001 - authentication dependency
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Page:
        """Operators (names and creation times; tokens are stored hashed and never shown)."""
        with store.transaction(read_only=True) as tx:
            items, total = tx.page_operators(limit, offset)
        return _pageout(items, total, limit, offset)

    @r.post("/operators", status_code=201)
    def add_operator(body: OperatorIn, actor: Op) -> OperatorToken:
        """Create an operator; its bearer token is in the answer, once (stored hashed)."""
        with store.transaction() as tx:
            token = operators.add(tx, body.name, actor=actor)
        return OperatorToken(name=body.name, token=token)

    @r.delete("/operators/{name}")
    def remove_operator(name: IdPath, actor: Op) -> dict[str, Any]:
        """Remove operator ``name``: its token stops working at once (not oneself, not the last)."""
        with store.transaction() as tx:
            operators.remove(tx, name, actor=actor)
        return {"name": name, "removed": True}

    @r.post("/operators/{name}/rotate")
    def rotate_operator_token(name: IdPath, actor: Op) -> OperatorToken:
        """Issue a new bearer token for operator ``name``; its old token stops working at once."""
        with store.transaction() as tx:
            token = operators.rotate(tx, name, actor=actor)
        return OperatorToken(name=name, token=token)

    # -- audit
    @r.get("/audit")
    def get_audit(
        actor: Op,  # noqa: ARG001 - authentication dependency
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

    return r


def rotate_token(s: State, name: str) -> str:
    """Give operator ``name`` a new bearer token (in the caller's transaction); return it.

    Raises
    ------
    NotFoundError
        If there is no such operator.
    """
    return operators.rotate(s, name)
