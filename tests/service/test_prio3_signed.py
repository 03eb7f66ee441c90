"""Signed Prio3 tasks (issue 29): analysts sign, aggregators verify and charge, devices derive and refuse.

A leader and a helper app in process, each with its own database, the real HTTP API, unmodified devices
(:class:`fedstats.client.vdaf.Prio3Device`; the demo's :class:`~fedstats.cli.prio3_demo.EngineSeededDevice`
only moves where a device's randomness is drawn, so that the result can be compared bit for bit with the
in-process engine). A deviating aggregator is played by a proxy in front of the leader that rewrites what
it announces.

What the aggregators store (a refused envelope stores nothing, a reservation released or spent) is tested
on SQLite files and on PostgreSQL schemas (``pair``; PostgreSQL skipped only when unreachable). The
protocol between devices and aggregators (the honest path, deviating aggregators, slots, floors) runs on
the production store only, PostgreSQL (:data:`PRODUCTION`; SQLite when PostgreSQL is unreachable), as the
service's other protocol tests do: no store query decides it, and the store's own semantics are the
parity class's (tests/service/test_service_state.py).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from fedstats.analyses._prio3 import Prio3Backend
from fedstats.analyses._prio3_tasks import public_seed, round_task_id
from fedstats.cli.prio3_demo import EngineSeededDevice
from fedstats.client.policy import LocalBudget, Policy
from fedstats.client.vdaf import (
    Answer,
    Prio3Device,
    Prio3Task,
    collect_signed,
    open_round,
    shard_report,
)
from fedstats.engine import Engine, InMemoryPopulation
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RandomSource
from fedstats.service.domain import vdaf as domain
from fedstats.service.domain.operators import add_operator, trust_authority
from fedstats.service.http.app import ServerSettings, create_app
from fedstats.service.http.vdaf import add_vdaf_routes
from fedstats.service.store import Store, open_store
from fedstats.wire.enrollment import init_authority, issue_analyst, issue_identity, load_identity
from fedstats.wire.registry import plan_for, privacy_loss_for
from fedstats.wire.tasks import normalize_task, sign_task, task_id
from service_helpers import pg_reachable, pg_schema

LEADER_URL = "http://127.0.0.1:18101"
HELPER_URL = "http://127.0.0.2:18102"
N = 10  # devices, one record each
SEED = 7


@dataclass
class Pair:
    """Two aggregators in process, their operator clients, an authority and an analyst."""

    root: Path
    leader: TestClient
    helper: TestClient
    stores: tuple[Store, Store]
    analyst: dict[str, Any]

    def sign(self, config: dict[str, Any]) -> dict[str, Any]:
        return sign_task(config, self.analyst)

    def create(self, envelope: Any) -> list[httpx.Response]:
        key, token = os.urandom(32), secrets.token_urlsafe(32)
        return [
            c.post(
                "/v1/vdaf/tasks",
                json={
                    "envelope": envelope,
                    "role": role,
                    "verify_key": key.hex(),
                    "peer_token": token,
                },
            )
            for c, role in ((self.leader, "leader"), (self.helper, "helper"))
        ]

    def identity(self, name: str) -> dict[str, Any]:
        """The device ``name``'s identity (issued once: one key per client id)."""
        path = self.root / f"{name}.json"
        if not path.exists():
            issue_identity(self.root / "authority", name, "default", path)
        return load_identity(path)

    def reports(self, round_id: str) -> list[dict[str, int]]:
        """Each aggregator's stored reports of a round task by status (empty if it does not exist)."""
        out = []
        for c in (self.leader, self.helper):
            r = c.get(f"/v1/vdaf/tasks/{round_id}")
            out.append(r.json()["reports"] if r.status_code == 200 else {})
        return out

    def info(self, tid: str) -> list[dict[str, Any]]:
        got = [c.get(f"/v1/vdaf/tasks/{tid}") for c in (self.leader, self.helper)]
        assert all(r.status_code == 200 for r in got), [r.text for r in got]
        return [r.json() for r in got]


