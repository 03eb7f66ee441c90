"""``fedstats admin prio3 ...`` and ``fedstats admin collect``: signed Prio3 tasks on two aggregators.

The operator's tools of the two-aggregator mode (``docs/vdaf.md``, "Walkthrough"), over the aggregators'
``/v1/vdaf`` routes. ``--server``, ``--token`` and ``--ca`` (or ``FEDSTATS_SERVER``, ``FEDSTATS_TOKEN``,
``FEDSTATS_CA``) name the **leader** and its operator token; ``--helper-token`` (or
``FEDSTATS_HELPER_TOKEN``) is the operator's token on the helper, whose URL the signed task names (the same
``--ca`` checks both).

* ``prio3 provision TASK.signed``: posts the analyst's signed task to both aggregators in one command,
  with a fresh ``verify_key`` (32 bytes) and peer token (32 bytes, URL-safe) drawn from the operating
  system's entropy (:func:`os.urandom`, :func:`secrets.token_urlsafe`). They are printed once, on stdout,
  and written nowhere else: the aggregators keep them (the helper only the token's SHA-256). The helper
  is provisioned first; if the leader then refuses, the helper's task is abandoned (its reservation
  released), so nothing is left half-provisioned.
* ``prio3 list``: the leader's signed Prio3 tasks and each round's batch: reports uploaded, aggregated
  (accepted + rejected), rejected, pending; the released result.
* ``collect TASK_ID``: the collector (:func:`fedstats.client.vdaf.collect_signed`): opens each round on
  both aggregators, waits until the round's devices uploaded to both (at most the task's round deadline,
  ``--round-timeout``), has the leader aggregate with the helper, collects both aggregate shares, feeds
  the sum into the analysis's plan, and at the end stores the released result on the leader, closes the
  task on both aggregators (devices stop answering it) and prints the result as ``estimate [interval]
  (privacy spent: ...)``.
* ``prio3 close TASK_ID``: closes a task after its last collection on both aggregators.

Errors: bad input, one ``error:`` line and exit 2; an aggregator's refusal or no answer, one line and
exit 1.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console

from fedstats.analyses.usefulness import attach_warnings
from fedstats.cli import admin
from fedstats.cli._common import JsonOption, emit, state_from
from fedstats.cli._options import PopulationFilterOption
from fedstats.cli.admin import (
    AdminHTTPError,
    _Api,
    _Conn,
    _conn,
    _kv_view,
    _read_json,
    _run,
    _table,
    admin_app,
    check_connection_options,
)
from fedstats.client.vdaf import collect_signed
from fedstats.dap.collector import Collector, CollectorCredential
from fedstats.dap.messages import (
    QUERY_FIXED_SIZE,
    QUERY_TIME_INTERVAL,
    FixedSizeQuery,
    Interval,
    Query,
)
from fedstats.dap.task import b64decode, b64encode, vdaf_from_interop
from fedstats.errors import DataError, FedstatsError, ParameterError
from fedstats.results import AnalysisResult, released_summary, to_jsonable
from fedstats.vdaf import Prio3
from fedstats.wire import digest
from fedstats.wire.tasks import task_id as task_id_of

__all__ = ["collect", "prio3_app", "register"]

prio3_app = typer.Typer(
    help="Signed Prio3 tasks on two aggregators: provision, list, close.", no_args_is_help=True
)

HelperToken = Annotated[
    str | None,
    typer.Option(
        "--helper-token",
        envvar="FEDSTATS_HELPER_TOKEN",
        help="The operator's token on the helper (or FEDSTATS_HELPER_TOKEN).",
    ),
]
_HEX = frozenset("0123456789abcdef")


def _task_id(value: str) -> str:
    if len(value) != 64 or not set(value) <= _HEX:
        raise ParameterError("TASK_ID", value, "a signed Prio3 task id (64 lowercase hex digits)")
    return value


def _need_helper_token(token: str | None) -> None:
    if not token:
        raise ParameterError(
            "--helper-token", "", "the operator's token on the helper (or FEDSTATS_HELPER_TOKEN)"
        )


def _helper(ctx: typer.Context, url: str, token: str | None) -> _Api:
    _need_helper_token(token)
    check_connection_options(url, token)
    c = _conn(ctx)
    return _Api(_Conn(server=url, token=token, ca=c.ca, timeout=c.timeout))


def _fail(exc: Exception) -> typer.Exit:
    print(f"error: {exc}", file=sys.stderr, flush=True)
    return typer.Exit(1)


@prio3_app.command("provision")
def provision(
    ctx: typer.Context,
    envelope_file: Annotated[
        Path, typer.Argument(help="The signed task (fedstats admin tasks sign) with a prio3 route.")
    ],
    helper_token: HelperToken = None,
    json_flag: JsonOption = False,
) -> None:
    """Provision a signed Prio3 task on both aggregators, with a fresh verify key and peer token.

    The verify key and the peer token are drawn from the OS's entropy and printed once (stdout); they are
    not written anywhere else. Each aggregator verifies the envelope and reserves the task's privacy loss.
    """
    state = state_from(ctx, json_flag=json_flag)
    envelope = _read_json(envelope_file, "ENVELOPE_FILE")
    task = envelope.get("task") if isinstance(envelope, dict) else None
    route = task.get("prio3") if isinstance(task, dict) else None
    if not isinstance(task, dict) or not isinstance(route, dict):
        raise ParameterError(
            "ENVELOPE_FILE", str(envelope_file), "a signed task with a prio3 section"
        )
    leader_url, helper_url = str(route.get("leader")), str(route.get("helper"))
    conn = _conn(ctx)
    if conn.server.rstrip("/") != leader_url.rstrip("/"):
        raise ParameterError("--server", conn.server, f"the task's leader {leader_url}")
    tid = task_id_of(task)
    verify_key, peer_token = os.urandom(32).hex(), secrets.token_urlsafe(32)
    leader, helper = _Api(conn), _helper(ctx, helper_url, helper_token)
    body = {"envelope": envelope, "verify_key": verify_key, "peer_token": peer_token}
    try:
        helper.call("POST", "/v1/vdaf/tasks", {**body, "role": "helper"})
        try:
            leader.call("POST", "/v1/vdaf/tasks", {**body, "role": "leader"})
        except AdminHTTPError:
            try:  # nothing half-provisioned: the helper's task and reservation go
                helper.call("POST", f"/v1/vdaf/tasks/{tid}/abandon", retries=2)
            except AdminHTTPError as exc:
                print(f"warning: the helper's task stays: {exc}", file=sys.stderr, flush=True)
            raise
    except AdminHTTPError as exc:
        raise _fail(exc) from None
    finally:
        leader.close()
        helper.close()
    payload = {
        "task_id": tid,
        "leader": leader_url,
        "helper": helper_url,
        "verify_key": verify_key,
        "peer_token": peer_token,
    }
    emit(state, payload, lambda console: _kv_view(console, payload))
    if not state.json and not state.quiet:
        print(
            "the verify key and the peer token are shown once: the aggregators keep them, this "
            "command stored them nowhere",
            file=sys.stderr,
            flush=True,
        )


_TASK_COLUMNS = ["task_id", "status", "analysis", "label", "epsilon", "cohort_size", "result"]
_BATCH_COLUMNS = [
    "task_id",
    "round",
    "status",
    "name",
    "uploaded",
    "aggregated",
    "accepted",
    "rejected",
    "pending",
]


def task_rows(items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of ``prio3 list``'s two tables: one per task, one per batch (round)."""
    tasks, batches = [], []
    for t in items:
        tasks.append({**t, "result": released_summary(t.get("result"))})
        for b in t.get("batches", []):
            batches.append({**b, "task_id": str(t["task_id"])[:16]})
    return tasks, batches


