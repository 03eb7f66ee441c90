"""``POST /v1/admin/tasks`` and run start refuse what can never run or has expired (issue 42, items 1, 3).

A signed task whose content is invalid is a 422 naming the field; 403 is kept for signature,
certificate, population and expiry failures; nothing is stored or reserved either way. SQLite and
PostgreSQL (the ``deployment`` fixture: a started ``fedstats server``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from fedstats import wire
from fedstats.cli.app import app
from fedstats.client import Device
from fedstats.client.policy import LocalBudget, Policy
from fedstats.errors import ParameterError
from fedstats.wire import auth
from fedstats.wire.encoding import canonical_bytes
from fedstats.wire.enrollment import issue_analyst, renew_analyst, revoke_analyst
from fedstats.wire.tasks import TASK_DOMAIN, normalize_task
from service_helpers import Deployment

TASK: dict[str, Any] = {
    "analysis": "bitpushing-mean",
    "params": {"column": "value", "low": 0.0, "high": 1.0, "method": "weighted"},
    "privacy": {"epsilon": 1.0, "population": "default"},
    "cohort_size": 20,
}
PRIO3 = {"leader": "https://a.example", "helper": "https://b.example", "noise": None}


def _signed_raw(ident: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    """``task`` signed as is, unnormalized: what a careless or hostile signer would post."""
    key = auth.private_key_from_hex(ident["private_key"])
    return {
        "task": task,
        "certificate": ident["certificate"],
        "signature": key.sign(TASK_DOMAIN + canonical_bytes(task)).hex(),
    }


def _n_tasks(dep: Deployment) -> int:
    with dep.admin() as a:
        return int(a.get("/v1/admin/tasks", params={"limit": 500}).json()["total"])


def test_signed_content_that_can_never_run_is_422_naming_the_field(deployment: Deployment) -> None:
    ident = deployment.analyst()
    good = {**normalize_task(TASK), "not_after": int(time.time()) + 3600}
    before = _n_tasks(deployment)
    cases = {
        "cohort_size": {**good, "cohort_size": 4.5},
        "label": {**good, "label": "x\x00y"},
        "prio3.min_batch_size": {**good, "prio3": {**PRIO3, "min_batch_size": 1000}},
        "prio3.leader": {
            **good,
            "prio3": {**PRIO3, "leader": "http://a.example", "min_batch_size": 10},
        },
        "min_clients": {**good, "min_clients": 21},
        "epslion": {**good, "epslion": 2.0},
    }
    with deployment.admin() as a:
        for field, task in cases.items():
            r = a.post("/v1/admin/tasks", json=_signed_raw(ident, task))
            assert r.status_code == 422, (field, r.status_code, r.text)
            assert r.json()["detail"].startswith(f"{field}="), (field, r.text)
        # an envelope field besides task, certificate, signature: named, never dropped unseen
        r = a.post("/v1/admin/tasks", json={**deployment.sign(TASK), "note": "hi"})
        assert r.status_code == 422 and "note" in r.json()["detail"], r.text
        # a key given twice in the body (two epsilons): refused, never "the last wins"
        body = wire.dumps(deployment.sign(TASK)).replace(
            '"epsilon":1.0', '"epsilon":1.0,"epsilon":9.0', 1
        )
        assert body.count('"epsilon"') == 2
        r = a.post("/v1/admin/tasks", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and "duplicate key 'epsilon'" in r.json()["detail"], r.text
        # a valid task whose signature does not verify stays 403
        altered = deployment.sign(TASK)
        altered["task"] = {**altered["task"], "cohort_size": 21}
        r = a.post("/v1/admin/tasks", json=altered)
        assert r.status_code == 403 and "does not verify" in r.json()["detail"], r.text
    assert _n_tasks(deployment) == before  # nothing stored


def test_expired_tasks_and_revoked_analysts_are_refused(deployment: Deployment) -> None:
    folder = deployment.root / "authority"
    # an analyst who leaves: certified for 4 seconds (a short-lived certificate), then revoked
    leaver = issue_analyst(
        folder, "leaver", ["default"], deployment.root / "leaver.json", valid_days=4 / 86400
    )
    # signed without not_after (as before tasks carried one): bounded by its certificate alone
    stale = _signed_raw(leaver, normalize_task({**TASK, "label": "leaver"}))
    # a task of a current analyst that expires in 3 seconds
    short = deployment.sign({**TASK, "label": "short", "not_after": int(time.time()) + 3})
    with deployment.admin() as a:
        ids = {}
        for name, env in (("leaver", stale), ("short", short)):
            r = a.post("/v1/admin/tasks", json=env)
            assert r.status_code == 201, r.text
            ids[name] = r.json()["task_id"]
        assert revoke_analyst(folder, "leaver")
        with pytest.raises(ParameterError, match="revoked"):
            renew_analyst(folder, deployment.root / "leaver.json")
        end = max(float(leaver["certificate"]["body"]["not_after"]), short["task"]["not_after"])
        time.sleep(max(0.0, end - time.time()) + 1.2)
        spent = a.get("/v1/admin/budgets/population/default").json().get("spent_epsilon", 0.0)
        # the server refuses to start a run of either; nothing is reserved
        r = a.post("/v1/admin/runs", json={"task_id": ids["leaver"]})
        assert r.status_code == 403 and "certificate expired" in r.json()["detail"], r.text
        r = a.post("/v1/admin/runs", json={"task_id": ids["short"]})
        assert r.status_code == 403 and "task expired" in r.json()["detail"], r.text
        got = a.get("/v1/admin/budgets/population/default").json().get("spent_epsilon", 0.0)
        assert got == spent
        # and the revoked analyst's envelopes, old or new, are refused (its certificate is not renewed)
        r = a.post("/v1/admin/tasks", json=stale)
        assert r.status_code == 403 and "expired" in r.json()["detail"], r.text
        fresh = _signed_raw(leaver, normalize_task({**TASK, "label": "after leaving"}))
        r = a.post("/v1/admin/tasks", json=fresh)
        assert r.status_code == 403 and "expired" in r.json()["detail"], r.text


def test_a_device_refuses_a_task_that_expired_before_it_accepted(deployment: Deployment) -> None:
    """A run started just before its task's not_after: a device polling after it refuses the task
    (verify_task at the offer), checks in to nothing and is charged nothing."""
    population = "expiring"
    with deployment.admin() as a:
        for scope, name in (("population", population), ("analyst", "alice")):
            r = a.put(f"/v1/admin/budgets/{scope}/{name}", json={"epsilon": 1000.0, "delta": 0.01})
            assert r.status_code == 200, r.text
        task = {
            **TASK,
            "privacy": {"epsilon": 1.0, "population": population},
            "cohort_size": 2,
            "label": "expiring",
            "not_after": int(time.time()) + 2,
        }
        r = a.post("/v1/admin/tasks", json=deployment.sign(task))
        assert r.status_code == 201, r.text
        r = a.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]})
        assert r.status_code == 201, r.text
        run_id = str(r.json()["run_id"])
    ident = json.loads(deployment.identity("expiring-0", population).read_text())
    time.sleep(max(0.0, task["not_after"] - time.time()) + 1.2)
    dev = Device(
        deployment.url,
        ident,
        {"value": np.zeros(1)},
        budget=LocalBudget(None, epsilon=10.0, delta=1e-4),
        ca=deployment.certs["ca"],
    )
    try:
        dev.register()
        deadline = time.monotonic() + 30
        while run_id not in dev.refused:
            assert time.monotonic() < deadline, dev.refused
            dev.step()
            time.sleep(0.05)
    finally:
        dev.close()
    assert "task expired" in dev.refused[run_id]
    assert dev.budget.charges == {} and dev.budget.spent() == (0.0, 0.0)
    with deployment.admin() as a:
        view = a.get(f"/v1/admin/runs/{run_id}").json()
        assert view["devices"] == 0  # no check-in
        # ... and the server knows why (issue 42, item 4)
        assert view["refusals"]["by_reason"] == {"task_expired": 1}, view["refusals"]


CHI2_ON_TEXT: dict[str, Any] = {
    "analysis": "fed-chi2",
    "params": {"shape": [2, 2], "x": "colour", "y": "size", "encoding_size": 8},
    "cohort_size": 3,
    "min_clients": 3,
    "deadlines": {"checkin": 120.0, "round": 60.0},
    "secure_aggregation": {"max_session": 3, "min_session_size": 3},
}


def _step_until(devices: list[Device], done: Any, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, [d.refused for d in devices]
        for d in devices:
            d.step()
        time.sleep(0.05)


def test_the_operator_reads_why_devices_refused_a_task_on_text_columns(
    deployment: Deployment, tmp_path: Path
) -> None:
    """Issue 42, "done when": a fed-chi2 task on a text column. Each device checks its data against
    the task before checking in, refuses (data_invalid) and tells the server why, naming the user's
    column; the check-in closes as soon as every device answered and the run aborts with
    "3 of 3 devices refused: ..."; ``fedstats admin runs show`` shows the reason. The data file fixed,
    the same devices (not restarted) read it again and check in to the next run."""
    population = "refusing"
    files = []
    for i in range(3):
        f = tmp_path / f"device-{i}.csv"
        f.write_text("colour,size\nred,0\n")  # colour: text, where integer codes are needed
        files.append(f)
    with deployment.admin() as a:
        r = a.post(
            "/v1/admin/tasks",
            json=deployment.sign(
                {**CHI2_ON_TEXT, "privacy": {"epsilon": None, "population": population}}
            ),
        )
        assert r.status_code == 201, r.text
        task_id = r.json()["task_id"]
        run_id = a.post("/v1/admin/runs", json={"task_id": task_id}).json()["run_id"]
    devices = [
        Device(
            deployment.url,
            json.loads(deployment.identity(f"refusing-{i}", population).read_text()),
            files[i],
            policy=Policy(allow_non_private=True, min_session_size=3),
            budget=LocalBudget(None),
            ca=deployment.certs["ca"],
        )
        for i in range(3)
    ]
    try:
        for d in devices:
            d.register()
        _step_until(devices, lambda: all(run_id in d.refused for d in devices))
        with deployment.admin() as a:
            deadline = time.monotonic() + 30  # the check-in closes at once: all answered
            while (view := a.get(f"/v1/admin/runs/{run_id}").json())["status"] != "aborted":
                assert time.monotonic() < deadline, view
                time.sleep(0.1)
        message = "category column colour must hold integer codes in [0, 2) (it holds text)"
        assert view["error"].startswith(f"3 of 3 devices refused: {message} (3)"), view["error"]
        assert view["refusals"]["by_reason"] == {"data_invalid": 3}
        assert view["refusals"]["messages"] == [
            {"reason": "data_invalid", "message": message, "devices": 3}
        ]
        shown = CliRunner().invoke(
            app,
            [
                "admin",
                "--server",
                deployment.url,
                "--ca",
                str(deployment.certs["ca"]),
                "--token",
                deployment.token,
                "runs",
                "show",
                run_id,
            ],
        )
        assert shown.exit_code == 0, shown.output
        assert "3 devices: data_invalid 3" in shown.output, shown.output
        assert "category column colour must hold" in " ".join(shown.output.split()), shown.output
        # the file fixed: the devices read it again before the next run and check in
        for f in files:
            f.write_text("colour,size\n1,0\n")
        with deployment.admin() as a:
            again = a.post("/v1/admin/runs", json={"task_id": task_id}).json()["run_id"]
            _step_until(devices, lambda: all(again in d.joined for d in devices))
            assert a.post(f"/v1/admin/runs/{again}/cancel").status_code == 200
    finally:
        for d in devices:
            d.close()
