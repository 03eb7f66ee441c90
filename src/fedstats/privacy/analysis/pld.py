r"""Privacy loss distributions (PLD): tight composition of randomized response, Laplace and Gaussian releases.

The privacy loss of a mechanism :math:`M` at an output :math:`o \sim M(x)` is
:math:`L = \log P[M(x)=o] / P[M(x')=o]`. Its distribution gives the whole privacy curve,

.. math::

    \delta(\varepsilon) = P[L = \infty] + E\big[(1 - e^{\varepsilon - L})_+\big]

(the hockey-stick divergence; Sommer, Meiser & Mohammadi 2019, Thm. 1), and the loss of a composition is
the sum of independent losses, so composing releases convolves their PLDs (Koskela, Jälkö & Honkela 2020,
Sec. 3). Basic composition adds the worst losses and zCDP bounds only a Rényi curve; the PLD keeps the
whole distribution and is the tightest of the three.

Here each PLD is put on the grid :math:`h\mathbb Z` by the pessimistic connect-the-dots rule
(Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022, Alg. 1): from the exact :math:`\delta(\varepsilon)`
at grid points it builds a distribution on the grid whose curve is never below the true one, on any grid,
so every epsilon returned here is an upper bound, i.e. a valid guarantee; the grid only decides how tight.

Composition (at most 50 ms of CPU for 1,000 releases, ``benchmarks/pld.py``):

* identical releases are grouped; each distinct release is transformed once (a real FFT) and raised to
  its count by repeated squaring, only at the frequencies where the power is above 1e-300 (a composition
  of many releases is smooth, so few remain); the distinct ones are multiplied, one inverse transform;
* the window: a Chernoff bound on the composed loss, from each release's log-MGF (cached), leaves at most
  1e-15 of mass above it and below it; the mass above is counted at :math:`+\infty` (and its cyclic image
  below only adds), the mass below reappears above (moved up: pessimistic);
* the grid: the finest :math:`h_0 2^k` (``discretization`` :math:`h_0`, default 1e-4) on which the window,
  estimated from each release's PLD on a coarse pilot grid, spans at most :math:`2^{15}` points (one
  transform then stays in a core's cache; up to :math:`2^{22}` rather than a grid coarser than half the
  widest release's range of losses); aligned to :math:`\varepsilon/m` when randomized response at
  :math:`\varepsilon` spans most of the losses, so that its PLD is exact on the grid. A coarser grid can
  only loosen the bound: against ``dp_accounting`` at 1e-4, 1,000 Laplace or Gaussian releases differ by
  at most 1e-4 (relative, above);
* a ledger's next charge changes one group's count: every release's PLD, transform and bound is cached,
  only that group's power is raised again. The result does not depend on what the caches hold.

A Poisson-subsampled release (rate :math:`q`) has two PLDs, for removing and for adding a record, composed
separately; epsilon is the larger (Zhu, Dong & Wang 2022, Sec. 5). The design follows Google's
``dp_accounting`` (``pld`` package), which the tests use as an oracle.

Examples
--------
100 randomized-response releases at epsilon 0.1 (basic composition: 10; the exact value is 4.7746):

>>> rr = MechanismSpec("randomized_response", 0.1)
>>> round(pld_epsilon([rr] * 100, delta=1e-6), 3)
4.775

Two Gaussian releases with sigma 2 compose exactly as one with sigma :math:`2/\sqrt 2` (Balle & Wang 2018):

>>> g = MechanismSpec("gaussian", 2.0)
>>> abs(pld_delta([g, g], epsilon=1.0) - pld_delta([MechanismSpec("gaussian", 2 ** 0.5)], epsilon=1.0)) < 1e-6
True
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Mapping

import numpy as np
import scipy.fft
import scipy.signal
from scipy.special import ndtr

from fedstats._validation import check_real
from fedstats.errors import ParameterError
from fedstats.privacy.analysis.loss import MechanismSpec

__all__ = ["DISCRETIZATION", "MechanismSpec", "pld_delta", "pld_epsilon", "pld_pmf"]

DISCRETIZATION = 1e-4
_TAIL = 1e-15  # mass allowed outside a composed window (counted at +inf)
_SINGLE_POINTS = 1 << 20  # largest grid of one release's PLD
_WINDOW_POINTS = 1 << 15  # largest composed window (beyond: a coarser grid, 2x at a time)
_WINDOW_MAX = 1 << 22  # largest when a coarser grid would be coarser than the releases (_fits)
_Z = 10.0  # Gaussian loss range: mean +- 10 standard deviations (tail < 1e-23, counted pessimistically)
_ADJACENCIES = ("remove", "add")

Pmf = tuple[int, np.ndarray, float]  # (index of the first grid point, probabilities, mass at +inf)


def connect_the_dots(rounded: np.ndarray, deltas: np.ndarray, h: float) -> Pmf:
    r"""Pessimistic connect-the-dots PLD on the grid points ``rounded * h`` from their exact deltas.

    Parameters
    ----------
    rounded : numpy.ndarray of int, shape (m,)
        Strictly increasing grid indices (the losses :math:`\varepsilon_i = h\,r_i` the PLD may take).
    deltas : numpy.ndarray of float, shape (m,)
        :math:`\delta(\varepsilon_i)` of the mechanism, non-increasing, in [0, 1].
    h : float
        Grid spacing, > 0.

    Returns
    -------
    (int, numpy.ndarray, float)
        The first index, the probabilities on ``first .. rounded[-1]`` (float64) and the mass at
        :math:`+\infty` (``deltas[-1]``). Doroshenko et al. 2022, Alg. 1: the mass at
        :math:`\varepsilon_i` is :math:`(\delta_i-\delta_{i-1})/(e^{\varepsilon_{i-1}-\varepsilon_i}-1)
        + (\delta_{i+1}-\delta_i)/(e^{\varepsilon_{i+1}-\varepsilon_i}-1)`, with :math:`\delta_0 = 1`.

    Raises
    ------
    ParameterError
        If the grid is empty or not increasing, or the deltas are outside [0, 1].
    """
    r = np.asarray(rounded, dtype=np.int64)
    d = np.asarray(deltas, dtype=np.float64)
    if r.ndim != 1 or r.size == 0 or r.shape != d.shape or bool(np.any(np.diff(r) <= 0)):
        raise ParameterError("rounded", r.shape, "a non-empty increasing grid, one delta per point")
    if not bool(np.all((d >= -1e-12) & (d <= 1.0 + 1e-12))):
        raise ParameterError("deltas", "<array>", "values in [0, 1]")
    d = np.minimum.accumulate(np.clip(d, 0.0, 1.0))
    gaps = np.diff(r) * h
    dd = np.diff(d)
    below = np.append(1.0 - d[0], dd / np.expm1(-gaps))
    above = np.append(dd / np.expm1(gaps), 0.0)
    probs = np.zeros(int(r[-1] - r[0]) + 1)
    probs[r - r[0]] = np.maximum(below + above, 0.0)
    return int(r[0]), probs, float(d[-1])


def _times_exp(eps: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``exp(eps) * x`` for ``x >= 0`` without ``inf * 0`` (in log space; 0 where ``x`` is 0)."""
    with np.errstate(divide="ignore", over="ignore"):
        out: np.ndarray = np.exp(eps + np.log(x))
    return out


