r"""Planning FED-chi^2: the power of the (DP) test at a stated effect, and the clients or epsilon it needs.

The effect is Cohen's :math:`w` (Cohen 1988, Sec. 7.2): :math:`w^2 = \sum_{ij}(p_{ij} - p_{i\cdot}p_{\cdot j})^2
/ (p_{i\cdot}p_{\cdot j})`, so Pearson's statistic of ``N`` records is about noncentral
:math:`\chi^2_{\mathrm{dof}}(\lambda = N w^2)`. The power is the estimator's own model, drawn in distribution:

* the sketch: the aggregated encoding of a table with statistic ``s`` is ``sqrt(s) N(0, 2)^l`` and decodes
  to :func:`~fedstats.analyses.chi2.simulate.simulate_decoded` (the decoder the run uses);
* the DP noise: round 2's discrete Gaussian adds ``tau`` (half its variance per coordinate) to what the
  decoder estimates, so the decoded value is that of ``s + tau``; ``tau`` comes from
  :func:`~fedstats.analyses.chi2.null.round2_plan` with the budget split of
  :func:`~fedstats.analyses.chi2.privacy.plan_chi2_privacy`, the expected counts of the stated margins and
  the norms of a public projection (:func:`~fedstats.analyses.chi2.estimator.projection_norms`), exactly as
  a run computes them;
* the test: the run's null simulation (:mod:`fedstats.analyses.chi2.null`) rejects when the decoded value
  exceeds the upper ``level`` quantile of its null law; here that law is the decoded value of
  :math:`\chi^2_{\mathrm{dof}} + \tau` and the power is ``P(D_1 > q_{1-level}(D_0))``.

Left out: the round-1 (marginal) noise's shift of the statistic, which both the null and the alternative
carry and which matters only for cells with few records (``fedstats chi2 --merge-below``), and dropout.
The prediction is checked against the full fast path (:func:`~fedstats.analyses.chi2.simulate.simulate_fed_chi2`,
with its parametric-bootstrap p-value) in ``tests/library/test_planning.py``. The power grows with the clients
(more records, and at a fixed records-per-client bound a noise that shrinks relative to the signal) and with
epsilon, so :func:`plan_chi2` searches either by bisection.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from fedstats._validation import check_int, check_open_unit, check_real
from fedstats.analyses._planning import Plan, check_one_unknown, smallest_int, smallest_real
from fedstats.analyses.chi2.client import expected_counts
from fedstats.analyses.chi2.estimator import check_options, projection_plan
from fedstats.analyses.chi2.null import headroom
from fedstats.analyses.chi2.privacy import plan_chi2_privacy
from fedstats.analyses.chi2.simulate import simulate_decoded
from fedstats.errors import FedstatsError, ParameterError
from fedstats.randomness import RandomSource
from fedstats.sketches.stable import StableProjection

__all__ = ["alternative_table", "noise_offset", "plan_chi2", "power", "result_power"]

_PLAN_SEED = 43
"""Seed of the planner's public projection and draws: a plan is a public computation, reproducible."""

_DRAWS = 4000
"""Draws of the null and of the alternative behind one power (Monte Carlo error below 0.008)."""


def _margins(m: int, given: Any, name: str) -> np.ndarray:
    if given is None:
        return np.full(m, 1.0 / m)
    p = np.asarray(given, dtype=np.float64).ravel()
    if p.size != m or not np.isfinite(p).all() or (p <= 0).any():
        raise ParameterError(name, given, f"{m} positive proportions")
    out: np.ndarray = p / p.sum()
    return out


