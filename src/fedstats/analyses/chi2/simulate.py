"""FED-chi^2's fast path: the same estimator without the per-client engine (for experiments).

:func:`simulate_fed_chi2` replaces the clients' reports by their sum (the projection is linear) and, with
dropout, draws the survivors' table from its distribution; :func:`simulate_decoded` draws and decodes the
aggregated encodings of many exact statistics at once (no dropout: ``e = sqrt(s) N(0, 2)^l`` exactly).
Both decode with :mod:`fedstats.analyses.chi2.estimator`, the protocol's own decoder.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedstats._numeric import round_to_integers
from fedstats._validation import check_choice, check_int, check_real
from fedstats.analyses.chi2.calibration import batch_decode
from fedstats.analyses.chi2.client import expected_counts
from fedstats.analyses.chi2.estimator import (
    Chi2Result,
    Sketch,
    attach_truth,
    check_options,
    check_table,
    chi_square_statistic,
    finish_encoding,
    kept_cells,
    projection_plan,
)
from fedstats.analyses.chi2.null import (
    DEFAULT_NULL_REPLICATES,
    NullSetting,
    Round2Inputs,
    Round2Plan,
    privacy_details,
    release_marginals,
    release_projection,
    round2_plan,
    simulate_null,
)
from fedstats.analyses.chi2.privacy import Chi2Privacy, plan_chi2_privacy
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RNG, RandomSource
from fedstats.secagg.quantize import wrap_reports
from fedstats.sketches.stable import StableProjection

__all__ = ["SPLITS", "simulate_decoded", "simulate_fed_chi2", "survivor_table"]

SPLITS: tuple[str, ...] = ("authors", "iid")


def survivor_table(table: np.ndarray, n: int, n_survivors: int, split: str, rng: RNG) -> np.ndarray:
    """Draw the survivors' summed table in distribution, without materializing the clients' tables.

    Parameters
    ----------
    table : numpy.ndarray
        The summed table (any shape), non-negative counts.
    n : int
        Clients.
    n_survivors : int
        Clients left, in ``[1, n]``.
    split : {"authors", "iid"}
        How records are spread over clients (see :func:`simulate_fed_chi2`).
    rng : RNG

    Returns
    -------
    numpy.ndarray
        float64, same shape as ``table``.
    """
    if n_survivors >= n:
        return table.astype(np.float64)
    c = table.ravel().astype(np.float64)
    if split == "authors":
        # the sum of k of the n gaps between n - 1 uniform cut points on {0..c} is the k-th smallest cut,
        # i.e. floor(U_(k) (c + 1)) with U_(k) ~ Beta(k, n - k) (the gaps are exchangeable)
        import scipy.stats  # lazily (import cost)

        u = np.asarray(rng.random(c.shape), dtype=np.float64)
        b = scipy.stats.beta.ppf(u, n_survivors, n - n_survivors)
        out = np.minimum(np.floor(b * (c + 1)), c)
    else:
        out = np.asarray(rng.binomial(c.astype(np.int64), n_survivors / n), dtype=np.float64)
    return np.asarray(out, dtype=np.float64).reshape(table.shape)


def simulate_fed_chi2(
    global_table: Any,
    n_clients: int,
    *,
    encoding_size: int = 50,
    decoder: str = "mean-of-squares",
    dropout: float = 0.0,
    bits: int = 64,
    randomness: RandomSource | RNG | None = None,
    split: str = "authors",
    level: float = 0.05,
    confidence: float = 0.95,
    projection: str = "materialize",
    drop_empty: bool = False,
    epsilon: float | None = None,
    delta: float | None = None,
    max_records: int | None = None,
    round1_fraction: float = 0.5,
    null_replicates: int = DEFAULT_NULL_REPLICATES,
) -> Chi2Result:
    """FED-chi^2 on a global table split across ``n_clients``, without the per-client engine (fast path).

    Parameters
    ----------
    global_table : array_like of int, shape (m_x, m_y)
        The summed table.
    n_clients : int
        Number of clients, >= 1.
    encoding_size, decoder, dropout, bits, level, confidence, drop_empty
        As in :func:`fed_chi2_protocol`.
    randomness : RandomSource or generator, optional
        Default secure. With a RandomSource, the projection seed is its public seed ``("chi2", "projection")``
        and the rest draws from its private stream ``("chi2", "simulate")``; with a generator, both come
        from it.
    split : {"authors", "iid"}
        How records are spread over clients, which matters only with dropout: ``"authors"`` (per cell,
        ``n - 1`` uniform cut points, the authors' code) or ``"iid"`` (each record on a uniformly random
        client).
    projection : {"materialize", "distribution"}
        ``"materialize"`` generates the public projection and computes ``P w`` (``O(l m)``);
        ``"distribution"`` draws ``e = sqrt(F_2(w)) * N(0, 2)`` directly (``O(l)``), which has exactly the
        same distribution given ``w``.
    epsilon, delta, round1_fraction, null_replicates
        Central DP as in :func:`~fedstats.analyses.chi2.api.fed_chi2` (both or neither of
        ``epsilon``/``delta``): the same release (:func:`~fedstats.analyses.chi2.null.noisy_marginals`,
        :func:`~fedstats.analyses.chi2.null.round2_plan`, the discrete Gaussian on the integer sum) and the
        same p-value (:func:`~fedstats.analyses.chi2.null.simulate_null`). The noise and the null
        simulation draw from the private streams ``("chi2", "noise")`` and ``("chi2", "null")`` of a
        RandomSource (or from the generator).
    max_records : int, optional
        With ``epsilon``: the declared ``T``; default ``ceil(total / n_clients)`` (an even split; simulation
        only).

    Returns
    -------
    Chi2Result
        With ``exact_statistic`` and ``multiplicative_error``; ``details["shortcuts"]`` names what was
        simulated in distribution.

    Notes
    -----
    What this shortcuts, and why the output has the same distribution as :func:`fed_chi2`:

    * the clients' reports are not formed: by linearity ``sum_i P u_i = P sum_i u_i`` and
      ``sum_{i in S} u_i = (v_S - (|S|/n) vbar) / sqrt(vbar)`` where ``v_S`` is the survivors' table;
    * with dropout, ``v_S`` is drawn directly from its distribution under ``split`` (a Beta order statistic
      per cell for ``"authors"``, a binomial per cell for ``"iid"``) instead of splitting the table;
    * the commit-then-reveal seed agreement is replaced by a public seed from ``randomness``;
    * quantisation: the sum is rounded to the same fixed-point grid ``2**-frac_bits`` and reduced modulo
      ``2**bits`` like the protocol's; the ``n`` clients' independent randomized-rounding errors are
      replaced by one Gaussian of the same variance bound's mean (``n / 6 * 4**-frac_bits``, the average of
      ``p (1 - p)`` over uniform fractional parts ``p``). At 64 bits this is far below the sketch error.
    """
    t = check_table(global_table, "global_table")
    n = check_int("n_clients", n_clients, low=1)
    ell, dec, b, conf, lev = check_options(encoding_size, decoder, bits, confidence, level)
    p_drop = check_real("dropout", dropout, low=0.0, high=1.0, high_open=True)
    sp = check_choice("split", split, SPLITS)
    mode = check_choice("projection", projection, ("materialize", "distribution"))
    null_replicates = check_int("null_replicates", null_replicates, low=99)
    privacy = _plan_privacy(t, n, epsilon, delta, max_records, round1_fraction)
    rng, noise_rng, null_rng, seed, note = _generators(randomness)
    m_x, m_y = t.shape
    vx, vy, rows, cols, total_bound = _marginals(t, privacy, noise_rng, drop_empty)
    vbar = expected_counts(vx[rows], vy[cols])
    k_drop = min(round(p_drop * n), n - 1)
    shortcuts = ["linearity (sum of projections = projection of the sum)", "public seed"]
    if k_drop:
        shortcuts.append(f"survivors' table drawn in distribution (split={sp})")
    proj = StableProjection(seed, ell, 2.0)
    surv = survivor_table(t[np.ix_(rows, cols)], n, n - k_drop, sp, rng).ravel()
    w = (surv - (n - k_drop) / n * vbar) / np.sqrt(vbar)
    if mode == "materialize":
        e = proj.project(w[None, :])[0]
    else:
        e = math.sqrt(float(w @ w)) * np.asarray(rng.normal(0.0, math.sqrt(2.0), ell))
        shortcuts.append("projection drawn in distribution")
    mc = max(1, math.ceil(float(t.max()) / n))
    plan = _plan(privacy, proj, vbar, w, mode, n, mc, b, ell, total_bound, (rows.size, cols.size))
    scale = 2.0**plan.frac_bits
    q = round_to_integers(e * scale + np.asarray(rng.normal(0.0, math.sqrt(n / 6.0), ell)))
    tau = 0.0
    null = None
    details: dict[str, Any] = {"shortcuts": shortcuts, "split": sp, "projection": mode}
    if privacy is not None:
        q = release_projection(q, plan, noise_rng)  # as the protocol
        tau = plan.tau
        shortcuts.append("central DP: the protocol's release on the summed integer sketch")
        details["privacy"] = privacy_details(privacy, plan, np.concatenate([vx, vy]))
    q = wrap_reports(q, b)  # float64 integers, reduced like the protocol's sum
    if privacy is not None:
        null = simulate_null(
            np.concatenate([vx, vy]),
            NullSetting(
                shape=(m_x, m_y),
                privacy=privacy,
                projection=proj,
                decoder=dec,
                n_clients=n,
                n_survivors=n - k_drop,
                max_cell=mc,
                bits=b,
            ),
            tau=tau,
            replicates=null_replicates,
            rng=null_rng,
        )
    dof = int((rows.size - 1) * (cols.size - 1))
    res = finish_encoding(
        q / scale,
        Sketch(m_x=m_x, m_y=m_y, ell=ell, bits=b, frac_bits=plan.frac_bits, decoder=dec),
        confidence=conf,
        null=null,
        dof=dof,
        level=lev,
        n_clients=n - k_drop,
        n_dropped=k_drop,
        details=details,
        noise_offset=tau,
    )
    exact, _ = chi_square_statistic(t)
    res.release_note = note
    if privacy is not None:
        loss = privacy.loss()
        res.epsilon, res.delta = loss.epsilon, loss.delta
    return attach_truth(res, exact, dof)


def _plan_privacy(
    t: np.ndarray,
    n: int,
    epsilon: float | None,
    delta: float | None,
    max_records: int | None,
    round1_fraction: float,
) -> Chi2Privacy | None:
    """The central DP plan of both rounds, or None without ``epsilon``/``delta``.

    ``max_records`` defaults to the records of an average client, ``ceil(N / n)`` (at least 1).
    """
    if (epsilon is None) != (delta is None):
        raise ParameterError("epsilon/delta", (epsilon, delta), "both given, or neither")
    if epsilon is None or delta is None:
        return None
    return plan_chi2_privacy(
        epsilon=epsilon,
        delta=delta,
        max_records=max_records if max_records is not None else max(1, math.ceil(int(t.sum()) / n)),
        round1_fraction=round1_fraction,
    )


def _generators(randomness: RandomSource | RNG | None) -> tuple[RNG, RNG, RNG, int, str | None]:
    """The simulation's, the noise's and the null's generators, the projection seed, the release note.

    A bare generator serves all three and draws the seed; a :class:`RandomSource` derives each by name.
    """
    if isinstance(randomness, RandomSource) or randomness is None:
        src = randomness if randomness is not None else RandomSource()
        rng: RNG = src.generator("chi2", "simulate")
        noise_rng, null_rng = src.generator("chi2", "noise"), src.generator("chi2", "null")
        return rng, noise_rng, null_rng, src.public_seed("chi2", "projection"), src.release_note
    return randomness, randomness, randomness, int(randomness.integers(0, 2**63)), None


def _marginals(
    t: np.ndarray, privacy: Chi2Privacy | None, noise_rng: RNG, drop_empty: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Round 1's release: ``v_x``, ``v_y`` (noisy with privacy), the kept rows and columns, the total bound."""
    m_x, m_y = t.shape
    vx, vy = t.sum(axis=1), t.sum(axis=0)
    if privacy is None:
        rows, cols = kept_cells(vx, vy, drop_empty)
        return vx, vy, rows, cols, float(vx.sum())
    marg, total_bound = release_marginals(np.concatenate([vx, vy]), t.shape, privacy, noise_rng)
    return marg[:m_x], marg[m_x:], np.arange(m_x), np.arange(m_y), total_bound


