"""How many colluding devices a malicious server needs to isolate one input of a secure session.

In the malicious-server protocol (Bell et al. 2020 with the consistency check of Bonawitz et al. 2017,
Sec. 4.3) a survivor's masked input is ``y_v = x_v + PRG(b_v) + sum_j +-PRG(s_{v,j})`` over its ``k``
neighbours ``j``. A server that wants ``x_v`` alone needs ``b_v`` and every pairwise mask of ``v``:

* a pairwise mask with a colluding neighbour it knows; with an honest neighbour ``j`` it needs ``j``'s
  mask key, which honest devices reveal (as shares) only for a device the server declares dropped, so it
  declares every honest neighbour of ``v`` dropped. The consistency check makes all survivors see one
  dropout set, and the session aborts below ``min_survivors``, so at most ``n - min_survivors`` devices
  can be declared dropped: ``k - c_v <= n - min_survivors`` for ``c_v`` colluding neighbours;
* ``b_v`` it reconstructs from ``t`` shares; the honest neighbours are declared dropped and send none,
  so the ``t`` shares come from colluders: ``c_v >= t``.

So the server isolates ``v`` exactly when ``c_v >= need = max(t, k - (n - min_survivors))``
(:func:`neighbours_to_isolate`; the other routes, e.g. ``v``'s own mask key, need ``2t - k`` shares against
honest devices that reveal one of a neighbour's two secrets and a split dropout set, which the consistency
check refuses). The server cannot choose the graph (it follows from the verified run seed), so ``v``'s
neighbours are a uniformly random ``k``-subset of the other ``n - 1`` members (``HARARY(n, k)`` under a
uniformly random renaming, :mod:`fedstats.secagg.graph`) and ``c_v`` is hypergeometric for ``c``
colluders in the session (:func:`isolation_probability`). :func:`colluders_to_isolate` inverts it: the
fewest colluders that isolate a given member with at least a given probability per run.

A run the server can abort and restart with a fresh seed is another draw: ``r`` runs succeed with
probability ``1 - (1 - p)^r``, which is why an abort must cost its cause (``docs/secagg.md``).

Examples
--------
The devices' default floor, a session of 10 (``k = 4``, ``t = 3``, 9 survivors needed): 3 colluders,
and then about one run in 21 puts all three among the victim's 4 neighbours.

>>> neighbours_to_isolate(10, 4, 3, 9)
3
>>> colluders_to_isolate(10, 4, 3, 9)
3
>>> round(isolation_probability(10, 4, 3, 9, 3), 4)
0.0476

References
----------
Bell, Bonawitz, Gascon, Lepoint, Raykova (2020). Secure single-server aggregation with (poly)logarithmic
overhead. CCS 2020, Sec. 3-4. Bonawitz et al. (2017). Practical secure aggregation for
privacy-preserving machine learning. CCS 2017, Sec. 4.3.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

from fedstats._validation import check_int, check_real
from fedstats.secagg.params import (
    SearchedOnce,
    SecAggParameters,
    degree_parameters,
    find_parameters,
)

__all__ = [
    "COMPLETE_UP_TO",
    "DEFAULT_PROBABILITY",
    "MIN_COLLUDER_FRACTION",
    "TABLE_SIZES",
    "CollusionBound",
    "colluder_table",
    "colluder_table_markdown",
    "colluders_to_isolate",
    "isolation_probability",
    "meets_colluder_fraction",
    "neighbours_to_isolate",
    "session_colluders",
    "session_parameters",
]

DEFAULT_PROBABILITY = 1e-3
"""The per-run chance of isolating one given member at which :func:`colluders_to_isolate` counts."""

TABLE_SIZES = (10, 20, 50, 100, 200, 1000, 5000)
"""Session sizes of the table in ``docs/secagg.md`` (:func:`colluder_table_markdown`)."""

COMPLETE_UP_TO = 64
"""Sessions of at most this many members use the complete graph (:func:`session_parameters`): there
isolating a member needs ``min_survivors - 1`` colluders in the session whatever the seed, and a member
sends ``n - 1`` shares (63 at this size, as many as a sparse session of about 10^4 needs)."""

MIN_COLLUDER_FRACTION = 1.0 / 3.0
"""The share of a session a server must control to isolate one member with :data:`DEFAULT_PROBABILITY`
per run, at least, in every session :func:`session_parameters` chooses; a device's default
:attr:`fedstats.client.Policy.min_colluder_fraction`."""


@functools.lru_cache(maxsize=1024)
def _sf(need: int, others: int, colluders: int, k: int) -> float:
    """``P(X >= need)`` for ``X ~ Hypergeometric(others, colluders, k)``, exactly (integer binomials).

    Not ``scipy.stats``: devices compute it before every session, and importing it costs a device
    about 1.5 s of CPU (as :func:`fedstats.secagg.params._log2_sf`). A pure function of four
    integers, remembered (each round's session of the same size asks the same one, and so does every
    device simulated in one process).
    """
    top = min(k, colluders)
    if need > top:
        return 0.0
    num = sum(
        math.comb(colluders, i) * math.comb(others - colluders, k - i)
        for i in range(max(need, 0), top + 1)
    )
    return num / math.comb(others, k)  # int / int: correctly rounded


def _check_session(n: int, k: int, t: int, min_survivors: int) -> tuple[int, int, int, int]:
    n = check_int("n", n, low=2)
    k = check_int("k", k, low=1, high=n - 1)
    t = check_int("t", t, low=1, high=k)
    min_survivors = check_int("min_survivors", min_survivors, low=1, high=n)
    return n, k, t, min_survivors


def neighbours_to_isolate(n: int, k: int, t: int, min_survivors: int) -> int:
    """Colluding neighbours of a member that let a malicious server recover its input exactly.

    Parameters
    ----------
    n : int
        Session size, >= 2.
    k : int
        Graph degree, in ``[1, n - 1]``.
    t : int
        Shamir threshold, in ``[1, k]``.
    min_survivors : int
        The session aborts when fewer members survive, in ``[1, n]``.

    Returns
    -------
    int
        ``max(t, k - (n - min_survivors))``, in ``[t, k]`` (module docstring).

    Raises
    ------
    ParameterError
        If a parameter is out of its range.
    """
    n, k, t, min_survivors = _check_session(n, k, t, min_survivors)
    return max(t, k - (n - min_survivors))


def isolation_probability(n: int, k: int, t: int, min_survivors: int, colluders: int) -> float:
    """Chance per run that ``colluders`` colluding members include enough of one member's neighbours.

    Parameters
    ----------
    n, k, t, min_survivors : int
        The session's parameters (:func:`neighbours_to_isolate`).
    colluders : int
        Colluding members of the session other than the victim, in ``[0, n - 1]``.

    Returns
    -------
    float
        ``P(X >= need)`` for ``X ~ Hypergeometric(n - 1, colluders, k)``, in [0, 1].

    Raises
    ------
    ParameterError
        If a parameter is out of its range.
    """
    need = neighbours_to_isolate(n, k, t, min_survivors)
    colluders = check_int("colluders", colluders, low=0, high=n - 1)
    return _sf(need, n - 1, colluders, k)


def colluders_to_isolate(
    n: int, k: int, t: int, min_survivors: int, *, probability: float = DEFAULT_PROBABILITY
) -> int:
    """The fewest colluding members that isolate one given member with at least ``probability`` per run.

    Parameters
    ----------
    n, k, t, min_survivors : int
        The session's parameters (:func:`neighbours_to_isolate`).
    probability : float, default 1e-3
        Per-run chance, in (0, 1].

    Returns
    -------
    int
        The smallest ``c`` in ``[need, n - 1]`` with ``isolation_probability(..., c) >= probability``
        (``n - 1`` colluders always succeed: every neighbour is theirs).

    Raises
    ------
    ParameterError
        If a parameter is out of its range.
    """
    need = neighbours_to_isolate(n, k, t, min_survivors)
    probability = check_real("probability", probability, low=0.0, high=1.0, low_open=True)
    lo, hi = need, n - 1  # the chance grows with c: bisect for the first c that reaches it
    while lo < hi:
        mid = (lo + hi) // 2
        if _sf(need, n - 1, mid, k) >= probability:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class CollusionBound:
    """One row of the colluder table: a session's parameters and what isolating a member takes.

    Attributes
    ----------
    n, k, t, min_survivors : int
        The session's parameters (:func:`session_parameters`, the service's choice).
    neighbours : int
        :func:`neighbours_to_isolate`.
    colluders : int
        :func:`colluders_to_isolate` at ``probability``.
    probability : float
        The per-run chance the row is for.
    """

    n: int
    k: int
    t: int
    min_survivors: int
    neighbours: int
    colluders: int
    probability: float

    @property
    def fraction(self) -> float:
        """``colluders / n``: the share of the session an attacker must control."""
        return self.colluders / self.n


def colluder_table(
    sizes: Iterable[int] = TABLE_SIZES, *, probability: float = DEFAULT_PROBABILITY
) -> list[CollusionBound]:
    """:class:`CollusionBound` rows for sessions of the given sizes with the service's parameters.

    Parameters
    ----------
    sizes : iterable of int
        Session sizes, each >= 3.
    probability : float, default 1e-3
        Per-run chance, in (0, 1].

    Returns
    -------
    list of CollusionBound

    Raises
    ------
    ParameterError
        If a size or the probability is out of range.
    """
    rows = []
    for n in sizes:
        p = session_parameters(n)
        rows.append(
            CollusionBound(
                n=p.n,
                k=p.k,
                t=p.t,
                min_survivors=p.min_survivors,
                neighbours=neighbours_to_isolate(p.n, p.k, p.t, p.min_survivors),
                colluders=colluders_to_isolate(
                    p.n, p.k, p.t, p.min_survivors, probability=probability
                ),
                probability=probability,
            )
        )
    return rows


def colluder_table_markdown(
    sizes: Iterable[int] = TABLE_SIZES, *, probability: float = DEFAULT_PROBABILITY
) -> str:
    """The colluder table of ``docs/secagg.md`` as Markdown (a test keeps the page equal to it).

    Parameters
    ----------
    sizes, probability
        As :func:`colluder_table`, whose rows it writes.

    Returns
    -------
    str
        A Markdown table, one row per size, ending with a newline.
    """
    lines = [
        "| session n | k | t | min_survivors | colluding neighbours needed | colluders for "
        f"{probability:g} per run | share of the session |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in colluder_table(sizes, probability=probability):
        lines.append(
            f"| {r.n:,} | {r.k} | {r.t} | {r.min_survivors:,} | {r.neighbours} | {r.colluders:,} | "
            f"{r.fraction:.0%} |"
        )
    return "\n".join(lines) + "\n"


def session_colluders(params: SecAggParameters, *, probability: float = DEFAULT_PROBABILITY) -> int:
    """:func:`colluders_to_isolate` for a session's parameters (what a device checks before joining)."""
    return colluders_to_isolate(
        params.n, params.k, params.t, params.min_survivors, probability=probability
    )


