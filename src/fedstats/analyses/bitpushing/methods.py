"""Every method of a mean or a variance: bit pushing's variants and the baselines, by name.

Cormode & Markov 2021 compare bit pushing (:mod:`fedstats.analyses.bitpushing.protocol`, Algorithms 1
and 2) with the baselines of their Sec. 5 (:mod:`fedstats.analyses.mean_baselines.protocol`); this module
names them all and binds any one to its options, so that neither package imports the other's dispatch.
The baselines are imported when one is asked for (:func:`_baselines`): a bit-pushing run does not load
their mechanisms (40 ms of a CLI run's start-up).
"""

from __future__ import annotations

from types import ModuleType
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
from fedstats.privacy.mechanisms import Mechanism, RandomizedResponse

__all__ = ["METHODS", "make_stage", "options_of", "stage_mechanisms"]

METHODS = (*BIT_PUSHING_METHODS, *BASELINE_METHODS)
"""Every method a mean or variance can be estimated with: bit pushing, then the baselines."""


def _baselines() -> ModuleType:
    """:mod:`fedstats.analyses.mean_baselines.protocol`, imported on first use."""
    from fedstats.analyses.mean_baselines import protocol

    return protocol


def options_of(method: str) -> tuple[str, ...]:
    """The options ``method`` takes (:func:`make_stage` refuses any other).

    Parameters
    ----------
    method : str
        One of :data:`METHODS`.

    Returns
    -------
    tuple of str
        Keyword names, ``epsilon`` included.

    Raises
    ------
    ParameterError
        If ``method`` is unknown.
    """
    check_choice("method", method, METHODS)
    if method in BIT_PUSHING_METHODS:
        return STAGE_OPTIONS[method]
    options: tuple[str, ...] = _baselines().BASELINE_OPTIONS[method]
    return options


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
        ``squash_z`` (adaptive), ``probabilities`` (basic), ``min_reports`` (adaptive, basic);
        ``bits_per_client`` (dithering);
        ``frac_bits`` (Piecewise, Laplace).

    Returns
    -------
    Stage
        The stage function of ``method`` (:func:`~fedstats.analyses.bitpushing.protocol.bit_pushing_stage`
        or :func:`~fedstats.analyses.mean_baselines.protocol.baseline_stage`), its options bound.

    Raises
    ------
    ParameterError
        If ``method`` is unknown, an option is not one of the method's, or an option is invalid.
    """
    check_choice("method", method, METHODS)
    if method in BIT_PUSHING_METHODS:
        return bit_pushing_stage(method, **options)
    stage: Stage = _baselines().baseline_stage(method, **options)
    return stage


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
        mechanisms: list[Mechanism] = _baselines().baseline_mechanisms(method, **options)
        return mechanisms
    check_options(method, options, STAGE_OPTIONS[method])
    epsilon = options.get("epsilon")
    if epsilon is None:
        return []
    s = check_int("bits_per_client", options.get("bits_per_client", 1), low=1)
    eps = check_local_epsilon("epsilon", epsilon, high=700.0)
    return [RandomizedResponse(epsilon=eps / s) for _ in range(s)]
