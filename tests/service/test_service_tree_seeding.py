"""Tree-seeded secure runs over the real HTTP API with unmodified devices (issue 40, O(k log n) seeding).

The server seeds a secure run by its cohort tree (:mod:`fedstats.wire.tree_seeding`) when more than
``--cohort-tree-above`` devices checked in: 64 by default, 3 here so that small cohorts take the tree
path. Devices run in threads of the test process (:func:`test_service_secure._devices`), each with its
own keys, HTTP connections and state. What is checked, besides bit-exact sums:

* only the seed committee (``min(n, 40)`` members drawn from the head) reveals, each reveal signed over
  the head; the run's seed is the committee's (:func:`fedstats.wire.cohort_sessions.committee_seed`);
* the sessions are the ones each device derives from its position alone
  (:func:`fedstats.wire.cohort_sessions.session_of`), in rounds over the whole cohort and over part of it
  (bit pushing's client ranges, proven by range proofs);
* in a sparse session (``k < n - 1``) the devices hold only their neighbourhood's keys, proven by leaves;
* a committee member that withholds its reveal aborts the run and is named (recorded as a withholder,
  which excludes it from the task's later runs), and every honest device counts the abort against its
  ``Policy.max_aborted_runs``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select

from deadlines import scaled
from fedstats.client import LocalBudget, Policy
from fedstats.randomness import RandomSource
from fedstats.service.store import open_store
from fedstats.service.store.tables import Run, RunMember, SecureSession
from fedstats.wire.cohort_sessions import committee_positions, committee_seed, session_of
from fedstats.wire.tree_seeding import parse_head
from secure_grinding import _Colluder
from service_helpers import Deployment, wait_run
from test_service_secure import (
    DEVICE_LOG,
    _check_exact,
    _data,
    _devices,
    _drive,
    _finished,
    _rounds,
    _start,
    _task,
)

SERVER_ARGS = ("--cohort-tree-above", "3")
pytestmark = pytest.mark.xdist_group("machine-load")


def _stored(dep: Deployment, run_id: str) -> dict[str, Any]:
    """The run's stored head, its members in slot order (reveals, signatures) and its sessions."""
    store = open_store(dep.db)
    try:
        with store.session() as s:
            run = s.get(Run, run_id)
            assert run is not None
            members = (
                s.execute(
                    select(RunMember)
                    .where(RunMember.run_id == run_id)
                    .order_by(RunMember.slot_start)
                )
                .scalars()
                .all()
            )
            sessions = (
                s.execute(select(SecureSession).where(SecureSession.run_id == run_id))
                .scalars()
                .all()
            )
            return {
                "head": run.cohort_head,
                "seed": run.public_seed,
                "members": [(m.client_id, m.reveal, m.reveal_signature) for m in members],
                "sessions": [(r.round_index, r.number, json.loads(r.members)) for r in sessions],
            }
    finally:
        store.close()


def _recorded(device: Any) -> list[tuple[str, str, bool]]:
    """Record the device's requests as ``(method, last path segment, whether the answer carried the
    committee)``, in order (the device unchanged)."""
    sent: list[tuple[str, str, bool]] = []
    send = device._send

    def recording(method: str, path: str, *args: Any, **kw: Any) -> Any:
        r = send(method, path, *args, **kw)
        segment = path.split("?")[0].rsplit("/", 1)[-1]
        sent.append((method, segment, segment == "checkin" and b'"revealed"' in r.content))
        return r

    device._send = recording
    return sent


def _check_tree_run(stored: dict[str, Any], run_id: str) -> None:
    """Only the committee revealed, signed; the seed is the committee's."""
    assert stored["head"] is not None, "the run did not take the tree form"
    head = parse_head(bytes.fromhex(stored["head"]))
    committee = committee_positions(head)
    members = stored["members"]
    assert head.n == len(members)
    revealed = [p for p, (_, reveal, _) in enumerate(members) if reveal]
    assert revealed == committee
    assert all(members[p][2] for p in committee)  # each reveal kept with its signature
    values = [bytes.fromhex(members[p][1]) for p in committee]
    assert stored["seed"] == committee_seed(run_id, head, values).hex()


def test_a_tree_run_sums_exactly_over_sessions_the_devices_derive(deployment: Deployment) -> None:
    data = _data()
    devices = _devices(deployment, "tree12", data, 12)
    run_id = _start(deployment, _task())  # max_session 5: three sessions of four per round
    threads = _drive(devices, run_id)
    _finished(deployment, run_id, threads)
    _check_exact(_rounds(deployment, run_id, devices))
    stored = _stored(deployment, run_id)
    _check_tree_run(stored, run_id)
    head = parse_head(bytes.fromhex(stored["head"]))
    seed = bytes.fromhex(stored["seed"])
    ids = [cid for cid, _, _ in stored["members"]]
    for index, number, members in stored["sessions"]:
        for i, cid in enumerate(members):  # each device's seat, from its position alone
            seat = session_of(seed, 0, head.n, 5, 3, ids.index(cid))
            assert (seat.number, seat.roster_index, seat.size) == (number, i, len(members))
        assert index in (0, 1)
    for d in devices:
        d.close()


