r"""Client side of the private heterogeneity protocol (paper 000): the encoders a device runs.

Round 1 (:func:`encode_centre`) reports :math:`x_i` and/or :math:`(u_i x_i, u_i)`; round 2
(:func:`encode_spread`) reports :math:`\lVert x_i - \mu'\rVert^p` and/or :math:`u_i\lVert x_i - \bar\mu'\rVert^2`.
Every block is divided by its sensitivity (unit sensitivity), rounded to the fixed-point grid
:math:`2^{-f}` by unbiased randomized rounding, and, with distributed noise, a noise share is added
(:func:`add_noise_share`):

* ``"discrete"`` (every release): an integer :math:`N_{\mathbb Z}(0, \sigma_s^2)` share on the grid
  (Kairouz, Liu & Steinke 2021), so the sum of the shares is accounted exactly;
* ``"gaussian"`` (simulation only): a floating-point :math:`N(0, \sigma_s^2)` share added before rounding,
  the paper's continuous design, never to be released (Mironov 2012).

Imports numpy, the engine's fixed-point codec and the discrete Gaussian sampler only, so a device can load it
without the server stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.rounds import ClientBatch
from fedstats.errors import ParameterError
from fedstats.randomness import RNG

__all__ = ["SHARE_KINDS", "add_noise_share", "encode_centre", "encode_spread", "weights_u"]

SHARE_KINDS: tuple[str, ...] = ("none", "discrete", "gaussian")


def weights_u(x: np.ndarray, min_variance: float) -> np.ndarray:
    r"""Bounded inverse-variance weights in units of their maximum, :math:`u_i = w_i / w_{\max}`.

    Parameters
    ----------
    x : numpy.ndarray, shape (n, d)
        The clients' vectors, entries in [0, 1].
    min_variance : float
        Public floor :math:`v_{\min}` in (0, 1/4] on the within-vector variance.

    Returns
    -------
    numpy.ndarray
        float64 ``(n,)``, :math:`v_{\min}/\max(s_i^2, v_{\min}) \in [\min(1, 4 v_{\min}), 1]`.
    """
    u: np.ndarray = min_variance / np.maximum(x.var(axis=1), min_variance)
    return u


def add_noise_share(values: np.ndarray, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Round normalised reports to the grid :math:`2^{-f}` and add this client's noise share.

    Parameters
    ----------
    values : numpy.ndarray of float, shape (n, dim)
        Normalised reports (each block divided by its sensitivity).
    params : Mapping
        ``frac_bits`` (f), ``clip`` (fixed-point clip, normalised units), ``bound`` (largest integer
        entry), ``noise`` (one of :data:`SHARE_KINDS`), ``share_variance`` (integer units, ``"discrete"``)
        and ``share_sd`` (normalised units, ``"gaussian"``).
    rng : RNG
        The client's private randomness (rounding and share).

    Returns
    -------
    numpy.ndarray
        int64 ``(n, dim)``, every entry within ``[-bound, bound]``.

    Raises
    ------
    ParameterError
        If ``params["noise"]`` is not one of :data:`SHARE_KINDS`.
    """
    kind = params["noise"]
    if kind not in SHARE_KINDS:
        raise ParameterError("noise", kind, "one of " + ", ".join(SHARE_KINDS))
    fp = FixedPoint(int(params["frac_bits"]), float(params["clip"]))
    if kind == "gaussian":  # simulation only: floating-point noise
        values = values + rng.normal(0.0, float(params["share_sd"]), size=values.shape)
    q, _ = fp.encode(values, rng)
    if kind == "discrete":
        # lazily: fedstats.privacy.mechanisms loads the whole privacy analysis (scipy) at import time
        from fedstats.privacy.mechanisms.samplers import sample_discrete_gaussian

        q = q + sample_discrete_gaussian(float(params["share_variance"]), values.shape, rng)
        b = int(params["bound"])
        q = np.clip(q, -b, b)
    out: np.ndarray = q
    return out


def encode_centre(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Round 1: normalised ``x_i`` and/or ``(u_i x_i, u_i)``, plus a noise share.

    Parameters
    ----------
    batch : ClientBatch
        Column ``params["column"]`` holds the ``(n, d)`` vectors in [0, 1].
    params : Mapping
        ``blocks`` (subset of ``["mean", "weighted"]``), ``sens_mean``, ``sens_weighted``,
        ``min_variance`` and the keys of :func:`add_noise_share`.
    rng : RNG
        The clients' private randomness.

    Returns
    -------
    numpy.ndarray
        int64 ``(batch.n, dim)``, ``dim = d`` per ``"mean"`` block and ``d + 1`` per ``"weighted"``.
    """
    x = np.asarray(batch.column(params["column"]), dtype=np.float64)
    parts = []
    if "mean" in params["blocks"]:
        parts.append(x / float(params["sens_mean"]))
    if "weighted" in params["blocks"]:
        u = weights_u(x, float(params["min_variance"]))
        parts.append(
            np.concatenate([u[:, None] * x, u[:, None]], axis=1) / float(params["sens_weighted"])
        )
    return add_noise_share(np.concatenate(parts, axis=1), params, rng)


def encode_spread(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Round 2: normalised ``||x_i - mu'||^p`` and/or ``u_i ||x_i - mu_w'||^2``, plus a noise share.

    Parameters
    ----------
    batch : ClientBatch
        Column ``params["column"]`` holds the ``(n, d)`` vectors in [0, 1].
    params : Mapping
        ``blocks`` (subset of ``["dispersion", "q"]``), the released centres ``mu`` / ``mu_w`` (lists of
        length d), ``p``, ``sens_dispersion``, ``sens_q``, ``min_variance`` and the keys of
        :func:`add_noise_share`.
    rng : RNG
        The clients' private randomness.

    Returns
    -------
    numpy.ndarray
        int64 ``(batch.n, dim)``, one column per block.
    """
    x = np.asarray(batch.column(params["column"]), dtype=np.float64)
    parts = []
    if "dispersion" in params["blocks"]:
        diff = x - np.asarray(params["mu"], dtype=np.float64)
        sq = np.einsum("ij,ij->i", diff, diff)
        p = float(params["p"])
        t = sq if p == 2.0 else np.power(sq, p / 2.0)
        parts.append((t / float(params["sens_dispersion"]))[:, None])
    if "q" in params["blocks"]:
        u = weights_u(x, float(params["min_variance"]))
        diff = x - np.asarray(params["mu_w"], dtype=np.float64)
        parts.append((u * np.einsum("ij,ij->i", diff, diff) / float(params["sens_q"]))[:, None])
    return add_noise_share(np.concatenate(parts, axis=1), params, rng)
