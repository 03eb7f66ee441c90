"""Where a simulated device's CPU goes: thread-CPU timers around the device's main steps.

``cProfile`` (``service_secagg.py --profile-devices``) charges every Python call its own overhead, so
code made of many small calls (URL parsing, the protocol's loops) looks several times dearer than it is
next to code that spends its time in a few C calls (X25519, AES). These timers wrap only a fixed list of
functions (:data:`TARGETS`) and read the calling thread's CPU clock (``time.thread_time``) on entry and
exit: the overhead is one wrapper call per timed call (about a microsecond; the 390 signature-cache
lookups per device and run are the most frequent), and nothing else is slowed down. Timed functions nest
(``Device.step`` contains everything, ``SecureRuns._answer_stage`` contains ``Device._send`` and
``SecAggClient.handle_bytes``), so the rows overlap and do not add up.

A worker process of ``service_secagg.py`` calls :func:`install` before it builds its devices when
``FEDSTATS_BENCH_DEVICE_TIMERS`` is set (``--device-timers``), and :func:`snapshot` when they have
stopped; the benchmark sums the workers' snapshots with :func:`merge` into the results
(``device_timers``: per label, milliseconds and calls per device and microseconds per call).
"""

from __future__ import annotations

import functools
import importlib
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

ENV = "FEDSTATS_BENCH_DEVICE_TIMERS"

TARGETS: tuple[tuple[str, str, str], ...] = (
    # (module, class or "" for a module function, attribute)
    ("fedstats.client", "Device", "step"),
    ("fedstats.client", "Device", "_send"),
    ("fedstats.client", "Device", "_encode"),
    ("fedstats.client.secure", "SecureRuns", "_answer_stage"),
    ("fedstats.client.secure", "SecureRuns", "_secure_checkin"),
    ("fedstats.client.secure", "SecureRuns", "_certify"),
    ("fedstats.client.secure", "SecureRuns", "_carried_certificates"),
    ("fedstats.client.secure", "SecureRuns", "_join_session"),
    ("fedstats.client.secure_tree", "TreeRuns", "_tree_reveal"),
    ("fedstats.client.secure_tree", "TreeRuns", "_tree_seed"),
    ("fedstats.client.secure_tree", "TreeRuns", "_tree_join"),
    ("fedstats.client.secure_tree", "TreeRuns", "_give_input"),
    ("fedstats.client.transport", "DeviceHTTP", "build_request"),
    ("httpx", "Client", "send"),
    ("fedstats.wire.auth", "", "sign_request_with_key"),
    ("fedstats.secagg.client", "SecAggClient", "handle_bytes"),
    ("fedstats.secagg.client", "SecAggClient", "_share"),
    ("fedstats.secagg.client", "SecAggClient", "_masked_input"),
    ("fedstats.secagg.client", "SecAggClient", "_unmask"),
    ("fedstats.secagg.client", "SecAggClient", "_decide_from_signed_set"),
    ("fedstats.secagg.crypto", "VerificationCache", "verify"),
    ("fedstats.secagg.crypto", "", "agree"),
    ("fedstats.secagg.crypto", "", "add_masks"),
    ("fedstats.secagg.shamir", "", "split_secret"),
)
"""The timed functions. A module function is also replaced where ``fedstats.secagg.client`` imported
it by name (``from ... import add_masks``), so that the protocol's calls are timed too."""

_LOCK = threading.Lock()
_SECONDS: dict[str, float] = {}
_CALLS: dict[str, int] = {}


def _timed(fn: Any, label: str) -> Any:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.thread_time() - t0
            with _LOCK:
                _SECONDS[label] = _SECONDS.get(label, 0.0) + spent
                _CALLS[label] = _CALLS.get(label, 0) + 1

    return timed


def install(targets: Iterable[tuple[str, str, str]] = TARGETS) -> list[str]:
    """Wrap each target with a thread-CPU timer, in this process.

    Parameters
    ----------
    targets : iterable of (str, str, str)
        ``(module, class or "", attribute)`` (default :data:`TARGETS`); one that does not exist (a
        renamed function) is skipped.

    Returns
    -------
    list of str
        The labels wrapped (``Class.method`` or ``module.function``).
    """
    protocol = importlib.import_module("fedstats.secagg.client")
    done = []
    for module_name, owner_name, attr in targets:
        module = importlib.import_module(module_name)
        owner = getattr(module, owner_name) if owner_name else module
        fn = owner.__dict__.get(attr) if owner_name else getattr(module, attr, None)
        if fn is None:
            continue
        label = f"{owner_name or module_name.rsplit('.', 1)[-1]}.{attr}"
        wrapped = _timed(fn, label)
        setattr(owner, attr, wrapped)
        if not owner_name and getattr(protocol, attr, None) is fn:
            setattr(protocol, attr, wrapped)
        done.append(label)
    return done


def snapshot() -> dict[str, dict[str, float]]:
    """This process's totals so far.

    Returns
    -------
    dict
        ``label -> {"seconds": thread CPU seconds (float, >= 0), "calls": count (int)}``.
    """
    with _LOCK:
        return {k: {"seconds": _SECONDS[k], "calls": _CALLS[k]} for k in _SECONDS}


def merge(snapshots: Iterable[Mapping[str, Mapping[str, float]]], devices: int) -> dict[str, Any]:
    """The workers' snapshots summed and divided by the devices.

    Parameters
    ----------
    snapshots : iterable of mapping
        :func:`snapshot` of each worker process.
    devices : int
        The devices of all the workers (a value below 1 counts as 1).

    Returns
    -------
    dict
        ``label -> {"ms_per_device", "calls_per_device", "us_per_call"}``, dearest first.
    """
    seconds: dict[str, float] = {}
    calls: dict[str, float] = {}
    for snap in snapshots:
        for label, row in snap.items():
            seconds[label] = seconds.get(label, 0.0) + float(row["seconds"])
            calls[label] = calls.get(label, 0) + float(row["calls"])
    per = max(1, devices)
    return {
        label: {
            "ms_per_device": round(1e3 * seconds[label] / per, 3),
            "calls_per_device": round(calls[label] / per, 2),
            "us_per_call": round(1e6 * seconds[label] / max(1.0, calls[label]), 1),
        }
        for label in sorted(seconds, key=lambda k: -seconds[k])
    }
