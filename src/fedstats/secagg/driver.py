"""In-process driver: ``n`` :class:`SecAggClient` state machines and one :class:`SecAggServer`.

Every message is serialized to bytes and decoded on the other side, exactly as over a network, so the
driver measures the bytes each client sends and receives (per stage) and the compute time of each party.
In the ``"malicious"`` threat model the driver plays the enrollment authority too: it creates each
client's identity key and has an in-process :class:`~fedstats.secagg.identity.EnrollmentAuthority` sign
the session roster (pass ``authority`` to use your own). Dropouts can be injected before any stage:

==================  =======================================================================
stage               the client stops before ...
==================  =======================================================================
``"advertise"``     advertising its public keys
``"share"``         sending its encrypted shares
``"masked_input"``  sending its masked input: its input is not in the sum
``"consistency"``   signing the survivor set (malicious model; in the semi-honest models the same as
                    ``"unmask"``): its input *is* in the sum
``"unmask"``        answering the unmasking request: its input *is* in the sum
==================  =======================================================================
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import numpy as np

from fedstats._validation import check_choice, check_int
from fedstats.errors import DataError, ParameterError, ProtocolAbortError, SecurityError
from fedstats.progress import NullProgress, Progress
from fedstats.randomness import RandomSource
from fedstats.secagg.client import SecAggClient
from fedstats.secagg.crypto import VerificationCache, check_bits
from fedstats.secagg.identity import ClientIdentity, EnrollmentAuthority
from fedstats.secagg.params import ClientConfig, SecAggParameters, find_parameters
from fedstats.secagg.server import SecAggServer

__all__ = ["DROPOUT_STAGES", "SecAggResult", "run_secure_aggregation"]

DROPOUT_STAGES = ("advertise", "share", "masked_input", "consistency", "unmask")

InputSource = np.ndarray | Callable[[int], np.ndarray]


@dataclass
class SecAggResult:
    """Outcome of one in-process run of the protocol.

    Attributes
    ----------
    total : numpy.ndarray
        ``(length,)`` ``uint{bits}``: sum mod 2^bits of the inputs of ``included`` clients.
    included : tuple of int
        Clients whose masked input is in the sum (the survivor set ``S``).
    params : SecAggParameters
    bits : int
    client_seconds : numpy.ndarray
        ``(n,)`` float64: compute time of each client (its state machine and message (de)serialization).
    server_seconds : float
        Compute time of the server.
    bytes_sent, bytes_received : numpy.ndarray
        ``(n,)`` int64: bytes each client sent and received.
    stage_bytes : dict str -> numpy.ndarray
        For each stage run, ``(n,)`` int64 bytes each client sent plus received in it.
    dropped : dict str -> tuple of int
        The clients dropped before each stage.
    client_aborts : tuple of int
        Clients that stopped on their own (too few live neighbours or signatures).
    rejected : tuple of int
        Clients one of whose messages the server refused (then treated as dropouts).
    cheaters : tuple of int
        Clients the server caught sending wrong shares (their shares were ignored).
    signatures_verified : int
        Ed25519 signatures the shared cache verified, each distinct one once (0 when the cache is off:
        then every party verifies on its own and nothing is counted).
    signature_cache_hits : int
        Verifications answered by the shared :class:`~fedstats.secagg.crypto.VerificationCache`
        (0 when it is off): ``signatures_verified + signature_cache_hits`` is what the parties would
        verify on separate devices.
    """

    total: np.ndarray
    included: tuple[int, ...]
    params: SecAggParameters
    bits: int
    client_seconds: np.ndarray
    server_seconds: float
    bytes_sent: np.ndarray
    bytes_received: np.ndarray
    stage_bytes: dict[str, np.ndarray] = field(default_factory=dict)
    dropped: dict[str, tuple[int, ...]] = field(default_factory=dict)
    client_aborts: tuple[int, ...] = ()
    rejected: tuple[int, ...] = ()
    cheaters: tuple[int, ...] = ()
    signatures_verified: int = 0
    signature_cache_hits: int = 0

    @property
    def bytes_per_client(self) -> float:
        """Mean bytes sent plus received per client."""
        return float(np.mean(self.bytes_sent + self.bytes_received))

    def signed_total(self) -> np.ndarray:
        """``total`` read as two's-complement signed integers (int16/32/64)."""
        return self.total.view(f"int{self.bits}")


