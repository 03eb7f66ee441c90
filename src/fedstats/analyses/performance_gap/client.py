r"""Client side of the performance-gap round: the encoders of :math:`\mathcal M_R` and :math:`\mathcal M_L`.

A client holds a group :math:`g \in \{0, \dots, d-1\}` and a value :math:`v \in [-1, 1]`. It perturbs the
group with generalized randomized response (GRR, keep probability :math:`a`), zeroes the value if the group
changed (Juarez & Korolova 2023, Algorithm 1, lines 1-4), then

* :math:`\mathcal M_R`: discretizes the value to a bit :math:`B \sim \mathrm{Bernoulli}((1+v)/2)` and
  applies randomized response (keep probability :math:`b`); the reported value is :math:`2B' - 1`;
* :math:`\mathcal M_L`: rounds :math:`v/\gamma` (grid spacing :math:`\gamma = 2^{1-r}`) at random, adds
  discrete Laplace noise of scale ``t_keep`` (group kept) or ``t_flip`` (group changed) and clips to
  ``clip``.

Its report is ``2d + 1`` integers: the reported value in the slot of its reported group, a 1 in that
group's count slot and (:math:`\mathcal M_L`) a clipping flag. The round's public ``params`` are built by
:func:`fedstats.analyses.performance_gap.protocol.report_params`.

:func:`sum_gap_reports` is the encoder's summed form (the sum of a batch's reports from the same draws, without
the ``(n, 2d + 1)`` one-hot array), which the engine's per-client routes use for a block's sum;
:func:`aggregate_gap_report` is :math:`\mathcal M_R`'s aggregate form (the sum of every client's report,
drawn per distinct input from its multinomial distribution), for the engine's aggregate route.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstats.engine.validity import Verdicts, exceeds, output_check
from fedstats.errors import DataError
from fedstats.privacy.mechanisms.randomized_response import (
    GeneralizedRandomizedResponse,
    RandomizedResponse,
)
from fedstats.privacy.mechanisms.samplers import bernoulli, sample_discrete_laplace
from fedstats.randomness import RNG

if TYPE_CHECKING:  # the engine package imports scipy.stats: a client needs only these types
    from fedstats.engine.rounds import ClientBatch, InputHistogram

__all__ = [
    "GROUP_COLUMN",
    "VALUE_COLUMN",
    "aggregate_gap_report",
    "check_gap_reports",
    "encode_gap_report",
    "outcome_probabilities",
    "perturb",
    "sum_gap_reports",
]

GROUP_COLUMN = "group"
"""Column of each client's group index (int, in ``[0, d)``)."""
VALUE_COLUMN = "value"
"""Column of each client's value (float, in ``[-1, 1]``)."""


def _grr(params: Mapping[str, Any]) -> GeneralizedRandomizedResponse:
    return GeneralizedRandomizedResponse(
        epsilon=max(float(params["epsilon1"]), 1e-300), k=int(params["n_groups"])
    )


