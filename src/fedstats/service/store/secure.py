"""Store queries of secure runs: secure sessions, their journaled stage messages, seed transcripts.

Same pattern as :mod:`fedstats.service.store.core`: :class:`SecureQueries` is the interface,
:class:`SqlSecureQueries` the SQLAlchemy implementation, :class:`MemorySecureQueries` the in-memory one.
"""

from __future__ import annotations

from abc import ABC


class SecureQueries(ABC):  # noqa: B024 - methods land with the store interface
    """The secure path's queries."""


class SqlSecureQueries(SecureQueries):
    """:class:`SecureQueries` on SQLAlchemy (``self.session``: the transaction's session)."""


class MemorySecureQueries(SecureQueries):
    """:class:`SecureQueries` on the in-memory tables (``self.data``)."""
