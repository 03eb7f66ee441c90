"""FED-chi^2, server side: the two-round protocol (Pang et al., ICML 2023, Algorithm 2).

Round 1 sums the marginals (``m_x + m_y`` counts per client); round 2 sums ``e_i = P u_i``, the projection of
``u_i = (v^(i) - vbar / n) / sqrt(vbar)`` by a public ``l x m`` Gaussian (2-stable) matrix, in fixed point
modulo ``2**bits``. The server decodes ``s = ||sum_i u_i||^2`` (:mod:`fedstats.analyses.chi2.estimator`).

Clients that drop out before round 2 are the route's business (:class:`fedstats.engine.core.Dropout`): the
server learns only how many answered (``RoundSum.n_clients``). The marginals, hence ``vbar`` and ``vbar/n``,
are those of round 1, so the estimate is the squared norm of the survivors' ``sum u_i``, as in the paper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedstats._validation import check_int
from fedstats.analyses.chi2.client import encode_marginals, encode_projection, expected_counts
from fedstats.analyses.chi2.estimator import (
    Chi2Result,
    check_options,
    check_shape,
    client_bound,
    decode,
    finish,
    kept_cells,
    projection_norms,
)
from fedstats.analyses.chi2.null import (
    DEFAULT_NULL_REPLICATES,
    headroom,
    noisy_marginals,
    round2_plan,
    simulate_null,
)
from fedstats.analyses.chi2.privacy import Chi2Privacy, add_discrete_gaussian
from fedstats.analyses.chi2.rare import (
    POWER_EFFECT_W,
    merge_groups,
    merged_details,
    power_warning,
    rare_warnings,
)
from fedstats.engine.core import ProtocolGenerator
from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import ParameterError
from fedstats.randomness import RandomSource
from fedstats.secagg.quantize import reduce_signed
from fedstats.sketches.stable import StableProjection

__all__ = ["fed_chi2_protocol"]


def _merge(
    vx: np.ndarray,
    vy: np.ndarray,
    merge_below: int,
    labels: tuple[Sequence[Any], Sequence[Any]] | None,
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray, int, str] | None:
    """Merged groups, merged marginals, the factor on ``max_cell`` and the note; None if nothing merges."""
    if merge_below == 0:
        return None
    gx, gy = merge_groups(vx, merge_below), merge_groups(vy, merge_below)
    if gx.max() + 1 == vx.size and gy.max() + 1 == vy.size:
        return None
    mx = np.bincount(gx, weights=vx).astype(np.int64)
    my = np.bincount(gy, weights=vy).astype(np.int64)
    factor = int(np.bincount(gx).max() * np.bincount(gy).max())
    desc = merged_details((gx, gy), labels)
    parts = [f"{k}: {' + '.join(map(repr, grp))}" for k in ("x", "y") for grp in desc[k]]
    note = (
        f"categories with fewer than {merge_below} people (round 1's released marginals) were merged "
        f"before the test ({'; '.join(parts)}): the test is about the merged "
        f"{mx.size} x {my.size} table"
    )
    return (gx, gy), np.concatenate([mx, my]), factor, note


def fed_chi2_protocol(
    shape: tuple[int, int],
    *,
    encoding_size: int = 50,
    decoder: str = "mean-of-squares",
    projection_seed: int,
    bits: int = 64,
    max_cell: int,
    confidence: float = 0.95,
    level: float = 0.05,
    column: str = "table",
    categorical: tuple[str, str] | None = None,
    drop_empty: bool = False,
    privacy: Chi2Privacy | None = None,
    randomness: RandomSource | None = None,
    null_replicates: int = DEFAULT_NULL_REPLICATES,
    merge_below: int = 0,
    labels: tuple[Sequence[Any], Sequence[Any]] | None = None,
) -> ProtocolGenerator[Chi2Result]:
    """FED-chi^2 as an engine protocol (Pang et al. 2023, Algorithm 2).

    Parameters
    ----------
    shape : tuple of int
        ``(m_x, m_y)`` of every client's table, each >= 2.
    encoding_size : int
        ``l``, length of the projection, >= 2 (default 50, the paper's).
    decoder : {"mean-of-squares", "geometric"}
        Decoder of ``F_2`` (default the maximum-likelihood mean of squares; ``"geometric"`` is Algorithm 1).
    projection_seed : int
        Public seed of the projection in ``[0, 2**256)``, agreed beforehand
        (:func:`~fedstats.analyses.seed_agreement.agree_projection_seed`).
    bits : {16, 32, 64}
        The field ``2**bits`` of the round-2 sum (default 64).
    max_cell : int
        Declared largest count of one client in one cell (>= 1); bounds round 1 and fixes the fixed-point
        scale of round 2 from public values only. A client holding a larger count refuses to encode
        (:class:`~fedstats.errors.DataError`) rather than be clipped.
    confidence : float
        Level of the interval on the statistic, in (0, 1).
    level : float
        Significance level of the decision, in (0, 1).
    column : str
        Population column with the ``(n, m_x, m_y)`` tables.
    categorical : tuple of str, optional
        Instead of ``column``: two columns of category codes, one record per row (each client's table is
        the one-hot table of its row; a device summing its records' reports sends its whole table).
    drop_empty : bool
        Remove rows/columns empty in the summed table instead of raising (the marginals are public, so
        every client removes the same cells). Without effect with ``privacy``: every cell is kept, since
        which ones are empty is not public then.
    privacy : Chi2Privacy, optional
        Central DP (:mod:`fedstats.analyses.chi2.privacy`): the server adds discrete Gaussian noise to both
        sums before using them, and clients refuse tables of more than ``privacy.max_records`` records.
        Default None: the sums are used exactly (not differentially private).
    randomness : RandomSource, optional
        The server's, for the noise (``randomness.generator("server", "chi2", "noise")``); needed with
        ``privacy``.
    null_replicates : int
        With ``privacy``: ``B >= 99`` replicates of the null distribution (and ``B`` more of the
        alternative behind the reported power, :mod:`fedstats.analyses.chi2.rare`).
    merge_below : int
        Pool each variable's categories with fewer than this many people into one category before round 2
        (:func:`~fedstats.analyses.chi2.rare.merge_groups`; 0, the default, merges nothing). The counts
        are round 1's released marginals: with ``privacy`` the noisy ones, so the choice is
        post-processing of a release and costs no budget (and the server never learns the exact size of a
        category); without it the exact sums the server learns anyway. The test is then the test of the
        merged table (its dof, statistic and p-value); ``details["merged"]`` lists the merged categories
        and a warning says so. Merging keeps the null hypothesis (functions of independent variables are
        independent).
    labels : (sequence, sequence), optional
        Names of the row and column categories, used in warnings (default the indices).

    Returns
    -------
    ProtocolGenerator[Chi2Result]
        Run with :meth:`fedstats.engine.Engine.run`; the result's ``n_clients`` counts the clients of round
        2 and ``n_dropped`` those lost since round 1. With ``privacy``: ``details["power"]``, the test's
        power at Cohen's ``w = 0.1`` (:data:`~fedstats.analyses.chi2.rare.POWER_EFFECT_W`), and
        ``warnings`` naming rare categories (:func:`~fedstats.analyses.chi2.rare.rare_categories`) and a
        power below 0.5.

    Raises
    ------
    ParameterError
        If a parameter is out of range.
    DataError
        If a count is negative or the summed table has an empty row or column (see ``drop_empty``).
    OverflowRiskError
        If ``bits`` is too narrow for the aggregated encoding.
    """
    ell, dec, b, conf, lev = check_options(encoding_size, decoder, bits, confidence, level)
    null_replicates = check_int("null_replicates", null_replicates, low=99)
    m_x, m_y = check_shape(shape)
    mc = declared = check_int("max_cell", max_cell, low=1)
    seed = check_int("projection_seed", projection_seed, low=0, high=2**256 - 1)
    base: dict[str, Any] = {"column": column, "shape": (m_x, m_y)}
    if categorical is not None:
        base = {"categorical": [str(categorical[0]), str(categorical[1])], "shape": (m_x, m_y)}
    server = None
    if privacy is not None:
        if randomness is None:
            raise ParameterError("randomness", None, "the server's RandomSource with privacy")
        server = randomness.generator("server", "chi2", "noise")
        base["max_records"] = privacy.max_records
    s1: RoundSum = yield Round(
        "marginals", encode_marginals, base, dim=m_x + m_y, bound=mc * max(m_x, m_y)
    )
    marg = np.asarray(s1.total, dtype=np.int64)
    total_bound = float(marg[:m_x].sum())
    if privacy is not None and server is not None:
        # noisy marginals, at least 1 (post-processing): every cell is kept
        marg = noisy_marginals(marg, privacy, server)
        total_bound = float(marg[:m_x].sum()) + headroom(privacy, m_x, m_y)
    vx, vy = marg[:m_x], marg[m_x:]
    merged = _merge(vx, vy, check_int("merge_below", merge_below, low=0), labels)
    warnings = []
    if privacy is not None:
        warnings = rare_warnings(vx, vy, labels, None if merged is None else merged[0])
    if merged is not None:
        groups, marg, factor, note = merged
        warnings.append(note)
        vx, vy = marg[: int(groups[0].max()) + 1], marg[int(groups[0].max()) + 1 :]
        mc = declared * factor  # a merged cell sums several declared cells (fixed-point scale only)
    g_x, g_y = vx.size, vy.size
    if privacy is None:
        rows, cols = kept_cells(vx, vy, drop_empty)
    else:
        rows, cols = np.arange(g_x), np.arange(g_y)
    n = s1.n_clients
    vbar = expected_counts(vx[rows], vy[cols])
    proj = StableProjection(seed, ell, 2.0)
    row_norm, p_sq, column_norm = projection_norms(proj, np.sqrt(vbar))
    plan = round2_plan(
        privacy,
        vbar=vbar,
        row_norm=row_norm,
        column_norm=column_norm,
        n_clients=n,
        max_cell=mc,
        bits=b,
        ell=ell,
        total_bound=total_bound,
        min_dim=min(rows.size, cols.size),
    )
    f = plan.frac_bits
    fp = FixedPoint(f, max(client_bound(vbar, mc, n, row_norm), 1e-9))
    params = {
        **base,
        "rows": rows.tolist(),
        "cols": cols.tolist(),
        "row_marginals": vx.tolist(),
        "col_marginals": vy.tolist(),
        "max_cell": declared,  # the client checks its own cells
        # P sqrt(vbar) / n is public and the same for every client: the server broadcasts it
        "offset": (p_sq / n).tolist(),
        "seed": seed,
        "encoding_size": ell,
        "frac_bits": f,
        "clip": fp.clip,
        "bits": b,
    }
    if merged is not None:
        params["groups"] = [merged[0][0].tolist(), merged[0][1].tolist()]
    s2: RoundSum = yield Round(
        "projection", encode_projection, params, dim=ell, bound=fp.report_bound(b)
    )
    total = reduce_signed(s2.total, b)
    tau = 0.0
    details: dict[str, Any] = {}
    null = None
    if privacy is not None and server is not None:
        k, sigma = plan.k, plan.sigma
        half = (1 << k) >> 1
        coarse = [(int(x) + half) >> k for x in total]  # nearest multiple of 2**k (exact integers)
        total = add_discrete_gaussian(coarse, sigma, server) * 2.0**k
        # decoded s + tau: the noise, and the rounding to 2**k (uniform, variance 1/12 of a step)
        tau = plan.tau
        details["privacy"] = {
            **privacy.as_dict(),
            "sigma_projection": sigma * plan.step,
            "noise_offset": tau,
            "noisy_marginals": marg.tolist(),
        }
        if null_replicates and randomness is not None:
            null = simulate_null(
                marg,
                (g_x, g_y),
                privacy=privacy,
                projection=proj,
                decoder=dec,
                n_clients=n,
                n_survivors=s2.n_clients,
                max_cell=mc,
                bits=b,
                tau=tau,
                replicates=null_replicates,
                rng=randomness.generator("server", "chi2", "null"),
                effect=POWER_EFFECT_W,
                level=lev,
            )
    e = fp.decode(total)
    res_step = 1.0 / fp.scale
    est = decode(e, dec, conf, res_step)
    res = finish(
        est,
        dof=(rows.size - 1) * (cols.size - 1),
        level=lev,
        n_clients=s2.n_clients,
        n_dropped=n - s2.n_clients,
        m_x=m_x,
        m_y=m_y,
        ell=ell,
        bits=b,
        frac_bits=f,
        decoder=dec,
        details={
            "rows": rows.tolist(),
            "cols": cols.tolist(),
            "n_round1": n,
            "encoding": e.tolist(),
            **details,
        },
        noise_offset=tau,
        null=null,
        wide=None if null is None else decode(e, dec, 1.0 - (1.0 - conf) / 2.0, res_step),
    )
    if privacy is not None:
        loss = privacy.loss()
        res.epsilon, res.delta = loss.epsilon, loss.delta
    if merged is not None:
        res.details["merged"] = merged_details(merged[0], labels)
        res.details["groups"] = params["groups"]
    if null is not None and null.power is not None:
        warnings += power_warning(null.power, null.replicates, lev, res.details)
    for w in warnings:
        res.warn(w)
    return res