def perturb(
    groups: np.ndarray, values: np.ndarray, params: Mapping[str, Any], rng: RNG
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Apply the mechanism to each client's (group, value): Algorithm 1 (R) or its Laplace variant (L).

    Parameters
    ----------
    groups : numpy.ndarray of int, shape (n,)
        Groups in ``{0, ..., d-1}``.
    values : numpy.ndarray of float, shape (n,)
        Values in ``[-1, 1]``.
    params : Mapping
        The round's public parameters (:func:`~fedstats.analyses.performance_gap.protocol.report_params`):
        ``mechanism`` ("R" or "L"), ``epsilon1``, ``epsilon2``, ``n_groups`` and, for L, ``half``,
        ``t_keep``, ``t_flip``, ``clip``.
    rng : RNG
        The clients' generator.

    Returns
    -------
    new_groups : numpy.ndarray of int64, shape (n,)
        Reported groups.
    reported : numpy.ndarray of int64, shape (n,)
        R: the value bit as -1/+1. L: the released grid index (value / gamma), clipped to ``clip``.
    clipped : numpy.ndarray of bool, shape (n,)
        L: whether the report was clipped (always False for R).
    """
    g = np.asarray(groups, dtype=np.int64)
    n = g.size
    new_g = _grr(params).randomize(g, rng) if n else g
    kept = new_g == g
    v = np.where(kept, np.asarray(values, dtype=np.float64), 0.0)
    if params["mechanism"] == "R":
        bits = bernoulli((1.0 + v) / 2.0, n, rng)  # Harmony discretization (Alg. 1, line 5)
        rr = RandomizedResponse(epsilon=float(params["epsilon2"]))
        out = rr.randomize(bits.astype(np.uint8), rng).astype(np.int64) * 2 - 1
        return new_g, out, np.zeros(n, dtype=bool)
    half = int(params["half"])
    x = v * half  # grid index of the value, in [-half, half]
    fl = np.floor(x)
    idx = (fl + bernoulli(x - fl, n, rng)).astype(np.int64)  # unbiased randomized rounding
    noise = np.asarray(sample_discrete_laplace(float(params["t_keep"]), n, rng), dtype=np.int64)
    flipped = np.flatnonzero(~kept)
    if flipped.size:
        noise[flipped] = sample_discrete_laplace(float(params["t_flip"]), flipped.size, rng)
    y = idx + noise
    clip = int(params["clip"])
    clipped = np.abs(y) > clip
    return new_g, np.clip(y, -clip, clip), clipped


def encode_gap_report(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Each client's report: reported value in its reported group's slot, a count, a clipping flag.

    Parameters
    ----------
    batch : ClientBatch
        Columns ``group`` (int in ``[0, d)``) and ``value`` (float in ``[-1, 1]``).
    params : Mapping
        The round's public parameters (see :func:`perturb`).
    rng : RNG
        The clients' generator.

    Returns
    -------
    numpy.ndarray
        int64 ``(batch.n, 2d + 1)``: slots ``[0, d)`` the value (R: -1/+1; L: grid index), ``[d, 2d)`` the
        one-hot reported group, ``2d`` the clipping flag.
    """
    d = int(params["n_groups"])
    new_g, y, clipped = perturb(batch.column(GROUP_COLUMN), batch.column(VALUE_COLUMN), params, rng)
    n = new_g.size
    out = np.zeros((n, 2 * d + 1), dtype=np.int64)
    rows = np.arange(n)
    out[rows, new_g] = y
    out[rows, d + new_g] = 1
    out[:, 2 * d] = clipped
    return out


@output_check(encode_gap_report)
def check_gap_reports(
    vectors: np.ndarray, counts: np.ndarray, params: Mapping[str, Any], starts: np.ndarray | None
) -> Verdicts:
    r"""Output check of :func:`encode_gap_report` (exact): the sum of ``count`` one-hot group reports.

    One record outputs its reported group :math:`g'` (GRR: any of the ``d`` groups) one-hot in slots
    ``[d, 2d)``, its reported value in slot :math:`g'` and a clipping flag in slot ``2d``. So a sum of ``k``
    records has group counts :math:`c_h \ge 0` with :math:`\sum_h c_h = k` (``group_out_of_range``,
    ``total_mismatch``), and per group a value :math:`v_h`:

    * :math:`\mathcal M_R` (values :math:`\pm 1`, flag 0): exactly :math:`|v_h| \le c_h` and
      :math:`v_h \equiv c_h \pmod 2` (``value_out_of_range``, ``parity``), flag 0 (``clip_flag``);
    * :math:`\mathcal M_L` (any integer in ``[-clip, clip]``, discrete Laplace noise having full support;
      flag 1 only for a clipped value :math:`\pm` ``clip``): exactly :math:`|v_h| \le \mathrm{clip}\,c_h`
      and flags :math:`f \le \sum_h \mathrm{cap}_h` (``clip_flag``), where group ``h`` can hold
      :math:`c_h` flagged records if :math:`v_h` is a sum of :math:`c_h` values :math:`\pm` ``clip``
      (a multiple of ``clip`` with the parity of :math:`c_h`), else :math:`c_h - 1` (one unflagged record
      makes up any remainder in ``[-clip, clip]``).

    Parameters
    ----------
    vectors : numpy.ndarray
        int64 ``(n, 2d + 1)``.
    counts, starts
        As :class:`~fedstats.engine.validity.OutputCheck`; ``starts`` is unused here (every record has
        the same output set).
    params : Mapping
        The round's parameters (:func:`perturb`): ``mechanism``, ``n_groups``, ``clip`` (L).

    Returns
    -------
    Verdicts
    """
    del starts  # the output set does not depend on the record
    d = int(params["n_groups"])
    vals, groups, flags = vectors[:, :d], vectors[:, d : 2 * d], vectors[:, 2 * d]
    out = Verdicts(counts.size)
    out.fail(
        "group_out_of_range",
        (groups < 0).any(axis=1),
        lambda i: f"group {int(np.flatnonzero(groups[i] < 0)[0])} has a negative count",
    )
    out.fail(
        "total_mismatch",
        groups.sum(axis=1) != counts,
        lambda i: f"group counts sum to {int(groups[i].sum())}, not {int(counts[i])}",
    )
    if params["mechanism"] == "R":
        out.fail(
            "value_out_of_range",
            (np.abs(vals) > groups).any(axis=1),
            "a group's sum of +-1 values exceeds its count",
        )
        out.fail(
            "parity",
            ((vals - groups) % 2 != 0).any(axis=1),
            "a group's sum of +-1 values has the wrong parity for its count",
        )
        out.fail("clip_flag", flags != 0, lambda i: f"flag {int(flags[i])} in a mechanism-R report")
        return out
    clip = int(params["clip"])
    out.fail(
        "value_out_of_range",
        exceeds(np.abs(vals), np.maximum(groups, 1), clip).any(axis=1)
        | ((groups == 0) & (vals != 0)).any(axis=1),
        f"a group's value sum exceeds clip={clip} times its count",
    )
    all_clipped = (vals % clip == 0) & ((vals // clip - groups) % 2 == 0)
    cap = np.where(all_clipped, groups, np.maximum(groups - 1, 0)).sum(axis=1)
    out.fail(
        "clip_flag",
        (flags < 0) | (flags > cap),
        lambda i: f"{int(flags[i])} clipped record(s), at most {int(cap[i])} possible",
    )
    return out


_FLOAT_EXACT = 2**53


def sum_gap_reports(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """The sum of :func:`encode_gap_report`'s reports over the batch, from the same draws.

    Equal bit for bit to ``encode_gap_report(batch, params, rng).sum(axis=0)`` for the same generator
    state: the clients run :func:`perturb` as there; only the one-hot reports are never built (the
    per-group sums are counted directly).

    Parameters
    ----------
    batch, params, rng
        As :func:`encode_gap_report`.

    Returns
    -------
    numpy.ndarray
        int64 ``(2d + 1,)``: per reported group the sum of the reported values, then the number of
        reports, then the number of clipped reports.
    """
    d = int(params["n_groups"])
    out = np.zeros(2 * d + 1, dtype=np.int64)
    if params["mechanism"] == "R":
        # per group, (reports with +1) - (reports with -1), from one count of the cells 2 g' + [y = +1]
        cells = _report_cells_r(batch.column(GROUP_COLUMN), batch.column(VALUE_COLUMN), params, rng)
        both = np.bincount(cells, minlength=2 * d).reshape(d, 2)
        out[:d] = both[:, 1] - both[:, 0]
        out[d : 2 * d] = both.sum(axis=1)
        return out
    new_g, y, clipped = perturb(batch.column(GROUP_COLUMN), batch.column(VALUE_COLUMN), params, rng)
    out[d : 2 * d] = np.bincount(new_g, minlength=d)
    if y.size and y.size * int(params["clip"]) < _FLOAT_EXACT:
        # every partial sum is an integer below 2^53 in magnitude: the float64 sums are exact
        out[:d] = np.bincount(new_g, weights=y, minlength=d).astype(np.int64)
    else:
        for h in range(d):
            out[h] = int(y[new_g == h].sum(dtype=np.int64))
    out[2 * d] = int(np.count_nonzero(clipped))
    return out


def _report_cells_r(
    groups: np.ndarray, values: np.ndarray, params: Mapping[str, Any], rng: RNG
) -> np.ndarray:
    r""":math:`\mathcal M_R` as :func:`perturb` runs it, to the cell ``2 g' + [y = +1]`` of each report.

    The same draws in the same order as :func:`perturb` (GRR's keep uniforms, its ``integers`` call for
    the other group, Harmony's uniforms, randomized response's uniforms; ``U < p`` with ``U`` the
    generator's 53-bit doubles, as :func:`~fedstats.privacy.mechanisms.samplers.bernoulli`), so the
    cells are exactly those of its reports. Branch-free selections instead of ``where`` and masks:

    * the reported group ``g'`` is ``other + kept (g - other)``; with two groups ``other = 1 - g``, so
      ``g' = [g == kept]``, and numpy's generator draws nothing for ``integers(0, 1)`` (not called);
    * Harmony's ``p = (1 + v') / 2`` with ``v' = kept v`` is ``0.5 + kept (v / 2)``: the same double, since
      halving is exact (``fl(1 + v) / 2 = fl(0.5 + v / 2)``; for a subnormal ``v`` both are 0.5). Only for
      finite values (a non-finite one takes :func:`perturb`'s own selection).
    """
    g = np.asarray(groups)
    d = int(params["n_groups"])
    if g.size and (not np.issubdtype(g.dtype, np.integer) or int(g.min()) < 0 or int(g.max()) >= d):
        raise DataError(f"values must be integers in [0, {d - 1}]")
    g = g.astype(np.int64, copy=False)
    v = np.asarray(values, dtype=np.float64)
    n = g.size
    grr = _grr(params)
    b = RandomizedResponse(epsilon=float(params["epsilon2"])).keep_probability
    kept = np.asarray(rng.random(n)) < grr.keep_probability
    cells: np.ndarray
    if d == 2 and type(rng) is np.random.Generator:
        cells = np.equal(g, kept).astype(np.int64)  # g' = g if kept else 1 - g
    else:
        other = np.asarray(rng.integers(0, d - 1, size=n), dtype=np.int64)
        other += other >= g  # skip the true value: uniform over the d - 1 others
        cells = g - other
        cells *= kept
        cells += other
    # Harmony: bit ~ Bernoulli((1 + v') / 2), v' = v if the group was kept, else 0
    if n and np.isfinite(v.min()) and np.isfinite(v.max()):
        p = np.multiply(v, 0.5)
        p *= kept
        p += 0.5
    else:
        p = (1.0 + np.where(kept, v, 0.0)) / 2.0
    bit = np.asarray(rng.random(n)) < p
    # randomized response: keep the bit when U < b, i.e. report bit == (U < b)
    rr = np.asarray(rng.random(n)) < b
    np.equal(bit, rr, out=rr)
    cells *= 2
    cells += rr
    return cells


def outcome_probabilities(
    groups: np.ndarray, values: np.ndarray, params: Mapping[str, Any]
) -> np.ndarray:
    r""":math:`\mathcal M_R`'s output distribution per input: P(reported group h, reported bit).

    Parameters
    ----------
    groups, values : numpy.ndarray, shape (k,)
        ``k`` inputs, as for :func:`perturb`.
    params : Mapping
        The round's public parameters (``mechanism="R"``).

    Returns
    -------
    numpy.ndarray
        float64 ``(k, 2d)``: column ``2h + 1`` is P(group h, bit +1), column ``2h`` P(group h, bit -1);
        each row sums to 1.
    """
    grr = _grr(params)
    a = grr.keep_probability
    other = grr.other_probability  # (1 - a) / (d - 1), without cancellation
    b = RandomizedResponse(epsilon=float(params["epsilon2"])).keep_probability
    g = np.asarray(groups, dtype=np.int64)
    v = np.asarray(values, dtype=np.float64)
    p_one = (1.0 + v) / 2.0
    q = b * p_one + (1.0 - b) * (1.0 - p_one)  # P(reported bit = 1 | group kept)
    probs = np.full(
        (g.size, 2 * int(params["n_groups"])), other / 2.0
    )  # a changed group reports value 0: a fair bit
    rows = np.arange(g.size)
    probs[rows, 2 * g + 1] = a * q
    probs[rows, 2 * g] = a * (1.0 - q)
    return probs


def aggregate_gap_report(hist: InputHistogram, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    r"""Draw the sum of :func:`encode_gap_report` over a histogram of inputs, for :math:`\mathcal M_R`.

    Clients with the same (group, value) are i.i.d.: their reports are multinomial over (reported group,
    reported bit) with the probabilities of :func:`outcome_probabilities`. Equal in distribution to the
    per-client sum, not bit-identical (simulation only).

    Parameters
    ----------
    hist : InputHistogram
        Distinct inputs (columns ``group``, ``value``) and their counts.
    params : Mapping
        The round's public parameters (``mechanism="R"``).
    rng : RNG
        The round's generator.

    Returns
    -------
    numpy.ndarray
        int64 ``(2d + 1,)``: the round's sum.
    """
    from fedstats.engine.aggregate import multinomial

    d = int(params["n_groups"])
    probs = outcome_probabilities(hist.column(GROUP_COLUMN), hist.column(VALUE_COLUMN), params)
    counts = multinomial(rng, hist.counts, probs).sum(axis=0).reshape(d, 2)
    out = np.zeros(2 * d + 1, dtype=np.int64)
    out[:d] = counts[:, 1] - counts[:, 0]
    out[d : 2 * d] = counts.sum(axis=1)
    return out
