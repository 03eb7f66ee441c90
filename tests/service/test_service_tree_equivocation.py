"""A server that equivocates on the cohort tree cannot use the fork: the victim refuses at the committee.

Unmodified devices (:class:`fedstats.client.Device` in threads) talk to :class:`fork_proxy.ForkProxy` in
front of a real ``fedstats server`` (PostgreSQL, the production store) that seeds every secure run by its
cohort tree (``--cohort-tree-above 3``). In each forked run the proxy shows one victim another validly
constructed tree head than the other members (:data:`fork_proxy.FORKS`: the real leaves reordered around
the victim, or the real root under another stated ``n``), on which the victim's own-leaf check passes,
and answers it with a committee answer whose leaves, certificates and values are all genuine. What binds
the head is each committee member's reveal signature: it signs
:func:`fedstats.wire.cohort_sessions.reveal_statement`, which names the head's digest, and no member but
the victim signed the forked head (for the stated ``n``, the committee's multiproof already fails: ``n``
is bound by the paths' shape). So the victim refuses at the committee check, naming it, and sends no
stage message; what the others' run does follows from whether the victim is on the real committee
(``min(n, 40)`` members):

* ``n <= 40`` (:func:`test_a_device_shown_a_forked_tree_head_refuses_at_the_committee`): every member is
  on it, the victim included. The victim revealed over the forked head (its own-leaf check passed) and
  refused the run (its log, and the refusal the server recorded); its reveal over the real head never
  comes, so the run aborts at the seeding deadline naming it as a withholder, the honest members having
  revealed; nothing is released, nothing charged, and each honest device counts the abort against
  ``Policy.max_aborted_runs``. A run through the same proxy that it does not fork completes.
* ``n = 41`` (:func:`test_a_victim_off_the_committee_is_left_out_and_the_run_completes`): the one member
  off it is the victim, shown a fork on whose committee it is not either. The seed needs nothing of it:
  the run completes, the victim leaving its session at the committee check, a dropout in no sum.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import func, select

from deadlines import scaled
from fedstats.client import Device
from fedstats.service.store import open_store
from fedstats.service.store.tables import (
    LedgerCharge,
    Refusal,
    RunMember,
    SecureMessage,
    SecureSession,
)
from fedstats.wire.cohort_sessions import committee_positions, reveal_statement
from fork_proxy import ForkProxy
from service_helpers import Deployment, attacked_devices, run_polled

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
KINDS = ("reordered", "stated_n")  # the forks of n <= 40 (every member on the committee)
N_OFF = 41  # one member off the committee of min(n, 40)
LOG: list[str] = []


def _task(
    label: str, cohort: int, checkin: float, round_: float, quiet: float | None = None
) -> dict[str, Any]:
    secure: dict[str, Any] = {"max_session": max(cohort, N_DEV), "min_session_size": 2}
    if quiet is not None:  # a stage without a device closes this long after its last message
        secure["quiet_seconds"] = quiet
    return {
        "analysis": "bitpushing-mean",
        "params": BP,
        "privacy": {"epsilon": 1.0, "population": "default"},
        "cohort_size": cohort,
        "min_clients": N_DEV // 2,
        "max_records_per_client": RECORDS,
        "deadlines": {"checkin": scaled(checkin), "round": scaled(round_)},
        "secure_aggregation": secure,
        "label": label,
    }


def _identities(dep: Deployment, prefix: str, n: int) -> list[dict[str, Any]]:
    return [json.loads(dep.identity(f"{prefix}-{i}", "default").read_text()) for i in range(n)]


def _devices(url: str, idents: list[dict[str, Any]], dep: Deployment) -> list[Device]:
    return attacked_devices(
        url,
        idents,
        dep.certs["ca"],
        records=RECORDS,
        seed=13,
        randomness=70,
        aborts=len(KINDS) + 1,
        log=LOG,
    )


def _start(
    dep: Deployment, kinds: dict[str, tuple[int, float, float]], quiet: float | None = None
) -> dict[str, str]:
    """A run of its own task per kind (``kind -> (cohort size, check-in, round deadline)``), its
    stages closing ``quiet`` seconds after their last message once enough answered (None: at the
    deadline)."""
    runs = {}
    with dep.admin() as a:
        for scope, name in (("population", "default"), ("analyst", "alice")):
            r = a.put(f"/v1/admin/budgets/{scope}/{name}", json={"epsilon": 1e4, "delta": 1e-3})
            assert r.status_code == 200, r.text
        for kind, (cohort, checkin, round_) in kinds.items():
            task = _task(f"tree fork {kind} {time.time()}", cohort, checkin, round_, quiet)
            r = a.post("/v1/admin/tasks", json=dep.sign(task))
            assert r.status_code in (200, 201), r.text
            r = a.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]})
            assert r.status_code == 201, r.text
            runs[kind] = str(r.json()["run_id"])
    return runs


def _refused(log: str, victim: str, run_id: str) -> list[str]:
    """The victim's log lines that refuse the run or leave one of its sessions."""
    return [
        line
        for line in log.splitlines()
        if f" {victim}:" in line
        and (f"refused run {run_id}:" in line or f" of run {run_id} round " in line)
    ]


