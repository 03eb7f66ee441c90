"""End to end over DAP-09: two ``fedstats server --dap`` processes (leader, helper), TLS on 127.0.0.1.

The tasks are provisioned through the interop test design's aggregator endpoints; a
:class:`fedstats.dap.Client` uploads Prio3Count reports and :class:`fedstats.dap.Collector` collects the
exact count from the leader, which ran the aggregation job and fetched the helper's aggregate share over
DAP; ``fedstats admin collect --dap`` (a subprocess, with a credential from ``fedstats admin prio3
collector-credential``) collects a time-interval and a leader-selected batch the same way. A fixed-size Prio3Sum task goes through the design's client and collector endpoints (served in process by a
``dap_interop`` app) against the same two aggregator processes. A replayed upload is refused with a DAP
problem document; a wrong media type with 415.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from fedstats.dap import messages as m
from fedstats.dap.client import Client
from fedstats.dap.collector import Collector
from fedstats.dap.hpke import HpkeKeypair
from fedstats.dap.task import b64encode
from fedstats.errors import DataError
from fedstats.service.http.dap import add_dap_routes
from fedstats.service.store import open_store
from fedstats.vdaf import Prio3Count, Prio3Sum
from service_helpers import FEDSTATS, Deployment

TP = 3600


@pytest.fixture(scope="module")
def aggregators(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    root = tmp_path_factory.mktemp("dap")
    deps = [Deployment(root / r, f"sqlite:///{root / r}.db") for r in ("leader", "helper")]
    deps[1].certs = deps[0].certs  # one CA for both, so each trusts the other's certificate
    bundle = Path(deps[0].certs["ca"])
    try:
        with ThreadPoolExecutor(2) as pool:  # start both processes at once
            list(
                pool.map(
                    lambda d: d.start(
                        "--dap", "--dap-interop", "aggregator", "--vdaf-peer-ca", str(bundle)
                    ),
                    deps,
                )
            )
        yield deps[0].url, deps[1].url, bundle
    finally:
        for d in deps:
            d.kill()


def _add_task(
    http: httpx.Client,
    leader: str,
    helper: str,
    vdaf: dict[str, Any],
    collector_cfg: str,
    *,
    collector_token: str = "collector-token",
    query_type: int = 1,
) -> bytes:
    task_id = os.urandom(32)
    params = {
        "task_id": b64encode(task_id),
        "leader": leader,
        "helper": helper,
        "vdaf": vdaf,
        "leader_authentication_token": "leader-token",
        "collector_authentication_token": collector_token,
        "vdaf_verify_key": b64encode(os.urandom(32)),
        "max_batch_query_count": 1,
        "query_type": query_type,
        "min_batch_size": 3,
        "time_precision": TP,
        "collector_hpke_config": collector_cfg,
    }
    for url, role in ((leader, "leader"), (helper, "helper")):
        assert http.post(f"{url}/internal/test/ready", json={}).json() == {}
        got = http.post(
            f"{url}/internal/test/endpoint_for_task", json={"task_id": params["task_id"]}
        ).json()
        assert got == {"status": "success", "endpoint": "/"}
        assert http.post(f"{url}/internal/test/add_task", json=dict(params, role=role)).json() == {
            "status": "success"
        }
    return task_id


def test_count_over_dap(aggregators: tuple[str, str, Path]) -> None:
    leader, helper, bundle = aggregators
    http = httpx.Client(verify=ssl.create_default_context(cafile=str(bundle)), timeout=60)
    kp = HpkeKeypair.generate(7)
    task_id = _add_task(http, leader, helper, {"type": "Prio3Count"}, b64encode(kp.config.encode()))
    vdaf = Prio3Count()
    client = Client(
        leader=leader, helper=helper, task_id=task_id, vdaf=vdaf, time_precision=TP, http=http
    )
    now = int(time.time())
    for x in (1, 0, 1, 1, 1):
        client.upload(x, time=now)
    report = client.prepare(1, time=now)
    url = f"{leader}/tasks/{b64encode(task_id)}/reports"
    assert (
        http.put(
            url, content=report.encode(), headers={"Content-Type": m.Report.MEDIA_TYPE}
        ).status_code
        == 200
    )
    replay = http.put(url, content=report.encode(), headers={"Content-Type": m.Report.MEDIA_TYPE})
    assert (
        replay.status_code == 400 and replay.headers["content-type"] == "application/problem+json"
    )
    assert replay.json()["type"] == "urn:ietf:params:ppm:dap:error:reportRejected"
    assert (
        http.put(
            url, content=report.encode(), headers={"Content-Type": "application/json"}
        ).status_code
        == 415
    )
    collector = Collector(
        leader=leader,
        task_id=task_id,
        auth_token="collector-token",
        hpke_keypair=kp,
        vdaf=vdaf,
        http=http,
    )
    with pytest.raises(DataError, match="403"):
        Collector(
            leader=leader, task_id=task_id, auth_token="nope", hpke_keypair=kp, vdaf=vdaf, http=http
        ).start(m.Query(1, batch_interval=m.Interval(now - now % TP, TP)))
    result = collector.collect(
        m.Query(1, batch_interval=m.Interval(now - now % TP, TP)), timeout=60, interval=0.2
    )
    assert (result.aggregate, result.report_count) == (5, 6)
    assert result.interval == m.Interval(now - now % TP, TP)


def _fed(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDSTATS_")}
    return subprocess.run(
        [*FEDSTATS, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_admin_collect_over_dap(aggregators: tuple[str, str, Path], tmp_path: Path) -> None:
    """``fedstats admin collect --dap`` collects from the leader: a time-interval Count batch and a
    leader-selected (fixed-size) Sum batch; bad input is one ``error:`` line and exit 2, the leader's
    refusal one line and exit 1."""
    leader, helper, bundle = aggregators
    cred = tmp_path / "collector.json"
    made = _fed("admin", "prio3", "collector-credential", str(cred), "--json")
    assert made.returncode == 0, made.stderr
    got = json.loads(made.stdout)
    assert oct(cred.stat().st_mode & 0o777) == "0o600"
    assert (
        _fed("admin", "prio3", "collector-credential", str(cred)).returncode == 2
    )  # not overwritten
    http = httpx.Client(verify=ssl.create_default_context(cafile=str(bundle)), timeout=60)
    token = got["collector_authentication_token"]
    cfg = got["collector_hpke_config"]
    count_task = _add_task(http, leader, helper, {"type": "Prio3Count"}, cfg, collector_token=token)
    sum_task = _add_task(
        http,
        leader,
        helper,
        {"type": "Prio3Sum", "bits": 8},
        cfg,
        collector_token=token,
        query_type=2,
    )
    now = int(time.time())
    start = now - now % TP
    for task_id, vdaf, values in (
        (count_task, Prio3Count(), (1, 1, 0, 1)),
        (sum_task, Prio3Sum(max_measurement=255), (200, 7, 1)),
    ):
        client = Client(
            leader=leader, helper=helper, task_id=task_id, vdaf=vdaf, time_precision=TP, http=http
        )
        for x in values:
            client.upload(x, time=now)
    base = ["admin", "--server", leader, "--ca", str(bundle), "collect", "--dap"]
    count_args = [
        *base,
        b64encode(count_task),
        "--collector-credential",
        str(cred),
        "--vdaf",
        "Prio3Count",
    ]
    batch = ["--batch-interval-start", str(start), "--batch-interval-duration", str(TP)]
    for bad, flag in (
        (count_args, "--batch-interval-start"),  # no batch named
        ([*count_args, *batch, "--current-batch"], "--batch-interval-start"),  # two
        ([*count_args[:-1], "Prio3Sum:bits=x", *batch], "--vdaf"),
        ([*base, "AAAA", *count_args[-4:], *batch], "TASK_ID"),
        (
            [*count_args[:-3], str(tmp_path / "none.json"), *count_args[-2:], *batch],
            "--collector-credential",
        ),
    ):
        out = _fed(*bad)
        assert out.returncode == 2, (bad, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {flag}"), out.stderr
    refused = _fed(*count_args, *batch, "--collector-token", "not-the-token")
    assert refused.returncode == 1 and "403" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    done = _fed(*count_args, *batch, "--json", "--job-timeout", "90")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "task_id": b64encode(count_task),
        "aggregate": 3,
        "report_count": 4,
        "interval_start": start,
        "interval_duration": TP,
        "batch_id": None,
    }
    shown = _fed(
        *base,
        b64encode(sum_task),
        "--collector-credential",
        str(cred),
        "--vdaf",
        "Prio3Sum:bits=8",
        "--current-batch",
        "--job-timeout",
        "90",
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("208 (3 reports; batch "), shown.stdout


def test_sum_through_the_interop_client_and_collector(
    aggregators: tuple[str, str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    leader, helper, bundle = aggregators
    monkeypatch.setenv(
        "SSL_CERT_FILE", str(bundle)
    )  # the rigs' own httpx clients trust the test CA
    rigs = {}
    for role in ("client", "collector"):
        app = FastAPI()
        add_dap_routes(app, open_store("memory://"), interop=role)
        rigs[role] = TestClient(app)
    vdaf_obj = {"type": "Prio3Sum", "bits": "8"}
    task_b64 = b64encode(os.urandom(32))
    got = (
        rigs["collector"]
        .post(
            "/internal/test/add_task",
            json={
                "task_id": task_b64,
                "leader": leader,
                "vdaf": vdaf_obj,
                "collector_authentication_token": "ct",
                "query_type": 2,
            },
        )
        .json()
    )
    assert got["status"] == "success"
    http = httpx.Client(verify=ssl.create_default_context(cafile=str(bundle)), timeout=60)
    params = {
        "task_id": task_b64,
        "leader": leader,
        "helper": helper,
        "vdaf": vdaf_obj,
        "leader_authentication_token": "lt",
        "collector_authentication_token": "ct",
        "vdaf_verify_key": b64encode(os.urandom(32)),
        "max_batch_query_count": 1,
        "query_type": 2,
        "max_batch_size": None,
        "min_batch_size": 3,
        "time_precision": TP,
        "collector_hpke_config": got["collector_hpke_config"],
    }
    for url, role in ((leader, "leader"), (helper, "helper")):
        assert (
            http.post(f"{url}/internal/test/add_task", json=dict(params, role=role)).json()[
                "status"
            ]
            == "success"
        )
    now = int(time.time())
    for x in (17, 255, 3):
        up = {
            "task_id": task_b64,
            "leader": leader,
            "helper": helper,
            "vdaf": vdaf_obj,
            "measurement": str(x),
            "time": now,
            "time_precision": TP,
        }
        assert rigs["client"].post("/internal/test/upload", json=up).json() == {"status": "success"}
    query = {"type": 2, "subtype": 1}  # fixed-size: the current batch
    start = rigs["collector"].post(
        "/internal/test/collection_start",
        json={"task_id": task_b64, "agg_param": "", "query": query},
    )
    handle = start.json()["handle"]
    deadline = time.monotonic() + 60
    while True:
        poll = (
            rigs["collector"].post("/internal/test/collection_poll", json={"handle": handle}).json()
        )
        if poll["status"] == "complete" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert poll["status"] == "complete", poll
    assert (poll["result"], poll["report_count"]) == ("275", 3)
    assert poll["batch_id"] is not None  # the leader chose the batch
