"""Every method of a mean or a variance: bit pushing's variants and the baselines, by name.

Cormode & Markov 2021 compare bit pushing (:mod:`fedstats.analyses.bitpushing.protocol`, Algorithms 1
and 2) with the baselines of their Sec. 5 (:mod:`fedstats.analyses.mean_baselines.protocol`); this module
names them all and binds any one to its options, so that neither package imports the other's dispatch.
"""

from __future__ import annotations

from typing import Any

from fedstats._validation import check_choice, check_int, check_local_epsilon
from fedstats.analyses.bitpushing.protocol import (
    BASELINE_METHODS,
    BIT_PUSHING_METHODS,
    STAGE_OPTIONS,
    bit_pushing_stage,
    check_options,
)
from fedstats.analyses.bitpushing.stages import Stage
from fedstats.analyses.mean_baselines.protocol import (
    BASELINE_OPTIONS,
    baseline_mechanisms,
    baseline_stage,
)
from fedstats.privacy.mechanisms import Mechanism, RandomizedResponse

__all__ = ["METHODS", "OPTIONS", "make_stage", "stage_mechanisms"]

METHODS = (*BIT_PUSHING_METHODS, *BASELINE_METHODS)
"""Every method a mean or variance can be estimated with: bit pushing, then the baselines."""

OPTIONS: dict[str, tuple[str, ...]] = {**STAGE_OPTIONS, **BASELINE_OPTIONS}
"""The options each method of :data:`METHODS` takes (:func:`make_stage` refuses any other)."""


def make_stage(method: str, **options: Any) -> Stage:
    """Bind the stage of any method in :data:`METHODS` to its options.

    Parameters
    ----------
    method : str
        One of :data:`METHODS`.
    **options
        The method's options, and only those: ``epsilon`` (every method; None: no DP, bit pushing and
        dithering only), ``bits_per_client``, ``allocation``, ``squash_threshold`` (bit pushing),
        ``alpha`` (weighted, adaptive, basic), ``round1_fraction``, ``gamma``, ``min_reports``,
        ``squash_z`` (adaptive), ``probabilities`` (basic); ``bits_per_client`` (dithering);
        ``frac_bits`` (Piecewise, Laplace).

    Returns
    -------
    Stage

    Raises
    ------
    ParameterError
        If ``method`` is unknown, an option is not one of the method's, or an option is invalid.
    """
    check_choice("method", method, METHODS)
    if method in BIT_PUSHING_METHODS:
        return bit_pushing_stage(method, **options)
    return baseline_stage(method, **options)


def stage_mechanisms(method: str, **options: Any) -> list[Mechanism]:
    """List the mechanisms each client of one stage of ``method`` applies to its data, in order.

    Bit pushing: ``bits_per_client`` randomized responses with ``epsilon / bits_per_client`` each (one per
    reported bit); the baselines: their own mechanism (:func:`fedstats.analyses.mean_baselines.protocol.
    baseline_mechanisms`). Empty without ``epsilon``. The ledger composes their
    :meth:`~fedstats.privacy.mechanisms.Mechanism.privacy_loss`.

    Parameters
    ----------
    method : str
        One of :data:`METHODS`.
    **options
        As :func:`make_stage`.

    Returns
    -------
    list of Mechanism

    Raises
    ------
    ParameterError
        If ``method`` or an option is invalid.
    """
    check_choice("method", method, METHODS)
    if method not in BIT_PUSHING_METHODS:
        return baseline_mechanisms(method, **options)
    check_options(method, options, STAGE_OPTIONS[method])
    epsilon = options.get("epsilon")
    if epsilon is None:
        return []
    s = check_int("bits_per_client", options.get("bits_per_client", 1), low=1)
    eps = check_local_epsilon("epsilon", epsilon, high=700.0)
    return [RandomizedResponse(epsilon=eps / s) for _ in range(s)]
