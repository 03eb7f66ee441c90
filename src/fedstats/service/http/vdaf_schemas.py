"""The request bodies of the two-aggregator mode's routes (:mod:`fedstats.service.http.vdaf`), for OpenAPI.

The handlers read their bodies raw (strict JSON, :func:`fedstats.service.http.edge.strict_loads`); these
``openapi_extra`` declarations put the bodies' JSON Schemas in ``/openapi.json``.
"""

from __future__ import annotations

from fedstats.service.http.schemas import device_body

__all__ = [
    "AGGREGATE_BODY",
    "BULK_BODY",
    "CREATE_BODY",
    "JOB_BODY",
    "JOIN_BODY",
    "MAX_BULK",
    "RESULT_BODY",
    "ROUND_BODY",
    "UPLOAD_BODY",
]

# request bodies (read raw by the handlers), declared for the OpenAPI schema
_HEX = {"type": "string", "pattern": "^[0-9a-f]*$"}
_ID32 = {"type": "string", "pattern": "^[0-9a-f]{32}$"}
CREATE_BODY = device_body(
    {
        "type": "object",
        "required": ["envelope", "role", "verify_key", "peer_token"],
        "properties": {
            "envelope": {
                "type": "object",
                "required": ["task", "certificate", "signature"],
                "properties": {
                    "task": {"type": "object"},
                    "certificate": {"type": "object"},
                    "signature": {"type": "string"},
                },
            },
            "role": {"enum": ["leader", "helper"]},
            "verify_key": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "peer_token": {"type": "string", "minLength": 32, "maxLength": 512},
        },
    }
)
ROUND_BODY = device_body(
    {
        "type": "object",
        "required": ["round", "history"],
        "properties": {
            "round": {"type": "integer", "minimum": 0},
            "history": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["total", "n_clients"],
                    "properties": {
                        "total": {"type": "array", "items": {"type": "integer"}},
                        "n_clients": {"type": "integer", "minimum": 0},
                    },
                },
            },
        },
    }
)
JOIN_BODY = device_body({"type": "object"})
RESULT_BODY = device_body(
    {"type": "object", "required": ["result"], "properties": {"result": {"type": "object"}}}
)
UPLOAD_BODY = device_body(
    {
        "type": "object",
        "required": ["report_id", "public_share", "input_share"],
        "properties": {
            "report_id": _ID32,
            "public_share": _HEX,
            "input_share": _HEX,
            "leader_receipt": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        },
    }
)
MAX_BULK = 1000
"""Most signed uploads one ``POST /{task_id}/reports/bulk`` carries."""
BULK_BODY = device_body(
    {
        "type": "object",
        "required": ["reports"],
        "properties": {
            "reports": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_BULK,
                "items": {
                    "type": "object",
                    "required": ["headers", "body"],
                    "properties": {
                        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                        "body": {"type": "string"},
                    },
                },
            }
        },
    }
)
AGGREGATE_BODY = device_body(
    {
        "type": "object",
        "properties": {"batch_size": {"type": "integer", "minimum": 1, "maximum": 100_000}},
    }
)
JOB_BODY = device_body(
    {
        "type": "object",
        "required": ["job_id", "reports"],
        "properties": {
            "job_id": _ID32,
            "reports": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["report_id", "public_share", "verifier_share"],
                    "properties": {
                        "report_id": _ID32,
                        "public_share": _HEX,
                        "verifier_share": _HEX,
                    },
                },
            },
        },
    }
)
