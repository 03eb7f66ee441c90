"""The server side of secure aggregation as an explicit state machine (Bell et al. 2020, Alg. 2).

The server collects one message per client per stage (:meth:`SecAggServer.receive_bytes` /
:meth:`SecAggServer.receive`) and closes the stage with :meth:`SecAggServer.advance` (in a deployment: at a
deadline), which returns the messages to send next. Clients that did not answer a stage are dropouts.

* Every client message is checked before it is used: stage, version, session id, size limit, sender,
  exact counts and lengths, public keys (length, low order, uniqueness) and, in the malicious model, the
  sender's identity signature. A bad message is refused (:class:`~fedstats.errors.SecurityError` or
  :class:`~fedstats.errors.DataError`) and its sender counts as a dropout; the session goes on.
* At every stage the server aborts with :class:`~fedstats.errors.ProtocolAbortError` when fewer than
  ``min_survivors`` clients answered.
* Unmasking fails closed: it works on a copy of the accumulated sum, which replaces the sum only when every
  secret was reconstructed and checked; any error aborts the session, the accumulator is wiped, and nothing
  is accepted or released afterwards.
* A client that sends wrong shares is identified (Berlekamp-Welch decoding checked against the seed
  commitment or advertised public key, :func:`~fedstats.secagg.shamir.robust_reconstruct`), listed in
  :attr:`SecAggServer.cheaters` and its shares ignored, like a dropout.

At the end the server knows ``sum_{i in S} x_i mod 2^b`` for the set ``S`` of clients whose masked input
arrived (in the malicious model, the survivor set the clients signed).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from enum import Enum

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fedstats.errors import (
    DataError,
    FedstatsError,
    ParameterError,
    ProtocolAbortError,
    SecurityError,
)
from fedstats.randomness import RNG
from fedstats.secagg.crypto import (
    DTYPES,
    LABEL_MASK,
    VerificationCache,
    add_masks,
    check_bits,
    check_public_key,
    mask_scratch,
    mask_sign,
    pair_key,
    public_from_private,
    roster_transcript,
    seed_commitment,
    self_mask_seed,
    session_id,
)
from fedstats.secagg.graph import public_harary_graph, random_harary_graph
from fedstats.secagg.identity import SessionRoster, verify_signature
from fedstats.secagg.messages import (
    AdvertiseKeys,
    ConsistencySignature,
    EncryptedShares,
    KeyBroadcast,
    MaskedInput,
    Message,
    SetupMessage,
    ShareBroadcast,
    SurvivorSet,
    UnmaskRequest,
    UnmaskResponse,
    decode_signed,
    max_message_bytes,
    survivor_statement,
)
from fedstats.secagg.params import SecAggParameters
from fedstats.secagg.shamir import FIELD_PRIME, lagrange_bases, robust_reconstruct

__all__ = ["SERVER_READ", "SecAggServer", "ServerState", "semi_honest_session"]

ClientMessage = (
    AdvertiseKeys | EncryptedShares | MaskedInput | ConsistencySignature | UnmaskResponse
)


class ServerState(Enum):
    """Which stage's messages the server is collecting."""

    SETUP = "setup"
    ADVERTISE = "advertise_keys"
    SHARE = "share_keys"
    MASKED_INPUT = "masked_input"
    CONSISTENCY = "consistency"
    UNMASK = "unmask"
    DONE = "done"
    ABORTED = "aborted"


_EXPECTED: dict[ServerState, type[Message]] = {
    ServerState.ADVERTISE: AdvertiseKeys,
    ServerState.SHARE: EncryptedShares,
    ServerState.MASKED_INPUT: MaskedInput,
    ServerState.CONSISTENCY: ConsistencySignature,
    ServerState.UNMASK: UnmaskResponse,
}

SERVER_READ = (EncryptedShares, MaskedInput, UnmaskResponse)
"""The client messages whose signature no other client reads: a server given the sender as its transport
authenticated it (:meth:`SecAggServer.receive_bytes`) does not check their signature again. (The shares
reach their receivers under authenticated encryption keyed by the sender's signed advertisement.)"""


