r"""The two local mechanisms of Juarez & Korolova (2023) on (group, value) pairs, with their exact privacy loss.

A client holds a group :math:`g \in \{0, \dots, d-1\}` and a performance value :math:`v \in [-1, 1]` (a rate
:math:`r \in [0, 1]` enters as :math:`v = 2r - 1`). Both mechanisms first perturb the group with generalized
randomized response (GRR, keep probability :math:`a = e^{\varepsilon_1}/(e^{\varepsilon_1} + d - 1)`) and set
the value of a client whose group changed to 0 (Algorithm 1, lines 1-4). Then

* :math:`\mathcal M_R` (Alg. 1, lines 5-6) discretizes the value to a bit :math:`B \sim
  \mathrm{Bernoulli}((1 + v)/2)` (Harmony) and applies randomized response with
  :math:`b = e^{\varepsilon_2}/(1 + e^{\varepsilon_2})`; the output value is :math:`v' = 2B' - 1 \in \{-1, 1\}`;
* :math:`\mathcal M_L` adds Laplace noise of scale :math:`2/\varepsilon_2` to the value of a client who kept
  its group, and of scale :math:`k/\varepsilon_2` to the 0 of a client whose group changed.

Privacy loss: computed, not copied
----------------------------------
The paper's Theorems 5 and 6 do not hold as stated (``PAPER_NOTES.md``, 003). The worst-case log-likelihood
ratio over inputs :math:`(g, v), (g_*, v_*)` and outputs :math:`(g', y)` is, exactly,

* :math:`\mathcal M_R`: :math:`\max\{\varepsilon_2,\ \varepsilon_1 + \log(2b)\}`, for every :math:`d \ge 2`
  (the output column :math:`(g', v') = (g, \mathrm{sign}\,v)` compares :math:`ab` with the flipped clients'
  :math:`(1-a)/(2(d-1))`). The paper's :math:`\max\{\varepsilon_1, \varepsilon_2\}` misses the
  :math:`\log 2b > 0` term (Eq. (6) of its proof assumes :math:`2b \le 1`): the allocation
  :math:`\varepsilon_1 = \varepsilon_2 = \varepsilon` really costs
  :math:`\varepsilon + \log(2e^{\varepsilon}/(1 + e^{\varepsilon}))`.
* :math:`\mathcal M_L` with :math:`k = 2`: :math:`\max\{\varepsilon_2, \varepsilon_1 + \varepsilon_2/2\}`
  (Theorem 6 is right for :math:`k = 2`); with :math:`k \ne 2` the two Laplace densities of different scales
  have an unbounded ratio in the tails, so the loss is infinite (the mechanism is not :math:`\varepsilon`-LDP
  for any finite :math:`\varepsilon`).

:meth:`GapMechanism.true_loss` evaluates the loss from the output distributions with
:func:`fedstats.privacy.analysis.loss.discrete_privacy_loss` (exact, :math:`\mathcal M_R`) and
:func:`~fedstats.privacy.analysis.loss.mixed_privacy_loss` (:math:`\mathcal M_L`, on a grid containing every
kink and the constant tails of the log ratio, which makes it exact for :math:`k = 2`); the closed forms above
are :meth:`GapMechanism.closed_form_loss`, and the tests check both against a brute-force evaluation.

Examples
--------
>>> m = GapMechanism("R", epsilon1=1.0, epsilon2=1.0)
>>> round(m.true_loss(), 6), m.paper_loss()
(1.379885, 1.0)
>>> round(GapMechanism("L", epsilon1=0.5, epsilon2=1.0).true_loss(), 12)
1.0
>>> GapMechanism("L", epsilon1=0.5, epsilon2=1.0, k=2 / 3).true_loss()
inf

References
----------
M. Juarez, A. Korolova. "You Can't Fix What You Can't Measure": Privately Measuring Demographic Performance
Disparities in Federated Learning. Workshop on Algorithmic Fairness through the Lens of Causality and
Privacy, PMLR 214, 2023. Definitions 2, 7; Algorithm 1; Theorems 5, 6, 9; Eqs. (19), (20).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats._validation import check_choice, check_int, check_real
from fedstats.errors import DataError, ParameterError
from fedstats.privacy.analysis.loss import PrivacyLoss, discrete_privacy_loss, mixed_privacy_loss

__all__ = [
    "MECHANISMS",
    "GapMechanism",
    "check_mechanism",
    "div_up",
    "laplace_variance",
]

MECHANISMS: tuple[str, ...] = ("R", "L")


def check_mechanism(mechanism: Any) -> str:
    """Return ``"R"`` or ``"L"`` (case-insensitive), else raise :class:`ParameterError` naming ``mechanism``."""
    value = str(mechanism).upper() if isinstance(mechanism, str) else mechanism
    return check_choice("mechanism", value, MECHANISMS)


def div_up(numerator: float, denominator: float) -> float:
    r"""Return the float nearest above ``numerator / denominator``: never below the exact real quotient.

    A Laplace scale :math:`\Delta/\varepsilon` rounded to nearest can fall an ulp below the exact quotient,
    and the mechanism's loss :math:`\Delta/t` then exceeds :math:`\varepsilon` (the issue saw M_L's loss
    reported as 1.0000000000000004 at epsilon = 1). The quotient is checked in exact rational arithmetic
    and moved up one ulp when it rounded down.

    Parameters
    ----------
    numerator : float
        Finite, >= 0.
    denominator : float
        Finite, > 0.

    Returns
    -------
    float
        ``q`` with ``q * denominator >= numerator`` exactly (as real numbers).
    """
    from fractions import Fraction

    q = numerator / denominator
    if Fraction(q) * Fraction(denominator) < Fraction(numerator):
        q = math.nextafter(q, math.inf)
    return q


def laplace_variance(scale: float) -> float:
    """Variance ``2 scale**2`` of a Laplace distribution of the given scale."""
    return 2.0 * scale * scale


def _log_sigmoid(x: float) -> float:
    """``log(1 / (1 + e^-x))`` without overflow."""
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


@dataclass(frozen=True)
class GapMechanism:
    r"""One parameter choice of :math:`\mathcal M_R` or :math:`\mathcal M_L` (Juarez & Korolova, Alg. 1).

    Parameters
    ----------
    kind : {"R", "L"}
        ``"R"``: Harmony discretization + randomized response on the value; ``"L"``: Laplace noise.
    epsilon1 : float
        Budget of the group's GRR, in [0, inf) (0 gives a useless but valid uniform group).
    epsilon2 : float
        Budget of the value's perturbation, in (0, inf).
    n_groups : int, default 2
        Number of groups ``d`` >= 2.
    k : float, default 2.0
        :math:`\mathcal M_L` only: the Laplace scale of clients whose group changed is ``k / epsilon2``; any
        ``k != 2`` makes the privacy loss infinite (see the module docstring). In (0, inf).

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """

    kind: str
    epsilon1: float
    epsilon2: float
    n_groups: int = 2
    k: float = 2.0

    def __post_init__(self) -> None:
        """Validate the fields (names as the parameters)."""
        object.__setattr__(self, "kind", check_mechanism(self.kind))
        check_real("epsilon1", self.epsilon1, low=0.0, high=math.inf, high_open=True)
        check_real("epsilon2", self.epsilon2, low=0.0, high=math.inf, low_open=True, high_open=True)
        check_int("n_groups", self.n_groups, low=2)
        check_real("k", self.k, low=0.0, high=math.inf, low_open=True, high_open=True)

    # ------------------------------------------------------------------ probabilities
    @property
    def a(self) -> float:
        r"""GRR keep probability :math:`a = e^{\varepsilon_1}/(e^{\varepsilon_1} + d - 1)` (Def. 2, Def. 7)."""
        return 1.0 / (1.0 + (self.n_groups - 1) * math.exp(-self.epsilon1))

    @property
    def a_other(self) -> float:
        r"""Probability :math:`(1 - a)/(d - 1)` that a client reports one given *other* group."""
        e = math.exp(-self.epsilon1)
        return e / (1.0 + (self.n_groups - 1) * e)

    @property
    def b(self) -> float:
        r""":math:`\mathcal M_R`'s randomized-response keep probability :math:`e^{\varepsilon_2}/(1+e^{\varepsilon_2})`."""
        return 1.0 / (1.0 + math.exp(-self.epsilon2))

    @property
    def value_gain(self) -> float:
        r"""Expected report per unit of value of a client who keeps its group: :math:`a(2b - 1)` (R), :math:`a` (L).

        The estimator of Def. 7 divides the group's sum of reported values by ``value_gain * n``.
        """
        if self.kind == "R":
            return self.a * math.tanh(self.epsilon2 / 2.0)
        return self.a

    @property
    def scale_keep(self) -> float:
        r""":math:`\mathcal M_L`: Laplace scale ``2 / epsilon2`` (rounded up) for clients who keep their group."""
        return div_up(2.0, self.epsilon2)

    @property
    def scale_flip(self) -> float:
        r""":math:`\mathcal M_L`: Laplace scale ``k / epsilon2`` (rounded up) for clients whose group changed."""
        return div_up(self.k, self.epsilon2)

    # ------------------------------------------------------------------ privacy
    def closed_form_loss(self) -> float:
        r"""Exact worst-case privacy loss in closed form (see the module docstring).

        Returns
        -------
        float
            :math:`\max\{\varepsilon_2, \varepsilon_1 + \log 2b\}` for R; for L
            :math:`\max\{\varepsilon_2, \varepsilon_1 + \varepsilon_2/2\}` when ``k == 2``, else ``inf``.
        """
        if self.kind == "R":
            log2b = math.log(2.0) + _log_sigmoid(self.epsilon2)
            return max(self.epsilon2, self.epsilon1 + log2b)
        if self.k != 2.0:
            return math.inf
        return max(self.epsilon2, self.epsilon1 + self.epsilon2 / 2.0)

    def paper_loss(self) -> float:
        r"""Return the epsilon the paper claims: Theorem 5 (R) or Theorem 6, Eq. (1) (L). Not a valid guarantee.

        Theorem 5: :math:`\max\{\varepsilon_1, \varepsilon_2\}`. Theorem 6: :math:`\max\{\varepsilon_2,
        \ln(2/k) + \varepsilon_2/2 - \varepsilon_1, \ln(k/2) + \varepsilon_2/k + \varepsilon_1\}`.
        """
        if self.kind == "R":
            return max(self.epsilon1, self.epsilon2)
        k, e1, e2 = self.k, self.epsilon1, self.epsilon2
        return max(e2, math.log(2.0 / k) + e2 / 2.0 - e1, math.log(k / 2.0) + e2 / k + e1)

    def log_probability_matrix(self, max_groups: int | None = None) -> np.ndarray:
        r""":math:`\mathcal M_R`'s log output probabilities: rows = inputs, columns = outputs.

        Inputs are :math:`(g, v)` for every group and :math:`v \in \{-1, 1\}` (the output probabilities are
        linear in :math:`v`, so the extreme values give every extreme ratio); outputs are
        :math:`(g', v')` for every group and :math:`v' \in \{-1, 1\}`. Row/column order: ``2 * g + (v > 0)``.

        Parameters
        ----------
        max_groups : int, optional
            Keep only the inputs and outputs of the first ``max_groups`` groups and merge every other output
            into one last column (its probability is the same for all kept inputs, so no ratio changes);
            rows still sum to 1.

        Returns
        -------
        numpy.ndarray of float64, shape (2m, 2m) or (2m, 2m + 1) with ``m = min(d, max_groups)``

        Raises
        ------
        ParameterError
            For :math:`\mathcal M_L` (continuous outputs).
        """
        if self.kind != "R":
            raise ParameterError("mechanism", self.kind, "'R' (M_L has continuous outputs)")
        d = self.n_groups
        m = d if max_groups is None else max(1, min(d, int(max_groups)))
        log_a = -math.log1p((d - 1) * math.exp(-self.epsilon1))
        log_other = log_a - self.epsilon1
        log_b = _log_sigmoid(self.epsilon2)
        log_1b = _log_sigmoid(-self.epsilon2)
        out = np.full((2 * m, 2 * m), log_other + math.log(0.5))  # outputs of a flipped client
        for g in range(m):
            for s in (0, 1):
                out[2 * g + s, 2 * g + s] = log_a + log_b
                out[2 * g + s, 2 * g + (1 - s)] = log_a + log_1b
        if m < d:
            rest = np.full((2 * m, 1), log_other + math.log(d - m))
            out = np.hstack([out, rest])
        return out

    def log_density(self, x: tuple[int, float], o: np.ndarray, y: np.ndarray) -> np.ndarray:
        r""":math:`\mathcal M_L`'s log density of output (group ``o``, value ``y``) for input ``x = (g, v)``.

        Parameters
        ----------
        x : tuple (int, float)
            Input group and value.
        o, y : numpy.ndarray, shape (m,)
            Output groups and values.

        Returns
        -------
        numpy.ndarray of float64, shape (m,)
        """
        g, v = int(x[0]), float(x[1])
        log_a = -math.log1p((self.n_groups - 1) * math.exp(-self.epsilon1))
        log_other = log_a - self.epsilon1
        s, t = self.scale_keep, self.scale_flip
        keep = log_a - math.log(2 * s) - np.abs(y - v) / s
        flip = log_other - math.log(2 * t) - np.abs(y) / t
        return np.where(np.asarray(o) == g, keep, flip)

    def true_loss(self) -> float:
        r"""Worst-case privacy loss computed from the output distributions with the privacy core's helpers.

        :math:`\mathcal M_R`: :func:`~fedstats.privacy.analysis.loss.discrete_privacy_loss` of
        :meth:`log_probability_matrix` (exact). :math:`\mathcal M_L`: ``inf`` when ``k != 2`` (the log ratio
        of two Laplace densities of different scales grows linearly in :math:`|y|`); for ``k == 2``,
        :func:`~fedstats.privacy.analysis.loss.mixed_privacy_loss` over the inputs
        :math:`\{0, 1, 2\} \times \{-1, 0, 1\}` and outputs on a grid containing -1, 0, 1 and points beyond,
        where the piecewise-linear log ratio attains its supremum (exact; groups beyond three are alike by
        symmetry).

        Returns
        -------
        float
            In [0, inf].
        """
        if self.kind == "R":
            # inputs of the two compared groups and a bystander cover every ratio (the rest are alike)
            mat = self.log_probability_matrix(max_groups=3)
            return float(discrete_privacy_loss(mat, log_space=True))
        if self.k != 2.0:
            return math.inf
        d = min(self.n_groups, 3)
        inputs = [(g, v) for g in range(d) for v in (-1.0, 0.0, 1.0)]
        span = 4.0
        grid = np.unique(np.concatenate([np.linspace(-span, span, 81), [-1.0, 0.0, 1.0]]))
        return float(mixed_privacy_loss(self.log_density, inputs, np.arange(d), grid))

    def privacy_loss(self) -> PrivacyLoss:
        r"""Return the mechanism's true privacy loss as a :class:`~fedstats.privacy.analysis.loss.PrivacyLoss`.

        Pure local DP: ``epsilon`` = :meth:`true_loss` (``inf`` when the mechanism is not DP, e.g.
        :math:`\mathcal M_L` with ``k != 2``), ``delta`` = 0. This is what a ledger is charged
        (``ledger.spend_loss(mech.privacy_loss(), ...)``), never the paper's claimed loss.

        Returns
        -------
        PrivacyLoss
        """
        return PrivacyLoss(epsilon=self.true_loss(), delta=0.0)

    # ------------------------------------------------------------------ utility (Eqs. 19, 20)
    def group_variance(self, n: float, n_clients: float, nu2: float | None = None) -> float:
        r"""Variance of the group-mean estimator of Def. 7 with the true group size ``n`` known.

        Eq. (20) (:math:`\mathcal M_R`) and Eq. (19) (:math:`\mathcal M_L`), generalized to ``d`` groups:

        .. math::
           \mathrm{Var}[\hat m^R] = \frac{1}{a(2b-1)^2 n}\Big(1 - a(2b-1)^2\nu^2 +
               \frac{K-n}{n}\frac{\bar a}{a}\Big), \qquad
           \mathrm{Var}[\hat m^L] = \frac1n\Big(\frac{1-a}{a}\nu^2 + \frac{\sigma_L^2}{a} +
               \frac{K-n}{n}\frac{\bar a\,\bar\sigma_L^2}{a^2}\Big)

        with :math:`\bar a = (1 - a)/(d - 1)`, :math:`\sigma_L^2 = 8/\varepsilon_2^2`,
        :math:`\bar\sigma_L^2 = 2k^2/\varepsilon_2^2`; for ``d = 2`` these are the paper's equations.

        Parameters
        ----------
        n : float
            Clients in the group, > 0.
        n_clients : float
            All clients ``K`` >= ``n``.
        nu2 : float, optional
            Mean squared value :math:`\nu^2 = \frac1n\sum v_i^2` of the group, in [0, 1]; default: the worst
            case (0 for R, 1 for L), which gives the upper bound used by the paper's Fig. 1 and Table 1.

        Returns
        -------
        float
            Variance in value units (:math:`v \in [-1, 1]`); divide by 4 for rate units.
        """
        if nu2 is None:
            nu2 = 0.0 if self.kind == "R" else 1.0
        a, ao = self.a, self.a_other
        rest = (n_clients - n) / n
        if self.kind == "R":
            t2 = math.tanh(self.epsilon2 / 2.0) ** 2
            return (1.0 - a * t2 * nu2 + rest * ao / a) / (a * t2 * n)
        s2 = laplace_variance(self.scale_keep)
        f2 = laplace_variance(self.scale_flip)
        return ((1.0 - a) / a * nu2 + s2 / a + rest * ao * f2 / (a * a)) / n

    def gap_variance(
        self,
        sizes: tuple[float, float],
        n_clients: float,
        nu2: tuple[float | None, float | None] = (None, None),
    ) -> float:
        r"""Variance (= MSE) of the gap estimator :math:`\hat m_A - \hat m_B` (Theorem 9).

        The estimators of two groups are uncorrelated (every report of a client whose group changed has
        mean 0), so the variances add.

        Parameters
        ----------
        sizes : (float, float)
            Sizes of the two compared groups, each > 0, summing to at most ``n_clients``.
        n_clients : float
            All clients ``K``.
        nu2 : (float or None, float or None)
            Each group's :math:`\nu^2` (None: worst case).

        Returns
        -------
        float
            In value units.

        Raises
        ------
        DataError
            If a group is empty or the groups exceed ``n_clients``.
        """
        n_a, n_b = float(sizes[0]), float(sizes[1])
        if n_a <= 0 or n_b <= 0:
            raise DataError(f"every compared group needs at least one client, got sizes {sizes}")
        if n_a + n_b > n_clients * (1 + 1e-12):
            raise DataError(f"group sizes {sizes} exceed the number of clients {n_clients}")
        return self.group_variance(n_a, n_clients, nu2[0]) + self.group_variance(
            n_b, n_clients, nu2[1]
        )

    def describe(self) -> dict[str, Any]:
        """JSON-friendly parameters and privacy losses (true and the paper's claim)."""
        out: dict[str, Any] = {
            "mechanism": self.kind,
            "epsilon1": self.epsilon1,
            "epsilon2": self.epsilon2,
            "n_groups": self.n_groups,
        }
        if self.kind == "L":
            out["k"] = self.k
        out["true_loss"] = self.true_loss()
        out["paper_loss"] = self.paper_loss()
        return out
