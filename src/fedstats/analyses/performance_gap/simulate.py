r"""Fast path of the performance gap: many independent runs of the mechanism without the engine.

:func:`simulate_sums` applies the clients' encoder (:func:`~.client.perturb`) to tiled data and adds up
each run's per-group sums, as the protocol's round would: for Monte Carlo studies of the estimator (Appendix
C of Juarez & Korolova 2023, the tests' unbiasedness and variance checks). With ``runs=1`` and the same
generator it gives exactly the sums of one round whose clients draw from that generator.
"""

from __future__ import annotations

import numpy as np

from fedstats._validation import check_int
from fedstats.analyses.performance_gap.client import perturb
from fedstats.analyses.performance_gap.mechanisms import GapMechanism
from fedstats.analyses.performance_gap.protocol import report_params
from fedstats.randomness import RNG

__all__ = ["simulate_sums"]

_CHUNK_RUNS = 20_000


def simulate_sums(
    groups: np.ndarray,
    values: np.ndarray,
    mech: GapMechanism,
    rng: RNG,
    *,
    runs: int = 1,
    resolution_bits: int = 16,
    clip_scales: float = 40.0,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Per-group sums of reported values and report counts for ``runs`` independent runs.

    Parameters
    ----------
    groups : numpy.ndarray of int, shape (n,)
        Group codes in ``[0, d)``.
    values : numpy.ndarray of float, shape (n,)
        Values in [-1, 1].
    mech : GapMechanism
        Mechanism and budget split.
    rng : RNG
        The clients' randomness (runs are drawn in chunks of 20 000 runs, in order).
    runs : int, default 1
        Independent repetitions, >= 1.
    resolution_bits : int, default 16
        :math:`\mathcal M_L`'s grid (see :func:`.protocol.report_params`).
    clip_scales : float, default 40
        :math:`\mathcal M_L`'s clipping range in noise scales (see :func:`.protocol.report_params`).

    Returns
    -------
    value_sums : numpy.ndarray of float64, shape (runs, d)
        :math:`S_g` per run, in value units (as :class:`~.protocol.GapSums`).
    counts : numpy.ndarray of int64, shape (runs, d)
        :math:`N'_g` per run.

    Raises
    ------
    ParameterError
        If ``runs`` < 1 or the grid parameters are out of range.
    """
    runs = check_int("runs", runs, low=1)
    params = report_params(mech, resolution_bits, clip_scales)
    g = np.asarray(groups, dtype=np.int64)
    v = np.asarray(values, dtype=np.float64)
    d = mech.n_groups
    scale = float(params["half"]) if mech.kind == "L" else 1.0
    sums = np.zeros((runs, d))
    counts = np.zeros((runs, d), dtype=np.int64)
    done = 0
    while done < runs:
        r = min(_CHUNK_RUNS, runs - done)
        new_g, y, _ = perturb(np.tile(g, r), np.tile(v, r), params, rng)
        run = np.repeat(np.arange(done, done + r), g.size)
        np.add.at(sums, (run, new_g), y / scale)
        np.add.at(counts, (run, new_g), 1)
        done += r
    return sums, counts
