"""Choosing the graph degree ``k`` and the Shamir threshold ``t`` (Bell et al. 2020, Sec. 3-4).

With ``n`` clients, at most ``gamma n`` of them corrupt (colluding with the server) and at most
``delta n`` dropping out, the neighbourhood of a client in the randomly renamed ``HARARY(n, k)`` graph is a
uniformly random ``k``-subset of the other ``n - 1`` clients, so the number of its corrupt (dropped)
neighbours is hypergeometric. A pair ``(k, t)`` is accepted when, with the union bound over clients:

1. **shares stay secret** (probability of failure <= 2^-sigma): no honest client has ``t`` corrupt
   neighbours. Against a *malicious* server that may claim a client dropped to some neighbours and survived to
   others, each honest neighbour reveals at most one of the two shares (it refuses the other), so the server
   needs ``2 t - k`` corrupt neighbours; this is the default threat model.
2. **the honest survivors stay connected** (failure <= 2^-sigma): otherwise the server would learn partial
   sums. In ``HARARY(n, 2h)`` the survivors are disconnected exactly when two disjoint arcs of ``h`` ring
   positions are entirely removed; the union bound over the ``n (n - 1) / 2`` pairs of arcs is used.
3. **the sum is recoverable** (failure <= 2^-eta): every client keeps at least ``t`` neighbours that answer
   the unmasking request.

The finder returns the smallest such ``k`` and, for it, the smallest ``t`` (the most dropout-tolerant);
``k = n - 1`` (complete graph, the deterministic worst case) is the fallback. Bell et al. prove
``k = O(log n)`` suffices.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np

from fedstats._validation import check_choice, check_int, check_real
from fedstats.errors import ParameterError
from fedstats.secagg.crypto import check_bits
from fedstats.secagg.graph import check_degree, valid_degree

if TYPE_CHECKING:
    from fedstats.secagg.identity import ClientIdentity, RosterVerifier

__all__ = [
    "ATTACKS",
    "STOPPED_BY",
    "THREAT_MODELS",
    "ClientConfig",
    "SecAggParameters",
    "degree_parameters",
    "find_parameters",
    "validate_parameters",
]

THREAT_MODELS = ("malicious", "semi-malicious", "semi-honest")
"""``"semi-honest"``: the server follows the protocol (honest but curious). ``"semi-malicious"``: the same
protocol, parameters chosen so that each honest neighbour revealing one share per neighbour is not enough
(``2t - k`` corrupt neighbours needed); the server is trusted to send consistent messages. ``"malicious"``:
Bell et al. 2020 with identities, signatures, a client-computed graph and the consistency check."""

ATTACKS: dict[str, str] = {
    "inconsistent_dropout_claims": "server tells clients different dropout sets to get both shares",
    "parameter_tampering": "server sends another n, k, t, or a neighbour list of the wrong size",
    "graph_choice": "server chooses which clients are neighbours (e.g. all corrupt)",
    "key_substitution": "server swaps public keys or runs fake clients",
    "replay_or_forgery": "client messages replayed from another session or forged",
    "double_reveal": "server asks one client for both shares of the same neighbour",
    "fail_open": "an error while unmasking leaves a partly unmasked sum that is later released",
    "bad_share": "one client sends a wrong share (or one >= the field prime) to kill the session",
    "low_order_key": "a low-order X25519 public key",
    "oversized_message": "messages far larger than the protocol needs",
    "weak_parameters": "user-supplied (k, t) with no security, e.g. k = 2, t = 1",
    "retained_secrets": "a client keeps its secrets after they are needed",
}
"""Attacks considered in ``docs/secagg.md`` (threat-model table), by name."""

_COMMON = (
    "parameter_tampering",
    "double_reveal",
    "fail_open",
    "bad_share",
    "low_order_key",
    "oversized_message",
    "retained_secrets",
)
STOPPED_BY: dict[str, tuple[str, ...]] = {
    "semi-honest": _COMMON,
    "semi-malicious": _COMMON,
    "malicious": (
        *_COMMON,
        "inconsistent_dropout_claims",
        "graph_choice",
        "key_substitution",
        "replay_or_forgery",
        "weak_parameters",
    ),
}
"""The attacks of :data:`ATTACKS` each threat model stops (the rest it does not)."""


@dataclass(frozen=True)
class SecAggParameters:
    """Public parameters of one secure-aggregation session.

    Attributes
    ----------
    n : int
        Number of clients the server invites.
    k : int
        Graph degree (number of neighbours, hence of shares per secret).
    t : int
        Shamir threshold: shares needed to reconstruct a secret, in ``[1, k]``.
    min_survivors : int
        The server aborts when fewer clients than this complete any step (``n - floor(delta n)``).
    corrupt_fraction, dropout_rate : float
        The ``gamma`` and ``delta`` the parameters were chosen for.
    sigma, eta : float
        Statistical security and correctness parameters (failure probabilities 2^-sigma, 2^-eta).
    threat_model : str
        ``"malicious"``, ``"semi-malicious"`` or ``"semi-honest"`` server (:data:`THREAT_MODELS`).
    security_bound, correctness_bound : float
        log2 of the union-bound failure probabilities achieved (<= -sigma and <= -eta when found by the
        finder; reported, not enforced, for overridden ``k``/``t``).
    """

    n: int
    k: int
    t: int
    min_survivors: int
    corrupt_fraction: float
    dropout_rate: float
    sigma: float
    eta: float
    threat_model: str
    security_bound: float
    correctness_bound: float

    @property
    def stops(self) -> tuple[str, ...]:
        """The attacks (keys of :data:`ATTACKS`) this threat model stops; it stops no others."""
        return STOPPED_BY[self.threat_model]


def _log2_sf(k: int, bad: int, n_others: int, at_least: int) -> float:
    """log2 P[Hyp(n_others, bad, k) >= at_least], exactly (integer binomials, one rounding at the end).

    Devices compute their own parameters from the session size before every session, so this must be
    cheap and must not import scipy.stats (1.5 s of CPU on a device); the exact sum agrees with
    ``scipy.stats.hypergeom.logsf`` to 2e-11 relative and gives the same parameters.
    """
    if at_least <= 0:
        return 0.0
    top = min(k, bad)
    if at_least > top:
        return -math.inf
    num = sum(
        math.comb(bad, i) * math.comb(n_others - bad, k - i) for i in range(at_least, top + 1)
    )
    if num == 0:
        return -math.inf
    return math.log2(num) - math.log2(math.comb(n_others, k))


def _log2_disconnect(n: int, k: int, removed: int) -> float:
    """log2 of the union bound on P[survivors of a renamed HARARY(n, k) are disconnected]."""
    if k >= n - 1:
        return -math.inf
    h = k // 2
    if 2 * h > removed:
        return -math.inf
    j = np.arange(2 * h)
    log_q = float(np.sum(np.log2(removed - j) - np.log2(n - j)))
    return math.log2(n * (n - 1) / 2) + log_q


def _secure_against_malicious(n: int, k: int, t: int) -> bool:
    """Whether ``t`` gives any security against a malicious server: ``t >= 2`` and ``2t > k`` (or n = 2)."""
    return n <= 2 or (t >= 2 and 2 * t - k > 0)


def _bounds(
    n: int, k: int, t: int, n_corrupt: int, n_drop: int, threat_model: str
) -> tuple[float, float]:
    log_n = math.log2(n)
    need = t if threat_model == "semi-honest" else 2 * t - k
    sec_shares = log_n + _log2_sf(k, n_corrupt, n - 1, max(need, 0))
    if need <= 0:
        sec_shares = 0.0
    sec_graph = _log2_disconnect(n, k, n_corrupt + n_drop)
    security = max(sec_shares, sec_graph)
    correct = log_n + _log2_sf(k, n_drop, n - 1, k - t + 1)
    return security, correct


def _parameters(
    n: int,
    k: int,
    t: int,
    gamma: float,
    delta: float,
    sigma: float,
    eta: float,
    threat_model: str,
) -> SecAggParameters:
    """``(k, t)`` for ``n`` clients, with the failure bounds they achieve.

    The bounds are for ``floor(gamma n)`` corrupt and ``floor(delta n)`` dropped clients.
    """
    n_corrupt, n_drop = math.floor(gamma * n), math.floor(delta * n)
    sec, cor = _bounds(n, k, t, n_corrupt, n_drop, threat_model)
    return SecAggParameters(
        n=n,
        k=k,
        t=t,
        min_survivors=n - n_drop,
        corrupt_fraction=gamma,
        dropout_rate=delta,
        sigma=sigma,
        eta=eta,
        threat_model=threat_model,
        security_bound=sec,
        correctness_bound=cor,
    )


def validate_parameters(
    n: int,
    k: int,
    t: int,
    *,
    corrupt_fraction: float = 0.05,
    dropout_rate: float = 0.1,
    sigma: float = 40.0,
    eta: float = 30.0,
    threat_model: str = "malicious",
) -> SecAggParameters:
    """Check user-chosen ``k`` and ``t`` and report their failure bounds (without enforcing them).

    With ``threat_model="malicious"`` parameters without any security are refused: ``t < 2`` (unless
    ``n = 2``) or a pair whose share-secrecy bound is void (``2t - k <= 0``, e.g. ``k = 2, t = 1``).

    Raises
    ------
    ParameterError
        If ``k`` is not a valid Harary degree for ``n``, ``t`` is not in ``[1, k]``, or (malicious) the
        pair gives no security.
    """
    n, k, t, gamma, delta = _check_request(n, k, t, corrupt_fraction, dropout_rate, threat_model)
    if threat_model == "malicious" and not _secure_against_malicious(n, k, t):
        raise ParameterError(
            "t",
            t,
            f"an integer in [max(2, {k // 2 + 1}), {k}] for k={k} against a malicious server "
            "(smaller t lets the server reconstruct secrets from honest clients' answers)",
        )
    return _parameters(n, k, t, gamma, delta, float(sigma), float(eta), threat_model)


def find_parameters(
    n: int,
    *,
    corrupt_fraction: float = 0.05,
    dropout_rate: float = 0.1,
    sigma: float = 40.0,
    eta: float = 30.0,
    threat_model: str = "malicious",
) -> SecAggParameters:
    """Smallest graph degree ``k`` and, for it, smallest threshold ``t`` meeting the three conditions.

    Parameters
    ----------
    n : int
        Number of clients, >= 2.
    corrupt_fraction : float, default 0.05
        ``gamma`` in [0, 1): fraction of clients that may collude with the server.
    dropout_rate : float, default 0.1
        ``delta`` in [0, 1): fraction of clients that may drop out over the whole protocol. The server
        aborts when more drop out.
    sigma : float, default 40
        Statistical security parameter: the secrets and the honest sum stay hidden except with
        probability 2^-sigma.
    eta : float, default 30
        Correctness parameter: the protocol fails to unmask with probability at most 2^-eta.
    threat_model : {"malicious", "semi-malicious", "semi-honest"}, default "malicious"
        ``"semi-honest"``: needs ``t`` corrupt neighbours to break a client. ``"semi-malicious"`` and
        ``"malicious"``: ``2t - k`` (each honest neighbour reveals at most one of a neighbour's two
        secrets). Only ``"malicious"`` runs the protocol that enforces this against a deviating server
        (signed keys, pinned parameters, consistency check); :data:`STOPPED_BY` lists exactly which
        attacks each model stops: semi-honest and semi-malicious stop parameter tampering, double
        reveals, fail-open unmasking, bad shares, low-order keys, oversized messages and retained
        secrets; malicious also stops inconsistent dropout claims, graph choice, key substitution and
        fake clients, replayed or forged messages and weak user parameters.

    Returns
    -------
    SecAggParameters

    Raises
    ------
    ParameterError
        If no ``k <= n - 1`` meets the conditions (too many corrupt or dropped clients for ``n``).

    References
    ----------
    Bell, Bonawitz, Gascon, Lepoint, Raykova (2020). Secure single-server aggregation with
    (poly)logarithmic overhead. CCS. Sec. 3.3 and 4 (graph and parameter choice), Alg. 2.
    """
    n = check_int("clients", n, low=2)
    gamma = check_real("corrupt_fraction", corrupt_fraction, low=0.0, high=1.0, high_open=True)
    delta = check_real("dropout_rate", dropout_rate, low=0.0, high=1.0, high_open=True)
    sigma = check_real("sigma", sigma, low=1.0, high=256.0)
    eta = check_real("eta", eta, low=1.0, high=256.0)
    check_choice("threat_model", threat_model, THREAT_MODELS)
    return _find_parameters(n, gamma, delta, sigma, eta, threat_model)


R = TypeVar("R")


class SearchedOnce(Generic[R]):
    """A pure search remembered per argument set, and made once even when threads ask together.

    :func:`functools.lru_cache` alone lets every thread that asks while the first one computes compute
    too (the 250 simulated devices of a benchmark process reaching a session's setup together made 244
    searches of the same ``n``); a lock held around the cached call makes the others wait for the first
    and then read the cache. Used by :func:`find_parameters` and
    :func:`fedstats.secagg.collusion.session_parameters`.

    Parameters
    ----------
    fn : callable
        The search, a pure function of hashable positional arguments.
    maxsize : int, default 256
        Argument sets remembered (least recently used dropped first).
    """

    def __init__(self, fn: Callable[..., R], maxsize: int = 256) -> None:
        self._cached = functools.lru_cache(maxsize=maxsize)(fn)
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any) -> R:
        """``fn(*args)``, from the cache after its first call with these arguments."""
        with self._lock:
            return self._cached(*args)

    def cache_info(self) -> Any:
        """The cache's hits and misses (:meth:`functools.lru_cache` ``cache_info``)."""
        return self._cached.cache_info()

    def cache_clear(self) -> None:
        """Forget every remembered result."""
        self._cached.cache_clear()


