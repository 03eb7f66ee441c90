"""The operator dashboard: a read-only status page at ``/dashboard``, behind an operator's bearer token.

An operator signs in once with a form (``POST /dashboard/login``); the token then travels in an
``HttpOnly``, ``Secure``, ``SameSite=Strict`` cookie and is never written into a page. The page is
rendered on the server with Jinja2 (autoescaping on: task labels, errors and audit details are data) and
refreshes itself. It shows the latest runs (status, task, rounds and their state, devices checked in,
devices that refused and why (:mod:`fedstats.service.domain.refusals`),
start and end, the released estimate of a finished run with its warnings, error), the enrolled and checked-in devices per population, every budget (spent, reserved
and remaining, as ``GET /v1/admin/budgets/...`` computes them), recent errors: aborted runs and the
audit entries that record a refusal, an abort or a release, and this server process's counters since it
started (HTTP responses by status class, 5xx highlighted; reports accepted, duplicate and excluded by
reason; runs done and aborted; the same numbers ``/metrics`` gives), and the signed Prio3 tasks held by
this aggregator (:func:`prio3_state`: each round's batch with its reports uploaded, aggregated and
rejected, and the released estimate the collector stored on the leader). It writes nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from fedstats.results import released_summary
from fedstats.service.domain import ledger, runs, vdaf_admin
from fedstats.service.store import State, Store
from fedstats.wire import auth

__all__ = ["COOKIE", "add_dashboard", "dashboard_state", "prio3_state", "process_state"]

COOKIE = "fedstats_operator"
"""Name of the cookie that carries the operator's token after sign-in."""

_RUNS_SHOWN = 50
_PRIO3_SHOWN = 50
_ERRORS_SHOWN = 30
_REFRESH_SECONDS = 5
_ERROR_ACTIONS = ("refuse", "abort", "release", "exclude", "cancel", "revoke")

