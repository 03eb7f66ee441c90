"""``fedstats admin``: the operator's tools over the server's admin API (``docs/admin.md``).

``fedstats admin [--server URL] [--token T] [--ca PEM] GROUP COMMAND``, with groups ``budgets``,
``tasks``, ``runs``, ``devices`` and ``operators``. The token comes from ``--token`` or
``FEDSTATS_TOKEN`` (the server from ``FEDSTATS_SERVER``, the CA from ``FEDSTATS_CA``). With ``--json``
(global or per command) each command prints one JSON object; otherwise a table.

Bad input prints one line and exits 2; an answer of the server that is an error prints the server's
message in one line and exits 1, as does a server that cannot be reached. ``tasks create`` and
``runs create`` send an ``Idempotency-Key`` (a fresh one unless ``--idempotency-key`` is given) and retry
a lost answer with it: one task, one run, one reservation.
"""

from __future__ import annotations

import inspect
import json
import re
import ssl
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from fedstats.cli._common import JsonOption, emit, fmt_value, state_from
from fedstats.cli._options import PopulationFilterOption
from fedstats.cli._refusals_view import refusal_line, show_refusals
from fedstats.errors import FedstatsError, ParameterError
from fedstats.results import released_summary

admin_app = typer.Typer(
    help="Operator tools over the server's admin API: budgets, tasks, runs, devices, operators.",
    no_args_is_help=True,
)
budgets_app = typer.Typer(help="Privacy budgets of populations and analysts.", no_args_is_help=True)
tasks_app = typer.Typer(help="Signed tasks.", no_args_is_help=True)
runs_app = typer.Typer(help="Runs of tasks.", no_args_is_help=True)
devices_app = typer.Typer(help="Enrolled devices.", no_args_is_help=True)
operators_app = typer.Typer(help="Operators and their tokens.", no_args_is_help=True)
admin_app.add_typer(budgets_app, name="budgets")
admin_app.add_typer(tasks_app, name="tasks")
admin_app.add_typer(runs_app, name="runs")
admin_app.add_typer(devices_app, name="devices")
admin_app.add_typer(operators_app, name="operators")


class AdminHTTPError(FedstatsError):
    """The server answered an admin request with an error, or could not be reached (exit 1)."""


@dataclass
class _Conn:
    server: str
    token: str | None
    ca: Path | None
    timeout: float


@admin_app.callback()
def _admin(
    ctx: typer.Context,
    server: Annotated[
        str,
        typer.Option("--server", envvar="FEDSTATS_SERVER", help="Server base URL."),
    ] = "https://127.0.0.1:8443",
    token: Annotated[
        str | None,
        typer.Option(
            "--token", envvar="FEDSTATS_TOKEN", help="Operator bearer token (or FEDSTATS_TOKEN)."
        ),
    ] = None,
    ca: Annotated[
        Path | None,
        typer.Option("--ca", envvar="FEDSTATS_CA", help="CA certificate of the server (PEM)."),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, max=600.0, help="Seconds per request.")
    ] = 30.0,
) -> None:
    """Operator tools over the server's admin API."""
    check_connection_options(server, token)  # before a byte is sent
    ctx.obj = _Conn(server=server, token=token, ca=ca, timeout=timeout)


def check_connection_options(server: str, token: str | None) -> None:
    """Refuse a server URL or an operator token that cannot be right, before connecting.

    Parameters
    ----------
    server : str
        ``--server``: an ``https://`` (or loopback ``http://``) URL, its port (if given) in [1, 65535].
    token : str or None
        ``--token``: printable ASCII without spaces or control characters (an operator token, as
        ``fedstats server add-operator`` prints it); None when not given (refused when a command sends).

    Raises
    ------
    ParameterError
        Naming ``--server`` or ``--token`` (the token itself is never printed: it is a secret).
    """
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(server)
        port = parts.port
    except ValueError:  # a port out of [0, 65535] or not a number
        raise ParameterError("--server", server, "a URL whose port is in [1, 65535]") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ParameterError(
            "--server", server, "an https:// URL (http:// only to loopback), e.g. https://host:8443"
        )
    if port is not None and not 1 <= port <= 65535:
        raise ParameterError("--server", server, "a URL whose port is in [1, 65535]")
    if token is not None:
        bad = [i for i, c in enumerate(token) if not 0x21 <= ord(c) <= 0x7E]
        if not token or bad:
            where = (
                f" (character {bad[0] + 1} is U+{ord(token[bad[0]]):04X})" if bad else " (empty)"
            )
            raise ParameterError(
                "--token",
                "(not shown)",
                "an operator token: printable ASCII without spaces or control characters" + where,
            )


