"""FED-chi^2's p-value under independence that accounts for the sketch noise (ours), and batch decoding.

Under independence the exact statistic is ``s ~ chi2_dof`` and the decoded one ``s * G`` with ``G`` the
decoder's multiplicative noise, so ``P(s G > x) = E_G[chi2_sf(x / G, dof)]`` (:func:`sketched_p_value`).
:func:`batch_decode` applies the decoders of :mod:`fedstats.sketches.decoders` to many encodings at once.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np

from fedstats._numeric import chi2_isf, chi2_pdf, chi2_ppf, chi2_sf, norm_sf
from fedstats._validation import check_choice, check_int, check_real
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RandomSource
from fedstats.sketches.decoders import geometric_mean_estimator, mean_of_squares_estimator

__all__ = [
    "DECODERS",
    "batch_decode",
    "noise_averaged_p_value",
    "sketch_noise_quantiles",
    "sketched_p_value",
]

DECODERS: tuple[str, ...] = ("mean-of-squares", "geometric")

_CALIBRATION_DRAWS = 20_000


@functools.lru_cache(maxsize=64)
def _geometric_noise(encoding_size: int, points: int) -> np.ndarray:
    rng = RandomSource(0).public("fed-chi2", "geometric-noise", encoding_size)
    z = np.asarray(rng.standard_normal((_CALIBRATION_DRAWS, encoding_size)))
    g = np.sort(batch_decode(math.sqrt(2.0) * z, "geometric"))
    return _frozen(np.quantile(g, (np.arange(points) + 0.5) / points))


@functools.lru_cache(maxsize=64)
def _mean_of_squares_noise(encoding_size: int, points: int) -> np.ndarray:
    # G = chi2_l / l exactly: its quantile midpoints in closed form (a release asks for them three times,
    # at the estimate and at both interval ends)
    return _frozen(chi2_ppf((np.arange(points) + 0.5) / points, encoding_size) / encoding_size)


def _frozen(values: Any) -> np.ndarray:
    """A read-only float64 copy: the cached quantiles are shared by every caller."""
    out = np.array(values, dtype=np.float64)
    out.flags.writeable = False
    return out


def sketch_noise_quantiles(encoding_size: int, decoder: str, points: int = 2000) -> np.ndarray:
    """Quantiles of the decoder's multiplicative noise ``G`` (the decoded statistic when the truth is 1).

    With alpha = 2 the aggregated encoding is ``sqrt(s) * N(0, 2)^l`` (quantization aside), so the decoded
    statistic is ``s * G`` with ``G`` independent of ``s``. For the mean of squares ``G = chi2_l / l``
    exactly, and its quantiles are computed in closed form; for the geometric mean they come from 20,000
    draws of a fixed public stream (deterministic, cached per ``l``).

    Parameters
    ----------
    encoding_size : int
        ``l >= 2``.
    decoder : {"mean-of-squares", "geometric"}
    points : int
        Number of quantile midpoints ``(i + 1/2) / points``, >= 10.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(points,)``, increasing; read-only (cached per ``(l, decoder, points)``).

    Raises
    ------
    ParameterError
        If ``l < 2``, the decoder is unknown or ``points < 10``.
    """
    ell = check_int("encoding_size", encoding_size, low=2)
    decoder = check_choice("decoder", decoder, DECODERS)
    points = check_int("points", points, low=10)
    if decoder == "mean-of-squares":
        return _mean_of_squares_noise(ell, points)
    return _geometric_noise(ell, points)


def noise_averaged_p_value(statistic: Any, dof: int, noise_quantiles: Any) -> Any:
    """Compute ``P(s G > x)`` for ``s ~ chi2_dof`` and ``G`` given by quantile points.

    The average of ``chi2_sf(x / G, dof)`` over the points.

    Evaluated exactly on 2,000 log-spaced values between the smallest and largest positive ``x`` and
    interpolated in ``log x`` (the function is smooth and monotone); a non-positive ``x`` gets 1.

    Parameters
    ----------
    statistic : float or array_like
        Decoded statistic(s), any shape.
    dof : int
        Degrees of freedom, >= 1.
    noise_quantiles : array_like of float, shape (k,)
        Positive quantile points of ``G`` (e.g. :func:`sketch_noise_quantiles`).

    Returns
    -------
    float or numpy.ndarray
        Same shape as ``statistic``, in [0, 1].

    Raises
    ------
    ParameterError
        If ``dof < 1``.
    """
    dof = check_int("dof", dof, low=1)
    x = np.asarray(statistic, dtype=np.float64)
    flat = x.ravel()
    pos = flat > 0
    out = np.ones(flat.size)
    if pos.any():
        lo, hi = np.log(flat[pos].min()), np.log(flat[pos].max())
        grid = np.exp(np.linspace(lo, hi, 2000)) if hi > lo else np.exp(np.array([lo]))
        g = np.asarray(noise_quantiles, dtype=np.float64)[None, :]
        p_grid = chi2_sf(grid[:, None] / g, dof).mean(axis=1)
        out[pos] = np.interp(np.log(flat[pos]), np.log(grid), p_grid)
    res = out.reshape(x.shape)
    return float(res) if res.ndim == 0 else res


def normal_averaged_p_value(statistic: float, dof: int, noise_sd: float) -> float:
    """p-value of an estimated statistic ``s + e`` with ``s ~ chi2_dof`` and an additive error ``e ~ N(0, sd^2)``.

    ``P(s + e >= x) = int f_dof(s) Phi((s - x) / sd) ds`` (adaptive quadrature over the chi-square density,
    which is smooth where ``chi2_sf(x - sd Z)`` is not: it has a kink at ``x - sd Z = 0``). The
    G-test through FED-H estimates ``G = 2 |v| (H_X + H_Y - H_XY)`` with FED-H's error on ``H_XY`` times
    ``2 |v|``: reading ``chi2_sf`` of that estimate as if it were exact rejects independence in about half
    the runs at level 0.05 (400 clients, 3 x 2 tables, default encoding size); averaged over the error,
    the test holds its size (``python benchmarks/g_test_size.py``, ``tests/library/test_g_test_size.py``).

    Parameters
    ----------
    statistic : float
        The estimated statistic, unclipped (may be negative).
    dof : int
        Degrees of freedom, >= 1.
    noise_sd : float
        Standard deviation of the estimate's additive error, >= 0 (0 gives ``chi2_sf(statistic, dof)``).

    Returns
    -------
    float
        In [0, 1].

    Raises
    ------
    ParameterError
        ``dof < 1`` or a negative or non-finite ``noise_sd``.
    """
    check_int("dof", dof, low=1)
    check_real("noise_sd", noise_sd, low=0.0)
    if noise_sd == 0.0:
        return float(chi2_sf(max(statistic, 0.0), dof))
    import scipy.integrate  # lazily (import cost)

    def integrand(s: float) -> float:
        return float(chi2_pdf(s, dof) * norm_sf((statistic - s) / noise_sd))

    # split where the mass is (the density's bulk and the point where Phi turns): quad's error bound holds
    bulk = float(chi2_isf(1e-12, dof))
    cuts = sorted({0.0, min(max(statistic, 0.0), bulk), bulk})
    total = sum(
        scipy.integrate.quad(integrand, a, b, limit=200, epsabs=1e-14)[0]
        for a, b in itertools.pairwise(cuts)
        if b > a
    )
    return float(min(max(total, 0.0), 1.0))


def sketched_p_value(
    statistic: Any, dof: int, *, encoding_size: int, decoder: str, noise_offset: float = 0.0
) -> Any:
    """p-value of a sketched chi-square statistic under independence.

    Under independence the exact statistic is ``s ~ chi2_dof`` and the decoded one ``s * G`` with ``G`` the
    decoder's noise (:func:`sketch_noise_quantiles`), so ``P(s G > x) = E_G[chi2_sf(x / G, dof)]``
    (:func:`noise_averaged_p_value` over 2,000 quantile midpoints of ``G``).
    The paper (Pang et al. 2023, Alg. 2) reads ``chi2_sf(x, dof)`` instead, as if ``x`` were exact; that
    p-value is too small under independence (measured: 28% rejections at level 0.05 with l = 50, against
    4% for the exact test; ``results/fed-chi2/``). This one is uniform under independence without dropout
    (dropout shrinks the statistic and makes it conservative).

    Parameters
    ----------
    statistic : float or array_like
        Decoded statistic(s), >= 0.
    dof : int
        Degrees of freedom, >= 1.
    encoding_size : int
        ``l >= 2``.
    decoder : {"mean-of-squares", "geometric"}
    noise_offset : float
        ``tau >= 0``: the statistic was decoded from an encoding with independent DP noise of variance
        ``2 tau`` per coordinate and ``tau`` subtracted (:mod:`fedstats.analyses.chi2.privacy`), so it is
        ``(s + tau) G - tau`` and ``P(D > x) = E_G[chi2_sf((x + tau) / G - tau, dof)]``. Default 0.

    Returns
    -------
    float or numpy.ndarray
        Same shape as ``statistic``, in [0, 1]; 1 where the statistic is not positive.

    Raises
    ------
    ParameterError
        If ``dof < 1``, ``l < 2``, the decoder is unknown or ``noise_offset < 0``.
    """
    dof = check_int("dof", dof, low=1)
    tau = check_real("noise_offset", noise_offset, low=0.0, high=math.inf, high_open=True)
    g = sketch_noise_quantiles(encoding_size, decoder)
    if tau == 0.0:
        return noise_averaged_p_value(statistic, dof, g)
    x = np.asarray(statistic, dtype=np.float64)
    flat = x.ravel()
    out = np.ones(flat.size)
    for a in range(0, flat.size, 256):
        xs = flat[a : a + 256]
        shifted = np.maximum((xs[:, None] + tau) / g[None, :] - tau, 0.0)
        p = chi2_sf(shifted, dof).mean(axis=1)
        out[a : a + 256] = np.where(xs > 0, p, 1.0)
    res = out.reshape(x.shape)
    return float(res) if res.ndim == 0 else res


def batch_decode(encodings: Any, decoder: str = "mean-of-squares") -> np.ndarray:
    """Decode ``F_2`` from many aggregated Gaussian encodings at once (estimates only, no intervals).

    Uses the decoders of :mod:`fedstats.sketches.decoders` through their homogeneity: the mean-of-squares
    estimate of ``e`` is its estimate on the all-ones encoding times ``mean(e^2)``, and the geometric-mean
    estimate is its estimate on all-ones times ``exp(2 mean log|e|)``; each decoder is called once per
    encoding size.

    Parameters
    ----------
    encodings : array_like, shape (n, l)
        ``l >= 2`` entries per row, finite.
    decoder : {"mean-of-squares", "geometric"}

    Returns
    -------
    numpy.ndarray
        ``(n,)`` float64 estimates (0 for a row with an exactly-zero entry under the geometric mean).

    Raises
    ------
    ParameterError
        If ``l < 2`` or the decoder is unknown.
    DataError
        If an encoding is not finite.
    """
    decoder = check_choice("decoder", decoder, DECODERS)
    e = np.asarray(encodings, dtype=np.float64)
    if e.ndim != 2:
        raise DataError(f"encodings must be (n, l), got shape {e.shape}")
    ell = e.shape[1]
    if ell < 2:
        raise ParameterError("encoding_size", ell, "an integer >= 2")
    if not np.isfinite(e).all():
        raise DataError("an encoding has a NaN or infinite value")
    ones = np.ones(ell)
    if decoder == "mean-of-squares":
        return np.asarray(mean_of_squares_estimator(ones).estimate * np.mean(e * e, axis=1))
    base = geometric_mean_estimator(ones, 2.0).estimate
    absv = np.abs(e)
    zero = (absv == 0.0).any(axis=1)
    with np.errstate(divide="ignore"):
        out = base * np.exp(2.0 * np.mean(np.log(np.where(absv > 0, absv, 1.0)), axis=1))
    return np.where(zero, 0.0, out)
