"""A server that equivocates on the cohort tree cannot use the fork: the victim refuses at the committee.

Unmodified devices (:class:`fedstats.client.Device` in threads) talk to :class:`fork_proxy.ForkProxy` in
front of a real ``fedstats server`` (PostgreSQL, the production store) that seeds every secure run by its
cohort tree (``--cohort-tree-above 3``). In each forked run the proxy shows one victim another validly
constructed tree head than the other members (:data:`fork_proxy.FORKS`: the real leaves reordered around
the victim, or the real root under another stated ``n``), on which the victim's own-leaf check passes,
and answers the victim's reveal with a committee answer whose leaves, certificates and values are all
genuine. What binds the head is each committee member's reveal signature: it signs
:func:`fedstats.wire.cohort_sessions.reveal_statement`, which names the head's digest, and no member but
the victim signed the forked head (for the stated ``n``, the committee's multiproof already fails: ``n``
is bound by the paths' shape). So:

* the victim revealed over the forked head (its own-leaf check passed), then refused the run at the
  committee check, naming it (its log, and the refusal the server recorded), and sent no stage message;
* with ``n <= 40`` every member is on the seed committee (``min(n, 40)``), the victim included: its
  reveal over the real head never comes, so the run aborts at the seeding deadline naming the victim as
  a withholder, the honest members having revealed; nothing is released, nothing charged, and each
  honest device counts the abort against ``Policy.max_aborted_runs``;
* a run through the same proxy that it does not fork completes.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import func, select

from deadlines import scaled
from fedstats.client import Device, LocalBudget, Policy
from fedstats.randomness import RandomSource
from fedstats.service.store import open_store
from fedstats.service.store.tables import (
    LedgerCharge,
    Refusal,
    RunMember,
    SecureMessage,
    SecureSession,
)
from fedstats.wire.cohort_sessions import reveal_statement
from fork_proxy import FORKS, ForkProxy
from service_helpers import Deployment, run_polled

SERVER_ARGS = ("--cohort-tree-above", "3")
pytestmark = pytest.mark.xdist_group("machine-load")

N_DEV = 9
RECORDS = 4
BP = {"column": "value", "low": -1.0, "high": 1.0, "resolution": 1 / 64, "method": "adaptive"}
# the task's cohort size per run: the stated n of a fork may be at most it (a device checks), so the
# stated_n run allows 12 and closes its check-in at the deadline with the 9 devices
COHORT = {"reordered": N_DEV, "stated_n": 12, "honest": N_DEV}
# the victim's refusal: the check of the committee answer that fails first
REFUSAL = {
    "reordered": "is not signed by its member over this head",
    "stated_n": "the multiproof does not cover the positions asked for",
}
LOG: list[str] = []


def _task(label: str, cohort: int, checkin: float, round_: float) -> dict[str, Any]:
    return {
        "analysis": "bitpushing-mean",
        "params": BP,
        "privacy": {"epsilon": 1.0, "population": "default"},
        "cohort_size": cohort,
        "min_clients": N_DEV // 2,
        "max_records_per_client": RECORDS,
        "deadlines": {"checkin": scaled(checkin), "round": scaled(round_)},
        "secure_aggregation": {"max_session": N_DEV, "min_session_size": 2},
        "label": label,
    }


def _devices(url: str, idents: list[dict[str, Any]], dep: Deployment) -> list[Device]:
    rng = np.random.default_rng(13)
    out = []
    for i, ident in enumerate(idents):
        out.append(
            Device(
                url,
                ident,
                {"value": rng.uniform(-1, 1, RECORDS)},
                ca=dep.certs["ca"],
                policy=Policy(
                    min_session_size=2, min_colluder_fraction=0.0, max_aborted_runs=len(FORKS) + 1
                ),
                budget=LocalBudget(None, epsilon=1e3),
                randomness=RandomSource(70 + i),
                log=lambda line, c=f"treeeq-{i}": LOG.append(f"{time.time():.2f} {c}: {line}"),
            )
        )
    return out


def test_a_device_shown_a_forked_tree_head_refuses_at_the_committee(production: Deployment) -> None:
    runs: dict[str, str] = {}
    idents = [
        json.loads(production.identity(f"treeeq-{i}", "default").read_text()) for i in range(N_DEV)
    ]
    # the enrolled certificates, which the server holds (and so the proxy): no private key
    certificates = {ident["client_id"]: ident["certificate"] for ident in idents}
    with ForkProxy(production.url, production.certs["ca"], certificates) as proxy:
        devices = _devices(proxy.url, idents, production)
        with production.admin() as a:
            for scope, name in (("population", "default"), ("analyst", "alice")):
                r = a.put(f"/v1/admin/budgets/{scope}/{name}", json={"epsilon": 1e4, "delta": 1e-3})
                assert r.status_code == 200, r.text
            for kind in (*FORKS, "honest"):
                # a forked run aborts at its seeding deadline, check-in's plus a round's: shorter
                checkin, round_ = (10.0, 8.0) if kind == "honest" else (4.0, 4.0)
                task = _task(f"tree fork {kind} {time.time()}", COHORT[kind], checkin, round_)
                r = a.post("/v1/admin/tasks", json=production.sign(task))
                assert r.status_code in (200, 201), r.text
                r = a.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]})
                assert r.status_code == 201, r.text
                runs[kind] = str(r.json()["run_id"])
                if kind != "honest":
                    proxy.fork(runs[kind], kind, COHORT[kind])
        views = run_polled(production, devices, runs, scaled(120.0))
    log = "\n".join(LOG)
    assert views["honest"]["status"] == "done", (views["honest"], log[-4000:])
    store = open_store(production.db)
    try:
        with store.session() as s:
            for kind in FORKS:
                run_id, fork = runs[kind], proxy.forks[runs[kind]]
                victim = fork.victim
                # the fork was delivered: the victim got the forked head and the proxy's committee
                assert victim is not None and fork.served["tree"] > 0, (kind, fork)
                assert fork.served["committee"] > 0, (kind, fork.served)
                assert fork.head is not None and fork.real is not None and fork.head != fork.real
                assert all(c in fork.shown for c in certificates if c != victim), kind
                # the victim's own-leaf check passed on the forked head: it revealed, signed over it
                value, seen, signature = fork.reveals[victim]
                assert seen == fork.head.digest(), kind
                statement = reveal_statement(run_id, fork.head, fork.position, value)
                leaf = fork.leaves[fork.position]
                Ed25519PublicKey.from_public_bytes(leaf.key).verify(signature, statement)
                # ... then refused the run at the committee, and told the server why
                refusals = [
                    line
                    for line in log.splitlines()
                    if f" {victim}:" in line and f"refused run {run_id}:" in line
                ]
                assert refusals and REFUSAL[kind] in refusals[0], (kind, refusals, log[-4000:])
                told = s.execute(
                    select(Refusal.message).where(
                        Refusal.run_id == run_id, Refusal.client_id == victim
                    )
                ).scalar_one()
                assert REFUSAL[kind] in told, (kind, told)
                # the run never reached a round: no session, no stage message from anyone
                for table in (SecureSession, SecureMessage):
                    count = s.execute(
                        select(func.count()).select_from(table).where(table.run_id == run_id)
                    ).scalar_one()
                    assert count == 0, (kind, table.__name__, count)
                # every honest member revealed over the real head; the victim's reveal never came
                reveals = dict(
                    s.execute(
                        select(RunMember.client_id, RunMember.reveal).where(
                            RunMember.run_id == run_id
                        )
                    ).all()
                )
                assert set(reveals) == set(certificates), kind
                assert reveals.pop(victim) is None, kind
                assert all(reveals.values()), (kind, reveals)
                # the design for n <= 40: the victim is a committee member that did not reveal over
                # the run's head; the run aborts at the seeding deadline naming it, nothing released
                view = views[kind]
                assert view["status"] == "aborted", (kind, view)
                assert view["result"] is None
                assert victim in view["error"] and "seed committee" in view["error"], view["error"]
                charges = s.execute(
                    select(LedgerCharge.status).where(LedgerCharge.run_id == run_id)
                ).scalars()
                assert list(charges) == ["released"], kind  # nothing spent on the server
                assert all(run_id not in d.budget.charges for d in devices), kind
                honest = [d for d in devices if d.client_id != victim]
                assert [d.budget.aborted_runs(view["task_id"]) for d in honest] == [1] * len(
                    honest
                ), kind
        with store.transaction(read_only=True) as tx:
            for kind in FORKS:
                assert tx.withholders(runs[kind]) == [proxy.forks[runs[kind]].victim], kind
    finally:
        store.close()
