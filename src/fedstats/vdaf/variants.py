"""The Prio3 variants of draft-irtf-cfrg-vdaf-20, §7.4: :class:`~fedstats.vdaf.prio3.Prio3` with a circuit.

Each variant fixes the algorithm id, the field and the validity circuit (:mod:`fedstats.vdaf.flp.types`);
everything else is :class:`~fedstats.vdaf.prio3.Prio3`'s.
"""

from __future__ import annotations

from fedstats.vdaf import flp as flp_mod
from fedstats.vdaf.field import Field, Field64, Field128
from fedstats.vdaf.prio3 import Prio3

__all__ = [
    "Prio3Count",
    "Prio3Histogram",
    "Prio3MultihotCountVec",
    "Prio3Sum",
    "Prio3SumVec",
    "Prio3SumVecWithMultiproof",
]


class Prio3Count(Prio3):
    """Prio3Count (§7.4.1, id 0x00000001): counts of 0/1 measurements, over Field64."""

    def __init__(self, *, shares: int = 2) -> None:
        super().__init__(0x00000001, flp_mod.Count(Field64), shares)


class Prio3Sum(Prio3):
    """Prio3Sum (§7.4.2, id 0x00000002): sums of integers in ``[0, max_measurement]``, over Field64.

    Parameters
    ----------
    max_measurement : int
        ``>= 1``; e.g. 255 for 8-bit measurements.
    shares : int
        Number of aggregators (default 2).
    """

    def __init__(self, *, max_measurement: int, shares: int = 2) -> None:
        super().__init__(0x00000002, flp_mod.Sum(Field64, max_measurement), shares)


class Prio3SumVec(Prio3):
    """Prio3SumVec (§7.4.3, id 0x00000003): sums of vectors of ``length`` integers in ``[0, max_measurement]``.

    Over Field128. ``chunk_length`` is the ``ParallelSum`` width (§7.4.3.1: about
    ``sqrt(length * bit_length(max_measurement))``).
    """

    def __init__(
        self, *, length: int, max_measurement: int, chunk_length: int, shares: int = 2
    ) -> None:
        super().__init__(
            0x00000003, flp_mod.SumVec(Field128, length, max_measurement, chunk_length), shares
        )


class Prio3Histogram(Prio3):
    """Prio3Histogram (§7.4.4, id 0x00000004): counts per bucket of indices in ``[0, length)``, over Field128."""

    def __init__(self, *, length: int, chunk_length: int, shares: int = 2) -> None:
        super().__init__(0x00000004, flp_mod.Histogram(Field128, length, chunk_length), shares)


class Prio3MultihotCountVec(Prio3):
    """Prio3MultihotCountVec (§7.4.5, id 0x00000005): 0/1 vectors with at most ``max_weight`` ones, over Field128."""

    def __init__(self, *, length: int, max_weight: int, chunk_length: int, shares: int = 2) -> None:
        super().__init__(
            0x00000005, flp_mod.MultihotCountVec(Field128, length, max_weight, chunk_length), shares
        )


class Prio3SumVecWithMultiproof(Prio3):
    """The draft's experimental multiproof SumVec (§7.1.2, id 0xFFFFFFFF), e.g. over Field64 with 3 proofs."""

    def __init__(
        self,
        *,
        field: type[Field],
        num_proofs: int,
        length: int,
        max_measurement: int,
        chunk_length: int,
        shares: int = 2,
    ) -> None:
        super().__init__(
            0xFFFFFFFF,
            flp_mod.SumVec(field, length, max_measurement, chunk_length),
            shares,
            num_proofs,
        )
