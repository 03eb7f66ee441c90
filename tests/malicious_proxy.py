"""A malicious aggregation server, as real devices see it: a proxy in front of ``fedstats server``.

Devices talk to :class:`MaliciousProxy` over HTTP on 127.0.0.1 as if it were the server. It forwards every
request unchanged (so the devices' signatures verify upstream) and, for the runs it is told to attack,
rewrites what the server answers: the seed transcript (also the reveals a held reveal is answered with),
the session's certificates, or any stage message, whether asked for, carried by the acknowledgement of
the device's previous one, or carried by the work list (a setup message; decoded with the public message
classes, changed, re-serialized). That is everything a malicious server
controls; it holds no device's key. Each attack is one of :data:`fedstats.secagg.ATTACKS` (or the seed
agreement's), and the test checks that every device refuses it and sends nothing more.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fedstats.secagg.identity import SessionRoster
from fedstats.secagg.messages import SetupMessage, UnmaskRequest, decode
from fedstats.wire import auth, seeding
from proxy_base import ForwardingProxy

__all__ = ["ATTACKS", "MaliciousProxy"]

_STAGE = re.compile(r"^/v1/client/runs/([^/]+)/rounds/(\d+)/secure/(\d+)/(\d+)$")
_CERTS = re.compile(r"^/v1/client/runs/([^/]+)/rounds/(\d+)/secure/(\d+)/certificates$")
_SEED = re.compile(r"^/v1/client/runs/([^/]+)/seed$")
_REVEAL = re.compile(r"^/v1/client/runs/([^/]+)/reveal$")


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


class MaliciousProxy(ForwardingProxy):
    """Forward devices' requests to ``upstream``; rewrite answers for the runs in :attr:`attacks`.

    Parameters
    ----------
    upstream : str
        The real server's URL.
    ca : Path
        CA certificate of the real server.
    """

    def __init__(self, upstream: str, ca: Path) -> None:
        super().__init__(upstream, ca, ("GET", "POST", "PUT"))
        self.attacks: dict[str, str] = {}
        self.tampered: dict[str, int] = {}
        self._replay: dict[tuple[str, int, int], bytes] = {}
        self.transcripts: dict[str, dict[str, Any]] = {}
        """Per run, the commitment list (``members``: the committed roster is in it) and the seed served."""

    async def _forward(self, request: Request) -> Response:
        body = await request.body()
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        assert self._client is not None  # set by the app's lifespan
        r = await self._client.request(
            request.method,
            request.url.path,
            params=request.query_params,
            content=body,
            headers=headers,
            timeout=60,
        )
        content = r.content
        path = request.url.path
        carried = r.headers.get("content-type", "") == "application/octet-stream"
        m = _STAGE.match(path)
        if r.status_code == 200 and path == "/v1/client/work":
            content = self._tamper_work(content)
        elif r.status_code == 200 and request.method == "GET":
            content = self._tamper(path, content)
        elif r.status_code == 200 and _REVEAL.match(path):
            content = self._tamper_reveal(path, content)
        elif r.status_code == 200 and carried and m is not None:
            # a stage message acknowledged with the device's next one: that one is the server's too
            content = self._tamper(f"{path.rsplit('/', 1)[0]}/{int(m.group(4)) + 1}", content)
        kept = {k: v for k, v in r.headers.items() if k.lower().startswith("fedstats-")}
        return Response(
            content,
            status_code=r.status_code,
            media_type=r.headers.get("content-type"),
            headers=kept,
        )

    def _tamper_work(self, body: bytes) -> bytes:
        """A work list's stage-0 entries carry the setup message: tampered as if it had been fetched."""
        work = json.loads(body)
        changed = False
        for rnd in work.get("rounds", []):
            info = rnd.get("secure") or {}
            if isinstance(info.get("message"), str):
                path = (
                    f"/v1/client/runs/{rnd['run_id']}/rounds/{rnd['round']}/secure/"
                    f"{info['session']}/{info['stage']}"
                )
                message = bytes.fromhex(info["message"])
                out = self._tamper(path, message)
                if out != message:
                    info["message"], changed = out.hex(), True
        return json.dumps(work).encode() if changed else body

    def _tamper_reveal(self, path: str, body: bytes) -> bytes:
        """A held reveal is answered with the seed and the reveals: tampered as the seed transcript."""
        ack = json.loads(body)
        revealed = ack.get("revealed")
        if not isinstance(revealed, dict):
            return body
        seed_path = path.rsplit("/", 1)[0] + "/seed"
        raw = json.dumps(revealed).encode()
        out = self._tamper(seed_path, raw)
        if out == raw:
            return body
        ack["revealed"] = json.loads(out)
        return json.dumps(ack).encode()

    def _tamper(self, path: str, body: bytes) -> bytes:
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
            self.tampered[attack] = self.tampered.get(attack, 0) + 1
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
    if tr.get("seed"):
        tr["seed"] = os.urandom(32).hex()
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