def _conn(ctx: typer.Context) -> _Conn:
    c = ctx.find_object(_Conn)
    assert c is not None
    return c


class _Api:
    """A small client of the admin API: one-line errors, retries of idempotent requests."""

    def __init__(self, conn: _Conn) -> None:
        import httpx

        from fedstats.client import check_server_url

        if not conn.token:
            raise ParameterError("--token", "", "an operator token (--token or FEDSTATS_TOKEN)")
        url = check_server_url(conn.server)
        if conn.ca is not None and not conn.ca.is_file():
            raise ParameterError("--ca", str(conn.ca), "a PEM file")
        try:
            verify: Any = ssl.create_default_context(cafile=str(conn.ca)) if conn.ca else True
        except ssl.SSLError:
            raise ParameterError("--ca", str(conn.ca), "a PEM CA certificate file") from None
        self.url = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.url,
            verify=verify,
            timeout=conn.timeout,
            headers={"Authorization": f"Bearer {conn.token}"},
        )

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        key: str | None = None,
        retries: int = 0,
    ) -> Any:
        """Send one request; retry transport errors ``retries`` times; return the JSON answer."""
        import httpx

        from fedstats.client.checks import _connect_failure

        headers = {"Idempotency-Key": key} if key else {}
        params = {k: v for k, v in (params or {}).items() if v is not None}
        for attempt in range(retries + 1):
            try:
                r = self.http.request(method, path, json=body, params=params, headers=headers)
            except httpx.TransportError as exc:
                reason, permanent = _connect_failure(exc, self.url)
                if permanent or attempt == retries:
                    raise AdminHTTPError(reason) from None
                time.sleep(0.5 * (attempt + 1))
                continue
            if r.status_code >= 400:
                try:
                    detail = r.json().get("detail", r.text)
                except ValueError:
                    detail = r.text
                if not isinstance(detail, str):
                    detail = json.dumps(detail)
                raise AdminHTTPError(
                    f"{method} {path}: HTTP {r.status_code}: {' '.join(detail.split())[:500]}"
                )
            return r.json()
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self.http.close()


def _run(
    ctx: typer.Context, json_flag: bool, fn: Callable[[_Api], Any], show: Any = None
) -> dict[str, Any]:
    """Call the API with ``fn``, print its answer (``show(console, answer)`` draws it) and return it."""
    state = state_from(ctx, json_flag=json_flag)
    api = _Api(_conn(ctx))
    try:
        got = fn(api)
    except AdminHTTPError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise typer.Exit(1) from None
    finally:
        api.close()
    payload = got if isinstance(got, dict) else {"items": got}
    emit(state, payload, None if show is None else (lambda console: show(console, payload)))
    return payload


def _call(
    ctx: typer.Context,
    json_flag: bool,
    show: Any,
    method: str,
    path: str,
    body: Any = None,
    **kw: Any,
) -> dict[str, Any]:
    """:func:`_run` of one request, ``api.call(method, path, body, **kw)``, shown with ``show``."""
    return _run(ctx, json_flag, lambda api: api.call(method, path, body, **kw), show)


