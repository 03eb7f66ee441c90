"""The server side of secure aggregation as an explicit state machine (Bell et al. 2020, Alg. 2).

The server collects one message per client per step (:meth:`SecAggServer.receive`) and closes the step
with :meth:`SecAggServer.advance` (in a deployment: at a deadline), which returns the messages to send next.
Clients that did not answer a step are dropouts. At every step it aborts with
:class:`~fedstats.errors.ProtocolAbortError` when fewer than ``min_survivors`` clients answered, and then
keeps nothing: no partial sum is ever returned.

At the end, the server knows ``sum_{i in A2} x_i mod 2^b`` for the set ``A2`` of clients whose masked
input arrived, and nothing else: it removed the self masks ``r_i`` of the survivors (seed reconstructed from
``t`` shares, checked against the client's commitment) and the pairwise masks between survivors and
clients that dropped after sharing (private key reconstructed from ``t`` shares, checked against the
advertised public key).
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from fedstats.errors import DataError, ParameterError, ProtocolAbortError, SecurityError
from fedstats.randomness import RNG
from fedstats.secagg.client import seed_commitment, self_mask_seed
from fedstats.secagg.crypto import (
    DTYPES,
    LABEL_MASK,
    add_mask,
    agree,
    derive_key,
    public_from_private,
    session_id,
)
from fedstats.secagg.graph import random_harary_graph
from fedstats.secagg.messages import (
    AdvertiseKeys,
    EncryptedShares,
    KeyBroadcast,
    MaskedInput,
    SetupMessage,
    ShareBroadcast,
    UnmaskRequest,
    UnmaskResponse,
)
from fedstats.secagg.params import SecAggParameters
from fedstats.secagg.shamir import reconstruct_secret

__all__ = ["SecAggServer", "ServerState"]

ClientMessage = AdvertiseKeys | EncryptedShares | MaskedInput | UnmaskResponse
ServerMessage = SetupMessage | KeyBroadcast | ShareBroadcast | UnmaskRequest


class ServerState(Enum):
    """Which step's messages the server is collecting."""

    SETUP = "setup"
    ADVERTISE = "advertise"
    SHARE = "share"
    MASKED_INPUT = "masked_input"
    UNMASK = "unmask"
    DONE = "done"
    ABORTED = "aborted"


_EXPECTED: dict[ServerState, type] = {
    ServerState.ADVERTISE: AdvertiseKeys,
    ServerState.SHARE: EncryptedShares,
    ServerState.MASKED_INPUT: MaskedInput,
    ServerState.UNMASK: UnmaskResponse,
}


