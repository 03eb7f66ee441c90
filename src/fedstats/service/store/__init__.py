"""The store: database engines, migrations and transactions; SQLite (a file, the embedded default) or PostgreSQL.

The service's only SQL is here. :meth:`Store.transaction` opens one transaction and yields a :class:`Tx`,
whose methods are the typed queries of the core path (:mod:`.core`), of secure runs (:mod:`.secure`) and
of Prio3 tasks (:mod:`.vdaf`): SQLAlchemy Core statements on the transaction's connection, taking and
returning plain values and frozen dataclasses (never ORM rows). A read-only transaction
(``read_only=True``) starts with a plain ``BEGIN`` on SQLite.

:func:`open_store` creates the SQLAlchemy engine for a URL and brings the schema to the newest Alembic
revision shipped in ``fedstats/service/store/migrations``. On SQLite every transaction starts with
``BEGIN IMMEDIATE`` (one writer at a time, so a read-then-write transaction such as a ledger reservation
cannot interleave with another), with WAL journaling and a busy timeout. On PostgreSQL the ledger locks
the budget rows it reads (``SELECT ... FOR UPDATE``), and every connection gets ``lock_timeout``,
``statement_timeout`` and ``idle_in_transaction_session_timeout`` (:class:`Timeouts`): a server process
stopped inside a transaction holds its row locks at most the idle timeout, and nobody waits on a lock longer
than the lock timeout (the request fails with a retryable error instead of hanging).

Recovery: a write that fails with an operational error (a read-only or full disk, a lost connection)
invalidates the engine's pool, so the next transaction opens fresh connections (a SQLite connection that
once hit a read-only file stays read-only until it is reopened). :meth:`Store.writable` is a cheap write
probe (a committed write that changes nothing the service reads), used by ``/readyz`` and at start-up
(:func:`open_store` refuses a database it cannot write).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DisconnectionError, OperationalError, ProgrammingError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from fedstats.errors import DataError, ParameterError
from fedstats.service.store.memory import MemoryStore
from fedstats.service.store.secure import SqlSecureQueries
from fedstats.service.store.sql import SqlCoreQueries
from fedstats.service.store.sql_vdaf import SqlVdafQueries
from fedstats.service.store.state import State
from fedstats.service.store.vdaf_results import SqlVdafResultQueries

__all__ = [
    "SCHEMA_HEAD",
    "MemoryStore",
    "State",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "Timeouts",
    "Tx",
    "open_store",
    "schema_revision",
    "upgrade",
]

StoreError = SQLAlchemyError
"""What a failed store operation raises (the database away, a lock timeout): catch this, not SQLAlchemy's."""

StoreUnavailable = OperationalError
"""A lock conflict, a timeout or a lost connection: nothing of the transaction was committed; retry."""

log = logging.getLogger("fedstats.service")


@dataclass(frozen=True)
class Timeouts:
    """PostgreSQL session timeouts of every connection, in seconds (0 disables one).

    Attributes
    ----------
    lock : float
        ``lock_timeout``: longest wait for a row or table lock (default 5).
    statement : float
        ``statement_timeout``: longest statement (default 30).
    idle_in_transaction : float
        ``idle_in_transaction_session_timeout``: a session idle inside a transaction this long (its
        process stopped or hung) is terminated and its locks released (default 30).
    """

    lock: float = 5.0
    statement: float = 30.0
    idle_in_transaction: float = 30.0

    def __post_init__(self) -> None:
        for name in ("lock", "statement", "idle_in_transaction"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 <= v <= 86400):
                raise ParameterError(f"{name}_timeout", v, "seconds in [0, 86400] (0: none)")


_MIGRATIONS = Path(__file__).with_name("migrations")


def _sqlite_engine(url: str) -> Engine:
    engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let SQLAlchemy's "begin" event issue BEGIN itself
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")  # a report is acknowledged only once on disk
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        # a read-only transaction (Store.transaction(read_only=True)) takes no write lock
        options = conn.get_execution_options()
        if options.get("fedstats_no_snapshot", False):
            return  # independent reads (Store.transaction(snapshot=False)): each statement alone
        conn.exec_driver_sql(
            "BEGIN" if options.get("fedstats_read_only", False) else "BEGIN IMMEDIATE"
        )

    return engine


