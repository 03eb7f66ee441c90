"""A device's side of a secure run seeded by its cohort tree (``docs/deploy.md``, "Secure aggregation").

For a run whose cohort is above the server's ``cohort_tree_above``, the server sends the tree form
instead of the commitment list (:mod:`fedstats.wire.tree_seeding` encodes and checks every message; a
device takes whichever form the server sends, both being sound). :class:`TreeRuns`, a mixin of
:class:`fedstats.client.secure.SecureRuns`, holds the device's steps:

1. *Check-in*: the answer to the held check-in (or ``GET .../seed``) carries ``"tree"``: the device
   checks its own leaf (:func:`~fedstats.wire.tree_seeding.check_own_leaf`: its id, commitment, key and
   slots, the proven slot start, ``n`` within its task's cohort size) and keeps the head and its
   position (:attr:`SecureState.head`, :attr:`SecureState.position`); otherwise it reveals nothing.
2. *Seed committee*: a device at one of the head's committee positions reveals its value signed by its
   identity key over the head (``POST .../reveal``); every member reads the committee's leaves,
   certificates, values and signatures (the held reveal's answer, or ``GET .../seed?part=committee``),
   checks them (:func:`~fedstats.wire.tree_seeding.verify_committee`, each certificate by
   :func:`check_certificate`) and takes the seed it computes; the server's stated seed must be it.
3. *Sessions*: a round's participants follow from its client range and range proof, the device's
   session, size and roster index from the seed and its position alone (:meth:`TreeRuns._tree_seat`).
4. *Roster*: the session's roster is bound (:class:`~fedstats.secagg.identity.SessionRoster` with
   :func:`~fedstats.wire.tree_seeding.session_binding`); the device's client holds its own key, and
   :class:`TreeRosterVerifier` accepts it.
5. *Neighbourhood*: with its key advertisement the device names its checked members (neighbours and
   audited, ``members=``) and its two-hop neighbours (``also=``); the answer's leaves are verified
   against the head, the checked members' certificates against their leaves, and only then are the
   keys held (:meth:`~fedstats.secagg.SecAggClient.hold_keys`) and the data read
   (:meth:`TreeRuns._tree_certify`), before the device's shares.

Every answer is read up to a size its task's cohort size and the session's degree allow
(:func:`~fedstats.wire.tree_seeding.committee_answer_bytes`,
:func:`~fedstats.wire.tree_seeding.leaves_answer_bytes`).
"""

from __future__ import annotations

import hmac
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedstats.client.policy import Policy
from fedstats.client.roster import body_bytes, checked_members, two_hop, with_committed_roster
from fedstats.client.secure_members import (
    AUDIT_MEMBERS,
    SIGNATURES,
    SecureState,
    cohort_cap,
    ring_input,
)
from fedstats.errors import FedstatsError, ParameterError, SecurityError
from fedstats.secagg import ClientConfig, SecAggClient, SecAggParameters
from fedstats.secagg.collusion import (
    meets_colluder_fraction,
    session_colluders,
    session_parameters,
)
from fedstats.secagg.identity import SIGNATURE_BYTES, ClientIdentity, SessionRoster
from fedstats.secagg.messages import (
    KeyBroadcast,
    SetupMessage,
    ShareBroadcast,
    SurvivorSet,
    UnmaskRequest,
    decode,
    max_message_bytes,
)
from fedstats.wire import auth, seeding
from fedstats.wire.cohort_sessions import Seat, committee_positions, members_at, session_of
from fedstats.wire.cohort_tree import Leaf
from fedstats.wire.tasks import min_session_size
from fedstats.wire.tree_seeding import (
    CARRIED_WORK_BYTES,
    CERTIFICATE_BYTES,
    TREE,
    check_own_leaf,
    committee_answer_bytes,
    leaf_answer_bytes,
    leaves_answer_bytes,
    participants,
    session_binding,
    signed_reveal,
    verify_committee,
    verify_leaves,
)

__all__ = [
    "ACK_BYTES",
    "DOWN_MESSAGES",
    "TRANSCRIPT_BYTES",
    "TreePending",
    "TreeRosterVerifier",
    "TreeRuns",
    "bound_roster",
    "check_certificate",
    "named_members",
    "seed_answer_bytes",
]

