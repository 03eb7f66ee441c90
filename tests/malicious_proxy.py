"""A malicious aggregation server, as real devices see it: a proxy in front of ``fedstats server``.

Devices talk to :class:`MaliciousProxy` over HTTP on 127.0.0.1 as if it were the server. It forwards every
request unchanged (so the devices' signatures verify upstream) and, for the runs it is told to attack,
rewrites what the server answers, in every answer that carries it (:data:`CARRIERS`):

* the seed transcript: ``GET .../seed`` (the commitment list, or the reveals and the seed), the held
  check-in's ``"transcript"``, the held reveal's ``"revealed"``, and a work list's ``"public_seed"``;
* the session's certificates: ``GET .../certificates``, the answer to the key advertisement (``POST
  .../0?members=``: their JSON before the stage-1 message, its length in ``Fedstats-Certificates``) and
  its JSON acknowledgement's ``"certificates"``;
* the stage messages: asked for (``GET .../k/s``), carried by the answer to the device's previous one,
  or a setup message carried by a work list (``"message"``, hex) — the work list of a poll or the one a
  held last stage's acknowledgement carries (``"work"``).

Stage messages are decoded with the public message classes, changed and re-serialized. That is everything
a malicious server controls; it holds no device's key. Each attack is one of :data:`ATTACKS`, and the test
checks that every device refuses it and sends nothing more. The proxy counts each rewrite (per attack and
carrier: :attr:`MaliciousProxy.delivered`), so the test can check that every attack reached the devices,
and notes every answer it does not know how to read (:attr:`MaliciousProxy.unchecked`: a path, a JSON
key, a header or a content type it has no rewrite for), so that a new carrier of the data cannot pass it
unseen.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fedstats.secagg.identity import SessionRoster
from fedstats.secagg.messages import SetupMessage, UnmaskRequest, decode
from fedstats.wire import auth, seeding
from proxy_base import ForwardingProxy, fedstats_headers

__all__ = ["ATTACKS", "CARRIERS", "MaliciousProxy"]

_RUN = r"^/v1/client/runs/([^/]+)"
_STAGE = re.compile(_RUN + r"/rounds/(\d+)/secure/(\d+)/(\d+)$")
_CERTS = re.compile(_RUN + r"/rounds/(\d+)/secure/(\d+)/certificates$")
_SEED = re.compile(_RUN + r"/seed$")
_REVEAL = re.compile(_RUN + r"/reveal$")
_CHECKIN = re.compile(_RUN + r"/checkin$")
_OTHER = re.compile(_RUN + r"/(refuse|rounds/\d+/report)$")
_WORK = "/v1/client/work"
_CUT = "fedstats-certificates"  # fedstats.service.http.secure.CERTIFICATES

CARRIERS = (
    "GET seed",  # the seed transcript, asked for
    "checkin transcript",  # the commitment list a held check-in is answered with
    "reveal revealed",  # the reveals and the seed a held reveal is answered with
    "work public_seed",  # the run seed a work list's round names
    "ack work public_seed",  # the same in the work list a held last stage's acknowledgement carries
    "GET certificates",  # the certificates, asked for
    "advertisement certificates",  # before the stage-1 message, in the answer to the advertisement
    "ack certificates",  # in the advertisement's JSON acknowledgement (no stage-1 message yet)
    "GET stage",  # a stage message, asked for
    "ack stage",  # the next stage's message, the answer to the previous one
    "work message",  # a setup message on a work list
    "ack work message",  # the same in the work list a held last stage's acknowledgement carries
)
"""Every answer (and part of one) through which the attacked data reaches a device."""

# the JSON answers the proxy reads, by request: the top-level keys each may have (a key outside these
# would be a carrier the proxy has no rewrite for); ``"list"``: a JSON list
_JSON_KEYS: dict[str, frozenset[str] | str] = {
    "GET /livez": frozenset({"status"}),  # the device's probe of the server
    "POST /v1/client/register": frozenset({"client_id", "population"}),
    "POST /v1/client/request-key": frozenset({"key_id", "key", "expires"}),
    "POST checkin": frozenset({"slot_start", "slot_count", "transcript"}),
    "POST reveal": frozenset({"accepted", "duplicate", "revealed"}),
    "GET seed": frozenset({"members", "commitments_digest", "reveals", "seed", "status"}),
    "GET certificates": "list",
    "POST stage": frozenset({"accepted", "duplicate", "certificates", "work"}),
    "POST refuse": frozenset({"recorded"}),
    "POST report": frozenset({"accepted", "duplicate"}),
}
_WORK_KEYS = {  # a work list's keys, and its entries'
    "list": frozenset({"offers", "reveals", "rounds", "finished"}),
    "offers": frozenset({"run_id", "task_id", "task", "envelope"}),
    "reveals": frozenset({"run_id"}),
    "finished": frozenset({"run_id", "status"}),
    "rounds": frozenset(
        {
            "run_id",
            "task_id",
            "analysis",
            "version",
            "privacy",
            "round",
            "name",
            "encode",
            "params",
            "dim",
            "bound",
            "client_range",
            "records",
            "slot_start",
            "n_clients",
            "public_seed",
            "history",
            "deadline",
            "secure",
        }
    ),
    "secure": frozenset({"session", "stage", "stage_name", "index", "n", "deadline", "message"}),
}
# the server's own headers a device reads; a request key (a work poll's fedstats-request-key) is no
# protocol input: a false one only makes the device's next request refused and signed again
_HEADERS = frozenset({"fedstats-duplicate", "fedstats-request-key", _CUT})


def _setup(body: bytes, change: Callable[[SetupMessage], SetupMessage]) -> bytes:
    msg = decode(body)
    assert isinstance(msg, SetupMessage)
    return change(msg).to_bytes()


def _roster(msg: SetupMessage, **change: Any) -> SetupMessage:
    if (
        not msg.roster
    ):  # the server sends none (the devices derive it from the run's commitment list)
        return msg
    roster = SessionRoster.from_bytes(msg.roster)
    return dataclasses.replace(msg, roster=dataclasses.replace(roster, **change).to_bytes())


def _fresh_key() -> bytes:
    return bytes.fromhex(auth.public_key_hex(auth.private_key_from_hex(os.urandom(32).hex())))


def _request_kind(method: str, path: str) -> str:
    """The request's kind, as :data:`_JSON_KEYS` names it (the path itself for the fixed ones)."""
    for name, pattern in (
        ("checkin", _CHECKIN),
        ("reveal", _REVEAL),
        ("seed", _SEED),
        ("certificates", _CERTS),
        ("stage", _STAGE),
    ):
        if pattern.match(path):
            return f"{method} {name}"
    m = _OTHER.match(path)
    if m is not None:
        return f"{method} {m.group(2).rsplit('/', 1)[-1]}"
    return f"{method} {path}"