# SQLSTATEs of a PostgreSQL session the server ended on its own (the connection is closed): an idle
# transaction's timeout (25P03) is not an OperationalError to psycopg, unlike the shutdowns (57P0x)
_PG_SESSION_ENDED = frozenset({"25P03"})

# SQLite errors after which a connection must be reopened (not "database is locked": that is a wait)
_SQLITE_BROKEN = (
    "readonly",
    "read-only",
    "disk i/o",
    "disk is full",
    "unable to open",
    "malformed",
)


PING_AFTER_IDLE = 2.0
"""Seconds a pooled PostgreSQL connection may sit unused before its next checkout pings the server.

A connection returned less than this ago is used as it is: a ping per checkout (SQLAlchemy's
``pool_pre_ping``) is one more round trip in every transaction, most of which are one statement (a
device's poll, an upload batch).
A connection that broke meanwhile (the database restarted) fails its first statement instead: SQLAlchemy
then marks every pooled connection invalid and the request is answered 503 with ``Retry-After`` (devices
retry it), as a request in flight during the restart is.
"""


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection at checkout only if unused for :data:`PING_AFTER_IDLE` seconds.

    The pool retries the checkout with a fresh connection when the ping fails (``DisconnectionError``,
    SQLAlchemy's "pessimistic disconnect handling" by a checkout event).
    """

    @event.listens_for(engine, "checkin")
    def _returned(_dbapi_conn: Any, record: Any) -> None:
        record.info["returned_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        returned = record.info.get("returned_at")
        if returned is None or time.monotonic() - returned < PING_AFTER_IDLE:
            return  # new, or returned a moment ago
        try:
            alive = engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:
            raise DisconnectionError(f"pooled connection failed its ping: {exc}") from exc
        if not alive:
            raise DisconnectionError("pooled connection failed its ping")


def _pg_engine(url: str, timeouts: Timeouts) -> Engine:
    # 20 kept connections: a connection past the pool size is closed when returned, and reopening it
    # costs a new PostgreSQL backend process
    engine = create_engine(url, pool_size=20, max_overflow=10)
    _ping_when_idle(engine)
    settings = {
        "lock_timeout": timeouts.lock,
        "statement_timeout": timeouts.statement,
        "idle_in_transaction_session_timeout": timeouts.idle_in_transaction,
    }

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        for name, seconds in settings.items():
            cur.execute(f"SET {name} = {round(seconds * 1000)}")  # milliseconds; ours, not input
        cur.close()
        dbapi_conn.commit()

    return engine


def make_engine(url: str, timeouts: Timeouts | None = None) -> Engine:
    """SQLAlchemy engine for ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``).

    Parameters
    ----------
    url : str
    timeouts : Timeouts, optional
        PostgreSQL session timeouts (default :class:`Timeouts`); ignored for SQLite.

    Raises
    ------
    ParameterError
        If the URL is neither SQLite nor PostgreSQL.
    """
    if url.startswith("sqlite"):
        engine = _sqlite_engine(url)
    elif url.startswith("postgresql"):
        engine = _pg_engine(url, timeouts or Timeouts())
    else:
        raise ParameterError("db", url, "a sqlite:///FILE or postgresql+psycopg://... URL")

    @event.listens_for(engine, "handle_error")
    def _on_error(ctx: ExceptionContext) -> OperationalError | None:
        if engine.url.get_backend_name() != "sqlite":
            # PostgreSQL ended the session (idle_in_transaction_session_timeout: SQLSTATE class 25,
            # which psycopg maps to InternalError): nothing of the transaction committed and the
            # connection is gone, so it is the store being unavailable (retried by its callers), not a
            # fault of the statement
            if getattr(ctx.original_exception, "sqlstate", None) not in _PG_SESSION_ENDED:
                return None
            ctx.is_disconnect = True
            ctx.invalidate_pool_on_disconnect = False
            return OperationalError(
                ctx.statement, ctx.parameters, ctx.original_exception, connection_invalidated=True
            )
        # a failed write on SQLite (read-only file, full disk, I/O error) can leave the connection unable
        # to write even after the cause is gone: drop every pooled connection, reopen on the next use
        if type(ctx.original_exception).__name__ != "OperationalError":
            return None
        msg = str(ctx.original_exception).lower()
        if any(m in msg for m in _SQLITE_BROKEN):
            log.warning('{"event": "store_reopen", "error": %s}', json.dumps(msg[:200]))
            ctx.invalidate_pool_on_disconnect = True
            ctx.is_disconnect = True
        return None

    return engine


SCHEMA_HEAD = "0014"
"""The newest shipped migration's revision (``migrations/versions``; a test checks it is Alembic's head)."""


def schema_revision(engine: Engine) -> str | None:
    """The database's Alembic revision, read from ``alembic_version`` without importing Alembic.

    Parameters
    ----------
    engine : Engine
        The store's engine (SQLite or PostgreSQL).

    Returns
    -------
    str or None
        The revision id (``"0014"``), or None if the database has no ``alembic_version`` table or row (a
        new database, or one this process cannot read: :func:`upgrade` then runs Alembic, which reports
        the error).
    """
    try:
        # a plain BEGIN on SQLite (no write lock: the ``begin`` listener of :func:`_sqlite_engine`)
        with engine.connect().execution_options(fedstats_read_only=True) as conn:
            got = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one_or_none()
            return None if got is None else str(got)
    except (OperationalError, ProgrammingError):  # no such table: never migrated
        return None


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply the shipped Alembic migrations up to ``revision`` (default: the newest).

    A database already at :data:`SCHEMA_HEAD` is left as it is without importing Alembic: a server process
    that never migrates does not keep Alembic's modules in memory.
    """
    if revision == "head" and schema_revision(engine) == SCHEMA_HEAD:
        return
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