def _plan(
    privacy: Chi2Privacy | None,
    proj: StableProjection,
    vbar: np.ndarray,
    w: np.ndarray,
    mode: str,
    n: int,
    max_cell: int,
    bits: int,
    ell: int,
    total_bound: float,
    kept: tuple[int, int],
) -> Round2Plan:
    """Round 2's public plan, as the protocol's (:func:`~fedstats.analyses.chi2.null.round2_plan`).

    With DP the noise is set by the public norms (``c = max_j ||P_j|| / sqrt(vbar_j)``), as in the
    protocol; without DP and with the projection drawn in distribution, a bound on them replaces them.
    """
    public: Round2Inputs = {
        "n_clients": n,
        "max_cell": max_cell,
        "bits": bits,
        "total_bound": total_bound,
        "min_dim": min(kept),
    }
    if mode == "materialize" or privacy is not None:
        return projection_plan(privacy, proj, vbar, **public)[0]
    # no DP and the projection drawn in distribution: a bound on the norms replaces them
    bound = math.sqrt(2.0 * w.size) * 1.5
    return round2_plan(None, vbar=vbar, row_norm=bound, column_norm=math.inf, ell=ell, **public)


def simulate_decoded(statistics: Any, encoding_size: int, decoder: str, rng: RNG) -> np.ndarray:
    """Decode FED-chi^2 statistics for many exact ones at once, without dropout (fast path).

    Without dropout the aggregated encoding of a table with exact statistic ``s`` is ``sqrt(s)`` times
    ``l`` independent ``N(0, 2)`` variables (the 2-stable projection of ``sum_i u_i``, whose squared norm is
    ``s``; quantisation aside), so it is drawn directly and decoded with :func:`batch_decode`.

    Parameters
    ----------
    statistics : array_like of float, shape (k,)
        Exact statistics, >= 0.
    encoding_size : int
        ``l >= 2``.
    decoder : {"mean-of-squares", "geometric"}
    rng : RNG
        Draws ``standard_normal((k, l))``.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(k,)``.

    Raises
    ------
    ParameterError
        If ``l < 2`` or the decoder is unknown.
    DataError
        If a statistic is negative or not finite.
    """
    ell = check_int("encoding_size", encoding_size, low=2)
    s = np.asarray(statistics, dtype=np.float64).ravel()
    if not np.isfinite(s).all() or (s < 0).any():
        raise DataError("statistics must be finite and non-negative")
    z = np.asarray(rng.standard_normal((s.size, ell)))
    out: np.ndarray = batch_decode(np.sqrt(2.0 * s)[:, None] * z, decoder)
    return out
