"""Fast Monte Carlo of a bit-pushing release on a fixed population (benchmarks and tests, not releases).

:func:`simulate_release` runs the library's own server code (the protocol generator of
:func:`~fedstats.analyses.bitpushing.protocol.mean_protocol` or
:func:`~fedstats.analyses.bitpushing.protocol.variance_protocol` with the stage of
:func:`~fedstats.analyses.bitpushing.protocol.make_stage`) and answers each round with the clients' sum
drawn in a few vectorized passes over the clients: the clients are in random order, so under the exact
allocation (the default) the first ``c_0`` clients of a round report bit 0, the next ``c_1`` bit 1, and so
on, which is what the public affine permutation of shuffled clients gives; each client's code is
:func:`~fedstats.analyses.bitpushing.client.to_codes` of its value (randomized rounding of the squares);
randomized response over ``k`` ones among ``c`` reports is ``Binomial(k, q) + Binomial(c - k, 1 - q)``.
The result is equal in distribution to :func:`~fedstats.analyses.bitpushing.api.mean` /
:func:`~fedstats.analyses.bitpushing.api.variance` on the serial route with ``shuffle=True`` (tested
in ``tests/library/test_bitpushing_default.py``) at a fraction of the cost: no engine, no ledger, no truth scan,
no per-client validation. The adaptive protocol's rounds (which overlap the aggregate route refuses) are
simulated too. Only the exact allocation with one bit per client is supported.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedstats._validation import check_choice, check_finite_array
from fedstats.analyses.bitpushing.client import to_codes
from fedstats.analyses.bitpushing.config import BitPushingVarianceConfig
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.analyses.bitpushing.methods import make_stage
from fedstats.analyses.bitpushing.protocol import BitPushingResult, mean_protocol, variance_protocol
from fedstats.engine.core import ProtocolGenerator
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import ParameterError
from fedstats.privacy.mechanisms import RandomizedResponse

__all__ = ["round_sum", "run_protocol", "simulate_release"]


def round_sum(x: np.ndarray, rnd: Round, rng: np.random.Generator) -> RoundSum:
    """The sum of one exact-allocation bit-pushing round's reports, for clients ``x`` in random order.

    Parameters
    ----------
    x : numpy.ndarray of float64, shape (n,)
        Every client's value, in random order (the round takes ``x[lo:hi]`` of its client range).
    rnd : Round
        A round of :func:`~fedstats.analyses.bitpushing.bit_stages.bit_round` (exact allocation, one
        bit per client).
    rng : numpy.random.Generator
        The clients' randomness (rounding, randomized response).

    Returns
    -------
    RoundSum
        Per bit, the reported (randomized) ones, and the round's number of clients.

    Raises
    ------
    ParameterError
        If the round uses the random allocation or several bits per client.
    """
    p = rnd.params
    if p.get("allocation") != "exact" or int(p.get("bits_per_client", 1)) != 1:
        raise ParameterError("allocation", p.get("allocation"), "'exact' with one bit per client")
    lo, hi = rnd.client_range if rnd.client_range is not None else (0, x.size)
    v = np.clip(x[lo:hi], p["low"], p["high"])
    if p.get("center") is not None:
        v = (v - p["center"]) ** 2
    codes = to_codes(v, p["offset"], p["resolution"], p["max_code"], rng)
    cum = np.asarray(p["cum"], dtype=np.int64)
    counts: np.ndarray = cum[1:] - cum[:-1]
    j = np.repeat(np.arange(counts.size), counts)
    ones: np.ndarray = np.bincount(j, weights=(codes >> j) & 1, minlength=counts.size).astype(
        np.int64
    )
    eps = p.get("epsilon_bit")
    if eps is not None:
        q = RandomizedResponse(epsilon=eps).keep_probability
        zeros: np.ndarray = counts - ones
        ones = np.asarray(rng.binomial(ones, q), np.int64) + np.asarray(
            rng.binomial(zeros, 1.0 - q), np.int64
        )
    return RoundSum(ones, hi - lo)


def run_protocol(gen: ProtocolGenerator[Any], x: np.ndarray, rng: np.random.Generator) -> Any:
    """Drive a bit-pushing protocol generator, answering each round with :func:`round_sum`.

    Parameters
    ----------
    gen : ProtocolGenerator
        A fresh protocol (not started).
    x : numpy.ndarray of float64, shape (n,)
        Every client's value, in random order.
    rng : numpy.random.Generator
        The clients' randomness.

    Returns
    -------
    object
        What the protocol returns.
    """
    rnd = next(gen)
    while True:
        try:
            rnd = gen.send(round_sum(x, rnd, rng))
        except StopIteration as stop:
            return stop.value


def simulate_release(
    statistic: str,
    x: Any,
    encoding: BitEncoding,
    *,
    rng: np.random.Generator,
    method: str | None = None,
    epsilon: float | None = None,
    mean_fraction: float | None = None,
    **options: Any,
) -> BitPushingResult:
    """One simulated release of a bit-pushing mean or variance of the clients ``x`` (shuffled here).

    Parameters
    ----------
    statistic : {"mean", "variance"}
    x : array_like of float, shape (n,)
        The clients' values (finite); shuffled with ``rng`` first, as the API shuffles an array.
    encoding : BitEncoding
        Declared range.
    rng : numpy.random.Generator
        All the run's randomness (shuffle, public seed, clients).
    method : str, optional
        ``"basic"``, ``"weighted"`` or ``"adaptive"``; default the config's
        (:class:`~fedstats.analyses.bitpushing.config.BitPushingMeanConfig`).
    epsilon : float, optional
        Local DP epsilon per client; None: no DP.
    mean_fraction : float, optional
        Variance only: the mean stage's share (default the config's).
    **options
        The stage's options (:func:`~fedstats.analyses.bitpushing.protocol.make_stage`).

    Returns
    -------
    BitPushingResult
        As the API's, without ``truth`` and the privacy fields the engine run fills in.

    Raises
    ------
    ParameterError
        If ``statistic``, the method or an option is invalid, or the stage is not simulated here.
    """
    check_choice("statistic", statistic, ("mean", "variance"))
    values = check_finite_array("values", x, ndim=1)
    values = values[rng.permutation(values.size)]
    m = method if method is not None else BitPushingVarianceConfig.method
    stage = make_stage(m, epsilon=epsilon, **options)
    seed = int(rng.integers(2**62))
    if statistic == "mean":
        gen: Any = mean_protocol(stage, "value", encoding, values.size, method=m, public_seed=seed)
    else:
        mf = mean_fraction if mean_fraction is not None else BitPushingVarianceConfig.mean_fraction
        gen = variance_protocol(
            stage, "value", encoding, values.size, method=m, public_seed=seed, mean_fraction=mf
        )
    res: BitPushingResult = run_protocol(gen, values, rng)
    return res
