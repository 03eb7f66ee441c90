"""A malicious-server test harness for secure aggregation.

:class:`Deployment` sets up what a real deployment has: an enrollment authority, ``n`` **unmodified**
:class:`~fedstats.secagg.SecAggClient` state machines (each with its own configuration and identity key),
and the honest :class:`~fedstats.secagg.SecAggServer` as a source of well-formed messages. The test plays
the server: it talks to the clients only through serialized messages (:meth:`Deployment.send`), may
replace or invent any message with the public message classes, and holds the identity keys of the
clients it corrupts (:attr:`Deployment.corrupt`), as a colluding server would.

:func:`reveals` summarizes what the attacker obtained from the honest clients' unmasking answers;
:func:`assert_learns_only_one_signed_set` checks that honest clients never revealed the seed share of a
client to whom another honest client revealed the key share (so the server learns only the sum over one
survivor set).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from fedstats.errors import FedstatsError
from fedstats.secagg import (
    ClientConfig,
    ClientIdentity,
    EnrollmentAuthority,
    SecAggClient,
    SecAggServer,
    validate_parameters,
)
from fedstats.secagg.graph import public_neighbors
from fedstats.secagg.messages import Message, UnmaskResponse, decode

__all__ = ["Deployment", "assert_learns_only_one_signed_set", "reveals"]


class Deployment:
    """Authority, unmodified clients and a scriptable server for one malicious-model session.

    Parameters
    ----------
    n, k, t : int
        Session parameters (the clients' own configuration).
    corrupt : iterable of int
        Clients colluding with the server: the attacker holds their identity keys.
    min_survivors : int, optional
        Default ``n - n // 10``.
    length, bits : int
    seed : int
        Inputs are drawn from ``numpy.random.default_rng(seed)`` (test data only).
    """

    def __init__(
        self,
        n: int,
        k: int,
        t: int,
        *,
        corrupt: Iterable[int] = (),
        min_survivors: int | None = None,
        length: int = 4,
        bits: int = 32,
        seed: int = 0,
    ) -> None:
        params = validate_parameters(n, k, t, dropout_rate=0.1, threat_model="malicious")
        if min_survivors is not None:
            params = dataclasses.replace(params, min_survivors=min_survivors)
        self.params = params
        self.length, self.bits = length, bits
        self.authority = EnrollmentAuthority()
        self.identities = [ClientIdentity() for _ in range(n)]
        self.roster = self.authority.roster([c.public for c in self.identities])
        self.session = self.roster.session
        self.x = np.random.default_rng(seed).integers(0, 1000, size=(n, length))
        self.configs = [
            ClientConfig.from_parameters(
                params,
                bits=bits,
                length=length,
                identity=self.identities[i],
                verifier=self.authority.verifier(),
            )
            for i in range(n)
        ]
        self.clients = {i: SecAggClient(i, self.x[i], self.configs[i]) for i in range(n)}
        self.corrupt = {i: self.identities[i] for i in corrupt}
        self.server = SecAggServer(params, length=length, bits=bits, roster=self.roster)
        self.nbrs = public_neighbors(n, k, self.session, range(n))
        self.errors: dict[int, FedstatsError] = {}

    def send(self, i: int, msg: Message | bytes) -> Message | None:
        """Deliver a server message (or raw bytes) to client ``i``; its reply, or None if it refused."""
        data = msg if isinstance(msg, bytes) else msg.to_bytes()
        try:
            return decode(self.clients[i].handle_bytes(data))
        except FedstatsError as exc:
            self.errors[i] = exc
            return None

    def restart(self, i: int) -> None:
        """Replace client ``i`` by a fresh one (same configuration) that has accepted the genuine setup."""
        self.clients[i] = SecAggClient(i, self.x[i], self.configs[i])
        self.errors.pop(i, None)
        assert self.send(i, self.setups[i]) is not None

    def honest_until(self, stage: str) -> dict[int, Message]:
        """Run the honest server and all clients; return the server's messages *of* ``stage``.

        ``stage`` is one of ``"setup"``, ``"share_keys"``, ``"masked_input"``, ``"consistency"``,
        ``"unmask"``: the messages are returned undelivered, for the attacker to alter.
        """
        order = ["setup", "share_keys", "masked_input", "consistency", "unmask"]
        out: dict[int, Message] = dict(self.server.setup())
        self.setups = dict(out)
        for name in order[: order.index(stage)]:
            del name
            for i, m in out.items():
                reply = self.send(i, m)
                assert reply is not None, self.errors.get(i)
                self.server.receive_bytes(reply.to_bytes())  # type: ignore[attr-defined]
            out = self.server.advance()
        return out

    def finish_honestly(self, out: dict[int, Message]) -> np.ndarray:
        """Deliver ``out`` and run the honest server to the end; the sum it returns."""
        while out:
            for i, m in out.items():
                reply = self.send(i, m)
                if reply is not None:
                    self.server.receive_bytes(reply.to_bytes())  # type: ignore[attr-defined]
            out = self.server.advance()
        return self.server.result()


def reveals(responses: Iterable[Message | None]) -> tuple[dict[int, int], dict[int, int]]:
    """Count, per client, the seed shares and the key shares revealed in unmasking responses."""
    seeds: dict[int, int] = {}
    keys: dict[int, int] = {}
    for r in responses:
        if isinstance(r, UnmaskResponse):
            for v in r.seed_shares:
                seeds[v] = seeds.get(v, 0) + 1
            for v in r.key_shares:
                keys[v] = keys.get(v, 0) + 1
    return seeds, keys


def assert_learns_only_one_signed_set(responses: Iterable[Message | None], t: int) -> None:
    """No client had its seed share revealed by one honest client and its key share by another, and no
    client has ``t`` shares of both secrets: every honest answer is consistent with one set ``S``."""
    seeds, keys = reveals(responses)
    assert not set(seeds) & set(keys), f"inconsistent reveals for {sorted(set(seeds) & set(keys))}"
    assert not [v for v in seeds if seeds[v] >= t and keys.get(v, 0) >= t]


def call_together(fn: Callable[[int], Any], n: int, threads: int = 8) -> list[Any]:
    """``fn(n)`` from ``threads`` threads released at once (a barrier): what each call returned."""
    start = threading.Barrier(threads)
    got: list[Any] = []

    def ask() -> None:
        start.wait()
        got.append(fn(n))

    workers = [threading.Thread(target=ask) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return got