def _list(
    ctx: typer.Context,
    json_flag: bool,
    what: str,
    params: dict[str, Any],
    columns: list[str],
    sort_by: tuple[str, ...] = (),
) -> None:
    """A page of ``GET /v1/admin/<what>`` (with ``params``), shown as a table of ``columns``."""
    view = _page_view(columns, what, sort_by)
    _call(ctx, json_flag, view, "GET", f"/v1/admin/{what}", params=params, retries=2)


def _table(console: Console, rows: list[dict[str, Any]], columns: list[str], title: str) -> None:
    table = Table(title=title)
    for c in columns:
        table.add_column(c)
    for row in rows:
        table.add_row(*(_cell(c, row.get(c)) for c in columns))
    console.print(table)


TIME_COLUMNS = ("not_after", "not_before", "expires", "deadline")
"""Columns holding Unix seconds besides the ``*_at`` ones: shown as ISO 8601 dates (UTC)."""


def _cell(column: str, value: Any) -> str:
    if (
        value is not None
        and (column.endswith("_at") or column in TIME_COLUMNS)
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
    ):
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(value)))
    if isinstance(value, dict):
        return json.dumps(value)
    return fmt_value(value)


def natural_key(text: Any) -> tuple[Any, ...]:
    """Sort key putting ``device-2`` before ``device-10``: digit runs compare as numbers."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part.lower())
        for part in re.split(r"(\d+)", str(text))
        if part
    )


def _page_view(
    columns: list[str], title: str, sort_by: tuple[str, ...] = ()
) -> Callable[[Console, dict[str, Any]], None]:
    def show(console: Console, page: dict[str, Any]) -> None:
        rows = list(page.get("items", []))
        if sort_by:  # natural order within the page (pages come in the server's order)
            rows.sort(key=lambda row: tuple(natural_key(row.get(c, "")) for c in sort_by))
        _table(console, rows, columns, title)
        more = page.get("next_offset")
        tail = f"; next page: --offset {more}" if more is not None else ""
        console.print(f"{len(page.get('items', []))} of {page.get('total')}{tail}")

    return show


def _kv_view(console: Console, payload: dict[str, Any]) -> None:
    table = Table(show_header=False, box=None)
    for k, v in payload.items():
        table.add_row(str(k), json.dumps(v) if isinstance(v, (list, dict)) else _cell(k, v))
    console.print(table)


Limit = Annotated[int, typer.Option("--limit", min=1, max=500, help="Items per page.")]
TaskId = Annotated[str, typer.Argument(help="Task id (64 hex digits).")]
RunId = Annotated[str, typer.Argument(help="Run id.")]
ClientId = Annotated[str, typer.Argument(help="Device (client) id.")]
BudgetScope = Annotated[str, typer.Argument(help="'population' or 'analyst'.")]
Offset = Annotated[int, typer.Option("--offset", min=0, help="Items to skip.")]
KeyOption = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        help="Idempotency-Key to send (default: a fresh one; reuse one to retry a lost answer).",
    ),
]


def _key(key: str | None) -> str:
    from fedstats.service.domain.idempotency import check_key

    return check_key(key) or uuid.uuid4().hex


def _read_json(path: Path, option: str) -> Any:
    from fedstats.wire.encoding import unique_keys

    try:
        # a key given twice is refused, never "the last wins" (two "epsilon" keys)
        return json.loads(path.read_text(), object_pairs_hook=unique_keys)
    except (OSError, ValueError) as exc:
        raise ParameterError(option, str(path), f"a readable JSON file ({exc})") from None


def _token_view(console: Console, p: dict[str, Any]) -> None:
    """Print an operator's new token alone (so that it can be piped)."""
    console.print(p["token"])