def _list_view(console: Console, page: dict[str, Any]) -> None:
    tasks, batches = task_rows(list(page.get("items", [])))
    _table(console, tasks, _TASK_COLUMNS, "Prio3 tasks")
    _table(console, batches, _BATCH_COLUMNS, "Prio3 batches")


@prio3_app.command("list")
def list_tasks(
    ctx: typer.Context,
    population: PopulationFilterOption = None,
    json_flag: JsonOption = False,
) -> None:
    """The leader's signed Prio3 tasks, their batches (uploaded, aggregated, rejected) and results."""
    params = {"population": population}
    _run(
        ctx,
        json_flag,
        lambda api: api.call("GET", "/v1/vdaf/tasks", params=params, retries=2),
        _list_view,
    )


def _close_both(leader: _Api, helper: _Api, tid: str) -> dict[str, Any]:
    got: dict[str, Any] = leader.call("POST", f"/v1/vdaf/tasks/{tid}/close", retries=2)
    helper.call("POST", f"/v1/vdaf/tasks/{tid}/close", retries=2)
    return got


def _helper_url(leader: _Api, tid: str) -> str:
    summary = leader.call("GET", f"/v1/vdaf/tasks/{tid}/summary", retries=2)
    if summary.get("role") != "leader":
        raise AdminHTTPError(f"--server is not the leader of Prio3 task {tid}")
    return str(summary["helper"])


