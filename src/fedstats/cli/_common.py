"""Shared pieces of the command line: global state, options, output, progress and error handling.

Conventions every command follows:

* ``--json`` prints exactly one JSON object on stdout (nothing else goes to stdout);
* progress bars and messages go to stderr, never with ``--quiet``;
* a :class:`~fedstats.errors.FedstatsError` or a usage error prints one line ``error: ...`` on stderr and
  exits with code 2 (see :class:`FedstatsGroup`), with no traceback;
* files are written atomically (:func:`atomic_write_text`), so an error never leaves half a file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from fedstats._io import atomic_write_text
from fedstats.errors import FedstatsError, ParameterError
from fedstats.progress import NullProgress, Progress

if (
    TYPE_CHECKING
):  # imported where used: ``fedstats --help`` loads neither rich, numpy nor the engine
    from rich.console import Console
    from rich.progress import Progress as RichProgressBar

    from fedstats.engine import Engine
    from fedstats.randomness import RandomSource

__all__ = [
    "LONG_SECONDS",
    "TYPER_SETTINGS",
    "AllowLongOption",
    "BackendOption",
    "CliState",
    "DataDirOption",
    "FedstatsGroup",
    "JsonOption",
    "RichProgress",
    "SchedulerOption",
    "SeedOption",
    "ShardSizeOption",
    "WorkersOption",
    "add_warning",
    "atomic_write_text",
    "check_applies",
    "check_distinct_columns",
    "check_interval",
    "check_route_options",
    "emit",
    "engine_for",
    "engine_session",
    "fmt_value",
    "given",
    "out_path",
    "print_rows",
    "progress_for",
    "release",
    "release_line",
    "report_warnings",
    "state_from",
    "warn_duration",
]


class OutputClosedError(FedstatsError):
    """Standard output was closed, or its reader went away, before the result was written."""


class ResourceLimitError(FedstatsError):
    """The request needs more memory (or time) than this machine can give it."""


PARAMETER_FLAGS: dict[str, str] = {
    "n_clients": "--clients",
    "clients": "--clients",
    "ratios": "--label-ratio",
    "epsilon_budget": "--epsilon",
    "delta_budget": "--delta",
}
"""Library parameter names whose command-line flag is not ``--`` + the name with dashes."""


def flag_for(command: Any, name: str) -> str | None:
    """The ``--flag`` of ``command`` that sets the library parameter ``name``, if it has one.

    This is the one place where library errors (which name the Python parameter, ``encoding_size``) are
    translated into the user's vocabulary on the command line (``--encoding-size``).

    Parameters
    ----------
    command : click.Command or None
        The command that ran.
    name : str
        The parameter named by a :class:`~fedstats.errors.ParameterError`.

    Returns
    -------
    str or None
        The flag, or None when the command has no option for that parameter.
    """
    if command is None or name.startswith("-"):
        return None
    wanted = {name, PARAMETER_FLAGS.get(name, "")}
    for param in getattr(command, "params", ()):
        opts = [o for o in getattr(param, "opts", ()) if o.startswith("--")]
        if not opts:
            continue
        if param.name == name or wanted & set(opts) or opts[0] == "--" + name.replace("_", "-"):
            return str(opts[0])
    return None


TYPER_SETTINGS: dict[str, Any] = {
    "add_completion": False,
    "pretty_exceptions_enable": False,
    "rich_markup_mode": None,
}
"""What every typer application of the CLI sets: no completion commands, plain tracebacks, plain help."""


class FedstatsGroup(TyperGroup):
    """Typer group that turns user errors into one ``error: ...`` line on stderr and exit code 2.

    A :class:`~fedstats.errors.ParameterError` that names a library parameter is re-worded with the flag
    of the command that ran (:func:`flag_for`), so library code never spells command-line flags.
    """

    def invoke(self, ctx: Any) -> Any:
        """Invoke the subcommand, translating library parameter names into its flags.

        A closed standard output, a vanished pipe reader and exhausted memory become one-line errors too
        (exit 2), never a traceback or click's silent exit 1; Ctrl-C is one ``aborted`` line (exit 130).
        """
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # typer turns an interrupt into a silent exit 130; make it the one "aborted" line instead
            raise typer.Abort() from None
        except MemoryError:
            raise ResourceLimitError(
                "the machine ran out of memory for this request (reduce the number of clients, the "
                "vector length or the encoding size)"
            ) from None
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.EBADF):
                raise
            if sys.stdout is not None:
                with contextlib.suppress(OSError, ValueError):
                    # keep the interpreter's final flush from failing again on the dead stream
                    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise OutputClosedError(f"cannot write the output ({exc.strerror})") from None
        except ParameterError as exc:
            sub = ctx.invoked_subcommand
            flag = flag_for(self.get_command(ctx, sub) if sub else None, exc.name)
            if flag is None:
                raise
            raise ParameterError(flag, exc.value, exc.accepted) from exc

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the CLI; see the module docstring for the error convention."""
        code: Any
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.TyperException as exc:  # click's usage errors (typer vendors click)
            message = " ".join(exc.format_message().split())
            ctx = getattr(exc, "ctx", None)
            if exc.exit_code == 2:
                cmd = ctx.command_path if ctx is not None else "fedstats"
                message += f" (see '{cmd} --help')"
            typer.echo(f"error: {message}", err=True)
            code = exc.exit_code
        except FedstatsError as exc:
            typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
            code = 2
        except (typer.Abort, KeyboardInterrupt):
            typer.echo("aborted", err=True)
            code = 130
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


