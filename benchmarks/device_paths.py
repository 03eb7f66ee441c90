"""A device's CPU outside the protocol's cryptography, per call and per secure run, in process.

What a simulated device of ``benchmarks/service_secagg.py`` spends around its ``SecAggClient`` (n =
1,000 members, one session of ``n``, a tree-seeded run, fed-chi2 with ``encoding_size`` 1,000 and 10
records a device), without a server:

* ``tree_join``: ``TreeRuns._tree_join`` at a round's stage 0 (the seat, the bound roster, the
  checked and two-hop members and their tree positions, the client; the committee already checked);
* ``carried_certificates``: ``SecureRuns._carried_certificates`` of the answer to the key
  advertisement (the neighbourhood's JSON before a 100 kB next message, as the server sends it): its
  multiproof (``verify_leaves``), each checked member's certificate (``check_certificate``; their
  signatures verified before, as by the other devices of a benchmark process), the keys held and the
  input given (the encoder replaced by a fixed vector of ``encoding_size``);
* ``check_certificate``: one call on a certificate parsed anew, its signature verified before;
* ``encode_round0`` and ``encode_round1``: ``Device._encode`` of the run's two rounds (derived from
  the accepted task, the reservation spent, 10 records encoded, the report summed);
* ``build_request_stage`` and ``build_request_advertisement``: ``DeviceHTTP.build_request`` of a
  stage message (a target sent before) and of the advertisement with its unique
  ``members=...&also=...`` query (named as the device of the first step names them);
* ``send_stage`` and ``send_advertisement``: ``Device._send`` of those requests read up to a limit
  (``fedstats.client.transport.read_capped``), answered by ``httpx.MockTransport`` (httpx's own
  work, no socket) with 35 bytes and with a 100 kB body.

``per_run`` adds what one device does in a run: two rounds' join, carried certificates and input, the
40 committee members' ``check_certificate``, both rounds' encoding and 13 requests (two of them
advertisements). Times are the measuring thread's CPU (``time.thread_time``), µs, the median of
``--repeat`` timings.

With ``--base DIR`` (another checkout's ``src``, e.g. ``git archive main src | tar -x -C /tmp/base``)
that tree's ``fedstats`` is copied as ``fedstats_baseline`` (as ``benchmarks/tree_ab.py`` does) and
both run in this process, each step's timings alternated between them, so a busy spell of a shared
machine slows both alike.

Run: ``python benchmarks/device_paths.py [--members 1000] [--repeat 41] [--base /tmp/base/src]
[--output device_paths]`` (writes ``benchmarks/results/<output>.json``, by default
``device_paths.json``, as ``make bench`` runs it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from _util import write_results
from tree_ab import baseline_package

RID = "run-paths-1"
POP = "default"
ENCODING_SIZE = 1000
RECORDS = 10
NEXT_MESSAGE_BYTES = 100_000
REQUESTS_PER_RUN = 13  # a device's requests in a secure run (the service benchmark's profile)
ADVERTISEMENTS_PER_RUN = 2  # one per secure round
COMMITTEE = 40  # certificates checked with the seed committee
ROUNDS = 2  # secure rounds per run
_MODULES = {
    "client": "client",
    "members": "client.secure_members",
    "secure_tree": "client.secure_tree",
    "derive": "client.derive",
    "transport": "client.transport",
    "randomness": "randomness",
    "auth": "wire.auth",
    "seeding": "wire.seeding",
    "cs": "wire.cohort_sessions",
    "ct": "wire.cohort_tree",
    "ts": "wire.tree_seeding",
    "tasks": "wire.tasks",
    "registry": "wire.registry",
    "wire": "wire",
    "rounds": "engine.rounds",
    "secagg": "secagg",
    "collusion": "secagg.collusion",
    "identity": "secagg.identity",
}


def load(package: str) -> SimpleNamespace:
    """The modules of ``package`` (``fedstats`` or a renamed copy) the steps use."""
    return SimpleNamespace(
        **{k: importlib.import_module(f"{package}.{v}") for k, v in _MODULES.items()}
    )


class Cohort:
    """Members' keys, ids, values and certificates: plain data, shared by both versions."""

    def __init__(self, n: int) -> None:
        from fedstats.wire import auth, seeding

        rng = np.random.default_rng(n)
        self.n = n
        self.authority = Ed25519PrivateKey.generate()
        self.keys = [Ed25519PrivateKey.generate() for _ in range(n)]
        self.ids = [f"device-{p:05d}" for p in range(n)]
        self.values = [bytes(rng.integers(0, 256, 32, dtype=np.uint8)) for _ in range(n)]
        self.raw_keys = [k.public_key().public_bytes_raw() for k in self.keys]
        self.commitments = [
            bytes.fromhex(seeding.commitment(RID, i, v))
            for i, v in zip(self.ids, self.values, strict=True)
        ]
        self.certs = [
            auth.issue_certificate(
                self.authority, client_id=i, public_key=auth.public_key_hex(k), population=POP
            ).as_dict()
            for i, k in zip(self.ids, self.keys, strict=True)
        ]


