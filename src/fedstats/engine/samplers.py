"""Samplers of sums of randomized reports, for the simulation routes (:mod:`fedstats.engine.aggregate`).

Clients with the same input are i.i.d. under a local randomizer, so the sum of their reports is drawn per
distinct input: randomized response over ``k`` ones among ``n`` is ``Binomial(k, p) + Binomial(n - k,
1 - p)``; generalized randomized response, Harmony, Duchi, one-hot and bit-choice encodings are
multinomial per distinct input; a sum of ``m`` Laplace(b) noises is ``b (Gamma(m) - Gamma(m))``, of ``m``
discrete Laplace(t) noises a difference of two negative binomials, of Gaussian noises a Gaussian.

The samplers invert CDFs from the run's uniforms (``scipy.stats`` ``ppf``), so they work with the secure
and the seeded generators alike, except the binomial (and so the multinomial): numpy's sampler (BTPE,
Kachitvichyanukul and Schmeiser 1988) draws it from a numpy generator, the run's own when seeded, else one
keyed from the secure stream (:func:`simulation_generator`), since exact inversion of the CDF (scipy's
``binom.ppf``) costs 0.2-0.4 ms a variate at n = 10^11-10^12. They are for simulation, not for releases.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fedstats.engine.rounds import InputHistogram
from fedstats.errors import ParameterError
from fedstats.randomness import RNG

__all__ = [
    "PER_CLIENT",
    "binomial",
    "discrete_laplace_sum",
    "gaussian_sum",
    "laplace_sum",
    "multinomial",
    "randomized_response_sum",
    "simulation_generator",
    "split_cohort",
    "split_inputs",
]

PER_CLIENT = "backend='serial', 'process' or 'dask' (--backend serial|process|dask)"
"""The per-client routes, as an error message names them."""


def _uniform(rng: RNG, size: int) -> np.ndarray:
    u = np.asarray(rng.random(size), dtype=np.float64)
    # open at 0: a ppf at exactly 0 is the support's lower end, harmless, but keep (0, 1) for symmetry
    return np.clip(u, np.finfo(np.float64).tiny, 1.0)


def simulation_generator(rng: RNG) -> np.random.Generator:
    """A numpy generator for samplers only numpy offers fast: ``rng`` itself when it is numpy's (seeded).

    A secure generator keys a PCG64 generator from 32 bytes of its stream: the draws stay unpredictable
    without the run's key, but PCG64 is not a cryptographic generator, which is why it serves the
    simulation routes only.

    Parameters
    ----------
    rng : RNG
        The round's (or the population's) generator.

    Returns
    -------
    numpy.random.Generator
    """
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.Generator(np.random.PCG64(int.from_bytes(rng.bytes(32), "little")))


def binomial(rng: RNG, n: Any, p: Any) -> np.ndarray:
    """Binomial(n, p) variates, vectorized over broadcast ``n`` and ``p``.

    numpy's sampler, from :func:`simulation_generator` (``rng`` itself when seeded).

    Parameters
    ----------
    rng : RNG
        The round's generator (a secure one keys a numpy generator from its stream).
    n : array_like of int
        Trials, each in ``[0, 2^62)``.
    p : array_like of float
        Success probabilities in ``[0, 1]``.

    Returns
    -------
    numpy.ndarray
        int64 variates of the broadcast shape.
    """
    n_arr, p_arr = np.broadcast_arrays(np.asarray(n, dtype=np.int64), np.asarray(p, dtype=float))
    out = np.zeros(n_arr.shape, dtype=np.int64)
    full = (p_arr >= 1.0) & (n_arr > 0)
    out[full] = n_arr[full]
    live = (n_arr > 0) & (p_arr > 0.0) & (p_arr < 1.0)
    if live.any():
        gen = simulation_generator(rng)
        out[live] = np.asarray(gen.binomial(n_arr[live], p_arr[live]), dtype=np.int64)
    return out


def multinomial(rng: RNG, n: Any, probabilities: Any) -> np.ndarray:
    """One multinomial draw per row: ``n[i]`` trials over the outcomes of ``probabilities[i]``.

    By conditional binomials over the (few) outcomes, vectorized over the rows (distinct inputs).

    Parameters
    ----------
    rng : RNG
        The round's generator.
    n : array_like of int, shape (k,)
        Trials per row, >= 0.
    probabilities : array_like of float, shape (k, m)
        Outcome probabilities per row, each row summing to 1 (within rounding).

    Returns
    -------
    numpy.ndarray
        int64 ``(k, m)`` counts; row ``i`` sums to ``n[i]``.
    """
    counts = np.asarray(n, dtype=np.int64)
    p = np.asarray(probabilities, dtype=float)
    k, m = p.shape
    rng = simulation_generator(rng)  # once, not per outcome
    out = np.zeros((k, m), dtype=np.int64)
    left = counts.copy()
    rest = np.ones(k)
    for j in range(m - 1):
        q = np.divide(p[:, j], rest, out=np.ones(k), where=rest > 0)
        x = binomial(rng, left, np.clip(q, 0.0, 1.0))
        out[:, j] = x
        left -= x
        rest = np.maximum(rest - p[:, j], 0.0)
    out[:, m - 1] = left
    return out


def randomized_response_sum(rng: RNG, ones: Any, zeros: Any, keep: float) -> np.ndarray:
    """Reported ones among ``ones`` true ones and ``zeros`` true zeros under randomized response.

    ``Binomial(ones, keep) + Binomial(zeros, 1 - keep)`` (Warner 1965).

    Parameters
    ----------
    rng : RNG
        The round's generator.
    ones, zeros : array_like of int
        Clients whose true bit is 1, and 0.
    keep : float
        Probability of reporting the true bit, in [0, 1].

    Returns
    -------
    numpy.ndarray
        int64 counts of reported ones, broadcast shape.
    """
    out: np.ndarray = binomial(rng, ones, keep) + binomial(rng, zeros, 1.0 - keep)
    return out


def _gamma(rng: RNG, shape: np.ndarray) -> np.ndarray:
    import scipy.stats

    return np.asarray(scipy.stats.gamma.ppf(_uniform(rng, shape.size), shape), dtype=float)


def _live_sums(
    count: Any, dtype: type[np.generic], draw: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """Sums of ``count`` variates each, shaped as ``count``: ``draw(counts)`` where positive, else 0."""
    c = np.atleast_1d(np.asarray(count, dtype=dtype))
    out = np.zeros(c.shape, dtype=dtype)
    live = c > 0
    if live.any():
        out[live] = draw(c[live])
    return out.reshape(np.shape(count))


def laplace_sum(rng: RNG, count: Any, scale: float) -> np.ndarray:
    """Sum of ``count`` i.i.d. Laplace(0, scale) variates: ``scale (Gamma(count) - Gamma(count))``.

    Parameters
    ----------
    rng : RNG
        The round's generator.
    count : array_like of int
        Number of summed variates, >= 0.
    scale : float
        Laplace scale b > 0.

    Returns
    -------
    numpy.ndarray
        float64 sums (0 where ``count`` is 0).
    """
    return _live_sums(count, np.float64, lambda m: scale * (_gamma(rng, m) - _gamma(rng, m)))


def discrete_laplace_sum(rng: RNG, count: Any, t: float) -> np.ndarray:
    """Sum of ``count`` i.i.d. discrete Laplace(t) integers (P(x) proportional to exp(-|x|/t)).

    A discrete Laplace variate is the difference of two i.i.d. geometric variates on {0, 1, ...} with
    success probability ``1 - exp(-1/t)``; a sum of ``m`` geometrics is NegativeBinomial(m, ...), so the
    sum is the difference of two negative binomials.

    Parameters
    ----------
    rng, count
        As :func:`laplace_sum`.
    t : float
        Scale > 0.

    Returns
    -------
    numpy.ndarray
        int64 sums.
    """
    import scipy.stats

    def difference(m: np.ndarray) -> np.ndarray:
        q = -math.expm1(-1.0 / t)  # success probability
        a = scipy.stats.nbinom.ppf(_uniform(rng, m.size), m, q)
        b = scipy.stats.nbinom.ppf(_uniform(rng, m.size), m, q)
        return np.asarray(a, dtype=np.int64) - np.asarray(b, dtype=np.int64)

    return _live_sums(count, np.int64, difference)


def gaussian_sum(rng: RNG, count: Any, sigma: float) -> np.ndarray:
    """Sum of ``count`` i.i.d. N(0, sigma^2) variates: N(0, count sigma^2).

    Parameters
    ----------
    rng, count
        As :func:`laplace_sum`.
    sigma : float
        Standard deviation >= 0.

    Returns
    -------
    numpy.ndarray
        float64 sums.
    """
    c = np.atleast_1d(np.asarray(count, dtype=float))
    z = np.asarray(rng.standard_normal(c.size), dtype=float)
    out: np.ndarray = (z * sigma * np.sqrt(c)).reshape(np.shape(count))
    return out


_NUMPY_HYPERGEOMETRIC_LIMIT = 10**9


def split_cohort(hist: InputHistogram, sizes: Any, rng: RNG) -> np.ndarray:
    """Split a cohort uniformly at random into sub-cohorts of given sizes: inputs per sub-cohort.

    What a public random assignment of clients to tasks (bit pushing's exact allocation) does to a
    histogram. Exact in distribution:

    * clients i.i.d. (``hist.source`` set): each sub-cohort is ``sizes[j]`` fresh i.i.d. clients,
      Multinomial(sizes[j], source probabilities), independent across sub-cohorts (disjoint sets of
      i.i.d. clients are independent), at any size;
    * a fixed population below 10^9 clients: multivariate hypergeometric draws (without replacement).

    Parameters
    ----------
    hist : InputHistogram
        The cohort.
    sizes : array_like of int, shape (m,)
        Sub-cohort sizes summing to ``hist.n``.
    rng : RNG
        The round's generator.

    Returns
    -------
    numpy.ndarray
        int64 ``(k, m)``: clients with input ``i`` in sub-cohort ``j`` (``k`` rows of ``hist``, or of
        ``hist.source`` when it is set: use :func:`split_inputs` to get the matching columns).

    Raises
    ------
    ParameterError
        For a fixed population of 10^9 clients or more (no fast exact sampler without replacement).
    """
    m = np.asarray(sizes, dtype=np.int64)
    if hist.source is not None:
        probs = np.broadcast_to(hist.source[1], (m.size, hist.source[1].size))
        return multinomial(rng, m, probs).T
    if hist.n >= _NUMPY_HYPERGEOMETRIC_LIMIT:
        raise ParameterError(
            "backend",
            "aggregate",
            f"a cohort below 10^9 clients, a resampled population, or a per-client route ({PER_CLIENT}): "
            "splitting a fixed population of 10^9 or more clients without replacement has no fast "
            "exact sampler",
        )
    gen = simulation_generator(rng)
    out = np.zeros((hist.k, m.size), dtype=np.int64)
    left = hist.counts.astype(np.int64).copy()
    for j, size in enumerate(m[:-1]):
        out[:, j] = gen.multivariate_hypergeometric(left, int(size), method="marginals")
        left -= out[:, j]
    out[:, -1] = left
    return out


def split_inputs(hist: InputHistogram) -> dict[str, np.ndarray]:
    """The input columns that the rows of :func:`split_cohort`'s result refer to."""
    return dict(hist.source[0]) if hist.source is not None else dict(hist.columns)