@contextmanager
def _pair(root: Path, urls: tuple[str, str]) -> Iterator[Pair]:
    pub = init_authority(root / "authority")
    analyst = issue_analyst(root / "authority", "ana", ["default"], root / "analyst.json")
    stores = (open_store(urls[0]), open_store(urls[1]))
    tokens = []
    for s in stores:
        trust_authority(s, pub)
        tokens.append(add_operator(s, "alice"))
    with ExitStack() as stack:
        settings = ServerSettings(vdaf=True, vdaf_batch_size=4)
        helper_app = create_app(stores[1], settings, run_driver=False)
        helper = stack.enter_context(TestClient(helper_app, base_url=HELPER_URL))
        helper.headers["Authorization"] = f"Bearer {tokens[1]}"

        def transport(peer_url: str, token: str) -> Any:
            assert peer_url == HELPER_URL

            def send(tid: str, job: dict[str, Any]) -> dict[str, Any]:
                r = helper.post(
                    f"/v1/vdaf/tasks/{tid}/jobs",
                    json=job,
                    headers={"Authorization": f"Bearer {token}"},
                )
                if r.status_code != 200:
                    raise DataError(f"helper refused: {r.status_code} {r.text}")
                out: dict[str, Any] = r.json()
                return out

            return send

        leader_app = create_app(stores[0], run_driver=False)
        add_vdaf_routes(
            leader_app,
            stores[0],
            transport=transport,
            batch_size=4,
            rng_factory=lambda: np.random.default_rng(5),
        )
        leader = stack.enter_context(TestClient(leader_app, base_url=LEADER_URL))
        leader.headers["Authorization"] = f"Bearer {tokens[0]}"
        for c in (leader, helper):
            for scope, name in (("population", "default"), ("analyst", "alice")):
                r = c.put(
                    f"/v1/admin/budgets/{scope}/{name}", json={"epsilon": 50.0, "delta": 0.01}
                )
                assert r.status_code == 200, r.text
        try:
            yield Pair(root, leader, helper, stores, analyst)
        finally:
            for s in stores:
                s.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    """The pair on each store, or on the production store only for a test marked :data:`PRODUCTION`."""
    store = request.param
    if store == "production":
        store = "postgresql" if pg_reachable() is None else "sqlite"
    if store == "sqlite":
        urls = (f"sqlite:///{tmp_path / 'leader.db'}", f"sqlite:///{tmp_path / 'helper.db'}")
        with _pair(tmp_path, urls) as p:
            yield p
        return
    why = pg_reachable()
    if why:
        pytest.skip(why)
    with pg_schema() as lu, pg_schema() as hu, _pair(tmp_path, (lu, hu)) as p:
        yield p


PRODUCTION = pytest.mark.parametrize("pair", ["production"], indirect=True)
"""The pair on the production store only (PostgreSQL when reachable, else SQLite): for a test of the
protocol between devices and aggregators, which no store query decides (module docstring)."""


# N = 10 devices over up to two rounds: batches below the default floor, so the route and the devices'
# policy lower it to 1 (test_a_device_refuses_a_batch_floor_below_its_policy tests the default)
ROUTE = {"leader": LEADER_URL, "helper": HELPER_URL, "noise": None, "min_batch_size": 1}
FLOOR = {"min_batch_size": 1}


def _config(analysis: str, params: dict[str, Any], epsilon: float | None) -> dict[str, Any]:
    return {
        "analysis": analysis,
        "params": params,
        "privacy": {"epsilon": epsilon, "population": "default"},
        "cohort_size": N,
        "min_clients": N - 1,
        "max_records_per_client": 1,
        "prio3": ROUTE,
        "label": f"test {secrets.token_hex(4)}",
    }