@SearchedOnce
def _find_parameters(
    n: int, gamma: float, delta: float, sigma: float, eta: float, threat_model: str
) -> SecAggParameters:
    """:func:`find_parameters` on checked arguments, remembered.

    A pure function of them, about 30 ms at ``n = 1000``; every device of a session and the server ask
    for the same ``n`` (a device once per session; simulated devices in one process share the cache).
    Called under a lock (:func:`find_parameters`): ``lru_cache`` alone lets every thread that misses
    before the first result is stored run the search too (58 of 150 joins at n = 300 with 75 devices per
    process).
    """
    n_corrupt, n_drop = math.floor(gamma * n), math.floor(delta * n)
    candidates = [k for k in range(2, n - 1, 2)] + [n - 1]
    for k in candidates:
        params = _smallest_threshold(n, k, gamma, delta, sigma, eta, threat_model)
        if params is not None:
            return params
    raise ParameterError(
        "dropout_rate/corrupt_fraction",
        (delta, gamma),
        f"smaller fractions: no graph degree k <= {n - 1} keeps {n} clients secure (2^-{sigma:g}) "
        f"and correct (2^-{eta:g}) with {n_drop} dropouts and {n_corrupt} corrupt clients",
    )


def degree_parameters(
    n: int,
    k: int,
    *,
    corrupt_fraction: float = 0.05,
    dropout_rate: float = 0.1,
    sigma: float = 40.0,
    eta: float = 30.0,
    threat_model: str = "malicious",
) -> SecAggParameters | None:
    """The smallest threshold ``t`` that meets :func:`find_parameters`' three conditions at degree ``k``.

    :func:`find_parameters` searches the degrees from the smallest; this is one step of it, for a
    caller that wants a denser graph than the smallest that suffices
    (:func:`fedstats.secagg.collusion.session_parameters`).

    Parameters
    ----------
    n : int
        Number of clients, >= 2.
    k : int
        Graph degree: even in ``[2, n - 2]`` or ``n - 1`` (complete graph).
    corrupt_fraction, dropout_rate, sigma, eta, threat_model
        As in :func:`find_parameters`.

    Returns
    -------
    SecAggParameters or None
        None when no ``t`` in ``[1, k]`` meets them at this degree.

    Raises
    ------
    ParameterError
        If ``n`` or ``k`` is out of range.
    """
    n, k, _, gamma, delta = _check_request(n, k, None, corrupt_fraction, dropout_rate, threat_model)
    return _smallest_threshold(n, k, gamma, delta, float(sigma), float(eta), threat_model)


