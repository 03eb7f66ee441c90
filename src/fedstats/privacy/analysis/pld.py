r"""Privacy loss distributions (PLD): tight composition of randomized response, Laplace and Gaussian releases.

The privacy loss of a mechanism :math:`M` at an output :math:`o \sim M(x)` is
:math:`L = \log P[M(x)=o] / P[M(x')=o]`. Its distribution gives the whole privacy curve,

.. math::

    \delta(\varepsilon) = P[L = \infty] + E\big[(1 - e^{\varepsilon - L})_+\big]

(the hockey-stick divergence; Sommer, Meiser & Mohammadi 2019, Thm. 1), and the loss of a composition is
the sum of independent losses, so composing releases convolves their PLDs (Koskela, Jälkö & Honkela 2020,
Sec. 3). Basic composition adds the worst losses and zCDP bounds only a Rényi curve; the PLD keeps the
whole distribution and is the tightest of the three.

Here each PLD is put on the grid :math:`h\mathbb Z` (``discretization``, default 1e-4) by the pessimistic
connect-the-dots rule (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022, Alg. 1): from the exact
:math:`\delta(\varepsilon)` at grid points it builds a distribution on the grid whose curve is never below
the true one, so every epsilon returned here is an upper bound, i.e. a valid guarantee. Identical releases
are grouped and composed by one FFT power; the window is cut where a Chernoff bound leaves at most 1e-15 of
mass outside, and that mass is counted at :math:`+\infty` (pessimistic). A Poisson-subsampled release
(rate :math:`q`) has two PLDs, for removing and for adding a record, composed separately; epsilon is the
larger (Zhu, Dong & Wang 2022, Sec. 5). The design follows Google's ``dp_accounting`` (``pld`` package),
which the tests use as an oracle.

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
from collections.abc import Iterable

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
_WINDOW_POINTS = 1 << 17  # largest composed window (beyond: a coarser grid, 2x at a time)
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


Support = tuple[np.ndarray, np.ndarray, float, int, int]  # indices, log-masses, variance, min, max


@functools.lru_cache(maxsize=256)
def _support(spec: MechanismSpec, h: float, adjacency: str) -> Support:
    """One release's PLD as its non-zero grid indices and log-masses, with their variance and range."""
    first, probs, _ = _single(spec, h, adjacency)
    nz = np.flatnonzero(probs)
    k = (first + nz).astype(np.float64)
    p = probs[nz]
    m = float((k * p).sum() / p.sum())
    var = float((((k - m) ** 2) * p).sum() / p.sum())
    return k, np.log(p), var, first + int(nz[0]), first + int(nz[-1])


def _log_mgf(support: Support, t: np.ndarray) -> np.ndarray:
    """Log-MGF, log E[exp(t K); K finite], of the grid index K, for each t (shape (m,))."""
    k, lp = support[0], support[1]
    x = t[:, None] * k[None, :] + lp[None, :]
    top = x.max(axis=1)
    out: np.ndarray = top + np.log(np.exp(x - top[:, None]).sum(axis=1))
    return out


def _window(groups: list[tuple[Support, int]]) -> tuple[int, int]:
    """Grid indices [lo, hi] outside which the composition has mass at most _TAIL on each side."""
    var = sum(n * sup[2] for sup, n in groups)
    kmin = sum(n * sup[3] for sup, n in groups)
    kmax = sum(n * sup[4] for sup, n in groups)
    sd = max(math.sqrt(var), 1.0)
    t = np.array([0.5, 1.5, 4, 10, 30]) / sd
    up = sum(n * _log_mgf(sup, t) for sup, n in groups)
    down = sum(n * _log_mgf(sup, -t) for sup, n in groups)
    hi = float(np.min((up - math.log(_TAIL)) / t))
    lo = float(np.max(-(down - math.log(_TAIL)) / t))
    return max(kmin, math.floor(lo)), min(kmax, math.ceil(hi))


def _int_power(x: np.ndarray, n: int) -> np.ndarray:
    """``x ** n`` for complex ``x``, ``|x| <= 1``, by repeated squaring (faster than ``np.power``).

    Entries whose power would fall below 1e-300 are set to 0 first, so no product is subnormal (subnormal
    arithmetic is tens of times slower); what they contribute is below the FFT's rounding.
    """
    result: np.ndarray | None = None
    base = np.where(np.abs(x) < math.exp(-690.0 / n), 0.0, x)
    while True:
        if n & 1:
            result = base if result is None else result * base
        n >>= 1
        if not n:
            break
        base = base * base
    assert result is not None
    return result


