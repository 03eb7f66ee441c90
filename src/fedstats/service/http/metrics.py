"""``GET /metrics``: the server process's counters in the Prometheus text format.

Process CPU and peak memory, the run driver's counters and excluded reports by reason, HTTP responses by
route and status (:func:`fedstats.service.http.edge.metrics_lines`), the connection guard's counts (when
``fedstats server`` set one up, :mod:`fedstats.service.http.limits`) and the app's other counters. The
objects are read from ``app.state`` (``driver``, ``counters``, ``connections``) as
:func:`fedstats.service.http.app.create_app` sets them up.
"""

from __future__ import annotations

import resource
from collections.abc import MutableMapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from fedstats.service.domain import driver
from fedstats.service.http import edge as http

__all__ = ["metrics_text", "router"]

router = APIRouter(tags=["ops"])


def metrics_text(
    counters: MutableMapping[str, float], runner: driver.Driver, guard: Any = None
) -> str:
    """The Prometheus text exposition of this process's counters (one ``# TYPE`` line per metric)."""
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


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request) -> str:
    """Prometheus text format."""
    state = request.app.state
    return metrics_text(state.counters, state.driver, getattr(state, "connections", None))
