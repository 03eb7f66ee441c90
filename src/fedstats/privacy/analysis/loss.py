r"""Worst-case privacy loss of a mechanism computed from its output distribution.

fedstats does not trust a theorem's epsilon: every local mechanism's loss is computed from the probabilities
(or densities) of its outputs, :math:`\varepsilon = \max_{x, x', o} |\log p(o \mid x) - \log p(o \mid x')|`.

* :func:`discrete_privacy_loss` is exact for finitely many inputs and outputs (give it every input, or
  the extreme ones when the probabilities are monotone or linear in the input).
* :func:`continuous_privacy_loss` and :func:`mixed_privacy_loss` evaluate log densities on a grid of
  outputs; they are *numerical checks* (the supremum over a grid is a lower bound on the true supremum,
  equal to it when the grid contains the maximising points, e.g. every piece of a piecewise-constant density
  or the tails of a Laplace density).

An output that some input can produce and another cannot gives an infinite loss.

Examples
--------
>>> import numpy as np
>>> p = np.exp(1.0) / (1 + np.exp(1.0))
>>> round(discrete_privacy_loss([[p, 1 - p], [1 - p, p]]), 12)
1.0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fedstats._validation import check_choice, check_int, check_real
from fedstats.errors import DataError, ParameterError

__all__ = [
    "PLD_MECHANISMS",
    "MechanismSpec",
    "PrivacyLoss",
    "continuous_privacy_loss",
    "discrete_privacy_loss",
    "mixed_privacy_loss",
    "randomized_response_specs",
]


PLD_MECHANISMS: tuple[str, ...] = (
    "randomized_response",
    "laplace",
    "gaussian",
    "discrete_laplace",
    "discrete_gaussian",
)
_DISCRETE = ("discrete_laplace", "discrete_gaussian")


@dataclass(frozen=True)
class MechanismSpec:
    r"""What one release did, in enough detail for its privacy loss distribution (:mod:`.pld`).

    A release that carries these descriptions can be composed exactly (privacy loss distributions,
    :func:`fedstats.privacy.analysis.pld.pld_epsilon`) instead of by adding epsilons.

    Parameters
    ----------
    kind : {"randomized_response", "laplace", "gaussian", "discrete_laplace", "discrete_gaussian"}
        The mechanism. Randomized response is k-ary (generalized) randomized response under replace-one
        neighbours (the true category with probability :math:`e^\varepsilon/(e^\varepsilon+k-1)`, each
        other one with :math:`1/(e^\varepsilon+k-1)`); the noise mechanisms add noise to a sum with the
        given sensitivity (add/remove neighbours).
    parameter : float
        ``randomized_response``: its epsilon, in (0, 50]; ``laplace``: the scale b, in (0, inf);
        ``gaussian``: the standard deviation sigma, in (0, inf); ``discrete_laplace``: the decay a of
        :math:`P(k) \propto e^{-a|k|}`, in (0, 50]; ``discrete_gaussian``: sigma of
        :math:`P(k) \propto e^{-k^2/(2\sigma^2)}`, in (0, 1e6].
    sensitivity : float, default 1.0
        L1 (Laplace) or L2 (Gaussian) sensitivity of the sum, in (0, inf); an integer in [1, 1000] for the
        discrete mechanisms; must be 1 for randomized response.
    categories : int, default 2
        Randomized response's number of categories k, in [2, 10^6]; 2 for the other mechanisms.
    sampling_rate : float, default 1.0
        Probability q in (0, 1] that the record takes part (Poisson subsampling). For the noise mechanisms
        the sample is secret (the standard amplification, add/remove neighbours); for randomized response
        a record that is not sampled sends nothing.

    Raises
    ------
    ParameterError
        If a field is outside its range.
    """

    kind: str
    parameter: float
    sensitivity: float = 1.0
    categories: int = 2
    sampling_rate: float = 1.0

    def __post_init__(self) -> None:
        """Validate the fields (see the class docstring)."""
        check_choice("kind", self.kind, PLD_MECHANISMS)
        high = 50.0 if self.kind in ("randomized_response", "discrete_laplace") else math.inf
        if self.kind == "discrete_gaussian":
            high = 1e6
        check_real(
            "parameter",
            self.parameter,
            low=0.0,
            high=high,
            low_open=True,
            high_open=math.isinf(high),
        )
        if self.kind in _DISCRETE:
            sens = check_real("sensitivity", self.sensitivity, low=1.0, high=1000.0)
            if not sens.is_integer():
                raise ParameterError("sensitivity", self.sensitivity, "an integer in [1, 1000]")
        elif self.kind == "randomized_response":
            check_real("sensitivity", self.sensitivity, low=1.0, high=1.0)
        else:
            check_real(
                "sensitivity",
                self.sensitivity,
                low=0.0,
                high=math.inf,
                low_open=True,
                high_open=True,
            )
        if self.kind == "randomized_response":
            check_int("categories", self.categories, low=2, high=10**6)
        else:
            check_int("categories", self.categories, low=2, high=2)
        check_real("sampling_rate", self.sampling_rate, low=0.0, high=1.0, low_open=True)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict of the fields (:meth:`from_dict` reads it back)."""
        return {
            "kind": self.kind,
            "parameter": float(self.parameter),
            "sensitivity": float(self.sensitivity),
            "categories": int(self.categories),
            "sampling_rate": float(self.sampling_rate),
        }

    @classmethod
    def from_dict(cls, data: Any) -> MechanismSpec:
        """Read :meth:`as_dict`'s form.

        Raises
        ------
        ParameterError
            If ``data`` is not such a dict or a field is out of range.
        """
        if not isinstance(data, dict) or "kind" not in data or "parameter" not in data:
            raise ParameterError("mechanism", data, "a dict with 'kind' and 'parameter'")
        return cls(
            kind=data["kind"],
            parameter=data["parameter"],
            sensitivity=data.get("sensitivity", 1.0),
            categories=data.get("categories", 2),
            sampling_rate=data.get("sampling_rate", 1.0),
        )