def semi_honest_session(round_id: bytes) -> bytes:
    """32-byte session id of a semi-honest or semi-malicious session: SHA-256 of a label and the round id."""
    return hashlib.sha256(b"fedstats/secagg/v2/session\x00" + bytes(round_id)).digest()


def _seed_check(transcript: bytes, client: int, commitment: bytes) -> Callable[[bytes], bool]:
    return lambda seed: seed_commitment(transcript, client, seed) == commitment


def _key_check(public: bytes) -> Callable[[bytes], bool]:
    return lambda private: public_from_private(private) == public


class SecAggServer:
    """The aggregating server of one session.

    Parameters
    ----------
    params : SecAggParameters
        ``n``, ``k``, ``t``, ``min_survivors`` and the threat model.
    length : int
        Vector length ``l`` of every client's input, >= 1.
    bits : int
        Modulus width ``b`` in {16, 32, 64}: inputs and the sum live in Z / 2^b Z.
    round_id : bytes, optional
        Unique id of this aggregation (semi-honest models; the session id is derived from it).
    rng : numpy.random.Generator or SecureGenerator, optional
        Public randomness for the graph permutation (semi-honest models).
    roster : SessionRoster, optional
        The authority-signed roster (malicious model): the session id, the clients' identities and the
        graph's public randomness all come from it.
    cache : VerificationCache, optional
        Signature verifications shared with the clients of a simulated session (see
        :class:`~fedstats.secagg.crypto.VerificationCache`); default: the server verifies every
        signature itself.

    Attributes
    ----------
    state : ServerState
    session : bytes
        32-byte session id.
    advertised, shared, masked, signed, responded : set of int
        The clients that completed each stage (``S`` = ``masked``).
    cheaters : set of int
        Clients whose shares were found wrong (their answers were ignored).

    Raises
    ------
    ParameterError
        Bad width or length, or a roster / round id missing for the threat model.
    """

    def __init__(
        self,
        params: SecAggParameters,
        *,
        length: int,
        bits: int,
        round_id: bytes | None = None,
        rng: RNG | None = None,
        roster: SessionRoster | None = None,
        cache: VerificationCache | None = None,
    ) -> None:
        check_bits(bits)
        self._cache = cache
        if length < 1:
            raise ParameterError("length", length, "an integer >= 1")
        self.params = params
        self.length = int(length)
        self.bits = int(bits)
        self.malicious = params.threat_model == "malicious"
        if self.malicious:
            if roster is None or roster.n != params.n or not all(roster.identities):
                raise ParameterError(
                    "roster", roster, f"a signed roster of {params.n} clients with every key"
                )
            self.roster: SessionRoster | None = roster
            self.session = roster.session
            self.neighbors = public_harary_graph(params.n, params.k, roster.session)
            self._transcript = roster_transcript(roster)
        else:
            if round_id is None or rng is None:
                raise ParameterError("round_id/rng", None, "a round id and a generator")
            self.roster = None
            self.round_id = bytes(round_id)
            self.session = semi_honest_session(self.round_id)
            self.neighbors = random_harary_graph(params.n, params.k, rng)
            self._transcript = b""
        # the graph stays one (n, k) array with sorted rows (not n Python sets of k ints); a stage's
        # live neighbours of a client are its row filtered by a boolean mask
        nobody = np.zeros(params.n, dtype=bool)  # replaced (never changed) as the stages close
        self._advertised = self._shared = self._masked_at = nobody
        self.state = ServerState.SETUP
        self._keys: dict[int, tuple[bytes, bytes, bytes]] = {}
        self._all_keys: set[bytes] = set()
        self._commitments: dict[int, bytes] = {}
        self._cts: dict[int, dict[int, bytes]] = {}
        self._acc = np.zeros(self.length, dtype=DTYPES[self.bits])
        self._masked: set[int] = set()
        self._signatures: dict[int, bytes] = {}
        self._responses: dict[int, UnmaskResponse] = {}
        self._requests: dict[int, UnmaskRequest] = {}
        self._result: np.ndarray | None = None
        self._survivor_statement: bytes | None = None
        self.advertised: set[int] = set()
        self.shared: set[int] = set()
        self.masked: set[int] = set()
        self.signed: set[int] = set()
        self.responded: set[int] = set()
        self.cheaters: set[int] = set()

    # ------------------------------------------------------------------------------------------
    def setup(self) -> dict[int, SetupMessage]:
        """Stage ``setup``: the parameters (and roster or neighbour list) for each client."""
        if self.state is not ServerState.SETUP:
            raise SecurityError("setup() called twice")
        p = self.params
        self.state = ServerState.ADVERTISE
        roster = self.roster.to_bytes() if self.roster is not None else b""
        return {
            c: SetupMessage(
                self.session,
                c,
                p.n,
                p.k,
                p.t,
                self.bits,
                self.length,
                p.min_survivors,
                p.threat_model,
                () if self.malicious else tuple(int(v) for v in self.neighbors[c]),
                roster,
            )
            for c in range(p.n)
        }

    def limit(self, cls: type[Message]) -> int:
        """Size limit of a message type in this session (bytes)."""
        p = self.params
        return max_message_bytes(cls, n=p.n, k=p.k, length=self.length, bits=self.bits)

    def receive_bytes(self, data: bytes, *, sender: int | None = None) -> None:
        """Accept one serialized client message (the transport API); the size limit is checked first.

        Parameters
        ----------
        data : bytes
            The serialized message.
        sender : int, optional
            The sender's index as the transport authenticated it (the service: the device's signed
            request, journaled with its index). The message must name it. The signature of a message
            that only the server reads (:data:`SERVER_READ`: the encrypted shares, also bound to
            their sender by their authenticated encryption, the masked input, the unmasking answer)
            is then not checked again (malicious model); key advertisements and consistency
            signatures, which other clients read, are checked either way. None: every signature is
            checked (the in-process driver, whose messages no transport authenticated).

        Raises
        ------
        SecurityError, DataError
            As :meth:`receive`, or a malformed or oversized message, or one that names another
            sender than ``sender`` (refused; the session goes on).
        ProtocolAbortError
            The session has aborted.
        """
        expect = self._expect()
        msg, signed = decode_signed(data, expect=expect, max_bytes=self.limit(expect))
        self._receive(msg, signed, sender)  # type: ignore[arg-type]

    def _expect(self) -> type[Message]:
        if self.state is ServerState.ABORTED:
            raise ProtocolAbortError("the session has aborted; nothing more is accepted")
        expected = _EXPECTED.get(self.state)
        if expected is None:
            raise SecurityError(f"no client message is accepted in state {self.state.value}")
        return expected

    def receive(self, message: ClientMessage) -> None:
        """Accept one client message for the current stage.

        Raises
        ------
        SecurityError
            A message of the wrong stage or session, a duplicate, a bad signature, bad keys, or one from
            a client not entitled to send it. The message is ignored.
        DataError
            A masked input of the wrong length or width. The message is ignored.
        ProtocolAbortError
            The session has aborted.
        """
        self._receive(message, None)

    def _receive(
        self, message: ClientMessage, signed: bytes | None, authenticated: int | None = None
    ) -> None:
        """:meth:`receive`, given what the caller already knows.

        ``signed``: the bytes the message's signature covers; ``authenticated``: the sender the
        transport authenticated (:meth:`receive_bytes`).
        """
        expected = self._expect()
        if not isinstance(message, expected):
            raise SecurityError(f"unexpected {type(message).__name__} in state {self.state.value}")
        if message.session != self.session:
            raise SecurityError("message of another session")
        sender = message.client if isinstance(message, AdvertiseKeys) else message.sender
        if not 0 <= sender < self.params.n:
            raise SecurityError(f"message from client {sender}, who was not invited")
        if authenticated is not None and sender != authenticated:
            raise SecurityError(
                f"message naming client {sender} from client {authenticated}, as authenticated"
            )
        if self.malicious and not (authenticated is not None and isinstance(message, SERVER_READ)):
            assert self.roster is not None
            if isinstance(message, ConsistencySignature):
                data = self._statement()
            else:
                data = signed if signed is not None else message.signed_bytes()
            check = self._cache.verify if self._cache is not None else verify_signature
            if not check(self.roster.identities[sender], message.signature, data):
                raise SecurityError(
                    f"message claiming to be from client {sender} is not signed by it"
                )
        if isinstance(message, AdvertiseKeys):
            self._receive_keys(message)
        elif isinstance(message, EncryptedShares):
            self._receive_shares(message)
        elif isinstance(message, MaskedInput):
            self._receive_masked(message)
        elif isinstance(message, ConsistencySignature):
            self._receive_signature(message)
        else:
            self._receive_unmask(message)

    def _member_mask(self, clients: set[int]) -> np.ndarray:
        """``clients`` as a boolean array of length ``n``."""
        mask = np.zeros(self.params.n, dtype=bool)
        mask[np.fromiter(clients, dtype=np.int64, count=len(clients))] = True
        return mask

    def _live(self, i: int, mask: np.ndarray) -> list[int]:
        """The neighbours of ``i`` in ``mask``, in increasing order."""
        row = self.neighbors[i]
        return row[mask[row]].tolist()  # type: ignore[no-any-return]

    def _statement(self) -> bytes:
        """The survivor statement the clients sign (fixed once ``S`` is; computed once, not per signer)."""
        if self._survivor_statement is None:
            self._survivor_statement = survivor_statement(
                self.session, self.params.n, tuple(sorted(self.masked))
            )
        return self._survivor_statement

    def _receive_keys(self, m: AdvertiseKeys) -> None:
        if m.client in self._keys:
            raise SecurityError(f"duplicate key advertisement from client {m.client}")
        check_public_key(m.mask_public)
        check_public_key(m.encryption_public)
        if (
            m.mask_public == m.encryption_public
            or {m.mask_public, m.encryption_public} & self._all_keys
        ):
            raise SecurityError(f"client {m.client} advertised a public key that is already in use")
        self._all_keys |= {m.mask_public, m.encryption_public}
        self._keys[m.client] = (m.mask_public, m.encryption_public, m.signature)

    def _receive_shares(self, m: EncryptedShares) -> None:
        i = m.sender
        if i not in self.advertised or i in self._commitments:
            raise SecurityError(f"unexpected or duplicate shares from client {i}")
        if set(m.ciphertexts) != set(self._live(i, self._advertised)):
            raise SecurityError(f"client {i} did not send one share to each live neighbour")
        self._commitments[i] = m.seed_commitment
        self._cts[i] = dict(m.ciphertexts)

    def _receive_masked(self, m: MaskedInput) -> None:
        i = m.sender
        if i not in self.shared or i in self._masked:
            raise SecurityError(f"unexpected or duplicate masked input from client {i}")
        if m.bits != self.bits or m.values.size != self.length:
            raise DataError(
                f"masked input of client {i} has {m.values.size} values of {m.bits} bits, "
                f"expected {self.length} of {self.bits}"
            )
        np.add(self._acc, m.values.astype(self._acc.dtype, copy=False), out=self._acc)
        self._masked.add(i)

    def _receive_signature(self, m: ConsistencySignature) -> None:
        if m.sender not in self.masked or m.sender in self._signatures:
            raise SecurityError(
                f"unexpected or duplicate consistency signature from client {m.sender}"
            )
        self._signatures[m.sender] = m.signature

    def _receive_unmask(self, m: UnmaskResponse) -> None:
        j = m.sender
        req = self._requests.get(j)
        if req is None or j in self._responses:
            raise SecurityError(f"unexpected or duplicate unmasking response from client {j}")
        if self.malicious:
            held = set(self._live(j, self._shared))
            want_seeds, want_keys = held & self.masked, held - self.masked
        else:
            want_seeds, want_keys = set(req.survivors), set(req.dropped)
        if set(m.seed_shares) != want_seeds or set(m.key_shares) != want_keys:
            raise SecurityError(f"client {j} answered shares that were not requested")
        self._responses[j] = m

    # ------------------------------------------------------------------------------------------
    def _abort(self, reason: str) -> ProtocolAbortError:
        self.state = ServerState.ABORTED
        self._acc[:] = 0
        self._result = None
        self._responses.clear()
        self._cts.clear()
        return ProtocolAbortError(reason)

    def _check_quorum(self, count: int, stage: str) -> None:
        if count < self.params.min_survivors:
            raise self._abort(
                f"only {count} of {self.params.n} clients completed the {stage} stage; at least "
                f"{self.params.min_survivors} are needed (dropout_rate={self.params.dropout_rate:g}), "
                "so the server aborts without a result"
            )

    def advance(self) -> dict[int, Message]:
        """Close the current stage and return the next messages, keyed by receiving client.

        Returns an empty dict after the unmasking stage; the sum is then available from :meth:`result`.

        Raises
        ------
        ProtocolAbortError
            Fewer than ``min_survivors`` clients completed the stage, or unmasking failed (a secret with
            too few correct shares, a seed or key that does not match its commitment or public key). The
            server keeps no partial result and accepts nothing more.
        """
        if self.state is ServerState.ABORTED:
            raise ProtocolAbortError("the session has aborted")
        if self.state is ServerState.ADVERTISE:
            self.advertised = set(self._keys)
            self._advertised = self._member_mask(self.advertised)
            self._check_quorum(len(self.advertised), "key advertisement")
            if not self.malicious:
                self._transcript = session_id(
                    self.round_id, {i: v[:2] for i, v in sorted(self._keys.items())}
                )
            self.state = ServerState.SHARE
            return {
                i: KeyBroadcast(
                    self.session,
                    i,
                    self._transcript,
                    {j: self._keys[j] for j in self._live(i, self._advertised)},
                )
                for i in sorted(self.advertised)
            }
        if self.state is ServerState.SHARE:
            self.shared = set(self._commitments)
            self._shared = self._member_mask(self.shared)
            self._check_quorum(len(self.shared), "share distribution")
            self.state = ServerState.MASKED_INPUT
            out: dict[int, Message] = {}
            for j in sorted(self.shared):
                cts = {i: self._cts[i][j] for i in self._live(j, self._shared)}
                out[j] = ShareBroadcast(self.session, j, cts)
            self._cts.clear()
            return out
        if self.state is ServerState.MASKED_INPUT:
            self.masked = set(self._masked)
            self._masked_at = self._member_mask(self.masked)
            self._survivor_statement = None
            self._check_quorum(len(self.masked), "masked input")
            if self.malicious:
                self.state = ServerState.CONSISTENCY
                members = tuple(sorted(self.masked))
                return {i: SurvivorSet(self.session, i, self.params.n, members) for i in members}
            return self._unmask_requests(set(self.masked))
        if self.state is ServerState.CONSISTENCY:
            self.signed = set(self._signatures)
            self._check_quorum(len(self.signed), "consistency check")
            return self._unmask_requests(self.signed)
        if self.state is ServerState.UNMASK:
            self.responded = set(self._responses)
            self._check_quorum(len(self.responded), "unmasking")
            try:
                result, cheaters = self._unmask()
            except FedstatsError as exc:
                raise self._abort(f"unmasking failed, the session aborts: {exc}") from exc
            except Exception as exc:  # fail closed on anything unexpected too
                raise self._abort(f"unmasking failed, the session aborts: {exc!r}") from exc
            self._acc = result
            self._result = result
            self.cheaters = cheaters
            self.state = ServerState.DONE
            return {}
        raise SecurityError(f"advance() called in state {self.state.value}")

    def _unmask_requests(self, askers: set[int]) -> dict[int, Message]:
        self.state = ServerState.UNMASK
        if self.malicious:
            signed = self._member_mask(self.signed)
            two_hop = np.empty(self.params.n, dtype=bool)
            for j in sorted(askers):
                # the signers among the neighbours' neighbours, but j
                two_hop[:] = False
                two_hop[self.neighbors[self.neighbors[j]]] = True
                two_hop &= signed
                two_hop[j] = False
                sigs = {s: self._signatures[s] for s in np.flatnonzero(two_hop).tolist()}
                self._requests[j] = UnmaskRequest(self.session, j, signatures=sigs)
        else:
            for j in sorted(askers):
                nb = self._live(j, self._shared)
                alive = self._masked_at[nb].tolist()
                self._requests[j] = UnmaskRequest(
                    self.session,
                    j,
                    tuple(c for c, a in zip(nb, alive, strict=True) if a),
                    tuple(c for c, a in zip(nb, alive, strict=True) if not a),
                )
        return dict(self._requests)

    def _unmask(self) -> tuple[np.ndarray, set[int]]:
        """Remove the masks from a copy of the sum; return it and the clients caught cheating."""
        t = self.params.t
        seed_shares: dict[int, list[tuple[int, int]]] = {i: [] for i in self.masked}
        key_shares: dict[int, list[tuple[int, int]]] = {i: [] for i in self.shared - self.masked}
        for j in sorted(self.responded):  # lowest client ids first (Alg. 2, step 8)
            resp = self._responses[j]
            for i, s in resp.seed_shares.items():
                seed_shares[i].append((j + 1, s))
            for i, s in resp.key_shares.items():
                key_shares[i].append((j + 1, s))
        # the Lagrange bases of the shares every secret will be reconstructed from first (the t valid
        # shares of the lowest client ids, as robust_reconstruct takes them), with one inversion for all
        bases = lagrange_bases(
            tuple(sorted(x for x, y in shares if 0 <= y < FIELD_PRIME)[:t])
            for shares in (*seed_shares.values(), *key_shares.values())
        )
        cheaters: set[int] = set()
        tr = self._transcript
        masks: list[tuple[bytes, int]] = []  # every secret is reconstructed and checked first
        for i in sorted(self.masked):
            seed, bad = robust_reconstruct(
                seed_shares[i],
                threshold=t,
                check=_seed_check(tr, i, self._commitments[i]),
                bases=bases,
            )
            cheaters |= {x - 1 for x in bad}
            masks.append((self_mask_seed(tr, i, seed), -1))
        for i in sorted(key_shares):
            live = self._live(i, self._masked_at)
            if not live:
                continue
            public = self._keys[i][0]
            sk, bad = robust_reconstruct(
                key_shares[i], threshold=t, check=_key_check(public), bases=bases
            )
            cheaters |= {x - 1 for x in bad}
            key = X25519PrivateKey.from_private_bytes(sk)  # once, not once per live neighbour
            for j in live:
                seed = pair_key(key, self._keys[j][0], session=tr, label=LABEL_MASK, me=i, peer=j)
                masks.append((seed, -mask_sign(j, i)))  # remove what j added
        acc = self._acc.copy()
        add_masks(acc, masks, scratch=mask_scratch())
        return acc, cheaters

    def result(self) -> np.ndarray:
        """The sum of the survivors' inputs mod 2^b.

        Returns
        -------
        numpy.ndarray
            Shape ``(length,)``, dtype ``uint{bits}``.

        Raises
        ------
        ProtocolAbortError
            If the protocol has not completed (or aborted).
        """
        if self.state is not ServerState.DONE or self._result is None:
            raise ProtocolAbortError(f"no result: the protocol is in state {self.state.value}")
        return self._result.copy()