class SecAggServer:
    """The aggregating server of one session.

    Parameters
    ----------
    params : SecAggParameters
        ``n``, ``k``, ``t`` and ``min_survivors`` (see :func:`~fedstats.secagg.params.find_parameters`).
    length : int
        Vector length ``l`` of every client's input, >= 1.
    bits : int
        Modulus width ``b`` in {16, 32, 64}: inputs and the sum live in Z / 2^b Z.
    round_id : bytes
        Unique id of this aggregation (bound into the session id, hence into every key).
    rng : numpy.random.Generator or SecureGenerator
        Public randomness for the graph permutation.

    Attributes
    ----------
    state : ServerState
    neighbors : numpy.ndarray
        ``(n, k)`` int64 neighbour lists.
    advertised, shared, masked, responded : set of int
        The sets ``A0``, ``A1``, ``A2``, ``A3`` of clients that completed each step.
    """

    def __init__(
        self, params: SecAggParameters, *, length: int, bits: int, round_id: bytes, rng: RNG
    ) -> None:
        if bits not in DTYPES:
            raise ParameterError("bits", bits, "one of 16, 32, 64")
        if length < 1:
            raise ParameterError("length", length, "an integer >= 1")
        self.params = params
        self.length = int(length)
        self.bits = int(bits)
        self.round_id = bytes(round_id)
        self.neighbors = random_harary_graph(params.n, params.k, rng)
        self._nbr_sets = [frozenset(int(v) for v in row) for row in self.neighbors]
        self.state = ServerState.SETUP
        self.session = b""
        self._keys: dict[int, tuple[bytes, bytes]] = {}
        self._commitments: dict[int, bytes] = {}
        self._cts: dict[int, dict[int, bytes]] = {}
        self._acc = np.zeros(self.length, dtype=DTYPES[self.bits])
        self._masked: set[int] = set()
        self._responses: dict[int, UnmaskResponse] = {}
        self._requests: dict[int, UnmaskRequest] = {}
        self._result: np.ndarray | None = None
        self.advertised: set[int] = set()
        self.shared: set[int] = set()
        self.masked: set[int] = set()
        self.responded: set[int] = set()

    # ------------------------------------------------------------------------------------------
    def setup(self) -> dict[int, SetupMessage]:
        """Step 1: the parameters and neighbour list for each client."""
        if self.state is not ServerState.SETUP:
            raise SecurityError("setup() called twice")
        p = self.params
        self.state = ServerState.ADVERTISE
        return {
            c: SetupMessage(
                self.round_id,
                c,
                p.n,
                p.k,
                p.t,
                self.bits,
                self.length,
                tuple(int(v) for v in self.neighbors[c]),
            )
            for c in range(p.n)
        }

    def receive(self, message: ClientMessage) -> None:
        """Accept one client message for the current step.

        Raises
        ------
        SecurityError
            A message of the wrong step, a duplicate, or one from a client not entitled to send it.
        DataError
            A masked input of the wrong length or width.
        """
        expected = _EXPECTED.get(self.state)
        if expected is None or not isinstance(message, expected):
            raise SecurityError(f"unexpected {type(message).__name__} in state {self.state.value}")
        if isinstance(message, AdvertiseKeys):
            self._receive_keys(message)
        elif isinstance(message, EncryptedShares):
            self._receive_shares(message)
        elif isinstance(message, MaskedInput):
            self._receive_masked(message)
        else:
            assert isinstance(message, UnmaskResponse)
            self._receive_unmask(message)

    def _receive_keys(self, m: AdvertiseKeys) -> None:
        if not 0 <= m.client < self.params.n or m.client in self._keys:
            raise SecurityError(f"unexpected or duplicate key advertisement from client {m.client}")
        self._keys[m.client] = (m.mask_public, m.encryption_public)

    def _receive_shares(self, m: EncryptedShares) -> None:
        i = m.sender
        if i not in self.advertised or i in self._commitments:
            raise SecurityError(f"unexpected or duplicate shares from client {i}")
        if set(m.ciphertexts) != self._nbr_sets[i] & self.advertised:
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

    def _receive_unmask(self, m: UnmaskResponse) -> None:
        j = m.sender
        req = self._requests.get(j)
        if req is None or j in self._responses:
            raise SecurityError(f"unexpected or duplicate unmasking response from client {j}")
        if set(m.seed_shares) != set(req.survivors) or set(m.key_shares) != set(req.dropped):
            raise SecurityError(f"client {j} answered shares that were not requested")
        self._responses[j] = m

    # ------------------------------------------------------------------------------------------
    def _check_quorum(self, count: int, step: str) -> None:
        if count < self.params.min_survivors:
            self.state = ServerState.ABORTED
            self._acc[:] = 0
            raise ProtocolAbortError(
                f"only {count} of {self.params.n} clients completed the {step} step; at least "
                f"{self.params.min_survivors} are needed (dropout_rate={self.params.dropout_rate:g}), "
                "so the server aborts without a result"
            )

    def advance(self) -> dict[int, ServerMessage]:
        """Close the current step and return the next messages, keyed by receiving client.

        Returns an empty dict after the unmasking step; the sum is then available from :meth:`result`.

        Raises
        ------
        ProtocolAbortError
            Fewer than ``min_survivors`` clients completed the step, or some secret has fewer than ``t``
            shares. The server keeps no partial result.
        SecurityError
            A reconstructed seed or key does not match its commitment or advertised public key.
        """
        if self.state is ServerState.ADVERTISE:
            self.advertised = set(self._keys)
            self._check_quorum(len(self.advertised), "key advertisement")
            self.session = session_id(self.round_id, self._keys)
            self.state = ServerState.SHARE
            return {
                i: KeyBroadcast(
                    self.session,
                    {j: self._keys[j] for j in sorted(self._nbr_sets[i] & self.advertised)},
                )
                for i in sorted(self.advertised)
            }
        if self.state is ServerState.SHARE:
            self.shared = set(self._commitments)
            self._check_quorum(len(self.shared), "share distribution")
            self.state = ServerState.MASKED_INPUT
            out: dict[int, ServerMessage] = {}
            for j in sorted(self.shared):
                cts = {i: self._cts[i][j] for i in sorted(self._nbr_sets[j] & self.shared)}
                out[j] = ShareBroadcast(j, cts)
            self._cts.clear()
            return out
        if self.state is ServerState.MASKED_INPUT:
            self.masked = set(self._masked)
            self._check_quorum(len(self.masked), "masked input")
            dropped = self.shared - self.masked
            self.state = ServerState.UNMASK
            for j in sorted(self.masked):
                nb = self._nbr_sets[j] & self.shared
                self._requests[j] = UnmaskRequest(
                    tuple(sorted(nb & self.masked)), tuple(sorted(nb & dropped))
                )
            return dict(self._requests)
        if self.state is ServerState.UNMASK:
            self.responded = set(self._responses)
            self._check_quorum(len(self.responded), "unmasking")
            try:
                self._unmask()
            except (ProtocolAbortError, SecurityError):
                self.state = ServerState.ABORTED
                self._acc[:] = 0
                raise
            self.state = ServerState.DONE
            return {}
        raise SecurityError(f"advance() called in state {self.state.value}")

    def _unmask(self) -> None:
        t = self.params.t
        seed_shares: dict[int, list[tuple[int, int]]] = {i: [] for i in self.masked}
        key_shares: dict[int, list[tuple[int, int]]] = {i: [] for i in self.shared - self.masked}
        for j in sorted(self.responded):  # lowest client ids first (Alg. 2, step 8)
            resp = self._responses[j]
            for i, s in resp.seed_shares.items():
                seed_shares[i].append((j + 1, s))
            for i, s in resp.key_shares.items():
                key_shares[i].append((j + 1, s))
        acc = self._acc
        scratch = bytearray((1 << 18) + 15)
        for i in sorted(self.masked):
            if len(seed_shares[i]) < t:
                raise ProtocolAbortError(
                    f"only {len(seed_shares[i])} shares of client {i}'s mask seed arrived, t={t} needed"
                )
            seed = reconstruct_secret(seed_shares[i], threshold=t)
            if seed_commitment(self.session, i, seed) != self._commitments[i]:
                raise SecurityError(
                    f"reconstructed mask seed of client {i} does not match its commitment"
                )
            add_mask(acc, self_mask_seed(self.session, i, seed), sign=-1, scratch=scratch)
        for i in sorted(key_shares):
            live = sorted(self._nbr_sets[i] & self.masked)
            if not live:
                continue
            if len(key_shares[i]) < t:
                raise ProtocolAbortError(
                    f"only {len(key_shares[i])} shares of dropped client {i}'s key arrived, t={t} needed"
                )
            sk = reconstruct_secret(key_shares[i], threshold=t)
            if public_from_private(sk) != self._keys[i][0]:
                raise SecurityError(
                    f"reconstructed key of client {i} does not regenerate its advertised public key"
                )
            for j in live:
                shared = agree(sk, self._keys[j][0])
                seed = derive_key(
                    shared, session=self.session, label=LABEL_MASK, low=min(i, j), high=max(i, j)
                )
                # client j added +m if i > j, else -m; remove it.
                add_mask(acc, seed, sign=-1 if i > j else +1, scratch=scratch)
        self._result = acc

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
