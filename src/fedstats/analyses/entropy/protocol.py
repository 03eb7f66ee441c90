"""FED-H and the G-test, server side: two-round protocols on the engine (Pang et al., ICML 2023, Sec. 3.5).

* :func:`fed_entropy_protocol`: round 1 sums the histogram sizes (one count per client), round 2 the two
  stable projections of each client's normalised histogram; the server decodes the entropy.
* :func:`g_test_protocol`: round 1 sums the marginals of the clients' tables (the exact marginal entropies
  and ``|v|``), round 2 the projections of the normalised joint tables (FED-H on ``H_XY``); the server
  returns ``G = 2 |v| (H_X + H_Y - H_XY)`` with its interval and p-value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedstats._validation import check_int, check_open_unit
from fedstats.analyses.chi2.estimator import Chi2Result, check_shape, kept_cells
from fedstats.analyses.entropy.client import (
    encode_entropy_projection,
    encode_histogram_size,
    encode_marginals,
)
from fedstats.analyses.entropy.estimator import (
    DEFAULT_FD_STEP,
    EntropyResult,
    check_options,
    entropy_result,
    g_result,
    projection_abs_max,
    projection_seeds,
    shannon_entropy,
)
from fedstats.engine.core import ProtocolGenerator
from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import DataError
from fedstats.secagg.quantize import choose_frac_bits
from fedstats.sketches.stable import StableProjection

__all__ = ["fed_entropy_protocol", "g_test_protocol"]


def _projection_round(
    base: dict[str, Any], m: int, total: int, ell: int, d: float, cp: str, seed: int, b: int
) -> tuple[Round, FixedPoint]:
    """Round 2 of FED-H: public parameters from public values only (``m``, ``|v|``, the seed)."""
    sp, sm = projection_seeds(seed, cp)
    pmax = max(
        projection_abs_max(StableProjection(sp, ell, 1 + d), m),
        projection_abs_max(StableProjection(sm, ell, 1 - d), m),
    )
    # ||w_i||_1 <= 1 for every client and for the sum, so |e_k| <= max |P_kj|
    f = choose_frac_bits(b, pmax, pmax)
    fp = FixedPoint(f, pmax)
    params = {
        **base,
        "total": total,
        "encoding_size": ell,
        "fd_step": d,
        "seed_plus": sp,
        "seed_minus": sm,
        "frac_bits": f,
        "clip": fp.clip,
        "bits": b,
    }
    bound = fp.report_bound(b)
    return Round("projections", encode_entropy_projection, params, dim=2 * ell, bound=bound), fp


def _entropy_result(
    s2: RoundSum, fp: FixedPoint, m: int, ell: int, d: float, cp: str, b: int, conf: float
) -> EntropyResult:
    e = fp.decode(s2.total, bits=b)
    return entropy_result(
        (e[:ell], e[ell:]),
        d,
        m,
        conf,
        1.0 / fp.scale,
        coupling=cp,
        bits=b,
        frac_bits=fp.frac_bits,
        n_clients=s2.n_clients,
        bytes_per_client=math.ceil(b / 8) + math.ceil(2 * ell * b / 8),
        details={"encoding_plus": e[:ell].tolist(), "encoding_minus": e[ell:].tolist()},
    )


def fed_entropy_protocol(
    m: int,
    *,
    encoding_size: int = 1000,
    fd_step: float = DEFAULT_FD_STEP,
    coupling: str = "coupled",
    projection_seed: int,
    bits: int = 64,
    max_count: int,
    confidence: float = 0.95,
    column: str = "histogram",
    categorical: str | None = None,
) -> ProtocolGenerator[EntropyResult]:
    """FED-H as an engine protocol (Pang et al. 2023, Sec. 3.5 on Algorithm 2).

    Parameters
    ----------
    m : int
        Number of categories, >= 2.
    encoding_size : int
        ``l`` of each of the two projections, >= 2 (default 1000: FED-H needs far larger ``l`` than
        FED-chi^2, see the paper's Fig. 5).
    fd_step : float
        Finite-difference step ``D`` in (0, 0.5]; default :data:`DEFAULT_FD_STEP`.
    coupling : {"coupled", "independent"}
        Same seed for both stabilities (default) or two seeds.
    projection_seed : int
        Public seed in ``[0, 2**256)``, agreed beforehand.
    bits : {16, 32, 64}
        Field of the round-2 sum.
    max_count : int
        Declared largest total count of one client (>= 1), the bound of round 1.
    confidence : float
        Level of the interval, in (0, 1).
    column : str
        Population column holding the ``(n, m)`` histograms.
    categorical : str, optional
        Instead of ``column``: a column of category codes in ``[0, m)``, one record per row.

    Returns
    -------
    ProtocolGenerator[EntropyResult]
        Tag ``"entropy.shannon"``.

    Raises
    ------
    ParameterError
        If a parameter is out of range.
    DataError
        If a count is negative or the summed histogram is empty.
    OverflowRiskError
        If ``bits`` is too narrow.
    """
    ell, d, cp, b, conf = check_options(encoding_size, fd_step, coupling, bits, confidence)
    mm = check_int("m", m, low=2)
    mc = check_int("max_count", max_count, low=1)
    seed = check_int("projection_seed", projection_seed, low=0, high=2**256 - 1)
    base: dict[str, Any] = {"column": column, "m": mm}
    if categorical is not None:
        base = {"categorical": [str(categorical)], "m": mm}
    s1: RoundSum = yield Round("size", encode_histogram_size, base, dim=1, bound=mc)
    total = int(np.asarray(s1.total).ravel()[0])
    if total <= 0:
        raise DataError("the summed histogram is empty (total count 0)")
    rnd, fp = _projection_round(base, mm, total, ell, d, cp, seed, b)
    s2: RoundSum = yield rnd
    return _entropy_result(s2, fp, mm, ell, d, cp, b, conf)


def g_test_protocol(
    shape: tuple[int, int],
    *,
    encoding_size: int = 1000,
    fd_step: float = DEFAULT_FD_STEP,
    coupling: str = "coupled",
    projection_seed: int,
    bits: int = 64,
    max_cell: int,
    level: float = 0.05,
    confidence: float = 0.95,
    column: str = "table",
    categorical: tuple[str, str] | None = None,
    drop_empty: bool = False,
) -> ProtocolGenerator[Chi2Result]:
    """Run the G-test of independence via FED-H as an engine protocol (Pang et al. 2023, Sec. 3.5).

    ``G = 2 sum_xy v_xy log(v_xy / vbar_xy) = 2 |v| (H_X + H_Y - H_XY)``. Round 1 sums the marginals of the
    clients' tables (as FED-chi^2's round 1), which give ``|v|`` and the marginal entropies exactly; round 2
    is FED-H's projection round on the flattened joint tables, which gives ``H_XY``.

    Parameters
    ----------
    shape : tuple of int
        ``(m_x, m_y)`` of every client's table, each >= 2.
    encoding_size, fd_step, coupling, projection_seed, bits, confidence
        As in :func:`fed_entropy_protocol`.
    max_cell : int
        Declared largest count of one client in one cell (>= 1); bounds round 1.
    level : float
        Significance level of the decision, in (0, 1).
    column : str
        Population column with the ``(n, m_x, m_y)`` tables.
    categorical : tuple of str, optional
        Instead of ``column``: two columns of category codes, one record per row.
    drop_empty : bool
        Leave rows/columns empty in the summed table out of the degrees of freedom instead of raising.

    Returns
    -------
    ProtocolGenerator[Chi2Result]
        ``test="g-test"``, tag ``"entropy.g_test"``; ``details["joint_entropy"]`` is FED-H's result.

    Raises
    ------
    ParameterError, DataError, OverflowRiskError
        As in :func:`fed_entropy_protocol`; ``DataError`` also for an empty row or column (see
        ``drop_empty``).
    """
    ell, d, cp, b, conf = check_options(encoding_size, fd_step, coupling, bits, confidence)
    lev = check_open_unit("level", level)
    m_x, m_y = check_shape(shape)
    mc = check_int("max_cell", max_cell, low=1)
    seed = check_int("projection_seed", projection_seed, low=0, high=2**256 - 1)
    source: dict[str, Any] = {"column": column}
    if categorical is not None:
        source = {"categorical": [str(categorical[0]), str(categorical[1])]}
    s1: RoundSum = yield Round(
        "marginals",
        encode_marginals,
        {**source, "shape": (m_x, m_y)},
        dim=m_x + m_y,
        bound=mc * max(m_x, m_y),
    )
    marg = np.asarray(s1.total, dtype=np.int64)
    vx, vy = marg[:m_x], marg[m_x:]
    rows, cols = kept_cells(vx, vy, drop_empty)
    total = int(vx.sum())
    m = m_x * m_y
    joint = {**source, "m": m} if categorical is None else {**source, "shape": (m_x, m_y), "m": m}
    rnd, fp = _projection_round(joint, m, total, ell, d, cp, seed, b)
    s2: RoundSum = yield rnd
    ent = _entropy_result(s2, fp, m, ell, d, cp, b, conf)
    res = g_result(
        ent,
        float(total),
        shannon_entropy(vx[rows]),
        shannon_entropy(vy[cols]),
        int((rows.size - 1) * (cols.size - 1)),
        lev,
        m_x,
        m_y,
        None,
    )
    res.n_dropped = s1.n_clients - s2.n_clients
    return res