@overload
def _check_request(
    n: int, k: int, t: int, corrupt_fraction: float, dropout_rate: float, threat_model: str
) -> tuple[int, int, int, float, float]: ...


@overload
def _check_request(
    n: int, k: int, t: None, corrupt_fraction: float, dropout_rate: float, threat_model: str
) -> tuple[int, int, None, float, float]: ...


def _check_request(
    n: int,
    k: int,
    t: int | None,
    corrupt_fraction: float,
    dropout_rate: float,
    threat_model: str,
) -> tuple[int, int, int | None, float, float]:
    """Check a request at a given degree (:func:`validate_parameters`, :func:`degree_parameters`).

    Parameters
    ----------
    n, k : int
        Clients (>= 2) and a Harary degree for them (:func:`~fedstats.secagg.graph.check_degree`).
    t : int or None
        The threshold, in ``[1, k]``; None when the caller searches for it.
    corrupt_fraction, dropout_rate : float
        ``gamma`` and ``delta``, each in [0, 1).
    threat_model : str
        One of :data:`THREAT_MODELS`.

    Returns
    -------
    (int, int, int or None, float, float)
        ``(n, k, t, gamma, delta)``.

    Raises
    ------
    ParameterError
        Naming the first argument out of range, in the order of the parameters.
    """
    n = check_int("clients", n, low=2)
    k = check_int("k", k, low=1, high=n - 1)
    check_degree(n, k)
    if t is not None:
        t = check_int("t", t, low=1, high=k)
    gamma = check_real("corrupt_fraction", corrupt_fraction, low=0.0, high=1.0, high_open=True)
    delta = check_real("dropout_rate", dropout_rate, low=0.0, high=1.0, high_open=True)
    check_choice("threat_model", threat_model, THREAT_MODELS)
    return n, k, t, gamma, delta


