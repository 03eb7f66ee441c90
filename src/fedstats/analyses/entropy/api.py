"""FED-H and the G-test in one call: clients' data in, the result (with the exact value) out."""

from __future__ import annotations

from typing import Any

from fedstats.analyses._api import resolve
from fedstats.analyses.chi2.estimator import (
    Chi2Result,
    attach_truth,
    check_client_tables,
)
from fedstats.analyses.chi2.estimator import (
    check_options as check_chi2_options,
)
from fedstats.analyses.entropy.config import FedEntropyConfig, GTestConfig
from fedstats.analyses.entropy.estimator import (
    EntropyResult,
    check_histograms,
    check_options,
    g_statistic,
    shannon_entropy,
)
from fedstats.analyses.entropy.protocol import fed_entropy_protocol, g_test_protocol
from fedstats.analyses.seed_agreement import resolve_projection_seed
from fedstats.analyses.usefulness import attach_warnings
from fedstats.engine.core import Engine
from fedstats.engine.populations import InMemoryPopulation
from fedstats.randomness import RandomSource

__all__ = ["fed_entropy", "fed_g_test"]

# the options a task can set take the configs' defaults (one default each)
_H = FedEntropyConfig
_G = GTestConfig


def fed_entropy(
    histograms: Any,
    *,
    encoding_size: int = _H.encoding_size,
    fd_step: float = _H.fd_step,
    coupling: str = _H.coupling,
    bits: int = 64,
    confidence: float = _H.confidence,
    projection_seed: int | None = None,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
) -> EntropyResult:
    """Run FED-H on clients' histograms through the engine and compare with the exact entropy.

    FED-H releases no differentially private value, so there is no ``ledger`` to charge.

    Parameters
    ----------
    histograms : array_like of int, shape (n_clients, m)
        Non-negative counts, ``m >= 2``.
    encoding_size, fd_step, coupling, bits, confidence
        As in :func:`~fedstats.analyses.entropy.protocol.fed_entropy_protocol`.
    projection_seed : int, optional
        Default: commit-then-reveal agreement among the clients (contributions from
        ``randomness.child("entropy")``).
    engine : Engine, optional
        The route and the clients' randomness (``fedstats.analyses._api``).
    randomness : RandomSource, optional
        The server's; default ``engine.randomness``.

    Returns
    -------
    EntropyResult
        With ``exact_entropy`` (``truth``) and ``additive_error``.

    Raises
    ------
    DataError
        Negative or non-integer counts, wrong shape, an all-zero histogram.
    ParameterError
        Out-of-range parameters.
    """
    h = check_histograms(histograms)
    check_options(encoding_size, fd_step, coupling, bits, confidence)
    eng, src = resolve(engine, randomness)
    n, m = h.shape
    seed = resolve_projection_seed(projection_seed, n, src.child("entropy"))
    proto = fed_entropy_protocol(
        m,
        encoding_size=encoding_size,
        fd_step=fd_step,
        coupling=coupling,
        projection_seed=seed,
        bits=bits,
        max_count=max(int(h.sum(axis=1).max()), 1),
        confidence=confidence,
    )
    res = eng.run(proto, InMemoryPopulation({"histogram": h}))
    exact = shannon_entropy(h.sum(axis=0))
    res.truth = exact
    res.additive_error = abs(res.entropy - exact)
    res.release_note = src.release_note
    return attach_warnings(res)  # type: ignore[no-any-return]


def fed_g_test(
    tables: Any,
    *,
    encoding_size: int = _G.encoding_size,
    fd_step: float = _G.fd_step,
    coupling: str = _G.coupling,
    bits: int = 64,
    level: float = _G.level,
    confidence: float = _G.confidence,
    drop_empty: bool = _G.drop_empty,
    projection_seed: int | None = None,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
) -> Chi2Result:
    """Run the G-test of independence via FED-H on clients' tables, through the engine.

    Runs :func:`~fedstats.analyses.entropy.protocol.g_test_protocol` (round 1 the marginals, round 2 the
    projections of the joint tables).

    Parameters
    ----------
    tables : array_like of int, shape (n_clients, m_x, m_y)
    encoding_size, fd_step, coupling, bits, confidence, projection_seed, engine, randomness
        As in :func:`fed_entropy`.
    level : float
        Significance level of the decision, in (0, 1).
    drop_empty : bool
        Leave empty rows/columns out instead of raising.

    Returns
    -------
    Chi2Result
        ``test="g-test"``, tag ``"entropy.g_test"``; ``exact_statistic`` is the exact G of the summed table.

    Raises
    ------
    DataError
        Negative or non-integer counts, a wrong shape, an empty row or column (see ``drop_empty``).
    ParameterError
        Out-of-range parameters.
    """
    t, total = check_client_tables(tables, drop_empty)
    check_options(encoding_size, fd_step, coupling, bits, confidence)
    check_chi2_options(2, "mean-of-squares", bits, confidence, level)
    eng, src = resolve(engine, randomness)
    n, m_x, m_y = t.shape
    seed = resolve_projection_seed(projection_seed, n, src.child("entropy"))
    proto = g_test_protocol(
        (m_x, m_y),
        encoding_size=encoding_size,
        fd_step=fd_step,
        coupling=coupling,
        projection_seed=seed,
        bits=bits,
        max_cell=max(int(t.max()), 1),
        level=level,
        confidence=confidence,
        drop_empty=drop_empty,
    )
    res = eng.run(proto, InMemoryPopulation({"table": t}))
    truth, dof = g_statistic(total)
    res.release_note = src.release_note
    return attach_truth(res, truth, dof)