class Paths:
    """Every step of the module on one version's ``fedstats`` (``v``: :func:`load`)."""

    def __init__(self, v: SimpleNamespace, cohort: Cohort) -> None:
        self.v, self.c, n = v, cohort, cohort.n
        leaves = [
            v.ct.Leaf(cohort.ids[p], cohort.commitments[p], cohort.raw_keys[p], RECORDS)
            for p in range(n)
        ]
        self.tree = v.ct.CohortTree(leaves)
        head = self.tree.head
        members = v.cs.committee_positions(head)
        self.position = next(p for p in range(n // 3, n) if p not in set(members))
        statement = v.cs.reveal_statement
        reveals = {
            p: (cohort.values[p], cohort.keys[p].sign(statement(RID, head, p, cohort.values[p])))
            for p in members
        }
        self.seed = v.cs.committee_seed(RID, head, [cohort.values[p] for p in members])
        self.committee = {
            "status": "running",
            "seed": self.seed.hex(),
            "committee": v.ts.committee_answer(self.tree, reveals, dict(enumerate(cohort.certs))),
        }
        self.task = v.tasks.normalize_task(
            {
                "analysis": "fed-chi2",
                "params": {"shape": [4, 3], "encoding_size": ENCODING_SIZE},
                "privacy": {"epsilon": None, "population": POP},
                "cohort_size": n,
                "min_clients": n // 2,
                "max_records_per_client": RECORDS,
                "deadlines": {"checkin": 900.0, "round": 45.0},
                "secure_aggregation": {"max_session": n},
            }
        )
        self._answers: dict[tuple[tuple[int, ...], tuple[int, ...]], bytes] = {}
        self.dev, self.state = self._device()
        self.rnd = self._secure_round()
        self.stage0()  # every checked certificate verified once, the graph's rows cached
        self._encoding()
        self._http()

    # -- the device, past its own leaf and the seed committee
    def _device(self) -> tuple[Any, Any]:
        v, c, p = self.v, self.c, self.position
        identity = {
            "client_id": c.ids[p],
            "private_key": v.auth.private_key_hex(c.keys[p]),
            "certificate": c.certs[p],
            "authority_public_key": v.auth.public_key_hex(c.authority),
        }
        rng = np.random.default_rng(3)
        columns = {
            "x": rng.integers(0, 4, RECORDS).astype(np.int64),
            "y": rng.integers(0, 3, RECORDS).astype(np.int64),
        }
        dev = v.client.Device(
            "https://127.0.0.1:8443",
            identity,
            columns,
            policy=v.client.Policy(allow_non_private=True),
            budget=v.client.LocalBudget(None, epsilon=100.0),
        )
        dev._send = self._fake_send
        state = v.members.SecureState(c.values[p], task=self.task)
        dev.secure[RID] = state
        start = self.tree.slot_start(p)
        dev.joined[RID] = {"slot_start": start, "slot_count": RECORDS}
        dev._reveal(RID, wait=1.0)
        assert state.verified and RID not in dev.refused, dev.refused
        del dev._send  # the device's own transport again (the HTTP steps)
        vector = [int(x) for x in np.random.default_rng(1).integers(0, 1 << 20, ENCODING_SIZE)]
        self.vector = vector
        return dev, state

    def _fake_send(self, method: str, path: str, body: bytes, **kw: Any) -> httpx.Response:
        params = dict(kw.get("params") or {})
        if path.endswith("/seed") and params.get("part") == "committee":
            return httpx.Response(200, json=self.committee)
        if path.endswith("/seed"):  # seeded: the committee with the device's own leaf
            leaf = self.v.ts.leaf_answer(self.tree, self.position)
            return httpx.Response(200, json={**self.committee, "tree": leaf})
        raise AssertionError(f"unexpected request {method} {path}")

    def _secure_round(self) -> dict[str, Any]:
        """Round 0 over the whole cohort, one session of ``n``, as the server lists it."""
        import dataclasses

        v, n, head = self.v, self.c.n, self.tree.head
        sessions = v.cs.sessions_of_positions(self.seed, 0, n, n, 10)
        number = next(s for s, ps in enumerate(sessions) if self.position in ps)
        members = sessions[number]
        index, size = members.index(self.position), len(members)
        self.members = members
        sid = v.seeding.session_id(self.seed, 0, number)
        binding = v.ts.session_binding(RID, self.seed, head, 0, number, 0, n, n, size)
        keys = tuple(self.tree.leaf(p).key for p in members)
        roster = v.identity.SessionRoster(
            v.seeding.task_id_bytes(RID), sid, keys, bytes(64), binding
        )
        server = v.secagg.SecAggServer(
            v.collusion.session_parameters(size),
            length=ENCODING_SIZE,
            bits=v.seeding.BITS,
            roster=roster,
        )
        self.setup = dataclasses.replace(server.setup()[index], roster=b"").to_bytes()
        start = self.tree.slot_start(self.position)
        return {
            "run_id": RID,
            "round": 0,
            "client_range": [0, head.total_slots],
            "records": [start, start + RECORDS],
            "slot_start": start,
            "n_clients": head.total_slots,
            "dim": ENCODING_SIZE,
            "secure": {"session": number, "n": size, "index": index, "stage": 0},
        }

    def _answer(self, pending: Any) -> tuple[bytes, str]:
        """The answer to the advertisement: the neighbourhood's JSON, then the next message."""
        key = (tuple(pending.checked), tuple(pending.also))
        got = self._answers.get(key)
        if got is None:
            at = [self.members[j] for j in pending.checked + pending.also]
            certs = [self.c.certs[self.members[j]] for j in pending.checked]
            got = json.dumps(self.v.ts.leaves_answer(self.tree, at, certs)).encode()
            self._answers[key] = got
        return got + bytes(NEXT_MESSAGE_BYTES), str(len(got))

    # -- the certificate and leaf path
    def stage0(self) -> dict[str, float]:
        """One round's stage 0 from scratch: ``_tree_join``, then ``_carried_certificates``; µs."""
        dev, state, rnd = self.dev, self.state, self.rnd
        dev._encode = lambda rnd: self.vector
        index, number = 0, int(rnd["secure"]["session"])
        for d in (state.sessions, state.uncertified, state.encoded, state.limits):
            d.clear()
        state.rounds.pop(index, None)
        t0 = time.thread_time()
        client, down = dev._join_session(rnd, state, self.setup)
        t1 = time.thread_time()
        client.handle_bytes(down)  # the advertisement (the protocol's: not measured)
        pending = state.uncertified[(index, number)]
        self.named = pending.checked, pending.also
        body, cut = self._answer(pending)
        headers = {"content-type": "application/octet-stream", "fedstats-certificates": cut}
        response = httpx.Response(200, content=body, headers=headers)
        t2 = time.thread_time()
        rest = dev._carried_certificates(response, state, RID, (index, number), body)
        t3 = time.thread_time()
        del dev._encode
        assert (index, number) not in state.refused and not state.uncertified, state.refused
        assert rest is not None and len(rest) == NEXT_MESSAGE_BYTES
        return {"tree_join": 1e6 * (t1 - t0), "carried_certificates": 1e6 * (t3 - t2)}

    def check_certificate(self) -> dict[str, float]:
        """``check_certificate`` of a certificate parsed anew (its signature verified before), µs."""
        cert = json.loads(json.dumps(self.c.certs[self.members[1]]))
        leaf, dev = self.tree.leaf(self.members[1]), self.dev
        t0 = time.thread_time()
        self.v.secure_tree.check_certificate(
            cert,
            leaf,
            authority=str(dev.authority_public_key),
            population=POP,
            verified=dev.verified_certificates,
        )
        return {"check_certificate": 1e6 * (time.thread_time() - t0)}

    # -- the device's encoding of its data
    def _encoding(self) -> None:
        v, task, dev = self.v, self.task, self.dev
        total = self.tree.head.total_slots
        tid = v.tasks.task_id(task)
        seed = os.urandom(32)
        gen = v.registry.plan_for(task, n_clients=total, public_seed=seed)
        first = next(gen)
        sums = np.array([total // 4] * 4 + [total // 3] * 3, dtype=np.int64)
        second = gen.send(v.rounds.RoundSum(sums, total))
        start = self.tree.slot_start(self.position)
        history = [{"total": json.loads(v.wire.dumps(sums)), "n_clients": total}]
        rid = "run-encode"
        dev.accepted[rid] = v.derive._Accepted(
            tid, task, v.registry.privacy_loss_for(task), "analyst"
        )
        dev.joined[rid] = {"slot_start": start, "slot_count": RECORDS}
        dev._run_columns[rid] = dev.data.columns
        dev.budget.reserve(rid, dev.accepted[rid].loss)
        self.rounds = []
        for index, r in enumerate((first, second)):
            lo, hi = r.client_range if r.client_range is not None else (0, total)
            self.rounds.append(
                {
                    "run_id": rid,
                    "task_id": tid,
                    "analysis": task["analysis"],
                    "version": task["version"],
                    "privacy": json.loads(json.dumps(task["privacy"])),
                    "round": index,
                    "name": r.name,
                    "encode": v.registry.encoder_name(r.encode),
                    "params": json.loads(v.wire.dumps(dict(r.params))),
                    "dim": r.dim,
                    "bound": r.bound,
                    "client_range": [lo, hi],
                    "n_clients": total,
                    "public_seed": seed.hex(),
                    "history": history[:index],
                    "deadline": 1.0,
                    "records": [start, start + RECORDS],
                    "slot_start": start,
                }
            )
        self.reports = [dev._encode(r) for r in self.rounds]
        assert [len(r) for r in self.reports] == [first.dim, second.dim]

    def encode(self) -> dict[str, float]:
        """Both rounds' ``Device._encode``, µs each (the reports checked unchanged)."""
        out = {}
        for index, rnd in enumerate(self.rounds):
            t0 = time.thread_time()
            got = self.dev._encode(rnd)
            out[f"encode_round{index}"] = 1e6 * (time.thread_time() - t0)
            assert got == self.reports[index]
        return out

    # -- the HTTP request path
    def _http(self) -> None:
        dev = self.dev
        small = b'{"accepted":true,"duplicate":false}'
        large = bytes(NEXT_MESSAGE_BYTES)

        def answer(request: httpx.Request) -> httpx.Response:
            body = large if request.url.path.endswith("/0") else small
            kind = "application/octet-stream" if body is large else "application/json"
            return httpx.Response(200, content=body, headers={"content-type": kind})

        dev._http.close()
        dev._http = self.v.transport.DeviceHTTP(
            base_url="https://127.0.0.1:8443", transport=httpx.MockTransport(answer)
        )
        dev._request_key = ("1900000000.key", bytes(32), time.time() + 3600.0)
        self.stage_path = f"/v1/client/runs/{RID}/rounds/0/secure/0/2"
        self.advert_path = f"/v1/client/runs/{RID}/rounds/0/secure/0/0"
        self.message = bytes(4000)
        self.adverts = 0

    def _advert_params(self) -> dict[str, str]:
        """The advertisement's query: a checked list never sent before (one more member each time)."""
        checked, also = self.named
        self.adverts += 1
        extra = [self.c.n + self.adverts]  # the query is unique, as each session's is
        return {
            "wait": "25.000",
            "members": ",".join(str(j) for j in [*checked, *extra]),
            "also": ",".join(str(j) for j in also),
        }

    def build_request(self) -> dict[str, float]:
        """``DeviceHTTP.build_request`` of a stage message and of an advertisement, µs."""
        http, headers = self.dev._http, {"content-type": "application/octet-stream"}
        params = self._advert_params()
        t0 = time.thread_time()
        http.build_request(
            "POST",
            self.stage_path,
            content=self.message,
            headers=headers,
            params={"wait": "25.000"},
        )
        t1 = time.thread_time()
        http.build_request(
            "POST", self.advert_path, content=self.message, headers=headers, params=params
        )
        t2 = time.thread_time()
        return {
            "build_request_stage": 1e6 * (t1 - t0),
            "build_request_advertisement": 1e6 * (t2 - t1),
        }

    def send(self) -> dict[str, float]:
        """``Device._send`` of a stage message and of an advertisement (read capped), µs."""
        dev = self.dev
        params = self._advert_params()
        common = {"content_type": "application/octet-stream", "timeout": 145.0}
        t0 = time.thread_time()
        a = dev._send(
            "POST",
            self.stage_path,
            self.message,
            limit=1 << 20,
            params={"wait": "25.000"},
            **common,
        )
        t1 = time.thread_time()
        b = dev._send(
            "POST", self.advert_path, self.message, limit=1 << 20, params=params, **common
        )
        t2 = time.thread_time()
        assert len(a.content) == 35 and len(b.content) == NEXT_MESSAGE_BYTES
        return {"send_stage": 1e6 * (t1 - t0), "send_advertisement": 1e6 * (t2 - t1)}


STEPS = ("stage0", "check_certificate", "encode", "build_request", "send")


def per_run(got: dict[str, float]) -> dict[str, float]:
    """A device's run from the per-call figures (see the module)."""
    requests = REQUESTS_PER_RUN - ADVERTISEMENTS_PER_RUN
    parts = {
        "certificates_and_leaves": ROUNDS * (got["tree_join"] + got["carried_certificates"])
        + COMMITTEE * got["check_certificate"],
        "encode": got["encode_round0"] + got["encode_round1"],
        "requests": requests * got["send_stage"]
        + ADVERTISEMENTS_PER_RUN * got["send_advertisement"],
    }
    parts["total"] = sum(parts.values())
    return {k: round(x, 1) for k, x in parts.items()}


def measure(versions: dict[str, Paths], repeat: int) -> dict[str, Any]:
    """Each step ``repeat`` times per version, alternated; the medians (µs)."""
    times: dict[str, dict[str, list[float]]] = {name: {} for name in versions}
    order = list(versions.items())
    for step in STEPS:
        for i in range(repeat):
            for name, paths in order if i % 2 == 0 else order[::-1]:
                for k, x in getattr(paths, step)().items():
                    times[name].setdefault(k, []).append(x)
    out: dict[str, Any] = {}
    for name, got in times.items():
        calls = {k: round(statistics.median(xs), 2) for k, xs in got.items()}
        out[name] = {"per_call_us": calls, "per_run_us": per_run(calls)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=41)
    ap.add_argument("--base", type=Path, default=None, help="another checkout's src directory")
    ap.add_argument("--output", default="device_paths", help="results name ('' to write nothing)")
    args = ap.parse_args()
    cohort = Cohort(args.members)
    with tempfile.TemporaryDirectory() as tmp:
        packages = {"this": "fedstats"}
        if args.base is not None:
            packages = {"base": baseline_package(args.base, Path(tmp)), **packages}
        versions = {name: Paths(load(pkg), cohort) for name, pkg in packages.items()}
        got = measure(versions, args.repeat)
    if args.base is not None:
        got["ratio_base_to_this"] = {
            k: round(got["base"]["per_run_us"][k] / got["this"]["per_run_us"][k], 3)
            for k in got["this"]["per_run_us"]
        }
    print(json.dumps(got, indent=1))
    if args.output:
        path = write_results(
            args.output,
            {
                "command": "python benchmarks/device_paths.py --members "
                f"{args.members} --repeat {args.repeat}"
                + (f" --base {args.base}" if args.base is not None else "")
                + f" --output {args.output}",
                "base_sources": None if args.base is None else str(args.base),
                "load_average": os.getloadavg(),
                "what": __doc__.splitlines()[0],
                "results": got,
            },
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
