"""The client side of secure aggregation as an explicit state machine (Bell et al. 2020, Alg. 2).

A :class:`SecAggClient` is driven only by serialized server messages (:meth:`SecAggClient.handle_bytes`:
bytes in, bytes out; :meth:`SecAggClient.handle` takes and returns the message dataclasses). Everything
security-relevant comes from the client's own :class:`ClientConfig` (``n``, ``k``, ``t``, width, length,
``min_survivors``, threat model, identity key, roster verifier), never from the server: a setup message
with other values is refused.

In the ``"malicious"`` threat model (Bell et al. 2020, Sec. 5, with the consistency check of Bonawitz
et al. 2017, Sec. 4.3, adapted to the sparse graph) the client also

* checks the enrollment authority's signature on the session roster and finds its own identity in it;
* computes its neighbourhood itself from the roster's session id (public randomness the server does not
  choose), so it has exactly ``k`` neighbours;
* signs every message it sends with its identity key and verifies each neighbour's signed key
  advertisement (and the keys' length, order and uniqueness) before sharing anything;
* after its masked input, signs the survivor set ``S`` (refusing a set without itself or smaller than
  ``min_survivors``) and reveals shares only when, for **every** neighbour ``j`` it holds shares of, at
  least ``t`` clients of ``N(j)`` signed the identical ``(session, S)`` (see
  :meth:`SecAggClient.signature_threshold` for why ``t`` is the right threshold); it then reveals the
  seed share of ``j`` when ``j`` is in ``S`` and the key share otherwise, decided from ``S`` alone.

In all models the client refuses messages out of order, of the wrong session, version, stage or size,
keys of non-neighbours, low-order or repeated keys, ciphertexts that fail authentication, and requests for
both shares of a neighbour. Any error aborts it for good: it forgets its secrets and answers nothing more.
It forgets its input, private keys and self-mask seed once its masked input is sent, and the shares it
holds once it has answered.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections import Counter
from enum import Enum
from itertools import chain
from typing import TypeVar

import numpy as np

from fedstats.errors import (
    DataError,
    FedstatsError,
    ParameterError,
    ProtocolAbortError,
    SecurityError,
)
from fedstats.secagg.crypto import (
    LABEL_MASK,
    LABEL_SHARE_ENCRYPTION,
    KeyPair,
    VerificationCache,
    add_masks,
    check_public_key,
    decrypt_share,
    encrypt_share,
    generate_key_pair,
    mask_scratch,
    mask_sign,
    pair_key,
    roster_transcript,
    seed_commitment,
    self_mask_seed,
)
from fedstats.secagg.graph import public_neighbors
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
    decode,
    max_message_bytes,
    survivor_statement,
)
from fedstats.secagg.params import ClientConfig
from fedstats.secagg.quantize import to_modular
from fedstats.secagg.shamir import SHARE_BYTES, split_secret

__all__ = ["ClientState", "SecAggClient"]

_Reply = TypeVar("_Reply", AdvertiseKeys, EncryptedShares, MaskedInput, UnmaskResponse)
_PLAINTEXT = struct.Struct(f"<II{SHARE_BYTES}s{SHARE_BYTES}s")


class ClientState(Enum):
    """Where a client is in the protocol."""

    INIT = "init"
    ADVERTISED = "advertised"
    SHARED = "shared"
    MASKED = "masked"
    SIGNED = "signed"
    DONE = "done"
    ABORTED = "aborted"


_EXPECTED: dict[ClientState, type[Message]] = {
    ClientState.INIT: SetupMessage,
    ClientState.ADVERTISED: KeyBroadcast,
    ClientState.SHARED: ShareBroadcast,
    ClientState.SIGNED: UnmaskRequest,
}


class SecAggClient:
    """One client of the protocol.

    Parameters
    ----------
    index : int
        The client's index in ``[0, n)`` (its Shamir abscissa is ``index + 1``).
    values : numpy.ndarray or None
        Shape ``(length,)``, integer dtype: the client's input, reduced mod 2^b (two's complement).
        None: given later with :meth:`provide_input`, before the masked-input stage.
    config : ClientConfig
        The client's own view of the task (parameters, threat model, identity).
    cache : VerificationCache, optional
        Signature verifications and roster checks shared with the other parties of a simulated session
        (:class:`~fedstats.secagg.crypto.VerificationCache` says why that is sound). Default: the
        client verifies everything itself, as a device does.

    Notes
    -----
    ``SetupMessage -> AdvertiseKeys``, ``KeyBroadcast -> EncryptedShares``,
    ``ShareBroadcast -> MaskedInput``, then (malicious) ``SurvivorSet -> ConsistencySignature``, and
    ``UnmaskRequest -> UnmaskResponse``. Keys come from OS entropy; nothing is seeded.
    """

    def __init__(
        self,
        index: int,
        values: np.ndarray | None,
        config: ClientConfig,
        *,
        cache: VerificationCache | None = None,
    ) -> None:
        if not 0 <= int(index) < config.n:
            raise ParameterError("index", index, f"an integer in [0, {config.n})")
        self.index = int(index)
        self.config = config
        self._cache = cache
        self._malicious = config.threat_model == "malicious"
        self._has_input = values is not None
        self._values = self._modular(values) if values is not None else np.empty(0, dtype=np.uint8)
        self.state = ClientState.INIT
        self._session = b""
        self._transcript = b""
        self._identities: _Identities | None = None  # the roster's keys, packed (malicious model)
        self._nbrs: dict[int, frozenset[int]] = {}
        self._mask_keys: KeyPair | None = None
        self._enc_keys: KeyPair | None = None
        self._peer_keys: dict[int, tuple[bytes, bytes]] = {}
        self._seed = b""
        self._enc_pair: dict[int, bytes] = {}
        self._held: dict[int, tuple[int, int]] = {}  # sender -> (seed share, key share)
        self._survivors = np.empty(0, dtype=np.uint32)  # the signed survivor set (sorted)
        self._own_signature = b""

    def _modular(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values)
        if values.size != self.config.length:
            raise DataError(
                f"client {self.index} holds {values.size} values, the task expects "
                f"{self.config.length}"
            )
        return to_modular(values, self.config.bits)

    def provide_input(self, values: np.ndarray) -> None:
        """Give the client its input after construction, at the latest just before its masked input.

        A client built with ``values=None`` takes part in the key stages without its data; the input
        is needed only for the masked input. The in-process driver uses this so that it holds one
        client's vector at a time, not ``n`` of them.

        Parameters
        ----------
        values : numpy.ndarray
            Shape ``(length,)``, integer dtype (reduced mod 2^b, two's complement).

        Raises
        ------
        DataError
            Wrong size or a non-integer dtype.
        SecurityError
            The client already has its input, or is past the masked-input stage.
        """
        if self._has_input:
            raise SecurityError(f"client {self.index} already has its input")
        if self.state not in (ClientState.INIT, ClientState.ADVERTISED, ClientState.SHARED):
            raise SecurityError(f"client {self.index} takes no input in state {self.state.value}")
        self._values = self._modular(values)
        self._has_input = True

    def hold_keys(self, keys: dict[int, bytes]) -> None:
        """Hold more identity keys of the session's bound roster (malicious model).

        A bound roster (:class:`~fedstats.secagg.identity.SessionRoster`) gives a client only some
        keys; the caller adds those it checked against the roster's binding since the setup message,
        e.g. the consistency signers the server names (their cohort tree leaves verified). A key is
        trusted as given: checking it against the binding is the caller's part.

        Parameters
        ----------
        keys : dict of int -> bytes
            Roster position in ``[0, n)`` -> the member's 32-byte Ed25519 key.

        Raises
        ------
        SecurityError
            Before the setup message, for a listed roster, for a position outside ``[0, n)``, a key
            not of 32 bytes, or a position that already holds another key.
        """
        if self._identities is None:
            raise SecurityError(f"client {self.index} holds no roster yet")
        if any(not 0 <= int(j) < self.config.n for j in keys):
            raise SecurityError(f"a roster position outside [0, {self.config.n})")
        self._identities.hold({int(j): bytes(key) for j, key in keys.items()})

    # ------------------------------------------------------------------------------------------
    def expected(self) -> type[Message] | None:
        """The message type the client accepts next (None once done or aborted)."""
        if self.state is ClientState.MASKED:
            return SurvivorSet if self._malicious else UnmaskRequest
        return _EXPECTED.get(self.state)

    def handle_bytes(self, data: bytes) -> bytes:
        """Process one serialized server message and return the serialized reply (the transport API).

        The size limit of the expected stage is checked before parsing. Any error aborts the client.

        Raises
        ------
        SecurityError, DataError, ParameterError, ProtocolAbortError
            As :meth:`handle`; malformed, oversized or unexpected messages raise DataError.
        """
        expect = self.expected()
        if expect is None:
            raise SecurityError(
                f"client {self.index} accepts no message in state {self.state.value}"
            )
        c = self.config
        try:
            limit = max_message_bytes(expect, n=c.n, k=c.k, length=c.length, bits=c.bits)
            msg = decode(data, expect=expect, max_bytes=limit)
        except FedstatsError:
            self._abort()
            raise
        return self.handle(msg).to_bytes()

    def handle(self, message: Message) -> Message:
        """Process one server message and return the reply.

        Raises
        ------
        SecurityError
            Out-of-order, repeated or foreign message, a failed signature or authentication check, or a
            request that breaks security. The client aborts.
        ParameterError, DataError
            The server's parameters differ from the client's configuration. The client aborts.
        ProtocolAbortError
            Too few neighbours or signatures to continue. The client aborts.
        """
        expect = self.expected()
        if expect is None or not isinstance(message, expect):
            state = self.state
            self._abort()
            raise SecurityError(
                f"client {self.index} refuses {type(message).__name__} in state {state.value}"
            )
        try:
            if isinstance(message, SetupMessage):
                return self._advertise(message)
            assert isinstance(message, KeyBroadcast | ShareBroadcast | SurvivorSet | UnmaskRequest)
            self._check_session(message)
            if isinstance(message, KeyBroadcast):
                return self._share(message)
            if isinstance(message, ShareBroadcast):
                return self._masked_input(message)
            if isinstance(message, SurvivorSet):
                return self._sign_survivors(message)
            assert isinstance(message, UnmaskRequest)
            return self._unmask(message)
        except BaseException:
            self._abort()
            raise

    def _abort(self) -> None:
        self._forget_keys()
        self._held = {}
        self._values = np.empty(0, dtype=np.uint8)
        self.state = ClientState.ABORTED

    def _forget_keys(self) -> None:
        self._mask_keys = None
        self._enc_keys = None
        self._seed = b""
        self._enc_pair = {}
        self._peer_keys = {}

    def holds_secrets(self) -> bool:
        """True while the client still holds its input, a private key, its seed or neighbours' shares."""
        return bool(
            self._values.size or self._mask_keys or self._enc_keys or self._seed or self._held
        )

    def _check_session(
        self, m: KeyBroadcast | ShareBroadcast | SurvivorSet | UnmaskRequest
    ) -> None:
        if m.session != self._session:
            raise SecurityError(f"client {self.index} received a message of another session")
        if m.receiver != self.index:
            raise SecurityError(f"message for client {m.receiver} delivered to client {self.index}")

    def _verify(self, public: bytes, signature: bytes, data: bytes) -> bool:
        """Ed25519 check of a peer's signature (through the shared cache when there is one)."""
        if self._cache is not None:
            return self._cache.verify(public, signature, data)
        return verify_signature(public, signature, data)

    def _signed(self, msg: _Reply) -> _Reply:
        """``msg`` signed with the client's identity key (malicious model; else as it is, unsigned)."""
        if not self._malicious:
            return msg
        assert self.config.identity is not None
        return dataclasses.replace(msg, signature=self.config.identity.sign(msg.signed_bytes()))

    # -- stage advertise_keys ---------------------------------------------------------------------
    def _advertise(self, setup: SetupMessage) -> AdvertiseKeys:
        c = self.config
        if setup.client != self.index:
            raise SecurityError(f"setup for client {setup.client} sent to client {self.index}")
        got = (setup.n, setup.k, setup.t, setup.bits, setup.length, setup.min_survivors)
        want = (c.n, c.k, c.t, c.bits, c.length, c.min_survivors)
        if got != want or setup.threat_model != c.threat_model:
            raise SecurityError(
                f"client {self.index} refuses the server's parameters "
                f"(n, k, t, bits, length, min_survivors, threat model) = {(*got, setup.threat_model)}; "
                f"its task configuration says {(*want, c.threat_model)}"
            )
        if self._malicious:
            assert c.verifier is not None and c.identity is not None
            if setup.neighbors:
                raise SecurityError("the server may not choose neighbours in the malicious model")
            if self._cache is not None:
                roster, transcript = self._cache.roster(setup.roster, c.verifier, max_clients=c.n)
            else:
                roster = SessionRoster.from_bytes(setup.roster, max_clients=c.n)
                c.verifier.verify(roster)
                transcript = roster_transcript(roster)
            if roster.n != c.n or roster.task_id != c.task_id or roster.session != setup.session:
                raise SecurityError("the session roster does not match the task or the session")
            if roster.identities[self.index] != c.identity.public:
                raise SecurityError(f"the roster does not list client {self.index}'s identity key")
            self._identities = _Identities(roster.identities, bound=roster.bound)
            own = public_neighbors(c.n, c.k, roster.session, [self.index])[self.index]
            self._nbrs = public_neighbors(c.n, c.k, roster.session, [self.index, *own])
            self._transcript = transcript
        else:
            nb = setup.neighbors
            if len(nb) != c.k or len(set(nb)) != c.k or any(not 0 <= j < c.n for j in nb):
                raise SecurityError(
                    f"client {self.index} needs exactly k={c.k} distinct neighbours"
                )
            if self.index in nb:
                raise SecurityError(f"client {self.index} is listed as its own neighbour")
            self._nbrs = {self.index: frozenset(nb)}
        self._session = setup.session
        self._mask_keys = generate_key_pair()
        self._enc_keys = generate_key_pair()
        self.state = ClientState.ADVERTISED
        return self._signed(
            AdvertiseKeys(self._session, self.index, self._mask_keys.public, self._enc_keys.public)
        )

    # -- stage share_keys -------------------------------------------------------------------------
    def _share(self, msg: KeyBroadcast) -> EncryptedShares:
        c, enc_keys, mask_keys = self.config, self._enc_keys, self._mask_keys
        assert enc_keys is not None and mask_keys is not None
        neighbors = self._nbrs[self.index]
        if not set(msg.keys) <= neighbors:
            raise SecurityError(f"client {self.index} received keys of non-neighbours")
        if len(msg.keys) < c.t:
            raise ProtocolAbortError(
                f"client {self.index}: only {len(msg.keys)} neighbours advertised keys, threshold t={c.t}"
            )
        if self._malicious:
            assert self._identities is not None
            if msg.transcript != self._transcript:
                raise SecurityError(f"client {self.index} received a foreign key transcript")
            for j, (c_pk, s_pk, sig) in msg.keys.items():
                ad = AdvertiseKeys(self._session, j, c_pk, s_pk)
                if not self._verify(self._identities[j], sig, ad.signed_bytes()):
                    raise SecurityError(
                        f"client {self.index}: the key advertisement of client {j} is not signed by "
                        "its certified identity"
                    )
        else:
            self._transcript = msg.transcript
        all_keys = [pk for c_pk, s_pk, _ in msg.keys.values() for pk in (c_pk, s_pk)]
        for pk in all_keys:
            check_public_key(pk)
        all_keys += [mask_keys.public, enc_keys.public]
        if len(set(all_keys)) != len(all_keys):
            raise SecurityError(f"client {self.index} received repeated public keys")
        self._peer_keys = {j: (v[0], v[1]) for j, v in msg.keys.items()}
        self._seed = os.urandom(32)
        peers = sorted(msg.keys)
        xs = [p + 1 for p in peers]
        seed_shares = split_secret(self._seed, threshold=c.t, xs=xs)
        key_shares = split_secret(mask_keys.private_bytes(), threshold=c.t, xs=xs)
        cts = {}
        for peer, bs, ks in zip(peers, seed_shares, key_shares, strict=True):
            pt = _PLAINTEXT.pack(
                self.index,
                peer,
                bs.to_bytes(SHARE_BYTES, "little"),
                ks.to_bytes(SHARE_BYTES, "little"),
            )
            cts[peer] = encrypt_share(
                self._pair_key(enc_keys, peer),
                pt,
                session=self._transcript,
                sender=self.index,
                receiver=peer,
            )
        self.state = ClientState.SHARED
        commitment = seed_commitment(self._transcript, self.index, self._seed)
        return self._signed(EncryptedShares(self._session, self.index, commitment, cts))

    def _pair_key(self, enc_keys: KeyPair, peer: int) -> bytes:
        cached = self._enc_pair.get(peer)
        if cached is not None:
            return cached
        key = pair_key(
            enc_keys.private,
            self._peer_keys[peer][1],
            session=self._transcript,
            label=LABEL_SHARE_ENCRYPTION,
            me=self.index,
            peer=peer,
        )
        self._enc_pair[peer] = key
        return key

    # -- stage masked_input -----------------------------------------------------------------------
    def _masked_input(self, msg: ShareBroadcast) -> MaskedInput:
        c, enc_keys, mask_keys = self.config, self._enc_keys, self._mask_keys
        assert enc_keys is not None and mask_keys is not None
        if not set(msg.ciphertexts) <= set(self._peer_keys):
            raise SecurityError(f"client {self.index} received shares from unknown senders")
        if len(msg.ciphertexts) < c.t:
            raise ProtocolAbortError(
                f"client {self.index}: only {len(msg.ciphertexts)} neighbours shared, threshold t={c.t}"
            )
        held = {}
        for sender, ct in msg.ciphertexts.items():
            pt = decrypt_share(
                self._pair_key(enc_keys, sender),
                ct,
                session=self._transcript,
                sender=sender,
                receiver=self.index,
            )
            if len(pt) != _PLAINTEXT.size:
                raise SecurityError(f"malformed share from client {sender}")
            s, r, bs, ks = _PLAINTEXT.unpack(pt)
            if s != sender or r != self.index:
                raise SecurityError(f"share from client {sender} names sender {s} and receiver {r}")
            held[sender] = (int.from_bytes(bs, "little"), int.from_bytes(ks, "little"))
        if not self._has_input:
            raise ParameterError(
                "values", None, "the client's input, given before its masked input is due"
            )
        y = self._values
        tr, me = self._transcript, self.index
        masks = [(self_mask_seed(tr, me, self._seed), +1)]
        for peer in sorted(msg.ciphertexts):
            peer_public = self._peer_keys[peer][0]
            seed = pair_key(
                mask_keys.private, peer_public, session=tr, label=LABEL_MASK, me=me, peer=peer
            )
            masks.append((seed, mask_sign(me, peer)))
        add_masks(y, masks, scratch=mask_scratch())
        self._held = held
        # Forget: the plain input (overwritten by y, handed over below), keys and the self-mask seed.
        self._values = np.empty(0, dtype=y.dtype)
        self._forget_keys()
        self.state = ClientState.MASKED
        return self._signed(MaskedInput(self._session, self.index, c.bits, y))

    # -- stage consistency (malicious) ------------------------------------------------------------
    def _sign_survivors(self, msg: SurvivorSet) -> ConsistencySignature:
        c = self.config
        assert c.identity is not None
        if msg.n != c.n:
            raise SecurityError(f"survivor set over {msg.n} clients, the task has {c.n}")
        if self.index not in msg.survivors:
            raise SecurityError(
                f"client {self.index} refuses to sign a survivor set without itself"
            )
        if len(msg.survivors) < c.min_survivors:
            raise ProtocolAbortError(
                f"survivor set of {len(msg.survivors)} clients, fewer than min_survivors={c.min_survivors}"
            )
        self._survivors = np.asarray(msg.survivors, dtype=np.uint32)
        self._own_signature = c.identity.sign(survivor_statement(self._session, c.n, msg.survivors))
        self.state = ClientState.SIGNED
        return ConsistencySignature(self._session, self.index, self._own_signature)

    def signature_threshold(self) -> int:
        """Signatures on ``(session, S)`` needed from ``N(j)`` before revealing anything about ``j``.

        Returns ``t``. Claim: if, for some client ``j``, two survivor sets ``S`` and ``S'`` that disagree
        on ``j`` each carry ``t`` valid signatures from clients of ``N(j)``, then ``N(j)`` holds at least
        ``2t - k`` corrupt clients. Proof: an honest client signs at most one set per session (it answers
        the consistency stage once), so the honest signers of ``S`` and of ``S'`` are disjoint subsets
        of the ``k - c_j`` honest clients of ``N(j)``, where ``c_j`` is the number of corrupt ones. Each
        set has at least ``t - c_j`` honest signers, hence ``2 (t - c_j) <= k - c_j``, i.e.
        ``c_j >= 2t - k``. The parameters of the malicious model are chosen
        (:func:`~fedstats.secagg.params.find_parameters`) so that no client has ``2t - k`` corrupt
        neighbours except with probability ``2^-sigma``; so, under that corruption bound, all honest
        clients that reveal anything about ``j`` decide from sets that agree on ``j``: they all reveal
        ``j``'s seed share, or all its key share, never both. The corrupt neighbours of ``j`` (fewer than
        ``2t - k <= t``) cannot reach ``t`` shares of the other secret alone, so the server never
        holds both ``b_j`` and ``sk_j``. A threshold below ``t`` would break the counting
        (``2 (T - c_j) <= k - c_j`` no longer contradicts the bound), and ``t`` signers are anyway needed
        to reconstruct ``j``'s secret, so a higher one would only cost dropout tolerance.
        """
        return self.config.t

    # -- stage unmask -----------------------------------------------------------------------------
    def _unmask(self, msg: UnmaskRequest) -> UnmaskResponse:
        if self._malicious:
            seeds, keys = self._decide_from_signed_set(msg)
        else:
            seeds, keys = self._decide_from_request(msg)
        signed = self._signed(
            UnmaskResponse(
                self._session,
                self.index,
                {j: self._held[j][0] for j in sorted(seeds)},
                {j: self._held[j][1] for j in sorted(keys)},
            )
        )
        self._held = {}  # answer at most once, then forget the shares
        self.state = ClientState.DONE
        return signed

    def _decide_from_signed_set(self, msg: UnmaskRequest) -> tuple[set[int], set[int]]:
        assert self._identities is not None
        if msg.survivors or msg.dropped:
            raise SecurityError(
                "a malicious-model client decides from the signed survivor set only"
            )
        identities = self._identities
        listed = self._survivors.tolist()
        survivors = set(listed)
        statement = survivor_statement(self._session, self.config.n, tuple(listed))
        threshold = self.signature_threshold()
        # Verify lazily, neighbourhood by neighbourhood, each signer at most once, and only while the
        # neighbourhood lacks signatures (an invalid signature simply does not count). Whether each
        # N(j) reaches t valid signers does not depend on the order; signers in many of the held
        # neighbourhoods go first so that few signatures are checked. Set operations, not Python
        # loops over k^2 pairs.
        signers = (survivors & msg.signatures.keys()) - {self.index}
        if identities.bound:  # a signer whose key this client does not hold does not count
            signers = {m for m in signers if identities.holds(m)}
        coverage = Counter(chain.from_iterable(self._nbrs[j] & signers for j in self._held))
        valid = {self.index}
        checked: set[int] = set()
        for j in sorted(self._held):
            count = len(self._nbrs[j] & valid)
            if count < threshold:
                todo = sorted((self._nbrs[j] & signers) - checked, key=lambda m: (-coverage[m], m))
                for m in todo:
                    checked.add(m)
                    if self._verify(identities[m], msg.signatures[m], statement):
                        valid.add(m)
                        count += 1
                        if count >= threshold:
                            break
            if count < threshold:
                raise ProtocolAbortError(
                    f"client {self.index}: only {count} neighbours of client {j} signed the survivor "
                    f"set, {threshold} needed before revealing anything about it"
                )
        held = set(self._held)
        return held & survivors, held - survivors

    def _decide_from_request(self, msg: UnmaskRequest) -> tuple[set[int], set[int]]:
        survivors, dropped = set(msg.survivors), set(msg.dropped)
        both = survivors & dropped
        if both:
            raise SecurityError(
                f"client {self.index} refuses to reveal both the self-mask share and the key share "
                f"of client(s) {sorted(both)}"
            )
        if self.index in survivors | dropped:
            raise SecurityError(f"client {self.index} was asked for shares of its own secrets")
        unknown = (survivors | dropped) - set(self._held)
        if unknown:
            raise SecurityError(
                f"client {self.index} holds no shares of client(s) {sorted(unknown)}"
            )
        return survivors, dropped


class _Identities:
    """A roster's identity keys: ``ids[j]`` is client ``j``'s key.

    A listed roster's keys are packed in one bytes object (32 bytes each, not ``n`` bytes objects); a
    bound roster's are the held ones only (``{position: key}``), and asking for another raises.
    """

    __slots__ = ("_blob", "_held")

    def __init__(self, identities: tuple[bytes, ...], *, bound: bool = False) -> None:
        self._held: dict[int, bytes] | None = None
        self._blob = b""
        if bound:
            self._held = {j: key for j, key in enumerate(identities) if key}
            if set(map(len, self._held.values())) - {32}:
                raise SecurityError("a roster identity key must be 32 bytes")
            return
        if set(map(len, identities)) - {32}:  # every key 32 bytes (the lengths counted in C)
            raise SecurityError("a roster identity key must be 32 bytes")
        self._blob = b"".join(identities)

    @property
    def bound(self) -> bool:
        """Whether only some keys are held (a bound roster)."""
        return self._held is not None

    def holds(self, j: int) -> bool:
        """Whether client ``j``'s key is held (always, for a listed roster's clients)."""
        if self._held is None:
            return 0 <= j < len(self._blob) // 32
        return j in self._held

    def hold(self, keys: dict[int, bytes]) -> None:
        """Hold more keys of a bound roster (checked by the caller against its binding)."""
        if self._held is None:
            raise SecurityError("a listed roster's keys are fixed by its signature")
        held = set(self._held.values())
        for j, key in keys.items():
            if len(key) != 32:
                raise SecurityError("a roster identity key must be 32 bytes")
            if self._held.get(j, key) != key:
                raise SecurityError(f"roster position {j} already holds another key")
            if key in held and self._held.get(j) != key:
                raise SecurityError("a roster lists one identity key at two positions")
            held.add(key)
        self._held.update(keys)

    def __getitem__(self, j: int) -> bytes:
        if self._held is not None:
            key = self._held.get(j)
            if key is None:
                raise SecurityError(f"this client holds no checked identity key of client {j}")
            return key
        if not 0 <= j < len(self._blob) // 32:
            raise IndexError(j)
        return self._blob[32 * j : 32 * j + 32]