@dataclass
class CliState:
    """Global options (``fedstats --seed S --json --quiet --data-dir D COMMAND``)."""

    seed: int | None = None
    json: bool = False
    quiet: bool = False
    data_dir: Path | None = None
    engine: Engine | None = None
    """The engine of the command, once :func:`engine_for` made it (its route and retries are reported)."""

    @property
    def randomness(self) -> RandomSource:
        """Secure source, or a reproducible one when ``--seed`` was given."""
        from fedstats.randomness import RandomSource

        return RandomSource(self.seed)


JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
SeedOption = Annotated[
    int | None,
    typer.Option("--seed", min=0, help="Seed for a reproducible run (marked 'not for release')."),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", help="Folder of the real datasets (default: $FEDSTATS_DATA, ../shared/data)."
    ),
]


BackendOption = Annotated[
    str,
    typer.Option(
        "--backend",
        help="Route for each round's sum: serial, secure, process, dask (bit-identical for a seed) or "
        "aggregate (closed-form sums per distinct input: equal in distribution, any number of clients).",
    ),
]
WorkersOption = Annotated[
    int | None, typer.Option("--workers", min=1, help="Worker processes (process/dask backends).")
]
SchedulerOption = Annotated[
    str | None, typer.Option("--scheduler", help="Address of a running Dask scheduler.")
]
ShardSizeOption = Annotated[
    int, typer.Option("--shard-size", min=1, help="Clients per shard (never changes the result).")
]
AllowLongOption = Annotated[
    bool,
    typer.Option(
        "--allow-long",
        help="Start a run estimated to take more than an hour on this machine (refused otherwise).",
    ),
]


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the option ``name`` (its Python name) was given on the command line or by the environment.

    Parameters
    ----------
    ctx : typer.Context
        The running command's context.
    name : str
        The parameter's Python name (``"workers"``).

    Returns
    -------
    bool
        False when it took its default (or the command has no such option).
    """
    source = ctx.get_parameter_source(name)
    # compared by name: typer may run on its own copy of click, with its own ParameterSource enum
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _flag(ctx: typer.Context, name: str) -> str:
    for param in ctx.command.params:
        if param.name == name:
            longs = [o for o in param.opts if o.startswith("--")]
            return longs[0] if longs else param.opts[0]
    return "--" + name.replace("_", "-")


def check_applies(ctx: typer.Context, name: str, applies: bool, accepted: str) -> None:
    """Refuse an option that was given but that the chosen backend, protocol or mode would ignore.

    Parameters
    ----------
    ctx : typer.Context
    name : str
        The option's Python name.
    applies : bool
        Whether the option has any effect in this run.
    accepted : str
        When it applies, in words (``"only with --backend dask"``).

    Raises
    ------
    ParameterError
        Naming the option's flag, if it was given and does not apply.
    """
    if not applies and given(ctx, name):
        raise ParameterError(_flag(ctx, name), ctx.params.get(name), accepted)


def check_route_options(ctx: typer.Context, backend: str) -> None:
    """Refuse the route options that the route ``backend`` would ignore.

    ``--workers`` is for process/dask, ``--scheduler`` for dask, ``--shard-size`` for the routes that
    work in shards (serial, process, dask; not secure or aggregate).

    Raises
    ------
    ParameterError
        Naming the option that the route ``backend`` would ignore.
    """
    check_applies(
        ctx,
        "workers",
        backend in ("process", "dask"),
        f"unset unless --backend process or dask (the {backend} route runs in this process)",
    )
    check_applies(
        ctx, "scheduler", backend == "dask", f"unset unless --backend dask (not {backend})"
    )
    check_applies(
        ctx,
        "shard_size",
        backend in ("serial", "process", "dask"),
        f"unset with the {backend} route (only serial, process and dask work in shards)",
    )


def check_distinct_columns(roles: dict[str, str | None]) -> None:
    """Refuse one column in two roles (``--x`` equal to ``--y``, a column both group and value, ...).

    Parameters
    ----------
    roles : dict
        Flag -> the column given for it (None when the option was not given), in command-line order.

    Raises
    ------
    ParameterError
        Naming the second flag that repeats a column.
    """
    seen: dict[str, str] = {}
    for flag, col in roles.items():
        if col is None:
            continue
        if col in seen:
            raise ParameterError(
                flag,
                col,
                f"a column other than the {seen[col]} column {col!r} (one column cannot play two roles)",
            )
        seen[col] = flag


def out_path(value: str | None, flag: str = "--out") -> Path | None:
    """The path of an ``--out`` option given as text, refusing an empty one (it would mean ``.``).

    Raises
    ------
    ParameterError
        If ``value`` is empty or only blanks.
    """
    if value is None:
        return None
    if not value.strip():
        raise ParameterError(flag, value, "a non-empty path (use . for the current folder)")
    return Path(value)


def open_backend(name: str = "serial", **options: Any) -> AbstractContextManager[Any]:
    """:func:`fedstats.engine.routes.open_backend`, imported on first use (the engine loads numpy).

    Parameters
    ----------
    name : str
        The route (``serial``, ``secure``, ``process``, ``dask`` or ``aggregate``).
    **options
        As for :func:`fedstats.engine.routes.open_backend`.

    Returns
    -------
    contextlib.AbstractContextManager
        Yields the backend and closes it on exit.
    """
    from fedstats.engine.routes import open_backend as open_route

    return open_route(name, **options)


@contextmanager
def engine_for(
    state: CliState,
    progress: Any,
    *,
    backend: str = "serial",
    workers: int | None = None,
    scheduler: str | None = None,
    shard_size: int = 1 << 20,
    **options: Any,
) -> Iterator[Engine]:
    """An :class:`~fedstats.engine.Engine` on the chosen route, closed (cluster shut down) on exit."""
    from fedstats.engine import Engine

    with open_backend(
        backend, shard_size=shard_size, workers=workers, scheduler=scheduler, **options
    ) as be:
        state.engine = Engine(be, state.randomness, progress=progress)
        yield state.engine


@contextmanager
def engine_session(state: CliState, **route: Any) -> Iterator[Engine]:
    """A progress display (:func:`progress_for`) and an engine on it (:func:`engine_for`), both closed.

    ``route`` holds :func:`engine_for`'s ``backend``, ``workers``, ``scheduler`` and ``shard_size``.
    """
    with progress_for(state) as progress, engine_for(state, progress, **route) as engine:
        yield engine


def state_from(
    ctx: typer.Context,
    *,
    json_flag: bool = False,
    seed: int | None = None,
    data_dir: Path | None = None,
) -> CliState:
    """Merge the global options with a command's own ``--json``/``--seed``/``--data-dir``."""
    base = ctx.find_root().obj if ctx.find_root().obj is not None else CliState()
    assert isinstance(base, CliState)
    return CliState(
        seed=seed if seed is not None else base.seed,
        json=json_flag or base.json,
        quiet=base.quiet,
        data_dir=data_dir if data_dir is not None else base.data_dir,
    )