def _input_fn(inputs: InputSource, n: int | None) -> tuple[int, int, Callable[[int], np.ndarray]]:
    if callable(inputs):
        if n is None:
            raise ParameterError("clients", n, "the number of clients when inputs is a function")
        first = np.asarray(inputs(0))
        return n, int(first.size), inputs
    arr = np.asarray(inputs)
    if arr.ndim != 2 or arr.shape[0] < 2 or arr.shape[1] < 1:
        raise DataError(f"inputs must have shape (n_clients >= 2, length >= 1), got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise DataError(f"secure aggregation inputs must be integers, got dtype {arr.dtype}")
    return arr.shape[0], arr.shape[1], lambda i: arr[i]


def run_secure_aggregation(
    inputs: InputSource,
    *,
    bits: int = 64,
    n: int | None = None,
    params: SecAggParameters | None = None,
    dropouts: Mapping[str, Collection[int]] | None = None,
    randomness: RandomSource | None = None,
    round_id: bytes | None = None,
    channel: Callable[[str, int, bytes], bytes] | None = None,
    authority: EnrollmentAuthority | None = None,
    task_id: bytes = b"fedstats",
    session: bytes | None = None,
    progress: Progress | None = None,
    share_verifications: bool = True,
) -> SecAggResult:
    """Run the whole protocol in-process and return the server's sum.

    Parameters
    ----------
    inputs : numpy.ndarray or callable
        ``(n, length)`` integer array (reduced mod 2^bits, two's complement), or a function
        ``i -> (length,)`` integer array (then ``n`` is required); a function keeps memory at one vector.
    bits : int, default 64
        Modulus width b in {16, 32, 64}.
    n : int, optional
        Number of clients when ``inputs`` is a function.
    params : SecAggParameters, optional
        ``k``, ``t``, ``min_survivors`` and the threat model; default :func:`find_parameters(n)`
        (malicious server).
    dropouts : mapping str -> collection of int, optional
        For each stage in ``DROPOUT_STAGES``, the clients that drop before it.
    randomness : RandomSource, optional
        Public randomness for the graph permutation in the semi-honest models (default: a secure
        source). Keys, seeds and the malicious model's session id always come from OS entropy.
    round_id : bytes, optional
        Round id of the semi-honest models (default: 16 random bytes).
    channel : callable, optional
        ``channel(direction, client, data) -> data`` sees (and may alter) every serialized message in
        transit; ``direction`` is ``"to_client"`` or ``"to_server"``. Models the network (or an attacker on
        it) in tests.
    authority : EnrollmentAuthority, optional
        Malicious model: the authority that signs the roster (default: a fresh in-process one).
    task_id : bytes, default b"fedstats"
        Malicious model: the task named in the roster and in every client's configuration.
    session : bytes, optional
        Malicious model: the 32-byte session id the authority puts in the roster (it fixes the graph).
        Default: fresh OS entropy. A fixed value makes the graph reproducible: tests only, not for
        release.
    share_verifications : bool, default True
        Malicious model: the server and the clients share one
        :class:`~fedstats.secagg.crypto.VerificationCache` for this run, so each distinct signature
        (and the roster) is verified once in the process rather than by every party (the answers are
        the same: see the class for why). False makes every party verify on its own, as separate
        devices would (to measure a device's cost).

    progress : Progress, optional
        Receives one task per stage (``"secure aggregation: <stage>"``, ``n`` units: one per client
        message handled); default none.

    Returns
    -------
    SecAggResult

    Raises
    ------
    ProtocolAbortError
        Too many dropouts at some stage, or unmasking failed (no partial result). A client that cannot
        continue (too few live neighbours or signatures) stops, which the server sees as a dropout; a
        client message the server refuses makes its sender a dropout.
    SecurityError
        A client refused a server message (a check failed).
    ParameterError, DataError
        Bad parameters or inputs.
    """
    check_bits(bits)
    n_clients, length, get = _input_fn(inputs, n)
    n_clients = check_int("clients", n_clients, low=2)
    if params is None:
        params = find_parameters(n_clients)
    if params.n != n_clients:
        raise ParameterError("params.n", params.n, f"the number of clients, {n_clients}")
    malicious = params.threat_model == "malicious"
    stages, drop, alive_at = _dropout_schedule(n_clients, dropouts, malicious)

    randomness = randomness if randomness is not None else RandomSource()
    round_id = round_id if round_id is not None else os.urandom(16)
    ex = _Exchange(n_clients, stages, channel)
    identities: list[ClientIdentity] = []
    verifier = None
    cache = VerificationCache() if malicious and share_verifications else None
    t0 = time.perf_counter()
    if malicious:
        authority = authority if authority is not None else EnrollmentAuthority()
        identities = [ClientIdentity() for _ in range(n_clients)]  # enrollment, before the session
        roster = authority.roster([c.public for c in identities], task_id=task_id, session=session)
        verifier = authority.verifier()
        t0 = time.perf_counter()
        server = SecAggServer(params, length=length, bits=bits, roster=roster, cache=cache)
    else:
        server = SecAggServer(
            params,
            length=length,
            bits=bits,
            round_id=round_id,
            rng=randomness.public("secagg", "graph", round_id.hex()),
        )
    outbox = {i: m.to_bytes() for i, m in server.setup().items()}
    ex.server_time = time.perf_counter() - t0
    clients: dict[int, SecAggClient] = {}

    def client(i: int, stage: str) -> SecAggClient:
        if stage == "advertise":
            config = ClientConfig.from_parameters(
                params,
                bits=bits,
                length=length,
                identity=identities[i] if malicious else None,
                verifier=verifier,
                task_id=task_id,
            )
            # The input is fetched when the masked input is due: one vector in memory at a time.
            clients[i] = SecAggClient(i, None, config, cache=cache)
        elif stage == "masked_input":
            clients[i].provide_input(np.asarray(get(i)))  # data, not compute
        return clients[i]

    bar = progress if progress is not None else NullProgress()
    for stage in stages:
        outbox = ex.stage(stage, outbox, alive_at[stage], client, server, bar)
    return SecAggResult(
        total=server.result(),
        included=tuple(sorted(server.masked)),
        params=params,
        bits=bits,
        client_seconds=ex.client_time,
        server_seconds=ex.server_time,
        bytes_sent=ex.sent,
        bytes_received=ex.received,
        stage_bytes=ex.stage_bytes,
        dropped={s: tuple(sorted(v)) for s, v in drop.items()},
        client_aborts=tuple(sorted(ex.aborted)),
        rejected=tuple(sorted(ex.rejected)),
        cheaters=tuple(sorted(server.cheaters)),
        signatures_verified=cache.verified if cache is not None else 0,
        signature_cache_hits=cache.hits if cache is not None else 0,
    )


def _dropout_schedule(
    n_clients: int, dropouts: Mapping[str, Collection[int]] | None, malicious: bool
) -> tuple[tuple[str, ...], dict[str, set[int]], dict[str, set[int]]]:
    """The stages run, the clients dropping before each, and the clients alive at each (checked)."""
    stages = DROPOUT_STAGES if malicious else tuple(s for s in DROPOUT_STAGES if s != "consistency")
    drop: dict[str, set[int]] = {s: set() for s in DROPOUT_STAGES}
    for stage, ids in (dropouts or {}).items():
        check_choice("dropout stage", stage, DROPOUT_STAGES)
        bad = [i for i in ids if not 0 <= int(i) < n_clients]
        if bad:
            raise ParameterError("dropouts", bad, f"client indices in [0, {n_clients})")
        drop[stage] |= {int(i) for i in ids}
    if not malicious:  # no consistency stage: dropping before it is dropping before unmasking
        drop["unmask"] |= drop["consistency"]
        drop["consistency"] = set()
    gone: set[int] = set()
    alive_at: dict[str, set[int]] = {}
    for stage in stages:
        gone |= drop[stage]
        alive_at[stage] = set(range(n_clients)) - gone
    return stages, drop, alive_at


class _Exchange:
    """The in-process network of one run: delivers each stage's messages, counts bytes and time.

    ``channel(direction, client, data)`` (optional) sees and may alter every serialized message. A
    client that aborts stops (a dropout for the server); a message the server refuses makes its sender
    a dropout.
    """

    def __init__(
        self,
        n_clients: int,
        stages: tuple[str, ...],
        channel: Callable[[str, int, bytes], bytes] | None,
    ) -> None:
        self.channel = channel
        self.client_time = np.zeros(n_clients)
        self.server_time = 0.0
        self.sent = np.zeros(n_clients, dtype=np.int64)
        self.received = np.zeros(n_clients, dtype=np.int64)
        self.stage_bytes = {s: np.zeros(n_clients, dtype=np.int64) for s in stages}
        self.aborted: set[int] = set()
        self.rejected: set[int] = set()

    def stage(
        self,
        stage: str,
        outbox: dict[int, bytes],
        alive: set[int],
        client: Callable[[int, str], SecAggClient],
        server: SecAggServer,
        bar: Progress,
    ) -> dict[int, bytes]:
        """Deliver ``outbox`` to the live clients, their replies to the server; the next outbox."""
        task = f"secure aggregation: {stage}"
        bar.start(task, len(outbox))
        for i, data in outbox.items():
            bar.advance(task)
            if self.channel is not None:
                data = self.channel("to_client", i, data)
            self.received[i] += len(data)
            self.stage_bytes[stage][i] += len(data)
            if i not in alive or i in self.aborted or i in self.rejected:
                continue
            party = client(i, stage)
            t1 = time.perf_counter()
            try:
                reply = party.handle_bytes(data)
            except ProtocolAbortError:
                self.aborted.add(i)  # the client stops: a dropout for the server
                continue
            finally:
                self.client_time[i] += time.perf_counter() - t1
            self.sent[i] += len(reply)
            self.stage_bytes[stage][i] += len(reply)
            if self.channel is not None:
                reply = self.channel("to_server", i, reply)
            t2 = time.perf_counter()
            # Deliver at once (as a network would), so the server never holds n vectors.
            try:
                server.receive_bytes(reply)
            except (SecurityError, DataError):
                self.rejected.add(i)  # refused message: the sender is a dropout
            finally:
                self.server_time += time.perf_counter() - t2
        bar.finish(task)
        t3 = time.perf_counter()
        try:
            return {i: m.to_bytes() for i, m in server.advance().items()}
        finally:
            self.server_time += time.perf_counter() - t3
