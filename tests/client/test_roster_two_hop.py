"""A device's two-hop neighbourhood (:func:`fedstats.client.roster.two_hop`): the consistency signers it counts."""

from __future__ import annotations

import hashlib

import pytest

from fedstats.client.roster import two_hop
from fedstats.secagg.collusion import session_parameters
from fedstats.secagg.graph import public_neighbors


@pytest.mark.parametrize("n", [20, 200, 1000])
def test_two_hop_is_the_neighbours_neighbours(n: int) -> None:
    k = session_parameters(n).k
    sid = hashlib.sha256(b"s").digest()
    rows = public_neighbors(n, k, sid, range(n))
    for i in (0, n // 3, n - 1):
        far = two_hop(n, k, sid, i)
        want = set().union(*(rows[j] for j in rows[i])) - rows[i] - {i}
        assert far == sorted(want)
        assert (
            len(far) <= k
        )  # a ring lattice: the k members within k ring places, less the neighbours
