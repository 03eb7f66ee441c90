"""Online false discovery rate control with SAFFRON (Ramdas, Zrnic, Wainwright & Jordan, ICML 2018).

In online multiple testing, p-values ``p_1, p_2, ...`` arrive one at a time and the decision on ``p_t``
(reject when ``p_t <= alpha_t``) must be taken before ``p_(t+1)`` is seen. SAFFRON keeps the false discovery
rate below ``alpha`` at every time for independent (or conditionally super-uniform) nulls. It spends
"alpha-wealth" only on *candidates* (``p_t <= lambda``), which estimates the proportion of nulls as it goes and
makes it more powerful than LORD++ when many hypotheses are non-null.

The test level, with a constant candidacy threshold ``lambda`` (Ramdas et al. 2018, Algorithm 1; the paper
of FED-chi^2, Pang et al. 2023, restates it as Appendix C, Algorithm 5), is::

    alpha_t = min(lambda, (1 - lambda) (W0 gamma(t - C_0+) + (alpha - W0) gamma(t - tau_1 - C_1+)
                                        + alpha sum_{j >= 2} gamma(t - tau_j - C_j+)))

where ``tau_j`` is the time of the ``j``-th rejection (``tau_0 = 0``), ``C_j+ = sum_{i = tau_j + 1}^{t-1} C_i``
counts the candidates after it, and ``gamma`` is a non-increasing sequence on ``{1, 2, ...}`` summing to at
most one. The default parameters are those of Pang et al. 2023, Appendix C (which follow Ramdas et al.):
``alpha = 0.05``, ``W0 = 0.0125``, ``lambda = 0.5``, ``gamma_j`` proportional to ``j^-1.6`` normalised over
the first 10,001 terms (``gamma_j = 0`` beyond, so the sequence sums to exactly one).

Examples
--------
>>> res = saffron([0.0, 1.0, 0.0])
>>> res.rejected.tolist()
[True, False, True]
>>> g = saffron_gamma(3)
>>> bool(abs(res.alpha[1] - 0.5 * 0.05 * g[0]) < 1e-15)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

import numpy as np
import scipy.special

from fedstats._validation import check_choice, check_int, check_open_unit, check_real
from fedstats.errors import DataError, ParameterError

__all__ = [
    "OnlineSaffron",
    "SaffronOptions",
    "SaffronResult",
    "discovery_counts",
    "false_discovery_proportion",
    "saffron",
    "saffron_gamma",
    "true_discovery_rate",
]

PAPER_GAMMA_TERMS = 10_001
"""Number of terms over which Pang et al. (App. C) normalise ``gamma``: ``sum_{j=0}^{10000} (j+1)^-1.6``."""


def _gamma_normalizer(exponent: float, normalization: str, terms: int) -> tuple[float, int | None]:
    if normalization == "paper":
        k = np.arange(1, terms + 1, dtype=np.float64)
        return float(np.sum(k**-exponent)), terms
    # infinite: sum_{k >= 1} k^-s = zeta(s), finite for s > 1
    return float(scipy.special.zeta(exponent, 1)), None


def saffron_gamma(
    n: int,
    *,
    exponent: float = 1.6,
    normalization: str = "paper",
    terms: int = PAPER_GAMMA_TERMS,
) -> np.ndarray:
    """Compute the first ``n`` terms of SAFFRON's spending sequence ``gamma_j`` proportional to ``j^-exponent``.

    Parameters
    ----------
    n : int
        Number of terms wanted (``gamma_1 .. gamma_n``), at least 1.
    exponent : float, optional
        Decay exponent ``s > 1`` (default 1.6, Ramdas et al. 2018, Sec. 5; Pang et al. 2023, App. C).
    normalization : {"paper", "infinite"}, optional
        ``"paper"``: divide by ``sum_{k=1}^{terms} k^-s`` and set ``gamma_j = 0`` for ``j > terms`` (the
        authors' truncation; sums to exactly one). ``"infinite"``: divide by ``zeta(s)`` (every term positive,
        the infinite sum is one).
    terms : int, optional
        Truncation for ``"paper"`` (default 10,001).

    Returns
    -------
    numpy.ndarray
        ``(n,)`` float64, non-increasing, non-negative; ``out[j - 1] = gamma_j``.

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    n = check_int("n", n, low=1)
    s = check_real("exponent", exponent, low=1.0, low_open=True)
    normalization = check_choice("normalization", normalization, ("paper", "infinite"))
    terms = check_int("terms", terms, low=1)
    z, cut = _gamma_normalizer(s, normalization, terms)
    k = np.arange(1, n + 1, dtype=np.float64)
    g = k**-s / z
    if cut is not None:
        g[cut:] = 0.0
    return g


