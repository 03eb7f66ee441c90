"""A device's side of secure runs: its seed contribution, the sessions it derives, roster checks, stages.

The device trusts only its own configuration and what it can verify: the enrollment authority's public key
(pinned in its identity file), the task it accepted (its ``secure_aggregation`` options), its
:class:`~fedstats.client.Policy` (``min_session_size``, the smallest session it joins, default 10), and the
run's seed transcript, which it verifies itself (:mod:`fedstats.wire.seeding`). From these alone it
derives every secure session:

* **the cohort**: before revealing, the device checks its own entry in the commitment list (its
  commitment and the slots it was given at check-in) and that the members' slots are disjoint and
  contiguous from 0; the digest it reveals with covers every member's slots, so the verified transcript
  fixes the cohort (:attr:`SecureState.cohort`);
* **the session**: for each secure round it computes :func:`fedstats.wire.seeding.sessions_of` from the
  cohort, the seed and the round's client range; the server's session number, its member list (in roster
  order), the device's index and the size ``n`` must be the derived ones;
* **the parameters** for that ``n`` (:func:`fedstats.secagg.collusion.session_parameters`: the complete
  graph up to 64 members), computed only once ``n`` has passed these checks, never taken from the server,
  and refused when fewer than its policy's ``min_colluder_fraction`` of the session could isolate one
  member (:func:`fedstats.secagg.collusion.meets_colluder_fraction`); every message the server sends is read at most up to
  the size the protocol allows for the derived session (at most 4 KB of certificate per member asked
  for), before parsing.

**The roster, checked at the cost of the neighbourhood.** The roster (the setup message) lists the ``n``
members' identity keys in the derived order under the session id the run seed gives. The device checks
that its keys are distinct and its own is at its index, then verifies the enrollment certificates of
only :func:`checked_members`: its ``k`` neighbours (computed from the seed-derived session id, so the
server cannot choose them; ``k`` grows as ``log n``) and :data:`AUDIT_MEMBERS` others drawn with its
private randomness after the roster is fixed, i.e. ``k + 16`` signature checks (remembered across
rounds), not ``n``. It names them with its key advertisement (stage 0: fresh public keys signed by its
identity, nothing secret) and the server's answer carries their certificates, with the next message
or in the acknowledgement (``POST .../0?members=``; fetched with ``GET .../certificates`` otherwise); the
device checks them at once (:meth:`SecureRuns._certify`), before it reads its data and before its shares,
the first secret it sends.
Why that is sound against a malicious server (it may add uncertified members, show devices different
rosters, drop messages):

1. *Shares go only to certified devices.* A device encrypts its Shamir shares (of its self-mask seed and
   its mask key) to its neighbours' signed keys, whose identities it verified. An uncertified (fake)
   member never holds a share of an honest device that proceeds, so fakes cannot help the server reach
   the threshold ``t`` of any honest device's shares: only the corrupt *enrolled* neighbours count, as
   with a full check.
2. *Neighbours that exchange shares saw the same roster.* The roster transcript (SHA-256 of the whole
   roster: task id, session id, every identity key, :func:`fedstats.secagg.crypto.roster_transcript`) is
   the HKDF salt of each pairwise share key and the associated data of each share ciphertext. A share
   from neighbour ``j`` authenticates only if ``j`` used the same transcript, hence (collision resistance)
   the same roster: the first message that needs both devices' keys confirms the roster, with no extra
   signature. Two devices given different rosters abort before their masked input (or, if the server
   withholds those shares, never hold or use each other's: a dropped edge, which a server can always
   cause).
3. *The consistency check counts only certified signers.* A device reveals something about neighbour
   ``j`` only if it holds ``j``'s shares (so by 2 they share a roster) and ``t`` members of ``N(j)``
   signed the same survivor set under that roster's keys. An honest ``j`` verified the certificates of
   all of ``N(j)`` before sending its shares, so those keys are certified and the counting argument of
   :meth:`fedstats.secagg.SecAggClient.signature_threshold` holds with the corrupt enrolled devices alone;
   about a corrupt ``j`` there is nothing to protect.
4. *What fakes still buy.* ``m`` fakes that no honest device checks can sit in the survivor set, so the
   sum the server learns covers at least ``min_survivors - c - m`` honest inputs (``c`` corrupt enrolled
   members) rather than ``min_survivors - c``. Every honest device that has a fake among its ``k + 16``
   checked members leaves, and those are a uniform sample (the graph's randomness is fixed after the
   cohort; the audit is private), so a victim proceeds with probability at most
   ``(1 - m / (n - 1))^(k + 16)``: for even odds ``m <= (n - 1) ln 2 / (k + 16)``, 6 at ``n = 1000``
   (``k = 90``); the sum then covers at least 894 - c honest inputs instead of 900 - c.

Against a malicious server it refuses, and drops out of the session without sending anything (at most its
public key advertisement, for a certificate check; always before encoding its data or charging its
budget), when:

* the session is not the one it derives itself into (another number, other members, another order,
  another index or size), or is smaller than the task's ``min_session_size`` or its policy's floor;
* it already joined a session of that round (it joins at most one per round, and encodes each round once);
* the roster lists one of the members it checks without a valid certificate of the pinned authority for
  the task's population (or under another key), a key twice, or the certificate list or a message is
  oversized;
* the session id is not the one the run's seed gives (no grinding of the communication graph);
* any message fails the checks of :class:`fedstats.secagg.SecAggClient` (wrong session, forged keys or
  signatures, too small a survivor set, an unmasking request that would reveal both of a device's masks).

A run whose server sends the *tree form* (its cohort tree's head and the device's own leaf instead of the
list, for cohorts above the server's ``cohort_tree_above``) is seeded by a committee and joined with a
bound roster: :mod:`fedstats.client.secure_tree`, which the hooks here dispatch to.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedstats.client.policy import Policy
from fedstats.client.roster import (
    CertificateRosterVerifier,
    body_bytes,
    checked_members,
    committed_roster,
    with_committed_roster,
)
from fedstats.client.secure_members import (
    AUDIT_MEMBERS,
    SIGNATURES,
    VERIFIED_CERTIFICATES,
    PackedMembers,
    SecureState,
    cohort_cap,
)
from fedstats.client.secure_tree import ACK_BYTES as _ACK_BYTES
from fedstats.client.secure_tree import (
    TRANSCRIPT_BYTES,
    TreePending,
    TreeRuns,
    named_members,
    seed_answer_bytes,
)
from fedstats.errors import FedstatsError, SecurityError
from fedstats.secagg.collusion import (
    session_parameters,
)
from fedstats.wire import seeding
from fedstats.wire.tree_seeding import CARRIED_WORK_BYTES

__all__ = [
    "AUDIT_MEMBERS",
    "SIGNATURES",
    "VERIFIED_CERTIFICATES",
    "CertificateRosterVerifier",
    "PackedMembers",
    "SecureRuns",
    "SecureState",
    "body_bytes",
    "checked_members",
    "committed_roster",
    "with_committed_roster",
]


CERTIFICATE_BYTES = 4096
"""The most bytes of certificate list a device reads per member whose certificate it asked for."""
CERTIFICATES_HEADER = "fedstats-certificates"
"""An answer carrying certificates before the stage message: the length of their JSON, bytes."""
_WORK_KEYS = ("offers", "rounds")  # what a work list must hold to be handled


class SecureRuns(TreeRuns):
    """The secure-run part of :class:`fedstats.client.Device`.

    A mixin: it uses the device's signed transport (``_request``), identity, policy, check-in slots
    (``joined``), encoder path (``_encode``) and log, declared here for type checking.
    """

    client_id: str
    authority_public_key: str | None
    secure: dict[str, SecureState]
    verified_certificates: set[tuple[str, str, bytes]]
    refused: dict[str, str]
    joined: dict[str, dict[str, int]]
    policy: Any
    randomness: Any
    log: Callable[[str], None]
    _key: Ed25519PrivateKey
    _timeout: float
    _http: httpx.Client
    _request: Callable[..., Any]
    _send: Callable[..., Any]
    _encode: Callable[[Mapping[str, Any]], list[int]]
    _refuse: Callable[..., None]
    _carried: tuple[dict[str, Any], str | None] | None

    # -- the seed
    def _secure_checkin(
        self, run_id: str, body: Mapping[str, Any], state: SecureState, wait: float
    ) -> dict[str, Any]:
        """Check in, held until check-in closes, and reveal against the list the answer carries.

        The check-in's answer (``POST .../checkin?wait=``) carries the commitment list once the run
        is seeding: the device checks it and reveals at once (:meth:`_reveal`), with no work poll or
        request for the list in between. Without it (check-in still open after ``wait``) the work
        list's reveal item leads to the reveal later. In a tree run the answer carries the device's
        leaf; off the seed committee (asked by ``Fedstats-Next-Work: 1``) also the committee answer
        (``"revealed"``, checked as if fetched) and its first round's work list once the seed is fixed
        within ``wait``, which it handles as its next poll's answer. Returns the check-in's slots.
        """
        cap = cohort_cap(state)
        most = seed_answer_bytes(cap)  # the list's transcript, or the leaf and the committee
        r = self._send(
            "POST",
            f"/v1/client/runs/{run_id}/checkin",
            json.dumps(body).encode(),
            limit=None if most is None else most + CARRIED_WORK_BYTES,
            content_type="application/json",
            params={"wait": f"{wait:.3f}"},
            # off a tree run's committee: its committee and first round come with the answer
            headers={"Fedstats-Next-Work": "1"},
            timeout=self._timeout + wait,
        )
        got = r.json()
        state.listed = got.pop("transcript", None) if isinstance(got, dict) else None
        if state.listed is None and isinstance(got, dict) and "tree" in got:  # the tree form
            revealed = got.pop("revealed", None)  # the committee answer, checked as fetched
            more = revealed if isinstance(revealed, Mapping) else {}
            state.listed = {**more, "tree": got.pop("tree")}
            self._carry_work(r)
        slots = {"slot_start": int(got["slot_start"]), "slot_count": int(got["slot_count"])}
        self.joined[run_id] = slots
        if state.listed is not None:
            try:
                self._reveal(run_id, wait)
            except SecurityError as exc:  # the commitment list is not the run's: reveal nothing
                self._refuse(run_id, str(exc), "round_mismatch")
            except (FedstatsError, httpx.TransportError) as exc:  # the work list asks again
                self.log(f"reveal of run {run_id} after check-in failed ({exc}); later")
        return slots

    def _reveal(self, run_id: str, wait: float = 0.0) -> None:
        """Check the commitment list and reveal this device's contribution.

        With ``wait`` > 0 the server holds the answer until the run's seed is fixed (up to ``wait``
        seconds) and answers with the reveals too, which the device then need not fetch.
        """
        state = self.secure.get(run_id)
        if state is None:  # checked in before a restart: the contribution is lost (the run aborts)
            return
        slots = self.joined.get(run_id)
        if slots is None:
            raise SecurityError("this device holds no check-in slots for the run")
        if state.head is not None:  # a tree run whose own leaf this device checked (secure_tree)
            return self._tree_reveal(run_id, state, None, wait)
        tr = self._transcript(run_id, state)
        if isinstance(tr, dict) and "tree" in tr:  # the server sends the tree form (secure_tree)
            return self._tree_reveal(run_id, state, tr, wait)
        entries = seeding.entries_of(tr, max_members=cohort_cap(state))
        keys = seeding.keys_of(tr)
        start, count = int(slots["slot_start"]), int(slots["slot_count"])
        seeding.check_own_entry(
            entries,
            self.client_id,
            commitment=state.commitment(run_id, self.client_id),
            slot_start=start,
            slot_count=count,
        )
        own = self._key.public_key().public_bytes_raw().hex()
        if [
            k for (cid, _, _, _), k in zip(entries, keys, strict=True) if cid == self.client_id
        ] != [own]:
            raise SecurityError("the run's roster does not list this device's identity key")
        state.slots = (start, count)
        state.seen = seeding.commitments_digest(run_id, entries, keys)
        state.members = PackedMembers(entries, keys)  # not the parsed rows: O(1) objects per run
        del tr, entries, keys
        cap = cohort_cap(state)
        body = json.dumps({"value": state.contribution.hex(), "seen": state.seen}).encode()
        r = self._send(
            "POST",
            f"/v1/client/runs/{run_id}/reveal",
            body,
            limit=None if cap is None else TRANSCRIPT_BYTES * cap + _ACK_BYTES,
            content_type="application/json",
            params={"wait": f"{wait:.3f}"} if wait > 0 else None,
            timeout=self._timeout + wait if wait > 0 else None,
        )
        try:
            got = r.json()
        except ValueError:
            got = None
        # checked with the transcript (_transcript, then seeding.verify_transcript)
        state.revealed = got.get("revealed") if isinstance(got, dict) else None

    def _transcript(self, run_id: str, state: SecureState) -> Any:
        """The run's published seed transcript, read up to a size its task's cohort allows.

        After revealing, the device asks only for the reveals and the seed and puts them beside the
        commitment list it saw (:attr:`SecureState.members`): the same transcript, without fetching the
        list (``n`` ids, commitments, slots and keys) a second time; if its held reveal was answered
        with them (:attr:`SecureState.revealed`), it does not ask at all.

        Raises
        ------
        SecurityError
            If the answer is oversized, not JSON, or (reveals) not one reveal per listed member.
        """
        path = f"/v1/client/runs/{run_id}/seed"
        cap = cohort_cap(state)
        listed = state.members if state.seen is not None else None
        got = state.revealed if listed is not None else state.listed
        state.revealed = state.listed = None  # used once: one that fails is fetched, not reused
        if got is None:
            params = {"part": "reveals"} if listed is not None else None
            limit = None if cap is None else TRANSCRIPT_BYTES * cap + _ACK_BYTES
            if listed is None:  # before revealing: maybe the tree form (with its committee)
                limit = seed_answer_bytes(cap)
            r = self._send("GET", path, b"", limit=limit, params=params)
            try:
                got = r.json()
            except ValueError:
                raise SecurityError("the seed transcript is not JSON") from None
        if listed is None:
            return got
        try:
            reveals = [str(v) for v in got["reveals"]]
            if len(reveals) != len(listed):
                raise ValueError("count")
            return {"reveals": reveals, "seed": got["seed"]}
        except (KeyError, TypeError, ValueError):
            raise SecurityError("the run's reveals are malformed or not one per member") from None

    def verified_cohort(self, run_id: str) -> tuple[bytes, list[tuple[str, int, int]]]:
        """The run's verified seed and cohort ``[(client_id, slot_start, slot_count), ...]``.

        Fetched and checked once (:func:`fedstats.wire.seeding.verify_transcript`), then kept on the run's
        :class:`SecureState`; ``n_clients`` is the sum of the slot counts.

        Raises
        ------
        SecurityError
            If the device holds no state of the run (not a secure run it joined, or lost in a restart),
            did not reveal, or the transcript does not verify.
        """
        state = self.secure.get(run_id)
        if state is None:
            raise SecurityError(f"this device holds no secure state of run {run_id}")
        seed = self._verified_seed(run_id, state)
        cohort = state.cohort
        assert cohort is not None
        return seed, cohort

    def _verified_seed(self, run_id: str, state: SecureState) -> bytes:
        """The run's seed, verified from its published transcript (once), and the cohort with it."""
        if state.seed is not None and state.verified:
            return state.seed
        if state.head is not None:  # a tree run: the seed committee (secure_tree)
            return self._tree_seed(run_id, state)
        if state.seen is None:
            raise SecurityError("this device did not reveal: it cannot check the run seed")
        tr = self._transcript(run_id, state)
        if state.members is not None:
            # the list is the device's own copy, checked (and its digest computed) before it
            # revealed: only the reveals and the seed are new
            entries = state.members.entries()
            reveals = tr["reveals"]
            seed = seeding.verify_reveals(
                run_id,
                self.client_id,
                entries,
                reveals,
                tr["seed"],
                digest=state.seen,
                own_value=state.contribution,
            )
        else:
            seed = seeding.verify_transcript(
                run_id,
                self.client_id,
                tr,
                seen_digest=state.seen,
                own_value=state.contribution,
                max_members=cohort_cap(state),
                roster=True,
            )
            entries, reveals = seeding.entries_of(tr), [m[2] for m in tr["members"]]
            state.members = PackedMembers(entries, seeding.keys_of(tr))
        state.withheld = seeding.withheld_of(entries, reveals)
        state.members.drop_commitments()  # the cohort and the keys stay, packed
        state.seed, state.verified = seed, True
        return seed

    # -- the stages
    def _secure_stage(self, rnd: Mapping[str, Any], wait: float = 0.0) -> None:
        """Answer the listed stage of a secure round, then, with ``wait``, the session's next stages.

        With ``wait``, the device sends its stage-``s`` message asking the server to answer with its
        stage-``s + 1`` message, held up to ``wait`` seconds until that stage opens: one request per stage,
        no polling of the work list in between (the last stage's acknowledgement is held until the
        session is over). A stage answered before (listed again) is followed by a held request for the
        next one. When no next message comes (the stage did not open in time, or opened without this
        device), the work list takes over again. At stage 0 the work list may carry the device's setup
        message (``"message"``, hex), which it then does not fetch.
        """
        run_id, index = str(rnd["run_id"]), int(rnd["round"])
        info = rnd["secure"]
        number, stage = int(info["session"]), int(info["stage"])
        down: bytes | None = None
        if stage == 0 and isinstance(info.get("message"), str):
            try:  # the setup message rides on the work list; checked like a fetched one
                down = bytes.fromhex(info["message"])
            except ValueError:
                down = None  # fetched instead
        while True:
            more = wait > 0 and stage + 1 < len(seeding.STAGES)
            # the last stage's acknowledgement is held until the session is over: the next work poll
            # then finds the next round rather than this one a stage on
            answered, down, sent = self._answer_stage(rnd, stage, down, wait)
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
        state = self.secure.get(run_id)
        limit = None if state is None else state.limits.get((index, number))
        if limit is None:
            return None  # not a session this device joined
        path = f"/v1/client/runs/{run_id}/rounds/{index}/secure/{number}/{stage}"
        try:
            r = self._send(
                "GET",
                path,
                b"",
                limit=limit,
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

        At stage 0 the device first derives its session and checks the server's against it, the seed, the
        certificates and the roster (:meth:`_join_session`). With ``wait`` > 0 the server may answer with
        this device's next stage message (see :meth:`_secure_stage`).

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
                    client, down = self._join_session(rnd, state, down)
                else:
                    client = state.sessions.get((index, number))
                    if client is None:
                        return False, None, False
                    if down is None:
                        down = self._send(
                            "GET", path, b"", limit=state.limits[(index, number)]
                        ).content
                    # the certificates before the first secret (the shares) and the data (if
                    # the answer to the advertisement did not carry them: fetched)
                    self._certify(run_id, index, number, state, None)
                reply = client.handle_bytes(down)
            except FedstatsError as exc:
                # a failed check or a malformed message: leave the session, send nothing more
                state.refused[(index, number)] = str(exc)
                state.sessions.pop((index, number), None)
                self.log(f"left secure session {number} of run {run_id} round {index}: {exc}")
                return False, None, False
            state.replies[(index, number, stage)] = reply
        last = stage + 1 == len(seeding.STAGES)
        limit = max(_ACK_BYTES, state.limits.get((index, number), 0))
        params: dict[str, str] = {"wait": f"{wait:.3f}"} if wait > 0 else {}
        pending = state.uncertified.get((index, number))
        if pending is not None:  # the answer (stage 1, or the acknowledgement) carries these
            named, more = named_members(pending)
            params.update(named)
            limit += more
        try:
            r = self._send(
                "POST",
                path,
                reply,
                # a held last stage's answer may carry the next work list (read like a poll's)
                limit=None if last and wait > 0 else limit,
                content_type="application/octet-stream",
                params=params or None,
                headers={"Fedstats-Next-Work": "1"} if last and wait > 0 else None,
                timeout=self._timeout + wait if wait > 0 else None,
            )
        except SecurityError as exc:  # the answer (the next stage's message) is oversized: leave
            state.refused[(index, number)] = str(exc)
            state.sessions.pop((index, number), None)
            self.log(f"left secure session {number} of run {run_id} round {index}: {exc}")
            return False, None, True
        state.acknowledged.add((index, number, stage))
        carried = r.headers.get("content-type", "").startswith("application/octet-stream")
        if last and not carried:
            self._carry_work(r)
        content: bytes | None = r.content if carried else None
        if pending is not None:
            content = self._carried_certificates(r, state, run_id, (index, number), content)
            if (index, number) in state.refused:
                return False, None, True
        return True, content, True

    def _carried_certificates(
        self,
        r: httpx.Response,
        state: SecureState,
        run_id: str,
        session: tuple[int, int],
        content: bytes | None,
    ) -> bytes | None:
        """Take the certificates the answer to the advertisement carries, and check them at once.

        Before the next message (``Fedstats-Certificates``: their JSON's length) or in the JSON
        acknowledgement (``"certificates"``). A failed check leaves the session (:meth:`_certify`).
        Returns the next stage's message, if any.
        """
        certs: Any = None
        cut = r.headers.get(CERTIFICATES_HEADER)
        try:
            if (
                content is not None
                and cut is not None
                and cut.isdigit()
                and int(cut) <= len(content)
            ):
                certs, content = json.loads(content[: int(cut)]), content[int(cut) :]
            elif content is None:
                got = r.json()
                certs = got.get("certificates") if isinstance(got, dict) else None
        except ValueError:
            certs = None  # fetched instead
        if certs is None:
            return content
        index, number = session
        try:
            self._certify(run_id, index, number, state, certs)
        except FedstatsError as exc:
            state.refused[(index, number)] = str(exc)
            state.sessions.pop((index, number), None)
            self.log(f"left secure session {number} of run {run_id} round {index}: {exc}")
        return content

    def _carry_work(self, r: httpx.Response) -> None:
        """Keep the work list a held last stage's answer carries, for the device's next poll."""
        try:
            work = r.json().get("work")
        except (ValueError, AttributeError):
            return
        if isinstance(work, dict) and all(isinstance(work.get(k), list) for k in _WORK_KEYS):
            self._carried = (work, r.headers.get("etag"))

    def _derive_session(
        self, rnd: Mapping[str, Any], state: SecureState, seed: bytes
    ) -> tuple[list[str], int]:
        """The members (roster order) of the session this device derives itself into, and its index.

        Raises
        ------
        SecurityError
            If the server's session (number, size, index, the device's records) is not the derived one,
            the device already joined a session of the round, or the session is below the policy floor.
        ProtocolAbortError
            If the round's participants cannot form sessions of the task's ``min_session_size``.
        """
        index = int(rnd["round"])
        info = rnd["secure"]
        number = int(info["session"])
        max_session, minimum = self._session_limits(state, index)
        floor = int(getattr(self.policy, "min_session_size", Policy.min_session_size))
        assert state.members is not None and state.verified and state.slots is not None
        lo, hi = (int(x) for x in rnd["client_range"])
        start, count = state.slots
        a = max(start, lo)
        mine = [a, max(a, min(start + count, hi))]
        n_clients = state.members.slot_total()
        if [int(x) for x in rnd["records"]] != mine or int(rnd["slot_start"]) != start:
            raise SecurityError("the round names other records of this device than its slots")
        if int(rnd["n_clients"]) != n_clients:
            raise SecurityError("the round's n_clients is not the verified cohort's")
        ids = state.members.ids()
        key = (lo, hi, max_session, minimum)
        got = state.partitions.get(key)
        if got is None:  # a round with the same participants (and options) has the same sessions
            joining = [c for c in state.members.cohort() if c[0] not in state.withheld]
            sessions = seeding.sessions_of(joining, seed, index, (lo, hi), max_session, minimum)
            derived = [k for k, members in enumerate(sessions) if self.client_id in members]
            if not derived:
                raise SecurityError(f"this device is in no session of round {index} it derives")
            position = {c: j for j, c in enumerate(ids)}
            got = (derived[0], np.array([position[c] for c in sessions[derived[0]]], np.int32))
            state.partitions[key] = got
        members = [ids[j] for j in got[1].tolist()]
        if number != got[0]:
            raise SecurityError(
                f"the server lists this device in session {number} of round {index}; it derives "
                f"session {got[0]}"
            )
        i = members.index(self.client_id)
        if (int(info["n"]), int(info["index"])) != (len(members), i):
            raise SecurityError(
                f"the server's session has n={info['n']} and this device at index {info['index']}; it "
                f"derives n={len(members)} and index {i}"
            )
        if len(members) < max(2, floor):
            raise SecurityError(
                f"a secure session of {len(members)} is below this device's policy floor "
                f"min_session_size={floor}"
            )
        return members, i

    def _join_session(
        self, rnd: Mapping[str, Any], state: SecureState, down: bytes | None
    ) -> tuple[Any, bytes]:
        """Derive and check the session, its certificates and roster; then encode and build the client.

        Returns the device's :class:`~fedstats.secagg.SecAggClient` and the server's setup message.
        Nothing of the device's data is read before every check passed.
        """
        from fedstats.secagg import SecAggClient

        if state.head is not None:  # a tree run: a bound roster (secure_tree)
            return self._tree_join(rnd, state, down)
        run_id, index = str(rnd["run_id"]), int(rnd["round"])
        number = int(rnd["secure"]["session"])
        seed = self._verified_seed(run_id, state)
        members, i = self._derive_session(rnd, state, seed)
        n = len(members)
        k = session_parameters(n).k
        if state.withheld and k < n - 1:
            raise SecurityError(
                f"the run went on without {len(state.withheld)} withholder(s) and this session's graph "
                f"is sparse (k={k} of {n - 1}): a server that drops reveals could grind it"
            )
        params = self._session_parameters(n)
        setup = self._setup_message(state, rnd, params, i, down)
        session = seeding.session_id(seed, index, number)
        assert state.members is not None
        roster = committed_roster(
            state.members.key_map(), members, session, seeding.task_id_bytes(run_id)
        )
        setup = with_committed_roster(setup, roster)
        down = setup.to_bytes()
        checked = checked_members(
            n,
            params.k,
            session,
            i,
            AUDIT_MEMBERS,
            self.randomness.generator("roster-audit", run_id, index),
        )
        assert state.task is not None
        verifier = CertificateRosterVerifier(
            str(self.authority_public_key),
            None,  # the certificates come with the answer to the advertisement (_certify)
            population=str(state.task["privacy"]["population"]),
            session=session,
            task_id=seeding.task_id_bytes(run_id),
            verified=self.verified_certificates,
            members=members,
            indices=checked,
        )
        config = self._client_config(
            params, int(rnd["dim"]), verifier, seeding.task_id_bytes(run_id), setup
        )
        verifier.verify(roster)  # its structure: the certificates before any share (_certify)
        state.rounds[index] = number  # one session per round: any other is refused from now on
        client = SecAggClient(i, None, config, cache=SIGNATURES)  # the data after _certify
        state.sessions[(index, number)] = client
        state.uncertified[(index, number)] = (verifier, roster, checked, rnd)
        return client, down

    def _certify(
        self, run_id: str, index: int, number: int, state: SecureState, certs: Any
    ) -> None:
        """Check the session's certificates, then encode the round and give it to the client.

        Before the device's first secret (its shares) and before its data is read: the checked
        members' certificates (``certs``, carried by the answer to its advertisement, else fetched
        now) must pass :class:`CertificateRosterVerifier` on the committed roster.

        Raises
        ------
        SecurityError
            If a certificate is missing, malformed, or does not certify its member.
        """
        got = state.uncertified.get((index, number))
        if got is None:
            return
        if isinstance(got, TreePending):  # a tree run: leaves and certificates (secure_tree)
            return self._tree_certify(run_id, index, number, state, got, certs)
        verifier, roster, checked, rnd = got
        if certs is None:
            certs = self._member_certificates(run_id, index, number, checked)
        elif not isinstance(certs, list) or len(certs) != len(checked):
            raise SecurityError(
                f"the certificate list names {len(certs) if isinstance(certs, list) else '?'} "
                f"member(s); this device asked for {len(checked)}"
            )
        verifier.supply(certs)
        verifier.verify(roster)
        del state.uncertified[(index, number)]
        self._give_input(state, index, number, rnd)  # each round is encoded (and charged) once

    def _member_certificates(
        self, run_id: str, index: int, number: int, checked: Sequence[int]
    ) -> list[Any]:
        """The certificates of the session members at positions ``checked`` (in that order).

        Raises
        ------
        SecurityError
            If the answer is oversized, not a JSON list, or names another number of members.
        """
        path = f"/v1/client/runs/{run_id}/rounds/{index}/secure/{number}/certificates"
        r = self._send(
            "GET",
            path,
            b"",
            limit=CERTIFICATE_BYTES * max(1, len(checked)),
            params={"members": ",".join(str(j) for j in checked)},
        )
        try:
            certs = r.json()
        except ValueError:
            raise SecurityError("the session's certificate list is not JSON") from None
        if not isinstance(certs, list) or len(certs) != len(checked):
            raise SecurityError(
                f"the certificate list names {len(certs) if isinstance(certs, list) else '?'} "
                f"member(s); this device asked for {len(checked)}"
            )
        return certs
