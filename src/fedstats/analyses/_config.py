"""The face of a deployable analysis: one frozen config, its wire form, its plan and its privacy loss.

Every analysis a task can name (:data:`fedstats.wire.registry.ANALYSES`) has one config class in its
package's ``config.py``, a frozen dataclass deriving from :class:`AnalysisConfig`:

* its fields are every option of the analysis with its **one** default, validated on construction
  (``__post_init__``; errors are :class:`~fedstats.errors.ParameterError` naming the option);
* :meth:`AnalysisConfig.from_params` builds it from a task's ``params`` object and privacy parameters
  (unknown keys are refused, naming them; errors name the option as ``params.<name>`` or
  ``privacy.<name>``), and :meth:`AnalysisConfig.to_params` gives the canonical ``params`` back
  (``from_params(to_params())`` returns an equal config);
* ``plan(*, n_clients, public_seed)`` is the protocol generator (yields each
  :class:`~fedstats.engine.rounds.Round`, receives its :class:`~fedstats.engine.rounds.RoundSum`, returns
  the :class:`~fedstats.results.AnalysisResult`), deterministic given its arguments: every public choice is
  keyed by the run's 32-byte ``public_seed`` (:func:`plan_randomness`), never by a server secret, so a
  device replays it from the public sums and a restarted server from its journal;
* ``privacy_loss()`` is the privacy loss of one run on each record
  (:class:`~fedstats.privacy.analysis.loss.PrivacyLoss`: epsilon, delta and rho where the mechanism gives
  one), the one number the library's ledger, the server's ledger and the device's budget charge.
  :data:`NOT_PRIVATE` (infinite epsilon) marks analyses that release exact sums.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from fedstats.engine.core import ProtocolGenerator
from fedstats.errors import ParameterError
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.randomness import RandomSource
from fedstats.results import AnalysisResult

__all__ = [
    "NOT_PRIVATE",
    "PLAN_DOMAIN",
    "AnalysisConfig",
    "ExactSumsConfig",
    "check_columns",
    "check_public_seed",
    "plan_randomness",
]

NOT_PRIVATE = PrivacyLoss(math.inf, 1.0, None)
"""The loss of an analysis that releases exact sums: no differential privacy (infinite epsilon)."""

PLAN_DOMAIN = b"fedstats/plan/v1"
"""Domain separator of the plan's public randomness (:func:`plan_randomness`)."""


def check_public_seed(public_seed: Any) -> bytes:
    """Return ``public_seed`` if it is 32 bytes.

    Raises
    ------
    ParameterError
        Naming ``public_seed`` otherwise.
    """
    if not isinstance(public_seed, bytes) or len(public_seed) != 32:
        raise ParameterError("public_seed", public_seed, "the run's 32-byte public seed")
    return public_seed


def check_columns(**columns: Any) -> None:
    """Refuse a column name that is not a non-empty string (named).

    Parameters
    ----------
    **columns : str
        Option name -> the column name given for it (e.g. ``x="age"``).

    Raises
    ------
    ParameterError
        Naming the first such option.
    """
    for name, value in columns.items():
        if not isinstance(value, str) or not value:
            raise ParameterError(name, value, "a non-empty column name")


def plan_randomness(public_seed: bytes) -> RandomSource:
    """The public randomness of a plan: a :class:`RandomSource` keyed by the run's public seed only.

    Parameters
    ----------
    public_seed : bytes
        The run's 32-byte public seed (the verified commit-reveal seed of a secure run, the server's stated
        seed of a plain run).

    Returns
    -------
    RandomSource
        Keyed by ``SHA-256(PLAN_DOMAIN || public_seed)``: anyone holding the seed derives the same public
        choices (bit pushing's allocation seed, ...). Never use it for a secret (noise, coins).

    Raises
    ------
    ParameterError
        If ``public_seed`` is not 32 bytes.
    """
    seed = check_public_seed(public_seed)
    return RandomSource(None, _master=hashlib.sha256(PLAN_DOMAIN + seed).digest())


def _wire(value: Any) -> Any:
    """A field value in its JSON form (tuples become lists)."""
    if isinstance(value, tuple):
        return [_wire(v) for v in value]
    return value


def _unwire(value: Any) -> Any:
    """A JSON value as a field value (lists become tuples, so configs stay hashable)."""
    if isinstance(value, list):
        return tuple(_unwire(v) for v in value)
    return value