def test_a_sparse_tree_session_with_a_committee_of_40(production: Deployment) -> None:
    """70 devices in one session (k < n - 1): 40 reveal, 30 only check the committee."""
    n = 70
    data = _data()
    devices = _devices(production, "tree70", data, n)
    task = _task(n, secure_aggregation={"max_session": n, "min_session_size": 5})
    task["deadlines"] = {"checkin": scaled(60.0), "round": scaled(60.0)}
    sent = {d.client_id: _recorded(d) for d in devices}
    run_id = _start(production, task)
    threads = _drive(devices, run_id, seconds=240.0)
    try:
        _finished(production, run_id, threads)
    except AssertionError:
        print("\n".join(line for line in DEVICE_LOG if " tree70-" in line)[-8000:])
        raise
    rounds = _rounds(production, run_id, devices)
    _check_exact(rounds)
    assert all(len(r["included"]) == n for r in rounds[:-1])
    stored = _stored(production, run_id)
    _check_tree_run(stored, run_id)
    assert sum(1 for _, reveal, _ in stored["members"] if reveal) == 40
    # off the committee, a device whose held check-in lasted until the seed was fixed got the
    # committee and its first round with it: its next request is its first stage message (no
    # committee request, no work poll); one whose wait ran out first asks for the committee held,
    # and the first round comes with that answer instead
    on = {cid for cid, reveal, _ in stored["members"] if reveal}
    off = [seq for cid, seq in sent.items() if cid not in on]
    carried = [seq for seq in off if any(c for _, _, c in seq)]
    for seq in off:
        if seq in carried:  # the request after the check-in that carried the committee
            i = next(j for j, c in enumerate(seq) if c[2])
            assert seq[i + 1][:2] == ("POST", "0"), seq
        else:  # the request after its last committee request
            j = len(seq) - [c[:2] for c in seq][::-1].index(("GET", "seed"))
            assert seq[j][:2] != ("GET", "work"), seq
    assert len(off) == n - 40 and carried, (len(off), len(carried))
    # the committee's held reveals carried the first round too
    for cid in on:
        seq = [c[:2] for c in sent[cid]]
        j = len(seq) - seq[::-1].index(("POST", "reveal"))
        assert seq[j] != ("GET", "work"), seq
    for d in devices:
        d.close()


def test_a_committee_member_that_withholds_aborts_the_run_and_is_named(
    production: Deployment,
) -> None:
    """On the production store only: it waits out the seeding deadline (about 27 s per store in the
    suite), and the store's part (the withholder recorded, the abort) is tested on the memory state,
    SQLite and PostgreSQL in ``test_service_tree_server.py``."""
    deployment = production
    data = _data()
    # eleven honest devices and one that withholds its reveal: with 12 members all are on the committee
    honest = _devices(deployment, "treewh", {k: v[:220] for k, v in data.items()}, 11)
    ident = json.loads(deployment.identity("treewh-w", "default").read_text())
    withholder = _Colluder(
        deployment.url,
        ident,
        {k: v[220:] for k, v in data.items()},
        ca=deployment.certs["ca"],
        policy=Policy(allow_non_private=True, min_session_size=2),
        budget=LocalBudget(None, epsilon=100.0),
        randomness=RandomSource(99),
    )
    # the seeding deadline is check-in's plus a round's: the withholder aborts the run after it (as
    # secure_grinding's deadlines)
    task = _task(12, deadlines={"checkin": scaled(4.0), "round": scaled(5.0)})
    withholder.withhold = frozenset({str(task["label"])})
    run_id = _start(deployment, task)
    devices = [*honest, withholder]
    threads = _drive(devices, run_id)
    with deployment.admin() as a:
        view = wait_run(a, run_id, timeout=scaled(150))
    for t in threads:
        t.join(scaled(30))
    for d in devices:
        d.close()
    assert view["status"] == "aborted", view
    assert withholder.client_id in view["error"], view["error"]
    # every honest device counts the abort against Policy.max_aborted_runs (2): after two such runs
    # of the task it stops joining it, so aborting cannot grind the seed
    assert [d.budget.aborted_runs(view["task_id"]) for d in honest] == [1] * len(honest)
    stored = _stored(deployment, run_id)
    assert stored["seed"] is None and stored["head"] is not None
    store = open_store(deployment.db)
    try:
        with store.transaction(read_only=True) as tx:
            assert tx.withholders(run_id) == [withholder.client_id]
    finally:
        store.close()
