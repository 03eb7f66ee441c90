"""The app's shared objects as FastAPI dependencies: its state, the operator behind a request, its changes.

Routers are module-level (:data:`fedstats.service.http.admin.router`); what a handler needs from the app it
receives through these dependencies, which read ``request.app.state`` as :func:`fedstats.service.http.app.create_app`
sets it up:

- ``app.state.store``: the :class:`~fedstats.service.store.Store` (:data:`StoreDep`);
- ``app.state.changed``: publishes a state change of some populations' runs to every server process's
  long-polling devices (:data:`Changed`);
- ``app.state.devices``: the device routes' shared objects, batchers and work cache (:data:`Devices`);
- the operator is authenticated from the ``Authorization: Bearer`` header against the store's hashed
  tokens (:data:`Operator`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request

from fedstats.service.http.fastpath import DevicePath, devices_of
from fedstats.service.store import Store
from fedstats.wire import auth

__all__ = [
    "Changed",
    "Devices",
    "Operator",
    "StoreDep",
    "app_store",
    "authenticated_operator",
    "device_path",
    "publisher",
]

Publish = Callable[[set[str] | None], None]


async def app_store(request: Request) -> Store:
    """The app's store (``app.state.store``).

    ``async`` (it never blocks): FastAPI runs a plain ``def`` dependency in its thread pool, a thread
    hop per request for an attribute read (and 40 threads of the pool started under load).
    """
    store: Store = request.app.state.store
    return store


StoreDep = Annotated[Store, Depends(app_store)]


def authenticated_operator(
    store: StoreDep, authorization: Annotated[str | None, Header()] = None
) -> str:
    """The name of the operator whose bearer token the request carries.

    Raises
    ------
    HTTPException
        401 (with ``WWW-Authenticate: Bearer``) without a bearer token or with an unknown one.
    """
    if not authorization or not authorization.startswith("Bearer "):
        raise HTTPException(401, "bearer token required", {"WWW-Authenticate": "Bearer"})
    h = auth.hash_token(authorization[7:].strip())
    with store.transaction(read_only=True) as tx:
        name = tx.operator_of(h)
    if name is None:
        raise HTTPException(401, "unknown token", {"WWW-Authenticate": "Bearer"})
    return str(name)


Operator = Annotated[str, Depends(authenticated_operator)]


async def publisher(request: Request) -> Publish:
    """The app's change publisher (``app.state.changed``).

    ``changed({population})`` wakes that population's long-polling devices in every server process;
    ``changed(None)`` wakes all.
    """
    publish: Publish = request.app.state.changed
    return publish


Changed = Annotated[Publish, Depends(publisher)]


async def device_path(request: Request) -> DevicePath:
    """The app's device fast path (``app.state.devices``: its store, batchers, work cache).

    ``async`` like :func:`app_store`: no thread hop per device request.
    """
    return devices_of(request)


Devices = Annotated[DevicePath, Depends(device_path)]