def alternative_table(
    effect: float,
    shape: tuple[int, int],
    *,
    row_margins: Any = None,
    col_margins: Any = None,
) -> np.ndarray:
    r"""Cell probabilities with the stated margins and Cohen's ``w = effect``.

    :math:`p_{ij} = a_i b_j (1 + \delta\, u_i v_j)` with centred scores :math:`u, v` (weighted by the
    margins, so the margins are unchanged) and :math:`\delta` chosen so that :math:`w^2 =
    \delta^2 \sum_{ij} a_i b_j u_i^2 v_j^2`.

    Parameters
    ----------
    effect : float
        Cohen's w, > 0.
    shape : (int, int)
        ``(m_x, m_y)``, each >= 2.
    row_margins, col_margins : array_like of float, optional
        Proportions (normalized here); default uniform.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(m_x, m_y)``, summing to 1.

    Raises
    ------
    ParameterError
        If the effect is not positive, or too large for the margins (a cell would be negative).
    """
    w = check_real("effect", effect, low=0.0, low_open=True)
    m_x, m_y = (check_int(n, v, low=2) for n, v in zip(("rows", "cols"), shape, strict=True))
    a = _margins(m_x, row_margins, "row_margins")
    b = _margins(m_y, col_margins, "col_margins")
    u = np.arange(m_x, dtype=np.float64)
    v = np.arange(m_y, dtype=np.float64)
    u -= a @ u
    v -= b @ v
    scale = math.sqrt(float((a * u * u).sum() * (b * v * v).sum()))
    delta = w / scale
    rel = delta * np.outer(u, v)
    if (1.0 + rel).min() < 0:
        top = scale / float(np.abs(np.outer(u, v)).max())
        raise ParameterError("effect", effect, f"a w in (0, {top:.3g}] for these margins")
    out: np.ndarray = np.outer(a, b) * (1.0 + rel)
    return out


def noise_offset(
    *,
    n_clients: int,
    records_per_client: int,
    epsilon: float | None,
    delta: float | None,
    shape: tuple[int, int],
    row_margins: Any = None,
    col_margins: Any = None,
    encoding_size: int = 50,
    round1_fraction: float = 0.5,
    bits: int = 64,
) -> float:
    """``tau``: what round 2's DP noise adds to the decoded statistic, as a run with these inputs computes it.

    Parameters
    ----------
    n_clients : int
        Clients, >= 1.
    records_per_client : int
        The declared ``max_records`` (T), >= 1; the table holds ``n_clients * records_per_client`` records.
    epsilon, delta : float or None
        The run's budget (both or neither; neither: no DP, ``tau = 0``).
    shape : (int, int)
    row_margins, col_margins : array_like, optional
        Default uniform.
    encoding_size, round1_fraction, bits
        As :func:`~fedstats.analyses.chi2.api.fed_chi2`.

    Returns
    -------
    float
        ``Round2Plan.tau`` (:func:`~fedstats.analyses.chi2.null.round2_plan`), >= 0.
    """
    if epsilon is None and delta is None:
        return 0.0
    if epsilon is None or delta is None:
        raise ParameterError("epsilon/delta", (epsilon, delta), "both given, or neither")
    n = check_int("n_clients", n_clients, low=1)
    t = check_int("records_per_client", records_per_client, low=1)
    m_x, m_y = shape
    privacy = plan_chi2_privacy(
        epsilon=epsilon, delta=delta, max_records=t, round1_fraction=round1_fraction
    )
    total = float(n * t)
    a = _margins(m_x, row_margins, "row_margins") * total
    b = _margins(m_y, col_margins, "col_margins") * total
    vbar = expected_counts(a, b)

    proj = StableProjection(_PLAN_SEED, encoding_size, 2.0)
    plan, _, _ = projection_plan(
        privacy,
        proj,
        vbar,
        n_clients=n,
        max_cell=t,
        bits=bits,
        total_bound=total + headroom(privacy, m_x, m_y),
        min_dim=min(m_x, m_y),
        exact=False,
    )
    return float(plan.tau)