def _smallest_threshold(
    n: int, k: int, gamma: float, delta: float, sigma: float, eta: float, threat_model: str
) -> SecAggParameters | None:
    """The smallest ``t`` meeting the three conditions at degree ``k``, on checked arguments.

    One step of :func:`find_parameters`' search, and all of :func:`degree_parameters`.

    Parameters
    ----------
    n, k : int
        Clients and graph degree, checked.
    gamma, delta, sigma, eta : float
        Corrupt fraction, dropout rate, security and correctness parameters, checked.
    threat_model : str
        One of :data:`THREAT_MODELS`.

    Returns
    -------
    SecAggParameters or None
        None when the graph may disconnect (probability above ``2^-sigma``) or no ``t`` in ``[1, k]``
        is both secure and correct.
    """
    if _log2_disconnect(n, k, math.floor(gamma * n) + math.floor(delta * n)) > -sigma:
        return None
    for t in range(1, k + 1):
        if threat_model == "malicious" and not _secure_against_malicious(n, k, t):
            continue
        params = _parameters(n, k, t, gamma, delta, sigma, eta, threat_model)
        if params.security_bound > -sigma:
            continue
        if params.correctness_bound > -eta:
            return None  # larger t only makes recovery harder
        return params
    return None


@dataclass(frozen=True)
class ClientConfig:
    """What a client knows about its task before talking to the server (it trusts nothing else).

    Attributes
    ----------
    n, k, t : int
        Clients, graph degree (even in ``[2, n - 2]`` or ``n - 1``), Shamir threshold in ``[1, k]``.
        Malicious model: ``t >= 2`` and ``2t > k`` unless ``n = 2``.
    bits : int
        Modulus width in {16, 32, 64}.
    length : int
        Vector length, >= 1.
    min_survivors : int
        Smallest survivor set the client accepts (malicious model), in ``[1, n]``.
    threat_model : str
        One of :data:`~fedstats.secagg.params.THREAT_MODELS`.
    identity : ClientIdentity, optional
        The client's long-term identity key (required in the malicious model).
    verifier : RosterVerifier, optional
        Checks the session roster (required in the malicious model), e.g.
        :class:`~fedstats.secagg.identity.AuthorityVerifier` with the pinned authority key.
    task_id : bytes
        The task the roster must name.

    Raises
    ------
    ParameterError
        If a value is out of range, or the malicious model lacks an identity or verifier.
    """

    n: int
    k: int
    t: int
    bits: int
    length: int
    min_survivors: int
    threat_model: str = "malicious"
    identity: ClientIdentity | None = None
    verifier: RosterVerifier | None = None
    task_id: bytes = b"fedstats"

    def __post_init__(self) -> None:
        if self.n < 2:
            raise ParameterError("n", self.n, "an integer >= 2")
        if not valid_degree(self.n, self.k):
            raise ParameterError(
                "k", self.k, f"an even integer in [2, {self.n - 2}] or {self.n - 1}"
            )
        if not 1 <= self.t <= self.k:
            raise ParameterError("t", self.t, f"an integer in [1, {self.k}]")
        check_bits(self.bits)
        if self.length < 1:
            raise ParameterError("length", self.length, "an integer >= 1")
        if not 1 <= self.min_survivors <= self.n:
            raise ParameterError(
                "min_survivors", self.min_survivors, f"an integer in [1, {self.n}]"
            )
        if self.threat_model not in THREAT_MODELS:
            raise ParameterError(
                "threat_model", self.threat_model, "one of " + ", ".join(THREAT_MODELS)
            )
        if self.threat_model == "malicious":
            if not _secure_against_malicious(self.n, self.k, self.t):
                raise ParameterError(
                    "t",
                    self.t,
                    f"an integer in [max(2, {self.k // 2 + 1}), {self.k}] (malicious server)",
                )
            if self.identity is None or self.verifier is None:
                raise ParameterError(
                    "identity/verifier",
                    None,
                    "an identity key and a roster verifier (malicious server)",
                )

    @classmethod
    def from_parameters(
        cls,
        params: SecAggParameters,
        *,
        bits: int,
        length: int,
        identity: ClientIdentity | None = None,
        verifier: RosterVerifier | None = None,
        task_id: bytes = b"fedstats",
    ) -> ClientConfig:
        """The configuration for a session with the given public parameters."""
        return cls(
            params.n,
            params.k,
            params.t,
            bits,
            length,
            params.min_survivors,
            params.threat_model,
            identity,
            verifier,
            task_id,
        )
