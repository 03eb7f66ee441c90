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
from fedstats.service.http.context import Devices
from fedstats.service.http.deps import Signed, use_nonce
from fedstats.service.http.edge import BadJSON, StrictRoute, strict_loads
from fedstats.service.http.schemas import DEVICE, IdPath, device_body

__all__ = ["REFUSAL_BODY", "refuse", "router"]

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


router = APIRouter(route_class=StrictRoute)
"""The refusal route (see the module)."""


@router.post("/v1/client/runs/{run_id}/refuse", openapi_extra=REFUSAL_BODY, **DEVICE)
async def refuse(run_id: IdPath, req: Signed, path: Devices) -> dict[str, Any]:
    """Record why this device refuses the run (a reason code and a message naming its column or file)."""
    try:
        data = strict_loads(req.body or b"{}")
    except BadJSON as exc:
        raise HTTPException(422, str(exc)) from None
    if not isinstance(data, dict):
        raise HTTPException(422, "body must be an object {reason, message}")
    reason, message = refusals.check_refusal(data.get("reason"), data.get("message"))

    def go() -> bool:
        with path.store.transaction() as tx:
            use_nonce(tx, req.nonce)
            path.auth.confirm(tx, req)
            return refusals.record_refusal(
                tx, run_id, req.client_id, req.population, reason, message
            )

    recorded = bool(await path.offload(go))
    if recorded:
        # every device may have answered now: the driver may close check-in
        path.wakeup.arrived(("checkin", run_id))
    return {"recorded": recorded}