TRANSCRIPT_BYTES = 512
"""The most bytes of seed transcript a device reads per possible member (the task's cohort size)."""
ACK_BYTES = 4096
"""The most bytes of a JSON acknowledgement besides what it carries."""
DOWN_MESSAGES = (SetupMessage, KeyBroadcast, ShareBroadcast, SurvivorSet, UnmaskRequest)
"""The secure-aggregation messages a device receives (their largest size bounds a session's reads)."""


def seed_answer_bytes(cap: int | None) -> int | None:
    """The most bytes a device reads of ``GET .../seed`` or a held check-in, for a cohort of ``cap``.

    The larger of the list form (:data:`TRANSCRIPT_BYTES` per member) and the tree form (the own leaf
    and, once the seed is fixed, the committee). None: no cohort size known (no limit).
    """
    if cap is None:
        return None
    tree = leaf_answer_bytes(cap) + committee_answer_bytes(cap)
    return max(TRANSCRIPT_BYTES * cap, tree) + ACK_BYTES


def check_certificate(
    cert: Any,
    leaf: Leaf,
    *,
    authority: str,
    population: str,
    verified: set[tuple[str, str, bytes]],
    now: float | None = None,
) -> None:
    """Check that ``cert`` certifies the member of a verified cohort tree leaf.

    The authority's signature is checked once per process (``verified`` holds the whole verified
    content, as :class:`fedstats.client.roster.CertificateRosterVerifier` keeps it); expiry, role,
    population, client id and key on every use.

    Parameters
    ----------
    cert : object
        The certificate's JSON form (``{"body", "signature"}``).
    leaf : Leaf
        The member's leaf, verified against the run's head.
    authority : str
        The pinned enrollment authority's Ed25519 public key (hex).
    population : str
        The task's population.
    verified : set
        ``(authority key, signature, canonical body)`` of certificates already checked (bounded:
        cleared at 100,000).
    now : float, optional
        Unix time, seconds (default: the clock).

    Raises
    ------
    SecurityError
        If the certificate is malformed, not a device's, not signed by the pinned authority, expired,
        of another population, or names another client id or key than the leaf.
    """
    now = time.time() if now is None else now
    try:
        c = auth.Certificate.from_dict(cert)
        seen = (authority, c.signature, body_bytes(c.body))
        if seen not in verified:
            auth.verify_certificate(c, {auth.fingerprint(authority): authority}, now=now)
            if len(verified) >= 100_000:
                verified.clear()
            verified.add(seen)
        elif float(c.body["not_after"]) < now:
            raise SecurityError("certificate expired")
        population_ok = str(c.body["population"]) == population
        named = (str(c.body["client_id"]), bytes.fromhex(str(c.body["public_key"])))
    except (FedstatsError, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, SecurityError):
            raise
        raise SecurityError(f"a member's certificate is malformed: {exc}") from None
    if not population_ok:
        raise SecurityError("a member is certified for another population")
    if named != (leaf.client_id, leaf.key):
        raise SecurityError("a member's certificate names another client id or key than its leaf")


def bound_roster(
    task_id: bytes, session: bytes, n: int, index: int, key: bytes, binding: bytes
) -> SessionRoster:
    """The device's roster of a tree run's session: bound, holding only its own key at ``index``.

    The server's roster holds every member's key under the same binding; the transcripts agree
    (:meth:`~fedstats.secagg.identity.SessionRoster.digest` covers the binding, not the keys).
    """
    keys = [b""] * n
    if 0 <= index < n:
        keys[index] = bytes(key)
    return SessionRoster(task_id, session, tuple(keys), bytes(SIGNATURE_BYTES), binding)


