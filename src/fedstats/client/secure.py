"""A device's side of secure runs: its seed contribution, roster checks, and the secure-aggregation stages.

The device trusts only its own configuration: the enrollment authority's public key (pinned in its
identity file), the protocol's parameters for the session size (:func:`fedstats.secagg.find_parameters`,
computed here, never taken from the server), and the run's seed transcript, which it verifies itself
(:func:`fedstats.wire.seeding.verify_transcript`). Against a malicious server it refuses, and drops out
of the session without sending anything more, when:

* the roster lists an identity without a valid certificate of the pinned authority for the task's
  population, or one device twice (no sybils);
* the session id is not the one the run's seed gives (no grinding of the communication graph);
* any message fails the checks of :class:`fedstats.secagg.SecAggClient` (wrong session, forged keys or
  signatures, too small a survivor set, an unmasking request that would reveal both of a device's masks).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedstats.errors import FedstatsError, SecurityError
from fedstats.secagg.identity import SessionRoster
from fedstats.wire import auth, seeding
from fedstats.wire.encoding import canonical_bytes

__all__ = ["CertificateRosterVerifier", "SecureRuns", "SecureState"]


class CertificateRosterVerifier:
    """Accepts a roster whose every identity holds a certificate of the pinned enrollment authority.

    The deployment's authority is offline, so it cannot sign each session's roster; it signed each device's
    certificate at enrollment instead (:mod:`fedstats.wire.enrollment`). This verifier checks the
    certificate of every roster entry and that the session id follows from the run's agreed seed; the
    roster's own signature field is ignored.

    Parameters
    ----------
    authority_public_key : str
        The authority's Ed25519 public key, hex (pinned on the device).
    certificates : sequence of dict
        The members' certificates in roster order (``{"body", "signature"}``).
    population : str
        The task's population: every member must be certified for it.
    session : bytes
        The session id the device computed from the run seed (:func:`fedstats.wire.seeding.session_id`).
    task_id : bytes
        The roster's task id (the run id).
    verified : set, optional
        Certificates (signature and canonical body) whose authority signature this device has already
        checked, filled in here: a later roster with the same members (the next round's session) skips
        the signature checks, not the others (expiry, population, keys, session id, duplicates).
    """

    def __init__(
        self,
        authority_public_key: str,
        certificates: Sequence[Mapping[str, Any]],
        *,
        population: str,
        session: bytes,
        task_id: bytes,
        verified: set[tuple[str, bytes]] | None = None,
    ) -> None:
        self._trusted = {auth.fingerprint(authority_public_key): authority_public_key}
        self.certificates = [auth.Certificate.from_dict(c) for c in certificates]
        self.population = population
        self.session = session
        self.task_id = task_id
        self.verified = set() if verified is None else verified

    def verify(self, roster: SessionRoster) -> None:
        """Raise :class:`~fedstats.errors.SecurityError` unless every roster identity is certified."""
        if not hmac.compare_digest(roster.session, self.session):
            raise SecurityError("the session id does not follow from the run's agreed seed")
        if roster.task_id != self.task_id:
            raise SecurityError("the roster names another run")
        if len(self.certificates) != roster.n:
            raise SecurityError("the roster and its certificates differ in length")
        ids = set()
        now = time.time()
        for key, cert in zip(roster.identities, self.certificates, strict=True):
            seen = (cert.signature, canonical_bytes(dict(cert.body)))
            if seen not in self.verified:
                auth.verify_certificate(cert, self._trusted, now=now)
                if len(self.verified) >= 100_000:  # bounded: a device keeps few sessions' members
                    self.verified.clear()
                self.verified.add(seen)
            elif float(cert.body["not_after"]) < now:
                raise SecurityError("certificate expired")
            if bytes.fromhex(str(cert.body["public_key"])) != key:
                raise SecurityError("a roster identity does not match its certificate")
            if str(cert.body["population"]) != self.population:
                raise SecurityError("a roster member is certified for another population")
            ids.add(str(cert.body["client_id"]))
        if len(ids) != roster.n or len(set(roster.identities)) != roster.n:
            raise SecurityError("the roster lists one device twice")


@dataclass
class SecureState:
    """What a device keeps of one secure run between polls (in memory: a restart makes it a dropout).

    Attributes
    ----------
    contribution : bytes
        Its secret seed contribution (32 bytes from OS entropy).
    seen : str or None
        Digest of the commitment list it saw when it revealed.
    seed : bytes or None
        The verified run seed.
    sessions : dict
        ``(round, session) -> SecAggClient``.
    replies : dict
        ``(round, session, stage) -> bytes``: each stage message sent, resent as is on a retry.
    acknowledged : set
        ``(round, session, stage)`` whose message the server acknowledged (the server lists a stage
        until it closes).
    refused : dict
        ``(round, session) -> reason`` of the sessions it left because a check failed.
    certificates : tuple or None
        ``(etag, list)``: the last session's member certificates as received; a later round whose
        session has the same members is answered 304 and verified again from this copy.
    """

    contribution: bytes
    seen: str | None = None
    seed: bytes | None = None
    sessions: dict[tuple[int, int], Any] = field(default_factory=dict)
    replies: dict[tuple[int, int, int], bytes] = field(default_factory=dict)
    acknowledged: set[tuple[int, int, int]] = field(default_factory=set)
    refused: dict[tuple[int, int], str] = field(default_factory=dict)
    certificates: tuple[str, Any] | None = None

    def commitment(self, run_id: str, client_id: str) -> str:
        """The commitment sent at check-in."""
        return seeding.commitment(run_id, client_id, self.contribution)


class SecureRuns:
    """The secure-run part of :class:`fedstats.client.Device`.

    A mixin: it uses the device's signed transport (``_request``), identity, encoder path (``_encode``)
    and log, declared here for type checking.
    """

    client_id: str
    authority_public_key: str | None
    secure: dict[str, SecureState]
    verified_certificates: set[tuple[str, bytes]]
    refused: dict[str, str]
    log: Callable[[str], None]
    _key: Ed25519PrivateKey
    _timeout: float
    _request: Callable[..., Any]
    _send: Callable[..., Any]
    _encode: Callable[[Mapping[str, Any]], list[int]]

    def _reveal(self, run_id: str) -> None:
        state = self.secure.get(run_id)
        if state is None:  # checked in before a restart: the contribution is lost (the run aborts)
            return
        tr = self._request("GET", f"/v1/client/runs/{run_id}/seed")
        entries = [(str(m[0]), str(m[1])) for m in tr["members"]]
        if (self.client_id, state.commitment(run_id, self.client_id)) not in entries:
            raise SecurityError("the run's commitment list lacks this device's commitment")
        state.seen = seeding.commitments_digest(run_id, entries)
        self._request(
            "POST",
            f"/v1/client/runs/{run_id}/reveal",
            {"value": state.contribution.hex(), "seen": state.seen},
        )

    def _secure_stage(self, rnd: Mapping[str, Any], wait: float = 0.0) -> None:
        """Answer the listed stage of a secure round, then, with ``wait``, the session's next stages.

        With ``wait``, the device sends its stage-``s`` message asking the server to answer with its
        stage-``s + 1`` message, held up to ``wait`` seconds until that stage opens: one request per stage,
        no polling of the work list in between. A stage answered before (listed again) is followed by a
        held request for the next one. When no next message comes (the stage did not open in time, or
        opened without this device), the work list takes over again.
        """
        run_id, index = str(rnd["run_id"]), int(rnd["round"])
        info = rnd["secure"]
        number, stage = int(info["session"]), int(info["stage"])
        down: bytes | None = None
        while True:
            more = wait > 0 and stage + 1 < len(seeding.STAGES)
            answered, down, sent = self._answer_stage(rnd, stage, down, wait if more else 0.0)
            if not answered or not more:
                return
            stage += 1
            if down is None and not sent:  # acknowledged earlier: ask for the next stage, held
                down = self._held_stage(run_id, index, number, stage, wait)
            if down is None:
                return

    def _held_stage(
        self, run_id: str, index: int, number: int, stage: int, wait: float
    ) -> bytes | None:
        """The device's message of ``stage``, held by the server up to ``wait`` s (None if none came)."""
        path = f"/v1/client/runs/{run_id}/rounds/{index}/secure/{number}/{stage}"
        try:
            r = self._send(
                "GET",
                path,
                b"",
                params={"wait": f"{wait:.3f}"},
                timeout=self._timeout + wait,
                retries=0,
            )
        except (FedstatsError, httpx.TransportError):
            return None  # not addressed there (a dropout), or no answer: the work list says what is next
        return r.content if r.status_code == 200 else None  # 204: not open in time

    def _answer_stage(
        self, rnd: Mapping[str, Any], stage: int, down: bytes | None, wait: float = 0.0
    ) -> tuple[bool, bytes | None, bool]:
        """Send this device's message of one stage (fetching the server's unless ``down`` holds it).

        Verifies the seed and the roster at stage 0. With ``wait`` > 0 the server may answer with this
        device's next stage message (see :meth:`_secure_stage`).

        Returns
        -------
        answered : bool
            Whether the server has acknowledged this device's message of that stage.
        next_down : bytes or None
            The device's message of the next stage, if the acknowledgement carried it.
        sent : bool
            Whether the message was sent now (False: acknowledged before, or not answered).
        """
        run_id, index = str(rnd["run_id"]), int(rnd["round"])
        number = int(rnd["secure"]["session"])
        state = self.secure.get(run_id)
        if state is None or (index, number) in state.refused:
            return False, None, False  # no state (restarted) or left: a dropout for the protocol
        if (index, number, stage) in state.acknowledged:
            return True, None, False
        path = f"/v1/client/runs/{run_id}/rounds/{index}/secure/{number}/{stage}"
        reply = state.replies.get((index, number, stage))
        if reply is None:
            try:
                if stage == 0:
                    client = self._join_session(rnd, state)
                else:
                    client = state.sessions.get((index, number))
                    if client is None:
                        return False, None, False
                if down is None:
                    down = self._request("GET", path, binary=True)
                reply = client.handle_bytes(down)
            except FedstatsError as exc:
                # a failed check or a malformed message: leave the session, send nothing more
                state.refused[(index, number)] = str(exc)
                state.sessions.pop((index, number), None)
                self.log(f"left secure session {number} of run {run_id} round {index}: {exc}")
                return False, None, False
            state.replies[(index, number, stage)] = reply
        r = self._send(
            "POST",
            path,
            reply,
            content_type="application/octet-stream",
            params={"wait": f"{wait:.3f}"} if wait > 0 else None,
            timeout=self._timeout + wait if wait > 0 else None,
        )
        state.acknowledged.add((index, number, stage))
        carried = r.headers.get("content-type", "").startswith("application/octet-stream")
        return True, r.content if carried else None, True

    def _join_session(self, rnd: Mapping[str, Any], state: SecureState) -> Any:
        """Verify the run seed and the session's roster certificates; build this device's client."""
        from fedstats.secagg import ClientConfig, SecAggClient, find_parameters
        from fedstats.secagg.identity import ClientIdentity

        run_id, index = str(rnd["run_id"]), int(rnd["round"])
        info = rnd["secure"]
        number = int(info["session"])
        if state.seed is None:
            if state.seen is None:
                raise SecurityError("this device did not reveal: it cannot check the run seed")
            tr = self._request("GET", f"/v1/client/runs/{run_id}/seed")
            state.seed = seeding.verify_transcript(
                run_id, self.client_id, tr, seen_digest=state.seen, own_value=state.contribution
            )
        path = f"/v1/client/runs/{run_id}/rounds/{index}/secure/{number}/certificates"
        held = state.certificates
        r = self._send("GET", path, b"", headers={"If-None-Match": held[0]} if held else None)
        if r.status_code == 304 and held is not None:
            certs = held[1]  # the same members as before: verified below for this session anew
        else:
            certs = r.json()
            etag = r.headers.get("etag")
            state.certificates = (etag, certs) if etag else None
        verifier = CertificateRosterVerifier(
            str(self.authority_public_key),
            certs,
            population=str(rnd["privacy"]["population"]),
            session=seeding.session_id(state.seed, index, number),
            task_id=seeding.task_id_bytes(run_id),
            verified=self.verified_certificates,
        )
        # the parameters are pinned: computed here from the session size, never taken from the server
        params = find_parameters(int(info["n"]))
        config = ClientConfig.from_parameters(
            params,
            bits=seeding.BITS,
            length=int(rnd["dim"]),
            identity=ClientIdentity(self._key),
            verifier=verifier,
            task_id=seeding.task_id_bytes(run_id),
        )
        vector = self._encode(rnd)
        values = np.array([int(x) % (1 << seeding.BITS) for x in vector], dtype=np.uint64)
        client = SecAggClient(int(info["index"]), values, config)
        state.sessions[(index, number)] = client
        return client
