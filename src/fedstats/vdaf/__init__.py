"""Prio3 (draft-irtf-cfrg-vdaf-20): inputs checked by two non-colluding aggregators without seeing them.

A client splits its encoded measurement into additive shares and attaches a secret-shared validity proof;
the aggregators verify the proof jointly (each learns only a few field elements that reveal nothing about
the measurement) and sum only the shares of valid reports. Modules:

* :mod:`fedstats.vdaf.field`: Field64 and Field128, vectorized with numpy (§6.1);
* :mod:`fedstats.vdaf.xof`: XofTurboShake128 over pycryptodome (§6.2);
* :mod:`fedstats.vdaf.flp`: the FLP of BBCGGI19 and the validity circuits (§7.3, §7.4, App. A);
* :mod:`fedstats.vdaf.prio3`: Prio3; :mod:`fedstats.vdaf.variants`: its variants Count, Sum, SumVec, Histogram, MultihotCountVec
  (§7.2, §7.4), with a batch API over many reports.

See ``docs/vdaf.md``.
"""

from __future__ import annotations

from fedstats.vdaf import variants
from fedstats.vdaf.field import Field, Field64, Field128
from fedstats.vdaf.prio3 import InputShares, Prio3, ShardBatch, VerifierShares, VerifyState
from fedstats.vdaf.variants import *  # noqa: F403  (re-exported: every Prio3 variant)

__all__ = [
    "Field",
    "Field64",
    "Field128",
    "InputShares",
    "Prio3",
    "ShardBatch",
    "VerifierShares",
    "VerifyState",
]
__all__ += variants.__all__