def _data(kind: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    if kind == "values":
        group = rng.integers(0, 2, N)
        return {"group": group, "value": np.clip(0.3 * group + 0.4 * rng.standard_normal(N), -1, 1)}
    return {"value": rng.uniform(0.0, 100.0, N)}


CASES: dict[str, tuple[dict[str, Any], str]] = {
    "bitpushing-mean-adaptive": (  # two rounds over disjoint slot ranges
        _config(
            "bitpushing-mean",
            {"column": "value", "low": 0.0, "high": 100.0, "method": "adaptive"},
            2.0,
        ),
        "ages",
    ),
    "performance-gap-R": (  # a Histogram of (group, outcome)
        _config("performance-gap", {"mechanism": "R"}, 2.0),
        "values",
    ),
}


def _device(pair: Pair, i: int, cols: dict[str, np.ndarray], **kw: Any) -> Prio3Device:
    clients = kw.pop("clients", {LEADER_URL: pair.leader, HELPER_URL: pair.helper})
    return EngineSeededDevice(
        pair.identity(f"d{i}"),
        {c: v[i] for c, v in cols.items()},
        policy=kw.pop("policy", Policy(max_epsilon=4.0, **FLOOR)),
        budget=kw.pop("budget", LocalBudget(None)),
        clients=clients,
        seed=SEED,
        **kw,
    )


@PRODUCTION
@pytest.mark.parametrize("case", sorted(CASES))
def test_honest_path_agrees_with_the_engine_and_every_party_charges_the_same_loss(
    pair: Pair, case: str
) -> None:
    config, kind = CASES[case]
    cols = _data(kind)
    envelope = pair.sign(config)
    task = envelope["task"]
    tid = task_id(task)
    loss = privacy_loss_for(task)
    assert math.isfinite(loss.epsilon)
    assert [r.status_code for r in pair.create(envelope)] == [200, 200]
    devices = [_device(pair, i, cols, cheat=(i == 2)) for i in range(N)]
    for i, d in enumerate(devices):
        assert d.join(LEADER_URL, tid), d.refused
        assert d.tasks[tid].slot == i
        assert d.budget.status(d.budget_key(tid)) == "reserved"  # before anything is sharded

    def on_round(index: int, announced: Any) -> None:
        del announced
        for d in devices:
            d.answer(tid, index)

    result, rounds = collect_signed(task, tid, pair.leader, pair.helper, on_round)
    assert sum(r["rejected"] for r in rounds) == 1  # the cheat, in the round of its slot
    local = Prio3Backend(cheaters=[2])
    want = Engine(backend=local, randomness=RandomSource(SEED)).run(
        plan_for(task, n_clients=N, public_seed=public_seed(tid)), InMemoryPopulation(cols)
    )
    assert result.estimate == want.estimate  # bit for bit
    # one privacy arithmetic: each device, each aggregator's ledger and privacy_loss_for(task)
    want_charge = (loss.epsilon, loss.delta, loss.rho)
    for d in devices:
        c = d.budget.charges[d.budget_key(tid)]
        assert (c["epsilon"], c["delta"], c["rho"], c["status"]) == (*want_charge, "spent")
        assert not d.refused
    for info in pair.info(tid):
        ch = info["charge"]
        assert (ch["epsilon"], ch["delta"], ch["rho"], ch["status"]) == (*want_charge, "spent")
        assert [r["status"] for r in info["rounds"]] == ["collected"] * len(rounds)


@PRODUCTION
def test_heterogeneity_on_signed_prio3_gets_each_aggregator_s_planned_noise(pair: Pair) -> None:
    """Devices send no noise share; each aggregator adds the round's planned discrete Gaussian; the
    collector's plan accepts the sums only because both aggregators state that noise; one charge."""
    from fedstats.analyses._prio3_tasks import aggregator_noise, derive_round, route_config

    config = _config("heterogeneity", {"dim": 3}, 4.0)
    config["privacy"]["delta"] = 1e-5
    rng = np.random.default_rng(11)
    cols = {"x": rng.beta(0.6, 0.6, (N, 3))}
    envelope = pair.sign(config)
    task = envelope["task"]
    tid = task_id(task)
    assert route_config(task).noise == "aggregators"
    assert route_config(task).privacy_loss() == privacy_loss_for(task)
    assert [r.status_code for r in pair.create(envelope)] == [200, 200]
    devices = [
        _device(pair, i, cols, policy=Policy(max_epsilon=8.0, max_delta=1e-4, **FLOOR))
        for i in range(N)
    ]
    for d in devices:
        assert d.join(LEADER_URL, tid), d.refused
    announced: list[Any] = []

    def on_round(index: int, a: Any) -> None:
        announced.append(a)
        for d in devices:
            d.answer(tid, index)

    result, rounds = collect_signed(task, tid, pair.leader, pair.helper, on_round)
    assert len(rounds) == 2 and all(r["rejected"] == 0 for r in rounds)
    assert result.noise == "aggregators" and math.isfinite(result.estimate)
    loss = privacy_loss_for(task)
    for index, a in enumerate(announced):
        derived = derive_round(task, tid, index, a["history"])
        planned = aggregator_noise(task, derived.round)
        assert planned is not None and planned["mechanism"] == "discrete_gaussian"
        assert planned["parameter"] == derived.round.params["aggregator_variance"] > 0
        assert derived.round.params["noise"] == "none"  # no device share on this route
        for c in (pair.leader, pair.helper):
            got = c.get(f"/v1/vdaf/tasks/{a['task_id']}")
            assert got.status_code == 200 and got.json()["noise"] == planned, got.text
    for d in devices:
        c = d.budget.charges[d.budget_key(tid)]
        assert (c["epsilon"], c["delta"], c["rho"]) == (loss.epsilon, loss.delta, loss.rho)
    for info in pair.info(tid):
        assert info["charge"]["status"] == "spent"
    # the task cannot also name a noise of its own: the analysis plans each aggregator's
    bad = dict(config, prio3={**ROUTE, "noise": {"mechanism": "discrete_gaussian", "parameter": 4}})
    with pytest.raises(ParameterError, match=r"prio3\.noise"):
        normalize_task(bad)


# -- a deviating aggregator ------------------------------------------------------------------------


class _Deviating:
    """The leader's device API seen through ``rewrite(path, answer) -> answer`` (a malicious leader)."""

    def __init__(self, inner: TestClient, rewrite: Callable[[str, Any], Any]) -> None:
        self.inner = inner
        self.rewrite = rewrite

    def post(self, path: str, **kw: Any) -> httpx.Response:
        r = self.inner.post(path, **kw)
        if r.status_code != 200 or not path.endswith("/join"):
            return r
        body = self.rewrite(path, r.json())
        return httpx.Response(200, json=body)


def _variant(mutate: Callable[[dict[str, Any]], None]) -> Callable[[str, Any], Any]:
    def rewrite(path: str, answer: Any) -> Any:
        del path
        for r in answer["rounds"]:
            mutate(r)
        return answer

    return rewrite


def _retask(change: Callable[[dict[str, Any]], None]) -> Callable[[str, Any], Any]:
    def rewrite(path: str, answer: Any) -> Any:
        del path
        change(answer["envelope"])
        return answer

    return rewrite


def _extra_round(path: str, answer: Any) -> Any:
    del path
    if answer["rounds"]:
        extra = json.loads(json.dumps(answer["rounds"][-1]))
        extra["round"] = len(answer["rounds"])
        extra["task_id"] = round_task_id(answer["rounds"][0]["task_id"], extra["round"])
        extra["history"] = [*extra["history"], {"total": [0] * 7, "n_clients": 3}]
        answer["rounds"].append(extra)
    return answer


ATTACKS: dict[str, Callable[[str, Any], Any]] = {
    "another variant": _variant(lambda r: r.update(vdaf={**r["vdaf"], "type": "sumvec"})),
    "another length": _variant(lambda r: r["vdaf"].update(length=r["vdaf"]["length"] + 1)),
    "another weight (bits)": _variant(
        lambda r: r["vdaf"].update(max_weight=r["vdaf"]["max_weight"] + 1)
    ),
    "another round task id": _variant(lambda r: r.update(task_id="ab" * 32)),
    "another client range": _variant(lambda r: r.update(client_range=[0, 1])),
    "unsigned task": _retask(lambda e: e.update(signature="00" * 64)),
    "altered task": _retask(lambda e: e["task"]["privacy"].update(epsilon=0.5)),
    "another route": _retask(lambda e: e["task"]["prio3"].update(helper="http://127.0.0.9:1")),
    "a round beyond the plan": _extra_round,
}


@PRODUCTION
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_deviating_aggregator_is_refused_with_nothing_uploaded_or_charged(
    pair: Pair, attack: str
) -> None:
    """Unmodified devices and a leader announcing something else than the signed task derives."""
    config = _config(
        "bitpushing-mean",
        {"column": "value", "low": 0.0, "high": 100.0, "method": "basic", "bits_per_client": 1},
        2.0,
    )
    cols = _data("ages")
    envelope = pair.sign(config)
    tid = task_id(envelope["task"])
    assert [r.status_code for r in pair.create(envelope)] == [200, 200]
    round0 = open_round(tid, 0, [], pair.leader, pair.helper)
    rewrite = ATTACKS[attack]
    # both aggregators announce the same deviating round (a deviating operator of both, or two
    # colluding ones; one deviating alone is caught by the comparison, see the next test)
    both = {
        LEADER_URL: _Deviating(pair.leader, rewrite),
        HELPER_URL: _Deviating(pair.helper, rewrite),
    }
    if attack == "a round beyond the plan":  # round 0 is answered honestly first
        d = _device(pair, 0, cols)
        assert d.join(LEADER_URL, tid) and d.answer(tid, 0) is Answer.SENT
        d.uploader._given.update(both)  # type: ignore[arg-type]
        assert d.answer(tid, 1) is Answer.REFUSED
        assert "beyond the task's plan" in d.refused[tid]
        assert pair.reports(round_task_id(tid, 1)) == [{}, {}]
        return
    victim = _device(pair, 0, cols, clients=both)
    joined = victim.join(LEADER_URL, tid)
    if joined:
        assert victim.answer(tid, 0) is Answer.REFUSED
    assert tid in victim.refused, attack
    assert pair.reports(round0["task_id"]) == [{}, {}]  # nothing uploaded to either aggregator
    assert victim.budget.charges == {}  # nothing charged (a reservation, if any, given back)
    # an honest device of the same task is not affected
    honest = _device(pair, 1, cols)
    assert honest.join(LEADER_URL, tid) and honest.answer(tid, 0) is Answer.SENT
    assert pair.reports(round0["task_id"]) == [{"pending": 1}, {"pending": 1}]


@PRODUCTION
def test_the_helper_announcing_another_round_than_the_leader_is_refused(pair: Pair) -> None:
    config = _config(
        "bitpushing-mean", {"column": "value", "low": 0.0, "high": 100.0, "method": "basic"}, 2.0
    )
    envelope = pair.sign(config)
    tid = task_id(envelope["task"])
    pair.create(envelope)
    round0 = open_round(tid, 0, [], pair.leader, pair.helper)
    helper = _Deviating(pair.helper, _variant(lambda r: r.update(n_clients=N + 1)))
    d = _device(pair, 0, _data("ages"), clients={LEADER_URL: pair.leader, HELPER_URL: helper})
    assert d.join(LEADER_URL, tid)
    assert d.answer(tid, 1) is Answer.NOT_OPEN  # not my slot's absence: the round is not open
    assert d.answer(tid, 0) is Answer.REFUSED
    assert "different rounds" in d.refused[tid]
    assert pair.reports(round0["task_id"]) == [{}, {}]
    assert d.budget.charges == {}


# -- creation, abandonment, collection -------------------------------------------------------------


def test_aggregators_verify_the_envelope_and_store_nothing_otherwise(pair: Pair) -> None:
    config = _config(
        "bitpushing-mean", {"column": "value", "low": 0.0, "high": 100.0, "method": "basic"}, 2.0
    )
    envelope = pair.sign(config)
    tid = task_id(envelope["task"])
    for bad in (
        {**envelope, "signature": "00" * 64},  # unsigned
        {**envelope, "task": {**envelope["task"], "cohort_size": N + 1}},  # altered
        pair.sign({k: v for k, v in config.items() if k != "prio3"}),  # not a Prio3 task
    ):
        assert [r.status_code for r in pair.create(bad)] == [403, 403]
    for c in (pair.leader, pair.helper):
        assert c.get(f"/v1/vdaf/tasks/{tid}").status_code == 404
        assert c.get("/v1/admin/budgets/population/default").json()["charges"] == 0
    # a budget that cannot cover the task: 409, nothing stored
    big = pair.sign(
        _config(
            "bitpushing-mean",
            {"column": "value", "low": 0.0, "high": 100.0, "method": "basic"},
            60.0,
        )
    )
    assert [r.status_code for r in pair.create(big)] == [409, 409]
    assert pair.leader.get(f"/v1/vdaf/tasks/{task_id(big['task'])}").status_code == 404
    # the real one, twice (the same secrets are asked again only by an idempotent retry)
    assert [r.status_code for r in pair.create(envelope)] == [200, 200]
    infos = pair.info(tid)
    assert [i["role"] for i in infos] == ["leader", "helper"]
    assert all(i["charge"]["status"] == "reserved" for i in infos)


def test_abandon_releases_the_reservation_and_collection_spends_it(pair: Pair) -> None:
    cfg = _config(
        "bitpushing-mean", {"column": "value", "low": 0.0, "high": 100.0, "method": "basic"}, 2.0
    )
    # abandoned before any collection: released on both, no round opens, no device joins
    env = pair.sign(cfg)
    tid = task_id(env["task"])
    pair.create(env)
    open_round(tid, 0, [], pair.leader, pair.helper)
    for c in (pair.leader, pair.helper):
        assert c.post(f"/v1/vdaf/tasks/{tid}/abandon").status_code == 200
    assert all(i["charge"]["status"] == "released" for i in pair.info(tid))
    with pytest.raises(DataError, match="409"):
        _device(pair, 0, _data("ages")).join(LEADER_URL, tid)
    # collected: spent on both, and abandoning is refused afterwards
    env = pair.sign({**cfg, "label": "second"})
    tid = task_id(env["task"])
    pair.create(env)
    cols = _data("ages")
    devices = [_device(pair, i, cols) for i in range(3)]
    for d in devices:
        assert d.join(LEADER_URL, tid)

    def on_round(index: int, announced: Any) -> None:
        del announced
        for d in devices:
            d.answer(tid, index)

    collect_signed(env["task"], tid, pair.leader, pair.helper, on_round)
    assert all(i["charge"]["status"] == "spent" for i in pair.info(tid))
    assert pair.leader.post(f"/v1/vdaf/tasks/{tid}/abandon").status_code == 409


@PRODUCTION
def test_the_leader_takes_reports_only_from_devices_whose_slot_is_in_the_round(pair: Pair) -> None:
    cfg = _config(
        "bitpushing-mean", {"column": "value", "low": 0.0, "high": 100.0, "method": "adaptive"}, 2.0
    )
    env = pair.sign(cfg)
    tid = task_id(env["task"])
    pair.create(env)
    round0 = open_round(tid, 0, [], pair.leader, pair.helper)
    _lo, hi = round0["client_range"]
    assert 0 < hi < N  # adaptive: round 0 takes a first share of the slots
    cols = _data("ages")
    devices = [_device(pair, i, cols) for i in range(hi + 1)]
    for d in devices:
        assert d.join(LEADER_URL, tid)
    outside = devices[hi]
    # an honest device outside the range does not answer: not its slot (not "not open yet")
    assert outside.answer(tid, 0) is Answer.NOT_MY_SLOT
    assert outside.answer(tid, 1) is Answer.NOT_OPEN
    # a device uploading anyway (a round 0 report from slot hi) is refused by the leader
    prio3 = Prio3Task(
        round0["task_id"],
        round0["vdaf"],
        b"fedstats prio3 " + bytes.fromhex(round0["task_id"]),
        LEADER_URL,
        HELPER_URL,
    )
    rid, public, shares = shard_report(prio3, [0] * round0["vdaf"]["length"])
    with pytest.raises(DataError, match="403"):
        outside.uploader.upload_shares(prio3, rid, public, shares)


# -- leases on aggregation jobs ------------------------------------------------------------------------


def _stores(backend: str, tmp_path: Path, stack: ExitStack) -> list[Store]:
    if backend == "sqlite":
        urls = [f"sqlite:///{tmp_path / f'{r}.db'}" for r in ("leader", "helper")]
    else:
        why = pg_reachable()
        if why:
            pytest.skip(why)
        urls = [stack.enter_context(pg_schema()) for _ in range(2)]
    stores = [open_store(u) for u in urls]
    for s in stores:
        stack.callback(s.close)
    return stores


def _count_task(stores: list[Store], n: int) -> tuple[Prio3Task, np.ndarray]:
    tid, key, token = secrets.token_hex(32), os.urandom(32), secrets.token_urlsafe(32)
    task = Prio3Task(tid, {"type": "count"}, b"c", LEADER_URL, HELPER_URL)
    for s, role in zip(stores, ("leader", "helper"), strict=True):
        domain.create_task(
            s,
            task_id=tid,
            role=role,
            vdaf={"type": "count"},
            verify_key=key,
            ctx=b"c",
            peer_url=HELPER_URL,
            peer_token=token,
        )
    values = np.random.default_rng(1).integers(0, 2, n)
    for i, v in enumerate(values):
        rid, public, shares = shard_report(task, int(v))
        receipt = None
        for j, s in enumerate(stores):
            receipt = domain.upload_report(
                s,
                tid,
                client_id=f"d{i}",
                population="default",
                report_id=rid,
                public_share=public,
                input_share=shares[j],
                leader_receipt=receipt,  # the leader's, for the helper
            ).receipt
    return task, values


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_leader_processes_never_run_one_job_at_once(backend: str, tmp_path: Path) -> None:
    """Two leader workers (threads, own owners) on one database: every job is sent to the helper once,
    and the result is exact. Without job leases the second worker resends the first one's running job."""
    from fedstats.client.vdaf import unshard

    with ExitStack() as stack:
        stores = _stores(backend, tmp_path, stack)
        task, values = _count_task(stores, 24)
        sent: list[str] = []
        lock = threading.Lock()

        def send(tid: str, job: dict[str, Any]) -> dict[str, Any]:
            with lock:
                sent.append(job["job_id"])
            time.sleep(0.3)  # a slow helper: the other worker claims meanwhile
            return domain.helper_job(stores[1], tid, job)

        errors: list[BaseException] = []
        totals: list[dict[str, int]] = []

        def leader(owner: str) -> None:
            try:
                totals.append(
                    domain.run_leader_jobs(stores[0], task.task_id, send, batch_size=4, owner=owner)
                )
            except BaseException as exc:  # reported below
                errors.append(exc)

        workers = [threading.Thread(target=leader, args=(f"leader-{k}",)) for k in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        assert not errors, errors
        assert len(sent) == len(set(sent)) == 6  # 24 reports in jobs of 4, each sent once
        assert sorted(t["jobs"] for t in totals) != [0, 6]  # both workers ran jobs
        rng = np.random.default_rng(0)
        got = unshard(task, *[domain.collect(s, task.task_id, rng) for s in stores])
        assert (got.result, got.accepted, got.rejected) == ([int(values.sum())], 24, 0)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_crashed_leaders_job_is_taken_over_after_its_lease_and_the_old_leader_is_fenced(
    backend: str, tmp_path: Path
) -> None:
    from fedstats.client.vdaf import unshard

    with ExitStack() as stack:
        stores = _stores(backend, tmp_path, stack)
        task, values = _count_task(stores, 10)
        tid = task.task_id

        def send(t: str, job: dict[str, Any]) -> dict[str, Any]:
            return domain.helper_job(stores[1], t, job)

        # leader A claims a job and "crashes" (never finishes it)
        job_id, ids, epoch = domain._claim(stores[0], tid, 4, "A", 1.0)
        assert job_id is not None and epoch == 1
        # leader B at once: A's job is leased, B aggregates the other reports only
        done = domain.run_leader_jobs(stores[0], tid, send, batch_size=4, owner="B")
        assert done["accepted"] == 6
        with stores[0].transaction(read_only=True) as tx:
            assert tx.count_vdaf_jobs(tid, "running") == 1
        time.sleep(1.2)  # A's lease expires
        done = domain.run_leader_jobs(stores[0], tid, send, batch_size=4, owner="B")
        assert done == {"jobs": 1, "accepted": 4, "rejected": 0}
        with stores[0].transaction(read_only=True) as tx:
            job = tx.vdaf_job(tid, job_id)
            assert job is not None and (job.lease_owner, job.lease_epoch, job.status) == (
                "B",
                2,
                "done",
            )
        # A wakes up and finishes its job: fenced, nothing written
        with stores[0].transaction(read_only=True) as tx:
            row = domain.task_row(tx, tid)
        vdaf = domain.vdaf_from_spec({"type": "count"})
        assert domain._leader_job(stores[0], vdaf, row, job_id, ids, send, ("A", 1)) is None
        rng = np.random.default_rng(0)
        got = unshard(task, *[domain.collect(s, tid, rng) for s in stores])
        assert (got.result, got.accepted, got.rejected) == ([int(values.sum())], 10, 0)


# -- the task's prio3 section ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"prio3": {**ROUTE, "helper": LEADER_URL}}, "prio3.helper"),
        ({"prio3": {**ROUTE, "leader": "ftp://x"}}, "prio3.leader"),
        ({"prio3": {**ROUTE, "noise": {"mechanism": "laplace", "parameter": 1.0}}}, "prio3.noise"),
        (
            {"prio3": {**ROUTE, "noise": {"mechanism": "discrete_gaussian", "parameter": -1}}},
            "prio3.noise.parameter",
        ),
        ({"prio3": {**ROUTE, "min_batch_size": 0}}, "prio3.min_batch_size"),
        ({"prio3": {**ROUTE, "verify_key": "00" * 32}}, "prio3"),  # no secret in a signed task
        ({"max_records_per_client": 2}, "max_records_per_client"),
        ({"secure_aggregation": {"max_session": 10}}, "prio3"),
    ],
)
def test_the_prio3_section_is_checked_and_names_the_field(
    change: dict[str, Any], name: str
) -> None:
    from fedstats.errors import ParameterError
    from fedstats.wire.tasks import normalize_task

    cfg = {**CASES["performance-gap-R"][0], **change}
    with pytest.raises(ParameterError) as err:
        normalize_task(cfg)
    assert str(err.value.name).startswith(name), err.value