class AnalysisConfig(ABC):
    """Mixin of the analyses' frozen config dataclasses (see the module docstring).

    A subclass is an :class:`~fedstats.wire.registry.AnalysisFace` (what the server and the device
    meet an analysis through): it defines :meth:`plan` and :meth:`privacy_loss`.

    Class attributes
    ----------------
    PRIVACY : {"none", "local", "distributed"}
        Which privacy parameters the config holds: none (``epsilon`` must be null), ``epsilon`` (local DP,
        delta 0), or ``epsilon`` and ``delta``.
    TASK_FIXED : tuple of str
        Fields a task cannot set (the deployment's trust model fixes them; see the subclass).
    TASK_REQUIRED : tuple of str
        Fields with a library default (None: read from the data) that a task must give.
    """

    PRIVACY: ClassVar[str] = "none"
    TASK_FIXED: ClassVar[tuple[str, ...]] = ()
    TASK_REQUIRED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """The keys a task's ``params`` may hold, in field order."""
        skip = {"epsilon", "delta", *cls.TASK_FIXED}
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in skip)  # type: ignore[arg-type]

    @classmethod
    def _required(cls) -> tuple[str, ...]:
        return tuple(
            f.name
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )

    @classmethod
    def _privacy_kwargs(cls, epsilon: Any, delta: Any) -> dict[str, Any]:
        if cls.PRIVACY == "none":
            if epsilon is not None:
                raise ParameterError(
                    "privacy.epsilon", epsilon, "null (the analysis is not private)"
                )
            if delta not in (None, 0, 0.0):
                raise ParameterError("privacy.delta", delta, "null (the analysis is not private)")
            return {}
        if cls.PRIVACY == "local":
            if delta not in (None, 0, 0.0):
                raise ParameterError("privacy.delta", delta, "0 or null (pure local DP)")
            return {"epsilon": epsilon}
        return {"epsilon": epsilon, "delta": delta}

    @classmethod
    def _task_fixed(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Values of :attr:`TASK_FIXED` fields given the others (subclasses override)."""
        del kwargs
        return {}

    @classmethod
    def from_params(
        cls, params: Mapping[str, Any], *, epsilon: Any = None, delta: Any = None
    ) -> Self:
        """Build and validate the config of a task's ``params`` and privacy parameters.

        Parameters
        ----------
        params : Mapping
            The task's ``params`` object (JSON values; lists stand for tuples).
        epsilon, delta : float or None
            The task's ``privacy.epsilon`` and ``privacy.delta``.

        Returns
        -------
        AnalysisConfig
            The validated config.

        Raises
        ------
        ParameterError
            Naming the unknown keys (``params``), a missing required option or an option out of range
            (``params.<name>``, ``privacy.epsilon``, ``privacy.delta``).
        """
        if not isinstance(params, Mapping):
            raise ParameterError("params", params, "an object")
        names = cls.param_names()
        unknown = sorted(str(k) for k in params if k not in names)
        if unknown:
            raise ParameterError("params", unknown, f"keys among {list(names)}")
        required = (*cls._required(), *cls.TASK_REQUIRED)
        # a required option given as null is missing too (a task cannot leave it to the data)
        missing = [n for n in required if n in names and params.get(n) is None]
        if missing:
            raise ParameterError(f"params.{missing[0]}", None, "a value (required)")
        kwargs: dict[str, Any] = {str(k): _unwire(v) for k, v in params.items()}
        kwargs.update(cls._privacy_kwargs(epsilon, delta))
        kwargs.update(cls._task_fixed(kwargs))
        try:
            return cls(**kwargs)
        except ParameterError as exc:
            name = str(exc.name)
            if name.startswith(("params", "privacy")):
                raise
            prefix = "privacy." if name.split("/")[0] in ("epsilon", "delta") else "params."
            raise ParameterError(prefix + name, exc.value, exc.accepted) from None
        except TypeError as exc:  # a value of the wrong type reaching a comparison
            raise ParameterError("params", dict(params), f"valid option values ({exc})") from None

    def to_params(self) -> dict[str, Any]:
        """The canonical ``params`` object of this config: every option, defaults included.

        Returns
        -------
        dict
            JSON values (tuples as lists); ``type(self).from_params(self.to_params(), epsilon=...,
            delta=...)`` equals ``self``.
        """
        return {n: _wire(getattr(self, n)) for n in self.param_names()}

    def privacy_parameters(self) -> dict[str, Any]:
        """The task's ``privacy`` values of this config: ``{"epsilon", "delta"}``."""
        if self.PRIVACY == "none":
            return {"epsilon": None, "delta": None}
        eps = getattr(self, "epsilon", None)
        if self.PRIVACY == "local":
            return {"epsilon": eps, "delta": 0.0 if eps is not None else None}
        return {"epsilon": eps, "delta": getattr(self, "delta", None)}

    @abstractmethod
    def plan(self, *, n_clients: int, public_seed: bytes) -> ProtocolGenerator[AnalysisResult]:
        """The protocol generator of one run (see the module docstring); every subclass defines it.

        Parameters
        ----------
        n_clients : int
            Records in the run's cohort, >= 1.
        public_seed : bytes
            The run's 32-byte public seed: every public choice of the plan is keyed by it.

        Returns
        -------
        ProtocolGenerator[AnalysisResult]
            Yields each :class:`~fedstats.engine.rounds.Round`, receives its
            :class:`~fedstats.engine.rounds.RoundSum`, returns the result.
        """

    @abstractmethod
    def privacy_loss(self) -> PrivacyLoss:
        """The privacy loss of one run on each record (see the module docstring); every subclass defines it.

        Returns
        -------
        PrivacyLoss
            epsilon, delta and rho where the mechanism gives one; :data:`NOT_PRIVATE` for exact sums.
        """


class ExactSumsConfig(AnalysisConfig):
    """Base of the configs of analyses that release exact sums over secure aggregation (no DP).

    ``PRIVACY`` keeps :class:`AnalysisConfig`'s ``"none"`` (a task's ``privacy.epsilon`` must be null) and
    :meth:`privacy_loss` is :data:`NOT_PRIVATE`.
    """

    def privacy_loss(self) -> PrivacyLoss:
        """Not private: exact sums are released (infinite epsilon, delta 1)."""
        return NOT_PRIVATE