class MaliciousProxy(ForwardingProxy):
    """Forward devices' requests to ``upstream``; rewrite answers for the runs in :attr:`attacks`.

    Parameters
    ----------
    upstream : str
        The real server's URL.
    ca : Path
        CA certificate of the real server.

    Attributes
    ----------
    attacks : dict
        ``run_id -> attack`` (a key of :data:`ATTACKS`), set by the test.
    tampered : dict
        ``attack -> answers rewritten`` (delivered to a device).
    delivered : Counter
        ``(attack, carrier) -> answers rewritten``, the carrier one of :data:`CARRIERS`.
    unchecked : set of str
        Answers the proxy could not read for the attacked data (an unknown path, JSON key, header or
        content type): a carrier it has no rewrite for. The test asserts it empty.
    transcripts : dict
        Per run, the commitment list (``members``: the committed roster is in it) and the seed served.
    """

    def __init__(self, upstream: str, ca: Path) -> None:
        super().__init__(upstream, ca, ("GET", "POST", "PUT"))
        self.attacks: dict[str, str] = {}
        self.tampered: dict[str, int] = {}
        self.delivered: Counter[tuple[str, str]] = Counter()
        self.unchecked: set[str] = set()
        self._replay: dict[tuple[str, int, int], bytes] = {}
        self.transcripts: dict[str, dict[str, Any]] = {}
        self._ground: dict[str, str] = {}  # run -> the seed seed_grinding publishes

    async def _forward(self, request: Request) -> Response:
        r = await self._upstream(request)
        content = r.content
        kept = fedstats_headers(r.headers)
        if r.status_code == 200:  # one event loop: no two answers are rewritten at once
            media = r.headers.get("content-type", "")
            content = self._rewrite(request.method, request.url.path, media, content, kept)
        return Response(
            content,
            status_code=r.status_code,
            media_type=r.headers.get("content-type"),
            headers=kept,
        )

    def _rewrite(
        self, method: str, path: str, media: str, body: bytes, headers: dict[str, str]
    ) -> bytes:
        """Rewrite every attacked carrier in one answer (``headers``: its own, changed in place)."""
        kind = _request_kind(method, path)
        for h in headers:
            if h not in _HEADERS:
                self.unchecked.add(f"{kind}: header {h}")
        if media.startswith("application/octet-stream"):
            m = _STAGE.match(path)
            if m is None:
                self.unchecked.add(f"{kind}: binary answer")
                return body
            if method == "GET":
                return self._tamper(path, body, "GET stage")
            return self._stage_answer(m, body, headers)
        if not media.startswith("application/json"):
            self.unchecked.add(f"{kind}: content type {media or 'none'}")
            return body
        try:
            data = json.loads(body)
        except ValueError:
            self.unchecked.add(f"{kind}: JSON that does not parse")
            return body
        if path == _WORK and method == "GET":
            return self._carry(data, body, self._work(data, "work"))
        allowed = _JSON_KEYS.get(kind)
        if allowed is None:
            self.unchecked.add(f"{kind}: a JSON answer of an unknown request")
            return body
        if allowed == "list":
            if not isinstance(data, list):
                self.unchecked.add(f"{kind}: not a list")
            return self._tamper(path, body, "GET certificates")
        if not isinstance(data, dict):
            self.unchecked.add(f"{kind}: not an object")
            return body
        assert isinstance(allowed, frozenset)
        for k in set(data) - allowed:
            self.unchecked.add(f"{kind}: key {k!r}")
        if kind == "GET seed":
            return self._tamper(path, body, "GET seed")
        m = _CHECKIN.match(path) or _REVEAL.match(path) or _STAGE.match(path)
        if m is None:
            return body
        changed = False
        seed_path = f"/v1/client/runs/{m.group(1)}/seed"
        for key, at, carrier in (
            ("transcript", seed_path, "checkin transcript"),
            ("revealed", seed_path, "reveal revealed"),
            ("certificates", self._certs_path(m), "ack certificates"),
        ):
            if key in data and at is not None:
                raw = json.dumps(data[key]).encode()
                out = self._tamper(at, raw, carrier)
                if out != raw:
                    data[key], changed = json.loads(out), True
        if isinstance(data.get("work"), dict):  # a held last stage's: the device's next work list
            changed = self._work(data["work"], "ack work") or changed
        return self._carry(data, body, changed)

    @staticmethod
    def _carry(data: Any, body: bytes, changed: bool) -> bytes:
        return json.dumps(data).encode() if changed else body

    @staticmethod
    def _certs_path(m: re.Match[str]) -> str | None:
        if m.re is not _STAGE:
            return None
        return f"/v1/client/runs/{m.group(1)}/rounds/{m.group(2)}/secure/{m.group(3)}/certificates"

    def _stage_answer(self, m: re.Match[str], body: bytes, headers: dict[str, str]) -> bytes:
        """The answer to a stage message: the next one, after the certificates the device asked for."""
        nxt = f"{m.string.rsplit('/', 1)[0]}/{int(m.group(4)) + 1}"
        cut = headers.get(_CUT)
        if cut is None:
            return self._tamper(nxt, body, "ack stage")
        if not cut.isdigit() or int(cut) > len(body):
            self.unchecked.add(f"POST stage: {_CUT} {cut!r}")
            return body
        certs = self._tamper(
            self._certs_path(m) or "", body[: int(cut)], "advertisement certificates"
        )
        message = self._tamper(nxt, body[int(cut) :], "ack stage")
        headers[_CUT] = str(len(certs))
        return certs + message

    def _work(self, work: Any, carrier: str) -> bool:
        """Rewrite a work list in place (the setup messages and seeds it carries); whether it changed.

        ``carrier``: ``"work"`` (a poll's answer) or ``"ack work"`` (a held last stage's).
        """
        if not isinstance(work, dict):
            self.unchecked.add("work list: not an object")
            return False
        for k in set(work) - _WORK_KEYS["list"]:
            self.unchecked.add(f"work list: key {k!r}")
        changed = False
        for part in ("offers", "reveals", "finished", "rounds"):
            for entry in work.get(part) or []:
                for k in set(entry) - _WORK_KEYS[part]:
                    self.unchecked.add(f"work list {part}: key {k!r}")
        for rnd in work.get("rounds") or []:
            run_id = str(rnd["run_id"])
            if isinstance(rnd.get("public_seed"), str):
                seed = self._grind(run_id, rnd["public_seed"], f"{carrier} public_seed")
                if seed != rnd["public_seed"]:
                    rnd["public_seed"], changed = seed, True
            info = rnd.get("secure") or {}
            for k in set(info) - _WORK_KEYS["secure"]:
                self.unchecked.add(f"work list secure: key {k!r}")
            if isinstance(info.get("message"), str):
                path = (
                    f"/v1/client/runs/{run_id}/rounds/{rnd['round']}/secure/"
                    f"{info['session']}/{info['stage']}"
                )
                message = bytes.fromhex(info["message"])
                out = self._tamper(path, message, f"{carrier} message")
                if out != message:
                    info["message"], changed = out.hex(), True
        return changed

    def _grind(self, run_id: str, seed: str, carrier: str) -> str:
        """The seed to publish for the run: the seed_grinding attack's (one per run), else ``seed``."""
        attack = self.attacks.get(run_id)
        if attack != "seed_grinding":
            return seed
        ground = self._ground.setdefault(run_id, os.urandom(32).hex())
        self._count(attack, carrier)
        return ground

    def _count(self, attack: str, carrier: str) -> None:
        self.tampered[attack] = self.tampered.get(attack, 0) + 1
        self.delivered[(attack, carrier)] += 1

    def _tamper(self, path: str, body: bytes, carrier: str) -> bytes:
        """``body`` as the attack of its run rewrites it, read as the answer to ``GET path``."""
        m = _STAGE.match(path) or _CERTS.match(path) or _SEED.match(path)
        if m is None:
            return body
        run_id = m.group(1)
        if _SEED.match(path):
            tr = json.loads(body)
            seen = self.transcripts.setdefault(run_id, {})
            if tr.get("members"):
                seen["members"] = tr["members"]
            if tr.get("seed"):
                seen["seed"] = tr["seed"]
        if _STAGE.match(path):
            rnd, stage = int(m.group(2)), int(m.group(4))
            if stage == 1 and rnd == 0:
                self._replay[(run_id, 0, 1)] = body  # kept for the replay attack of round 1
        attack = self.attacks.get(run_id)
        if attack is None:
            return body
        out = ATTACKS[attack](self, path, body, run_id)
        if out != body:
            self._count(attack, carrier)
        return out


