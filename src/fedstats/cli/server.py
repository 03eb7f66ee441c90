"""``fedstats server``: run the aggregation server; ``dev-certs``, ``add-operator``, ``trust``."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from fedstats._validation import check_identifier
from fedstats.errors import ParameterError
from fedstats.service.http.heap import limit_arenas
from fedstats.service.http.settings import ServerSettings

_DEFAULT = ServerSettings  # every option's default below is the settings' (one home)

server_app = typer.Typer(
    help="The aggregation server (needs the 'service' extra).",
    no_args_is_help=False,
    invoke_without_command=True,
)

KEEP_ALIVE_SECONDS = 60
"""How long the server keeps an idle device connection open (uvicorn's ``timeout_keep_alive``)."""

DbOption = Annotated[
    str,
    typer.Option(
        "--db",
        help="Database URL: sqlite:///FILE (default ./fedstats.db) or postgresql+psycopg://...",
    ),
]


TlsCertOption = Annotated[Path | None, typer.Option("--tls-cert", help="Server certificate (PEM).")]
TlsKeyOption = Annotated[Path | None, typer.Option("--tls-key", help="Server private key (PEM).")]
AuthorityOption = Annotated[
    Path | None,
    typer.Option("--authority", help="Trust this enrollment authority's public key file."),
]
MaxBodyOption = Annotated[
    int, typer.Option("--max-body", min=1024, help="Largest request body, bytes.")
]
RateOption = Annotated[
    float,
    typer.Option(
        "--rate",
        min=0.1,
        help="Requests per second per verified device (per peer address for unsigned requests).",
    ),
]
BurstOption = Annotated[
    float, typer.Option("--burst", min=1.0, help="Burst of requests per client.")
]
AccessLogOption = Annotated[
    bool,
    typer.Option(
        "--access-log/--no-access-log",
        help="One JSON log line per request on stderr (server errors are logged either way).",
    ),
]
TickOption = Annotated[
    float,
    typer.Option(
        "--tick",
        min=0.01,
        help="Longest time between run-driver passes (devices' messages also start one at once).",
    ),
]
MaxWaitOption = Annotated[
    float,
    typer.Option(
        "--max-wait",
        min=0.0,
        max=3600.0,
        help="Longest a device's long poll or held secure-stage request is held, seconds"
        " (longer than the tasks' stage deadlines saves the devices a request per stage).",
    ),
]
LeaseSecondsOption = Annotated[
    float,
    typer.Option(
        "--lease-seconds",
        min=0.5,
        help="How long this process's claim on a run lasts unrenewed; then another server process "
        "on the same database takes it over.",
    ),
]
IdempotencyRetentionOption = Annotated[
    float,
    typer.Option(
        "--idempotency-retention",
        min=1.0,
        help="Seconds an admin write's Idempotency-Key and first answer are kept.",
    ),
]
ServerIdOption = Annotated[
    str | None,
    typer.Option(
        "--server-id",
        help="This process's name in run leases (default HOST:PORT: a restart on the same port "
        "resumes its runs at once).",
    ),
]
StoreThreadsOption = Annotated[
    int,
    typer.Option(
        "--store-threads",
        min=1,
        max=256,
        help="Threads running device requests' database work (more for a remote database).",
    ),
]
WorkCacheSecondsOption = Annotated[
    float,
    typer.Option(
        "--work-cache-seconds",
        min=0.1,
        max=3600.0,
        help="Longest life of a device's cached work list: a device's write through another "
        "server process is seen by this one within it.",
    ),
]
InsecureHttpOption = Annotated[
    bool,
    typer.Option(
        "--insecure-http",
        help="Development only: serve plain HTTP on a non-loopback address (reports of non-secure "
        "runs and operator tokens then travel in the clear).",
    ),
]
VdafOption = Annotated[
    bool,
    typer.Option(
        "--vdaf",
        help="Also serve the two-aggregator (Prio3) mode, /v1/vdaf/tasks (docs/vdaf.md); this server "
        "is the leader or the helper of each task.",
    ),
]
VdafPeerCaOption = Annotated[
    Path | None,
    typer.Option(
        "--vdaf-peer-ca",
        help="CA certificate (PEM) of the helper's TLS certificate, for the Prio3 tasks this server "
        "leads (default: the system's trust store).",
    ),
]
VdafBatchSizeOption = Annotated[
    int,
    typer.Option(
        "--vdaf-batch-size", min=1, max=100_000, help="Reports per Prio3 aggregation job."
    ),
]
DapOption = Annotated[
    bool,
    typer.Option(
        "--dap",
        help="Also serve DAP-09 for Prio3 tasks (/hpke_config, /tasks/{task-id}/...; docs/vdaf.md, "
        '"DAP"), with --vdaf-peer-ca and --vdaf-batch-size.',
    ),
]
DapInteropOption = Annotated[
    str | None,
    typer.Option(
        "--dap-interop",
        help="Test rigs only: also serve the DAP interop test design's unauthenticated "
        "/internal/test endpoints for one role: aggregator, client or collector.",
    ),
]
CohortTreeAboveOption = Annotated[
    str | None,
    typer.Option(
        "--cohort-tree-above",
        help="Secure runs whose check-in closes with more devices than this seed by their cohort tree "
        "(a committee of at most 40 members reveals; O(k log n) per device); 'none': never. Default 64.",
    ),
]
MaxConnectionsOption = Annotated[
    int | None,
    typer.Option(
        "--max-connections",
        min=1,
        help="Most client connections open at once (each one open file; default: the open-file"
        " limit, raised to its hard limit, minus 128 kept for the database and logs).",
    ),
]
MaxConnectionsPerPeerOption = Annotated[
    int,
    typer.Option(
        "--max-connections-per-peer",
        min=1,
        help="Most connections open at once from one peer address (503 beyond it).",
    ),
]
HeaderTimeoutOption = Annotated[
    float,
    typer.Option(
        "--header-timeout",
        min=0.1,
        max=3600.0,
        help="Seconds a request's headers may take to arrive (408 and closed after).",
    ),
]
RequestKeySecretOption = Annotated[
    Path | None,
    typer.Option(
        "--request-key-secret",
        envvar="FEDSTATS_REQUEST_KEY_SECRET_FILE",
        help="File holding the secret (64+ hex digits, e.g. from `openssl rand -hex 32`) devices'"
        " request keys are derived under: server processes behind one balancer given the same file"
        " accept each other's keys (default: one drawn once and kept in the database).",
    ),
]
CrashAfterOption = Annotated[
    str | None, typer.Option("--crash-after", hidden=True, envvar="FEDSTATS_CRASH_AFTER")
]


@server_app.callback()
def serve(
    ctx: typer.Context,
    db: DbOption = "sqlite:///fedstats.db",
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = 8443,
    tls_cert: TlsCertOption = None,
    tls_key: TlsKeyOption = None,
    authority: AuthorityOption = None,
    max_body: MaxBodyOption = _DEFAULT.max_body,
    rate: RateOption = _DEFAULT.rate,
    burst: BurstOption = _DEFAULT.burst,
    access_log: AccessLogOption = _DEFAULT.access_log,
    tick: TickOption = _DEFAULT.tick,
    max_wait: MaxWaitOption = _DEFAULT.max_wait,
    lease_seconds: LeaseSecondsOption = _DEFAULT.lease_seconds,
    idempotency_retention: IdempotencyRetentionOption = _DEFAULT.idempotency_retention,
    server_id: ServerIdOption = None,  # not the settings' default (a fresh name): HOST:PORT, below
    store_threads: StoreThreadsOption = _DEFAULT.store_threads,
    work_cache_seconds: WorkCacheSecondsOption = _DEFAULT.work_cache_seconds,
    insecure_http: InsecureHttpOption = False,
    vdaf: VdafOption = _DEFAULT.vdaf,
    vdaf_peer_ca: VdafPeerCaOption = None,
    vdaf_batch_size: VdafBatchSizeOption = _DEFAULT.vdaf_batch_size,
    dap: DapOption = _DEFAULT.dap,
    dap_interop: DapInteropOption = _DEFAULT.dap_interop,
    max_connections: MaxConnectionsOption = _DEFAULT.max_connections,
    max_connections_per_peer: MaxConnectionsPerPeerOption = _DEFAULT.max_connections_per_peer,
    header_timeout: HeaderTimeoutOption = _DEFAULT.header_timeout,
    request_key_secret: RequestKeySecretOption = None,
    cohort_tree_above: CohortTreeAboveOption = None,
    crash_after: CrashAfterOption = None,
) -> None:
    """Serve the admin and client APIs over HTTPS (--tls-cert/--tls-key); plain HTTP on loopback only."""
    if ctx.invoked_subcommand is not None:
        return
    if (tls_cert is None) != (tls_key is None):
        raise ParameterError("--tls-cert/--tls-key", "one of them", "both or neither")
    if vdaf_peer_ca is not None:
        from fedstats.service.http.tls import read_pem_certificates

        read_pem_certificates(vdaf_peer_ca, "--vdaf-peer-ca")
    key_secret = None if request_key_secret is None else read_key_secret(request_key_secret)
    tree_above = cohort_tree_option(cohort_tree_above)
    if tls_cert is None:
        if not is_loopback(host) and not insecure_http:
            raise ParameterError(
                "--host",
                host,
                "a loopback address without --tls-cert/--tls-key (or --insecure-http, for development)",
            )
        typer.echo(
            f"WARNING: serving plain HTTP on {host}:{port}: without TLS, reports and tokens can be "
            "read and altered on the way"
            + ("" if is_loopback(host) else " (--insecure-http: development only)"),
            err=True,
        )
    authority_key = None if authority is None else public_key_file(authority, "--authority")
    from fedstats.service.http.limits import open_file_limit

    connections = open_file_limit(max_connections)  # before any database is created
    if tls_cert is not None and tls_key is not None:
        from fedstats.service.http.tls import check_server_tls

        check_server_tls(tls_cert, tls_key)
    check_db_url(db)
    # bound before the database is opened: a busy port or a bad host is one line, no database made
    sockets = bind_sockets(host, port)
    import uvicorn

    from fedstats.service.domain.operators import trust_authority
    from fedstats.service.http.app import create_app
    from fedstats.service.http.limits import ConnectionGuard, guarded_protocol, protocol_class
    from fedstats.service.store import open_store

    _configure_process(plain_http=tls_cert is None)
    store = open_store(db, require_writable=True)  # refuse a read-only database (exit 2)
    if authority_key is not None:
        trust_authority(store, authority_key)
    app = create_app(
        store,
        ServerSettings(
            max_body=max_body,
            access_log=access_log,
            rate=rate,
            burst=burst,
            tick=tick,
            max_wait=max_wait,
            lease_seconds=lease_seconds,
            idempotency_retention=idempotency_retention,
            server_id=server_id or f"{socket.gethostname()}:{port}",
            store_threads=store_threads,
            work_cache_seconds=work_cache_seconds,
            vdaf=vdaf,
            vdaf_peer_ca=None if vdaf_peer_ca is None else str(vdaf_peer_ca),
            vdaf_batch_size=vdaf_batch_size,
            dap=dap,
            dap_interop=dap_interop,
            max_connections=connections,
            max_connections_per_peer=max_connections_per_peer,
            header_timeout=header_timeout,
            request_key_secret=key_secret,
            cohort_tree_above=tree_above,
        ),
        crash_after=crash_after,
    )
    guard = ConnectionGuard(connections, min(max_connections_per_peer, connections), header_timeout)
    app.state.connections = guard  # its counts in /metrics
    _settle_heap()
    quiet = StoppingApp(app)
    config = uvicorn.Config(
        quiet,
        host=host,
        port=port,
        loop=_loop_impl(),
        # open connections capped in all and per peer, request headers timed (service.http.limits)
        http=guarded_protocol(protocol_class(_http_impl()), guard),
        ssl_certfile=str(tls_cert) if tls_cert else None,
        ssl_keyfile=str(tls_key) if tls_key else None,
        log_level="warning",
        access_log=False,
        # held long polls would otherwise keep a stopping server up to ServerSettings.max_wait
        timeout_graceful_shutdown=3,
        # a device computing between two requests (a secure stage under load takes seconds) keeps its
        # connection: uvicorn's default of 5 s made each of 1,000 devices handshake TLS again ~5 times
        # per secure run
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    where = f"[{host}]" if ":" in host else host
    url = f"{'https' if tls_cert else 'http'}://{where}:{port}"

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:  # the socket is bound: say where (uvicorn's own line is silenced)
                typer.echo(f"fedstats server: listening on {url}", err=True)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            quiet.stopping = (
                True  # requests still held at the deadline are answered 503, not logged
            )
            await super().shutdown(sockets)

    server = Server(config)
    server.run(sockets=sockets)
    if not server.started:  # could not bind (address in use, permission): uvicorn logged why
        raise SystemExit(3)


class StoppingApp:
    """ASGI wrapper: a request cancelled by the server's shutdown is answered 503, with no traceback.

    Devices hold long polls (up to ``--max-wait``); at shutdown uvicorn waits ``timeout_graceful_shutdown``
    seconds, then cancels what is still running, and logged a traceback per held request. Once
    :attr:`stopping` is set, a cancelled HTTP request is answered ``503`` with ``Retry-After: 1`` and
    ``Connection: close`` instead (the device retries, against this server restarted or another one).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.stopping = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Run the request; a cancellation during shutdown becomes a 503."""
        started = False

        async def tracked(message: Any) -> None:
            nonlocal started
            if message.get("type") == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if not self.stopping or scope.get("type") != "http":
                raise
            if not started:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 503,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"retry-after", b"1"),
                            (b"connection", b"close"),
                        ],
                    }
                )
                await send(
                    {
                        "type": "http.response.body",
                        "body": b'{"detail": "the server is shutting down; retry"}',
                    }
                )