def _subsampled_loss(losses: np.ndarray, q: float, adjacency: str) -> np.ndarray:
    """The loss of the q-subsampled pair at base losses ``losses`` (monotone: maps ranges to ranges)."""
    with np.errstate(divide="ignore"):
        f = np.logaddexp(math.log(q) + losses, math.log1p(-q) if q < 1 else -np.inf)
    return f if adjacency == "remove" else -f


def _atoms(spec: MechanismSpec) -> tuple[np.ndarray, np.ndarray]:
    """Discrete mechanisms: the output probabilities (with, without the record), each shape (m,)."""
    if spec.kind == "randomized_response":
        eps, k = spec.parameter, spec.categories
        z = math.exp(eps) + k - 1
        with_ = np.array([math.exp(eps) / z, 1 / z, (k - 2) / z])
        return with_, np.array([1 / z, math.exp(eps) / z, (k - 2) / z])
    shift = int(spec.sensitivity)
    if spec.kind == "discrete_laplace":
        a = spec.parameter
        t = math.ceil(72.0 / a) + shift
        x = np.arange(-t, t + shift + 1, dtype=np.float64)
        p0 = np.tanh(a / 2) * np.exp(-a * np.abs(x))
        p1 = np.tanh(a / 2) * np.exp(-a * np.abs(x - shift))
        return p1, p0
    sigma = spec.parameter
    t = math.ceil(13.0 * sigma) + shift + 1
    x = np.arange(-t, t + shift + 1, dtype=np.float64)
    wide = np.arange(-t - 20 * shift - 40, t + 20 * shift + 41, dtype=np.float64)
    norm = float(np.exp(-(wide**2) / (2 * sigma * sigma)).sum())
    return (
        np.exp(-((x - shift) ** 2) / (2 * sigma * sigma)) / norm,
        np.exp(-(x**2) / (2 * sigma * sigma)) / norm,
    )


