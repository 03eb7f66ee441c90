"""The ``fedstats`` command: the entry point, and the registry of subcommand modules.

This module is light on purpose: it imports neither typer, rich, numpy nor pandas, so :func:`main` answers
``fedstats --version`` from the package metadata alone, and ``fedstats --help`` lists every command from
:data:`~fedstats.cli._commands.SUMMARIES` without importing the command modules. The typer application itself (global options,
:class:`~fedstats.cli._app.LazyGroup`) lives in :mod:`fedstats.cli._app` and is built on first use:
``from fedstats.cli.app import app`` still gives it.

Each module named in :data:`~fedstats.cli._commands.COMMANDS` defines ``register(app: typer.Typer) -> None`` adding its command(s);
it is imported only when one of its commands runs. Global options go before the command:
``fedstats --seed 1 --json demo``; most commands also take ``--json`` and ``--seed`` after their name.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedstats.cli._app import LazyGroup, app

__all__ = ["LazyGroup", "app", "main"]

_VERSION_ONLY = frozenset({"--version", "--json", "--quiet", "-q"})
"""Global flags that :func:`main` may answer alone (``--version``, with ``--json`` for a JSON object)."""


def _version_line(argv: Sequence[str]) -> str | None:
    """The output of ``fedstats ARGV`` when it only asks for the version, else None.

    Only the flags in :data:`_VERSION_ONLY` qualify: anything else (``--help``, ``--seed 3``, a command)
    goes through the typer application, which answers the same way when ``--version`` is among them.
    """
    if "--version" not in argv or not set(argv) <= _VERSION_ONLY:
        return None
    from fedstats import __version__

    if "--json" in argv:
        import json

        return json.dumps({"version": __version__})
    return f"fedstats {__version__}"


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``fedstats`` script.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after the program name (default ``sys.argv[1:]``).

    Raises
    ------
    SystemExit
        Always: 0 on success, 2 on a usage or input error (one ``error: ...`` line on stderr), 130 when
        interrupted; see :class:`fedstats.cli._common.FedstatsGroup`.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    line = _version_line(args)
    if line is not None:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (AttributeError, OSError, ValueError) as exc:  # stdout closed, or its reader gone
            why = getattr(exc, "strerror", None) or "standard output is closed"
            sys.stderr.write(f"error: cannot write the output ({why})\n")
            raise SystemExit(2) from None
        raise SystemExit(0)
    from fedstats.cli._app import app as application

    if argv is None:
        application()  # click reads sys.argv and names the program after sys.argv[0], as before
    else:
        application(args)


def __getattr__(name: str) -> Any:
    """Build the typer application (``app``, ``LazyGroup``) on first use: it costs typer's import."""
    if name in ("app", "LazyGroup"):
        from fedstats.cli import _app

        value = getattr(_app, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
