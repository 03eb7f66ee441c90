"""Schemathesis over the whole API of a live server, device endpoints signed: no 5xx, and every answer counted.

A real ``fedstats server`` (TLS, SQLite; PostgreSQL too when it is up) with an operator, an enrolled device
and one run in check-in. For every operation of its OpenAPI schema (admin, ops and device endpoints alike),
Schemathesis draws a fixed number of requests (seeded; no shrinking, so the run is bounded); each request is
sent with the operator's bearer token and signed by the device over its exact bytes
(:func:`fedstats.wire.auth.sign_request`), so the device endpoints are exercised past their signature check;
half of the requests to run paths name the live run (its device checked in, round 0 open), so handlers go
past "no such run" too. The server serves the two-aggregator mode (``--vdaf``) with a Prio3 leader task
of the run's task id, so the ``/v1/vdaf`` routes are fuzzed past "no such task" the same way (its helper is
unreachable: aggregation answers 422). Every answer
must be below 500 (Schemathesis' ``not_a_server_error``), and ``/metrics`` must have counted exactly the
answers the run received, status by status.
"""

from __future__ import annotations

import json
import re
import ssl
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from fedstats.wire import auth
from service_helpers import Deployment, pg_reachable, pg_schema

EXAMPLES = 12  # per operation
BUDGET_SECONDS = (
    240.0  # the whole run, generous for a loaded machine; typically well under a minute
)


@pytest.fixture(params=["sqlite", "postgresql"])
def live(request: pytest.FixtureRequest) -> Iterator[Deployment]:
    with tempfile.TemporaryDirectory(prefix="fedstats-schemathesis-") as root:
        if request.param == "sqlite":
            dep = Deployment(Path(root), f"sqlite:///{Path(root) / 'api.db'}")
            yield from _started(dep)
        else:
            reason = pg_reachable()
            if reason is not None:
                pytest.skip(reason)
            with pg_schema() as url:
                yield from _started(Deployment(Path(root), url))


def _started(dep: Deployment) -> Iterator[Deployment]:
    # no rate limit in the way: the fuzzer sends hundreds of requests as one device
    dep.start("--rate", "100000", "--burst", "100000", "--vdaf")
    try:
        yield dep
    finally:
        dep.kill()


def _metrics(http: httpx.Client) -> Counter[int]:
    text = http.get("/metrics").text
    pattern = r'^fedstats_http_responses_total\{status="(\d+)"\} (\S+)$'
    return Counter({int(s): int(float(v)) for s, v in re.findall(pattern, text, re.M)})