DB_URL_FORMS = ("sqlite:///", "postgresql+psycopg://", "memory://")
"""The ``--db`` URLs the store opens (``memory://``: an empty in-process state, for tests)."""


def check_db_url(db: str) -> None:
    """Refuse a ``--db`` that is not a database URL, or a SQLite one whose folder does not exist.

    Checked before anything opens it: an empty ``$DB`` or ``sqlite://x.db`` (two slashes: SQLAlchemy's
    in-memory form, with a path it refuses) is one ``error:`` line naming ``--db``.

    Raises
    ------
    ParameterError
        If ``db`` starts with none of :data:`DB_URL_FORMS`, or is ``sqlite:///PATH`` and PATH is empty or
        its folder is missing or not a folder.
    """
    if not db.startswith(DB_URL_FORMS) or db == "sqlite:///":
        raise ParameterError(
            "--db", db, "a database URL: sqlite:///FILE or postgresql+psycopg://USER@HOST:PORT/DB"
        )
    if db.startswith("sqlite:///"):
        folder = Path(db[len("sqlite:///") :].split("?", 1)[0]).parent
        if not folder.is_dir():
            raise ParameterError(
                "--db", db, f"a database in an existing, writable folder ({folder} is not a folder)"
            )


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on ``host``:``port``, bound now (before any database is opened or migrated).

    The first address ``host`` resolves to is bound, in the family uvicorn would use (IPv6 for an address
    with a colon, else IPv4), with ``SO_REUSEADDR`` so that a restart does not wait for the previous
    process's connections to time out.

    Raises
    ------
    ParameterError
        If ``host`` does not resolve (``--host``) or the port is in use or not allowed (``--port``).
    """
    try:
        infos = socket.getaddrinfo(
            host,
            port,
            # as uvicorn binds: IPv6 for an address with a colon, else IPv4 (localhost: 127.0.0.1)
            family=socket.AF_INET6 if ":" in host else socket.AF_INET,
            type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE,
        )
    except (OSError, UnicodeError) as exc:
        raise ParameterError(
            "--host", host, f"a local address or host name that resolves ({exc})"
        ) from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ParameterError(
            "--port" if exc.errno in (errno.EADDRINUSE, errno.EACCES) else "--host",
            f"{host}:{port}",
            f"an address this process can listen on ({exc.strerror or exc})",
        ) from None
    sock.set_inheritable(True)
    return [sock]


def read_key_secret(path: Path) -> bytes:
    """The request-key secret in file ``path`` (``fedstats server --request-key-secret``).

    Parameters
    ----------
    path : Path
        A text file of hex digits (whitespace ignored) encoding at least
        :data:`fedstats.wire.auth.REQUEST_KEY_SECRET_BYTES` bytes (``openssl rand -hex 32``).

    Returns
    -------
    bytes
        The secret.

    Raises
    ------
    ParameterError
        If the file cannot be read, is not hex, or holds too few bytes.
    """
    from fedstats.wire.auth import REQUEST_KEY_SECRET_BYTES as least

    try:
        secret = bytes.fromhex("".join(path.read_text(encoding="ascii").split()))
    except (OSError, UnicodeDecodeError, ValueError):
        raise ParameterError(
            "--request-key-secret", str(path), "a readable file of hex digits"
        ) from None
    if len(secret) < least:
        raise ParameterError(
            "--request-key-secret",
            f"{path} ({len(secret)} bytes)",
            f"at least {least} bytes ({2 * least} hex digits, e.g. `openssl rand -hex {least}`)",
        )
    return secret


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _loop_impl() -> str:
    """The event loop of uvicorn: ``uvloop`` where it is installed (``uvicorn[standard]``), else asyncio."""
    return "uvloop" if _importable("uvloop") else "asyncio"


def _http_impl() -> str:
    """The HTTP/1.1 parser of uvicorn: ``httptools`` where it is installed, else h11."""
    return "httptools" if _importable("httptools") else "h11"


def cohort_tree_option(text: str | None) -> int | None:
    """``--cohort-tree-above``: absent -> the settings' default (64), ``none`` -> None, else an int >= 1.

    Raises
    ------
    ParameterError
        For anything else.
    """
    if text is None:
        return _DEFAULT.cohort_tree_above
    if text.strip().lower() == "none":
        return None
    try:
        got = int(text)
    except ValueError:
        got = 0
    if got < 1:
        raise ParameterError("--cohort-tree-above", text, "an integer >= 1 or 'none'")
    return got


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1 or localhost)."""
    import ipaddress

    if host.strip().lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return (
            False  # a host name other than localhost, or 0.0.0.0-like wildcards resolve elsewhere
        )