def test_a_device_shown_a_forked_tree_head_refuses_at_the_committee(production: Deployment) -> None:
    idents = _identities(production, "treeeq", N_DEV)
    # the enrolled certificates, which the server holds (and so the proxy): no private key
    certificates = {ident["client_id"]: ident["certificate"] for ident in idents}
    with ForkProxy(production.url, production.certs["ca"], certificates) as proxy:
        devices = _devices(proxy.url, idents, production)
        # a forked run aborts at its seeding deadline, check-in's plus a round's: shorter ones
        runs = _start(
            production, {k: (COHORT[k], 5.0, 4.0) for k in KINDS} | {"honest": (N_DEV, 10.0, 8.0)}
        )
        for kind in KINDS:
            proxy.fork(runs[kind], kind, COHORT[kind])
        views = run_polled(production, devices, runs, scaled(120.0))
    log = "\n".join(LOG)
    assert views["honest"]["status"] == "done", (views["honest"], log[-4000:])
    store = open_store(production.db)
    try:
        with store.session() as s:
            for kind in KINDS:
                run_id, fork = runs[kind], proxy.forks[runs[kind]]
                victim = fork.victim
                # the fork was delivered: the victim got the forked head and the proxy's committee
                assert victim is not None and fork.served["tree"] > 0, (kind, fork)
                assert fork.served["committee"] > 0, (kind, fork.served)
                assert fork.head is not None and fork.real is not None and fork.head != fork.real
                # every other member was shown the real head, and revealed over it (the server
                # checked); the victim's reveal never reached the server
                reveals = dict(
                    s.execute(
                        select(RunMember.client_id, RunMember.reveal).where(
                            RunMember.run_id == run_id
                        )
                    ).all()
                )
                assert len(reveals) == fork.real.n and reveals.pop(victim) is None, kind
                assert set(reveals) <= fork.shown and all(reveals.values()), (kind, reveals)
                # the victim's own-leaf check passed on the forked head: it revealed, signed over it
                value, seen, signature = fork.reveals[victim]
                assert seen == fork.head.digest(), kind
                statement = reveal_statement(run_id, fork.head, fork.position, value)
                leaf = fork.leaves[fork.position]
                Ed25519PublicKey.from_public_bytes(leaf.key).verify(signature, statement)
                # ... then refused the run at the committee, and told the server why
                refusals = _refused(log, victim, run_id)
                assert refusals and "refused run" in refusals[0], (kind, refusals, log[-4000:])
                assert REFUSAL[kind] in refusals[0], (kind, refusals)
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
                honest = [
                    d.budget.aborted_runs(view["task_id"])
                    for d in devices
                    if d.client_id in reveals
                ]
                assert honest == [1] * len(reveals), kind
        with store.transaction(read_only=True) as tx:
            for kind in KINDS:
                assert tx.withholders(runs[kind]) == [proxy.forks[runs[kind]].victim], kind
    finally:
        store.close()


def test_a_victim_off_the_committee_is_left_out_and_the_run_completes(
    production: Deployment,
) -> None:
    """Above 40 members the seed committee is 40 of them: the one member off it is the victim.

    Shown a forked head on whose committee it is not either, it reveals nothing; the proxy answers it
    the forked committee (the real committee's members, values and signatures over the real head).
    It refuses at the committee's signatures, before any stage message; the run, whose seed needs
    nothing of it, completes: its session closes its key advertisements without it (a dropout), and
    no session's sum includes it.
    """
    idents = _identities(production, "treeoff", N_OFF)
    certificates = {ident["client_id"]: ident["certificate"] for ident in idents}
    with ForkProxy(production.url, production.certs["ca"], certificates) as proxy:
        devices = _devices(proxy.url, idents, production)
        # the victim's session waits for it at no stage: its stages close 1 s after their last message
        runs = _start(production, {"off_committee": (N_OFF, 20.0, 8.0)}, quiet=1.0)
        run_id = runs["off_committee"]
        proxy.fork(run_id, "off_committee", N_OFF)
        views = run_polled(production, devices, runs, scaled(180.0))
    log = "\n".join(LOG)
    fork = proxy.forks[run_id]
    victim = fork.victim
    assert victim is not None and fork.head is not None and fork.real is not None, fork
    assert fork.served["tree"] > 0 and fork.served["committee"] > 0, fork.served
    assert fork.position not in committee_positions(fork.head), fork.position
    assert victim not in fork.reveals  # off the forked committee: it revealed nothing
    refusals = _refused(log, victim, run_id)
    assert refusals and REFUSAL["reordered"] in refusals[0], (refusals, log[-4000:])
    view = views["off_committee"]
    assert view["status"] == "done", (view, log[-4000:])
    store = open_store(production.db)
    try:
        with store.session() as s:
            placed = 0
            for row in s.execute(
                select(SecureSession).where(SecureSession.run_id == run_id)
            ).scalars():
                members = json.loads(row.members)
                included = {members[i] for i in json.loads(row.included or "[]")}
                assert row.status == "done", (row.round_index, row.number, row.status, row.error)
                assert victim not in included, (row.round_index, row.number)
                if victim in members:  # the server placed it: nothing came from it
                    placed += 1
                    sent = s.execute(
                        select(func.count())
                        .select_from(SecureMessage)
                        .where(
                            SecureMessage.run_id == run_id,
                            SecureMessage.round_index == row.round_index,
                            SecureMessage.number == row.number,
                            SecureMessage.client_index == members.index(victim),
                            SecureMessage.direction == "up",
                        )
                    ).scalar_one()
                    assert sent == 0, (row.round_index, row.number, sent)
            assert placed, "the victim was in no session"  # its sessions went on without it
    finally:
        store.close()
    assert run_id not in devices[[d.client_id for d in devices].index(victim)].budget.charges
