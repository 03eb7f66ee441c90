"""One privacy arithmetic: for every registered analysis, the device's budget, the server's ledger and
:func:`fedstats.wire.registry.privacy_loss_for` agree on a run's (epsilon, delta, rho).

One run per analysis (and per performance-gap mechanism) over the real HTTP API, with in-process devices
(:class:`fedstats.client.Device`): each device reserves the loss at check-in and spends it before it
encodes; the server reserves it when the run is created and spends it with the result. Non-private
analyses (infinite epsilon) are charged nowhere.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import numpy as np
import pytest

from fedstats.client import Device, LocalBudget, Policy
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.randomness import RandomSource
from fedstats.wire.registry import ANALYSES, privacy_loss_for
from fedstats.wire.tasks import normalize_task
from service_helpers import Deployment, run_devices, wait_run

N_DEVICES = 3
N = 90  # records
SECURE = {"max_session": N_DEVICES, "min_session_size": N_DEVICES}


def _data(rng: np.random.Generator, kind: str) -> dict[str, np.ndarray]:
    if kind == "values":
        group = rng.integers(0, 2, N)
        return {"group": group, "value": np.clip(0.3 * group + 0.4 * rng.standard_normal(N), -1, 1)}
    if kind == "vectors":
        return {"x": rng.uniform(0.2, 0.8, (N, 4))}
    x = rng.integers(0, 4, N)
    return {"x": x.astype(np.int64), "y": ((x + rng.integers(0, 2, N)) % 3).astype(np.int64)}


BP = {"column": "value", "low": -1.0, "high": 1.0, "resolution": 1 / 64, "method": "weighted"}
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "exact-mean": (
        {
            "analysis": "exact-mean",
            "params": {"column": "value", "clip": 1.0},
            "privacy": {"epsilon": None},
        },
        "values",
    ),
    "bitpushing-mean": (
        {"analysis": "bitpushing-mean", "params": BP, "privacy": {"epsilon": 1.0}},
        "values",
    ),
    "bitpushing-variance": (
        {
            "analysis": "bitpushing-variance",
            "params": {**BP, "mean_fraction": 0.3},
            "privacy": {"epsilon": 1.5},
        },
        "values",
    ),
    "performance-gap-R": (
        {"analysis": "performance-gap", "params": {"mechanism": "R"}, "privacy": {"epsilon": 2.0}},
        "values",
    ),
    "performance-gap-L": (
        {"analysis": "performance-gap", "params": {"mechanism": "L"}, "privacy": {"epsilon": 2.0}},
        "values",
    ),
    "heterogeneity": (
        {
            "analysis": "heterogeneity",
            "params": {"dim": 4, "statistic": "dispersion"},
            "privacy": {"epsilon": 3.0, "delta": 1e-6},
            "secure_aggregation": SECURE,
        },
        "vectors",
    ),
    "fed-chi2": (
        {
            "analysis": "fed-chi2",
            "params": {"shape": [4, 3], "encoding_size": 30},
            "privacy": {"epsilon": None},
            "secure_aggregation": SECURE,
        },
        "table",
    ),
    "fed-entropy": (
        {
            "analysis": "fed-entropy",
            "params": {"m": 4, "encoding_size": 100},
            "privacy": {"epsilon": None},
            "secure_aggregation": SECURE,
        },
        "table",
    ),
    "g-test": (
        {
            "analysis": "g-test",
            "params": {"shape": [4, 3], "encoding_size": 100},
            "privacy": {"epsilon": None},
            "secure_aggregation": SECURE,
        },
        "table",
    ),
}


def test_every_registered_analysis_is_covered() -> None:
    assert {str(c[0]["analysis"]) for c in CASES.values()} == {name for name, _v in ANALYSES}


def _policy() -> Policy:
    opts: dict[str, Any] = {"max_epsilon": 10.0, "max_delta": 1e-3, "allow_non_private": True}
    if "min_session_size" in getattr(Policy, "__dataclass_fields__", {}):
        opts["min_session_size"] = N_DEVICES  # the device's floor, if it has one
    return Policy(**opts)


@pytest.mark.parametrize("case", sorted(CASES))
def test_device_budget_server_ledger_and_privacy_loss_agree(
    production: Deployment, case: str
) -> None:
    spec, kind = CASES[case]
    population = f"loss-{case}"
    task: dict[str, Any] = {
        **spec,
        "privacy": {**spec["privacy"], "population": population},
        "cohort_size": N_DEVICES,  # devices
        "min_clients": N_DEVICES,
        "max_records_per_client": N // N_DEVICES,
        "deadlines": {"checkin": 60.0, "round": 60.0},
        "label": f"{case} {time.time()}",
    }
    loss = privacy_loss_for(normalize_task(task))
    private = math.isfinite(loss.epsilon)
    with production.admin() as a:
        for scope, name in (("population", population), ("analyst", "alice")):
            r = a.put(f"/v1/admin/budgets/{scope}/{name}", json={"epsilon": 100.0, "delta": 0.01})
            assert r.status_code == 200, r.text
    data = _data(np.random.default_rng(sorted(CASES).index(case)), kind)
    devices = []
    for i, part in enumerate(np.array_split(np.arange(N), N_DEVICES)):
        ident = json.loads(production.identity(f"{population}-{i}", population).read_text())
        devices.append(
            Device(
                production.url,
                ident,
                {k: v[part] for k, v in data.items()},
                ca=production.certs["ca"],
                policy=_policy(),
                budget=LocalBudget(None, epsilon=50.0, delta=1e-2),
                randomness=RandomSource(i),
            )
        )
    with production.admin() as a:
        r = a.post("/v1/admin/tasks", json=production.sign(task))
        assert r.status_code == 201, r.text
        r = a.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]})
        assert r.status_code == 201, r.text
        run_id = str(r.json()["run_id"])
        threads = run_devices(
            devices, 0.1, 5.0, 120.0, lambda dev: run_id in getattr(dev, "finished", set())
        )
        view = wait_run(a, run_id, 150)
        for t in threads:
            t.join(30)
        audit = a.get("/v1/admin/audit", params={"run_id": run_id}).json()
        budget = a.get(f"/v1/admin/budgets/population/{population}").json()
    for d in devices:
        d.close()
    assert view["status"] == "done", view["error"]
    charged = [e["detail"] for e in audit if e["action"] == "reserve"]
    if not private:  # an exact analysis: no DP charge anywhere
        assert charged == [] and budget["charges"] == 0
        assert all(run_id not in d.budget.charges for d in devices)
        assert not any(d.refused for d in devices), [d.refused for d in devices]
        return
    want = {"epsilon": loss.epsilon, "delta": loss.delta, "rho": loss.rho}
    # the server's ledger: one reservation of exactly the loss, spent with the result
    assert len(charged) == 1
    assert {k: charged[0][k] for k in want} == want
    assert [e["action"] for e in audit].count("spend") == 1
    # composed as the library's ledger composes one such release (zCDP may tighten epsilon given rho)
    ref = PrivacyLedger()
    ref.spend_loss(loss, label=case)
    assert budget["charges"] == 1
    assert (budget["spent_epsilon"], budget["spent_delta"]) == (
        ref.total().epsilon,
        ref.total().delta,
    )
    # each device's budget: the same loss, spent (its data was encoded), composed the same way
    described = {"mechanisms": [m.as_dict() for m in loss.mechanisms]} if loss.mechanisms else {}
    assert charged[0].get("mechanisms") == described.get("mechanisms")  # the server stores them
    for d in devices:
        assert d.budget.charges[run_id] == {**want, **described, "status": "spent"}
        assert d.budget.total() == ref.total()
        assert d.budget.spent() == (budget["spent_epsilon"], budget["spent_delta"])