def public_key_file(path: Path, option: str) -> str:
    """The Ed25519 public key (hex) in ``path``; refuse a file that holds private key material.

    The trust boundary (issue 25): the server never holds the enrollment authority's or an analyst's
    private key. An authority's ``authority.key``, a device's or an analyst's identity file (JSON with a
    ``private_key``) and any PEM private key are refused, so a mix-up cannot put signing power on the server.

    Raises
    ------
    SecurityError
        If the file holds a private key.
    ParameterError
        If it cannot be read or is not a 32-byte public key in hex.
    """
    import json

    from fedstats.errors import SecurityError
    from fedstats.wire import auth

    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ParameterError(option, str(path), f"a readable authority.pub ({exc})") from None
    private = "PRIVATE KEY" in text
    if text.startswith("{"):
        try:
            private = private or "private_key" in json.loads(text)
        except (ValueError, TypeError):
            pass
    if private:
        raise SecurityError(
            f"{option} {path} holds a private key: the server must only ever get a public key "
            "(authority.pub); keep the authority's and analysts' private keys off the server"
        )
    try:
        auth.public_key_from_hex(text)
    except SecurityError:
        raise ParameterError(
            option, str(path), "a file with an Ed25519 public key in hex"
        ) from None
    return text


def _configure_process(*, plain_http: bool) -> None:
    """Log JSON lines to stderr and limit the allocator's arenas, before any thread starts."""
    from fedstats.service.http.edge import JsonLogFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter())  # one JSON object per line, ISO timestamps
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    if plain_http:  # the warning printed by serve, also in the structured log
        logging.getLogger("fedstats.service").warning(
            '{"event": "plain_http", "message": "serving plain HTTP: no TLS (development only)"}'
        )
    # few allocator arenas: memory freed by the many pool threads can be given back (service.http.heap)
    limit_arenas()


