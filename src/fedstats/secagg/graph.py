"""The communication graph of secure aggregation: a Harary graph under a random permutation.

Bell et al. 2020 (App. B of Pang et al. 2023, Alg. 3 and Def. 4): ``HARARY(n, k)`` joins ``i`` and ``j``
when their distance on the ring of ``n`` positions is at most ``k / 2``; renaming the nodes with a uniformly
random permutation ``pi`` gives each client ``k`` neighbours that look like a random ``k``-subset of the
others, while the graph stays exactly ``k``-regular. fedstats uses even ``k`` (the ring definition is
symmetric only then) or ``k = n - 1`` (the complete graph).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import lru_cache

import numpy as np

from fedstats._validation import check_int
from fedstats.errors import ParameterError
from fedstats.randomness import RNG
from fedstats.secagg.crypto import expand_mask

__all__ = [
    "check_degree",
    "harary_neighbors",
    "public_harary_graph",
    "public_neighbors",
    "public_two_hop",
    "random_harary_graph",
    "valid_degree",
]


def valid_degree(n: int, k: int) -> bool:
    """True when ``HARARY(n, k)`` is defined here: ``k = n - 1``, or ``k`` even with ``2 <= k < n - 1``."""
    return k == n - 1 or (k % 2 == 0 and 2 <= k < n - 1)


def check_degree(n: int, k: int) -> None:
    """Refuse (ParameterError) a degree ``k`` for which ``HARARY(n, k)`` is not defined here."""
    if not valid_degree(n, k):
        raise ParameterError("k", k, f"an even integer in [2, {n - 2}] or {n - 1} (complete graph)")


def _ring(n: int, k: int) -> tuple[int, np.ndarray]:
    """``n`` (checked) and the ring offsets of a node's neighbours in ``HARARY(n, k)`` (``k`` checked)."""
    n = check_int("clients", n, low=2)
    check_degree(n, k)
    if k == n - 1:
        return n, np.arange(1, n, dtype=np.int64)
    h = k // 2
    return n, np.concatenate([np.arange(1, h + 1), np.arange(n - h, n)]).astype(np.int64)