class TreeRosterVerifier:
    """A device's verifier of a tree run's bound session roster, and of its checked members' leaves.

    :meth:`verify` (called by the device and by its :class:`~fedstats.secagg.SecAggClient` on the setup
    message) accepts only the bound roster of the session the device derived: its task id, session id,
    size and binding, the device's own key at its index, and distinct keys among those held.
    :meth:`certify` checks the certificates of the checked members against their verified leaves.

    Parameters
    ----------
    authority_public_key : str
        The pinned authority's key (hex).
    population : str
        The task's population.
    session, task_id, binding : bytes
        The session id the seed gives, the run's task id and the session's binding
        (:func:`~fedstats.wire.tree_seeding.session_binding`).
    n, index : int
        The derived session size and the device's roster index.
    client_id : str
        The device's id (no checked member may carry it).
    key : bytes
        The device's raw identity key.
    verified : set
        Certificates already checked in this process (see :func:`check_certificate`).
    """

    def __init__(
        self,
        authority_public_key: str,
        *,
        population: str,
        session: bytes,
        task_id: bytes,
        binding: bytes,
        n: int,
        index: int,
        client_id: str,
        key: bytes,
        verified: set[tuple[str, str, bytes]],
    ) -> None:
        self.authority = authority_public_key
        self.population = population
        self.session, self.task_id, self.binding = session, task_id, binding
        self.n, self.index, self.client_id, self.key = int(n), int(index), client_id, bytes(key)
        self.verified = verified
        self.certified = False

    def verify(self, roster: SessionRoster) -> None:
        """Raise SecurityError unless ``roster`` is the bound roster of the derived session."""
        if not roster.bound or not hmac.compare_digest(roster.binding, self.binding):
            raise SecurityError(
                "the session roster is not bound to the session this device derives"
            )
        if not hmac.compare_digest(roster.session, self.session):
            raise SecurityError("the session id does not follow from the run's agreed seed")
        if roster.task_id != self.task_id or roster.n != self.n:
            raise SecurityError("the roster names another run or another session size")
        if roster.identities[self.index] != self.key:
            raise SecurityError("the roster does not hold this device's key at its index")
        held = [k for k in roster.identities if k]
        if len(set(held)) != len(held):
            raise SecurityError("the roster lists one identity key twice")

    def certify(self, leaves: Sequence[Leaf], certificates: Any) -> None:
        """Check each checked member's certificate against its verified leaf (in the order named).

        Raises
        ------
        SecurityError
            If the certificates are not one per leaf, one does not certify its leaf's member
            (:func:`check_certificate`), or two checked members (or one and this device) share an id.
        """
        if not isinstance(certificates, list) or len(certificates) != len(leaves):
            raise SecurityError(
                f"the answer holds {len(certificates) if isinstance(certificates, list) else '?'} "
                f"certificate(s); this device asked for {len(leaves)}"
            )
        now = time.time()
        for leaf, cert in zip(leaves, certificates, strict=True):
            check_certificate(
                cert,
                leaf,
                authority=self.authority,
                population=self.population,
                verified=self.verified,
                now=now,
            )
        ids = {leaf.client_id for leaf in leaves}
        if len(ids) != len(leaves) or self.client_id in ids:
            raise SecurityError("the session lists one device twice")
        self.certified = True


class TreePending(NamedTuple):
    """A tree run's joined session whose neighbourhood is not verified yet (before its shares).

    ``checked`` are the roster indices whose certificates the device checks (``members=``), ``also``
    those whose keys it only holds (``also=``); ``positions`` maps each to its tree position;
    ``leaves`` is the tree's leaf count (the size bound of the answer).
    """

    verifier: TreeRosterVerifier
    roster: SessionRoster
    checked: list[int]
    rnd: Mapping[str, Any]
    also: list[int]
    positions: dict[int, int]
    leaves: int


def named_members(pending: Any) -> tuple[dict[str, str], int]:
    """The query naming a session's checked members, and the most bytes its answer may add.

    ``pending``: a list-form session's ``(verifier, roster, checked, round)`` or a :class:`TreePending`.
    """
    checked = pending[2]
    params = {"members": ",".join(str(j) for j in checked)}
    if not isinstance(pending, TreePending):
        return params, CERTIFICATE_BYTES * max(1, len(checked))
    if pending.also:
        params["also"] = ",".join(str(j) for j in pending.also)
    count = len(checked) + len(pending.also)
    return params, leaves_answer_bytes(count, len(checked), pending.leaves)


