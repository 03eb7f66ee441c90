"""Request and response models of the admin API (its OpenAPI description)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from fedstats._validation import CONTROL_RULE, IDENTIFIER_RULE, control_character, is_identifier

__all__ = [
    "DEVICE",
    "MAX_INDEX",
    "BudgetIn",
    "BudgetOut",
    "Deadlines",
    "ErrorOut",
    "FreeText",
    "IdPath",
    "Identifier",
    "IndexPath",
    "Privacy",
    "RunIn",
    "RunOut",
    "SecureAggregation",
    "SignedTaskIn",
    "TaskIn",
    "TaskOut",
    "device_body",
]


MAX_INDEX = 2**31 - 1
"""Largest round index, session number or stage accepted in a path (a 32-bit column holds it)."""


def _identifier(value: str) -> str:
    if not is_identifier(value):
        raise ValueError(f"an identifier is {IDENTIFIER_RULE}")
    return value


def _free_text(value: str) -> str:
    bad = control_character(value)
    if bad is not None:
        raise ValueError(f"text holding U+{ord(bad):04X}: free text holds {CONTROL_RULE}")
    return value


_ID_DESCRIPTION = f"An identifier: {IDENTIFIER_RULE}."

Identifier = Annotated[
    str,
    Field(min_length=1, max_length=128, description=_ID_DESCRIPTION),
    AfterValidator(_identifier),
]
"""An identifier in a body (operator name, population): :data:`fedstats._validation.IDENTIFIER_RULE`,
the charset of the enrollment tools (``fedstats enroll``, ``server add-operator``).

The edge refuses control characters in every path and query parameter, and path parameters that are
not identifiers, before routing (:func:`fedstats.service.http.edge.control_field`)."""

FreeText = Annotated[str, Field(max_length=256), AfterValidator(_free_text)]
"""Free text (a label): letters of any script, no control character (:data:`CONTROL_RULE`)."""

IdPath = Annotated[
    str,
    Path(min_length=1, max_length=128, description=_ID_DESCRIPTION),
    AfterValidator(_identifier),
]
"""A task, run or client id (or budget name) in a path: an identifier (:data:`Identifier`)."""

IndexPath = Annotated[int, Path(ge=0, le=MAX_INDEX)]
"""A round index, session number or stage in a path: 0 to :data:`MAX_INDEX` (422 beyond)."""


class Privacy(BaseModel):
    """Privacy budget of a task: what one run spends, and the data population it is charged to."""

    epsilon: Annotated[float | None, Field(gt=0, lt=1000)] = None
    delta: Annotated[float | None, Field(ge=0, lt=1)] = None
    population: Identifier = "default"


class Deadlines(BaseModel):
    """Per-stage deadlines in seconds."""

    checkin: Annotated[float, Field(ge=0.05, le=604800)] = 60.0
    round: Annotated[float, Field(ge=0.05, le=604800)] = 60.0


class SecureAggregation(BaseModel):
    """Compute every round's sum by secure aggregation among the devices (malicious-server model)."""

    max_session: Annotated[int, Field(ge=2, le=10_000)] = 1000
    min_session_size: Annotated[int | None, Field(ge=2, le=10_000)] = None


class TaskIn(BaseModel):
    """A task configuration (immutable once created; its id is the SHA-256 of its canonical form)."""

    analysis: Annotated[str, Field(min_length=1, max_length=64)]
    version: Annotated[int, Field(ge=1, le=1000)] = 1
    params: dict[str, Any] = {}
    privacy: Privacy = Privacy()
    cohort_size: Annotated[int, Field(ge=2, le=10**9)]
    min_clients: Annotated[int | None, Field(ge=1, le=10**9)] = None
    max_records_per_client: Annotated[int | None, Field(ge=1, le=10**9)] = None
    deadlines: Deadlines = Deadlines()
    label: FreeText = ""
    secure_aggregation: SecureAggregation | None = None


class SignedTaskIn(BaseModel):
    """A task signed by an analyst (``fedstats.wire.tasks.sign_task``): what ``POST /v1/admin/tasks`` takes.

    ``task`` is the normalized configuration (the fields of :class:`TaskIn`, defaults filled in),
    ``certificate`` the analyst certificate issued by a trusted enrollment authority
    (``fedstats enroll analyst``), ``signature`` the analyst's Ed25519 signature (hex) over
    ``TASK_DOMAIN`` + the canonical JSON of the task. The server checks it and stores it unchanged;
    devices check it again against the authority key they pinned.
    """

    # an envelope field besides these three is refused (422 naming it), never dropped unseen
    model_config = ConfigDict(extra="forbid")

    task: dict[str, Any]
    certificate: dict[str, Any]
    signature: Annotated[str, Field(min_length=128, max_length=128, pattern="^[0-9a-f]{128}$")]