def power(
    effect: float,
    *,
    n_records: float,
    dof: int,
    encoding_size: int = 50,
    tau: float = 0.0,
    level: float = 0.05,
    decoder: str = "mean-of-squares",
) -> float:
    r"""Power of FED-chi^2 at Cohen's ``w = effect`` (module docstring: the estimator's model in distribution).

    Parameters
    ----------
    effect : float
        Cohen's w, > 0.
    n_records : float
        Records in the table, N > 0 (noncentrality :math:`N w^2`).
    dof : int
        Degrees of freedom, >= 1.
    encoding_size : int
        ``l >= 2``.
    tau : float
        Round-2 noise offset (:func:`noise_offset`), >= 0; 0 without DP.
    level : float
        Significance level, in (0, 1).
    decoder : {"mean-of-squares", "geometric"}

    Returns
    -------
    float
        In [0, 1]; Monte Carlo error below 0.008 (fixed public seed: the same inputs give the same power).
    """
    w = check_real("effect", effect, low=0.0, low_open=True)
    n_rec = check_real("n_records", n_records, low=0.0, low_open=True)
    k = check_int("dof", dof, low=1)
    ell, dec, _, _, lev = check_options(encoding_size, decoder, 64, 0.95, level)
    t = check_real("tau", tau, low=0.0)
    return _power(w, n_rec, k, int(ell), str(dec), lev, t)


# a pure function of the validated values (a fixed public seed), asked again for the same inputs (the
# usefulness warning of every release of the same table, a planner's search): remembered, the same value
@functools.lru_cache(maxsize=4096)
def _power(w: float, n_rec: float, k: int, ell: int, dec: str, lev: float, t: float) -> float:
    """:func:`power` of validated arguments."""
    rng = RandomSource(seed=_PLAN_SEED).generator("plan", "chi2")
    assert isinstance(rng, np.random.Generator)  # a seeded source gives numpy's generator
    s0 = rng.chisquare(k, _DRAWS)
    s1 = rng.noncentral_chisquare(k, n_rec * w * w, _DRAWS)
    d0 = simulate_decoded(s0 + t, ell, dec, rng)
    d1 = simulate_decoded(s1 + t, ell, dec, rng)
    crit = float(np.quantile(d0, 1.0 - lev))
    return float(np.mean(d1 > crit))


def result_power(result: Any, *, effect: float, n_records: float | None = None) -> float | None:
    """Power of the test a FED-chi^2 result ran, at Cohen's ``w = effect`` (None when it cannot be told).

    Parameters
    ----------
    result : Chi2Result
    effect : float
        Cohen's w, > 0.
    n_records : float, optional
        Records in the table; default the released (noisy) marginals' total under DP, else
        ``details["n_records"]`` (None without either).

    Returns
    -------
    float or None
        None also when the result's values fall outside the power model's ranges (a warning is never
        a reason for a release to fail).
    """
    privacy = result.details.get("privacy") or {}
    if n_records is None:
        marg = privacy.get("noisy_marginals")
        if marg is not None:  # the row totals and the column totals: each sums to N (noisy)
            n_records = float(np.sum(np.asarray(marg, dtype=np.float64))) / 2.0
        else:
            n_records = result.details.get("n_records")
    if n_records is None or not n_records > 0 or result.dof < 1:
        return None
    try:
        return power(
            effect,
            n_records=float(n_records),
            dof=int(result.dof),
            encoding_size=max(int(result.encoding_size), 2),
            tau=float(privacy.get("noise_offset", 0.0)),
            level=float(result.level),
            decoder=str(result.decoder),
        )
    except FedstatsError:  # outside the model: no judgement, and never a failed release
        return None