def meets_colluder_fraction(
    params: SecAggParameters, fraction: float, *, probability: float = DEFAULT_PROBABILITY
) -> bool:
    """Whether isolating one member of the session takes at least ``ceil(fraction n)`` colluders.

    ``session_colluders(params, probability=probability) >= ceil(fraction * n)``, by one evaluation:
    the chance grows with the number of colluders, so it holds exactly when ``ceil(fraction n) - 1``
    colluders isolate a given member with less than ``probability`` per run.

    Parameters
    ----------
    params : SecAggParameters
        The session's parameters.
    fraction : float
        Share of the session, in [0, 1].
    probability : float, default 1e-3
        Per-run chance, in (0, 1].

    Returns
    -------
    bool

    Raises
    ------
    ParameterError
        If ``fraction`` or ``probability`` is out of range.
    """
    fraction = check_real("min_colluder_fraction", fraction, low=0.0, high=1.0)
    probability = check_real("probability", probability, low=0.0, high=1.0, low_open=True)
    n, k, t, ms = params.n, params.k, params.t, params.min_survivors
    want = math.ceil(fraction * n - 1e-9)
    if want <= 0:
        return True
    if want > n - 1:
        return False
    need = neighbours_to_isolate(n, k, t, ms)
    return _sf(need, n - 1, want - 1, k) < probability