class TaskOut(BaseModel):
    """A stored task: its id, its configuration and the envelope the analyst signed."""

    task_id: str
    created: bool
    config: dict[str, Any]
    envelope: dict[str, Any] | None = None


class RunIn(BaseModel):
    """Start a run of a task."""

    task_id: Annotated[str, Field(min_length=64, max_length=64, pattern="^[0-9a-f]{64}$")]


class RunOut(BaseModel):
    """A run's state (``result`` once done)."""

    run_id: str
    task_id: str
    analyst: str
    status: str
    n_clients: int | None
    devices: int
    rounds: list[dict[str, Any]]
    result: dict[str, Any] | None
    error: str | None
    refusals: dict[str, Any] = Field(
        default_factory=lambda: {"count": 0, "by_reason": {}, "messages": []},
        description="Devices that refused the run: their count, by reason code "
        "(fedstats.wire.refusals.REASONS), and each distinct message with its number of devices.",
    )


class BudgetIn(BaseModel):
    """A privacy budget."""

    epsilon: Annotated[float, Field(gt=0, lt=1e6)]
    delta: Annotated[float, Field(ge=0, lt=1)]


class BudgetOut(BaseModel):
    """A budget with what has been spent and what remains."""

    scope: str
    name: str
    epsilon_budget: float
    delta_budget: float
    spent_epsilon: float
    spent_delta: float
    remaining_epsilon: float
    remaining_delta: float
    charges: int


class ErrorOut(BaseModel):
    """An error."""

    detail: str


# -- device endpoints: raw bodies (each is signed over its exact bytes), declared for the OpenAPI schema


def device_body(schema: dict[str, Any], media_type: str = "application/json") -> dict[str, Any]:
    """``openapi_extra`` declaring a device endpoint's raw request body (read by the handler itself).

    Parameters
    ----------
    schema : dict
        JSON Schema of the body.
    media_type : str
        ``application/json`` or ``application/octet-stream`` (secure-aggregation stage messages).

    Returns
    -------
    dict
        ``{"requestBody": ...}`` for FastAPI's ``openapi_extra``.
    """
    return {"requestBody": {"required": True, "content": {media_type: {"schema": schema}}}}


DEVICE: dict[str, Any] = {
    "tags": ["device"],
    "description": "Signed by an enrolled device: headers X-Fedstats-Client, X-Fedstats-Timestamp, "
    "X-Fedstats-Nonce and X-Fedstats-Signature (fedstats.wire.auth.sign_request over the exact body), "
    "or, with X-Fedstats-Key-Id, the HMAC of the same payload under a request key "
    "(POST /v1/client/request-key; fedstats.wire.auth.sign_request_with_key).",
}
"""Route keywords shared by the device endpoints (their tag and how they are authenticated)."""

_HEX = {"type": "string", "pattern": "^[0-9a-f]*$", "maxLength": 256}
REGISTER_BODY = device_body(
    {
        "type": "object",
        "required": ["certificate"],
        "properties": {
            "certificate": {
                "type": "object",
                "required": ["body", "signature"],
                "properties": {"body": {"type": "object"}, "signature": _HEX},
            }
        },
    }
)
CHECKIN_BODY = device_body(
    {
        "type": "object",
        "required": ["records"],
        "properties": {
            "records": {"type": "integer", "minimum": 1, "maximum": 10**9},
            "commitment": {"anyOf": [_HEX, {"type": "null"}]},
        },
    }
)
REPORT_BODY = device_body(
    {
        "type": "object",
        "required": ["vector", "count"],
        "properties": {
            "vector": {"type": "array", "items": {"type": "integer"}},
            "count": {"type": "integer", "minimum": 0, "maximum": 10**9},
        },
    }
)
REVEAL_BODY = device_body(
    {
        "type": "object",
        "required": ["value", "seen"],
        "properties": {"value": _HEX, "seen": _HEX},
    }
)
STAGE_BODY = device_body({"type": "string", "format": "binary"}, "application/octet-stream")
