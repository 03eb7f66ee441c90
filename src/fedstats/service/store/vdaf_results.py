"""The Prio3 query group's collector side: the signed tasks listed, and each task's released result.

Table
-----
vdaf_results
    The result a collector released for a signed Prio3 task (migration ``0012``), kept on the leader
    (``fedstats admin collect`` stores it there): the task id, the result as JSON (the analysis's
    :meth:`~fedstats.results.AnalysisResult.to_dict`, with the rounds' counts), who stored it and when.
    One result per task: it is written once and never changed.

Queries
-------
:class:`VdafResultQueries` belongs to the Prio3 group of
:class:`~fedstats.service.store.state.State`; :class:`SqlVdafResultQueries` implements it on
SQLAlchemy Core (SQLite and PostgreSQL), :class:`~fedstats.service.store.memory_vdaf.MemoryVdafQueries`
on Python containers.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

from sqlalchemy import Column, Connection, Float, String, Table, Text, select

from fedstats.service.store.sql_writes import SqlRowWrites
from fedstats.service.store.vdaf import VDAF_METADATA, VdafSignedRow, row_of, vdaf_signed
from fedstats.service.store.writes import RowWrites

__all__ = [
    "SqlVdafResultQueries",
    "VdafResultQueries",
    "VdafResultRow",
    "vdaf_results",
]

vdaf_results = Table(
    "vdaf_results",
    VDAF_METADATA,
    Column("signed_id", String(64), primary_key=True),
    Column("result", Text, nullable=False),
    Column("created_by", String(128), nullable=False),
    Column("created_at", Float, nullable=False),
)


@dataclass(frozen=True)
class VdafResultRow:
    """A released result of a signed Prio3 task (``vdaf_results`` row).

    Attributes
    ----------
    signed_id : str
        The signed task's id (64 hex digits).
    result : str
        The result's JSON.
    created_by : str
        The operator who stored it.
    created_at : float
        Unix seconds.
    """

    signed_id: str
    result: str
    created_by: str
    created_at: float


class VdafResultQueries(RowWrites):
    """The signed Prio3 tasks listed, and their released results (see the module)."""

    @abstractmethod
    def vdaf_signed_list(self, population: str | None = None) -> list[VdafSignedRow]:
        """Every signed Prio3 task (of ``population`` if given), newest first, then by id."""

    def add_vdaf_result(self, row: VdafResultRow) -> None:
        """Store a task's released result (a second one for the task: ``IntegrityError``)."""
        self._add_row("vdaf_results", dict(row.__dict__))

    @abstractmethod
    def vdaf_result(self, signed_id: str) -> VdafResultRow | None:
        """The task's released result, or None."""


class SqlVdafResultQueries(SqlRowWrites, VdafResultQueries):
    """:class:`VdafResultQueries` on SQLAlchemy (``self.conn``: the transaction's connection)."""

    conn: Connection

    def vdaf_signed_list(self, population: str | None = None) -> list[VdafSignedRow]:
        """See :meth:`VdafResultQueries.vdaf_signed_list`."""
        s = vdaf_signed.c
        q = select(vdaf_signed).order_by(s.created_at.desc(), s.id)
        if population is not None:
            q = q.where(s.population == population)
        return [row_of(VdafSignedRow, r) for r in self.conn.execute(q).mappings().all()]

    def vdaf_result(self, signed_id: str) -> VdafResultRow | None:
        """See :meth:`VdafResultQueries.vdaf_result`."""
        r = (
            self.conn.execute(select(vdaf_results).where(vdaf_results.c.signed_id == signed_id))
            .mappings()
            .first()
        )
        if r is None:
            return None
        return VdafResultRow(
            str(r["signed_id"]), str(r["result"]), str(r["created_by"]), float(r["created_at"])
        )
