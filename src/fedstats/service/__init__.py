"""fedstats as a network service: the aggregation server with persistent state.

Importing this package imports nothing heavy: the server modules (``app``, ``store``, ``models``, ``runs``)
need the ``service`` extra (SQLAlchemy, Alembic, FastAPI, uvicorn). What the server shares with the client
SDK (:mod:`fedstats.client`) lives below both, in :mod:`fedstats.wire`.
"""