_env = Environment(
    loader=PackageLoader("fedstats.service.http", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(ts: float | None) -> str:
    """A timestamp as UTC ISO text (empty for None)."""
    if ts is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _num(x: float) -> str:
    """A budget figure as the page shows it (six significant digits)."""
    return f"{x:.6g}"


def _task_summary(config: str | None) -> dict[str, Any]:
    if config is None:
        return {"analysis": "?", "label": "", "population": "?"}
    conf = json.loads(config)
    body = conf.get("task", conf) if isinstance(conf, dict) else {}
    return {
        "analysis": str(body.get("analysis", "?")),
        "label": str(body.get("label", "")),
        "population": str((body.get("privacy") or {}).get("population", "?")),
        "cohort_size": body.get("cohort_size"),
    }


def _reserved(tx: State, scope: str, name: str) -> tuple[float, float, int]:
    """Epsilon and delta of the charges still reserved (not yet spent) on one budget, composed."""
    return ledger.reserved_total(tx, scope, name)


def dashboard_state(tx: State, now: float | None = None) -> dict[str, Any]:
    """Everything the dashboard shows, read in one transaction (no writes).

    Parameters
    ----------
    tx : State
        An open (read-only) transaction of the store.
    now : float, optional
        The time the page is rendered at (default: now).

    Returns
    -------
    dict
        ``runs`` (newest first, with their rounds), ``prio3`` (:func:`prio3_state`), ``populations`` (devices enrolled, revoked and
        checked in to live runs), ``budgets`` (each as :func:`fedstats.service.domain.ledger.budget_status`
        plus the reserved part), ``errors`` (aborted runs) and ``audit`` (recent refusals, aborts and
        releases), and ``generated`` (the time as text).
    """
    now = time.time() if now is None else now
    tasks_by_id: dict[str, str | None] = {}
    shown_runs = []
    for r in tx.recent_runs(_RUNS_SHOWN):
        if r.task_id not in tasks_by_id:
            tasks_by_id[r.task_id] = tx.task_json(r.task_id)
        view = runs.run_view(tx, r.run_id)
        shown_runs.append(
            {
                **view,
                "task": _task_summary(tasks_by_id.get(r.task_id)),
                "created": _when(r.created_at),
                "finished": _when(r.finished_at),
                # the released estimate of a finished run, as `fedstats admin runs wait` prints it
                "released": released_summary(view["result"]) if view.get("result") else "",
            }
        )

    populations: dict[str, dict[str, Any]] = {}
    for p in tx.population_counts():
        populations[p.population] = {
            "population": p.population,
            "enrolled": p.enrolled,
            "revoked": p.revoked,
            "checked_in": 0,
            "last_registered": _when(p.last_enrolled),
        }
    for pop, n in tx.checked_in_by_population().items():
        populations.setdefault(
            pop,
            {"population": pop, "enrolled": 0, "revoked": 0, "last_registered": ""},
        )["checked_in"] = n

    budgets = []
    for b in tx.budgets():
        st = ledger.budget_status(tx, b.scope, b.name)
        if st is None:  # pragma: no cover - the row was just read
            continue
        res_e, res_d, res_n = _reserved(tx, b.scope, b.name)
        budgets.append(
            {
                **st,
                "reserved_epsilon": res_e,
                "reserved_delta": res_d,
                "reserved_charges": res_n,
                "text": {
                    k: _num(v)
                    for k, v in {
                        "epsilon_budget": st["epsilon_budget"],
                        "delta_budget": st["delta_budget"],
                        "spent_epsilon": st["spent_epsilon"],
                        "spent_delta": st["spent_delta"],
                        "remaining_epsilon": st["remaining_epsilon"],
                        "remaining_delta": st["remaining_delta"],
                        "reserved_epsilon": res_e,
                        "reserved_delta": res_d,
                    }.items()
                },
            }
        )

    aborted = [r for r in shown_runs if r["status"] == "aborted"]
    audit = [
        {
            "when": _when(a.ts),
            "actor": a.actor,
            "action": a.action,
            "run_id": a.run_id or "",
            "detail": a.detail,
        }
        for a in tx.recent_audit(_ERROR_ACTIONS, _ERRORS_SHOWN)
    ]
    return {
        "runs": shown_runs,
        "populations": sorted(populations.values(), key=lambda p: p["population"]),
        "budgets": budgets,
        "errors": aborted,
        "audit": audit,
        "prio3": prio3_state(tx),
        "generated": _when(now),
    }


def prio3_state(tx: State) -> list[dict[str, Any]]:
    """The signed Prio3 tasks on this aggregator for the dashboard, newest first (at most 50).

    Parameters
    ----------
    tx : State
        An open (read-only) transaction of the store.

    Returns
    -------
    list of dict
        Per task (:func:`fedstats.service.domain.vdaf_admin.list_signed`): its id, role, status,
        analysis, label, population, epsilon, cohort size, ``batches`` (per round: status, reports
        uploaded, aggregated, accepted, rejected, pending), ``released`` (the stored result as
        "estimate [interval] (privacy spent: ...)", empty if none) and ``warnings``, ``created``.
    """
    out = []
    for t in vdaf_admin.signed_summaries(tx)[:_PRIO3_SHOWN]:
        result = t.get("result")
        out.append(
            {
                **{k: v for k, v in t.items() if k != "task"},
                "created": _when(t.get("created_at")),
                "released": released_summary(result) if result else "",
                "warnings": list((result or {}).get("warnings") or []),
            }
        )
    return out


def process_state(
    counters: Mapping[str, float],
    metrics: Mapping[str, float],
    excluded: Mapping[str, float],
) -> dict[str, Any]:
    """The counters of this server process since it started, for the dashboard.

    Parameters
    ----------
    counters : mapping
        The app's counters (``http_responses_total{status="..."}`` and the request counters).
    metrics : mapping
        The run driver's counters (:attr:`fedstats.service.domain.driver.Driver.metrics`).
    excluded : mapping
        Reports left out of sums, by reason (:attr:`~fedstats.service.domain.driver.Driver.excluded`).

    Returns
    -------
    dict
        ``responses``: counts by status class ``"2xx"`` .. ``"5xx"`` (every class present, 0 if none);
        ``statuses``: ``[(status, count)]`` by status code, ascending; ``server_errors``: the 5xx count;
        ``reports``: accepted, duplicate and excluded (total and ``by_reason``); ``runs``: done and
        aborted.
    """
    statuses: dict[int, float] = {}
    for key, v in counters.items():
        if key.startswith("http_responses_total"):
            text = key.split('status="', 1)[-1].rstrip('"}')
            if text.isdigit():
                statuses[int(text)] = statuses.get(int(text), 0.0) + float(v)
    classes = {f"{c}xx": 0 for c in (1, 2, 3, 4, 5)}
    for code, v in statuses.items():
        if 1 <= code // 100 <= 5:
            classes[f"{code // 100}xx"] += int(v)
    return {
        "responses": classes,
        "statuses": sorted((code, int(v)) for code, v in statuses.items()),
        "server_errors": classes["5xx"],
        "reports": {
            "accepted": int(counters.get("reports_accepted", 0)),
            "duplicate": int(counters.get("reports_duplicate", 0)),
            "excluded": int(sum(excluded.values())),
            "by_reason": sorted((str(r), int(v)) for r, v in excluded.items() if v),
        },
        "runs": {
            "done": int(metrics.get("runs_done", 0)),
            "aborted": int(metrics.get("runs_aborted", 0)),
        },
    }


def _operator_of(store: Store, token: str | None) -> str | None:
    """The operator whose bearer token is ``token``, or None."""
    if not token:
        return None
    with store.transaction(read_only=True) as tx:
        return tx.operator_of(auth.hash_token(token))


def _page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = _env.get_template(name).render(**context)
    return HTMLResponse(
        html,
        status_code=status,
        headers={
            "Cache-Control": "no-store",
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
            "form-action 'self'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        },
    )


def add_dashboard(
    app: FastAPI, store: Store, process: Callable[[], dict[str, Any]] | None = None
) -> None:
    """Mount the operator dashboard on ``app``: ``/`` and ``/dashboard`` (GET), login and logout (POST).

    Parameters
    ----------
    app : FastAPI
        The server's app (:func:`fedstats.service.http.app.create_app`).
    store : Store
        Its store; the dashboard only reads it.
    process : callable, optional
        Returns this process's counters (:func:`process_state`); None: the panel is left out.
    """

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/dashboard", status_code=303)

    @app.get("/dashboard", include_in_schema=False)
    def dashboard(request: Request) -> Response:
        operator = _operator_of(store, request.cookies.get(COOKIE))
        if operator is None:
            return _page("login.html.j2", status=401, error=None)
        with store.transaction(read_only=True) as tx:
            state = dashboard_state(tx)
        return _page(
            "dashboard.html.j2",
            operator=operator,
            refresh=_REFRESH_SECONDS,
            process=None if process is None else process(),
            **state,
        )

    @app.post("/dashboard/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        body = (await request.body())[:4096].decode("utf-8", errors="replace")
        token = (parse_qs(body).get("token") or [""])[0].strip()
        if _operator_of(store, token) is None:
            return _page("login.html.j2", status=401, error="unknown token")
        out = RedirectResponse("/dashboard", status_code=303)
        out.set_cookie(
            COOKIE,
            token,
            httponly=True,
            secure=request.url.scheme == "https",
            samesite="strict",
            path="/dashboard",
            max_age=8 * 3600,
        )
        return out

    @app.post("/dashboard/logout", include_in_schema=False)
    def logout() -> Response:
        out = RedirectResponse("/dashboard", status_code=303)
        out.delete_cookie(COOKIE, path="/dashboard")
        return out
