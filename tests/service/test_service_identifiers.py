"""Identifiers at the server follow the enrollment tools' charset, on SQLite and PostgreSQL (issue 42, item 2).

* a control character of any Unicode category Cc or Cf (C1 U+0085, bidi override U+202E, zero-width
  space U+200B, BOM U+FEFF) in any path or query parameter of any route of the OpenAPI document is a 422
  naming the parameter, before routing;
* every path parameter that is not a number is an identifier (``fedstats._validation.IDENTIFIER_RULE``,
  the rule ``fedstats enroll`` and ``server add-operator`` apply): a backslash, ``..``, or leading or
  trailing whitespace is a 422 naming it too, and nothing is stored under such a name;
* names in bodies (operators) follow the same rule; free text (a task's label) may hold letters of any
  script but no Cc or Cf character; a task's population is an identifier (``tasks sign`` and the server
  check it with one function).

The server runs in this process (``create_app`` with its edge middleware) on each store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from fedstats._validation import IDENTIFIER_RULE, check_identifier, is_identifier
from fedstats.errors import ParameterError
from fedstats.service.domain.operators import add_operator
from fedstats.service.http.app import ServerSettings, create_app
from fedstats.service.store import open_store
from fedstats.wire.tasks import normalize_task
from service_helpers import store_url

# Cc beyond C0 and DEL, and Cf: what the edge let through before (PostgreSQL stored them)
CONTROLS = ["\x85", "\x9b", "\u202e", "\u2066", "\u200b", "\u200d", "\ufeff", "\u00ad"]
# not controls, but outside the identifier charset of the enrollment tools
# (a whole ".." or "/" segment cannot be sent through an HTTP client: it resolves or splits it)
NOT_IDENTIFIERS = ["a\\b", " ab", "ab ", "a..b", "\u3000ab"]
GOOD = ["zürich", "東京-1", "pop.a_b", "a b"]  # identifiers of any script; an inner space is fine

TASK: dict[str, Any] = {
    "analysis": "bitpushing-mean",
    "params": {"column": "value", "low": 0.0, "high": 1.0, "method": "weighted"},
    "privacy": {"epsilon": 1.0, "population": "default"},
    "cohort_size": 20,
}


@pytest.fixture(params=["sqlite", "postgresql"])
def admin(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    """An operator's client of a server (its edge included) on a fresh store of each kind."""
    with store_url(request.param, tmp_path / "ids.db") as url:
        store = open_store(url)
        try:
            token = add_operator(store, "root")
            app = create_app(
                store, ServerSettings(vdaf=True, rate=1e6, burst=1e6), run_driver=False
            )
            with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
                yield client
        finally:
            store.close()


def _operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, list[dict[str, Any]]]]:
    for template, item in doc["paths"].items():
        for method, op in item.items():
            if method in ("get", "post", "put", "delete", "patch"):
                yield method.upper(), template, list(op.get("parameters", []))


def _is_int(param: dict[str, Any]) -> bool:
    return param.get("schema", {}).get("type") == "integer"


def _request(
    admin: TestClient,
    method: str,
    template: str,
    params: list[dict[str, Any]],
    target: dict[str, Any],
    value: str,
) -> Any:
    path = template
    paths = [p for p in params if p["in"] == "path"]
    for p in paths:
        v = value if p is target else ("0" if _is_int(p) else "x")
        path = path.replace("{" + p["name"] + "}", quote(v, safe=""))
    if target["in"] == "query":
        path += f"?{target['name']}={quote(value, safe='')}"
    return admin.request(method, path, json={})


def test_the_charset_is_one_rule() -> None:
    """What the enrollment tools refuse (``check_identifier``) is what the rule says, and names it."""
    for value in (
        [f"a{c}b" for c in CONTROLS] + NOT_IDENTIFIERS + ["..", "a/b", "", "a\x00b", "x" * 129]
    ):
        assert not is_identifier(value), repr(value)
        with pytest.raises(ParameterError, match="--client-id") as err:
            check_identifier("--client-id", value)
        assert IDENTIFIER_RULE in str(err.value)
    for value in GOOD:
        assert is_identifier(value) and check_identifier("name", value) == value
    # the CLI's enroll uses it (the server's checks are tested below against the same values)
    from fedstats.cli import enroll

    assert enroll.check_identifier is check_identifier


def test_cc_and_cf_characters_in_any_parameter_are_a_422_naming_it(admin: TestClient) -> None:
    doc = admin.get("/openapi.json").json()
    tried = 0
    for method, template, params in _operations(doc):
        for target in [p for p in params if p["in"] in ("path", "query")]:
            for char in CONTROLS:
                r = _request(admin, method, template, params, target, f"a{char}b")
                tried += 1
                where = f"{method} {template} ({target['in']} {target['name']}, {char!r})"
                assert r.status_code == 422, f"{where}: {r.status_code} {r.text}"
                detail = r.json()["detail"]
                assert f"{target['in']}.{target['name']}" in detail, where
                assert "control" in detail, where
    assert tried >= 300


def test_every_path_identifier_follows_the_charset(admin: TestClient) -> None:
    doc = admin.get("/openapi.json").json()
    tried = 0
    for method, template, params in _operations(doc):
        for target in [p for p in params if p["in"] == "path" and not _is_int(p)]:
            for value in NOT_IDENTIFIERS:
                r = _request(admin, method, template, params, target, value)
                tried += 1
                where = f"{method} {template} (path {target['name']}, {value!r})"
                assert r.status_code == 422, f"{where}: {r.status_code} {r.text}"
                assert f"path.{target['name']}" in r.json()["detail"], where
    assert tried >= 100


def test_names_are_stored_only_when_they_are_identifiers(admin: TestClient) -> None:
    budget = {"epsilon": 1.0, "delta": 0.0}
    bad = [f"a{c}b" for c in CONTROLS] + NOT_IDENTIFIERS
    for name in bad:
        r = admin.put(f"/v1/admin/budgets/population/{quote(name, safe='')}", json=budget)
        assert r.status_code == 422 and "path.name" in r.json()["detail"], (name, r.text)
        r = admin.post("/v1/admin/operators", json={"name": name})
        assert r.status_code == 422 and "body.name" in r.json()["detail"], (name, r.text)
    for name in GOOD:
        r = admin.put(f"/v1/admin/budgets/population/{quote(name, safe='')}", json=budget)
        assert r.status_code == 200, (name, r.text)
        r = admin.post("/v1/admin/operators", json={"name": name})
        assert r.status_code in (200, 201), (name, r.text)
    budgets = {b["name"] for b in admin.get("/v1/admin/budgets").json()["items"]}
    assert budgets == set(GOOD)
    operators = {o["name"] for o in admin.get("/v1/admin/operators").json()["items"]}
    assert operators == {"root", *GOOD}


def test_a_task_label_is_free_text_and_its_population_an_identifier() -> None:
    assert normalize_task({**TASK, "label": "Zürich – 東京 (week 3)"})["label"].startswith("Zürich")
    for char in CONTROLS:
        with pytest.raises(ParameterError, match=r"^label="):
            normalize_task({**TASK, "label": f"week{char}3"})
    for value in [f"a{c}b" for c in CONTROLS] + NOT_IDENTIFIERS:
        with pytest.raises(ParameterError, match=r"^privacy\.population="):
            normalize_task({**TASK, "privacy": {"epsilon": 1.0, "population": value}})