def _compose(
    groups: list[tuple[Pmf, int]],
    window: tuple[int, int],
    spectra: dict[tuple[int, int], np.ndarray] | None = None,
) -> Pmf:
    """Compose ``count`` copies of each pmf inside ``window``: (first, probabilities, infinity mass).

    ``spectra`` caches each group's transformed power by (id of its probabilities, count) between calls
    with the same window (a symmetric release's PLD is the same for removing and adding a record).
    """
    finite = 1.0
    for (_, _probs, inf_mass), n in groups:
        finite *= (1.0 - inf_mass) ** n
    if len(groups) == 1 and groups[0][1] == 1:
        return groups[0][0]
    lo, hi = window
    size = scipy.fft.next_fast_len(hi - lo + 1, real=True)
    spectra = {} if spectra is None else spectra
    spectrum: np.ndarray | None = None
    for (first, probs, _), n in groups:
        key = (id(probs), n)
        if key not in spectra:
            # not renormalised: the bulk's rounding (about 1e-8 of mass) must not scale down the tail
            placed = np.bincount(
                (first + np.arange(probs.size)) % size, weights=probs, minlength=size
            )
            spectra[key] = _int_power(scipy.fft.rfft(placed), n)
        f = spectra[key]
        if spectrum is not None:
            f = spectrum * f
            f[np.abs(f) < 1e-300] = 0.0  # no subnormal products (see _int_power)
        spectrum = f
    assert spectrum is not None
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


def _groups(mechanisms: Iterable[MechanismSpec]) -> tuple[tuple[MechanismSpec, int], ...]:
    specs = list(mechanisms)
    for m in specs:
        if not isinstance(m, MechanismSpec):
            raise ParameterError("mechanisms", m, "MechanismSpec values")
    if not specs:
        raise ParameterError("mechanisms", "[]", "at least one mechanism")
    return tuple(sorted(Counter(specs).items(), key=repr))


@functools.lru_cache(maxsize=512)
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
    while True:
        which = {a: [a if not _symmetric(s) else "remove" for s, _ in groups] for a in adjacencies}
        pmfs = {
            a: [(_single(s, h, b), n) for (s, n), b in zip(groups, which[a], strict=True)]
            for a in adjacencies
        }
        if any(not p[1].any() for ps in pmfs.values() for p, _ in ps):
            return h, [(0, np.zeros(1), 1.0)]  # a release with all its loss at +inf
        windows = [
            _window([(_support(s, h, b), n) for (s, n), b in zip(groups, which[a], strict=True)])
            for a in adjacencies
        ]
        # one window for both adjacencies, so a symmetric release's transform serves both
        window = (min(w[0] for w in windows), max(w[1] for w in windows))
        if window[1] - window[0] + 1 <= _WINDOW_POINTS:
            spectra: dict[tuple[int, int], np.ndarray] = {}
            return h, [_compose(pmfs[a], window, spectra) for a in adjacencies]
        h *= 2.0


def pld_epsilon(
    mechanisms: Iterable[MechanismSpec], *, delta: float, discretization: float = DISCRETIZATION
) -> float:
    r"""Epsilon of the composition of ``mechanisms`` at ``delta``, from their privacy loss distributions.

    Parameters
    ----------
    mechanisms : iterable of MechanismSpec
        The releases (repeat a spec for repeated releases), at least one.
    delta : float
        Target delta, in [0, 1).
    discretization : float, default 1e-4
        Grid spacing h of the losses, in [1e-6, 1]; doubled (deterministically) while a release's grid
        exceeds 2^20 points or the composed window 2^17, which keeps the bound valid but looser.

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
    mechanisms: Iterable[MechanismSpec], *, epsilon: float, discretization: float = DISCRETIZATION
) -> float:
    r"""Delta of the composition of ``mechanisms`` at ``epsilon`` (the hockey-stick divergence).

    Parameters
    ----------
    mechanisms : iterable of MechanismSpec
        The releases, at least one.
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
