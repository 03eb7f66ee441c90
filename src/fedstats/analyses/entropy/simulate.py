"""FED-H and the G-test's fast path: the same estimator without the per-client engine (for experiments).

Linearity makes the number of clients irrelevant (the sum of the clients' projections is the projection of
the summed histogram); a public seed replaces the agreement; at 64 bits the fixed-point rounding (below
``n 2**-40``) is negligible against the sketch error and is left out. Decoding is the protocol's own
(:func:`~fedstats.analyses.entropy.estimator.decode_entropy`).
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

import numpy as np

from fedstats._validation import check_choice, check_open_unit
from fedstats.analyses.chi2.estimator import Chi2Result, check_tables, kept_cells
from fedstats.analyses.entropy.estimator import (
    DEFAULT_FD_STEP,
    EntropyResult,
    check_options,
    entropy_result,
    g_result,
    g_statistic,
    projection_seeds,
    shannon_entropy,
)
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RNG, RandomSource
from fedstats.sketches.stable import StableProjection, project_coupled, sample_symmetric_stable

__all__ = ["simulate_fed_entropy", "simulate_fed_g_test"]


def _source(randomness: RandomSource | RNG | None, name: str) -> tuple[RNG, int, str | None]:
    """(private generator, public seed, release note) of a fast-path run."""
    if isinstance(randomness, RandomSource) or randomness is None:
        src = randomness if randomness is not None else RandomSource()
        return (
            src.generator(name, "simulate"),
            src.public_seed(name, "projection"),
            src.release_note,
        )
    return randomness, int(randomness.integers(0, 2**63)), None


def simulate_fed_entropy(
    global_hist: Any,
    *,
    encoding_size: int = 1000,
    fd_step: float = DEFAULT_FD_STEP,
    coupling: str = "coupled",
    randomness: RandomSource | RNG | None = None,
    confidence: float = 0.95,
    projection: str = "materialize",
) -> EntropyResult:
    """FED-H on a global histogram without the per-client engine (fast path, bounded memory).

    Parameters
    ----------
    global_hist : array_like, shape (m,)
        Non-negative counts or frequencies (normalised internally), ``m >= 2``.
    encoding_size, fd_step, coupling, confidence
        As in :func:`fed_entropy_protocol`.
    randomness : RandomSource or generator, optional
    projection : {"materialize", "distribution"}
        ``"materialize"``: generate the public projection's columns of the non-zero categories in chunks
        (memory ``O(l + chunk)``, time ``O(l * nnz)``); ``"distribution"`` (only with
        ``coupling="independent"``): draw ``e_k = F_a^(1/a) S_k`` directly, ``O(l)``, exactly the same
        distribution.

    Returns
    -------
    EntropyResult

    Notes
    -----
    Shortcuts (same distribution as :func:`fed_entropy` at 64 bits): linearity (the sum of the clients'
    projections is the projection of the summed histogram, so the number of clients does not matter), a
    public seed instead of the agreement, and no fixed-point rounding (its error, below ``n 2**-40``, is
    negligible against the sketch error).
    """
    c = np.asarray(global_hist, dtype=np.float64).ravel()
    if c.size < 2:
        raise DataError("global_hist needs at least 2 categories")
    shannon_entropy(c)  # validates
    ell, d, cp, _, conf = check_options(encoding_size, fd_step, coupling, 64, confidence)
    mode = check_choice("projection", projection, ("materialize", "distribution"))
    rng, seed, note = _source(randomness, "entropy")
    w = c / c.sum()
    nz = np.flatnonzero(w)
    if mode == "distribution":
        if cp == "coupled":
            raise ParameterError(
                "projection", "distribution", "'materialize' when coupling='coupled'"
            )
        fpl = float((w[nz] ** (1 + d)).sum())
        fmi = float((w[nz] ** (1 - d)).sum())
        ep = fpl ** (1 / (1 + d)) * sample_symmetric_stable(1 + d, ell, rng)
        em = fmi ** (1 / (1 - d)) * sample_symmetric_stable(1 - d, ell, rng)
    else:
        sp, sm = projection_seeds(seed, cp)
        if cp == "coupled":
            ep, em = project_coupled(seed, ell, (1 + d, 1 - d), nz, w[nz])
        else:
            ep = StableProjection(sp, ell, 1 + d).project((nz, w[nz]), m=c.size)[0]
            em = StableProjection(sm, ell, 1 - d).project((nz, w[nz]), m=c.size)[0]
    exact = shannon_entropy(c)
    res = entropy_result(
        (ep, em),
        d,
        int(c.size),
        conf,
        coupling=cp,
        bits=64,
        frac_bits=0,
        truth=exact,
        release_note=note,
        details={"projection": mode},
    )
    res.additive_error = abs(res.estimate - exact)
    return res


class _FedHOptions(TypedDict, total=False):
    """The options :func:`simulate_fed_g_test` passes on to :func:`simulate_fed_entropy` (defaults there)."""

    encoding_size: int
    fd_step: float
    coupling: str
    randomness: RandomSource | RNG | None
    confidence: float


def simulate_fed_g_test(
    global_table: Any, *, level: float = 0.05, **fed_h: Unpack[_FedHOptions]
) -> Chi2Result:
    """Run the G-test from FED-H on the joint table plus exact marginal entropies (fast path).

    ``G = 2 |v| (H_X + H_Y - H_XY)`` with ``H_XY`` from :func:`simulate_fed_entropy`; ``dof`` is
    ``(m_x - 1)(m_y - 1)``. Same shortcuts as :func:`simulate_fed_entropy`.

    Parameters
    ----------
    global_table : array_like of int, shape (m_x, m_y)
        The summed table; empty rows and columns are left out.
    level : float
        Significance level of the decision, in (0, 1) (default 0.05).
    **fed_h
        ``encoding_size``, ``fd_step``, ``coupling``, ``randomness``, ``confidence`` (keyword only): as in
        :func:`simulate_fed_entropy`, with its defaults.

    Returns
    -------
    Chi2Result
        ``test="g-test"``, with the exact G of the table as its truth.
    """
    t = check_tables(np.asarray(global_table)[None], "global_table")[0]
    rows, cols = kept_cells(t.sum(axis=1), t.sum(axis=0), True)
    k = t[np.ix_(rows, cols)]
    lev = check_open_unit("level", level)
    ent = simulate_fed_entropy(k.ravel(), **fed_h)
    truth, dof = g_statistic(k)
    return g_result(
        ent,
        float(k.sum()),
        shannon_entropy(k.sum(axis=1)),
        shannon_entropy(k.sum(axis=0)),
        dof,
        lev,
        int(t.shape[0]),
        int(t.shape[1]),
        truth,
    )