def session_parameters(n: int) -> SecAggParameters:
    """The parameters of a secure session of ``n`` members over the network (server and devices).

    :func:`fedstats.secagg.params.find_parameters` gives the sparsest graph that keeps shares secret
    against ``5%`` corrupt members; in small sessions that leaves isolating one member to a handful of
    colluders (3 of 10, 4 of 20). Here the graph is denser where it must be:

    * up to :data:`COMPLETE_UP_TO` members, the complete graph (``k = n - 1``) with its smallest
      threshold: isolating a member needs ``min_survivors - 1`` colluders in the session (8 of 10, 17 of
      20), and the seed chooses no neighbourhood, so no seed is better for the attacker than another;
    * above, the smallest degree, from ``find_parameters``' upwards, whose
      :func:`colluders_to_isolate` (at :data:`DEFAULT_PROBABILITY` per run) is at least
      :data:`MIN_COLLUDER_FRACTION` of the session (``find_parameters``' own for every ``n >= 80``).

    A pure function of ``n``: both sides compute it, and a device refuses a session whose bound is below
    its own :attr:`fedstats.client.Policy.min_colluder_fraction`.

    Parameters
    ----------
    n : int
        Session size, >= 2.

    Returns
    -------
    SecAggParameters
        Malicious threat model, ``corrupt_fraction`` 0.05, ``dropout_rate`` 0.1, ``sigma`` 40, ``eta``
        30 (``find_parameters``' defaults).

    Raises
    ------
    ParameterError
        If ``n`` is below 2.
    """
    n = check_int("n", n, low=2)
    return _session_parameters(n)


@SearchedOnce
def _session_parameters(n: int) -> SecAggParameters:
    if n <= 3:
        return find_parameters(n)
    if n <= COMPLETE_UP_TO:
        degrees = [n - 1]
    else:
        base = find_parameters(n)
        degrees = [*range(base.k, n - 1, 2), n - 1]
    found = None
    for k in degrees:
        p = degree_parameters(n, k)
        if p is None:
            continue
        found = p
        if k == n - 1 or meets_colluder_fraction(p, MIN_COLLUDER_FRACTION):
            return p
    assert found is not None  # the complete graph always meets the conditions of find_parameters
    return found