@dataclass(frozen=True)
class SaffronResult:
    """Decisions of SAFFRON on a stream of p-values.

    Attributes
    ----------
    rejected : numpy.ndarray
        ``(n,)`` bool, ``R_t = 1{p_t <= alpha_t}``.
    alpha : numpy.ndarray
        ``(n,)`` float64 test levels ``alpha_t`` (each at most ``lambda``).
    candidate : numpy.ndarray
        ``(n,)`` bool, ``C_t = 1{p_t <= lambda}``.
    target : float
        The FDR level ``alpha``.
    """

    rejected: np.ndarray
    alpha: np.ndarray
    candidate: np.ndarray
    target: float

    @property
    def n_rejections(self) -> int:
        """Number of rejections."""
        return int(self.rejected.sum())


class OnlineSaffron:
    """SAFFRON as an online procedure: feed one p-value at a time with :meth:`test`.

    Parameters
    ----------
    alpha : float, optional
        Target FDR level in (0, 1); default 0.05.
    w0 : float, optional
        Initial wealth ``W0`` in (0, alpha]; default 0.0125 (= alpha / 4).
    lambda_ : float, optional
        Candidacy threshold in (0, 1); default 0.5.
    gamma_exponent, gamma_normalization, gamma_terms
        The spending sequence, as in :func:`saffron_gamma`.

    Raises
    ------
    ParameterError
        If ``alpha`` or ``lambda_`` is not in (0, 1), ``w0`` not in (0, alpha], ``gamma_exponent <= 1``,
        ``gamma_normalization`` unknown or ``gamma_terms < 1``.

    Notes
    -----
    Each step costs ``O(#rejections)`` vectorized work (the sum over past rejections is cached while
    ``t - C_0+`` does not move). Ramdas et al. (2018) allow a time-varying ``lambda_t = g_t(R, C)``; only the
    constant choice used by Pang et al. is offered.
    """

    def __init__(
        self,
        *,
        alpha: float = 0.05,
        w0: float = 0.0125,
        lambda_: float = 0.5,
        gamma_exponent: float = 1.6,
        gamma_normalization: str = "paper",
        gamma_terms: int = PAPER_GAMMA_TERMS,
    ) -> None:
        self.target = check_open_unit("alpha", alpha)
        self.w0 = check_real("w0", w0, low=0.0, high=self.target, low_open=True)
        self.lambda_ = check_open_unit("lambda_", lambda_)
        self._s = check_real("gamma_exponent", gamma_exponent, low=1.0, low_open=True)
        check_choice("gamma_normalization", gamma_normalization, ("paper", "infinite"))
        gamma_terms = check_int("gamma_terms", gamma_terms, low=1)
        self._z, self._cut = _gamma_normalizer(self._s, gamma_normalization, gamma_terms)
        self.t = 0  # number of p-values seen
        self._cand = 0  # candidates among them (C_1 + ... + C_t)
        self._a: list[int] = []  # tau_j - (candidates up to and including tau_j), one per rejection
        self._a_arr = np.empty(0, dtype=np.float64)
        self._cached_d = -1
        self._cached_sum = 0.0  # sum over rejections j >= 2 at the cached D

    def _gamma(self, k: Any) -> Any:
        kk = np.asarray(k, dtype=np.float64)
        g = kk**-self._s / self._z
        if self._cut is not None:
            g = np.where(kk > self._cut, 0.0, g)
        return g

    @property
    def n_rejections(self) -> int:
        """Rejections so far."""
        return len(self._a)

    def level(self) -> float:
        """Return the test level ``alpha_t`` for the next p-value (does not advance the procedure)."""
        t = self.t + 1
        d = t - self._cand  # t - C_0+ (tau_0 = 0)
        total = self.w0 * float(self._gamma(d))
        if self._a:
            total += (self.target - self.w0) * float(self._gamma(d - self._a[0]))
            if len(self._a) > 1:
                if d != self._cached_d:
                    if self._a_arr.size != len(self._a) - 1:
                        self._a_arr = np.asarray(self._a[1:], dtype=np.float64)
                    self._cached_sum = float(np.sum(self._gamma(d - self._a_arr)))
                    self._cached_d = d
                total += self.target * self._cached_sum
        return min(self.lambda_, (1.0 - self.lambda_) * total)

    def test(self, p_value: float) -> bool:
        """Decide on the next p-value; returns ``True`` when it is rejected.

        Raises
        ------
        DataError
            If ``p_value`` is NaN or outside [0, 1].
        """
        p = float(p_value)
        if not (0.0 <= p <= 1.0):
            raise DataError(f"p-value {p_value!r} at position {self.t + 1} is outside [0, 1]")
        a_t = self.level()
        return self._advance(p, a_t)

    def _advance(self, p: float, a_t: float) -> bool:
        self.t += 1
        if p <= self.lambda_:
            self._cand += 1
        reject = p <= a_t
        if reject:
            self._a.append(self.t - self._cand)
            if len(self._a) > 1:
                # the new rejection enters the cached sum at the current D if it is still valid
                self._cached_d = -1
        return bool(reject)


