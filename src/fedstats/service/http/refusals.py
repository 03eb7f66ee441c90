"""The device's refusal endpoint: ``POST /v1/client/runs/{run_id}/refuse`` (signed as every device request).

A device that refuses an offered task, a round or a run says why (:mod:`fedstats.service.domain.refusals`):
``{"reason": <code>, "message": <text>}``. The answer is ``{"recorded": true}``, or ``false`` if the
device had refused the run already (the first reason stays). A reason outside the documented codes, a
message longer than :data:`~fedstats.service.domain.refusals.MAX_MESSAGE` characters or holding a control
character is a 422 naming the field; a run the device cannot see is a 404.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from fedstats.service.domain import refusals
from fedstats.service.domain.changes import Wakeup
from fedstats.service.http.deps import DeviceAuth, Signed, use_nonce
from fedstats.service.http.edge import BadJSON, StrictRoute, strict_loads
from fedstats.service.http.schemas import DEVICE, IdPath, device_body
from fedstats.service.store import Store

__all__ = ["REFUSAL_BODY", "refusal_router"]

REFUSAL_BODY = device_body(
    {
        "type": "object",
        "required": ["reason", "message"],
        "properties": {
            "reason": {"type": "string", "enum": list(refusals.REASONS)},
            "message": {"type": "string", "minLength": 1, "maxLength": refusals.MAX_MESSAGE},
        },
    }
)


def refusal_router(store: Store, device: DeviceAuth, offload: Any, wakeup: Wakeup) -> APIRouter:
    """The refusal route (see the module); ``offload`` runs its store work off the event loop."""
    router = APIRouter(route_class=StrictRoute)

    @router.post("/v1/client/runs/{run_id}/refuse", openapi_extra=REFUSAL_BODY, **DEVICE)
    async def refuse(run_id: IdPath, req: Signed) -> dict[str, Any]:
        """Record why this device refuses the run (a reason code and a message naming its column or file)."""
        try:
            data = strict_loads(req.body or b"{}")
        except BadJSON as exc:
            raise HTTPException(422, str(exc)) from None
        if not isinstance(data, dict):
            raise HTTPException(422, "body must be an object {reason, message}")
        reason, message = refusals.check_refusal(data.get("reason"), data.get("message"))

        def go() -> bool:
            with store.transaction() as tx:
                use_nonce(tx, req.nonce)
                device.confirm(tx, req)
                return refusals.record_refusal(
                    tx, run_id, req.client_id, req.population, reason, message
                )

        recorded = bool(await offload(go))
        if recorded:
            wakeup.set()  # every device may have answered now: let the driver close check-in
        return {"recorded": recorded}

    return router