_GC_THRESHOLDS = (50_000, 20, 10)
"""The server's collector thresholds (:func:`gc.set_threshold`: allocations before a young collection,
young collections before a middle one, middle ones before a full one; Python's defaults 700, 10, 10)."""


def _settle_heap() -> None:
    """Import what a release needs now, then move every object alive at start-up out of the collector's view.

    A server process keeps tens of thousands of long-lived objects (modules, the ASGI app, the ORM's
    mappings), and each full collection walked them all (a sampling profiler put the collector high in a
    secure run of ``benchmarks/service_secagg.py``). ``gc.freeze`` leaves them out of every later
    collection; objects created by requests are collected as before.

    The collector then runs less often (:data:`_GC_THRESHOLDS`): with the default thresholds
    (700, 10, 10) the objects of requests held while a thousand others are served (their scopes,
    coroutines, futures) outlive a few hundred allocations and are promoted to the older generations,
    so each device cost more collection work the larger its session. The collector's thread time over
    an n = 1,000 secure run was 3.3 s with the defaults and 1.3 s with these (``docs/deploy.md``,
    "Start-up", gives the commands: ``benchmarks/service_secagg.py --scale`` with
    ``FEDSTATS_BENCH_GCTIME`` and ``FEDSTATS_BENCH_GC_THRESHOLDS``). Garbage without cycles is freed at
    once whatever the thresholds; cyclic garbage waits for the next collection of its generation.
    """
    import gc

    import scipy.special  # noqa: F401  (what a FED-chi^2 or FED-H release needs: fedstats._numeric)

    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)