@functools.lru_cache(maxsize=256)
def _atom_losses(
    spec: MechanismSpec, adjacency: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """A discrete mechanism's finite losses (descending), their upper and lower masses, and the +inf mass."""
    p1, p0 = _atoms(spec)
    q = spec.sampling_rate
    if spec.kind == "randomized_response":
        # an unsampled record sends nothing: one more output, as likely with or without the record
        upper = np.append(q * p1, 1.0 - q)
        lower = np.append(q * p0, 1.0 - q)
    elif adjacency == "remove":
        upper, lower = q * p1 + (1 - q) * p0, p0
    else:
        upper, lower = p0, q * p1 + (1 - q) * p0
    keep = upper > 0
    upper, lower = upper[keep], lower[keep]
    inf_mass = float(upper[lower <= 0].sum()) + max(0.0, 1.0 - float(upper.sum()))
    fin = lower > 0
    upper, lower = upper[fin], lower[fin]
    loss = np.log(upper) - np.log(lower)
    order = np.argsort(-loss, kind="stable")
    return loss[order], upper[order], lower[order], inf_mass


def _atoms_pmf(spec: MechanismSpec, h: float, adjacency: str) -> Pmf:
    """PLD of a discrete mechanism: exact deltas at the grid points around each atom's loss."""
    loss, upper, lower, inf_mass = _atom_losses(spec, adjacency)
    if loss.size == 0:  # every output betrays the record (e.g. a discrete Gaussian with tiny sigma)
        return 0, np.zeros(1), min(1.0, inf_mass)
    cu, cl = np.cumsum(upper), np.cumsum(lower)
    pts = np.unique(np.concatenate([np.floor(loss / h), np.ceil(loss / h)])).astype(np.int64)
    eps = pts * h
    # atoms with loss > eps: the first n of the descending order
    n = np.searchsorted(-loss, -eps, side="left")
    take = np.maximum(n - 1, 0)
    su = np.where(n > 0, cu[take], 0.0)
    sl = np.where(n > 0, cl[take], 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        deltas = inf_mass + np.maximum(su - _times_exp(eps, sl), 0.0)
    return connect_the_dots(pts, np.minimum(deltas, 1.0), h)


def _loss_range(spec: MechanismSpec, adjacency: str) -> tuple[float, float]:
    """The losses a release's discretized PLD spans (before rounding to the grid)."""
    if spec.kind not in ("laplace", "gaussian"):
        loss = _atom_losses(spec, adjacency)[0]
        return (float(loss[-1]), float(loss[0])) if loss.size else (0.0, 0.0)
    if spec.kind == "gaussian":
        mu = spec.sensitivity / spec.parameter
        lo, hi = -(mu * mu) / 2 - _Z * mu, (mu * mu) / 2 + _Z * mu
    else:
        lo, hi = -spec.sensitivity / spec.parameter, spec.sensitivity / spec.parameter
    ends = np.sort(_subsampled_loss(np.array([lo, hi]), spec.sampling_rate, adjacency))
    return float(ends[0]), float(ends[1])


def _tails(spec: MechanismSpec, t: np.ndarray) -> tuple[np.ndarray, ...]:
    """Continuous mechanisms: P(L > t) with and without the record, and P(L <= t) likewise."""
    if spec.kind == "gaussian":
        mu = spec.sensitivity / spec.parameter
        a, b = t / mu - mu / 2, t / mu + mu / 2
        return ndtr(-a), ndtr(-b), ndtr(a), ndtr(b)
    e0 = spec.sensitivity / spec.parameter  # Laplace: the loss lies in [-e0, e0]
    s = np.clip(t, -e0, e0)
    # the loss exceeds t where x > x_t = (b t + sensitivity) / 2; in scale units:
    with np.errstate(over="ignore"):
        sb = np.where(t >= e0, 0.0, np.where(t < -e0, 1.0, 0.5 * np.exp(-(s + e0) / 2)))
        ca = np.where(t >= e0, 1.0, np.where(t < -e0, 0.0, 0.5 * np.exp((s - e0) / 2)))
    return 1.0 - ca, sb, ca, 1.0 - sb


def _continuous_pmf(spec: MechanismSpec, h: float, adjacency: str) -> Pmf:
    """PLD of the Laplace or Gaussian mechanism (possibly subsampled) from its exact delta curve."""
    q = spec.sampling_rate
    lo, hi = _loss_range(spec, adjacency)
    pts = np.arange(math.floor(lo / h), math.ceil(hi / h) + 1, dtype=np.int64)
    eps = pts * h
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if q == 1.0:
            sa, sb, _, _ = _tails(spec, eps)
            deltas = sa - _times_exp(eps, sb)
        elif adjacency == "remove":
            # L > eps  <=>  base loss > log((e^eps - 1 + q) / q); always when e^eps <= 1 - q
            ok = np.expm1(eps) > -q
            t = np.log1p(np.where(ok, np.expm1(eps), 0.0) / q)
            sa, sb, _, _ = _tails(spec, t)
            deltas = np.where(ok, q * sa + (1 - q) * sb - _times_exp(eps, sb), -np.expm1(eps))
        else:
            # L > eps  <=>  base loss < log((e^-eps - 1 + q) / q); never when e^-eps <= 1 - q
            ok = np.expm1(-eps) > -q
            t = np.log1p(np.where(ok, np.expm1(-eps), 0.0) / q)
            _, _, ca, cb = _tails(spec, t)
            deltas = np.where(ok, cb - _times_exp(eps, q * ca + (1 - q) * cb), 0.0)
    return connect_the_dots(pts, np.clip(deltas, 0.0, 1.0), h)


@functools.lru_cache(maxsize=256)
def _single(spec: MechanismSpec, h: float, adjacency: str) -> Pmf:
    """One release's PLD on the grid h (cached, so returned read-only)."""
    if spec.kind in ("laplace", "gaussian"):
        pmf = _continuous_pmf(spec, h, adjacency)
    else:
        pmf = _atoms_pmf(spec, h, adjacency)
    pmf[1].setflags(write=False)
    return pmf


def pld_pmf(spec: MechanismSpec, *, discretization: float = DISCRETIZATION) -> dict[str, Pmf]:
    r"""The discretized PLD of one release, for removing and for adding a record.

    Parameters
    ----------
    spec : MechanismSpec
        The release.
    discretization : float, default 1e-4
        Grid spacing h of the losses, in [1e-6, 1].

    Returns
    -------
    dict
        ``{"remove": pmf, "add": pmf}``, each ``(first, probabilities, infinity_mass)``: the probability of
        loss ``(first + i) * h`` is ``probabilities[i]`` (float64, shape (m,)); the two are the same object
        when the release is not subsampled with a noise mechanism.

    Raises
    ------
    ParameterError
        If ``discretization`` is outside its range or ``spec`` is not a MechanismSpec.
    """
    h = check_real("discretization", discretization, low=1e-6, high=1.0)
    if not isinstance(spec, MechanismSpec):
        raise ParameterError("spec", spec, "a MechanismSpec")
    remove = _single(spec, h, "remove")
    return {"remove": remove, "add": remove if _symmetric(spec) else _single(spec, h, "add")}


def _symmetric(spec: MechanismSpec) -> bool:
    return spec.sampling_rate == 1.0 or spec.kind == "randomized_response"


_T = 2.0 ** np.arange(-8.0, 14.5, 0.5)  # Chernoff parameters, per unit of loss (ratio sqrt 2)
_PILOT_POINTS = 1 << 8  # a release's grid when only the width of a composition is estimated

Bounds = tuple[
    np.ndarray, np.ndarray, float, float
]  # log-MGFs at +_T and -_T, smallest, largest loss


@functools.lru_cache(maxsize=256)
def _bounds(spec: MechanismSpec, h: float, adjacency: str) -> Bounds:
    r"""One release's discretized PLD: :math:`\log E[e^{tL}; L < \infty]` at :math:`t = \pm` ``_T``.

    With the smallest and largest finite loss. Cached, so a next charge's window costs a sum of vectors.
    """
    first, probs, _ = _single(spec, h, adjacency)
    nz = np.flatnonzero(probs)
    loss = (first + nz) * h
    lp = np.log(probs[nz])
    out = np.empty((2, _T.size))
    rows = max(
        1, (1 << 18) // loss.size
    )  # parameters at a time: a release's grid may have 2^20 points
    for i in range(0, _T.size, rows):
        t = _T[i : i + rows, None]
        for sign in (0, 1):
            x = (t if sign == 0 else -t) * loss[None, :] + lp[None, :]
            top = x.max(axis=1)
            out[sign, i : i + rows] = top + np.log(np.exp(x - top[:, None]).sum(axis=1))
    return out[0], out[1], float(loss[0]), float(loss[-1])


def _window(groups: Iterable[tuple[Bounds, int]]) -> tuple[float, float]:
    r"""Losses [lo, hi] outside which the composition has mass at most _TAIL on each side (Chernoff).

    :math:`P(S > x) \le E[e^{tS}] e^{-tx}` for every :math:`t > 0`, and the log-MGF of a sum of
    independent losses is the sum of theirs: the smallest such bound over the parameters ``_T``.
    """
    up, down = np.zeros(_T.size), np.zeros(_T.size)
    lo = hi = 0.0
    for (mgf_up, mgf_down, low, high), n in groups:
        up, down = up + n * mgf_up, down + n * mgf_down
        lo, hi = lo + n * low, hi + n * high
    top = float(np.min((up - math.log(_TAIL)) / _T))
    bottom = -float(np.min((down - math.log(_TAIL)) / _T))
    return max(lo, bottom), min(hi, top)


def _pilot(spec: MechanismSpec, h0: float, adjacency: str) -> float:
    """The grid h0 * 2^j of at most ``_PILOT_POINTS`` points for this release (to estimate widths)."""
    lo, hi = _loss_range(spec, adjacency)
    h = h0
    while (hi - lo) / h + 3 > _PILOT_POINTS:
        h *= 2.0
    return h


_FLOOR = 1e-300  # transform values below it are 0 (no subnormal arithmetic, tens of times slower)


@functools.lru_cache(maxsize=64)
def _transform(spec: MechanismSpec, h: float, adjacency: str, size: int) -> np.ndarray:
    """The real FFT of one release's PLD placed cyclically on ``size`` points (read-only).

    Not renormalised: the bulk's rounding (about 1e-8 of mass) must not scale down the tail.
    """
    first, probs, _ = _single(spec, h, adjacency)
    placed = np.bincount((first + np.arange(probs.size)) % size, weights=probs, minlength=size)
    out: np.ndarray = scipy.fft.rfft(placed)
    out.setflags(write=False)
    return out


Sparse = tuple[np.ndarray, np.ndarray]  # frequencies (increasing) and transform values there


@functools.lru_cache(maxsize=128)
def _spectrum(spec: MechanismSpec, h: float, adjacency: str, size: int, n: int) -> Sparse:
    """:func:`_transform` to the power ``n``, where it is at least ``_FLOOR`` (0 elsewhere).

    The power of a composition of many releases is negligible at most frequencies (its distribution
    is smooth): only the others are raised, by repeated squaring, and none of their intermediate
    powers is below ``_FLOOR``. Cached per (release, grid, adjacency, size, count): a ledger's next
    charge changes one group's count and reuses the others'.
    """
    f = _transform(spec, h, adjacency, size)
    keep = np.flatnonzero(np.abs(f) >= math.exp(math.log(_FLOOR) / n))
    base = f[keep]
    result: np.ndarray | None = None
    while True:
        if n & 1:
            result = base if result is None else result * base
        n >>= 1
        if not n:
            break
        base = base * base
    assert result is not None
    keep.setflags(write=False)
    result.setflags(write=False)
    return keep, result


def _compose(
    groups: list[tuple[MechanismSpec, str, int]], h: float, window: tuple[int, int]
) -> Pmf:
    r"""Compose ``count`` copies of each (release, adjacency) inside ``window``.

    Returns (first, probabilities, infinity mass). One transform of ``size`` points (the power of 2 at or above the window's width, at most
    ``_WINDOW_POINTS``) per distinct release, raised to its count (:func:`_spectrum`), multiplied, one
    inverse transform. The composed distribution is cyclic on ``size`` points: the mass below ``lo``
    reappears above it (moved up: pessimistic), the mass above ``lo + size - 1`` (at most ``_TAIL``,
    :func:`_window`) reappears below and is counted at :math:`+\infty` as well.
    """
    finite = 1.0
    for spec, adjacency, n in groups:
        finite *= (1.0 - _single(spec, h, adjacency)[2]) ** n
    lo, hi = window
    size = 1 << (hi - lo).bit_length()  # >= hi - lo + 1
    freq: np.ndarray | None = None
    values = np.ones(1, dtype=complex)
    for spec, adjacency, n in groups:
        k, v = _spectrum(spec, h, adjacency, size, n)
        if freq is None:
            freq, values = k, v
            continue
        if k.size < freq.size:
            freq, values, k, v = k, v, freq, values
        # the frequencies of both (each increasing): where freq's would sit in k
        j = np.minimum(np.searchsorted(k, freq), k.size - 1)
        both = k[j] == freq
        values = values[both] * v[j[both]]
        big = np.abs(values) >= _FLOOR
        freq, values = freq[both][big], values[big]
    spectrum = np.zeros(size // 2 + 1, dtype=complex)
    spectrum[freq] = values
    dense = scipy.fft.irfft(spectrum, n=size)
    out = np.maximum(np.roll(dense, -(lo % size)), 0.0)
    # what the window left out (each side at most _TAIL) is counted at +inf
    return lo, out, min(1.0, 1.0 - finite + 2 * _TAIL)


def _epsilon(pmf: Pmf, h: float, delta: float) -> float:
    r"""Smallest epsilon >= 0 with :math:`\delta(\varepsilon) \le` ``delta`` for one composed pmf.

    With :math:`a_j = \sum_{i \ge j} p_i` and :math:`c_j = \sum_{i > j} p_i e^{\ell_j - \ell_i}` (a
    recurrence with factors :math:`e^{-h} < 1`, so nothing overflows at large losses),
    :math:`\delta(\ell_j) = p_\infty + a_{j+1} - c_j`, and on :math:`(\ell_{j-1}, \ell_j]`
    :math:`\delta(\varepsilon) = p_\infty + a_j - e^{\varepsilon - \ell_j}(p_j + c_j)`.
    """
    first, probs, inf_mass = pmf
    if inf_mass > delta:
        return math.inf
    loss = (first + np.arange(probs.size)) * h
    pos = loss > 0
    loss, probs = loss[pos], probs[pos]
    if probs.size == 0 or inf_mass + float((probs * -np.expm1(-loss)).sum()) <= delta:
        return 0.0
    a = np.cumsum(probs[::-1])[::-1]
    g = math.exp(-h)
    c = scipy.signal.lfilter([0.0, g], [1.0, -g], probs[::-1])[::-1]
    d_at = inf_mass + np.append(a[1:], 0.0) - c
    j = int(np.argmax(d_at <= delta))  # exists: at the largest loss delta = inf_mass
    top = probs[j] + c[j]
    if top <= 0.0:
        return float(loss[j])
    return float(max(0.0, loss[j] + math.log((inf_mass + a[j] - delta) / top)))


def _delta(pmf: Pmf, h: float, epsilon: float) -> float:
    first, probs, inf_mass = pmf
    loss = (first + np.arange(probs.size)) * h
    over = loss > epsilon
    return float(min(1.0, inf_mass + (probs[over] * -np.expm1(epsilon - loss[over])).sum()))


Releases = Iterable[MechanismSpec] | Mapping[MechanismSpec, int]


def _groups(mechanisms: Releases) -> tuple[tuple[MechanismSpec, int], ...]:
    """Identical releases grouped: (release, count) pairs, in a fixed order (the caches' key)."""
    if isinstance(mechanisms, Mapping):
        counts = dict(mechanisms)
        for m, n in counts.items():
            if not isinstance(m, MechanismSpec):
                raise ParameterError("mechanisms", m, "MechanismSpec keys")
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
                raise ParameterError("mechanisms", n, "counts that are integers >= 0")
        counts = {m: int(n) for m, n in counts.items() if n > 0}
    else:
        specs = list(mechanisms)
        for m in specs:
            if not isinstance(m, MechanismSpec):
                raise ParameterError("mechanisms", m, "MechanismSpec values")
        counts = Counter(specs)
    if not counts:
        raise ParameterError("mechanisms", "[]", "at least one mechanism")
    return tuple(sorted(counts.items(), key=_order))


def _order(group: tuple[MechanismSpec, int]) -> tuple[str, float, float, int, float]:
    m = group[0]
    return m.kind, m.parameter, m.sensitivity, m.categories, m.sampling_rate


@functools.lru_cache(maxsize=16)
def _composed(groups: tuple[tuple[MechanismSpec, int], ...], h0: float) -> tuple[float, list[Pmf]]:
    """The composed pmfs (one per adjacency) and the grid spacing used (h0, doubled until they fit)."""
    h = h0
    adjacencies = _ADJACENCIES if not all(_symmetric(s) for s, _ in groups) else ("remove",)
    for spec, _ in groups:  # one release's grid must fit (checked before it is built)
        for a in adjacencies if not _symmetric(spec) else ("remove",):
            lo, hi = _loss_range(spec, a)
            while (hi - lo) / h + 3 > _SINGLE_POINTS:
                h *= 2.0
    if len(groups) == 1 and groups[0][1] == 1:  # one release: its own PLD
        return h, [_single(groups[0][0], h, a) for a in adjacencies]
    which = {
        a: [(s, a if not _symmetric(s) else "remove", n) for s, n in groups] for a in adjacencies
    }
    # the grid: from the composition's width estimated on each release's pilot grid (cheap, and cached
    # per release), the finest h0 * 2^k on which it spans at most _WINDOW_POINTS points
    pilots = {(s, b): _pilot(s, h, b) for g in which.values() for s, b, _ in g}
    if any(not _single(s, p, b)[1].any() for (s, b), p in pilots.items()):
        return h, [(0, np.zeros(1), 1.0)]  # a release with all its loss at +inf
    pilot = [_window((_bounds(s, pilots[s, b], b), n) for s, b, n in g) for g in which.values()]
    width = max(w[1] for w in pilot) - min(w[0] for w in pilot)
    level = h
    while not _fits(groups, width / (h := _aligned(groups, level)) + 3, level):
        level *= 2.0
    while True:
        windows = [_window((_bounds(s, h, b), n) for s, b, n in g) for g in which.values()]
        # one window for both adjacencies, so a symmetric release's transform serves both; in grid
        # indices, one more on each side against rounding
        window = (
            math.floor(min(w[0] for w in windows) / h) - 1,
            math.ceil(max(w[1] for w in windows) / h) + 1,
        )
        if _fits(groups, window[1] - window[0] + 1, level):
            return h, [_compose(which[a], h, window) for a in adjacencies]
        level *= 2.0  # the estimate was short: a coarser grid
        h = _aligned(groups, level)


def _anchor(groups: tuple[tuple[MechanismSpec, int], ...]) -> tuple[MechanismSpec, float]:
    """The release whose group spans the widest range of losses (count times range), and its range."""
    spans = [(n * float(np.ptp(_loss_range(s, "remove"))), s) for s, n in groups]
    i = max(range(len(spans)), key=lambda k: spans[k][0])
    return spans[i][1], spans[i][0] / groups[i][1]


def _fits(groups: tuple[tuple[MechanismSpec, int], ...], points: float, level: float) -> bool:
    """Whether a window of ``points`` is composed at ``level``, or the grid is made coarser.

    At most ``_WINDOW_POINTS``; up to ``_WINDOW_MAX`` when the next grid would be coarser than half the
    range of the widest release's losses (millions of releases): there a coarser grid would bound its
    loss so loosely (randomized response at 0.1 on a grid of 0.4: four times the true epsilon) that a
    larger transform is the better cost.
    """
    if points <= _WINDOW_POINTS:
        return True
    return points <= _WINDOW_MAX and _aligned(groups, 2.0 * level) > _anchor(groups)[1] / 2.0


def _aligned(groups: tuple[tuple[MechanismSpec, int], ...], level: float) -> float:
    """The grid spacing at ``level``, aligned to randomized response where it spans the widest range.

    ``level``, or the largest eps / m <= max(``level``, eps) (m integer; eps itself up to a level of 2 eps)
    when the releases that span the widest
    range of losses (count times range) are (unsampled) randomized response at eps. Their losses (+-eps, 0) are then grid points, and their PLD is exact on the grid: the discretization
    error, which grows with the count times the grid step where the composition's epsilon lies among its
    largest losses (few releases of a large epsilon, a small delta), is gone for them.
    """
    spec = _anchor(groups)[0]
    eps = spec.parameter
    if spec.kind != "randomized_response" or spec.sampling_rate != 1.0 or level >= 2.0 * eps:
        return level  # (the grid must keep growing with the level)
    return eps / max(1, math.ceil(eps / level - 1e-9))


def pld_epsilon(
    mechanisms: Releases, *, delta: float, discretization: float = DISCRETIZATION
) -> float:
    r"""Epsilon of the composition of ``mechanisms`` at ``delta``, from their privacy loss distributions.

    Parameters
    ----------
    mechanisms : iterable of MechanismSpec, or mapping of MechanismSpec to int
        The releases (repeat a spec for repeated releases, or map each to its count >= 0), at least one.
    delta : float
        Target delta, in [0, 1).
    discretization : float, default 1e-4
        Finest grid spacing h of the losses, in [1e-6, 1]; doubled (deterministically) while a release's
        grid exceeds 2^20 points or the composed window 2^15 (and aligned to a dominant randomized
        response, see the module's notes), which keeps the bound valid but looser.

    Returns
    -------
    float
        The smallest :math:`\varepsilon \ge 0` whose :math:`\delta(\varepsilon)` of the discretized
        composition is at most ``delta`` (an upper bound on the true one); ``inf`` when no finite epsilon
        reaches it (e.g. delta = 0 for a Gaussian release). Exact up to the discretization: within about
        the number of releases times h of the true value, usually far closer.

    Raises
    ------
    ParameterError
        If ``mechanisms`` is empty or holds something else, or a parameter is outside its range.
    """
    d = check_real("delta", delta, low=0.0, high=1.0, high_open=True)
    h = check_real("discretization", discretization, low=1e-6, high=1.0)
    return _epsilon_of(_groups(mechanisms), h, d)


@functools.lru_cache(maxsize=4096)
def _epsilon_of(groups: tuple[tuple[MechanismSpec, int], ...], h0: float, delta: float) -> float:
    """:func:`pld_epsilon` of grouped releases, cached.

    A ledger asks the same question several times while it checks a charge against its budgets (the
    device and the server replay theirs too).
    """
    used, pmfs = _composed(groups, h0)
    return max(_epsilon(p, used, delta) for p in pmfs)


def pld_delta(
    mechanisms: Releases, *, epsilon: float, discretization: float = DISCRETIZATION
) -> float:
    r"""Delta of the composition of ``mechanisms`` at ``epsilon`` (the hockey-stick divergence).

    Parameters
    ----------
    mechanisms : iterable of MechanismSpec, or mapping of MechanismSpec to int
        The releases, at least one (see :func:`pld_epsilon`).
    epsilon : float
        In [0, inf).
    discretization : float, default 1e-4
        Grid spacing h, in [1e-6, 1] (see :func:`pld_epsilon`).

    Returns
    -------
    float
        :math:`\delta(\varepsilon)` of the discretized composition, in [0, 1]: an upper bound on the true
        one (Sommer, Meiser & Mohammadi 2019, Thm. 1; Doroshenko et al. 2022, Thm. 3.2).

    Raises
    ------
    ParameterError
        If ``mechanisms`` is empty or holds something else, or a parameter is outside its range.
    """
    e = check_real("epsilon", epsilon, low=0.0, high=math.inf, high_open=True)
    h = check_real("discretization", discretization, low=1e-6, high=1.0)
    used, pmfs = _composed(_groups(mechanisms), h)
    return max(_delta(p, used, e) for p in pmfs)


def _clear_caches() -> None:
    """Empty every cache of this module (benchmarks measure a cold start with it)."""
    for cached in (_atom_losses, _single, _bounds, _transform, _spectrum, _composed, _epsilon_of):
        cached.cache_clear()
