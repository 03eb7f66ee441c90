"""Issue 29, item 1, end to end: the server checks every clear report against its encoder's output set.

A device that sends what no honest device could (a bit count of 2 from one record, a mean's value far
outside its clipping range, a wrong one-per-record total) is refused at submission with a 422 naming the
reason (:mod:`fedstats.engine.validity`), nothing of it is stored, and the run completes with the exact
result of the honest devices. Over the real app (FastAPI's test client, the run driver running), on SQLite
and PostgreSQL. The library's checks themselves, per analysis and reason, are in
``tests/library/test_report_validity.py``; the exclusion of a bad report stored anyway in
``tests/service/test_service_faults.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from deadlines import scaled
from fedstats.client import Device
from fedstats.client.policy import Policy
from fedstats.randomness import RandomSource
from fedstats.service.domain.operators import add_operator, trust_authority
from fedstats.service.http.app import ServerSettings, create_app
from fedstats.service.store import Store, open_store
from fedstats.wire import auth
from fedstats.wire.enrollment import init_authority, issue_analyst, issue_identity
from fedstats.wire.tasks import sign_task
from service_helpers import pg_reachable, pg_schema

N = 8
TASKS: dict[str, dict[str, Any]] = {
    "exact-mean": {
        "analysis": "exact-mean",
        "params": {"column": "value", "clip": 1.0, "frac_bits": 16},
        "privacy": {"epsilon": None, "population": "default"},
    },
    "bitpushing-mean": {
        "analysis": "bitpushing-mean",
        "params": {
            "column": "value",
            "low": -1.0,
            "high": 1.0,
            "resolution": 1 / 8,
            "method": "weighted",
        },
        "privacy": {"epsilon": 2.0, "population": "default"},
    },
}


def _bad_reports(name: str, dim: int) -> list[tuple[list[int], tuple[str, ...]]]:
    """Reports no honest device with one record can send, and the reasons the server may give.

    The reasons are the encoder's output check's: without it the server would accept the zero count
    entry and the bit count of 2 (both within the round's ``bound x count``) or call the huge value
    just ``bound``.
    """
    if name == "exact-mean":
        return [
            ([10**9, 1], ("value_out_of_range",)),  # a value of ~15000 with clip 1
            ([0, 0], ("total_mismatch",)),  # the record count entry is not 1
        ]
    # a bit count of 2 from one record: out of range if its record reports bit 0, else unassigned
    return [([2] + [0] * (dim - 1), ("bit_out_of_range", "unassigned_bit"))]


@contextmanager
def _store(kind: str, root: Path) -> Iterator[Store]:
    if kind == "sqlite":
        store = open_store(f"sqlite:///{root / 'validity.db'}")
    else:
        why = pg_reachable()
        if why is not None:
            pytest.skip(why)
        with pg_schema() as url:
            store = open_store(url)
            yield store
            store.close()
        return
    yield store
    store.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
@pytest.mark.parametrize("name", sorted(TASKS))
def test_an_out_of_range_report_is_refused_and_the_others_sum_exactly(
    tmp_path: Path, kind: str, name: str
) -> None:
    values = np.random.default_rng(3).uniform(-1, 1, N)
    init_authority(tmp_path / "authority")
    analyst = issue_analyst(tmp_path / "authority", "ana", ["default"], tmp_path / "ana.json")
    # N devices check in; the cheat's report is refused, so the round closes at its deadline (2 s, scaled
    # by the machine's load) on the other N - 1. The honest devices (in process, on the app's test
    # client) all reported within 0.05 s of the round's opening at a load average of 12 on 2 cores: 2 s
    # is 40 times that (a round that closed before them would sum fewer records and fail the test)
    task = {
        **TASKS[name],
        "cohort_size": N,
        "min_clients": N - 1,
        "deadlines": {"checkin": 600, "round": scaled(2.0)},
        "label": f"validity-{kind}",
    }
    with _store(kind, tmp_path) as store:
        token = add_operator(store, "alice")
        trust_authority(store, (tmp_path / "authority" / "authority.pub").read_text().strip())
        settings = ServerSettings(rate=1e6, burst=1e6, tick=0.05)
        with TestClient(create_app(store, settings)) as http:
            admin = {"Authorization": f"Bearer {token}"}
            for path in ("population/default", "analyst/alice"):
                r = http.put(
                    f"/v1/admin/budgets/{path}", json={"epsilon": 1e3, "delta": 1e-3}, headers=admin
                )
                assert r.status_code == 200, r.text
            r = http.post("/v1/admin/tasks", json=sign_task(task, analyst), headers=admin)
            assert r.status_code in (200, 201), r.text
            r = http.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]}, headers=admin)
            run_id = r.json()["run_id"]
            devices = []
            for i in range(N):
                ident = issue_identity(
                    tmp_path / "authority", f"dev-{i}", "default", tmp_path / f"dev-{i}.json"
                )
                d = Device(
                    "https://127.0.0.1",
                    ident,
                    {"value": values[i : i + 1]},
                    randomness=RandomSource(i),
                    policy=Policy(allow_non_private=True),
                )
                d._http = http  # the in-process app instead of a TLS connection
                d.register()
                d.step()
                assert d.joined, d.refused
                devices.append(d)
            cheat, honest = devices[0], devices[1:]
            deadline = time.monotonic() + 60
            while True:
                work = cheat._send("GET", "/v1/client/work", b"", params={"wait": "0"}).json()
                if work["rounds"]:
                    break
                assert time.monotonic() < deadline, "the round did not open"
                time.sleep(0.05)
            rnd = work["rounds"][0]
            path = f"/v1/client/runs/{run_id}/rounds/{rnd['round']}/report"
            for vector, reason in _bad_reports(name, int(rnd["dim"])):
                body = json.dumps({"vector": vector, "count": 1}).encode()
                headers = auth.sign_request(cheat._key, cheat.client_id, "POST", path, body)
                headers["content-type"] = "application/json"
                r = http.post(path, content=body, headers=headers)
                assert r.status_code == 422, (vector, r.status_code, r.text)
                assert any(f"report refused: {x}:" in r.text for x in reason), r.text
            for d in honest:
                deadline = time.monotonic() + 60
                while not d.reported:
                    d.step()
                    assert time.monotonic() < deadline, (d.client_id, d.refused, d._work)
            deadline = time.monotonic() + 60
            while (view := http.get(f"/v1/admin/runs/{run_id}", headers=admin).json())[
                "status"
            ] not in ("done", "aborted"):
                assert time.monotonic() < deadline, "the run did not finish"
                time.sleep(0.05)
    assert view["status"] == "done", view
    assert view["rounds"][0]["records_summed"] == N - 1
    if name == "exact-mean":  # the honest devices' mean, exactly (16 fractional bits)
        assert view["result"]["estimate"] == pytest.approx(float(values[1:].mean()), abs=2**-15)