@cache
def _stdout_console_class() -> type[Console]:
    """A rich console whose broken pipe becomes the CLI's one-line error (rich would exit 1 silently).

    Defined on first use, so that rich is imported only by a command that prints with it.
    """
    from rich.console import Console

    class _StdoutConsole(Console):
        def on_broken_pipe(self) -> None:
            """Raise ``BrokenPipeError`` for :meth:`FedstatsGroup.main` to report."""
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader of standard output went away")

    return _StdoutConsole


def stdout_console() -> Console:
    """Console for human-readable output on stdout (160 columns when piped, else the terminal's)."""
    if sys.stdout is None:
        raise OSError(errno.EBADF, "standard output is closed")
    return _stdout_console_class()(highlight=False, width=None if sys.stdout.isatty() else 160)


def stderr_console() -> Console:
    """Console for messages and progress on stderr."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def fmt_value(value: Any) -> str:
    """A cell of a text table.

    Parameters
    ----------
    value : object
        None, a float, a list or tuple (formatted item by item), or anything with ``str``.

    Returns
    -------
    str
        ``-`` for None, floats to 6 significant digits.

    Examples
    --------
    >>> fmt_value([0.1234567, None, 3])
    '[0.123457, -, 3]'
    """
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(fmt_value(v) for v in value) + "]"
    return str(value)


def emit(
    state: CliState, payload: dict[str, Any], render: Callable[[Console], None] | None = None
) -> None:
    """Print a command's result: one JSON object with ``--json``, else ``render`` (or a key/value table).

    Parameters
    ----------
    state : CliState
    payload : dict
        The result; converted with :func:`fedstats.results.to_jsonable`.
    render : callable, optional
        Draws the human-readable form on a rich console.
    """
    if state.engine is not None:
        # the route and how many shards were recomputed after a worker died (issue 9)
        be = state.engine.backend
        payload = {**payload, "backend": be.name, "route": be.name, "retries": state.engine.retries}
        note = getattr(be, "note", None)
        if note:
            payload["route_note"] = note
        if state.engine.retries and not state.quiet:
            stderr_console().print(
                f"{state.engine.retries} shard(s) recomputed after a worker died"
            )
    if sys.stdout is None:  # started with standard output closed
        raise OSError(errno.EBADF, "standard output is closed")
    from fedstats.results import non_finite_fields, to_jsonable

    data = to_jsonable(payload)
    why = non_finite_fields(payload)
    if why and isinstance(data, dict):
        data.setdefault("non_finite", why)
    if state.json:
        sys.stdout.write(json.dumps(data, sort_keys=False) + "\n")
        sys.stdout.flush()  # a closed pipe fails here, inside the error handling, not at exit
        return
    console = stdout_console()
    if render is not None:
        render(console)
        return
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for key, value in data.items():
        table.add_row(
            str(key), json.dumps(value) if isinstance(value, (list, dict)) else str(value)
        )
    console.print(table)


def print_rows(console: Console, title: str, rows: list[tuple[str, str]], *lines: str) -> None:
    """Print a quantity/value table without a header, then each non-empty line (notes, release note)."""
    from rich.table import Table

    t = Table(title=title, show_header=False)
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)
    for line in lines:
        if line:
            console.print(line)


def release_line(payload: dict[str, Any]) -> str:
    """The payload's release note, dimmed for the text output ("" without one)."""
    return f"[dim]{payload['release_note']}[/dim]" if payload.get("release_note") else ""