def randomized_response_specs(epsilon: float, categories: int = 2) -> tuple[MechanismSpec, ...]:
    r"""Randomized response at ``epsilon`` as a :class:`MechanismSpec`, or ``()`` where none describes it.

    Binary randomized response :math:`RR(\varepsilon)` dominates every pure :math:`\varepsilon`-DP
    mechanism (Kairouz, Oh & Viswanath 2015, Thm. 2.2: its privacy region contains every other), so it is
    also the description of a mechanism with two outputs whose extreme inputs give exactly this matrix
    (Duchi's and the Harmony mechanism).

    Parameters
    ----------
    epsilon : float
        The mechanism's epsilon, >= 0.
    categories : int, default 2
        k of k-ary randomized response.

    Returns
    -------
    tuple of MechanismSpec
        One spec; ``()`` when epsilon is 0, not finite or above 50, or k above 10^6.
    """
    if not (0.0 < epsilon <= 50.0) or not 2 <= categories <= 10**6:
        return ()
    return (MechanismSpec("randomized_response", float(epsilon), categories=int(categories)),)


@dataclass(frozen=True)
class PrivacyLoss:
    """The privacy a mechanism (or a sequence of releases) costs.

    Attributes
    ----------
    epsilon : float
        In [0, inf]; inf means "not differentially private" (e.g. a deterministic quantiser).
    delta : float
        In [0, 1].
    rho : float or None
        zCDP parameter when the mechanism is Gaussian (continuous or discrete), else None.
    mechanisms : tuple of MechanismSpec
        The releases this loss is made of, when each is described exactly enough for its privacy loss
        distribution; ``()`` (default) when they are not, and the ledgers then compose it by basic
        composition and zCDP only.
    """

    epsilon: float
    delta: float = 0.0
    rho: float | None = None
    mechanisms: tuple[MechanismSpec, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict ``{"epsilon", "delta", "rho"}`` (and ``"mechanisms"`` when described)."""
        out: dict[str, Any] = {"epsilon": self.epsilon, "delta": self.delta, "rho": self.rho}
        if self.mechanisms:
            out["mechanisms"] = [m.as_dict() for m in self.mechanisms]
        return out


def _range_over_inputs(logp: np.ndarray) -> float:
    """Max over columns of (max - min over rows) of a log-probability matrix; -inf entries handled."""
    finite = np.isfinite(logp)
    any_pos = finite.any(axis=0)
    all_pos = finite.all(axis=0)
    if bool((any_pos & ~all_pos).any()):
        return math.inf
    cols = logp[:, all_pos]
    if cols.size == 0:
        return 0.0
    return float(np.max(cols.max(axis=0) - cols.min(axis=0)))


def discrete_privacy_loss(probabilities: ArrayLike, *, log_space: bool = False) -> float:
    r"""Exact worst-case epsilon of a mechanism with finitely many inputs and outputs.

    Parameters
    ----------
    probabilities : array_like, shape (n_inputs, n_outputs)
        Row ``i`` is the output distribution for input ``i``: non-negative, summing to 1 (within 1e-9),
        or log-probabilities (``-inf`` for impossible outputs) when ``log_space``.
    log_space : bool, default False
        Interpret ``probabilities`` as natural logarithms (avoids underflow for large epsilon).

    Returns
    -------
    float
        :math:`\max_{i, j, o} |\log p_{io} - \log p_{jo}|`, in [0, inf]; inf when the supports differ.

    Raises
    ------
    DataError
        If the matrix is not 2-D with at least two rows, has NaN, negative entries, or rows not summing to 1.
    """
    arr = np.asarray(probabilities, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise DataError(
            f"probabilities must be a 2-D (n_inputs, n_outputs) array, got shape {arr.shape}"
        )
    if np.isnan(arr).any():
        raise DataError("probabilities has a NaN entry")
    if log_space:
        if (arr > 1e-12).any():
            raise DataError("log-probabilities must be <= 0")
        logp = arr
        sums = np.exp(logp).sum(axis=1)
    else:
        if (arr < 0).any() or np.isinf(arr).any():
            raise DataError("probabilities must be finite and non-negative")
        sums = arr.sum(axis=1)
        with np.errstate(divide="ignore"):
            logp = np.log(arr)
    if not np.allclose(sums, 1.0, rtol=0.0, atol=1e-9):
        bad = int(np.argmax(np.abs(sums - 1.0)))
        raise DataError(f"row {bad} of probabilities sums to {sums[bad]!r}, not 1")
    return _range_over_inputs(logp)


def _log_density_rows(
    log_density: Callable[..., Any], inputs: Sequence[Any] | np.ndarray, *outputs: np.ndarray
) -> np.ndarray:
    rows = []
    for x in inputs:
        row = np.asarray(log_density(x, *outputs), dtype=np.float64)
        if row.shape != outputs[0].shape:
            raise DataError(
                f"log_density returned shape {row.shape}, expected {outputs[0].shape} (one per output)"
            )
        if np.isnan(row).any() or (row == np.inf).any():
            raise DataError("log_density returned NaN or +inf")
        rows.append(row)
    if len(rows) < 1:
        raise DataError("inputs is empty: at least one input is needed")
    return np.stack(rows)


def continuous_privacy_loss(
    log_density: Callable[[Any, np.ndarray], ArrayLike],
    inputs: Sequence[Any] | np.ndarray,
    outputs_grid: ArrayLike,
) -> float:
    r"""Worst-case log density ratio over ``inputs`` and a grid of continuous outputs (a numerical check).

    Parameters
    ----------
    log_density : callable ``(x, y) -> array``
        ``log_density(x, y)`` returns the log density of output ``y`` (a 1-D float64 array, the grid) for
        the single input ``x``, as an array shaped like ``y``; ``-inf`` where the density is 0.
    inputs : sequence
        The inputs to compare (any objects ``log_density`` accepts: scalars, tuples, vectors).
    outputs_grid : array_like, shape (m,)
        Output points. Include the points where the ratio is largest (boundaries of pieces, tails).

    Returns
    -------
    float
        :math:`\max_{x, x', y \in \text{grid}} \log f(y \mid x) - \log f(y \mid x')`, in [0, inf]; a lower
        bound on the true loss that is tight when the grid contains a maximiser.

    Raises
    ------
    DataError
        If the grid is empty or not finite, or ``log_density`` returns a wrongly shaped or NaN array.
    """
    grid = np.asarray(outputs_grid, dtype=np.float64).ravel()
    if grid.size == 0 or not np.isfinite(grid).all():
        raise DataError("outputs_grid must be a non-empty array of finite values")
    return _range_over_inputs(_log_density_rows(log_density, inputs, grid))


def mixed_privacy_loss(
    log_density: Callable[[Any, np.ndarray, np.ndarray], ArrayLike],
    inputs: Sequence[Any] | np.ndarray,
    discrete_outputs: Sequence[Any] | np.ndarray,
    continuous_grid: ArrayLike,
) -> float:
    r"""Worst-case loss for outputs that are a pair (discrete part, continuous part), e.g. (group, value).

    Parameters
    ----------
    log_density : callable ``(x, o, y) -> array``
        Log of P(discrete output o | x) times the density of y given (x, o). Called once per input with
        ``o`` and ``y`` two 1-D arrays of equal length ``n_discrete * m`` (the product grid, ``o`` varying
        slowest); returns an array of that length (``-inf`` where impossible).
    inputs : sequence
        Inputs to compare (e.g. ``[(g, v) for g in groups for v in (-1, 1)]``).
    discrete_outputs : sequence, shape (n_discrete,)
        All discrete output values (numbers).
    continuous_grid : array_like, shape (m,)
        Grid of the continuous output.

    Returns
    -------
    float
        Worst-case log ratio over inputs and the product grid, in [0, inf] (a numerical check, as for
        :func:`continuous_privacy_loss`).

    Raises
    ------
    DataError
        If a grid is empty or not finite, or ``log_density`` misbehaves.
    """
    grid = np.asarray(continuous_grid, dtype=np.float64).ravel()
    disc = np.asarray(discrete_outputs)
    if grid.size == 0 or not np.isfinite(grid).all():
        raise DataError("continuous_grid must be a non-empty array of finite values")
    if disc.size == 0:
        raise DataError("discrete_outputs is empty")
    o = np.repeat(disc.ravel(), grid.size)
    y = np.tile(grid, disc.size)
    return _range_over_inputs(_log_density_rows(log_density, inputs, o, y))
