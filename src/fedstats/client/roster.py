"""The device's side of a secure session's roster: certificates checked, members audited, roster committed.

:class:`CertificateRosterVerifier` checks the certificates of a session's members (the pinned authority,
the population, expiry; each signature once per process), :func:`checked_members` chooses the members a
device audits, and :func:`committed_roster` / :func:`with_committed_roster` hold the server to the roster
committed in the run's seed transcript. Used by :class:`fedstats.client.secure.SecureRuns`, which
re-exports these names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedstats.errors import ParameterError, SecurityError
from fedstats.secagg.graph import public_neighbors, public_two_hop
from fedstats.secagg.identity import SIGNATURE_BYTES, SessionRoster
from fedstats.secagg.messages import SetupMessage
from fedstats.wire import auth
from fedstats.wire.encoding import canonical_bytes

__all__ = [
    "CertificateRosterVerifier",
    "body_bytes",
    "checked_members",
    "committed_roster",
    "two_hop",
    "with_committed_roster",
]


class CertificateRosterVerifier:
    """Accepts a roster whose checked identities hold certificates of the pinned enrollment authority.

    The deployment's authority is offline, so it cannot sign each session's roster; it signed each device's
    certificate at enrollment instead (:mod:`fedstats.wire.enrollment`). This verifier checks that the
    session id follows from the run's agreed seed, that the roster's keys are distinct, and the certificate
    of each *checked* member: with ``indices``, only those members (a device passes its ``k`` neighbours
    and a few members it audits, see :func:`checked_members`); without, every member in roster order. The
    roster's own signature field is ignored. Why the neighbours' certificates are enough is argued in
    :mod:`fedstats.client.secure` (the roster is bound by its transcript) and in ``docs/secagg.md``.

    Parameters
    ----------
    authority_public_key : str
        The authority's Ed25519 public key, hex (pinned on the device).
    certificates : sequence of dict or None
        Certificates (``{"body", "signature"}``): of the members ``indices`` in that order, or of every
        member in roster order when ``indices`` is None. None defers them (:meth:`supply`): until
        then :meth:`verify` checks the roster's structure only (session id, run, size, distinct keys)
        and :attr:`certified` is False; a device sends nothing secret before it is True.
    population : str
        The task's population: every checked member must be certified for it.
    session : bytes
        The session id the device computed from the run seed (:func:`fedstats.wire.seeding.session_id`).
    task_id : bytes
        The roster's task id (the run id).
    verified : set, optional
        Certificates (the pinned authority key, the signature and the canonical body: the whole verified
        content) whose authority signature has already been checked, filled in here: a later roster with
        the same members (the next round's session), or another device of the same process
        (:data:`VERIFIED_CERTIFICATES`), skips the signature checks, not the others (expiry, population,
        keys, session id, duplicates).
    members : sequence of str, optional
        The session's members (client ids) in the roster order the device derived
        (:func:`fedstats.wire.seeding.sessions_of`): the certificate of member ``j`` must name
        ``members[j]``. Only the checked members' ids are kept (``position -> id``), and of a roster
        that passed only its digest: a verifier lives as long as its session.
    indices : sequence of int, optional
        The roster positions whose certificates ``certificates`` holds, distinct, in ``[0, n)``.
    """

    def __init__(
        self,
        authority_public_key: str,
        certificates: Sequence[Mapping[str, Any]] | None,
        *,
        population: str,
        session: bytes,
        task_id: bytes,
        verified: set[tuple[str, str, bytes]] | None = None,
        members: Sequence[str] | None = None,
        indices: Sequence[int] | None = None,
    ) -> None:
        self._trusted = {auth.fingerprint(authority_public_key): authority_public_key}
        self._authority = authority_public_key
        self.certificates: list[auth.Certificate] | None = None
        if certificates is not None:
            self.supply(certificates)
        self.population = population
        self.session = session
        self.task_id = task_id
        self.verified = set() if verified is None else verified
        self.indices = None if indices is None else [int(j) for j in indices]
        # only the checked members' ids are kept (a device's verifier lives as long as its session)
        self._size = None if members is None else len(members)
        self.members: dict[int, str] | None = None
        if members is not None:
            positions = range(len(members)) if self.indices is None else self.indices
            self.members = {j: str(members[j]) for j in positions if 0 <= j < len(members)}
        self._passed: bytes | None = None  # digest of the last roster that passed

    def supply(self, certificates: Sequence[Mapping[str, Any]]) -> None:
        """Give the checked members' certificates (deferred at construction).

        The next :meth:`verify` checks them.

        Raises
        ------
        SecurityError
            If a certificate is malformed.
        """
        self.certificates = [auth.Certificate.from_dict(c) for c in certificates]
        self._passed = None

    @property
    def certified(self) -> bool:
        """Whether a roster passed with its certificates (not only its structure, see ``certificates``)."""
        return self._passed is not None and self.certificates is not None

    def verify(self, roster: SessionRoster) -> None:
        """Raise :class:`~fedstats.errors.SecurityError` unless every checked roster identity is certified.

        A roster equal to one this verifier already passed passes again at once (the device checks it
        before reading its data, its secure-aggregation client again when it reads the setup message).
        """
        digest = _roster_digest(roster)
        if self._passed is not None and hmac.compare_digest(self._passed, digest):
            return
        self._check(roster)
        self._passed = digest

    def _check(self, roster: SessionRoster) -> None:
        if not hmac.compare_digest(roster.session, self.session):
            raise SecurityError("the session id does not follow from the run's agreed seed")
        if roster.task_id != self.task_id:
            raise SecurityError("the roster names another run")
        if self._size is not None and self._size != roster.n:
            raise SecurityError(
                "the session's members or their roster order are not the ones this device "
                "derives from the run's cohort and seed"
            )
        indices = list(range(roster.n)) if self.indices is None else self.indices
        if self.certificates is None:  # deferred: the structure only, until supply()
            if len(set(roster.identities)) != roster.n:
                raise SecurityError("the roster lists one device twice")
            return
        if len(self.certificates) != len(indices):
            raise SecurityError("the roster and its certificates differ in length")
        if len(set(indices)) != len(indices) or any(not 0 <= j < roster.n for j in indices):
            raise SecurityError("the checked members are not distinct roster positions")
        if self.members is not None:
            named = [str(c.body.get("client_id")) for c in self.certificates]
            if named != [self.members.get(j) for j in indices]:
                raise SecurityError(
                    "the session's members or their roster order are not the ones this device "
                    "derives from the run's cohort and seed"
                )
        if len(set(roster.identities)) != roster.n:
            raise SecurityError("the roster lists one device twice")
        ids = set()
        now = time.time()
        authority = self._authority
        for j, cert in zip(indices, self.certificates, strict=True):
            # the whole verified content: the pinned key, the signature and the signed bytes
            seen = (authority, cert.signature, body_bytes(cert.body))
            if seen not in self.verified:
                auth.verify_certificate(cert, self._trusted, now=now)
                if len(self.verified) >= 100_000:  # bounded: a device keeps few sessions' members
                    self.verified.clear()
                self.verified.add(seen)
            elif float(cert.body["not_after"]) < now:
                raise SecurityError("certificate expired")
            if bytes.fromhex(str(cert.body["public_key"])) != roster.identities[j]:
                raise SecurityError("a roster identity does not match its certificate")
            if str(cert.body["population"]) != self.population:
                raise SecurityError("a roster member is certified for another population")
            ids.add(str(cert.body["client_id"]))
        if len(ids) != len(indices):
            raise SecurityError("the roster lists one device twice")


def _roster_digest(roster: SessionRoster) -> bytes:
    """SHA-256 of a roster's every field (what a verifier remembers of the last roster it passed)."""
    return hashlib.sha256(roster.to_bytes()).digest()


_BODIES: dict[tuple[tuple[str, str | int], ...], bytes] = {}
"""``tuple(body.items()) -> canonical bytes`` of the certificate bodies serialized in this process."""
_MAX_BODIES = 8192
_STR_INT = frozenset({str, int})


def body_bytes(body: Mapping[str, Any]) -> bytes:
    """:func:`fedstats.wire.encoding.canonical_bytes` of a certificate body (the key it is verified under).

    A device's certificate body is a flat object of strings and integers, which ``canonical_bytes``
    serializes without the generic encoder's walk. Such a body (string keys, values of exactly
    ``str`` or ``int``) is serialized once per process and remembered by its items (bounded: cleared
    at 8,192 bodies): a device checks its neighbours' certificates at every round, and the devices
    simulated in one process check the same members' ones. Equal items of these types have equal
    canonical bytes (a ``bool`` or ``float`` value, equal to an ``int`` but serialized otherwise, is
    never remembered), and another key order is another entry with the same bytes.

    Parameters
    ----------
    body : mapping

    Returns
    -------
    bytes
        Equal to ``canonical_bytes(dict(body))``.

    Raises
    ------
    DataError
        As :func:`~fedstats.wire.encoding.canonical_bytes`, for a body it cannot encode.
    """
    if type(body) is not dict:
        body = dict(body)
    if not (set(map(type, body.values())) <= _STR_INT and set(map(type, body)) <= {str}):
        return canonical_bytes(body)
    key = tuple(body.items())
    got = _BODIES.get(key)
    if got is None:
        got = canonical_bytes(body)
        if len(_BODIES) >= _MAX_BODIES:
            _BODIES.clear()
        _BODIES[key] = got
    return got


def checked_members(n: int, k: int, session: bytes, index: int, audit: int, rng: Any) -> list[int]:
    """The roster positions whose certificates a device checks: its neighbours and ``audit`` others.

    Parameters
    ----------
    n : int
        The derived session size, >= 2.
    k : int
        The session's degree (:func:`fedstats.secagg.find_parameters`).
    session : bytes
        The session id derived from the run seed (the graph's public randomness).
    index : int
        The device's own position in ``[0, n)``.
    audit : int
        How many members besides its neighbours it checks, >= 0; drawn uniformly with ``rng`` (the
        device's private randomness, so the server cannot know them when it serves the roster).
    rng : numpy.random.Generator or SecureGenerator
        The device's private randomness.

    Returns
    -------
    list of int
        Sorted distinct positions, without ``index``: its ``k`` neighbours
        (:func:`fedstats.secagg.graph.public_neighbors`) and ``min(audit, n - 1 - k)`` others.

    Raises
    ------
    ParameterError
        If ``audit`` is negative (``n``, ``k`` and ``index`` are checked by the graph).
    """
    if int(audit) < 0:
        raise ParameterError("audit", audit, "an integer >= 0")
    neighbours = public_neighbors(n, k, session, [index])[index]
    # the positions that are neither neighbours nor ``index``, increasing (as a sorted set difference)
    rest = np.ones(n, dtype=bool)
    rest[list(neighbours)] = False
    if 0 <= index < n:
        rest[index] = False
    others = np.flatnonzero(rest).astype(np.int64)
    count = min(int(audit), others.size)
    extra = rng.choice(others, size=count, replace=False) if count else np.empty(0, np.int64)
    return sorted({*neighbours, *(int(j) for j in extra)})


def two_hop(n: int, k: int, session: bytes, index: int) -> list[int]:
    """The roster indices two hops from ``index`` that are neither it nor its neighbours, sorted.

    The consistency signers a device counts for a neighbour ``j`` are ``j``'s neighbours
    (:meth:`fedstats.secagg.SecAggClient.signature_threshold`), so it holds the keys of its two-hop
    neighbourhood. The graph is the public Harary graph of the session id
    (:func:`fedstats.secagg.graph.public_two_hop`: O(n log n) once per session, then O(k)).
    """
    return sorted(public_two_hop(n, k, session, index))


def committed_roster(
    keys: Mapping[str, bytes], members: Sequence[str], session: bytes, task_id: bytes
) -> SessionRoster:
    """A session's roster as the run committed it: its members' identity keys in the derived order.

    The run's roster (every member's identity key) is part of the commitment list each member checks and
    reveals against (:func:`fedstats.wire.seeding.commitments_digest` with the keys), so it is fixed,
    and the same for every member, before any member reveals; each session's roster follows from it and
    the session's derived members. Nobody signs it (the roster's signature field is zero): the
    certificates of the members a device checks stand for the authority's signature
    (:class:`CertificateRosterVerifier`).

    Parameters
    ----------
    keys : mapping
        ``client_id -> identity key`` (32 bytes) from the verified seed transcript.
    members : sequence of str
        The session's members in roster order (:func:`fedstats.wire.seeding.sessions_of`).
    session : bytes
        The session id the run seed gives (:func:`fedstats.wire.seeding.session_id`).
    task_id : bytes
        The run's task id (:func:`fedstats.wire.seeding.task_id_bytes`).

    Raises
    ------
    SecurityError
        If a member has no key in the run's roster.
    """
    try:
        ids = tuple(keys[str(m)] for m in members)
    except KeyError as exc:
        raise SecurityError(f"session member {exc.args[0]!r} is not in the run's roster") from None
    return SessionRoster(task_id, session, ids, bytes(SIGNATURE_BYTES))


def with_committed_roster(setup: SetupMessage, roster: SessionRoster) -> SetupMessage:
    """The server's setup message with the committed roster in it (what the device's client checks).

    The server sends setup messages without the roster (the device derives it, :func:`committed_roster`);
    one that carries a roster must carry exactly the committed one.

    Raises
    ------
    SecurityError
        If the setup message carries another roster (another key, a member left out or added, another
        order or session).
    """
    got = roster.to_bytes()
    if setup.roster and not hmac.compare_digest(setup.roster, got):
        raise SecurityError(
            "the server's session roster is not the one committed in the run's seed transcript"
        )
    return dataclasses.replace(setup, roster=got)