def _on_stage(stage: int, rnd: int | None = None) -> Callable[..., Any]:
    def wrap(fn: Callable[[bytes], bytes]) -> Callable[..., bytes]:
        def attack(proxy: MaliciousProxy, path: str, body: bytes, run_id: str) -> bytes:
            m = _STAGE.match(path)
            if (
                m is None
                or int(m.group(4)) != stage
                or (rnd is not None and int(m.group(2)) != rnd)
            ):
                return body
            return fn(body)

        return attack

    return wrap


@_on_stage(0)
def _parameter_tampering(body: bytes) -> bytes:
    """A weaker threshold than the devices' own parameters for the session size."""
    return _setup(body, lambda m: dataclasses.replace(m, t=max(1, m.t - 1)))


@_on_stage(0)
def _graph_choice(body: bytes) -> bytes:
    """A session id the server picked (it fixes the communication graph), not the run seed's, put
    consistently in the setup message and its roster if it sends one (only the run-seed check can
    catch it)."""
    sid = os.urandom(32)
    return _setup(body, lambda m: _roster(dataclasses.replace(m, session=sid), session=sid))


def _key_substitution(proxy: MaliciousProxy, path: str, body: bytes, run_id: str) -> bytes:
    """A fake client: the setup message carries the session's roster with one identity (another
    member's) replaced by a key the server made (the run's committed roster, rebuilt from the seed
    transcript the devices were served, in the derived order; one session per round here)."""
    m = _STAGE.match(path)
    tr = proxy.transcripts.get(run_id, {})
    if m is None or int(m.group(4)) != 0 or "members" not in tr or "seed" not in tr:
        return body
    members = tr["members"]
    cohort = [(str(r[0]), int(r[3]), int(r[4])) for r in members]
    total = sum(c for _, _, c in cohort)
    seed = bytes.fromhex(tr["seed"])
    order = seeding.sessions_of(cohort, seed, int(m.group(2)), (0, total), len(cohort), 2)[0]
    keys = {str(r[0]): bytes.fromhex(str(r[5])) for r in members}

    def change(msg: SetupMessage) -> SetupMessage:
        ids = [keys[c] for c in order]
        ids[(msg.client + 1) % len(ids)] = _fresh_key()  # someone else's slot
        roster = SessionRoster(seeding.task_id_bytes(run_id), msg.session, tuple(ids), bytes(64))
        return dataclasses.replace(msg, roster=roster.to_bytes())

    return _setup(body, change)