@server_app.command("dev-certs")
def dev_certs(
    out: Annotated[
        Path, typer.Option("--out", help="Folder for ca.pem, server.pem, server-key.pem.")
    ],
    host: Annotated[
        list[str] | None, typer.Option("--host", help="Host name or IP (repeatable).")
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace an existing CA in --out (devices pinning the old one are cut off).",
        ),
    ] = False,
) -> None:
    """Create a development CA and a server certificate signed by it (an existing CA is kept)."""
    from fedstats.service.http.tls import make_dev_certificates

    hosts = ["127.0.0.1", "localhost"] if host is None else list(host)
    paths = make_dev_certificates(out, hosts, force=force)
    for role, p in paths.items():
        typer.echo(f"{role}: {p}")


@server_app.command("add-operator")
def add_operator_cmd(
    name: Annotated[str, typer.Option("--name", help="Operator (analyst) name.")],
    db: DbOption = "sqlite:///fedstats.db",
) -> None:
    """Create an operator and print its bearer token (stored hashed; shown only now).

    An existing name is refused (its token is replaced only by ``rotate-operator``).
    """
    from fedstats.service.domain.operators import add_operator
    from fedstats.service.store import open_store

    check_identifier("--name", name)
    check_db_url(db)
    store = open_store(db, require_writable=True)
    try:
        token = add_operator(store, name)
    except ParameterError:
        raise ParameterError(
            "--name",
            name,
            "a new operator name (this one exists; 'fedstats server rotate-operator' replaces its "
            "token)",
        ) from None
    typer.echo(token)