def test_no_operation_answers_5xx_and_metrics_count_every_answer(live: Deployment) -> None:
    dep = live
    ctx = ssl.create_default_context(cafile=str(dep.certs["ca"]))
    admin = dep.admin()
    # an enrolled device, and a run of its population in check-in
    ident = json.loads(dep.identity("fuzz-device").read_text())
    key = auth.private_key_from_hex(ident["private_key"])
    cid = str(ident["certificate"]["body"]["client_id"])
    body = json.dumps({"certificate": ident["certificate"]}).encode()
    reg = httpx.post(
        f"{dep.url}/v1/client/register",
        content=body,
        headers={
            **auth.sign_request(key, cid, "POST", "/v1/client/register", body),
            "content-type": "application/json",
        },
        verify=ctx,
    )
    assert reg.status_code == 200, reg.text
    for scope, name in (
        ("population", "default"),
        ("analyst", "alice"),
        ("analyst", "analyst-default"),
    ):
        got = admin.put(f"/v1/admin/budgets/{scope}/{name}", json={"epsilon": 100.0, "delta": 1e-3})
        assert got.status_code == 200, got.text
    task = {
        "analysis": "exact-mean",
        "params": {"column": "value", "clip": 1.0, "frac_bits": 20},
        "privacy": {"epsilon": None, "population": "default"},
        "cohort_size": 2,
        "min_clients": 1,
        # check-in closes soon with this device alone: round 0 is then open to (fuzzed) reports
        "deadlines": {"checkin": 2.0, "round": 600.0},
        "label": "schemathesis",
    }
    made = admin.post("/v1/admin/tasks", json=dep.sign(task))
    assert made.status_code == 201, made.text
    task_id = made.json()["task_id"]
    run = admin.post("/v1/admin/runs", json={"task_id": task_id})
    assert run.status_code == 201, run.text
    run_id = run.json()["run_id"]
    # a Prio3 round task (this server leads it) under the same id: live draws reach the /v1/vdaf
    # handlers. Over HTTP a Prio3 task comes only as a signed envelope, so it is made by the domain layer
    # on the server's database (the fuzzed POST /v1/vdaf/tasks exercises the envelope checks).
    from fedstats.service.domain import vdaf as vdaf_domain
    from fedstats.service.store import open_store

    store = open_store(dep.db)
    try:
        vdaf_domain.create_task(
            store,
            task_id=task_id,
            role="leader",
            vdaf={"type": "histogram", "length": 4, "chunk_length": 2},
            verify_key=bytes(32),
            ctx=b"",
            peer_url="https://127.0.0.1:9",  # nobody listens: jobs fail with 422
            peer_token="t" * 32,
        )
    finally:
        store.close()
    path = f"/v1/client/runs/{run_id}/checkin"
    body = json.dumps({"records": 1}).encode()
    joined = httpx.post(
        dep.url + path,
        content=body,
        headers={
            **auth.sign_request(key, cid, "POST", path, body),
            "content-type": "application/json",
        },
        verify=ctx,
    )
    assert joined.status_code == 200, joined.text
    deadline = time.monotonic() + 60
    while not any(
        r["status"] == "open" for r in admin.get(f"/v1/admin/runs/{run_id}").json()["rounds"]
    ):
        assert time.monotonic() < deadline, "round 0 did not open"
        time.sleep(0.2)

    schema = schemathesis.openapi.from_dict(httpx.get(f"{dep.url}/openapi.json", verify=ctx).json())
    operations = {op.label: op for op in (r.ok() for r in schema.get_all_operations())}
    labels = sorted(operations)
    assert any(k.startswith("POST /v1/client/") for k in labels), (
        labels
    )  # device endpoints included
    assert any(k.startswith("POST /v1/admin/") for k in labels), labels
    assert "POST /v1/vdaf/tasks/{task_id}/reports" in labels, labels  # --vdaf

    session = requests.Session()
    session.verify = str(dep.certs["ca"])
    seen: Counter[int] = Counter()
    by_operation: dict[str, Counter[int]] = {label: Counter() for label in labels}
    failures: list[str] = []
    before = _metrics(admin)
    t0 = time.monotonic()

    def send(case: Any, draw_live: bool) -> None:
        if draw_live and "run_id" in (case.path_parameters or {}):
            case.path_parameters["run_id"] = run_id
            if "index" in case.path_parameters:
                case.path_parameters["index"] = 0
        if draw_live and "task_id" in (case.path_parameters or {}):
            case.path_parameters["task_id"] = task_id
        if draw_live and "scope" in (case.path_parameters or {}):
            case.path_parameters["scope"] = "analyst"
        if draw_live and isinstance(case.body, dict) and "task_id" in case.body:
            case.body["task_id"] = task_id
        kwargs = case.as_transport_kwargs(base_url=dep.url)
        fields = ("method", "url", "headers", "params", "json", "data", "cookies", "files")
        prepared = requests.Request(**{k: kwargs[k] for k in fields if k in kwargs}).prepare()
        raw = prepared.body or b""
        raw = raw.encode() if isinstance(raw, str) else raw
        path = unquote(urlsplit(prepared.url).path)  # what the server verifies: the decoded path
        prepared.headers.update(auth.sign_request(key, cid, prepared.method or "GET", path, raw))
        prepared.headers["Authorization"] = f"Bearer {dep.token}"
        response = session.send(prepared, timeout=60)
        seen[response.status_code] += 1
        by_operation[case.operation.label][response.status_code] += 1
        try:
            case.validate_response(response, checks=[not_a_server_error])
        except Exception as exc:  # collect every operation's failure, not just the first
            failures.append(
                f"{case.method} {path}: {response.status_code} {response.text[:300]} ({exc})"
            )
            raise

    def fuzzer(label: str) -> Any:
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,  # a fixed seed: the same requests every run
            phases=[Phase.explicit, Phase.generate],  # no shrinking: bounded even on a 5xx
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        @given(data=st.data())
        def fuzz(data: Any) -> None:
            case = data.draw(operations[label].as_strategy())
            send(case, data.draw(st.booleans()))

        return fuzz

    for label in labels:
        if time.monotonic() - t0 > BUDGET_SECONDS:
            pytest.fail(f"the run took over {BUDGET_SECONDS} s before {label}")
        try:
            fuzzer(label)()
        except Exception:
            if not failures:
                raise

    assert not failures, "\n".join(failures)
    after = _metrics(admin)
    seen[200] += 1  # the first /metrics read is counted by the second
    counted = Counter({s: after[s] - before[s] for s in after if after[s] - before[s]})
    assert counted == seen, (counted, seen)
    # every operation was exercised, and the signed device requests got past the signature check
    assert all(by_operation[label] for label in labels), by_operation
    for label in labels:
        if (" /v1/client/" in label and label != "POST /v1/client/register") or label.endswith(
            "/reports"
        ):
            assert set(by_operation[label]) - {401}, (label, by_operation[label])