@_on_stage(4)
def _inconsistent_dropout_claims(body: bytes) -> bytes:
    """An unmasking request without the survivors' signatures (claims the server cannot prove)."""
    msg = decode(body)
    assert isinstance(msg, UnmaskRequest)
    return dataclasses.replace(msg, signatures={}).to_bytes()


@_on_stage(1)
def _oversized_message(body: bytes) -> bytes:
    """A key broadcast padded far beyond what the protocol needs."""
    return body + b"\x00" * 5_000_000


def _replay_or_forgery(proxy: MaliciousProxy, path: str, body: bytes, run_id: str) -> bytes:
    """Round 1's key broadcast replaced by the same device's message from round 0 (another session)."""
    m = _STAGE.match(path)
    if m is None or int(m.group(2)) != 1 or int(m.group(4)) != 1:
        return body
    return proxy._replay.get((run_id, 0, 1), body)


def _seed_grinding(proxy: MaliciousProxy, path: str, body: bytes, run_id: str) -> bytes:
    """A published run seed the server chose (it fixes every session id and the projection)."""
    if not _SEED.match(path):
        return body
    tr = json.loads(body)
    if not tr.get("seed"):
        return body  # the commitment list, before any seed
    tr["seed"] = proxy._ground.setdefault(run_id, os.urandom(32).hex())
    return json.dumps(tr).encode()


def _sybil_certificate(proxy: MaliciousProxy, path: str, body: bytes, run_id: str) -> bytes:
    """A member's certificate rewritten to name a key the server made (the signature no longer holds)."""
    if not _CERTS.match(path):
        return body
    certs = json.loads(body)
    certs[0]["body"]["public_key"] = _fresh_key().hex()
    return json.dumps(certs).encode()


ATTACKS: dict[str, Callable[[MaliciousProxy, str, bytes, str], bytes]] = {
    "parameter_tampering": _parameter_tampering,
    "graph_choice": _graph_choice,
    "key_substitution": _key_substitution,
    "sybil_certificate": _sybil_certificate,
    "seed_grinding": _seed_grinding,
    "oversized_message": _oversized_message,
    "replay_or_forgery": _replay_or_forgery,
    "inconsistent_dropout_claims": _inconsistent_dropout_claims,
}
"""Attack name -> rewrite of one answer (``proxy, path, body, run_id -> body``)."""