class SaffronOptions(TypedDict, total=False):
    """The keyword options of :class:`OnlineSaffron` (their ranges and defaults are documented there)."""

    alpha: float
    w0: float
    lambda_: float
    gamma_exponent: float
    gamma_normalization: str
    gamma_terms: int


def saffron(p_values: Any, **options: Unpack[SaffronOptions]) -> SaffronResult:
    """Run SAFFRON on a whole stream of p-values, in order.

    Parameters
    ----------
    p_values : array_like of float, shape (n,)
        The p-values in arrival order, each in [0, 1].
    **options
        ``alpha``, ``w0``, ``lambda_``, ``gamma_exponent``, ``gamma_normalization``, ``gamma_terms``
        (keyword only), as in :class:`OnlineSaffron` (defaults: Pang et al. 2023, App. C).

    Returns
    -------
    SaffronResult
        Rejections, test levels and candidacy indicators.

    Raises
    ------
    DataError
        If ``p_values`` is empty, not one-dimensional, or has a value outside [0, 1] or NaN.
    ParameterError
        If a parameter is outside its range.

    References
    ----------
    Ramdas, Zrnic, Wainwright, Jordan. SAFFRON: an adaptive algorithm for online control of the false
    discovery rate. ICML 2018, Algorithm 1. Pang et al. 2023, Appendix C, Algorithm 5.
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise DataError(f"p_values must be a non-empty 1-d array, got shape {p.shape}")
    bad = ~((p >= 0.0) & (p <= 1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"p_values[{i}] = {p[i]!r} is outside [0, 1]")
    proc = OnlineSaffron(**options)
    n = p.size
    levels = np.empty(n)
    rejected = np.zeros(n, dtype=bool)
    for t in range(n):
        levels[t] = proc.level()
        rejected[t] = proc._advance(float(p[t]), levels[t])
    return SaffronResult(
        rejected=rejected, alpha=levels, candidate=p <= proc.lambda_, target=proc.target
    )


def _masks(rejected: Any, is_null: Any) -> tuple[np.ndarray, np.ndarray]:
    r = np.asarray(rejected, dtype=bool)
    h0 = np.asarray(is_null, dtype=bool)
    if r.shape != h0.shape:
        raise ParameterError("is_null", f"<shape {h0.shape}>", f"the shape of rejected, {r.shape}")
    return r, h0


def false_discovery_proportion(rejected: Any, is_null: Any) -> float:
    """Compute false discoveries over ``max(1, discoveries)`` (the FDP; its mean over runs is the FDR).

    Parameters
    ----------
    rejected, is_null : array_like of bool, same shape
        Decisions and the ground truth (``True`` = the null hypothesis holds).

    Returns
    -------
    float
        In [0, 1].
    """
    r, h0 = _masks(rejected, is_null)
    return float((r & h0).sum()) / max(1, int(r.sum()))


def true_discovery_rate(rejected: Any, is_null: Any) -> float:
    """Correct rejections over the number of non-nulls (``#correct reject / #should reject``; 0 if none)."""
    r, h0 = _masks(rejected, is_null)
    return float((r & ~h0).sum()) / max(1, int((~h0).sum()))


def discovery_counts(rejected: Any, is_null: Any) -> dict[str, int]:
    """Count as in Pang et al. 2023, Table 3: should reject / should accept / correct / false rejections."""
    r, h0 = _masks(rejected, is_null)
    return {
        "should_reject": int((~h0).sum()),
        "should_accept": int(h0.sum()),
        "correct_reject": int((r & ~h0).sum()),
        "false_reject": int((r & h0).sum()),
    }
