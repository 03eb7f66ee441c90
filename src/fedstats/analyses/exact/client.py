"""Client side of the exact (non-private) baselines: the encoders a device runs.

Imports only numpy and the engine's fixed-point codec, so a device can load it without the server stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.rounds import ClientBatch
from fedstats.randomness import RNG

__all__ = ["encode_table", "encode_value"]


def encode_table(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Flatten each client's contingency table into one report.

    Parameters
    ----------
    batch : ClientBatch
        Column ``params["column"]`` holds the ``(n, m_x, m_y)`` integer tables.
    params : Mapping
        ``{"column": str}``.
    rng : RNG
        Unused: the report is deterministic (part of the encoder signature).

    Returns
    -------
    numpy.ndarray
        int64 ``(batch.n, m_x * m_y)``.
    """
    del rng  # deterministic report
    t = batch.column(params["column"])
    return np.asarray(t, dtype=np.int64).reshape(batch.n, -1)


def encode_value(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Each client's value in fixed point and a count of one: report ``(q, 1)``.

    Parameters
    ----------
    batch : ClientBatch
        Column ``params["column"]`` holds one real value per client.
    params : Mapping
        ``{"column": str, "frac_bits": int, "clip": float}``.
    rng : RNG
        Unused: round-half-to-even keeps the baseline deterministic.

    Returns
    -------
    numpy.ndarray
        int64 ``(batch.n, 2)``.
    """
    del rng  # deterministic rounding
    fp = FixedPoint(int(params["frac_bits"]), float(params["clip"]))
    q, _ = fp.encode(np.asarray(batch.column(params["column"]), dtype=np.float64))
    return np.stack([q, np.ones_like(q)], axis=1)
