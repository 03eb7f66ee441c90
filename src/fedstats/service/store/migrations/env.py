"""Alembic environment: runs the migrations on the connection :func:`fedstats.service.store.upgrade` passes."""

from __future__ import annotations

from alembic import context

from fedstats.service.store.tables import Base

target_metadata = Base.metadata
connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only through fedstats.service.store.upgrade
    raise RuntimeError("run the migrations with fedstats.service.store.upgrade")
context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
