"""``fedstats enroll``: the enrollment authority (separate from the server)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from fedstats._validation import check_identifier
from fedstats.errors import ParameterError
from fedstats.wire.enrollment import ANALYST_VALID_DAYS

enroll_app = typer.Typer(
    help="Enrollment authority: create it, issue device and analyst identities.",
    no_args_is_help=True,
)

AuthorityFolder = Annotated[Path, typer.Option("--authority", help="Folder of the authority.")]


@enroll_app.command("init")
def init(
    authority: Annotated[Path, typer.Option("--authority", help="Folder for the authority's key.")],
) -> None:
    """Create an authority; prints its public key (give authority.pub to the server)."""
    from fedstats.wire.enrollment import init_authority

    try:
        typer.echo(init_authority(authority))
    except OSError as exc:
        raise ParameterError(
            "--authority", str(authority), f"a writable folder ({exc.strerror})"
        ) from None


@enroll_app.command("client")
def client(
    authority: AuthorityFolder,
    client_id: Annotated[str, typer.Option("--client-id", help="Unique device name.")],
    out: Annotated[Path, typer.Option("--out", help="Identity file to write (mode 0600).")],
    population: Annotated[
        str, typer.Option("--population", help="Data population of the device.")
    ] = "default",
    valid_days: Annotated[
        float, typer.Option("--valid-days", min=0.01, help="Validity in days.")
    ] = 365.0,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace an existing identity file (a new key: the server must re-key the device, "
            "see docs/admin.md).",
        ),
    ] = False,
) -> None:
    """Issue a device identity: a fresh Ed25519 key and a certificate signed by the authority.

    An existing identity file is never overwritten without ``--force``: the server knows the device by
    its key, so a replaced key locks the device out until an operator re-keys it
    (``fedstats admin devices reinstate ID --certificate NEW_IDENTITY``).
    """
    from fedstats.wire.enrollment import issue_identity

    check_identifier("--client-id", client_id)
    check_identifier("--population", population)
    if str(out).strip() in ("", "."):
        raise ParameterError("--out", str(out), "a file path")
    if out.exists() and not force:
        raise ParameterError(
            "--out", str(out), "a path with no identity yet (this one exists; --force replaces it)"
        )
    _written(
        out, lambda: issue_identity(authority, client_id, population, out, valid_days=valid_days)
    )


@enroll_app.command("analyst")
def analyst(
    name: Annotated[str, typer.Argument(help="The analyst's name (or the population policy's).")],
    authority: AuthorityFolder,
    out: Annotated[Path, typer.Option("--out", help="Analyst identity file to write (mode 0600).")],
    population: Annotated[
        list[str],
        typer.Option("--population", help="A population its tasks may address (repeatable)."),
    ],
    valid_days: Annotated[
        float,
        typer.Option(
            "--valid-days",
            min=0.01,
            help="Validity in days: short (the longest a revoked analyst's tasks stay acceptable); "
            "renew with 'fedstats enroll renew-analyst'.",
        ),
    ] = ANALYST_VALID_DAYS,
) -> None:
    """Issue an analyst identity: a task-signing Ed25519 key and its certificate for the populations.

    Sign tasks with it (``fedstats admin tasks sign``); devices accept only tasks signed under a
    certificate of the authority they pinned. Keep the file with the analyst, never on the server.
    """
    from fedstats.wire.enrollment import issue_analyst

    check_identifier("name", name)
    for p in population:
        check_identifier("--population", p)
    _written(out, lambda: issue_analyst(authority, name, population, out, valid_days=valid_days))


@enroll_app.command("renew-analyst")
def renew_analyst_cmd(
    authority: AuthorityFolder,
    identity: Annotated[
        Path, typer.Option("--identity", help="The analyst identity file to renew (rewritten).")
    ],
    valid_days: Annotated[
        float, typer.Option("--valid-days", min=0.01, help="Validity in days from now.")
    ] = ANALYST_VALID_DAYS,
) -> None:
    """Certify an analyst's key again (same name and populations); refused for a revoked analyst.

    Prints the new certificate's ``not_after`` (Unix seconds). Tasks signed under the old certificate
    expire with it: sign them again to run them later.
    """
    from fedstats.wire.enrollment import renew_analyst

    ident = renew_analyst(authority, identity, valid_days=valid_days)
    typer.echo(str(ident["certificate"]["body"]["not_after"]))


@enroll_app.command("revoke-analyst")
def revoke_analyst_cmd(
    name: Annotated[str, typer.Argument(help="The analyst's name, as in its certificate.")],
    authority: AuthorityFolder,
) -> None:
    """Revoke an analyst: its certificate is never renewed nor re-issued.

    Servers and devices refuse its tasks once its current certificate expires (at most
    ``--valid-days`` of its last issue; docs/deploy.md, threat model).
    """
    from fedstats.wire.enrollment import revoke_analyst

    new = revoke_analyst(authority, name)
    typer.echo(f"analyst {name!r} {'revoked' if new else 'was revoked already'}")


def register(app: typer.Typer) -> None:
    """Add ``enroll`` to the app."""
    app.add_typer(enroll_app, name="enroll")


def _written(out: Path, write: Callable[[], object]) -> None:
    """``write()`` the identity file ``out`` and print its path; a failed write names ``--out``."""
    try:
        write()
    except OSError as exc:
        raise ParameterError("--out", str(out), f"a writable path ({exc.strerror})") from None
    typer.echo(str(out))