def _request_command(
    app: typer.Typer,
    name: str,
    argument: tuple[str, Any],
    request: tuple[str, str],
    show: Callable[[Console, dict[str, Any]], None],
    summary: str,
    retries: int = 0,
    *,
    in_body: bool = False,
) -> None:
    """Add the command ``name`` (help ``summary``) to ``app``: one request about its one argument.

    ``argument`` is the argument's Python name and annotation (``("run_id", RunId)``), ``request`` the
    method and the path, ``{}`` standing for the argument (with ``in_body``, the argument is sent as the
    JSON body ``{name: value}`` instead); ``show`` draws the answer (without ``--json``); ``retries``
    retries a lost request (only where repeating it is harmless).
    """
    arg, annotation = argument
    method, path = request

    def command(ctx: typer.Context, json_flag: bool = False, **value: str) -> None:
        if in_body:
            _call(ctx, json_flag, show, method, path, {arg: value[arg]}, retries=retries)
        else:
            _call(ctx, json_flag, show, method, path.format(value[arg]), retries=retries)

    p = inspect.Parameter
    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            p("ctx", p.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
            p(arg, p.POSITIONAL_OR_KEYWORD, annotation=annotation),
            p("json_flag", p.POSITIONAL_OR_KEYWORD, default=False, annotation=JsonOption),
        ]
    )
    command.__doc__ = summary
    app.command(name)(command)


# -- budgets
@budgets_app.command("set")
def budget_set(
    ctx: typer.Context,
    scope: BudgetScope,
    name: Annotated[str, typer.Argument(help="Population or analyst (operator) name.")],
    epsilon: Annotated[float, typer.Option("--epsilon", help="Total epsilon, > 0.")],
    delta: Annotated[float, typer.Option("--delta", help="Total delta, in [0, 1).")] = 0.0,
    json_flag: JsonOption = False,
) -> None:
    """Set a budget (it cannot go below what is already reserved or spent)."""
    if scope not in ("population", "analyst"):
        raise ParameterError("scope", scope, "'population' or 'analyst'")
    if not 1 <= len(name) <= 128:
        raise ParameterError("name", name, "1 to 128 characters")
    if not 0 < epsilon < 1e6:
        raise ParameterError("--epsilon", epsilon, "a number in (0, 1e6)")
    if not 0 <= delta < 1:
        raise ParameterError("--delta", delta, "a number in [0, 1)")
    _call(
        ctx,
        json_flag,
        _kv_view,
        "PUT",
        f"/v1/admin/budgets/{scope}/{name}",
        {"epsilon": epsilon, "delta": delta},
    )


@budgets_app.command("show")
def budget_show(
    ctx: typer.Context,
    scope: BudgetScope,
    name: Annotated[str, typer.Argument(help="Population or analyst name.")],
    json_flag: JsonOption = False,
) -> None:
    """A budget with what is spent (reserved + spent) and what remains."""
    if scope not in ("population", "analyst"):
        raise ParameterError("scope", scope, "'population' or 'analyst'")
    _call(ctx, json_flag, _kv_view, "GET", f"/v1/admin/budgets/{scope}/{name}", retries=2)


@budgets_app.command("list")
def budget_list(
    ctx: typer.Context, limit: Limit = 50, offset: Offset = 0, json_flag: JsonOption = False
) -> None:
    """All budgets."""
    columns = "scope name epsilon_budget spent_epsilon remaining_epsilon delta_budget spent_delta"
    params = {"limit": limit, "offset": offset}
    _list(ctx, json_flag, "budgets", params, [*columns.split(), "charges"], ("scope", "name"))


