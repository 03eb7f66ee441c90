r"""Sampling vectors, allocation of clients to bits, and the variance formulas of bit pushing.

Pure functions (no clients, no rounds), from Cormode & Markov 2021:

* :func:`weighted_probabilities`: :math:`p_j \propto 2^{\alpha j}` (Sec. 2; Algorithm 2 line 2 with
  :math:`\gamma`).
* :func:`lemma1_variance`: Lemma 1 / Corollary 2, extended with randomized response: one debiased report on
  bit j has variance :math:`\bar x^{(j)}(1-\bar x^{(j)}) + e^\varepsilon/(e^\varepsilon-1)^2`, so

  .. math:: \mathbb V[\hat x] = \sum_j \frac{4^j\,(\bar x^{(j)}(1-\bar x^{(j)}) + v_\varepsilon)}{N\,b_{send}\,p_j}.

* :func:`optimal_allocation`: Lemma 3, :math:`p_j = \sqrt{\beta_j}/B` with
  :math:`\beta_j = 4^j \bar x^{(j)}(1-\bar x^{(j)})` (plus :math:`4^j v_\varepsilon` under RR) and
  :math:`B = \sum_j \sqrt{\beta_j}` (the paper prints a spurious sum over j in the numerator).
* :func:`inclusion_probabilities`: with :math:`b_{send}` distinct bits per client, bit j is reported by a
  client with probability :math:`\pi_j = \min(1, b_{send} p_j)` (capped and re-spread, so
  :math:`\sum_j \pi_j = b_{send}`).
* :func:`affine_permutation` (with :func:`fedstats._numeric.largest_remainder`): the quasi-Monte-Carlo
  allocation of Lemma 1's proof, exactly ``round(N pi_j)`` clients on bit j, chosen by a public permutation
  of the client indices.
* :func:`split_clients`: the clients of a first round or stage, ``round(fraction * N)``, leaving both
  parts clients.

Examples
--------
>>> import numpy as np
>>> p = optimal_allocation(np.array([0.5, 0.5, 0.0]))
>>> [round(float(x), 4) for x in p]
[0.3333, 0.6667, 0.0]
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from fedstats._validation import check_int, check_open_unit, check_real
from fedstats.errors import ParameterError
from fedstats.privacy.mechanisms import RandomizedResponse

__all__ = [
    "affine_permutation",
    "bit_mean_variances",
    "bit_means",
    "inclusion_probabilities",
    "lemma1_variance",
    "optimal_allocation",
    "rr_noise_variance",
    "split_clients",
    "weighted_probabilities",
]


def rr_noise_variance(epsilon: float | None) -> float:
    r"""Variance a debiased randomized-response bit adds: :math:`e^\varepsilon/(e^\varepsilon-1)^2` (0 if None)."""
    if epsilon is None:
        return 0.0
    e = check_real("epsilon", epsilon, low=0.0, low_open=True, high=math.inf, high_open=True)
    return math.exp(-e) / math.expm1(-e) ** 2


def check_probabilities(p: Any, bit_depth: int | None = None) -> np.ndarray:
    """Validate a sampling vector: finite, non-negative, summing to 1 (re-normalized), length ``bit_depth``.

    Raises
    ------
    ParameterError
        If ``p`` is empty, negative, not finite, all zero, or of the wrong length.
    """
    arr = np.asarray(p, dtype=np.float64).ravel()
    accepted = "non-negative finite weights, not all zero" + (
        f", one per bit ({bit_depth})" if bit_depth is not None else ""
    )
    if arr.size == 0 or not np.isfinite(arr).all() or (arr < 0).any() or arr.sum() <= 0:
        raise ParameterError("probabilities", p, accepted)
    if bit_depth is not None and arr.size != bit_depth:
        raise ParameterError("probabilities", p, accepted)
    out: np.ndarray = arr / arr.sum()
    return out


def weighted_probabilities(bit_depth: int, alpha: float = 1.0) -> np.ndarray:
    r"""Return the sampling vector :math:`p_j \propto 2^{\alpha j}`, ``j = 0..b-1``.

    Parameters
    ----------
    bit_depth : int
        ``b >= 1``.
    alpha : float
        Exponent, finite (``alpha = 1``: the Lemma 3 choice under the bound
        :math:`\bar x^{(j)}(1-\bar x^{(j)}) \le 1/4`; the paper's experiments also use 0.5).

    Returns
    -------
    numpy.ndarray of float64, shape (b,), summing to 1.
    """
    b = check_int("bit_depth", bit_depth, low=1)
    a = check_real("alpha", alpha, low=-64.0, high=64.0)
    logw = a * math.log(2.0) * np.arange(b, dtype=np.float64)
    w = np.exp(logw - logw.max())
    out: np.ndarray = w / w.sum()
    return out


def lemma1_variance(
    bit_means: Any,
    probabilities: Any,
    n_clients: int,
    *,
    bits_per_client: int = 1,
    epsilon: float | None = None,
) -> float:
    r"""Variance of basic bit pushing (Lemma 1; Corollary 2 for ``bits_per_client``; plus RR noise).

    Parameters
    ----------
    bit_means : array_like of float, shape (b,)
        :math:`\bar x^{(j)}` in [0, 1] (clipped to [0, 1] here, so plug-in estimates are accepted).
    probabilities : array_like of float, shape (b,)
        Sampling vector :math:`p` (normalized here).
    n_clients : int
        N >= 1.
    bits_per_client : int
        :math:`b_{send} \ge 1` (uses :math:`N b_{send} p_j` reports on bit j, as Corollary 2).
    epsilon : float, optional
        Per-bit randomized-response epsilon.

    Returns
    -------
    float
        Variance of the estimate of the mean code (``inf`` if a bit with non-zero variance has p_j = 0).
    """
    m = np.clip(np.asarray(bit_means, dtype=np.float64).ravel(), 0.0, 1.0)
    p = check_probabilities(probabilities, m.size)
    n = check_int("n_clients", n_clients, low=1)
    s = check_int("bits_per_client", bits_per_client, low=1)
    per = (m * (1.0 - m) + rr_noise_variance(epsilon)) * 4.0 ** np.arange(m.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(per > 0, per / (n * s * p), 0.0)
    return float(terms.sum())


def optimal_allocation(bit_means: Any, *, epsilon: float | None = None) -> np.ndarray:
    r"""Lemma 3: the sampling vector minimizing :func:`lemma1_variance`, :math:`p_j = \sqrt{\beta_j}/B`.

    Parameters
    ----------
    bit_means : array_like of float, shape (b,)
        Bit means (clipped to [0, 1]).
    epsilon : float, optional
        Per-bit RR epsilon: then :math:`\beta_j = 4^j(\bar x^{(j)}(1-\bar x^{(j)}) + v_\varepsilon)`.

    Returns
    -------
    numpy.ndarray of float64, shape (b,)
        Sums to 1; uniform over bits if every :math:`\beta_j = 0` (a constant input: any p is optimal).
    """
    m = np.clip(np.asarray(bit_means, dtype=np.float64).ravel(), 0.0, 1.0)
    if m.size == 0:
        raise ParameterError("bit_means", bit_means, "at least one bit mean")
    beta = (m * (1.0 - m) + rr_noise_variance(epsilon)) * 4.0 ** np.arange(m.size)
    root = np.sqrt(beta)
    if root.sum() <= 0:
        return np.full(m.size, 1.0 / m.size)
    out: np.ndarray = root / root.sum()
    return out


def inclusion_probabilities(probabilities: Any, bits_per_client: int) -> np.ndarray:
    r"""Per-client report probability of each bit with ``bits_per_client`` distinct bits per client.

    :math:`\pi_j = b_{send} p_j`, except that bits with :math:`b_{send} p_j \ge 1` are reported by every
    client (:math:`\pi_j = 1`) and the excess is re-spread over the others in proportion to p.

    Returns
    -------
    numpy.ndarray of float64, shape (b,)
        In [0, 1], summing to ``bits_per_client``.

    Raises
    ------
    ParameterError
        If ``bits_per_client`` exceeds the number of bits with p_j > 0.
    """
    p = check_probabilities(probabilities)
    s = check_int("bits_per_client", bits_per_client, low=1)
    if s > int(np.count_nonzero(p)):
        raise ParameterError(
            "bits_per_client", bits_per_client, f"at most {int(np.count_nonzero(p))} (bits sampled)"
        )
    pi = np.zeros_like(p)
    full = np.zeros(p.size, dtype=bool)
    for _ in range(p.size + 1):
        rest = s - int(full.sum())
        free = ~full
        mass = float(p[free].sum())
        pi[free] = rest * p[free] / mass if mass > 0 else 0.0
        pi[full] = 1.0
        over = free & (pi > 1.0)
        if not over.any():
            break
        full |= over
    out: np.ndarray = np.minimum(pi, 1.0)
    return out


def bit_means(counts: Any, sums: Any, epsilon_bit: float | None = None) -> np.ndarray:
    """Return the debiased bit means :math:`m_j` (Algorithm 1; NaN where no client reported bit j).

    Without DP ``s_j / c_j``; with randomized response ``(s_j/c_j - (1 - q)) / (2q - 1)``, which may leave
    [0, 1].

    Parameters
    ----------
    counts : array_like of int, shape (b,)
        Reports per bit :math:`c_j`.
    sums : array_like of int, shape (b,)
        Sum of the reported (randomized) bits :math:`s_j`.
    epsilon_bit : float, optional
        Randomized-response epsilon of each report (None: no DP).

    Returns
    -------
    numpy.ndarray of float64, shape (b,)
    """
    c = np.asarray(counts, dtype=np.float64)
    s = np.asarray(sums, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = np.where(c > 0, s / c, np.nan)
    if epsilon_bit is None:
        return raw
    out: np.ndarray = RandomizedResponse(epsilon=epsilon_bit).debias_mean(raw)
    return out


def bit_mean_variances(
    counts: Any, sums: Any, epsilon_bit: float | None = None, *, unbiased: bool = False
) -> np.ndarray:
    r"""Estimated variance of each debiased bit mean :math:`m_j` (0 where no client reported bit j).

    One report on bit j is a Bernoulli(:math:`y_j`) variable with :math:`y_j = (1 - q) + (2q - 1)\bar
    x^{(j)}` (:math:`q = e^\varepsilon/(1+e^\varepsilon)`, :math:`y_j = \bar x^{(j)}` without DP), so
    :math:`\mathbb V[m_j] = y_j(1-y_j) / ((2q-1)^2 c_j)`, which equals Lemma 1's
    :math:`(\bar x^{(j)}(1-\bar x^{(j)}) + e^\varepsilon/(e^\varepsilon-1)^2)/c_j` (Cormode & Markov
    2021, Lemma 1 with randomized response). Two plug-ins of :math:`y_j(1-y_j)`:

    * default (for intervals): the small-sample corrected :math:`\tilde y_j(1-\tilde y_j)` with
      :math:`\tilde y_j = (s_j + 1/2)/(c_j + 1)`, never 0, so a bit whose few reports happen to be all 0
      (or all 1) still counts (the plain plug-in :math:`m_j(1-m_j) = 0` makes intervals too short at small
      n on skewed data);
    * ``unbiased=True`` (for bias corrections): :math:`\bar y_j(1-\bar y_j)\,c_j/(c_j-1)`, unbiased for
      :math:`y_j(1-y_j)` given :math:`c_j \ge 2` (the corrected one where :math:`c_j = 1`).

    Parameters
    ----------
    counts : array_like of int, shape (b,)
        Reports per bit :math:`c_j \ge 0`.
    sums : array_like of int, shape (b,)
        Sum of the reported (randomized) bits :math:`s_j`.
    epsilon_bit : float, optional
        Randomized-response epsilon of each report (None: no DP).
    unbiased : bool
        Which plug-in (see above).

    Returns
    -------
    numpy.ndarray of float64, shape (b,)
        :math:`\widehat{\mathbb V}[m_j] \ge 0`.
    """
    c = np.asarray(counts, dtype=np.float64)
    s = np.asarray(sums, dtype=np.float64)
    d2 = 1.0 if epsilon_bit is None else math.tanh(float(epsilon_bit) / 2.0) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        yt = (s + 0.5) / (c + 1.0)
        corrected = np.where(c > 0, yt * (1.0 - yt) / (d2 * c), 0.0)
        if not unbiased:
            return corrected
        yb = s / c
        plain = yb * (1.0 - yb) / (d2 * (c - 1.0))
        out: np.ndarray = np.where(c >= 2, plain, corrected)
    return out


def affine_permutation(n: int, seed: int, *key: str | int) -> tuple[int, int]:
    """Public permutation ``k -> (a k + c) mod n`` of ``[0, n)`` derived from a public seed.

    ``c`` is uniform on ``[0, n)``, so every client's position is uniform: with exact allocation each
    client reports bit j with probability exactly ``count_j / n`` (unbiasedness holds for any data
    order). ``a`` is coprime to ``n`` and below ``2**62 / n``, so ``a * k`` never overflows int64.

    Parameters
    ----------
    n : int
        Clients in the round, >= 1.
    seed : int
        Public seed.
    *key : str or int
        Names the round (so two rounds get independent permutations).

    Returns
    -------
    (a, c) : tuple of int
    """
    n = check_int("n", n, low=1)
    h = hashlib.sha256(repr((int(seed), *key)).encode()).digest()
    c = int.from_bytes(h[:16], "little") % n
    amax = max(2, min(n, (1 << 62) // n))
    a = 1 + int.from_bytes(h[16:], "little") % (amax - 1)
    while math.gcd(a, n) != 1:
        a = a + 1 if a + 1 < amax else 1
    return a, c


def split_clients(name: str, fraction: float, n: int, parts: str) -> int:
    """Clients in the first of two parts of ``n``: ``round(fraction * n)``, leaving both parts clients.

    Parameters
    ----------
    name : str
        The fraction's parameter name, for the error.
    fraction : float
        In (0, 1).
    n : int
        Clients to split.
    parts : str
        What the two parts are (``"rounds"``, ``"stages"``), for the error.

    Returns
    -------
    int
        In ``[1, n - 1]``.

    Raises
    ------
    ParameterError
        If ``fraction`` is outside (0, 1) or leaves a part without clients.
    """
    frac = check_open_unit(name, fraction)
    n1 = round(frac * n)
    if n1 < 1 or n1 >= n:
        raise ParameterError(name, fraction, f"a fraction leaving both {parts} clients (n={n})")
    return n1