def add_warning(state: CliState, payload: dict[str, Any], message: str) -> None:
    """Record a warning in the result (``details["warnings"]``) and print it on stderr (unless --quiet).

    Used when a result would otherwise look more certain than it is (a zero-width interval, an estimate
    clipped as post-processing, a decision made on a handful of survivors).
    """
    details = payload.setdefault("details", {})
    details.setdefault("warnings", []).append(message)
    if not state.quiet:
        typer.echo(f"warning: {message}", err=True)


def report_warnings(state: CliState, payload: dict[str, Any], result: Any, **kwargs: Any) -> None:
    """Put the result's warnings in ``payload["warnings"]`` and print each on stderr (unless --quiet).

    The usefulness warnings (:func:`fedstats.analyses.usefulness.attach_warnings`: an interval covering
    most of the declared range, a test with little power) are computed here if the library did not attach
    them (fast paths); the command's own (:func:`add_warning`, already printed) follow them.

    Parameters
    ----------
    state : CliState
    payload : dict
        The command's output, changed in place.
    result : AnalysisResult
        The result behind it.
    **kwargs
        Passed to :func:`~fedstats.analyses.usefulness.attach_warnings` (``n_records``, ``effect``).
    """
    from fedstats.analyses.usefulness import attach_warnings

    attach_warnings(result, **kwargs)
    own = list(payload.get("details", {}).get("warnings", []))
    found = list(getattr(result, "warnings", ()) or ())
    if not state.quiet:
        for message in found:
            if message not in own:
                typer.echo(f"warning: {message}", err=True)
    payload["warnings"] = list(dict.fromkeys([*found, *own]))


def check_interval(state: CliState, payload: dict[str, Any], *, n_clients: int | None) -> None:
    """Warn when the reported interval has zero width: it cannot carry its nominal confidence."""
    ci = payload.get("ci")
    if not ci or ci[0] is None or ci[1] is None or ci[1] > ci[0]:
        return
    why = f"only {n_clients} clients" if n_clients is not None and n_clients < 30 else "no spread"
    add_warning(
        state,
        payload,
        f"the {100 * float(payload.get('confidence', 0.95)):g}% interval has zero width ({why}, e.g. "
        "every value clipped to the declared range): it cannot be trusted as a confidence interval",
    )