# -- tasks
@tasks_app.command("create")
def task_create(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Argument(help="A signed task envelope (JSON), or with --analyst a task to sign."),
    ],
    analyst: Annotated[
        Path | None,
        typer.Option("--analyst", help="Analyst identity file: sign the task in FILE with it."),
    ] = None,
    key: KeyOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Post a signed task (or sign the task in FILE with --analyst first)."""
    data = _read_json(file, "file")
    if not isinstance(data, dict):
        raise ParameterError("file", str(file), "a JSON object")
    if analyst is not None:
        from fedstats.wire.tasks import sign_task

        if set(data) == {"task", "certificate", "signature"}:
            raise ParameterError("--analyst", str(analyst), "omitted: FILE is already signed")
        data = sign_task(data, analyst)
    elif set(data) != {"task", "certificate", "signature"}:
        raise ParameterError(
            "file",
            str(file),
            "a signed envelope {task, certificate, signature} (or pass --analyst to sign a task)",
        )
    k = _key(key)
    _call(
        ctx,
        json_flag,
        lambda console, p: _kv_view(
            console, {"task_id": p["task_id"], "created": p["created"], **_task_summary(p)}
        ),
        "POST",
        "/v1/admin/tasks",
        data,
        key=k,
        retries=3,
    )


@tasks_app.command("sign")
def task_sign(
    file: Annotated[Path, typer.Argument(help="A task (JSON) to sign.")],
    analyst: Annotated[
        Path, typer.Option("--analyst", help="The analyst's identity file (its private key).")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the signed envelope here (default: standard output)."),
    ] = None,
) -> None:
    """Sign a task as an analyst, offline: the envelope the operator posts with ``tasks create``.

    Needs no server: the analyst signs on their own machine and hands the envelope to the operator, who
    never holds the analyst's key.
    """
    from fedstats._io import atomic_write_text
    from fedstats.wire.tasks import sign_task

    data = _read_json(file, "file")
    if not isinstance(data, dict):
        raise ParameterError("file", str(file), "a JSON object (a task)")
    if set(data) == {"task", "certificate", "signature"}:
        raise ParameterError("file", str(file), "an unsigned task (this one is already signed)")
    text = json.dumps(sign_task(data, analyst), sort_keys=True) + "\n"
    if out is None:
        sys.stdout.write(text)
        return
    try:
        atomic_write_text(out, text)  # nothing half-written on failure
    except OSError as exc:
        raise ParameterError("--out", str(out), f"a writable file path ({exc.strerror})") from None


def _task_summary(p: dict[str, Any]) -> dict[str, Any]:
    conf = p.get("config") or {}
    return {
        "analysis": conf.get("analysis"),
        "population": (conf.get("privacy") or {}).get("population"),
        "epsilon": (conf.get("privacy") or {}).get("epsilon"),
        "cohort_size": conf.get("cohort_size"),
        "params": conf.get("params"),
    }


_TASK_COLUMNS = "task_id analysis population epsilon cohort_size label created_at".split()
MORE_TASKS: list[Callable[[Any, dict[str, Any]], list[dict[str, Any]]]] = []  # admin_prio3's


@tasks_app.command("list")
def task_list(
    ctx: typer.Context,
    analysis: Annotated[str | None, typer.Option("--analysis", help="Only this analysis.")] = None,
    population: PopulationFilterOption = None,
    limit: Limit = 50,
    offset: Offset = 0,
    json_flag: JsonOption = False,
) -> None:
    """Stored tasks, newest first; then, on a Prio3 aggregator, its signed Prio3 tasks."""
    params = {"limit": limit, "offset": offset, "analysis": analysis, "population": population}
    _run(
        ctx,
        json_flag,
        lambda api: {**(p := api.call("GET", "/v1/admin/tasks", params=params, retries=2)),
                     "items": p["items"] + [t for f in MORE_TASKS for t in f(api, params)]},
        _page_view([*_TASK_COLUMNS, "route", "status"], "tasks"),
    )  # fmt: skip


def _task_view(console: Console, p: dict[str, Any]) -> None:
    _kv_view(console, {"task_id": p["task_id"], **_task_summary(p)})


_request_command(
    tasks_app, "show", ("task_id", TaskId), ("GET", "/v1/admin/tasks/{}"), _task_view,
    "A task's configuration and signed envelope.", retries=2,
)  # fmt: skip


# -- runs
_RUN_COLUMNS = ["run_id", "status", "analyst", "n_clients", "created_at", "finished_at", "error"]


def _run_view(console: Console, p: dict[str, Any]) -> None:
    result = p.get("result")
    shown = {k: v for k, v in p.items() if k != "rounds"}
    shown["refusals"] = refusal_line(p.get("refusals")) or "none"  # messages: a table below
    if "result" in shown:
        shown["result"] = released_summary(result)
    _kv_view(console, shown)
    show_refusals(console, p.get("refusals"))
    warnings = result.get("warnings") if isinstance(result, dict) else None
    for warning in warnings or ():
        console.print(f"warning: {warning}")
    if p.get("rounds"):
        _table(
            console,
            list(p["rounds"]),
            ["index", "name", "status", "records_expected", "records_summed"],
            "rounds",
        )


@runs_app.command("create")
def run_create(
    ctx: typer.Context,
    task_id: TaskId,
    key: KeyOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Start a run of a task (reserves its privacy charge; a lost answer is retried once-only)."""
    k = _key(key)
    _call(
        ctx, json_flag, _run_view, "POST", "/v1/admin/runs", {"task_id": task_id}, key=k, retries=3
    )


