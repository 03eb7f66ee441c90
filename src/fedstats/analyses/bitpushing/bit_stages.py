r"""Bit pushing on the engine: basic (Algorithm 1), weighted one-round, adaptive two-round (Algorithm 2).

Cormode & Markov, "Bit-efficient numerical aggregation and stronger privacy for trust in federated
analytics" (2021). Each client holds a b-bit code (:mod:`~fedstats.analyses.bitpushing.encoding`) and
reports ``bits_per_client`` of its bits, chosen by the server's sampling vector p, as a one-hot report
(:func:`~fedstats.analyses.bitpushing.client.encode_bits`): the sum gives, per bit, the number of reports :math:`c_j` (public under exact
allocation) and the sum of reported bits :math:`s_j`; the bit means are
:math:`m_j = s_j / c_j` and the mean code is :math:`\sum_j 2^j m_j` (Algorithm 1).

Choices the paper leaves open (``PAPER_NOTES.md``), and fedstats' defaults:

* allocation of clients to bits: ``"exact"`` (default; the quasi-Monte-Carlo allocation of Lemma 1's proof):
  exactly ``round(N pi_j)`` clients report bit j, chosen by a public affine permutation of the global client
  index; ``"random"``: each client draws its bits itself (systematic sampling with a private uniform, so
  bit j is reported with probability exactly :math:`\pi_j`, distinct bits per client);
* ``bits_per_client`` distinct bits per client (Corollary 2); :math:`\pi_j = \min(1, b_{send} p_j)`;
* basic: :math:`p_j \propto 2^j` mixed with a uniform floor so every bit gets about ``min_reports = 2``
  reports (fedstats' default, the library's default protocol; ``min_reports=0`` is the paper's vector);
* weighted one-round: :math:`p_j \propto 2^{\alpha j}`, ``alpha = 0.5`` by default (the paper found it the
  better one-round choice without DP); adaptive round 1: :math:`p_j \propto 2^{\gamma j}`, ``gamma = 1``;
  round 2: :math:`p_j \propto (4^j (m_j(1-m_j) + v_\varepsilon))^{\alpha_2}`, ``alpha2 = 0.5`` (Lemma 3's
  optimum, with the randomized-response variance), from the round-1 means clipped to [0, 1];
  ``round1_fraction = 1/3`` of the clients in round 1 (Lemma 4; the paper's delta); each round gives each
  bit about ``min_reports = 16`` reports (at most a quarter of the round); the final estimate combines
  the two rounds' estimates with the fixed weights n_r / n (``estimator="split"``, unbiased under local
  DP); ``estimator="pooled"`` is the paper's pooling of both rounds' sums (Algorithm 2, line 9), biased
  under local DP;
* local DP: each reported bit goes through randomized response (:class:`RandomizedResponse`) with
  ``epsilon / bits_per_client`` (so a client's total is ``epsilon`` by basic composition), debiased at the
  server; one debiased report on bit j then has variance :math:`m_j(1-m_j) + e^{\varepsilon}/(e^\varepsilon-1)^2`;
* bit squashing (Appendix B), off by default: with DP, the top run of bits whose debiased means are below
  ``squash_threshold`` times the per-report DP noise standard deviation
  :math:`\sqrt{e^\varepsilon}/(e^\varepsilon - 1)` is treated as noise and contributes 0 to the estimate;
  the adaptive protocol sorts bits after round 1 into noise, uncertain and live (see
  :func:`adaptive_stage`, ``squash_z``);
* a bit that no client reported (possible for tiny p_j) is imputed at 1/2 and listed in
  ``details["unreported_bits"]``.

The estimate's variance is Lemma 1's formula with each round's counts and a small-sample corrected
plug-in of each report's variance (:func:`~fedstats.analyses.bitpushing.allocation.bit_mean_variances`); a
bit imputed at 1/2 adds its worst squared error :math:`4^j/4`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedstats._numeric import largest_remainder
from fedstats._validation import check_choice, check_int, check_local_epsilon, check_real
from fedstats.analyses.bitpushing.allocation import (
    affine_permutation,
    bit_mean_variances,
    bit_means,
    check_probabilities,
    inclusion_probabilities,
    rr_noise_variance,
    split_clients,
    weighted_probabilities,
)
from fedstats.analyses.bitpushing.client import aggregate_bits, encode_bits, sum_bits
from fedstats.analyses.bitpushing.stages import BitSums, CodeSpec, StageEstimate
from fedstats.engine.core import ProtocolGenerator
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import DataError, ParameterError

__all__ = [
    "ALLOCATIONS",
    "ESTIMATORS",
    "adaptive_stage",
    "basic_stage",
    "bit_round",
    "check_squash",
    "weighted_stage",
]

ALLOCATIONS = ("exact", "random")


def _per_bit_epsilon(epsilon: float | None, bits_per_client: int) -> float | None:
    if epsilon is None:
        return None
    e = check_local_epsilon("epsilon", epsilon, high=700.0)
    return e / bits_per_client


def bit_round(
    name: str,
    spec: CodeSpec,
    probabilities: Any,
    client_range: tuple[int, int],
    public_seed: int,
    *,
    bits_per_client: int = 1,
    allocation: str = "exact",
    epsilon_bit: float | None = None,
) -> ProtocolGenerator[BitSums]:
    """One round of basic bit pushing (Algorithm 1) over ``client_range``.

    Parameters
    ----------
    name : str
        Round name (also keys the public permutation).
    spec : CodeSpec
    probabilities : array_like of float, shape (b,)
        Sampling vector p.
    client_range : (int, int)
        Global client indices ``[lo, hi)`` taking part (the round's ``client_range``).
    public_seed : int
        Seed of the public permutation (exact allocation).
    bits_per_client : int
        Distinct bits each client reports, in [1, number of bits with p_j > 0].
    allocation : {"exact", "random"}
    epsilon_bit : float, optional
        Randomized-response epsilon per reported bit.

    Returns
    -------
    ProtocolGenerator[BitSums]
    """
    b = spec.bit_depth
    p = check_probabilities(probabilities, b)
    check_choice("allocation", allocation, ALLOCATIONS)
    lo, hi = int(client_range[0]), int(client_range[1])
    n = hi - lo
    if n < 1:
        raise DataError(f"round {name!r} has no clients (client range [{lo}, {hi}))")
    pi = inclusion_probabilities(p, bits_per_client)
    params: dict[str, Any] = {
        **spec.params(),
        "allocation": allocation,
        "bits_per_client": bits_per_client,
        "epsilon_bit": epsilon_bit,
    }
    if allocation == "exact":
        counts = largest_remainder(n * bits_per_client, pi / bits_per_client)
        a, c = affine_permutation(n, public_seed, "bitpushing", name, lo, hi)
        params.update(
            cum=np.concatenate([[0], np.cumsum(counts)]).tolist(), a=a, c=c, size=n, lo=lo
        )
    else:
        cum_pi = np.concatenate([[0.0], np.cumsum(pi)])
        cum_pi[-1] = float(bits_per_client)
        params.update(cum_pi=cum_pi.tolist())
    exact = allocation == "exact"
    s: RoundSum = yield Round(
        name,
        encode_bits,
        params,
        dim=b if exact else 2 * b,
        bound=1,
        client_range=(lo, hi),
        aggregate=aggregate_bits,
        encode_sum=sum_bits,
    )
    tot = np.asarray(s.total, dtype=np.int64)
    if exact:
        return BitSums(counts.copy(), tot.copy(), s.n_clients, p)
    return BitSums(tot[:b].copy(), tot[b:].copy(), s.n_clients, p)


def check_squash(squash_threshold: float | None, epsilon: float | None) -> None:
    """Refuse a bit squashing threshold that is negative, or given without ``epsilon`` (never ignore it).

    Parameters
    ----------
    squash_threshold : float or None
        Threshold in units of the per-report DP noise sd, >= 0 (Cormode & Markov 2021, App. B).
    epsilon : float or None
        The stage's epsilon (squashing acts on DP noise only).

    Raises
    ------
    ParameterError
        If the threshold is invalid or ``epsilon`` is None.
    """
    if squash_threshold is None:
        return
    check_real("squash_threshold", squash_threshold, low=0.0, high=math.inf, high_open=True)
    if epsilon is None:
        raise ParameterError(
            "squash_threshold", squash_threshold, "no value without epsilon (it squashes DP noise)"
        )


def _squash_level(epsilon_bit: float | None, squash_threshold: float | None) -> float | None:
    if epsilon_bit is None or squash_threshold is None or squash_threshold <= 0:
        return None
    return float(squash_threshold) * math.sqrt(rr_noise_variance(epsilon_bit))


def _squashed(
    m: np.ndarray, reported: np.ndarray, level: float | None, exclude: np.ndarray | None = None
) -> np.ndarray:
    """Bits above the highest reported bit whose mean reaches ``level`` (the noisy top run, App. B).

    Bits in ``exclude`` cannot be that highest bit.
    """
    b = m.size
    if level is None:
        return np.zeros(b, dtype=bool)
    ok = reported & (np.nan_to_num(m, nan=-np.inf) >= level)
    if exclude is not None:
        ok &= ~exclude
    live = np.flatnonzero(ok)
    top = int(live.max()) if live.size else -1
    out: np.ndarray = np.arange(b) > top
    return out


def _combine(
    counts: np.ndarray,
    sums: np.ndarray,
    epsilon_bit: float | None,
    squash_threshold: float | None,
    presquashed: np.ndarray | None = None,
    strict: np.ndarray | None = None,
) -> tuple[float, float, float, dict[str, Any]]:
    """Mean code, its Lemma 1 variance (corrected and unbiased plug-ins), and per-bit details.

    Bits in ``presquashed`` stay squashed; a bit in ``strict`` counts as live only if its mean minus one
    standard error reaches the squash level.
    """
    b = counts.size
    m = bit_means(counts, sums, epsilon_bit)
    reported = counts > 0
    level = _squash_level(epsilon_bit, squash_threshold)
    exclude = None
    if strict is not None and level is not None:
        mc0 = np.clip(np.nan_to_num(m, nan=0.5), 0.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            se = np.sqrt((mc0 * (1.0 - mc0) + rr_noise_variance(epsilon_bit)) / counts)
        exclude = strict & ~(m - se >= level)
    squashed = _squashed(m, reported, level, exclude)
    if presquashed is not None:
        squashed |= presquashed
    used = np.where(reported, m, 0.5)
    used[squashed] = 0.0
    weights = 2.0 ** np.arange(b)
    estimate = float((weights * used).sum())
    live = reported & ~squashed
    w2 = weights[live] ** 2
    # a bit no client reported is imputed at 1/2: its error is at most 2^(j-1) (bounded, not estimated)
    unknown = float((weights[~reported & ~squashed] ** 2).sum()) / 4.0
    variance = unknown + float((w2 * bit_mean_variances(counts, sums, epsilon_bit)[live]).sum())
    unbiased = unknown + float(
        (w2 * bit_mean_variances(counts, sums, epsilon_bit, unbiased=True)[live]).sum()
    )
    details = {
        "bit_means": m,
        "bit_counts": counts,
        "squashed_bits": np.flatnonzero(squashed).tolist(),
        "unreported_bits": np.flatnonzero(~reported).tolist(),
        "squash_level": level,
    }
    return estimate, variance, unbiased, details


def basic_stage(
    spec: CodeSpec,
    client_range: tuple[int, int],
    public_seed: int,
    *,
    probabilities: Any = None,
    alpha: float = 1.0,
    bits_per_client: int = 1,
    allocation: str = "exact",
    epsilon: float | None = None,
    squash_threshold: float | None = None,
    min_reports: int = 2,
    name: str = "bits",
) -> ProtocolGenerator[StageEstimate]:
    r"""Run one round of bit pushing with a fixed sampling vector (Algorithm 1; Corollary 2).

    Parameters
    ----------
    spec : CodeSpec
    client_range : (int, int)
    public_seed : int
    probabilities : array_like, optional
        Sampling vector p (shape (b,)); default :math:`p_j \propto 2^{\alpha j}`.
    alpha : float
        Exponent used when ``probabilities`` is None: default 1, i.e. :math:`p_j = 2^j/(2^b-1)`, the
        paper's choice from Lemma 3 with :math:`\bar x^{(j)}(1-\bar x^{(j)}) \le 1/4`.
    bits_per_client : int
        Distinct bits per client, >= 1.
    allocation : {"exact", "random"}
    epsilon : float, optional
        Local DP epsilon per client, in (0, 700]; each bit gets ``epsilon / bits_per_client``.
    squash_threshold : float, optional
        Bit squashing threshold in units of the per-report DP noise (only with ``epsilon``).
    min_reports : int
        When ``probabilities`` is None, p is mixed with the uniform vector so that every bit gets about
        ``min_reports`` reports (at most :data:`FLOOR_SHARE` of the round), default 2: with
        :math:`p_j \propto 2^j` alone the low bits of a loose range get no report at all (18 of 34 bits
        of capital_gain at n = 48,842) and are imputed at 1/2, which biased the mean +12,000% without
        DP (``benchmarks/bitpushing_default.py``). 0 is the paper's Algorithm 1 exactly.

    Returns
    -------
    ProtocolGenerator[StageEstimate]
    """
    s_bits = check_int("bits_per_client", bits_per_client, low=1, high=spec.bit_depth)
    eps_bit = _per_bit_epsilon(epsilon, s_bits)
    check_squash(squash_threshold, epsilon)
    mr = check_int("min_reports", min_reports, low=0)
    b = spec.bit_depth
    if probabilities is None:
        p = weighted_probabilities(b, alpha)
        n_s = max(1, (client_range[1] - client_range[0]) * s_bits)
        floor = min(mr / n_s, FLOOR_SHARE / b)
        p = (1.0 - b * floor) * p + floor
    else:
        p = check_probabilities(probabilities, b)
    sums = yield from bit_round(
        name,
        spec,
        p,
        client_range,
        public_seed,
        bits_per_client=s_bits,
        allocation=allocation,
        epsilon_bit=eps_bit,
    )
    est, var, var_u, details = _combine(sums.counts, sums.sums, eps_bit, squash_threshold)
    details["probabilities"] = [p]
    details["round_clients"] = [sums.n_clients]
    return StageEstimate(est, var, sums.n_clients, s_bits, epsilon, details, var_u)


def weighted_stage(
    spec: CodeSpec,
    client_range: tuple[int, int],
    public_seed: int,
    *,
    alpha: float = 0.5,
    bits_per_client: int = 1,
    allocation: str = "exact",
    epsilon: float | None = None,
    squash_threshold: float | None = None,
) -> ProtocolGenerator[StageEstimate]:
    r"""Weighted one-round bit pushing, :math:`p_j \propto 2^{\alpha j}`, ``alpha = 0.5`` by default.

    Cormode & Markov 2021, Sec. 2 (the one-round weighting their experiments found best without DP).

    Parameters
    ----------
    spec, client_range, public_seed, bits_per_client, allocation, epsilon, squash_threshold
        As :func:`basic_stage`.
    alpha : float
        Weight exponent, finite, default 0.5.

    Returns
    -------
    ProtocolGenerator[StageEstimate]
    """
    return (
        yield from basic_stage(
            spec,
            client_range,
            public_seed,
            alpha=alpha,
            bits_per_client=bits_per_client,
            allocation=allocation,
            epsilon=epsilon,
            squash_threshold=squash_threshold,
            min_reports=0,  # the paper's vector: 2^(j/2) leaves far fewer bits unreported than 2^j
        )
    )


def _split_combine(
    r1: BitSums,
    r2: BitSums,
    epsilon_bit: float | None,
    squash_threshold: float | None,
    presquashed: np.ndarray,
    strict: np.ndarray,
) -> tuple[float, float, float, dict[str, Any]]:
    r"""The split estimator: each round's bit means on their own, combined with fixed weights n_r / n.

    Bit j's mean is :math:`\lambda m_{1j} + (1-\lambda) m_{2j}`, :math:`\lambda = n_1/n`; a bit one round
    did not observe takes the other round's mean (weight 1), a bit neither observed is imputed at 1/2 (its
    error, at most :math:`2^{j-1}`, enters the variance as the bound :math:`4^j/4`). The variance is
    :math:`\sum_j 4^j(w_{1j}^2 \widehat{\mathbb V}[m_{1j}] + w_{2j}^2 \widehat{\mathbb V}[m_{2j}])`,
    i.e. :math:`\lambda^2 V_1 + (1-\lambda)^2 V_2` when every bit is observed in both rounds.
    """
    b = r1.counts.size
    lam = r1.n_clients / (r1.n_clients + r2.n_clients)
    m1 = bit_means(r1.counts, r1.sums, epsilon_bit)
    m2 = bit_means(r2.counts, r2.sums, epsilon_bit)
    rep1, rep2 = r1.counts > 0, r2.counts > 0
    w1 = np.where(rep1 & rep2, lam, np.where(rep1, 1.0, 0.0))
    w2 = np.where(rep1 & rep2, 1.0 - lam, np.where(rep2, 1.0, 0.0))
    reported = rep1 | rep2
    m = np.where(reported, w1 * np.nan_to_num(m1) + w2 * np.nan_to_num(m2), np.nan)
    # Each round's variance from its own reports (Lemma 1 on round r alone): pooling the two rounds'
    # reports to estimate one report's variance is biased low, as pooling the means is (round 2 gives
    # few reports to bits whose round-1 reports happened to agree).
    c1, c2 = r1.counts.astype(np.float64), r2.counts.astype(np.float64)
    u1 = bit_mean_variances(r1.counts, r1.sums, epsilon_bit, unbiased=True)
    u2 = bit_mean_variances(r2.counts, r2.sums, epsilon_bit, unbiased=True)
    # a round that saw a bit once has no unbiased estimate of its report variance: take the other
    # round's (per report) when it saw the bit at least twice
    u1 = np.where((c1 == 1) & (c2 >= 2), u2 * c2, u1)
    u2 = np.where((c2 == 1) & (c1 >= 2), u1 * np.maximum(c1, 1), u2)
    var_bits_u = w1**2 * u1 + w2**2 * u2
    # For intervals, the larger of that and the small-sample corrected plug-in on both rounds' reports:
    # conservative in expectation, and a bit that round 2 saw a few times, all 0, after thousands of
    # round-1 reports all 0 (a vacuous high bit) does not get the add-half variance of 16 reports.
    c = c1 + c2
    pooled = bit_mean_variances(c, r1.sums + r2.sums, epsilon_bit) * c
    v1 = np.maximum(u1, pooled / np.maximum(c1, 1))
    v2 = np.maximum(u2, pooled / np.maximum(c2, 1))
    var_bits = w1**2 * v1 + w2**2 * v2
    level = _squash_level(epsilon_bit, squash_threshold)
    exclude = None
    if level is not None:
        exclude = strict & ~(m - np.sqrt(var_bits) >= level)
    squashed = _squashed(m, reported, level, exclude) | presquashed
    used = np.where(reported, m, 0.5)
    used[squashed] = 0.0
    weights = 2.0 ** np.arange(b)
    estimate = float((weights * used).sum())
    live = ~squashed
    unknown = np.where(reported, 0.0, 0.25)  # the imputation's worst squared error, in 4^j units
    variance = float((weights[live] ** 2 * (var_bits + unknown)[live]).sum())
    unbiased = float((weights[live] ** 2 * (var_bits_u + unknown)[live]).sum())
    round_est = [
        float((weights * np.where(rep, np.nan_to_num(mr), 0.5) * ~squashed).sum())
        for mr, rep in ((m1, rep1), (m2, rep2))
    ]
    details = {
        "bit_means": m,
        "bit_counts": r1.counts + r2.counts,
        "squashed_bits": np.flatnonzero(squashed).tolist(),
        "unreported_bits": np.flatnonzero(~reported).tolist(),
        "round_unreported_bits": [
            np.flatnonzero(~rep1).tolist(),
            np.flatnonzero(~rep2).tolist(),
        ],
        "squash_level": level,
        "round_bit_means": [m1, m2],
        "round_bit_counts": [r1.counts.copy(), r2.counts.copy()],
        "round_estimates": round_est,
        "round_weights": [lam, 1.0 - lam],
    }
    return estimate, variance, unbiased, details


FLOOR_SHARE = 0.25
"""Largest share of a round's reports the split estimator spreads uniformly to give every bit about
``min_reports`` reports (but every bit gets at least 2 reports when the round has ``2 b`` reports: one
report's variance has no unbiased estimate from a single report). At small n the floor would otherwise take the whole round (``min_reports * b >=
n_r``), leaving the high bits, which carry most of the variance, with as many reports as the low ones:
measured on Adult ages at n = 300, epsilon = 0.5, this cap lowers the estimate's standard deviation from
18.3 to 14.7 (capital_gain, epsilon = 1: from 17,200 to 8,100)."""

ESTIMATORS = ("split", "pooled")
"""Estimators of the adaptive protocol: ``"split"`` (default, unbiased under local DP) and ``"pooled"``
(Cormode & Markov 2021, Algorithm 2 line 9; biased when round 2's allocation depends on noisy round-1
means)."""


def _round1_probabilities(
    p1: np.ndarray, floor: float, min_floor: float, split: bool
) -> np.ndarray:
    r"""Round 1's bit probabilities: ``p1`` (:math:`p_j \propto 2^{\gamma j}`) mixed with a uniform floor.

    ``floor`` is ``min_reports / (n_1 s)``: about ``min_reports`` reports a bit. The paper's estimator
    keeps its round 1 bit for bit; the split one spreads at most ``FLOOR_SHARE``, but gives every bit at
    least 2 reports (``min_floor = 2 / (n_1 s)``: an unbiased estimate of a report's variance needs 2).
    """
    b = p1.size
    floor = min(floor, (FLOOR_SHARE if split else 1.0) / b)
    if split:
        floor = min(max(floor, min_floor), 1.0 / b)
    return (1.0 - b * floor) * p1 + floor


def _round2_variances(
    m1: np.ndarray,
    counts: np.ndarray,
    eps_bit: float | None,
    level: float | None,
    squash_z: float,
    split: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Lemma 3's :math:`\beta_j` from round 1's bit means, and the bits squashed and uncertain after it.

    :math:`\beta_j = 4^j m_{1j}(1 - m_{1j})` (the paper's), or with ``split`` plus the
    randomized-response variance :math:`v_\varepsilon` of each report. With squashing (``level``), the
    three-way split after round 1: bits above every bit whose mean reaches the threshold are noise
    (squashed, no round-2 clients); bits up to the highest one whose *lower confidence bound* reaches
    it are live (Lemma 3 weights); the ones in between are uncertain (:math:`\beta_j = 0`) and get a
    fixed number of round-2 reports, enough to decide them, instead of a weight growing as :math:`2^j`.
    """
    b = m1.size
    m1c = np.clip(np.nan_to_num(m1, nan=0.5), 0.0, 1.0)
    beta = 4.0 ** np.arange(b) * m1c * (1.0 - m1c)
    if split:  # Lemma 3 with the randomized-response variance of each report included
        beta = 4.0 ** np.arange(b) * (m1c * (1.0 - m1c) + rr_noise_variance(eps_bit))
    squashed1 = np.zeros(b, dtype=bool)
    uncertain = np.zeros(b, dtype=bool)
    if level is not None:
        reported1 = counts > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            se1 = np.sqrt((m1c * (1.0 - m1c) + rr_noise_variance(eps_bit)) / counts)
        squashed1 = _squashed(m1, reported1, level)
        not_live = _squashed(m1 - squash_z * se1, reported1, level)
        uncertain = not_live & ~squashed1
        beta[not_live] = 0.0
    return beta, squashed1, uncertain


def _round2_probabilities(
    logw: np.ndarray,
    uncertain: np.ndarray,
    squashed1: np.ndarray,
    squash_threshold: float | None,
    n2s: int,
    mr: int,
    split: bool,
) -> np.ndarray:
    r"""Round 2's bit probabilities: :math:`p_j \propto \beta_j^\alpha` (``logw``), uncertain bits' share.

    Uncertain bits share about ``(4 / squash_threshold)**2`` reports each (at most half of round 2's
    ``n2s`` reports when some bit is live); with ``split`` a uniform floor over the bits not squashed
    keeps every bit in round 2 (about ``mr`` reports, at least 2).
    """
    b = logw.size
    n_live = int(np.isfinite(logw).sum())
    p2 = np.zeros(b)
    if n_live:
        w = np.exp(logw - logw[np.isfinite(logw)].max())
        p2 = w / w.sum()
    if uncertain.any():
        assert squash_threshold is not None
        decide = (4.0 / float(squash_threshold)) ** 2  # reports resolving a bit to ~level/4
        share = min(0.5, uncertain.sum() * decide / n2s) if n_live else 1.0
        p2 = (1.0 - share) * p2
        p2[uncertain] = share / uncertain.sum()
    if split:  # a uniform floor: no bit loses round 2 because round 1 happened to read it as 0
        eligible = ~squashed1
        n_el = int(eligible.sum())
        floor2 = min(max(min(mr / n2s, FLOOR_SHARE / n_el), 2.0 / n2s), 1.0 / n_el)
        p2 = (1.0 - n_el * floor2) * p2 + floor2 * eligible
    return p2


def adaptive_stage(
    spec: CodeSpec,
    client_range: tuple[int, int],
    public_seed: int,
    *,
    round1_fraction: float = 1.0 / 3.0,
    gamma: float = 1.0,
    alpha: float = 0.5,
    min_reports: int = 16,
    squash_z: float = 2.0,
    bits_per_client: int = 1,
    allocation: str = "exact",
    epsilon: float | None = None,
    squash_threshold: float | None = None,
    estimator: str = "split",
) -> ProtocolGenerator[StageEstimate]:
    r"""Run adaptive two-round bit pushing (Cormode & Markov 2021, Algorithm 2), unbiased by default.

    Round 1: ``round1_fraction`` of the clients (the first ones of ``client_range``), :math:`p_j \propto
    2^{\gamma j}` mixed with a uniform floor. Round 2: the rest, with Lemma 3's allocation from the
    round-1 bit means clipped to [0, 1]. Two estimators (``docs/bitpushing.md``, "Adaptive rounds without
    bias"):

    * ``"split"`` (default): round 2 uses :math:`\beta_j = 4^j(m_{1j}(1-m_{1j}) + v_\varepsilon)` (the
      randomized-response variance :math:`v_\varepsilon = e^\varepsilon/(e^\varepsilon-1)^2` included,
      Lemma 3 under DP), :math:`p_j \propto \beta_j^\alpha`, mixed with a uniform floor so every bit gets
      about ``min_reports`` round-2 reports (at most :data:`FLOOR_SHARE` of the round, at least 2
      reports); the estimate is :math:`T = \lambda T_1 + (1-\lambda) T_2`,
      :math:`\lambda = n_1/n`, where :math:`T_r = \sum_j 2^j m_{rj}` uses round r's reports only. T_1 is
      unbiased, T_2 is unbiased given round 1, and the weights do not depend on the data, so T is
      unbiased for the mean code of the n clients, with variance :math:`\lambda^2 V_1 + (1-\lambda)^2
      V_2` (disjoint clients; each :math:`V_r` is Lemma 1 with round r's own counts and reports, and the
      small-sample corrected plug-in of
      :func:`~fedstats.analyses.bitpushing.allocation.bit_mean_variances`). A bit one round did not
      observe (possible only when :math:`n_r \cdot` ``bits_per_client`` < b) takes the other round's
      mean, and one neither observed is imputed at 1/2; the estimate is then not exactly unbiased.
    * ``"pooled"``: the paper's estimator (Algorithm 2, line 9): round 2 uses
      :math:`\beta_j = 4^j m_{1j}(1 - m_{1j})` without a floor, and the bit means pool both rounds'
      sums, :math:`(s_{1j}+s_{2j})/(c_{1j}+c_{2j})`. Unbiased without DP only in the limit; under local
      DP it is biased low on skewed data (round 2 over-samples bits whose noisy round-1 mean came out
      large), by tens of percent at epsilon <= 1. Kept for reproducing the paper's figures.

    Squashing (``squash_threshold``, off by default) is biased by design for both estimators: a squashed
    bit counts as 0, so the estimate is biased *low* by the squashed bits' true contribution (and it
    gains only when that contribution is noise). With ``"split"`` the round-1 three-way split (below)
    drives round 2's allocation as with ``"pooled"``, squashed bits get no round-2 floor, and the final
    test uses the split bit means.

    Parameters
    ----------
    spec, client_range, public_seed, bits_per_client, allocation, epsilon, squash_threshold
        As :func:`basic_stage`.
    round1_fraction : float
        In (0, 1); default 1/3 (Lemma 4). Both rounds need at least one client.
    gamma : float
        Round-1 exponent.
    alpha : float
        Round-2 exponent (0.5: Lemma 3's optimal :math:`\sqrt{\beta_j}`).
    squash_z : float
        With squashing, a bit is *live* after round 1 when its lower confidence bound
        ``m_j - squash_z * se_j`` reaches the threshold, *noise* when ``m_j`` does not (squashed), and
        *uncertain* in between: uncertain bits get about ``(4 / squash_threshold)**2`` round-2 reports each
        (at most half of round 2), and the final estimate decides them (``m_j`` minus one standard error
        must reach the threshold; for the other bits the final test is the paper's, on ``m_j``).
    min_reports : int
        Round 1 (and, with ``"split"``, round 2) mixes p with the uniform vector so that every bit gets
        about ``min_reports`` reports (default 16; 0 gives the paper's round 1 exactly). With a loose bit
        depth, :math:`p_j \propto 2^j` leaves the low, dense bits with a handful of reports; a bit whose
        few reports happen to be all 0 would then get no round-2 clients and stay badly estimated.
    estimator : {"split", "pooled"}
        See above; default ``"split"``.

    Returns
    -------
    ProtocolGenerator[StageEstimate]
        Both rounds: the code mean (by ``estimator``), its variance, and the rounds' sampling vectors and
        cohorts in the details.

    Raises
    ------
    ParameterError
        If ``round1_fraction`` leaves a round without clients, or an option is invalid.
    """
    check_choice("estimator", estimator, ESTIMATORS)
    split = estimator == "split"
    lo, hi = client_range
    n = hi - lo
    n1 = split_clients("round1_fraction", round1_fraction, n, "rounds")
    s_bits = check_int("bits_per_client", bits_per_client, low=1, high=spec.bit_depth)
    eps_bit = _per_bit_epsilon(epsilon, s_bits)
    check_squash(squash_threshold, epsilon)
    b = spec.bit_depth
    p1 = weighted_probabilities(b, gamma)
    mr = check_int("min_reports", min_reports, low=0)
    p1 = _round1_probabilities(p1, mr / (n1 * s_bits), 2.0 / (n1 * s_bits), split)
    r1 = yield from bit_round(
        "bits-round1",
        spec,
        p1,
        (lo, lo + n1),
        public_seed,
        bits_per_client=s_bits,
        allocation=allocation,
        epsilon_bit=eps_bit,
    )
    m1 = bit_means(r1.counts, r1.sums, eps_bit)
    level = _squash_level(eps_bit, squash_threshold)
    beta, squashed1, uncertain = _round2_variances(m1, r1.counts, eps_bit, level, squash_z, split)
    with np.errstate(divide="ignore"):
        logw = np.where(beta > 0, alpha * np.log(np.where(beta > 0, beta, 1.0)), -np.inf)
    n_live = int(np.isfinite(logw).sum())
    fallback = n_live + int(uncertain.sum()) < s_bits
    if fallback:  # (almost) every bit constant: nothing to adapt to
        p2 = p1
    else:
        p2 = _round2_probabilities(
            logw, uncertain, squashed1, squash_threshold, (n - n1) * s_bits, mr, split
        )
    r2 = yield from bit_round(
        "bits-round2",
        spec,
        p2,
        (lo + n1, hi),
        public_seed,
        bits_per_client=s_bits,
        allocation=allocation,
        epsilon_bit=eps_bit,
    )
    if split:
        est, var, var_u, details = _split_combine(
            r1, r2, eps_bit, squash_threshold, squashed1, uncertain
        )
    else:
        counts = r1.counts + r2.counts
        sums = r1.sums + r2.sums
        # bits squashed after round 1 got no round-2 clients: they stay squashed
        est, var, var_u, details = _combine(
            counts, sums, eps_bit, squash_threshold, squashed1, uncertain
        )
    details.update(
        estimator=estimator,
        probabilities=[p1, p2],
        round_clients=[r1.n_clients, r2.n_clients],
        round1_bit_means=m1,
        round2_fallback=fallback,
        round1_fraction=float(round1_fraction),
        uncertain_bits=np.flatnonzero(uncertain).tolist(),
    )
    return StageEstimate(est, var, r1.n_clients + r2.n_clients, s_bits, epsilon, details, var_u)