def _rename(base: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """The graph ``base`` with the node at ring position ``p`` renamed ``pi[p]``, rows sorted."""
    out = np.empty_like(base)
    out[pi] = pi[base]
    return np.sort(out, axis=1)


def harary_neighbors(n: int, k: int) -> np.ndarray:
    """Neighbours in ``HARARY(n, k)`` before renaming.

    Parameters
    ----------
    n : int
        Number of nodes, >= 2.
    k : int
        Degree: even in ``[2, n - 2]`` or ``n - 1``.

    Returns
    -------
    numpy.ndarray
        Shape ``(n, k)``, int64: row ``i`` lists the neighbours of ``i`` (sorted).

    Raises
    ------
    ParameterError
        If ``k`` is not a valid degree for ``n``.
    """
    n, offsets = _ring(n, k)
    i = np.arange(n, dtype=np.int64)[:, None]
    return np.sort((i + offsets[None, :]) % n, axis=1)


def random_harary_graph(n: int, k: int, rng: RNG) -> np.ndarray:
    """``HARARY(n, k)`` with nodes renamed by a uniformly random permutation (Alg. 3, INITSECUREAGG).

    Parameters
    ----------
    n, k : int
        As in :func:`harary_neighbors`.
    rng : numpy.random.Generator or SecureGenerator
        Source of the permutation (public randomness: the graph is known to everyone).

    Returns
    -------
    numpy.ndarray
        Shape ``(n, k)``, int64: row ``c`` lists the neighbours of client ``c`` in increasing order.
    """
    base = harary_neighbors(n, k)
    return _rename(base, np.asarray(rng.permutation(n), dtype=np.int64))


def public_harary_graph(n: int, k: int, seed: bytes) -> np.ndarray:
    """``HARARY(n, k)`` renamed by a permutation derived deterministically from public randomness.

    Used by the malicious-server protocol: every client recomputes its own neighbourhood from the
    authority-signed session id, so the server cannot choose the graph. The permutation sorts ``n``
    64-bit words of the AES-256-CTR keystream keyed by ``SHA-256(label || seed)`` (ties, probability
    below ``n^2 / 2^65``, broken by index), which is uniform up to those ties and identical on every
    platform.

    Parameters
    ----------
    n, k : int
        As in :func:`harary_neighbors`.
    seed : bytes
        Public randomness (the session id).

    Returns
    -------
    numpy.ndarray
        Shape ``(n, k)``, int64, rows sorted.
    """
    base = harary_neighbors(n, k)
    return _rename(base, _public_permutation(n, seed))


def _public_permutation(n: int, seed: bytes) -> np.ndarray:
    return _cached_permutation(int(n), bytes(seed))[0]


@lru_cache(maxsize=16)
def _cached_permutation(n: int, seed: bytes) -> tuple[np.ndarray, np.ndarray]:
    # A pure function of public inputs; every client of a simulated session asks for the same one, so
    # it is computed once (read-only, so no caller can change what the next one gets). Returns the
    # permutation (ring position -> client) and its inverse (client -> ring position).
    key = hashlib.sha256(b"fedstats/secagg/v2/graph\x00" + seed).digest()
    words = expand_mask(key, n, 64)
    perm = np.argsort(words, kind="stable").astype(np.int64)
    pos = np.empty(n, dtype=np.int64)
    pos[perm] = np.arange(n, dtype=np.int64)
    perm.setflags(write=False)
    pos.setflags(write=False)
    return perm, pos


def public_neighbors(
    n: int, k: int, seed: bytes, clients: Iterable[int]
) -> dict[int, frozenset[int]]:
    """Rows of :func:`public_harary_graph` for some clients only (O(n log n) time, O(n) memory).

    Parameters
    ----------
    n, k, seed
        As in :func:`public_harary_graph`.
    clients : iterable of int
        Clients in ``[0, n)`` whose neighbourhoods are wanted.

    Returns
    -------
    dict int -> frozenset of int
        Each client's ``k`` neighbours.
    """
    n, offsets = _ring(n, k)
    seed = bytes(seed)
    pi, pos = _cached_permutation(n, seed)
    known = _cached_rows(n, k, seed)
    ids = [int(c) for c in clients]
    todo = [c for c in dict.fromkeys(ids) if c not in known]
    if todo:
        rows = pi[(pos[np.asarray(todo, dtype=np.int64)][:, None] + offsets[None, :]) % n]
        known.update(zip(todo, map(frozenset, rows.tolist()), strict=True))
    return {c: known[c] for c in ids}


@lru_cache(maxsize=16)
def _cached_rows(n: int, k: int, seed: bytes) -> dict[int, frozenset[int]]:
    # Neighbourhoods already computed in this session, shared by every caller (the simulated clients
    # each ask for theirs and their neighbours': k + 1 rows each). Rows are immutable public data, a
    # pure function of (n, k, seed); they are filled on demand, so a device holds only the rows it
    # asked for, not n of them.
    del n, k, seed  # only the cache key
    return {}


def public_two_hop(n: int, k: int, seed: bytes, client: int) -> frozenset[int]:
    """The clients two hops from ``client`` in :func:`public_harary_graph`, less it and its neighbours.

    On the ring the neighbours of position ``p`` are ``p +- 1 .. k/2``, so the neighbours' neighbours
    are ``p +- 0 .. k`` (mod ``n``): those beyond ``k/2`` places, less any that wrap onto ``p`` or a
    neighbour, are the union of the neighbours' rows less ``client`` and its neighbours, found in
    O(k) instead of the union's O(k^2). Empty for the complete graph.

    Parameters
    ----------
    n, k, seed
        As in :func:`public_harary_graph`.
    client : int
        A client in ``[0, n)``.

    Returns
    -------
    frozenset of int
        ``union(public_neighbors(..., N(client))) - N(client) - {client}``, ``N(client)`` its row.

    Raises
    ------
    ParameterError
        If ``n`` or ``k`` is invalid (:func:`check_degree`) or ``client`` is not in ``[0, n)``.
    """
    n, _ = _ring(n, k)
    client = check_int("client", client, low=0, high=n - 1)
    near = public_neighbors(n, k, seed, [client])[client]
    if k == n - 1:
        return frozenset()
    pi, pos = _cached_permutation(n, bytes(seed))
    h = k // 2
    steps = np.arange(h + 1, 2 * h + 1, dtype=np.int64)
    ring = np.concatenate([pos[client] + steps, pos[client] - steps]) % n
    return frozenset(pi[ring].tolist()) - near - {client}