def plan_chi2(
    *,
    effect: float = 0.3,
    power_target: float = 0.8,
    shape: tuple[int, int] = (2, 2),
    n_clients: int | None = None,
    epsilon: float | None = None,
    delta: float | None = 1e-6,
    records_per_client: int = 1,
    row_margins: Any = None,
    col_margins: Any = None,
    encoding_size: int = 50,
    level: float = 0.05,
    decoder: str = "mean-of-squares",
    round1_fraction: float = 0.5,
    private: bool = True,
) -> Plan:
    """The clients or the epsilon FED-chi^2 needs for power ``power_target`` at Cohen's ``w = effect``.

    Give one of ``n_clients`` and ``epsilon``; the other is solved for (``private=False``: the clients
    of a run without DP noise).

    Parameters
    ----------
    effect : float
        Cohen's w, > 0 (0.1 small, 0.3 medium, 0.5 large).
    power_target : float
        In (0, 1).
    shape : (int, int)
        ``(m_x, m_y)``, each in [2, 10000].
    n_clients : int, optional
        Clients (>= 2), each holding at most ``records_per_client`` records.
    epsilon : float, optional
        Total budget of both rounds, in (0, inf).
    delta : float
        In (0, 1).
    records_per_client : int
        The declared ``max_records`` T >= 1; the table holds ``n_clients * T`` records.
    row_margins, col_margins : array_like, optional
        Expected proportions of the categories (default uniform).
    encoding_size, level, decoder, round1_fraction
        As :func:`~fedstats.analyses.chi2.api.fed_chi2`.
    private : bool
        False: no DP noise (solve for the clients only).

    Returns
    -------
    Plan
        ``value`` None when even 10^9 clients (or epsilon 1000) do not reach the power.

    Raises
    ------
    ParameterError
        Naming the parameter out of range.
    """
    w = check_real("effect", effect, low=0.0, low_open=True)
    target = check_open_unit("power", power_target)
    m_x, m_y = (
        check_int(n, v, low=2, high=10_000) for n, v in zip(("rows", "cols"), shape, strict=True)
    )
    t = check_int("records_per_client", records_per_client, low=1)
    ell, dec, _, _, lev = check_options(encoding_size, decoder, 64, 0.95, level)
    alternative_table(w, (m_x, m_y), row_margins=row_margins, col_margins=col_margins)
    if private:
        solve = check_one_unknown(n_clients=n_clients, epsilon=epsilon)
        check_open_unit("delta", delta)
    else:
        if n_clients is not None or epsilon is not None:
            raise ParameterError("epsilon", epsilon, "no value without privacy (solve for clients)")
        solve = "n_clients"
    if n_clients is not None:
        check_int("n_clients", n_clients, low=2)
    if epsilon is not None:
        check_real("epsilon", epsilon, low=0.0, high=math.inf, low_open=True, high_open=True)
    dof = (m_x - 1) * (m_y - 1)

    def predicted(n: int, eps: float | None) -> float:
        tau = noise_offset(
            n_clients=n,
            records_per_client=t,
            epsilon=eps,
            delta=delta if eps is not None else None,
            shape=(m_x, m_y),
            row_margins=row_margins,
            col_margins=col_margins,
            encoding_size=ell,
            round1_fraction=round1_fraction,
        )
        return power(
            w, n_records=n * t, dof=dof, encoding_size=ell, tau=tau, level=lev, decoder=dec
        )

    eps_run = epsilon if private else None
    inputs: dict[str, Any] = {
        "effect": w,
        "power": target,
        "shape": (m_x, m_y),
        "dof": dof,
        "records_per_client": t,
        "epsilon": epsilon,
        "delta": delta if private else None,
        "encoding_size": ell,
        "level": lev,
        "decoder": dec,
        "margins": "uniform" if row_margins is None and col_margins is None else "given",
    }
    goal = f"power >= {target:g} at w = {w:g} (level {lev:g})"
    if solve == "n_clients":
        found = smallest_int(lambda n: predicted(n, eps_run) >= target, 2, 10**9)
        achieved = None if found is None else predicted(found, eps_run)
        if not private:
            inputs.pop("epsilon")
        note = None if found is not None else "no number of clients up to 10^9 reaches the power"
        return Plan("chi2", "n_clients", found, goal, achieved, inputs, note)
    assert n_clients is not None
    inputs.pop("epsilon")
    inputs["n_clients"] = n_clients
    eps_found = smallest_real(lambda e: predicted(n_clients, e) >= target, 1e-3, 1e3, rtol=1e-3)
    if eps_found is None:
        ceiling = predicted(n_clients, None)
        return Plan(
            "chi2",
            "epsilon",
            None,
            goal,
            None,
            inputs,
            f"no epsilon up to 1000 reaches it (power without noise: {ceiling:.2f}; add clients)",
        )
    return Plan("chi2", "epsilon", eps_found, goal, predicted(n_clients, eps_found), inputs)
