"""Fuzz the admin API from its OpenAPI description (schemathesis): no input gives a 5xx."""

from __future__ import annotations

import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings

from fedstats.service.app import add_operator, create_app
from fedstats.service.store import open_store

_DB = Path(tempfile.mkdtemp(prefix="fedstats-fuzz-")) / "fuzz.db"
_STORE = open_store(f"sqlite:///{_DB}")
_TOKEN = add_operator(_STORE, "fuzzer")
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(_STORE, run_driver=False))


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_admin_api_never_answers_5xx(case: schemathesis.Case) -> None:
    response = case.call(headers={"Authorization": f"Bearer {_TOKEN}"})
    assert response.status_code < 500, (case.method, case.path, response.text[:500])
    # and with a wrong token no admin endpoint answers anything but a 4xx
    if case.path.startswith("/v1/admin"):
        anonymous = case.call(headers={"Authorization": "Bearer wrong"})
        assert 400 <= anonymous.status_code < 500, anonymous.status_code
