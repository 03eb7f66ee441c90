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

import asyncio
import contextlib
import json
import logging
import os
import resource
import signal
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import FastAPI, Header, HTTPException
from fastapi.responses import PlainTextResponse

from fedstats.errors import ParameterError
from fedstats.service.domain import driver, idempotency
from fedstats.service.domain.changes import Changes, Wakeup, record_change
from fedstats.service.http import edge as http
from fedstats.service.http.admin import admin_router
from fedstats.service.http.dap import add_dap_routes
from fedstats.service.http.dashboard import add_dashboard, process_state
from fedstats.service.http.device import DeviceWrites, DirectRoutes, Offload, add_client_routes
from fedstats.service.http.health import add_health_routes
from fedstats.service.http.openapi import install_params_schemas
from fedstats.service.http.schemas import (
    ErrorOut,
)
from fedstats.service.http.settings import ServerSettings
from fedstats.service.store import Store, StoreError
from fedstats.wire import auth

__all__ = ["ServerSettings", "create_app"]

log = logging.getLogger("fedstats.service")

_PURGE_SECONDS = 30.0  # expired nonces are deleted at most this often


_status_of = http.status_of  # moved to .http

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

    def hook(event: str, run_id: str, index: int) -> None:
        if crash_after and crash_after == f"{event}:{index}":
            log.info(json.dumps({"event": "fault_injection", "at": crash_after, "run_id": run_id}))
            os.kill(os.getpid(), signal.SIGKILL)

    if cfg.store_threads < 1:
        raise ParameterError("store_threads", cfg.store_threads, "an integer >= 1")
    if not cfg.idempotency_retention > 0:
        raise ParameterError(
            "idempotency_retention", cfg.idempotency_retention, "seconds, a number > 0"
        )
    offload = Offload(cfg.store_threads)  # device requests' store work
    changes = Changes()  # the driver's state transitions: wake long-polling devices
    wakeup = Wakeup()  # devices' messages: wake the driver

    def changed(populations: set[str] | None) -> None:
        """Publish a state change of ``populations``' runs (None: any) to all server processes' polls."""
        runner.poke()  # a run created or cancelled: claim it at the next pass
        try:
            changes.observe(record_change(store))
        except StoreError:  # the database is away: this process's devices still learn of it
            log.exception("cannot record a state change")
        changes.bump(populations)

    runner = driver.Driver(
        store,
        crash_hook=hook,
        lease_seconds=cfg.lease_seconds,
        owner=cfg.server_id,
        on_change=changed,
        recheck=cfg.recheck,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        stop = asyncio.Event()
        changes.bind(asyncio.get_running_loop())
        wakeup.bind()

        async def loop() -> None:
            purged = 0.0
            while not stop.is_set():
                moved = False
                try:
                    moved = await asyncio.to_thread(runner.tick)
                    if time.monotonic() - purged > _PURGE_SECONDS:
                        await asyncio.to_thread(_purge)
                        purged = time.monotonic()
                except Exception:
                    log.exception("driver tick failed")
                # a transition may enable the next one (check-in closed: open round 0), so pass again
                if not moved:
                    await wakeup.wait(cfg.tick)

        def versions() -> tuple[int, int, float]:
            began = time.monotonic()
            with store.transaction(read_only=True) as tx:
                return tx.version(), tx.devices_version(), began

        halt = threading.Event()

        def watch() -> None:
            # a thread of its own, not a task: an event loop saturated by requests would delay the
            # reads, and the device rows' trust (DeviceAuth.observe) would lapse under load
            while True:
                try:
                    state, devices, began = versions()
                    if changes.observe(state):
                        changes.bump()  # another server process changed a run
                    # no device row changed anywhere: the cached ones stay trusted (DeviceAuth)
                    app.state.device_auth.observe(devices, began)
                except Exception:  # the store unreachable for a while: keep watching
                    log.exception("cannot read the state version")
                if halt.wait(cfg.recheck):
                    return

        task = asyncio.create_task(loop()) if run_driver else None
        watcher = threading.Thread(target=watch, name="fedstats-versions", daemon=True)
        watcher.start()
        yield
        stop.set()
        wakeup.set()
        halt.set()
        await asyncio.to_thread(watcher.join, 30)
        if task is not None:
            await task
        offload.close()

    app = FastAPI(
        title="fedstats aggregation server",
        version="1",
        description="Admin API of fedstats: tasks, runs, privacy budgets and audit.",
        lifespan=lifespan,
        responses={422: {"model": ErrorOut}},
        # FastAPI's native OpenTelemetry off: it asked the (unconfigured) global providers, reading
        # environment variables, at every request (see `benchmarks/service.py --profile`); the server
        # exports /metrics itself
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.router.route_class = http.StrictRoute  # strict JSON bodies (no NaN/Infinity, bounded depth)
    app.state.driver = runner
    app.state.store = store

    http.install_error_handlers(app)  # FedstatsError and validation errors: one-line JSON 4xx

    def _purge() -> None:  # the kept nonces and idempotency keys that can no longer be needed
        with store.transaction() as tx:
            tx.purge_nonces(time.time() - 2 * cfg.replay_window)
        idempotency.purge(store, cfg.idempotency_retention)

    # -- operator auth
    def operator(authorization: Annotated[str | None, Header()] = None) -> str:
        if not authorization or not authorization.startswith("Bearer "):
            raise HTTPException(401, "bearer token required", {"WWW-Authenticate": "Bearer"})
        h = auth.hash_token(authorization[7:].strip())
        with store.transaction(read_only=True) as tx:
            name = tx.operator_of(h)
        if name is None:
            raise HTTPException(401, "unknown token", {"WWW-Authenticate": "Bearer"})
        return str(name)

    add_health_routes(app, store)  # /healthz, /readyz (fedstats.service.http.health)

    @app.get("/metrics", response_class=PlainTextResponse, tags=["ops"])
    def metrics() -> str:
        """Prometheus text format."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        lines = [
            "# TYPE fedstats_process_cpu_seconds_total counter",
            f"fedstats_process_cpu_seconds_total {usage.ru_utime + usage.ru_stime:.3f}",
            "# TYPE fedstats_process_max_rss_bytes gauge",
            f"fedstats_process_max_rss_bytes {usage.ru_maxrss * 1024}",
        ]
        for name, v in sorted(runner.metrics.items()):
            lines += [f"# TYPE fedstats_{name}_total counter", f"fedstats_{name}_total {v:g}"]
        lines += driver.excluded_metrics(runner)  # fedstats_reports_excluded_total{reason=...}
        lines += http.metrics_lines(counters)
        guard = getattr(app.state, "connections", None)  # set by `fedstats server` (.limits)
        if guard is not None:
            lines += [
                "# TYPE fedstats_connections_open gauge",
                f"fedstats_connections_open {guard.open}",
                "# TYPE fedstats_connections_refused_total counter",
                f"fedstats_connections_refused_total {guard.refused}",
                "# TYPE fedstats_connections_timed_out_total counter",
                f"fedstats_connections_timed_out_total {guard.timed_out}",
            ]
        for key, v in sorted(counters.items()):
            if not key.startswith("http_responses_total"):
                lines.append(f"# TYPE fedstats_{key}_total counter")
                lines.append(f"fedstats_{key}_total {v:g}")
        return "\n".join(lines) + "\n"

    # the device routes first: a request is matched against the routes in order (a linear scan, each
    # candidate costing a regex and a scope copy), and devices send nearly every request
    cache = add_client_routes(
        app, store, cfg, counters, changes=changes, wakeup=wakeup, offload=offload
    )
    app.include_router(admin_router(store, operator, changed))
    add_dashboard(  # the operator's read-only status page (/dashboard)
        app, store, lambda: process_state(counters, runner.metrics, runner.excluded)
    )
    if cfg.vdaf:  # the two-aggregator (Prio3) mode
        from fedstats.service.http.vdaf import add_vdaf_routes

        add_vdaf_routes(app, store, peer_ca=cfg.vdaf_peer_ca, batch_size=cfg.vdaf_batch_size)
    if cfg.dap:  # DAP-09 for Prio3 tasks (binary messages; docs/vdaf.md, "DAP")
        add_dap_routes(
            app,
            store,
            interop=cfg.dap_interop,
            peer_ca=cfg.vdaf_peer_ca,
            batch_size=cfg.vdaf_batch_size,
        )
    install_params_schemas(app)  # each analysis's params as JSON Schema in /openapi.json
    # a device's poll and upload straight to their handlers (not through the router's scan)
    app.add_middleware(DirectRoutes, routes=app.routes)
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
