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
from fedstats.engine.validity import Verdicts, output_check
from fedstats.errors import ParameterError
from fedstats.randomness import RNG

__all__ = [
    "SHARE_KINDS",
    "add_noise_share",
    "check_centre_reports",
    "check_spread_reports",
    "encode_centre",
    "encode_spread",
    "weights_u",
]

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
    batch, rng
        As for :func:`encode_centre`.
    params : Mapping
        ``blocks`` (subset of ``["dispersion", "q"]``), the released centres ``mu`` / ``mu_w`` (lists of
        length d), ``p``, ``sens_dispersion``, ``sens_q``, ``min_variance`` and the keys of
        :func:`add_noise_share`.

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


# relative slack on a bound computed in floating point other than the encoder's own operations (sums of
# squares, powers): their rounding errors are below 1e-12 relative, so an honest value never exceeds it
_SLACK = 1e-9


def _grid_range(
    params: Mapping[str, Any], low: np.ndarray, high: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Integer range ``[lo, hi]`` of one record's entries whose real values lie in ``[low, high]``.

    With a noise share the entry is any integer the share allows: ``[-bound, bound]`` (discrete Gaussian,
    full support, clipped to ``bound``) or the fixed-point range (Gaussian shares, clipped before
    rounding). Without one it is the randomized rounding of the clipped value: ``floor`` of the low end to
    ``ceil`` of the high end on the grid ``2^-f``.
    """
    kind = params["noise"]
    fp = FixedPoint(int(params["frac_bits"]), float(params["clip"]))
    if kind == "discrete":
        b = int(params["bound"])
        return np.full(low.shape, -b, dtype=np.int64), np.full(high.shape, b, dtype=np.int64)
    if kind == "gaussian":
        return (
            np.full(low.shape, -fp.bound, dtype=np.int64),
            np.full(high.shape, fp.bound, dtype=np.int64),
        )
    c = fp.clip
    lo = np.floor(np.clip(low, -c, c) * fp.scale).astype(np.int64)
    hi = np.ceil(np.clip(high, -c, c) * fp.scale).astype(np.int64)
    return lo, hi


def _range_verdicts(
    vectors: np.ndarray, counts: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> Verdicts:
    """Reports whose entries leave ``[count lo_j, count hi_j]`` fail with ``value_out_of_range``."""
    out = Verdicts(counts.size)
    k = counts[:, None]
    # a sum S of k entries in [lo, hi] lies in [k lo, k hi]: ceil(S / k) <= hi and floor(S / k) >= lo
    over = -((-vectors) // k) > hi[None, :]
    under = vectors // k < lo[None, :]
    out.fail(
        "value_out_of_range",
        (over | under).any(axis=1),
        lambda i: (
            f"entry {int(np.flatnonzero((over | under)[i])[0])} is outside "
            f"{int(counts[i])} x the encoder's range"
        ),
    )
    return out


def _centre_layout(params: Mapping[str, Any], dim: int) -> tuple[int, bool, bool]:
    mean = "mean" in params["blocks"]
    weighted = "weighted" in params["blocks"]
    d = (dim - int(weighted)) // (int(mean) + int(weighted))
    return d, mean, weighted


@output_check(encode_centre)
def check_centre_reports(
    vectors: np.ndarray, counts: np.ndarray, params: Mapping[str, Any], starts: np.ndarray | None
) -> Verdicts:
    r"""Output check of :func:`encode_centre`: each entry within ``count`` times one record's range.

    With a noise share (``"discrete"``: every release) one record's entry is any integer in
    ``[-bound, bound]``, so the check (``value_out_of_range``) is **exact**. Without one (central noise or
    none) the real values are :math:`x_j / s_m \in [0, 1/s_m]`, :math:`u x_j / s_w \in [0, 1/s_w]` and
    :math:`u / s_w \in [\min(1, 4 v_{\min}) / s_w, 1/s_w]`, rounded at random on the grid; the check is
    then the tight necessary per-entry range, plus :math:`\sum u x_j \le \sum u + k` on the grid
    (``weight_mismatch``: each record rounds :math:`u x_j \le u` to at most one step above its rounded
    :math:`u`).

    Parameters
    ----------
    vectors : numpy.ndarray
        int64 ``(n, dim)``.
    counts, starts
        As :class:`~fedstats.engine.validity.OutputCheck`; ``starts`` is unused here (every record has
        the same output set).
    params : Mapping
        The round's parameters (:func:`encode_centre`, :func:`add_noise_share`).

    Returns
    -------
    Verdicts
        Each record's first failure: ``value_out_of_range``, then ``weight_mismatch``.
    """
    del starts  # the output set does not depend on the record
    dim = vectors.shape[1]
    d, mean, weighted = _centre_layout(params, dim)
    low, high = [], []
    if mean:
        low += [0.0] * d
        high += [1.0 / float(params["sens_mean"])] * d
    if weighted:
        sw = float(params["sens_weighted"])
        u_min = min(1.0, 4.0 * float(params["min_variance"]))
        low += [0.0] * d + [u_min / sw * (1.0 - _SLACK)]
        high += [1.0 / sw] * (d + 1)
    lo, hi = _grid_range(params, np.asarray(low), np.asarray(high))
    out = _range_verdicts(vectors, counts, lo, hi)
    if weighted and params["noise"] == "none":
        off = d if mean else 0
        ux, u = vectors[:, off : off + d], vectors[:, off + d]
        bad = (ux > (u + counts)[:, None]).any(axis=1)
        out.fail(
            "weight_mismatch",
            bad,
            "a weighted entry exceeds the reported weight by more than one step per record",
        )
    return out


@output_check(encode_spread)
def check_spread_reports(
    vectors: np.ndarray, counts: np.ndarray, params: Mapping[str, Any], starts: np.ndarray | None
) -> Verdicts:
    r"""Output check of :func:`encode_spread`: each entry within ``count`` times one record's range.

    With a noise share one record's entry is any integer in ``[-bound, bound]`` (**exact**). Without one,
    :math:`\lVert x - \mu'\rVert^p / s_D \in [0, (\sum_j \max(\mu'_j, 1 - \mu'_j)^2)^{p/2} / s_D]` for
    :math:`x \in [0, 1]^d` and :math:`u \lVert x - \mu_w'\rVert^2 / s_Q` likewise with :math:`u \le 1`
    (the upper ends with a relative slack of 1e-9 for floating-point sums): the tight necessary per-entry
    range (``value_out_of_range``).

    Parameters
    ----------
    vectors, counts, starts
        As :func:`check_centre_reports` (``vectors`` has one column per block).
    params : Mapping
        The round's parameters (:func:`encode_spread`, :func:`add_noise_share`).

    Returns
    -------
    Verdicts
        Each record's ``value_out_of_range`` failure, if any.
    """
    del starts  # the output set does not depend on the record
    high = []
    if "dispersion" in params["blocks"]:
        mu = np.asarray(params["mu"], dtype=np.float64)
        far = float(np.sum(np.maximum(mu, 1.0 - mu) ** 2))
        high.append(far ** (float(params["p"]) / 2.0) / float(params["sens_dispersion"]))
    if "q" in params["blocks"]:
        mu_w = np.asarray(params["mu_w"], dtype=np.float64)
        far = float(np.sum(np.maximum(mu_w, 1.0 - mu_w) ** 2))
        high.append(far / float(params["sens_q"]))
    top = np.asarray(high) * (1.0 + _SLACK)
    lo, hi = _grid_range(params, np.zeros_like(top), top)
    return _range_verdicts(vectors, counts, lo, hi)