@server_app.command("rotate-operator")
def rotate_operator_cmd(
    name: Annotated[str, typer.Option("--name", help="Operator whose token to replace.")],
    db: DbOption = "sqlite:///fedstats.db",
) -> None:
    """Issue a new bearer token for an operator and print it; the old token stops working at once."""
    from fedstats.service.domain.operators import rotate_operator
    from fedstats.service.domain.tasks import NotFoundError
    from fedstats.service.store import open_store

    check_db_url(db)
    store = open_store(db, require_writable=True)
    try:
        token = rotate_operator(store, name)
    except NotFoundError:
        raise ParameterError("--name", name, "an existing operator") from None
    typer.echo(token)
    typer.echo(f"the previous token of operator {name!r} no longer works", err=True)


@server_app.command("trust")
def trust_cmd(
    authority: Annotated[
        Path, typer.Option("--authority", help="authority.pub of an enrollment authority.")
    ],
    db: DbOption = "sqlite:///fedstats.db",
) -> None:
    """Trust an enrollment authority (its public key only)."""
    from fedstats.service.domain.operators import trust_authority
    from fedstats.service.store import open_store

    key = public_key_file(authority, "--authority")
    check_db_url(db)
    typer.echo(trust_authority(open_store(db, require_writable=True), key))


def register(app: typer.Typer) -> None:
    """Add ``server`` to the app."""
    app.add_typer(server_app, name="server")