def release(
    state: CliState,
    payload: dict[str, Any],
    result: Any,
    render: Callable[[Console], None] | None,
    warnings: Iterable[str] = (),
) -> None:
    """Finish an analysis command: its warnings, the zero-width check, the usefulness warnings, the output.

    ``warnings`` (the library's and the command's own) are recorded and printed first
    (:func:`add_warning`), then :func:`check_interval`, :func:`report_warnings` and :func:`emit`.
    """
    for message in warnings:
        add_warning(state, payload, message)
    check_interval(state, payload, n_clients=payload.get("n_clients"))
    report_warnings(state, payload, result)
    emit(state, payload, render)


CALIBRATION_CLIENTS = 50_000
"""Clients in the calibration run of :func:`warn_duration`."""

SLOWEST_SECONDS_PER_CLIENT = 2e-5
"""An upper bound of the per-client time of every per-client route (one core; the slowest measured, the
adaptive variance with dask, is about 5x below it): below ``WARN_SECONDS / SLOWEST_SECONDS_PER_CLIENT``
clients no calibration runs."""

LONG_SECONDS = 3600.0
"""Runs estimated above this are refused unless ``--allow-long`` is given."""

_RATES: dict[str, float] = {}


def warn_duration(
    state: CliState,
    n_clients: int,
    *,
    backend: str,
    workers: int | None,
    probe: Callable[[int], object],
    key: str,
    allow_long: bool = False,
) -> None:
    """Before a long per-client run, refuse it above an hour, or warn with its estimated duration.

    The per-client CPU time is *measured*: ``probe(CALIBRATION_CLIENTS)`` runs the same computation on
    :data:`CALIBRATION_CLIENTS` clients with the serial engine (cached per process under ``key``), and
    the estimate is ``n_clients`` x that rate / workers. Nothing runs on the ``aggregate`` route (closed
    form, any number of clients) or when even the slowest route (:data:`SLOWEST_SECONDS_PER_CLIENT`)
    would finish within a few minutes; with ``--quiet`` the estimate still runs (a long run is refused),
    but no warning is printed.

    Raises
    ------
    ResourceLimitError
        If the estimate exceeds :data:`LONG_SECONDS` and ``allow_long`` is False; the message gives the
        estimate and points to ``--backend aggregate`` and ``--allow-long``.
    """
    from fedstats._resources import WARN_SECONDS, duration_warning, human_seconds

    if backend == "aggregate":
        return
    parallel = max(1, workers or 1)
    if n_clients * SLOWEST_SECONDS_PER_CLIENT / parallel <= WARN_SECONDS:
        return
    rate = _RATES.get(key)
    if rate is None:
        t0 = time.process_time()
        probe(CALIBRATION_CLIENTS)
        rate = _RATES[key] = (time.process_time() - t0) / CALIBRATION_CLIENTS
    seconds = n_clients * rate / parallel
    what = f"{n_clients} simulated clients on the {backend} route"
    if seconds > LONG_SECONDS and not allow_long:
        raise ResourceLimitError(
            f"{what} would take about {human_seconds(seconds)} on this machine (more than an "
            "hour): use --backend aggregate (closed-form sums, any number "
            "of clients), fewer --clients, or --allow-long to start it anyway"
        )
    message = duration_warning(seconds, what=what)
    if message is not None and not state.quiet:
        typer.echo(message, err=True)


class RichProgress:
    """A :class:`fedstats.progress.Progress` drawn as rich progress bars on stderr."""

    def __init__(self, bar: RichProgressBar) -> None:
        self._bar = bar
        self._tasks: dict[str, Any] = {}

    def start(self, task: str, total: int) -> None:
        """Open a bar."""
        self._tasks[task] = self._bar.add_task(task, total=total)

    def advance(self, task: str, n: int = 1) -> None:
        """Advance a bar."""
        if task in self._tasks:
            self._bar.advance(self._tasks[task], n)

    def finish(self, task: str) -> None:
        """Close a bar."""
        if task in self._tasks:
            self._bar.remove_task(self._tasks.pop(task))


@contextmanager
def progress_for(state: CliState) -> Iterator[Progress]:
    """Progress bars on stderr for the duration of a command (none with ``--quiet``).

    Bars appear only once a task has run for about a second, and vanish when done. With ``--quiet`` the
    progress is a :class:`~fedstats.progress.NullProgress` (rich is not even imported).
    """
    if state.quiet:
        yield NullProgress()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgressBar

    bar = RichProgressBar(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr_console(),
        transient=True,
        refresh_per_second=4,
    )
    with bar:
        yield RichProgress(bar)
