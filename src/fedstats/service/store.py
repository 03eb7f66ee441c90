"""Database engines and migrations: SQLite (a file, the embedded default) or PostgreSQL.

:func:`open_store` creates the SQLAlchemy engine for a URL and brings the schema to the newest Alembic
revision shipped in ``fedstats/service/migrations``. On SQLite every transaction starts with
``BEGIN IMMEDIATE`` (one writer at a time, so a read-then-write transaction such as a ledger reservation
cannot interleave with another), with WAL journaling and a busy timeout. On PostgreSQL the ledger locks
the budget rows it reads (``SELECT ... FOR UPDATE``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from fedstats.errors import ParameterError

__all__ = ["Store", "open_store", "upgrade"]

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
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def make_engine(url: str) -> Engine:
    """SQLAlchemy engine for ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``).

    Raises
    ------
    ParameterError
        If the URL is neither SQLite nor PostgreSQL.
    """
    if url.startswith("sqlite"):
        return _sqlite_engine(url)
    if url.startswith("postgresql"):
        # 20 kept connections: a connection past the pool size is closed when returned, and reopening it
        # costs a new PostgreSQL backend process
        return create_engine(url, pool_size=20, max_overflow=10, pool_pre_ping=True)
    raise ParameterError("db", url, "a sqlite:///FILE or postgresql+psycopg://... URL")


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply the shipped Alembic migrations up to ``revision`` (default: the newest)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


class Store:
    """An engine plus a session factory.

    Parameters
    ----------
    url : str
        Database URL (see :func:`make_engine`).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.is_sqlite = url.startswith("sqlite")

    def session(self) -> Session:
        """A new session (use as a context manager; ``with s.begin():`` for one transaction)."""
        return self.sessions()

    def close(self) -> None:
        """Dispose of the connection pool."""
        self.engine.dispose()


def open_store(url: str, *, migrate: bool = True) -> Store:
    """Open the database at ``url`` and bring its schema up to date.

    Parameters
    ----------
    url : str
        ``sqlite:///path/to/file.db`` or ``postgresql+psycopg://user@host:port/db``.
    migrate : bool
        Run the migrations (default True).
    """
    store = Store(url)
    if migrate:
        upgrade(store.engine)
    return store
