r"""Client side of the mean baselines: subtractive dithering, Piecewise, Duchi and Laplace reports.

Each client first computes the same integer code as in bit pushing
(:func:`fedstats.analyses.bitpushing.client.client_codes`), so every method sees the same data, range and
encoding; then:

* :func:`encode_dithering`: subtractive dithering (Ben-Basat, Mitzenmacher, Vargaftik 2021) of
  ``u = code / 2^b`` with the public dither of its index, an ``S``-bit message, through randomized
  response when private (one bit);
* :func:`encode_ldp`: Piecewise, Duchi (Wang et al., ICDE 2019) or Laplace on
  ``t = 2 code / (2^b - 1) - 1`` in [-1, 1]. Every report is an integer that is a function of a finite or
  gridded output (Mironov 2012): Duchi's +-C is one bit; Piecewise is the mechanism's grid path (unbiased
  randomized rounding to :math:`2^{-f}`, ``f = frac_bits``); Laplace is the grid path of
  :class:`~fedstats.privacy.mechanisms.LaplaceMechanism` (``t`` rounded, unbiased, to the grid
  :math:`2^{-f}`, then discrete Laplace noise on that grid). The report is the grid index, clipped at
  ``clip`` (a probability below 1e-17 for Laplace; never for Piecewise).

Imports numpy, :mod:`fedstats.privacy`, the engine's fixed point and bit pushing's client module only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstats.analyses.bitpushing.client import client_codes, public_uniform
from fedstats.engine.fixedpoint import FixedPoint
from fedstats.privacy.mechanisms import (
    DuchiMechanism,
    LaplaceMechanism,
    Mechanism,
    PiecewiseMechanism,
    RandomizedResponse,
    SubtractiveDithering,
)
from fedstats.randomness import RNG

if TYPE_CHECKING:
    from fedstats.engine.rounds import ClientBatch

__all__ = ["ceil_log2", "dither", "encode_dithering", "encode_ldp", "ldp_mechanism"]

_DITHER_KEY = 0x5D17
LAPLACE_SENSITIVITY = 2.0
"""L1 sensitivity of ``t`` in [-1, 1]."""


def dither(seed: int, indices: np.ndarray) -> np.ndarray:
    """Return the public dithers ``h ~ U[-1/2, 1/2)`` of clients ``indices`` (both sides compute them).

    Parameters
    ----------
    seed : int
        The round's public seed.
    indices : numpy.ndarray of int
        Global client indices.

    Returns
    -------
    numpy.ndarray of float64, shape of ``indices``
    """
    return public_uniform(seed ^ _DITHER_KEY, indices) - 0.5


def encode_dithering(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Subtractive dithering on the client: the ``S``-bit message of ``u = code / 2^b``.

    Parameters
    ----------
    batch : ClientBatch
        The clients.
    params : Mapping
        The code description (:func:`~fedstats.analyses.bitpushing.client.client_codes`) plus ``seed``
        (public), ``message_bits`` (S) and ``epsilon`` (None, or randomized response on the one bit).
    rng : RNG
        Private randomness (randomized rounding of the code, randomized response).

    Returns
    -------
    numpy.ndarray of int64, shape (batch.n, 1), in ``[0, 2^S - 1]``.
    """
    codes = client_codes(batch, params, rng)
    u = codes.astype(np.float64) / float(2 ** int(params["bit_depth"]))
    h = dither(int(params["seed"]), batch.indices)
    q = SubtractiveDithering(bit_depth=int(params["message_bits"])).encode(u, h)
    eps = params.get("epsilon")
    if eps is not None:
        q = RandomizedResponse(epsilon=eps).randomize(q, rng).astype(np.int64)
    out: np.ndarray = q.reshape(-1, 1)
    return out


def ceil_log2(x: float) -> int:
    """``ceil(log2 x)`` for ``x > 0``, exactly (from the binary exponent, as the release grids do).

    Parameters
    ----------
    x : float
        Positive, finite.

    Returns
    -------
    int
    """
    mant, exp = math.frexp(x)
    return exp - 1 if mant == 0.5 else exp


def ldp_mechanism(name: str, epsilon: float, frac_bits: int) -> Mechanism:
    """Build the mechanism a client of ``name`` applies, on its release grid ``2**-frac_bits``.

    Parameters
    ----------
    name : {"piecewise", "duchi", "laplace"}
        The baseline.
    epsilon : float
        Local DP epsilon, > 0.
    frac_bits : int
        Fractional bits of the report (Piecewise, Laplace).

    Returns
    -------
    Mechanism
        ``PiecewiseMechanism`` and ``LaplaceMechanism`` on their grid paths (``floating_point_safe``).
    """
    if name == "duchi":
        return DuchiMechanism(epsilon=epsilon)
    if name == "piecewise":
        # grid 2**(ceil(log2 C) - k) = 2**-frac_bits
        k = frac_bits + ceil_log2(PiecewiseMechanism(epsilon=epsilon).C)
        return PiecewiseMechanism(epsilon=epsilon, resolution_bits=k)
    # grid 2**(ceil(log2 2) - k) = 2**-frac_bits
    return LaplaceMechanism(
        epsilon=epsilon, sensitivity=LAPLACE_SENSITIVITY, resolution_bits=frac_bits + 1
    )


def encode_ldp(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Piecewise, Duchi or Laplace on the client, on ``t = 2 code / (2^b - 1) - 1``.

    Parameters
    ----------
    batch
        As for :func:`encode_dithering`.
    params : Mapping
        The code description plus ``mechanism``, ``epsilon``, ``frac_bits`` and ``clip`` (largest report
        magnitude in units of ``t``).
    rng : RNG
        Private randomness (rounding and the mechanism's noise).

    Returns
    -------
    numpy.ndarray of int64, shape (batch.n, 1)
        Duchi: 1 for +C, 0 for -C. Piecewise, Laplace: the output's index on the grid
        ``2**-frac_bits``, clipped to ``[-clip, clip] * 2**frac_bits``.
    """
    codes = client_codes(batch, params, rng)
    t = np.clip(2.0 * codes / float(2 ** int(params["bit_depth"]) - 1) - 1.0, -1.0, 1.0)
    name = params["mechanism"]
    fb = int(params["frac_bits"])
    mech = ldp_mechanism(name, float(params["epsilon"]), fb)
    if name == "duchi":
        sign: np.ndarray = (mech.randomize(t, rng) > 0).astype(np.int64).reshape(-1, 1)
        return sign
    if name == "laplace":
        # unbiased randomized rounding of t onto the release grid, so the mechanism's snap is exact
        grid = FixedPoint(fb, 1.0)
        t = grid.decode(grid.encode(t, rng)[0])
    z = mech.randomize(t, rng)  # grid points: z * 2**frac_bits is an exact integer
    q, _ = FixedPoint(fb, float(params["clip"])).encode(z)
    out: np.ndarray = q.reshape(-1, 1)
    return out
