"""A run's commitment list as a device keeps it (:class:`PackedMembers`), for :mod:`fedstats.client.secure`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedstats.errors import SecurityError
from fedstats.wire import seeding

__all__ = ["PackedMembers"]


class PackedMembers:
    """A run's commitment list as a device keeps it: a few flat buffers, not ``n`` Python rows.

    A device checks the whole list before it reveals and needs the members' ids, slots and identity
    keys afterwards (every round derives its sessions from the cohort, and each session's roster from
    the keys); it keeps them in one bytes object per column (ids, commitments, keys) and numpy arrays
    (offsets, slots): about 120 bytes per member instead of a few kilobytes of parsed JSON rows,
    tuples and hex strings. The commitments are dropped once the seed verified
    (:meth:`drop_commitments`).

    Parameters
    ----------
    entries : sequence of (client_id, commitment_hex, slot_start, slot_count)
        The checked commitment list (:func:`fedstats.wire.seeding.entries_of`).
    keys : sequence of str
        Each member's identity key (hex), in list order (:func:`fedstats.wire.seeding.keys_of`).
    """

    __slots__ = ("_commitments", "_ids", "_keys", "_offsets", "_slots")

    def __init__(self, entries: Sequence[seeding.Entry], keys: Sequence[str]) -> None:
        if len(entries) != len(keys):
            raise SecurityError("the run's roster does not list one key per member")
        encoded = [str(e[0]).encode() for e in entries]
        self._ids = b"".join(encoded)
        self._offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=self._offsets[1:])
        self._commitments: bytes | None = b"".join(bytes.fromhex(e[1]) for e in entries)
        self._slots = np.array([(int(e[2]), int(e[3])) for e in entries], dtype=np.int64).reshape(
            -1, 2
        )
        self._keys = b"".join(bytes.fromhex(k) for k in keys)

    def __len__(self) -> int:
        return int(self._offsets.size - 1)

    def ids(self) -> list[str]:
        """The members' client ids, in list order."""
        o, blob = self._offsets.tolist(), self._ids
        return [blob[o[i] : o[i + 1]].decode() for i in range(len(o) - 1)]

    def entries(self) -> list[seeding.Entry]:
        """The commitment list as :func:`fedstats.wire.seeding.entries_of` parsed it."""
        if self._commitments is None:
            raise SecurityError("the device no longer holds the run's commitments")
        c = self._commitments
        return [
            (cid, c[32 * i : 32 * i + 32].hex(), start, count)
            for i, (cid, (start, count)) in enumerate(
                zip(self.ids(), self._slots.tolist(), strict=True)
            )
        ]

    def cohort(self) -> list[tuple[str, int, int]]:
        """``[(client_id, slot_start, slot_count), ...]`` in list order (:func:`seeding.cohort_of`)."""
        return [
            (cid, start, count)
            for cid, (start, count) in zip(self.ids(), self._slots.tolist(), strict=True)
        ]

    def slot_total(self) -> int:
        """The sum of the members' slot counts (the run's ``n_clients``)."""
        return int(self._slots[:, 1].sum())

    def key_map(self) -> dict[str, bytes]:
        """``client_id -> identity key`` (32 bytes) of every member."""
        k = self._keys
        return {cid: k[32 * i : 32 * i + 32] for i, cid in enumerate(self.ids())}

    def drop_commitments(self) -> None:
        """Forget the commitments (needed only until the seed verified)."""
        self._commitments = None

    def nbytes(self) -> int:
        """The bytes held in the buffers."""
        held = len(self._ids) + len(self._keys) + len(self._commitments or b"")
        return held + self._offsets.nbytes + self._slots.nbytes
