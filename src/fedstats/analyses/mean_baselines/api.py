"""One-call mean and variance by a baseline (dithering, Piecewise, Duchi, Laplace).

The same calls as :func:`fedstats.analyses.bitpushing.api.mean` / :func:`~fedstats.analyses.bitpushing.
api.variance` (same data handling, same ``engine`` / ``randomness`` / ``ledger`` rule of
:mod:`fedstats.analyses._api`, same charging before the run), restricted to the baselines, so a comparison
with bit pushing runs on the same clients, codes and engine. Results are tagged
``"mean_baselines.mean"`` / ``"mean_baselines.variance"``.
"""

from __future__ import annotations

from typing import Any

from fedstats._validation import check_choice
from fedstats.analyses.bitpushing import api as _bitpushing
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.analyses.bitpushing.protocol import MeanEstimate, VarianceEstimate
from fedstats.analyses.mean_baselines.protocol import BASELINE_METHODS
from fedstats.engine.core import Engine
from fedstats.privacy.ledger import BitMeter, PrivacyLedger
from fedstats.randomness import RandomSource

__all__ = ["mean", "variance"]


def mean(
    data: Any,
    encoding: BitEncoding,
    *,
    method: str = "dithering",
    epsilon: float | None = None,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
    ledger: PrivacyLedger | None = None,
    bit_meter: BitMeter | None = None,
    **options: Any,
) -> MeanEstimate:
    """Estimate the mean of one value per client with a baseline.

    Parameters
    ----------
    data : array_like of float, shape (n,), or Population
        The clients' values.
    encoding : BitEncoding
        Declared range, resolution and bit depth.
    method : {"dithering", "piecewise", "duchi", "laplace"}
        The baseline, default ``"dithering"``.
    epsilon : float, optional
        Local DP epsilon per client (required except for dithering, which also accepts the explicit
        non-private choice ``no_privacy=True``, one of ``**options``).
    engine, randomness, ledger, bit_meter
        As :func:`fedstats.analyses.bitpushing.api.mean`.
    **options
        ``column``, ``public_seed``, ``confidence``, ``truth``, ``shuffle`` and the baseline's options
        (:data:`~fedstats.analyses.mean_baselines.protocol.BASELINE_OPTIONS`); others are refused.

    Returns
    -------
    MeanEstimate
        Tagged ``"mean_baselines.mean"``.

    Raises
    ------
    ParameterError, DataError, BudgetExceededError
        As :func:`fedstats.analyses.bitpushing.api.mean`.
    """
    check_choice("method", method, BASELINE_METHODS)
    return _bitpushing.mean(
        data,
        encoding,
        method=method,
        epsilon=epsilon,
        engine=engine,
        randomness=randomness,
        ledger=ledger,
        bit_meter=bit_meter,
        **options,
    )


def variance(
    data: Any,
    encoding: BitEncoding,
    *,
    method: str = "dithering",
    epsilon: float | None = None,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
    ledger: PrivacyLedger | None = None,
    bit_meter: BitMeter | None = None,
    **options: Any,
) -> VarianceEstimate:
    """Estimate the population variance (ddof = 0) with a baseline.

    Parameters
    ----------
    data, encoding, method, epsilon, engine, randomness, ledger, bit_meter
        As :func:`mean`.
    **options
        As :func:`mean`, plus ``mean_fraction``.

    Returns
    -------
    VarianceEstimate
        Tagged ``"mean_baselines.variance"``.

    Raises
    ------
    ParameterError, DataError, BudgetExceededError
        As :func:`fedstats.analyses.bitpushing.api.variance`.
    """
    check_choice("method", method, BASELINE_METHODS)
    return _bitpushing.variance(
        data,
        encoding,
        method=method,
        epsilon=epsilon,
        engine=engine,
        randomness=randomness,
        ledger=ledger,
        bit_meter=bit_meter,
        **options,
    )