class TreeRuns:
    """The tree-seeded part of :class:`fedstats.client.secure.SecureRuns` (see the module).

    A mixin: it uses the device's signed transport, identity, policy, randomness and encoder path.
    """

    client_id: str
    authority_public_key: str | None
    secure: dict[str, SecureState]
    verified_certificates: set[tuple[str, str, bytes]]
    joined: dict[str, dict[str, int]]
    policy: Any
    randomness: Any
    log: Callable[[str], None]
    _key: Ed25519PrivateKey
    _timeout: float
    _send: Callable[..., Any]
    _carry_work: Callable[[Any], None]
    _encode: Callable[[Mapping[str, Any]], list[int]]

    # -- 1. check-in and 2. the seed committee
    def _tree_reveal(self, run_id: str, state: SecureState, answer: Any, wait: float = 0.0) -> None:
        """Check the own leaf (once), then reveal (committee) or wait for the committee; check it.

        ``answer``: the check-in's or ``GET .../seed``'s answer carrying ``"tree"`` (None once the
        own leaf was checked). A committee member sends ``POST .../reveal`` with its signed value;
        any other member asks ``GET .../seed?part=committee``; both held up to ``wait`` s. A committee
        answer with a seed is checked at once (:meth:`_tree_seed`).

        Raises
        ------
        SecurityError
            If the own leaf, or the committee answer, does not check: the run is refused.
        """
        if state.head is None:
            slots = self.joined.get(run_id)
            cap = cohort_cap(state)
            if slots is None or cap is None or not isinstance(answer, Mapping):
                raise SecurityError(
                    "this device holds no check-in slots or cohort size for the run"
                )
            start, count = int(slots["slot_start"]), int(slots["slot_count"])
            head, position = check_own_leaf(
                answer.get(TREE),
                client_id=self.client_id,
                commitment=state.commitment(run_id, self.client_id),
                key=self._key.public_key().public_bytes_raw(),
                slot_start=start,
                slot_count=count,
                max_members=cap,
            )
            state.head, state.position, state.slots = head, position, (start, count)
            state.seen, state.withheld = head.digest().hex(), frozenset()
            if answer.get("seed") is not None:  # the seed is fixed: the committee came with it
                state.revealed = answer
        if state.verified:
            return
        if state.revealed is None:
            state.revealed = self._committee(run_id, state, wait)
        if isinstance(state.revealed, Mapping) and state.revealed.get("seed") is not None:
            self._tree_seed(run_id, state)

    def _committee(self, run_id: str, state: SecureState, wait: float) -> Any:
        """Reveal (a committee member) or ask for the committee; the answer, if it carries the seed."""
        head, position = state.head, state.position
        assert head is not None and position is not None
        limit = committee_answer_bytes(cohort_cap(state) or head.n) + ACK_BYTES
        held = {"wait": f"{wait:.3f}"} if wait > 0 else {}
        timeout = self._timeout + wait if wait > 0 else None
        # held, the answer may also carry the next work list (the first round), within its bound
        more = {"limit": limit + CARRIED_WORK_BYTES, "headers": {"Fedstats-Next-Work": "1"}}
        asks: dict[str, Any] = more if held else {"limit": limit}
        if position in committee_positions(head):
            body = signed_reveal(run_id, head, position, state.contribution, self._key.sign)
            r = self._send(
                "POST",
                f"/v1/client/runs/{run_id}/reveal",
                json.dumps(body).encode(),
                content_type="application/json",
                params=held or None,
                timeout=timeout,
                **asks,
            )
        else:
            r = self._send(
                "GET",
                f"/v1/client/runs/{run_id}/seed",
                b"",
                params={"part": "committee", **held},
                timeout=timeout,
                **asks,
            )
        self._carry_work(r)
        try:
            got = r.json()
        except ValueError:
            return None
        if isinstance(got, Mapping) and "revealed" in got:
            got = got["revealed"]
        return got if isinstance(got, Mapping) and got.get("seed") is not None else None

    def _tree_seed(self, run_id: str, state: SecureState) -> bytes:
        """The run's seed from its verified committee (once); the stated seed must be the computed one.

        Raises
        ------
        SecurityError
            If the seed is not fixed, the committee answer does not verify, or the server's stated
            seed is not the one the committee's values give.
        """
        if state.seed is not None and state.verified:
            return state.seed
        head = state.head
        if head is None or state.seen is None:
            raise SecurityError("this device did not check its leaf: it cannot check the run seed")
        got, state.revealed = state.revealed, None  # used once: one that fails is fetched again
        if got is None:
            r = self._send(
                "GET",
                f"/v1/client/runs/{run_id}/seed",
                b"",
                limit=committee_answer_bytes(cohort_cap(state) or head.n) + ACK_BYTES,
                params={"part": "committee"},
            )
            try:
                got = r.json()
            except ValueError:
                raise SecurityError("the run's committee answer is not JSON") from None
        if not isinstance(got, Mapping) or not isinstance(got.get("seed"), str):
            raise SecurityError("the run's seed is not fixed: no committee answer")
        assert state.task is not None
        population, authority = str(state.task["privacy"]["population"]), self.authority_public_key
        if authority is None:
            raise SecurityError("this device pins no enrollment authority")

        def check(leaf: Leaf, cert: Any) -> None:
            check_certificate(
                cert,
                leaf,
                authority=str(authority),
                population=population,
                verified=self.verified_certificates,
            )

        seed = verify_committee(run_id, head, got.get("committee"), check)
        try:
            stated = bytes.fromhex(got["seed"])
        except ValueError:
            raise SecurityError("the run's stated seed is not hex") from None
        if not hmac.compare_digest(stated, seed):
            raise SecurityError("the server's seed is not the one the committee's reveals give")
        state.seed, state.verified, state.withheld = seed, True, frozenset()
        return seed

    # -- 3. sessions, 4. rosters
    def _tree_seat(
        self, rnd: Mapping[str, Any], state: SecureState, seed: bytes
    ) -> tuple[Seat, int, int, int, int]:
        """The device's seat in the round's sessions: ``(seat, p_lo, p_hi, max_session, minimum)``.

        Raises
        ------
        SecurityError
            If the round names other records or ``n_clients`` than the tree's, the range proof does not
            prove the participants, the server's session (number, size, index) is not the derived one,
            the device joined a session of the round already, or the session is below its floor.
        ProtocolAbortError
            If the participants cannot form sessions of the task's ``min_session_size``.
        """
        index, info = int(rnd["round"]), rnd["secure"]
        head, position, slots = state.head, state.position, state.slots
        assert head is not None and position is not None and slots is not None
        max_session, minimum = self._session_limits(state, index)
        lo, hi = (int(x) for x in rnd["client_range"])
        start, count = slots
        a = max(start, lo)
        if [int(x) for x in rnd["records"]] != [a, max(a, min(start + count, hi))] or int(
            rnd["slot_start"]
        ) != start:
            raise SecurityError("the round names other records of this device than its slots")
        if int(rnd["n_clients"]) != head.total_slots:
            raise SecurityError("the round's n_clients is not the cohort tree's slot total")
        p_lo, p_hi = participants(head, lo, hi, info.get("range_proof"))
        if not p_lo <= position < p_hi:
            raise SecurityError(f"this device is no participant of round {index} it derives")
        try:
            seat = session_of(seed, p_lo, p_hi, max_session, minimum, position)
        except ParameterError as exc:
            raise SecurityError(str(exc)) from None
        got = (int(info["session"]), int(info["n"]), int(info["index"]))
        if got != (seat.number, seat.size, seat.roster_index):
            raise SecurityError(
                f"the server's session (number, n, index) is {got}; this device derives "
                f"{(seat.number, seat.size, seat.roster_index)}"
            )
        floor = int(getattr(self.policy, "min_session_size", Policy.min_session_size))
        if seat.size < max(2, floor):
            raise SecurityError(
                f"a secure session of {seat.size} is below this device's policy floor "
                f"min_session_size={floor}"
            )
        return seat, p_lo, p_hi, max_session, minimum

    # -- what both forms' joins share (the list form's is :meth:`SecureRuns._join_session`)
    def _session_limits(self, state: SecureState, index: int) -> tuple[int, int]:
        """The task's ``(max_session, min_session_size)`` for a secure round the device may join.

        Raises
        ------
        SecurityError
            If the device did not accept a secure task for the run, or already joined a session of
            round ``index`` (it joins at most one per round).
        """
        if state.task is None or state.task.get("secure_aggregation") is None:
            raise SecurityError(
                "a secure round of a run whose secure task this device did not accept"
            )
        if index in state.rounds:
            raise SecurityError(
                f"this device already joined session {state.rounds[index]} of round {index}: it joins "
                "at most one session per round"
            )
        opts = state.task["secure_aggregation"]
        return int(opts["max_session"]), min_session_size(opts)

    def _session_parameters(self, n: int) -> SecAggParameters:
        """The parameters of a derived session of ``n``, refused below the policy's colluder fraction.

        ``n`` is derived by the device: the parameters and every size limit follow from it, never
        from the server.

        Raises
        ------
        SecurityError
            If fewer than ``Policy.min_colluder_fraction`` of the session could isolate one member.
        """
        params = session_parameters(n)
        fraction = float(
            getattr(self.policy, "min_colluder_fraction", Policy.min_colluder_fraction)
        )
        if not meets_colluder_fraction(params, fraction):
            raise SecurityError(
                f"a secure session of {n} (k={params.k}, t={params.t}) is isolated by "
                f"{session_colluders(params)} colluders; this device's policy min_colluder_fraction="
                f"{fraction:.3g} needs at least {math.ceil(fraction * n - 1e-9)}"
            )
        return params

    def _setup_message(
        self,
        state: SecureState,
        rnd: Mapping[str, Any],
        params: SecAggParameters,
        i: int,
        down: bytes | None,
    ) -> SetupMessage:
        """The session's setup message (``down``, else fetched), read within the derived session's limit.

        Keeps the limit of every message of the session (``state.limits``).

        Raises
        ------
        SecurityError, DataError
            If it is oversized, malformed, or not for this device's derived index and size.
        """
        run_id, index, number = str(rnd["run_id"]), int(rnd["round"]), int(rnd["secure"]["session"])
        limit = max(
            max_message_bytes(
                cls, n=params.n, k=params.k, length=int(rnd["dim"]), bits=seeding.BITS
            )
            for cls in DOWN_MESSAGES
        )
        state.limits[(index, number)] = limit
        if down is None:  # the roster first: it is fixed before the device names whom it checks
            down = self._send(
                "GET",
                f"/v1/client/runs/{run_id}/rounds/{index}/secure/{number}/0",
                b"",
                limit=limit,
            ).content
        setup = decode(down, expect=SetupMessage, max_bytes=limit)
        assert isinstance(setup, SetupMessage)
        if (setup.client, setup.n) != (i, params.n):
            raise SecurityError("the setup message is not for this device's derived index and size")
        return setup

    def _client_config(
        self,
        params: SecAggParameters,
        length: int,
        verifier: Any,
        task_id: bytes,
        setup: SetupMessage,
    ) -> ClientConfig:
        """The device's client configuration, and the server's setup parameters checked against it.

        Raises
        ------
        SecurityError
            If the setup message's (k, t, bits, length, min_survivors, threat model) are not the
            device's for the derived ``n`` (checked again by the client; here before the data is read).
        """
        config = ClientConfig.from_parameters(
            params,
            bits=seeding.BITS,
            length=length,
            identity=ClientIdentity(self._key),
            verifier=verifier,
            task_id=task_id,
        )
        got = (setup.k, setup.t, setup.bits, setup.length, setup.min_survivors, setup.threat_model)
        want = (config.k, config.t, config.bits, length, config.min_survivors, config.threat_model)
        if got != want:
            raise SecurityError(
                f"the server's session parameters (k, t, bits, length, min_survivors, threat model) "
                f"= {got}; this device's for n={params.n} are {want}"
            )
        return config

    def _tree_join(
        self, rnd: Mapping[str, Any], state: SecureState, down: bytes | None
    ) -> tuple[Any, bytes]:
        """Derive and check a tree run's session and its bound roster; build the client (no data).

        Returns the device's :class:`~fedstats.secagg.SecAggClient` and the server's setup message
        with the bound roster in it. The neighbourhood is verified later (:meth:`_tree_certify`).
        """
        run_id, index = str(rnd["run_id"]), int(rnd["round"])
        seed = self._tree_seed(run_id, state)
        seat, p_lo, p_hi, max_session, minimum = self._tree_seat(rnd, state, seed)
        n, i, number = seat.size, seat.roster_index, seat.number
        params = self._session_parameters(n)
        setup = self._setup_message(state, rnd, params, i, down)
        assert state.head is not None
        task_id, session = seeding.task_id_bytes(run_id), seeding.session_id(seed, index, number)
        args = (run_id, seed, state.head, index, number, p_lo, p_hi, max_session, n)
        own = self._key.public_key().public_bytes_raw()
        roster = bound_roster(task_id, session, n, i, own, session_binding(*args))
        setup = with_committed_roster(setup, roster)
        rng = self.randomness.generator("roster-audit", run_id, index)
        checked = checked_members(n, params.k, session, i, AUDIT_MEMBERS, rng)
        also = sorted(set(two_hop(n, params.k, session, i)) - set(checked))
        named = checked + also
        at = members_at(seed, p_lo, p_hi, max_session, minimum, number, named)
        positions = dict(zip(named, at, strict=True))
        assert state.task is not None
        verifier = TreeRosterVerifier(
            str(self.authority_public_key),
            population=str(state.task["privacy"]["population"]),
            session=session,
            task_id=task_id,
            binding=roster.binding,
            n=n,
            index=i,
            client_id=self.client_id,
            key=own,
            verified=self.verified_certificates,
        )
        config = self._client_config(params, int(rnd["dim"]), verifier, task_id, setup)
        verifier.verify(roster)
        state.rounds[index] = number  # one session per round: any other is refused from now on
        client = SecAggClient(i, None, config, cache=SIGNATURES)  # the data after _tree_certify
        state.sessions[(index, number)] = client
        state.uncertified[(index, number)] = TreePending(
            verifier, roster, checked, rnd, also, positions, state.head.n
        )
        return client, setup.to_bytes()

    # -- 5. the neighbourhood
    def _tree_certify(
        self,
        run_id: str,
        index: int,
        number: int,
        state: SecureState,
        pending: TreePending,
        answer: Any,
    ) -> None:
        """Verify the neighbourhood's leaves and certificates, hold the keys, then give the data.

        ``answer``: the leaves object the answer to the advertisement carried
        (:func:`~fedstats.wire.tree_seeding.leaves_answer`), or None (fetched now with
        ``GET .../certificates?members=..&also=..``).

        Raises
        ------
        SecurityError
            If the leaves are not the named positions' in the run's tree, or a checked member's
            certificate does not certify its leaf.
        """
        assert state.head is not None
        if answer is None:
            params, limit = named_members(pending)
            r = self._send(
                "GET",
                f"/v1/client/runs/{run_id}/rounds/{index}/secure/{number}/certificates",
                b"",
                limit=limit,
                params=params,
            )
            try:
                answer = r.json()
            except ValueError:
                raise SecurityError("the session's leaves answer is not JSON") from None
        named = pending.checked + pending.also
        leaves = verify_leaves(state.head, answer, [pending.positions[j] for j in named])
        checked = [leaves[pending.positions[j]] for j in pending.checked]
        pending.verifier.certify(checked, answer.get("certificates"))
        client = state.sessions.get((index, number))
        if client is None:  # the session was left meanwhile
            raise SecurityError(f"this device left session {number} of round {index}")
        client.hold_keys({j: leaves[pending.positions[j]].key for j in named})
        del state.uncertified[(index, number)]
        self._give_input(state, index, number, pending.rnd)

    def _give_input(
        self, state: SecureState, index: int, number: int, rnd: Mapping[str, Any]
    ) -> None:
        """Encode the round (once per round: it is charged once) and give it to the session's client."""
        vector = state.encoded.get(index)
        if vector is None:
            vector = self._encode(rnd)
            state.encoded[index] = vector
        state.sessions[(index, number)].provide_input(ring_input(vector))
