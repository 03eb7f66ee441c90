"""The aggregation server as an ASGI app (FastAPI): admin API, client API, health and metrics.

Admin endpoints (``/v1/admin/...``, bearer token of an operator, JSON, described at ``/openapi.json``)
create tasks, start runs (reserving the privacy charge), set budgets and read runs, budgets and the audit
log. Client endpoints (``/v1/client/...``) must be signed by an enrolled device (:mod:`fedstats.wire.auth`): register
with an enrollment certificate, poll for work, check in to a run, upload a round's report, and take part
in the secure-aggregation stages of secure runs (:mod:`fedstats.service.http.secure`). Reports are
acknowledged only after their transaction committed; a retried upload of the same report is acknowledged
again and counted once.

Every request is logged as one JSON line; bodies above ``max_body`` bytes get 413; each verified device (or
peer address, for unsigned requests and those whose signature fails) gets a token bucket of ``rate``
requests per second (burst ``burst``),
beyond which requests get 429. A background task advances the runs (:class:`fedstats.service.domain.driver.Driver`).
"""

import logging
from collections import defaultdict

from fastapi import FastAPI

from fedstats.errors import ParameterError
from fedstats.service.domain import driver
from fedstats.service.domain.changes import ArrivalGate, Changes, Wakeup
from fedstats.service.http import admin, device, metrics
from fedstats.service.http import edge as http
from fedstats.service.http.dashboard import add_dashboard, process_state
from fedstats.service.http.fastpath import DeviceWrites, DirectRoutes, Offload
from fedstats.service.http.health import add_health_routes
from fedstats.service.http.lifecycle import Background, Publisher, fault_hook
from fedstats.service.http.openapi import install_params_schemas
from fedstats.service.http.schemas import (
    ErrorOut,
)
from fedstats.service.http.settings import ServerSettings
from fedstats.service.store import Store

__all__ = ["ServerSettings", "create_app"]

log = logging.getLogger("fedstats.service")


# -- the app ------------------------------------------------------------------------------------------


def create_app(
    store: Store,
    settings: ServerSettings | None = None,
    *,
    crash_after: str | None = None,
    run_driver: bool = True,
) -> FastAPI:
    """Build the ASGI app over ``store``.

    Parameters
    ----------
    store : Store
        Opened (migrated) database.
    settings : ServerSettings, optional
    crash_after : str, optional
        Fault injection for tests: ``"EVENT:ROUND"`` (``journaled``, ``opened``, or ``stageS``: a secure
        session of the round journaled its stage-``S`` messages, S = 1..5, 5 = done) makes the process kill
        itself with SIGKILL at that point of any run.
    run_driver : bool
        Start the background run driver (default True).
    """
    cfg = settings or ServerSettings()
    counters: dict[str, float] = defaultdict(float)
    if cfg.store_threads < 1:
        raise ParameterError("store_threads", cfg.store_threads, "an integer >= 1")
    if not cfg.idempotency_retention > 0:
        raise ParameterError(
            "idempotency_retention", cfg.idempotency_retention, "seconds, a number > 0"
        )
    offload = Offload(cfg.store_threads)  # device requests' store work
    changes = Changes()  # the driver's state transitions: wake long-polling devices
    gate = ArrivalGate()  # what the driver waits for: the devices' messages wake it at the last one
    wakeup = Wakeup(gate)  # devices' messages: wake the driver
    changed = Publisher(store, changes)
    runner = changed.runner = driver.Driver(
        store,
        crash_hook=fault_hook(crash_after),
        lease_seconds=cfg.lease_seconds,
        owner=cfg.server_id,
        on_change=changed,
        recheck=cfg.recheck,
        gate=gate,
        cohort_tree_above=cfg.cohort_tree_above,
    )
    background = Background(store, cfg, runner, changes, wakeup, offload, run_driver=run_driver)

    app = FastAPI(
        title="fedstats aggregation server",
        version="1",
        description="Admin API of fedstats: tasks, runs, privacy budgets and audit.",
        lifespan=background.lifespan,
        responses={422: {"model": ErrorOut}},
        # FastAPI's native OpenTelemetry off: it asked the (unconfigured) global providers, reading
        # environment variables, at every request (see `benchmarks/service.py --profile`); the server
        # exports /metrics itself
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.router.route_class = http.StrictRoute  # strict JSON bodies (no NaN/Infinity, bounded depth)
    app.state.driver = runner
    app.state.store = store
    app.state.changed = changed  # the admin routes' change publisher (.context.Changed)
    app.state.counters = counters  # /metrics (.metrics)

    http.install_error_handlers(app)  # FedstatsError and validation errors: one-line JSON 4xx

    add_health_routes(app, store)  # /healthz, /readyz (fedstats.service.http.health)

    # the device routes first: a request is matched against the routes in order (a linear scan, each
    # candidate costing a regex and a scope copy), and devices send nearly every request
    cache = device.add_client_routes(
        app, store, cfg, counters, changes=changes, wakeup=wakeup, offload=offload
    )
    app.include_router(admin.router)
    app.include_router(metrics.router)
    add_dashboard(  # the operator's read-only status page (/dashboard)
        app, store, lambda: process_state(counters, runner.metrics, runner.excluded)
    )
    if cfg.vdaf:  # the two-aggregator (Prio3) mode
        from fedstats.service.http.vdaf import add_vdaf_routes

        add_vdaf_routes(app, store, peer_ca=cfg.vdaf_peer_ca, batch_size=cfg.vdaf_batch_size)
    if cfg.dap:  # DAP-09 for Prio3 tasks (binary messages; docs/vdaf.md, "DAP")
        from fedstats.service.http.dap import add_dap_routes  # httpx, fedstats.dap: only with --dap

        add_dap_routes(
            app,
            store,
            interop=cfg.dap_interop,
            peer_ca=cfg.vdaf_peer_ca,
            batch_size=cfg.vdaf_batch_size,
        )
    install_params_schemas(app)  # each analysis's params as JSON Schema in /openapi.json
    # a device's poll and upload straight to their handlers (not through the router's scan)
    app.add_middleware(DirectRoutes, routes=device.router.routes)
    app.add_middleware(DeviceWrites, cache=cache)  # a device's write: drop its cached work list
    app.add_middleware(
        http.EdgeMiddleware,
        max_body=cfg.max_body,
        rate=cfg.rate,
        burst=cfg.burst,
        counters=counters,
        access_log=cfg.access_log,
    )
    return app
