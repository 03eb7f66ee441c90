"""Choosing a route (backend) by name, for the CLI and experiments.

Routes: ``serial`` (this process), ``secure`` (real secure aggregation, :mod:`fedstats.engine.secure`),
``process`` and ``dask`` (:mod:`fedstats.engine.dask`): every one of these gives the same sum for the same
seed. ``aggregate`` (:mod:`fedstats.engine.aggregate`) draws each sum from its closed form per distinct
input: equal in distribution, not bit-identical, and its cost does not grow with the number of clients.
A backend that holds resources (a cluster, a pool) is a context manager; :func:`open_backend` closes it on
success, error or Ctrl-C.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fedstats._validation import check_choice, check_int
from fedstats.engine.backends import Backend, SerialBackend
from fedstats.errors import ParameterError

__all__ = ["BACKENDS", "open_backend", "register_backend"]

BackendFactory = Callable[..., Backend]
_FACTORIES: dict[str, BackendFactory] = {}
# routes implemented in other modules, imported on first use
_LAZY: dict[str, str] = {
    "secure": "fedstats.engine.secure",
    "process": "fedstats.engine.dask",
    "dask": "fedstats.engine.dask",
    "aggregate": "fedstats.engine.aggregate",
}
BACKENDS: tuple[str, ...] = ("serial", "secure", "process", "dask", "aggregate")


def register_backend(name: str, factory: BackendFactory) -> None:
    """Register ``factory(**options) -> Backend`` under ``name`` (called by the route's module)."""
    _FACTORIES[name] = factory


def _serial(*, shard_size: int = 1 << 20, **_: Any) -> Backend:
    return SerialBackend(shard_size=shard_size)


register_backend("serial", _serial)


@contextmanager
def open_backend(
    name: str = "serial",
    *,
    shard_size: int = 1 << 20,
    workers: int | None = None,
    scheduler: str | None = None,
    **options: Any,
) -> Iterator[Backend]:
    """Create the backend ``name`` and close it afterwards.

    Parameters
    ----------
    name : {"serial", "secure", "process", "dask", "aggregate"}
    shard_size : int
        Clients per shard (>= 1).
    workers : int, optional
        Worker processes for ``process``/``dask`` (>= 1).
    scheduler : str, optional
        Address of a running Dask scheduler (``dask`` only).
    **options
        Route-specific options (e.g. ``bits`` and ``cohort_size`` for ``secure``).

    Raises
    ------
    ParameterError
        If ``name`` is unknown or an option is out of range.
    """
    check_choice("backend", name, BACKENDS)
    check_int("shard_size", shard_size, low=1)
    if workers is not None:
        check_int("workers", workers, low=1)
    if name not in _FACTORIES and name in _LAZY:
        importlib.import_module(_LAZY[name])
    if name not in _FACTORIES:
        raise ParameterError("backend", name, f"one of {', '.join(sorted(_FACTORIES))} (installed)")
    kwargs: dict[str, Any] = {"shard_size": shard_size, **options}
    if workers is not None:
        kwargs["workers"] = workers
    if scheduler is not None:
        kwargs["scheduler"] = scheduler
    backend = _FACTORIES[name](**kwargs)
    enter = getattr(backend, "__enter__", None)
    if enter is None:
        yield backend
        return
    with backend:  # type: ignore[attr-defined]
        yield backend
