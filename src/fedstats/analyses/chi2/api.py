"""FED-chi^2 in one call: clients' tables in, the test's result (with the exact test for comparison) out."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from fedstats._validation import check_real
from fedstats.analyses._api import charging, resolve
from fedstats.analyses.chi2.config import FedChi2Config
from fedstats.analyses.chi2.estimator import (
    Chi2Result,
    attach_truth,
    check_client_tables,
    check_options,
    chi_square_statistic,
)
from fedstats.analyses.chi2.null import DEFAULT_NULL_REPLICATES
from fedstats.analyses.chi2.privacy import plan_chi2_privacy
from fedstats.analyses.chi2.protocol import fed_chi2_protocol
from fedstats.analyses.chi2.rare import merge_tables
from fedstats.analyses.seed_agreement import resolve_projection_seed
from fedstats.analyses.usefulness import attach_warnings
from fedstats.engine.core import Dropout, Engine
from fedstats.engine.populations import InMemoryPopulation
from fedstats.errors import ParameterError
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.randomness import RandomSource

__all__ = ["fed_chi2", "with_dropout"]

_DEFAULT = FedChi2Config  # the options a task can set take its defaults (one default each)


def with_dropout(engine: Engine, dropout: float) -> Engine:
    """``engine``, or a copy of it whose route drops ``dropout`` of the clients before round 2.

    Parameters
    ----------
    engine : Engine
        The route (its log is shared with the copy).
    dropout : float
        Fraction in [0, 1); 0 returns ``engine`` itself.

    Returns
    -------
    Engine

    Raises
    ------
    ParameterError
        If ``dropout`` is outside [0, 1), or positive while ``engine`` already has a dropout model.
    """
    p = check_real("dropout", dropout, low=0.0, high=1.0, high_open=True)
    if p == 0.0:
        return engine
    if engine.dropout is not None:
        raise ParameterError("dropout", dropout, "0 when the engine already has a dropout model")
    return dataclasses.replace(engine, dropout=Dropout(p, from_round=1))


def fed_chi2(
    tables: Any,
    *,
    encoding_size: int = _DEFAULT.encoding_size,
    decoder: str = _DEFAULT.decoder,
    dropout: float = 0.0,
    bits: int = 64,
    level: float = _DEFAULT.level,
    confidence: float = _DEFAULT.confidence,
    drop_empty: bool = _DEFAULT.drop_empty,
    projection_seed: int | None = None,
    max_cell: int | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    max_records: int | None = None,
    round1_fraction: float = 0.5,
    null_replicates: int = DEFAULT_NULL_REPLICATES,
    merge_below: int = FedChi2Config.merge_below,
    labels: tuple[Sequence[Any], Sequence[Any]] | None = None,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
    ledger: PrivacyLedger | None = None,
) -> Chi2Result:
    """Run FED-chi^2 on clients' tables through the engine and compare with the exact test.

    Pang et al. 2023, Algorithm 2 (:func:`~fedstats.analyses.chi2.protocol.fed_chi2_protocol`). Without
    ``epsilon`` FED-chi^2 releases no differentially private value (the server learns the marginals and the
    sketch) and charges nothing; with ``epsilon`` and ``delta`` the server adds discrete Gaussian noise to
    both sums (:mod:`fedstats.analyses.chi2.privacy`) and ``ledger`` is charged once, before the run.

    Parameters
    ----------
    tables : array_like of int, shape (n_clients, m_x, m_y)
        One contingency table per client; non-negative counts.
    encoding_size, decoder, bits, level, confidence, drop_empty
        As in :func:`~fedstats.analyses.chi2.protocol.fed_chi2_protocol`.
    dropout : float
        Fraction of clients in [0, 1) that drop out before round 2, drawn by the engine's route without
        replacement (:class:`~fedstats.engine.core.Dropout`; at least one survivor). Not available on the
        secure route, which simulates its own dropouts.
    projection_seed : int, optional
        Use this public seed instead of running the commit-then-reveal agreement among the clients.
    max_cell : int, optional
        Declared bound on one client's cell; default the largest cell in ``tables`` (simulation only: a
        deployment declares it).
    epsilon, delta : float, optional
        Central DP budget of the whole run, epsilon in (0, inf) and delta in (0, 1), both or neither.
    max_records : int, optional
        With ``epsilon``: declared largest total count of one client's table (>= 1), which bounds the
        sensitivity; default the largest in ``tables`` (simulation only: a deployment declares it).
    round1_fraction : float
        With ``epsilon``: share of the budget (in zCDP) spent on the marginals, in (0, 1).
    null_replicates : int
        With ``epsilon``: ``B >= 99``, replicates of the released statistic's null distribution behind
        ``p_value`` and ``rejected`` (:mod:`fedstats.analyses.chi2.null`; default 999). The Monte Carlo
        error of the p-value is ``p_value_mc_error``. Another ``B`` replicates of an alternative give the
        test's power at a small effect (``details["power"]``; a warning below 0.5).
    merge_below : int
        Pool each variable's categories with fewer than this many people into one before round 2 (default
        0: none; :class:`~fedstats.analyses.chi2.config.FedChi2Config` holds the default). The counts are
        round 1's released marginals: with ``epsilon`` the noisy ones (post-processing, no budget), without
        it the exact sums the server learns anyway. The test, ``exact_statistic`` and ``dof`` are then the
        merged table's; ``details["merged"]`` names what was merged
        (:func:`~fedstats.analyses.chi2.rare.merge_groups`).
    labels : (sequence, sequence), optional
        Names of the row and column categories, for the warnings (default their indices).
    engine : Engine, optional
        The route and the clients' randomness (``fedstats.analyses._api``).
    randomness : RandomSource, optional
        The server's: the clients' seed contributions of the agreement come from
        ``randomness.child("chi2")``, the DP noise and the null simulation from ``randomness``. Default ``engine.randomness``.
    ledger : PrivacyLedger, optional
        Charged with the run's loss (:meth:`~fedstats.analyses.chi2.privacy.Chi2Privacy.loss`) when
        ``epsilon`` is given; a refused charge runs nothing and charges nothing.

    Returns
    -------
    Chi2Result
        With ``exact_statistic``, ``exact_p_value`` and ``multiplicative_error`` against the summed table
        (all clients, including the dropped ones; merged as the test merged it), ``release_note`` for
        seeded runs, and ``warnings`` (rare categories and low power under DP, what was merged).

    Raises
    ------
    DataError
        For negative or non-integer counts, a wrong shape, or an empty row/column.
    ParameterError
        For out-of-range parameters (e.g. ``encoding_size < 2``), or only one of ``epsilon``/``delta``.
    BudgetExceededError
        If ``ledger`` refuses the run (nothing is run or charged then).
    """
    t, total = check_client_tables(tables, drop_empty)
    check_options(encoding_size, decoder, bits, confidence, level)
    n, m_x, m_y = t.shape
    privacy = None
    if (epsilon is None) != (delta is None):
        raise ParameterError("epsilon/delta", (epsilon, delta), "both given, or neither")
    if epsilon is not None and delta is not None:
        biggest = int(t.reshape(n, -1).sum(axis=1).max())
        privacy = plan_chi2_privacy(
            epsilon=epsilon,
            delta=delta,
            max_records=max_records if max_records is not None else max(biggest, 1),
            round1_fraction=round1_fraction,
        )
    eng, src = resolve(engine, randomness)
    eng = with_dropout(eng, dropout)
    seed = resolve_projection_seed(projection_seed, n, src.child("chi2"))
    proto = fed_chi2_protocol(
        (m_x, m_y),
        encoding_size=encoding_size,
        decoder=decoder,
        projection_seed=seed,
        bits=bits,
        max_cell=max_cell if max_cell is not None else max(int(t.max()), 1),
        confidence=confidence,
        level=level,
        drop_empty=drop_empty,
        privacy=privacy,
        randomness=src,
        null_replicates=null_replicates,
        merge_below=merge_below,
        labels=labels,
    )
    with charging(ledger if privacy is not None else None):
        if ledger is not None and privacy is not None:
            ledger.spend_loss(
                privacy.loss(),
                label="FED-chi^2 marginals and projection (central discrete Gaussian)",
                clients=range(0, n),
            )
        res = eng.run(proto, InMemoryPopulation({"table": t}))
    groups = res.details.get("groups")
    exact, dof = chi_square_statistic(total if groups is None else merge_tables(total, groups))
    res.release_note = src.release_note
    return attach_warnings(attach_truth(res, exact, dof), n_records=float(total.sum()))  # type: ignore[no-any-return]