def test_a_prio3_task_replaces_secure_aggregation_and_leaves_other_task_ids_alone() -> None:
    from fedstats.wire.tasks import normalize_task

    chi2 = _config("fed-chi2", {"shape": [3, 2]}, None)
    task = normalize_task(chi2)  # fed-chi2 needs a private sum: Prio3's two aggregators give one
    assert task["prio3"] == {**ROUTE, "noise": None, "min_batch_size": 1}
    plain = {k: v for k, v in CASES["performance-gap-R"][0].items() if k != "prio3"}
    assert "prio3" not in normalize_task(plain)  # absent, so the ids of other tasks do not change


def test_a_route_without_min_batch_size_gets_the_devices_default_floor() -> None:
    from fedstats.client.policy import RefusedTask
    from fedstats.wire.tasks import DEFAULT_MIN_BATCH_SIZE, normalize_task

    route = {k: v for k, v in ROUTE.items() if k != "min_batch_size"}
    task = normalize_task({**CASES["performance-gap-R"][0], "prio3": route})
    assert task["prio3"]["min_batch_size"] == DEFAULT_MIN_BATCH_SIZE == Policy().min_batch_size
    Policy(max_epsilon=4.0).check(task)  # the default route passes the default policy
    low = normalize_task({**CASES["performance-gap-R"][0], "prio3": {**route, "min_batch_size": 9}})
    with pytest.raises(
        RefusedTask, match="min_batch_size 9 is below the policy's min_batch_size 10"
    ):
        Policy(max_epsilon=4.0).check(low)


@PRODUCTION
def test_a_device_refuses_a_batch_floor_below_its_policy(pair: Pair) -> None:
    envelope = pair.sign(CASES["performance-gap-R"][0])  # ROUTE: min_batch_size 1
    tid = task_id(envelope["task"])
    assert [r.status_code for r in pair.create(envelope)] == [200, 200]
    device = _device(pair, 0, _data("values"), policy=Policy(max_epsilon=4.0))  # default floor 10
    assert not device.join(LEADER_URL, tid)
    assert "min_batch_size 1 is below the policy's min_batch_size 10" in device.refused[tid]
    assert device.budget_key(tid) not in device.budget.charges  # nothing reserved, nothing sharded
    assert not device.tasks
