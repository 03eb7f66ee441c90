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
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats._validation import check_int
from fedstats.analyses.chi2.client import encode_marginals, encode_projection, expected_counts
from fedstats.analyses.chi2.estimator import (
    Chi2Result,
    Sketch,
    check_options,
    check_shape,
    client_bound,
    finish_encoding,
    kept_cells,
    projection_plan,
)
from fedstats.analyses.chi2.null import (
    DEFAULT_NULL_REPLICATES,
    NullSample,
    NullSetting,
    Round2Plan,
    privacy_details,
    release_marginals,
    release_projection,
    simulate_null,
)
from fedstats.analyses.chi2.privacy import Chi2Privacy
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
from fedstats.randomness import RNG, RandomSource
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
    declared = check_int("max_cell", max_cell, low=1)
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
        "marginals", encode_marginals, base, dim=m_x + m_y, bound=declared * max(m_x, m_y)
    )
    rel = _release_marginals(
        s1, (m_x, m_y), declared, privacy, server, merge_below, labels, drop_empty
    )
    proj = StableProjection(seed, ell, 2.0)
    plan, fp, params = _round2_setup(rel, base, proj, privacy, declared=declared, bits=b, seed=seed)
    s2: RoundSum = yield Round(
        "projection", encode_projection, params, dim=ell, bound=fp.report_bound(b)
    )
    total = reduce_signed(s2.total, b)
    details: dict[str, Any] = {}
    null = None
    if privacy is not None and server is not None:
        total = release_projection(total, plan, server)
        details["privacy"] = privacy_details(privacy, plan, rel.marg)
        if null_replicates and randomness is not None:
            null = _null(rel, plan, proj, privacy, s2, dec, b, null_replicates, randomness, lev)
    e = fp.decode(total)
    res = finish_encoding(
        e,
        Sketch(m_x=m_x, m_y=m_y, ell=ell, bits=b, frac_bits=plan.frac_bits, decoder=dec),
        confidence=conf,
        null=null,
        dof=(rel.rows.size - 1) * (rel.cols.size - 1),
        level=lev,
        n_clients=s2.n_clients,
        n_dropped=rel.n - s2.n_clients,
        details={
            "rows": rel.rows.tolist(),
            "cols": rel.cols.tolist(),
            "n_round1": rel.n,
            "encoding": e.tolist(),
            **details,
        },
        noise_offset=0.0 if privacy is None else plan.tau,
    )
    return _annotate(res, rel, privacy, null, lev, labels)


@dataclass
class _Marginals:
    """Round 1's release as round 2 uses it (Algorithm 2, lines 1-2: the marginals ``v_x``, ``v_y``).

    ``marg`` is the released ``(v_x, v_y)`` (noisy with privacy, merged with ``merge_below``);
    ``rows``/``cols`` the cells kept; ``max_cell`` the fixed-point bound on one client's merged cell;
    ``total_bound`` the bound on the table's total behind the round-2 plan; ``n`` round 1's clients.
    """

    marg: np.ndarray
    vx: np.ndarray
    vy: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    max_cell: int
    total_bound: float
    n: int
    merged: tuple[tuple[np.ndarray, np.ndarray], np.ndarray, int, str] | None
    warnings: list[str]


def _release_marginals(
    s1: RoundSum,
    shape: tuple[int, int],
    declared: int,
    privacy: Chi2Privacy | None,
    server: RNG | None,
    merge_below: int,
    labels: tuple[Sequence[Any], Sequence[Any]] | None,
    drop_empty: bool,
) -> _Marginals:
    """Release round 1's sum: noisy marginals with privacy (at least 1), rare categories merged."""
    m_x = shape[0]
    marg = np.asarray(s1.total, dtype=np.int64)
    total_bound = float(marg[:m_x].sum())
    if privacy is not None and server is not None:
        # noisy marginals, at least 1 (post-processing): every cell is kept
        marg, total_bound = release_marginals(marg, shape, privacy, server)
    vx, vy = marg[:m_x], marg[m_x:]
    merged = _merge(vx, vy, check_int("merge_below", merge_below, low=0), labels)
    warnings = []
    if privacy is not None:
        warnings = rare_warnings(vx, vy, labels, None if merged is None else merged[0])
    mc = declared
    if merged is not None:
        groups, marg, factor, note = merged
        warnings.append(note)
        vx, vy = marg[: int(groups[0].max()) + 1], marg[int(groups[0].max()) + 1 :]
        mc = declared * factor  # a merged cell sums several declared cells (fixed-point scale only)
    if privacy is None:
        rows, cols = kept_cells(vx, vy, drop_empty)
    else:
        rows, cols = np.arange(vx.size), np.arange(vy.size)
    return _Marginals(marg, vx, vy, rows, cols, mc, total_bound, s1.n_clients, merged, warnings)


