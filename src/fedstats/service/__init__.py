"""fedstats as a network service: the aggregation server with persistent state.

Three layers, each importing only the ones below it: :mod:`fedstats.service.http` (the ASGI app and thin
routers), :mod:`fedstats.service.domain` (tasks, runs, the driver, the ledger, secure sessions) and
:mod:`fedstats.service.store` (the only code that speaks SQL: SQLite, PostgreSQL; the Alembic migrations).
Importing this package imports nothing heavy: the layers need the ``service`` extra (SQLAlchemy, Alembic,
FastAPI, uvicorn). What the server shares with the client SDK (:mod:`fedstats.client`) lives below both, in
:mod:`fedstats.wire`.
"""
