"""A device's side of secure runs: its seed contribution, roster checks, and the secure-aggregation stages.

The device trusts only its own configuration: the enrollment authority's public key (pinned in its
identity file), the protocol's parameters for the session size (:func:`fedstats.secagg.find_parameters`,
computed here, never taken from the server), and the run's seed transcript, which it verifies itself
(:func:`fedstats.service.seeding.verify_transcript`). Against a malicious server it refuses, and drops out
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedstats.errors import SecurityError
from fedstats.secagg.identity import SessionRoster
from fedstats.service import auth, seeding

__all__ = ["CertificateRosterVerifier", "SecureState"]


class CertificateRosterVerifier:
    """Accepts a roster whose every identity holds a certificate of the pinned enrollment authority.

    The deployment's authority is offline, so it cannot sign each session's roster; it signed each device's
    certificate at enrollment instead (:mod:`fedstats.service.enrollment`). This verifier checks the
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
        The session id the device computed from the run seed (:func:`fedstats.service.seeding.session_id`).
    task_id : bytes
        The roster's task id (the run id).
    """

    def __init__(
        self,
        authority_public_key: str,
        certificates: Sequence[Mapping[str, Any]],
        *,
        population: str,
        session: bytes,
        task_id: bytes,
    ) -> None:
        self._trusted = {auth.fingerprint(authority_public_key): authority_public_key}
        self.certificates = [auth.Certificate.from_dict(c) for c in certificates]
        self.population = population
        self.session = session
        self.task_id = task_id

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
            auth.verify_certificate(cert, self._trusted, now=now)
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
    refused : dict
        ``(round, session) -> reason`` of the sessions it left because a check failed.
    """

    contribution: bytes
    seen: str | None = None
    seed: bytes | None = None
    sessions: dict[tuple[int, int], Any] = field(default_factory=dict)
    replies: dict[tuple[int, int, int], bytes] = field(default_factory=dict)
    refused: dict[tuple[int, int], str] = field(default_factory=dict)

    def commitment(self, run_id: str, client_id: str) -> str:
        """The commitment sent at check-in."""
        return seeding.commitment(run_id, client_id, self.contribution)