def _round2_setup(
    rel: _Marginals,
    base: dict[str, Any],
    proj: StableProjection,
    privacy: Chi2Privacy | None,
    *,
    declared: int,
    bits: int,
    seed: int,
) -> tuple[Round2Plan, FixedPoint, dict[str, Any]]:
    """Round 2's public plan, fixed point and parameters from the released marginals.

    Every client encodes ``e_i = P u_i`` with ``u_i = (v^(i) - vbar / n) / sqrt(vbar)`` and
    ``vbar = v_x v_y^T / N`` (Pang et al. 2023, Algorithm 2, round 2); ``P sqrt(vbar) / n`` is public
    and the same for every client, so the server broadcasts it as ``offset``.
    """
    n, ell = rel.n, proj.encoding_size
    vbar = expected_counts(rel.vx[rel.rows], rel.vy[rel.cols])
    plan, row_norm, p_sq = projection_plan(
        privacy,
        proj,
        vbar,
        n_clients=n,
        max_cell=rel.max_cell,
        bits=bits,
        total_bound=rel.total_bound,
        min_dim=min(rel.rows.size, rel.cols.size),
    )
    fp = FixedPoint(plan.frac_bits, max(client_bound(vbar, rel.max_cell, n, row_norm), 1e-9))
    params = {
        **base,
        "rows": rel.rows.tolist(),
        "cols": rel.cols.tolist(),
        "row_marginals": rel.vx.tolist(),
        "col_marginals": rel.vy.tolist(),
        "max_cell": declared,  # the client checks its own cells
        "offset": (p_sq / n).tolist(),
        "seed": seed,
        "encoding_size": ell,
        "frac_bits": plan.frac_bits,
        "clip": fp.clip,
        "bits": bits,
    }
    if rel.merged is not None:
        params["groups"] = [rel.merged[0][0].tolist(), rel.merged[0][1].tolist()]
    return plan, fp, params


def _null(
    rel: _Marginals,
    plan: Round2Plan,
    proj: StableProjection,
    privacy: Chi2Privacy,
    s2: RoundSum,
    decoder: str,
    bits: int,
    replicates: int,
    randomness: RandomSource,
    level: float,
) -> NullSample:
    """The released statistic's null (and power) distribution, simulated through both rounds' noise."""
    setting = NullSetting(
        shape=(rel.vx.size, rel.vy.size),
        privacy=privacy,
        projection=proj,
        decoder=decoder,
        n_clients=rel.n,
        n_survivors=s2.n_clients,
        max_cell=rel.max_cell,
        bits=bits,
    )
    return simulate_null(
        rel.marg,
        setting,
        tau=plan.tau,
        replicates=replicates,
        rng=randomness.generator("server", "chi2", "null"),
        effect=POWER_EFFECT_W,
        level=level,
    )


def _annotate(
    res: Chi2Result,
    rel: _Marginals,
    privacy: Chi2Privacy | None,
    null: NullSample | None,
    level: float,
    labels: tuple[Sequence[Any], Sequence[Any]] | None,
) -> Chi2Result:
    """Attach the privacy loss, what was merged, and the warnings (rare categories, merging, power)."""
    if privacy is not None:
        loss = privacy.loss()
        res.epsilon, res.delta = loss.epsilon, loss.delta
    warnings = list(rel.warnings)
    if rel.merged is not None:
        groups = rel.merged[0]
        res.details["merged"] = merged_details(groups, labels)
        res.details["groups"] = [groups[0].tolist(), groups[1].tolist()]
    if null is not None and null.power is not None:
        warnings += power_warning(null.power, null.replicates, level, res.details)
    for w in warnings:
        res.warn(w)
    return res
