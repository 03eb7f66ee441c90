r"""Planning heterogeneity: the clients or epsilon a dispersion interval of a target width needs.

The released dispersion interval (:func:`~fedstats.analyses.heterogeneity.accuracy.dispersion_interval`)
is :math:`[D'' - A_{hi} - z\sigma_D,\; D'' + z\sigma_D]` with :math:`A_{hi} = \min(\tau^2\chi^2_{d,1-a/2},
\sum_j \max(\mu'_j, 1 - \mu'_j)^2)`, :math:`\tau` the round-1 noise on the mean and :math:`\sigma_D` the
round-2 noise on the dispersion (both in statistic units: the noise on the normalised sums,
:func:`~fedstats.analyses.heterogeneity.protocol.effective_sigma`, times the sums' sensitivities over n).
Its width, :math:`A_{hi} + 2 z \sigma_D` away from 0, depends on the data only through the cap on
:math:`A_{hi}`; the planner computes both noises with the run's own calibration
(:func:`~fedstats.analyses.heterogeneity.config.plan_rounds`, the configuration's accounting and noise) and
evaluates that same interval function, with the cap at its loosest (a centre at a corner of the cube) unless
``centre`` is given. Noise shrinks as 1/n at a fixed budget and as the budget grows, so the clients or
epsilon are found by bisection.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from fedstats._validation import check_int, check_real
from fedstats.analyses._planning import Plan, check_one_unknown, solve_width
from fedstats.analyses.heterogeneity.accuracy import dispersion_interval
from fedstats.analyses.heterogeneity.config import HeterogeneityConfig, plan_rounds
from fedstats.analyses.heterogeneity.protocol import effective_sigma
from fedstats.errors import FedstatsError, ParameterError

__all__ = ["dispersion_width", "plan_heterogeneity"]

_LIMITS = (10**9, 1e3)  # the most clients and the largest epsilon a plan searches


def dispersion_width(
    cfg: HeterogeneityConfig, n_clients: int, dim: int, centre: Any = None
) -> float:
    """Width of the dispersion interval a run of ``cfg`` on ``n_clients`` d-vectors releases.

    Parameters
    ----------
    cfg : HeterogeneityConfig
        Private (epsilon and delta set), releasing the dispersion (``statistic`` "dispersion" or "all").
    n_clients : int
        Clients, >= 2.
    dim : int
        Vector length d >= 1.
    centre : array_like of float, shape (d,), optional
        The mean the run would release (sets the cap on the centre's error); default a corner (no cap
        below ``d``).

    Returns
    -------
    float
        ``hi - lo`` of :func:`~fedstats.analyses.heterogeneity.accuracy.dispersion_interval` away from 0.
    """
    p1, p2, sens = plan_rounds(cfg, n_clients, dim)
    tau = effective_sigma(p1, n_clients) * sens.mean_sum / n_clients
    sd_d = effective_sigma(p2, n_clients) * sens.dispersion_sum / n_clients
    mean = np.zeros(dim) if centre is None else np.asarray(centre, dtype=np.float64).ravel()
    if mean.shape != (dim,):
        raise ParameterError("centre", centre, f"{dim} numbers in [0, 1]")
    far = 10.0 * (dim + 1.0)  # an estimate far from 0: the interval is not cut at 0
    lo, hi = dispersion_interval(
        far, mean=mean, mean_sd=tau, dispersion_sd=sd_d, level=cfg.confidence
    )
    return hi - lo


def plan_heterogeneity(
    width: float,
    *,
    dim: int,
    n_clients: int | None = None,
    epsilon: float | None = None,
    delta: float = 1e-6,
    centre: Any = None,
    **options: Any,
) -> Plan:
    """The clients (or epsilon) whose released dispersion interval is at most ``width`` wide.

    Parameters
    ----------
    width : float
        Target width, > 0 (the dispersion of vectors in ``[0, 1]^d`` lies in ``[0, d / 4]``).
    dim : int
        Vector length d, in [1, 10^7].
    n_clients : int, optional
        Clients, >= 2.
    epsilon : float, optional
        Total budget of both rounds, > 0.
    delta : float
        In (0, 1).
    centre : array_like, optional
        The expected mean vector (see :func:`dispersion_width`).
    **options
        Any other :class:`~fedstats.analyses.heterogeneity.config.HeterogeneityConfig` option (``noise``,
        ``accounting``, ``round1_fraction``, ``confidence``, ...); its defaults otherwise.

    Returns
    -------
    Plan
        The clients or epsilon found (None, with a ``note``, when out of reach) and the dispersion
        interval width there.

    Raises
    ------
    ParameterError
        Naming the parameter out of range, or when not exactly one of ``n_clients``/``epsilon`` is unset.
    """
    w = check_real("width", width, low=0.0, low_open=True)
    d = check_int("dim", dim, low=1, high=10**7)
    check_one_unknown(n_clients=n_clients, epsilon=epsilon)
    if n_clients is not None:
        check_int("n_clients", n_clients, low=2)
    if options.get("statistic", "all") not in ("all", "dispersion"):
        raise ParameterError("statistic", options["statistic"], "'all' or 'dispersion'")
    base = HeterogeneityConfig(
        epsilon=1.0 if epsilon is None else epsilon, delta=delta, dim=d, **options
    )

    def width_at(n: int, eps: float) -> float:
        try:
            cfg = dataclasses.replace(base, epsilon=eps)
            return dispersion_width(cfg, n, d, centre)
        except FedstatsError:  # e.g. sums that cannot be kept exact at this size
            return math.inf

    goal = f"{100 * base.confidence:g}% dispersion interval width <= {w:g}"
    inputs: dict[str, Any] = {
        "dim": d,
        "delta": delta,
        "range": (0.0, d / 4.0),
        "noise": base.noise,
        "accounting": base.accounting,
        "confidence": base.confidence,
    }
    notes = ("not within 10^9", lambda: "no epsilon up to 1000 reaches it (add clients)")
    return solve_width(
        "heterogeneity", width_at, w, goal, inputs, n_clients, epsilon, _LIMITS, notes
    )
