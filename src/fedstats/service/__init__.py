"""fedstats as a network service: an aggregation server with persistent state, and its wire formats.

Importing this package imports nothing heavy: the server modules (``app``, ``store``, ``models``, ``runs``)
need the ``service`` extra (SQLAlchemy, Alembic, FastAPI, uvicorn); :mod:`.wire`, :mod:`.registry` and
:mod:`.auth` are shared with the client SDK (:mod:`fedstats.client`).
"""