@prio3_app.command("close")
def close(
    ctx: typer.Context,
    task_id: Annotated[str, typer.Argument(help="The signed Prio3 task id (64 hex digits).")],
    helper_token: HelperToken = None,
    json_flag: JsonOption = False,
) -> None:
    """Close a task after its last collection on both aggregators: devices stop answering it."""
    tid = _task_id(task_id)
    _need_helper_token(helper_token)
    state = state_from(ctx, json_flag=json_flag)
    leader = _Api(_conn(ctx))
    helper = None
    try:
        helper = _helper(ctx, _helper_url(leader, tid), helper_token)
        got = _close_both(leader, helper, tid)
    except AdminHTTPError as exc:
        raise _fail(exc) from None
    finally:
        leader.close()
        if helper is not None:
            helper.close()
    shown = {k: got.get(k) for k in ("task_id", "status", "analysis", "label")}
    emit(state, got, lambda console: _kv_view(console, shown))


def _uploaded(api: _Api, round_id: str) -> int:
    got = api.call("GET", f"/v1/vdaf/tasks/{round_id}", retries=2)
    return sum(int(v) for v in (got.get("reports") or {}).values())


def _payload(result: Any, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The released result as the leader keeps it (as a run's: the analysis's fields and warnings)."""
    if isinstance(result, AnalysisResult):
        payload: dict[str, Any] = to_jsonable(attach_warnings(result).to_dict())
    else:
        payload = {"value": to_jsonable(result)}
    payload["prio3_rounds"] = rounds
    payload["n_reports"] = sum(int(r["accepted"]) for r in rounds)
    return payload


def collect(
    leader: _Api,
    helper: _Api,
    tid: str,
    *,
    round_timeout: float | None = None,
    say: Any = None,
) -> dict[str, Any]:
    """Collect a signed Prio3 task from both aggregators; store the result on the leader; its payload.

    Parameters
    ----------
    leader, helper : _Api
        Operator clients of the two aggregators.
    tid : str
        The signed task's id.
    round_timeout : float, optional
        Seconds to wait for each round's devices to upload to both aggregators (default: the task's
        round deadline); then the round is aggregated with what arrived (collection refuses a batch
        below the task's ``min_batch_size``).
    say : callable, optional
        Receives one progress line per change.

    Returns
    -------
    dict
        The released result as stored on the leader.

    Raises
    ------
    AdminHTTPError
        If an aggregator refuses or cannot be reached.
    DataError
        If the two aggregators hold different tasks or aggregated different batches.
    """
    mine = leader.call("GET", f"/v1/vdaf/tasks/{tid}/summary", retries=2)
    theirs = helper.call("GET", f"/v1/vdaf/tasks/{tid}/summary", retries=2)
    if (mine.get("role"), theirs.get("role")) != ("leader", "helper"):
        raise DataError("--server must be the task's leader and the task's helper its helper")
    if digest(mine["task"]) != digest(theirs["task"]):
        raise DataError("the two aggregators hold different tasks under this id")
    if mine.get("result") is not None:  # collected before: the stored result
        return dict(mine["result"])
    task = mine["task"]
    wait_for = float(task["deadlines"]["round"]) if round_timeout is None else round_timeout
    tell = say or (lambda _line: None)

    def on_round(index: int, announced: Any) -> None:
        lo, hi = (int(x) for x in announced["client_range"])
        want, round_id = hi - lo, str(announced["task_id"])
        end, last = time.monotonic() + wait_for, None
        while True:
            got = (_uploaded(leader, round_id), _uploaded(helper, round_id))
            if got != last:
                tell(
                    f"round {index}: {got[0]} of {want} reports at the leader, {got[1]} at the helper"
                )
                last = got
            if min(got) >= want or time.monotonic() > end:
                return
            time.sleep(0.5)

    result, rounds = collect_signed(task, tid, leader.http, helper.http, on_round)
    payload = _payload(result, rounds)
    stored = leader.call("POST", f"/v1/vdaf/tasks/{tid}/result", {"result": payload}, retries=2)
    return dict(stored["result"])


@admin_app.command("collect")
def collect_command(
    ctx: typer.Context,
    task_id: Annotated[
        str,
        typer.Argument(
            help="The signed Prio3 task id (64 hex digits); with --dap the DAP task id "
            "(unpadded base64url)."
        ),
    ],
    helper_token: HelperToken = None,
    round_timeout: Annotated[
        float | None,
        typer.Option(
            "--round-timeout",
            min=0.0,
            max=86400.0,
            help="Seconds to wait for each round's uploads (default: the task's round deadline).",
        ),
    ] = None,
    keep_open: Annotated[
        bool, typer.Option("--keep-open", help="Do not close the task after collecting it.")
    ] = False,
    dap: Annotated[
        bool,
        typer.Option(
            "--dap",
            help="Collect TASK_ID (unpadded base64url) from the DAP-09 leader at --server, with "
            '--collector-credential, --vdaf and a batch (docs/vdaf.md, "DAP").',
        ),
    ] = False,
    credential: Annotated[
        Path | None,
        typer.Option(
            "--collector-credential",
            help="With --dap: the collector's credential (JSON: HPKE key pair and token; "
            "fedstats admin prio3 collector-credential).",
        ),
    ] = None,
    collector_token: Annotated[
        str | None,
        typer.Option(
            "--collector-token",
            envvar="FEDSTATS_COLLECTOR_TOKEN",
            help="With --dap: the collector's DAP-Auth-Token (default: the credential's token).",
        ),
    ] = None,
    vdaf: Annotated[
        str | None,
        typer.Option(
            "--vdaf",
            help="With --dap: the task's VDAF, Prio3Count, Prio3Sum:bits=8, "
            "Prio3SumVec:bits=B,length=L,chunk_length=C, Prio3Histogram:length=L,chunk_length=C "
            "(or the interop JSON object).",
        ),
    ] = None,
    batch_start: Annotated[
        int | None,
        typer.Option(
            "--batch-interval-start", help="With --dap: a time-interval batch's start (Unix s)."
        ),
    ] = None,
    batch_duration: Annotated[
        int | None,
        typer.Option(
            "--batch-interval-duration", help="With --dap: a time-interval batch's duration (s)."
        ),
    ] = None,
    current_batch: Annotated[
        bool,
        typer.Option(
            "--current-batch",
            help="With --dap: a fixed-size task's next batch, chosen by the leader.",
        ),
    ] = False,
    batch_id: Annotated[
        str | None,
        typer.Option("--batch-id", help="With --dap: a fixed-size batch by its id (base64url)."),
    ] = None,
    job_timeout: Annotated[
        float,
        typer.Option(
            "--job-timeout",
            min=0.1,
            max=86400.0,
            help="With --dap: seconds to poll the collection job before giving up.",
        ),
    ] = 300.0,
    json_flag: JsonOption = False,
) -> None:
    """Collect a signed Prio3 task: every round, then store the result on the leader and close it.

    Prints the result as "estimate [interval] (privacy spent: ...)", then its warnings; progress on
    stderr (not with --json or --quiet). With --dap: collect one batch of a DAP-09 task from its
    leader (any DAP-09 leader, fedstats' ``server --dap`` or another) and print its aggregate.
    """
    dap_opts = DapCollect(
        credential, collector_token, vdaf, batch_start, batch_duration, current_batch, batch_id
    )
    if dap:
        collect_dap(ctx, task_id, dap_opts, timeout=job_timeout, json_flag=json_flag)
        return
    dap_opts.refuse_without_dap()
    tid = _task_id(task_id)
    _need_helper_token(helper_token)
    state = state_from(ctx, json_flag=json_flag)
    say = None if state.json or state.quiet else _stderr
    leader = _Api(_conn(ctx))
    helper = None
    try:
        helper = _helper(ctx, _helper_url(leader, tid), helper_token)
        payload = collect(leader, helper, tid, round_timeout=round_timeout, say=say)
        if not keep_open:
            _close_both(leader, helper, tid)
    except (AdminHTTPError, DataError) as exc:
        raise _fail(exc) from None
    except FedstatsError as exc:  # the plan refused a round's sum
        raise _fail(exc) from None
    finally:
        leader.close()
        if helper is not None:
            helper.close()

    def show(console: Console) -> None:
        console.print(released_summary(payload))
        for warning in payload.get("warnings") or ():
            console.print(f"warning: {warning}")

    emit(state, {"task_id": tid, "result": payload}, show)


@dataclass(frozen=True)
class DapCollect:
    """``admin collect --dap``'s options (all None or False without ``--dap``)."""

    credential: Path | None
    token: str | None
    vdaf: str | None
    batch_start: int | None
    batch_duration: int | None
    current_batch: bool
    batch_id: str | None

    _FLAGS = (
        ("credential", "--collector-credential"),
        ("token", "--collector-token"),
        ("vdaf", "--vdaf"),
        ("batch_start", "--batch-interval-start"),
        ("batch_duration", "--batch-interval-duration"),
        ("current_batch", "--current-batch"),
        ("batch_id", "--batch-id"),
    )

    def refuse_without_dap(self) -> None:
        """Refuse a DAP option given without ``--dap`` (a token from the environment aside)."""
        for attr, flag in self._FLAGS[2:]:
            if getattr(self, attr) not in (None, False):
                raise ParameterError(flag, getattr(self, attr), "only with --dap")
        if self.credential is not None:
            raise ParameterError("--collector-credential", str(self.credential), "only with --dap")

    def query(self) -> Query:
        """The DAP query: a batch interval, the current batch or a batch id (exactly one)."""
        interval = (self.batch_start, self.batch_duration)
        given = [interval != (None, None), self.current_batch, self.batch_id is not None]
        if sum(given) != 1:
            raise ParameterError(
                "--batch-interval-start",
                self.batch_start,
                "one batch: --batch-interval-start and --batch-interval-duration (time-interval "
                "task), or --current-batch, or --batch-id (fixed-size task)",
            )
        if self.current_batch:
            return Query(QUERY_FIXED_SIZE, fixed_size_query=FixedSizeQuery(None))
        if self.batch_id is not None:
            bid = b64decode(self.batch_id, "--batch-id", 32)
            return Query(QUERY_FIXED_SIZE, fixed_size_query=FixedSizeQuery(bid))
        start, duration = interval
        if start is None or start < 0:
            raise ParameterError("--batch-interval-start", start, "Unix seconds >= 0")
        if duration is None or duration < 1:
            raise ParameterError("--batch-interval-duration", duration, "seconds >= 1")
        return Query(QUERY_TIME_INTERVAL, batch_interval=Interval(start, duration))

    def collector_vdaf(self) -> Prio3:
        """The task's VDAF from ``--vdaf``: ``Name[:key=value,...]`` or the interop JSON object."""
        text = (self.vdaf or "").strip()
        if not text:
            raise ParameterError("--vdaf", self.vdaf, "the task's VDAF, e.g. Prio3Count")
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except ValueError:
                raise ParameterError(
                    "--vdaf", text, "a JSON object or Name:key=value,..."
                ) from None
        else:
            name, _, rest = text.partition(":")
            obj = {"type": name}
            for part in filter(None, rest.split(",")):
                key, eq, value = part.partition("=")
                if not eq or not key.strip():
                    raise ParameterError(
                        "--vdaf", text, "Name:key=value,... (e.g. Prio3Sum:bits=8)"
                    )
                obj[key.strip()] = value.strip()
        try:
            return vdaf_from_interop(obj)
        except (FedstatsError, TypeError) as exc:
            raise ParameterError("--vdaf", text, f"a Prio3 VDAF DAP names ({exc})") from None

    def read_credential(self) -> CollectorCredential:
        """The credential file, its token replaced by ``--collector-token`` if given."""
        if self.credential is None:
            raise ParameterError(
                "--collector-credential", None, "the collector's credential file (with --dap)"
            )
        try:
            text = self.credential.read_text()
        except OSError as exc:
            raise ParameterError(
                "--collector-credential", str(self.credential), f"a readable file ({exc.strerror})"
            ) from None
        cred = CollectorCredential.from_text(text, "--collector-credential")
        token = self.token or cred.token
        if not token:
            raise ParameterError(
                "--collector-token", None, "the collector's token (or a credential with one)"
            )
        return CollectorCredential(cred.keypair, token)


def collect_dap(
    ctx: typer.Context, task_text: str, opts: DapCollect, *, timeout: float, json_flag: bool
) -> None:
    """``admin collect --dap``: one batch of a DAP-09 task from the leader at ``--server``.

    Bad input (the task id, the credential, the VDAF, the batch, the URL or CA) is refused before any
    request, one ``error:`` line and exit 2; the leader's refusal, no answer, a share that does not
    open or a job not done within ``timeout`` seconds: one line and exit 1.
    """
    state = state_from(ctx, json_flag=json_flag)
    task_id = b64decode(task_text, "TASK_ID", 32)
    query, prio3, cred = opts.query(), opts.collector_vdaf(), opts.read_credential()
    conn = _conn(ctx)
    check_connection_options(conn.server, None)
    verify: Any = True
    if conn.ca is not None:
        try:
            verify = ssl.create_default_context(cafile=str(conn.ca))
        except (OSError, ssl.SSLError):
            raise ParameterError("--ca", str(conn.ca), "a PEM CA certificate file") from None
    assert cred.token is not None
    with httpx.Client(verify=verify, timeout=conn.timeout) as http:
        collector = Collector(
            leader=conn.server,
            task_id=task_id,
            auth_token=cred.token,
            hpke_keypair=cred.keypair,
            vdaf=prio3,
            http=http,
        )
        try:
            got = collector.collect(query, timeout=timeout, interval=1.0)
        except FedstatsError as exc:
            raise _fail(exc) from None
    agg = got.aggregate
    payload = {
        "task_id": task_text,
        "aggregate": agg,
        "report_count": got.report_count,
        "interval_start": got.interval.start,
        "interval_duration": got.interval.duration,
        "batch_id": None if got.batch_id is None else b64encode(got.batch_id),
    }

    def show(console: Console) -> None:
        where = f"batch {payload['batch_id']}, " if got.batch_id is not None else ""
        console.print(
            f"{agg} ({got.report_count} reports; {where}interval [{got.interval.start}, "
            f"{got.interval.start + got.interval.duration}))"
        )

    emit(state, payload, show)


@prio3_app.command("collector-credential")
def collector_credential(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="The credential file to create (not overwritten).")],
    config_id: Annotated[
        int, typer.Option("--config-id", min=0, max=255, help="The HPKE config id.")
    ] = 1,
    json_flag: JsonOption = False,
) -> None:
    """Create a DAP collector credential (HPKE key pair and token) for ``admin collect --dap``.

    The file (mode 0600, refused if it exists) holds the private key and the token; the command prints
    what the aggregators' task needs: the HPKE config (base64url, the interop design's
    ``collector_hpke_config``) and the token (``collector_authentication_token``, the leader only).
    """
    state = state_from(ctx, json_flag=json_flag)
    cred = CollectorCredential.generate(config_id, secrets.token_urlsafe(32))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise ParameterError("PATH", str(path), f"a new file ({exc.strerror})") from None
    with os.fdopen(fd, "w") as f:
        json.dump(cred.to_json(), f, indent=1)
        f.write("\n")
    payload = {
        "path": str(path),
        "collector_hpke_config": b64encode(cred.keypair.config.encode()),
        "collector_authentication_token": cred.token,
    }
    emit(state, payload, lambda console: _kv_view(console, payload))


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _prio3_tasks(api: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    """``admin tasks list``'s Prio3 rows (on its first page): the server's signed Prio3 tasks.

    A server without ``--vdaf`` (404) has none.
    """
    if params.get("offset"):
        return []
    try:
        got = api.call(
            "GET", "/v1/vdaf/tasks", params={"population": params.get("population")}, retries=2
        )
    except AdminHTTPError:
        return []
    return [
        {**t, "route": "prio3"}
        for t in got.get("items", [])
        if params.get("analysis") in (None, t.get("analysis"))
    ]


def register(app: typer.Typer) -> None:
    """Add ``admin`` to the app, with its ``prio3`` group (``admin collect`` comes with this module).

    ``fedstats admin`` is registered through this module (:data:`fedstats.cli._commands.COMMANDS`), as
    it imports :mod:`fedstats.cli.admin`'s client, and not the other way round.
    """
    admin_app.add_typer(prio3_app, name="prio3")
    if _prio3_tasks not in admin.MORE_TASKS:
        admin.MORE_TASKS.append(_prio3_tasks)
    admin.register(app)