class Tx(SqlCoreQueries, SqlSecureQueries, SqlVdafQueries, SqlVdafResultQueries, State):
    """One open transaction of a SQL store: the :class:`~fedstats.service.store.state.State` on one connection.

    Obtained from :meth:`Store.transaction`; the domain layer calls its query methods
    (:class:`~fedstats.service.store.core.CoreQueries`, :class:`~fedstats.service.store.secure.SecureQueries`,
    :class:`~fedstats.service.store.vdaf.VdafQueries`), each a Core statement on the transaction's
    connection.

    Parameters
    ----------
    conn : Connection
        A connection inside its transaction.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn


class Store:
    """An engine plus a session factory.

    Parameters
    ----------
    url : str
        Database URL (see :func:`make_engine`).
    timeouts : Timeouts, optional
        PostgreSQL session timeouts.
    """

    def __init__(self, url: str, timeouts: Timeouts | None = None) -> None:
        self.url = url
        self.timeouts = timeouts or Timeouts()
        self.engine = make_engine(url, self.timeouts)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.is_sqlite = url.startswith("sqlite")

    def session(self) -> Session:
        """A new ORM session, for tests and tools that inspect the tables (the service never uses one).

        Use it as a context manager (``with s.begin():`` for one transaction).
        """
        return self.sessions()

    @contextmanager
    def transaction(
        self, *, read_only: bool = False, snapshot: bool = True, idle_seconds: float | None = None
    ) -> Iterator[Tx]:
        """One transaction: yields a :class:`Tx`; commits at the end, rolls back on an exception.

        Parameters
        ----------
        read_only : bool
            The transaction only reads (default False). On SQLite it then starts with a plain ``BEGIN``
            (a snapshot, no write lock) instead of ``BEGIN IMMEDIATE``; it still ends with one commit.
        snapshot : bool
            With ``read_only``: False runs each statement on its own (no ``BEGIN``, no ``COMMIT``:
            each sees the database as of its own start), for reads that need not be mutually
            consistent, such as a device's poll (default True: one snapshot).
        idle_seconds : float, optional
            On PostgreSQL, how long this transaction may compute between two statements, in seconds:
            its ``idle_in_transaction_session_timeout`` (``SET LOCAL``), raised from the store's
            :attr:`Timeouts.idle_in_transaction` (never lowered, never disabled). For a transaction
            that computes while it holds its rows, such as the run driver closing a secure stage at
            n = 5,000 (the unmasking); the default limit still ends a process that stopped or hung.
            Ignored on SQLite (no such timeout) and with ``snapshot`` False.
        """
        with self.engine.connect() as conn:
            if read_only and not snapshot:
                if self.is_sqlite:
                    conn.execution_options(fedstats_read_only=True, fedstats_no_snapshot=True)
                else:
                    conn.execution_options(isolation_level="AUTOCOMMIT")
            elif read_only and self.is_sqlite:
                conn.execution_options(fedstats_read_only=True)
            with conn.begin():
                default = self.timeouts.idle_in_transaction
                if idle_seconds is not None and not self.is_sqlite and 0 < default < idle_seconds:
                    ms = int(
                        min(float(idle_seconds), 86400.0) * 1000
                    )  # an int: no SQL from the caller
                    conn.exec_driver_sql(f"SET LOCAL idle_in_transaction_session_timeout = {ms}")
                yield Tx(conn)

    def writable(self) -> str | None:
        """Probe whether the store can write now; None if it can, else the reason.

        Commits a write that changes nothing the service reads (on SQLite the header's unused
        ``user_version``, on PostgreSQL ``state_version`` set to itself), so a read-only file, directory or file system,
        a full disk or a read-only PostgreSQL role fails here). A failure invalidates the pool (see
        :func:`make_engine`), so a store whose cause went away (a read-only file made writable again)
        answers None at the next probe, without a restart.
        """
        try:
            with self.engine.begin() as conn:
                if self.is_sqlite:
                    # SQLite skips writing an unchanged page: change the header's user_version (unused
                    # by the schema) so that the commit really reaches the journal and the file
                    v = int(conn.exec_driver_sql("PRAGMA user_version").scalar() or 0)
                    conn.exec_driver_sql(f"PRAGMA user_version = {(v + 1) % 1000}")
                else:
                    conn.execute(text("UPDATE state_version SET version = version"))
        except SQLAlchemyError as exc:
            return " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]
        return None

    def close(self) -> None:
        """Dispose of the connection pool."""
        self.engine.dispose()


def open_store(
    url: str,
    *,
    migrate: bool = True,
    require_writable: bool = False,
    timeouts: Timeouts | None = None,
) -> Store:
    """Open the database at ``url`` and bring its schema up to date.

    ``memory://`` opens a new, empty :class:`~fedstats.service.store.memory.MemoryStore` instead (every
    query group on Python containers, for fast domain tests; typed as a :class:`Store` for its callers).

    Parameters
    ----------
    url : str
        ``sqlite:///path/to/file.db``, ``postgresql+psycopg://user@host:port/db`` or ``memory://``.
    migrate : bool
        Run the migrations (default True).
    require_writable : bool
        Refuse a database this process cannot write (the server: it would accept requests it cannot
        store). Default False.
    timeouts : Timeouts, optional
        PostgreSQL session timeouts.

    Raises
    ------
    DataError
        If ``require_writable`` and the database cannot be written (read-only file, directory or role).
    """
    if url.startswith("memory://"):
        return cast(Store, MemoryStore(url))
    if require_writable and url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :].split("?", 1)[0])
        if path.exists() and not os.access(path, os.W_OK):
            raise DataError(f"database {path} is read-only: the server needs to write it")
        if not os.access(path.parent if path.parent != Path("") else Path("."), os.W_OK):
            raise DataError(
                f"directory {path.parent} of database {path.name} is read-only: SQLite needs to "
                "write its journal there"
            )
    store = Store(url, timeouts)
    try:
        if migrate:
            upgrade(store.engine)
        if require_writable:
            why = store.writable()
            if why is not None:
                raise DataError(f"database {url} cannot be written: {why}")
    except SQLAlchemyError as exc:
        store.close()
        if require_writable:
            cause = getattr(exc, "orig", None) or exc
            raise DataError(f"database {url} cannot be opened for writing: {cause}") from None
        raise
    except DataError:
        store.close()
        raise
    return store