@runs_app.command("list")
def run_list(
    ctx: typer.Context,
    status: Annotated[
        str | None,
        typer.Option("--status", help="checkin, seeding, running, done or aborted."),
    ] = None,
    task_id: Annotated[str | None, typer.Option("--task", help="Only runs of this task.")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
    json_flag: JsonOption = False,
) -> None:
    """Runs, newest first."""
    if status is not None and status not in ("checkin", "seeding", "running", "done", "aborted"):
        raise ParameterError("--status", status, "checkin, seeding, running, done or aborted")
    params = {"limit": limit, "offset": offset, "status": status, "task_id": task_id}
    _list(ctx, json_flag, "runs", params, _RUN_COLUMNS)


_request_command(
    runs_app, "show", ("run_id", RunId), ("GET", "/v1/admin/runs/{}"), _run_view,
    "A run's status, rounds and result.", retries=2,
)  # fmt: skip
_request_command(
    runs_app, "cancel", ("run_id", RunId), ("POST", "/v1/admin/runs/{}/cancel"), _run_view,
    "Cancel a live run (its reservation is released if no round's sum was used, else spent).",
)  # fmt: skip


@runs_app.command("wait")
def run_wait(
    ctx: typer.Context,
    run_id: RunId,
    wait_timeout: Annotated[
        float, typer.Option("--wait-timeout", min=0.1, help="Give up after this many seconds.")
    ] = 600.0,
    interval: Annotated[
        float, typer.Option("--interval", min=0.05, max=60.0, help="Seconds between polls.")
    ] = 1.0,
    json_flag: JsonOption = False,
) -> None:
    """Wait until a run is done or aborted and show it; exit 1 if it was aborted or time ran out.

    While it waits, a line on stderr for each change of status or round progress (not with --json or
    --quiet); the result reads "estimate [interval] (privacy spent)", then its warnings.
    """
    state = state_from(ctx, json_flag=json_flag)
    say = None if state.json or state.quiet else partial(print, file=sys.stderr, flush=True)

    def wait(api: _Api) -> Any:
        deadline = time.monotonic() + wait_timeout
        last = ""
        while True:
            got = api.call("GET", f"/v1/admin/runs/{run_id}", retries=3)
            line = run_progress(got)
            if say is not None and line != last:
                say(line)
                last = line
            if got["status"] in ("done", "aborted"):
                return got
            if time.monotonic() > deadline:
                raise AdminHTTPError(f"run {run_id} still {got['status']} after {wait_timeout:g} s")
            time.sleep(interval)

    got = _run(ctx, json_flag, wait, _run_view)
    if got.get("status") == "aborted":  # shown, but not a success
        print(f"error: run {run_id} aborted: {got.get('error')}", file=sys.stderr, flush=True)
        raise typer.Exit(1)


def run_progress(run: dict[str, Any]) -> str:
    """One progress line for a run being waited on: its status and its current round's records.

    ``run r1: running, round 2 of 2 (sum), 37 of 50 records``; ``run r1: checkin``; ``run r1: done``.
    """
    line = f"run {run.get('run_id')}: {run.get('status')}"
    rounds = list(run.get("rounds") or [])
    if run.get("status") in ("running", "seeding") and rounds:
        open_ = [r for r in rounds if r.get("status") != "closed"] or rounds[-1:]
        r = open_[0]
        line += f", round {int(r.get('index', 0)) + 1} of {len(rounds)}"
        if r.get("name"):
            line += f" ({r['name']})"
        if r.get("records_expected") is not None:
            line += f", {r.get('records_summed') or 0} of {r['records_expected']} records"
    return line


# -- devices
@devices_app.command("list")
def device_list(
    ctx: typer.Context,
    population: PopulationFilterOption = None,
    status: Annotated[str | None, typer.Option("--status", help="active or revoked.")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
    json_flag: JsonOption = False,
) -> None:
    """Enrolled devices."""
    if status is not None and status not in ("active", "revoked"):
        raise ParameterError("--status", status, "active or revoked")
    params = {"limit": limit, "offset": offset, "population": population, "status": status}
    columns = ["client_id", "population", "status", "enrolled_at", "revoked_at", "not_after"]
    _list(ctx, json_flag, "devices", params, columns, ("client_id",))


_request_command(
    devices_app, "revoke", ("client_id", ClientId), ("POST", "/v1/admin/devices/{}/revoke"),
    _kv_view, "Revoke a device: its signed requests are refused (403) from now on.", retries=2,
)  # fmt: skip


@devices_app.command("reinstate")
def device_reinstate(
    ctx: typer.Context,
    client_id: ClientId,
    certificate: Annotated[
        Path | None,
        typer.Option(
            "--certificate",
            help="Re-key: the device's new identity file (only its certificate is sent) or "
            "certificate JSON, from 'fedstats enroll client --force'.",
        ),
    ] = None,
    json_flag: JsonOption = False,
) -> None:
    """Reinstate a revoked device (with --certificate: under its new key)."""
    body: dict[str, Any] = {}
    if certificate is not None:
        data = _read_json(certificate, "--certificate")
        cert = data.get("certificate", data) if isinstance(data, dict) else None
        if not isinstance(cert, dict) or "body" not in cert:
            raise ParameterError(
                "--certificate", str(certificate), "an identity file or a device certificate"
            )
        body["certificate"] = cert  # never the private key
    _call(ctx, json_flag, _kv_view, "POST", f"/v1/admin/devices/{client_id}/reinstate", body)


# -- operators
@operators_app.command("list")
def operator_list(
    ctx: typer.Context, limit: Limit = 50, offset: Offset = 0, json_flag: JsonOption = False
) -> None:
    """Operators (names only: tokens are stored hashed)."""
    params = {"limit": limit, "offset": offset}
    _list(ctx, json_flag, "operators", params, ["name", "created_at"], ("name",))


_request_command(
    operators_app, "add", ("name", Annotated[str, typer.Argument(help="The new operator's name.")]),
    ("POST", "/v1/admin/operators"), _token_view,
    "Create an operator; its bearer token is printed once (give it to them over a safe channel).",
    in_body=True,
)  # fmt: skip


def _removed_view(console: Console, p: dict[str, Any]) -> None:
    console.print(f"operator {p['name']!r} removed")


_request_command(
    operators_app, "remove",
    ("name", Annotated[str, typer.Argument(help="The operator to remove (not yourself).")]),
    ("DELETE", "/v1/admin/operators/{}"), _removed_view,
    "Remove an operator: its token stops working at once.",
)  # fmt: skip


@operators_app.command("rotate")
def operator_rotate(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Operator whose token to replace.")],
    json_flag: JsonOption = False,
) -> None:
    """Issue a new token for an operator (printed once); its old token stops working at once."""
    _call(ctx, json_flag, _token_view, "POST", f"/v1/admin/operators/{name}/rotate")
    print(f"the previous token of operator {name!r} no longer works", file=sys.stderr)


def register(app: typer.Typer) -> None:
    """Add ``admin`` to the app (``fedstats.cli.admin_prio3.register`` calls it, adds Prio3's)."""
    app.add_typer(admin_app, name="admin")
