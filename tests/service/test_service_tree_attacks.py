"""A malicious server against tree-seeded runs: every rewrite of the tree data is refused by real devices.

Unmodified devices (:class:`fedstats.client.Device` in threads) talk to :class:`tree_proxy.TreeProxy` in
front of a real ``fedstats server`` (PostgreSQL, the production store) that seeds every secure run by its
cohort tree (``--cohort-tree-above 3``). Each attack of :data:`tree_proxy.ATTACKS` is the run of its own
task, all at once, beside an honest run through the same proxy, which completes. For each attack the
proxy must have delivered it, every device must have refused (its log says it refused the run or left its
session), no device may have sent the stage message the attack precedes (the journal holds none), and the
run aborts without a result and without a ledger charge.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from sqlalchemy import func, select

from fedstats.client import Device
from fedstats.service.store import open_store
from fedstats.service.store.tables import LedgerCharge, RunMember, SecureMessage, SecureSession
from service_helpers import Deployment, attacked_devices, run_polled
from tree_proxy import ATTACKS, TreeProxy

SERVER_ARGS = ("--cohort-tree-above", "3")
pytestmark = pytest.mark.xdist_group("machine-load")

N_DEV = 9
RECORDS = 4
# adaptive bit pushing: round 0 asks the first third of the records (3 devices), round 1 the rest
BP = {"column": "value", "low": -1.0, "high": 1.0, "resolution": 1 / 64, "method": "adaptive"}
# the stage of round 0 before which each attack must stop every device (-1: before any reveal)
WHERE = {
    "own_leaf": -1,
    "committee_value": 0,
    "stated_seed": 0,
    "neighbour_leaves": 1,  # the leaves ride on the answer to the key advertisement (stage 0)
    "range_proof": 0,
}
LOG: list[str] = []


def _task(label: str) -> dict[str, Any]:
    return {
        # adaptive bit pushing's rounds take part of the cohort each: their work items carry range proofs
        "analysis": "bitpushing-mean",
        "params": BP,
        "privacy": {"epsilon": 1.0, "population": "default"},
        "cohort_size": N_DEV,
        "min_clients": N_DEV // 2,
        "max_records_per_client": RECORDS,
        "deadlines": {"checkin": 20.0, "round": 8.0},
        "secure_aggregation": {"max_session": N_DEV, "min_session_size": 2},
        "label": label,
    }


def _devices(dep: Deployment, url: str) -> list[Device]:
    idents = [json.loads(dep.identity(f"treeatk-{i}", "default").read_text()) for i in range(N_DEV)]
    return attacked_devices(
        url,
        idents,
        dep.certs["ca"],
        records=RECORDS,
        seed=11,
        randomness=50,
        aborts=len(ATTACKS) + 1,
        log=LOG,
    )


def test_every_rewrite_of_the_tree_data_is_refused(production: Deployment) -> None:
    runs: dict[str, str] = {}
    with TreeProxy(production.url, production.certs["ca"]) as proxy:
        devices = _devices(production, proxy.url)
        with production.admin() as a:
            for scope, name in (("population", "default"), ("analyst", "alice")):
                r = a.put(f"/v1/admin/budgets/{scope}/{name}", json={"epsilon": 1e4, "delta": 1e-3})
                assert r.status_code == 200, r.text
            for attack in (*ATTACKS, "honest"):
                r = a.post(
                    "/v1/admin/tasks", json=production.sign(_task(f"tree {attack} {time.time()}"))
                )
                assert r.status_code in (200, 201), r.text
                r = a.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]})
                assert r.status_code == 201, r.text
                runs[attack] = str(r.json()["run_id"])
                if attack != "honest":
                    proxy.attacks[runs[attack]] = attack
        views = run_polled(production, devices, runs, 240.0)
    log = "\n".join(LOG)
    assert views["honest"]["status"] == "done", (views["honest"], log[-4000:])
    store = open_store(production.db)
    try:
        with store.session() as s:
            for attack in ATTACKS:
                run_id = runs[attack]
                assert proxy.delivered[attack] > 0, (attack, views[attack]["status"])
                assert views[attack]["status"] == "aborted", (attack, views[attack])
                assert views[attack]["result"] is None
                stage = WHERE[attack]
                # the seed's attacks reach every device; a round's, the devices of round 0
                addressed = [f"treeatk-{i}" for i in range(N_DEV)]
                if stage >= 0:
                    rows = s.execute(
                        select(SecureSession.members).where(
                            SecureSession.run_id == run_id, SecureSession.round_index == 0
                        )
                    ).scalars()
                    members = {m for row in rows for m in json.loads(row)}
                    addressed = sorted(tag for tag in addressed if tag in members)
                    assert addressed, attack
                for tag in addressed:  # every device addressed refused this run's attack
                    assert any(
                        run_id in line and ("refused run" in line or "left secure session" in line)
                        for line in log.splitlines()
                        if f" {tag}:" in line
                    ), (attack, tag)
                if stage < 0:  # refused before revealing: no member revealed
                    revealed = s.execute(
                        select(func.count())
                        .select_from(RunMember)
                        .where(RunMember.run_id == run_id, RunMember.reveal.is_not(None))
                    ).scalar_one()
                    assert revealed == 0, attack
                else:
                    sent = s.execute(
                        select(func.count())
                        .select_from(SecureMessage)
                        .where(
                            SecureMessage.run_id == run_id,
                            SecureMessage.round_index == 0,
                            SecureMessage.stage == stage,
                            SecureMessage.direction == "up",
                        )
                    ).scalar_one()
                    assert sent == 0, (attack, sent)
                charges = s.execute(
                    select(LedgerCharge.status).where(LedgerCharge.run_id == run_id)
                ).scalars()
                assert list(charges) == ["released"], attack  # nothing spent on the server
                assert all(run_id not in d.budget.charges for d in devices), attack
    finally:
        store.close()
