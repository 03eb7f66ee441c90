"""The analyses a deployment can run: the one place that names concrete analysis code.

A task names an analysis and its version (``"bitpushing-mean"``, ``1``). Both sides look it up here and
meet the analysis only through its one face (:mod:`fedstats.analyses._config`):

* :func:`config_for` builds the analysis's frozen config from the task's ``params`` and ``privacy``
  (validated; errors name the option);
* :func:`plan_for` is the plan of the task's rounds, a protocol generator deterministic given the task, the
  cohort size and the run's public seed: the **server** drives it, a restarted server replays it from its
  journal, and a **device** replays it with the public sums to derive each round it is asked to answer;
* :func:`privacy_loss_for` is the privacy loss of one run on each record, the one number the library's
  ledger, the server's ledger and the device's budget charge;
* a **client** runs only an encoder listed in its *installed* registry for that analysis version
  (:func:`resolve_encoder`): no code is ever shipped, a round names its encoder as ``"module:qualname"``
  and a client refuses any name not listed here.

Every reference is a ``"module:qualname"`` string imported on first use, so importing this module imports
no analysis (the client stays light). Adding an analysis to the service is one line in :data:`_SPECS`
naming its config class and encoders (``docs/architecture.md``, "Adding an analysis").
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

from fedstats.errors import ParameterError, SecurityError
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.results import AnalysisResult

__all__ = [
    "ANALYSES",
    "AnalysisFace",
    "AnalysisSpec",
    "PlanGenerator",
    "config_for",
    "encoder_name",
    "lookup",
    "plan_for",
    "privacy_loss_for",
    "resolve",
    "resolve_encoder",
]


PlanGenerator = Generator[Any, Any, AnalysisResult]
"""A plan: yields each round (an engine :class:`~fedstats.engine.rounds.Round`), receives its sum (a
:class:`~fedstats.engine.rounds.RoundSum`), returns the :class:`~fedstats.results.AnalysisResult`. The
round types are the engine's, which sits above the wire layer: the analyses' own annotation is the
precise :data:`~fedstats.engine.core.ProtocolGenerator`."""


@runtime_checkable
class AnalysisFace(Protocol):
    """The one face of an analysis: what the server, the device and the library meet it through.

    Every registered config class (an :class:`~fedstats.analyses._config.AnalysisConfig`) has it: built
    and validated from a task's ``params`` and privacy, given back in canonical form, planned, and
    charged.
    """

    PRIVACY: ClassVar[str]

    @classmethod
    def from_params(
        cls, params: Mapping[str, Any], *, epsilon: Any = None, delta: Any = None
    ) -> Self:
        """Build and validate the config of a task's ``params`` and privacy parameters."""
        ...

    def to_params(self) -> dict[str, Any]:
        """The canonical ``params`` object of the config (every option, defaults included)."""
        ...

    def privacy_parameters(self) -> dict[str, Any]:
        """The task's ``privacy`` values of the config: ``{"epsilon", "delta"}``."""
        ...

    def plan(self, *, n_clients: int, public_seed: bytes) -> PlanGenerator:
        """The plan of one run: deterministic given the config, the cohort size and the public seed."""
        ...

    def privacy_loss(self) -> PrivacyLoss:
        """The privacy loss of one run on each record: epsilon, delta and rho where there is one."""
        ...


@dataclass(frozen=True)
class AnalysisSpec:
    """One registered analysis version.

    Attributes
    ----------
    name : str
        Analysis name as tasks spell it.
    version : int
        Version >= 1; an incompatible change of encoders or parameters gets a new version.
    config : str
        ``"module:qualname"`` of the analysis's config class (an
        :class:`~fedstats.analyses._config.AnalysisConfig`: ``from_params``, ``plan``, ``privacy_loss``).
    encoders : frozenset of str
        ``"module:qualname"`` of every client encoder its rounds may name.
    privacy : {"none", "local", "distributed"}
        ``"local"``: each report is epsilon-DP on its own; ``"distributed"``: each report carries a noise
        share and only the sum is (epsilon, delta)-DP; ``"none"``: exact, not private.
    bits : str or None
        Parameter holding the private bits each record discloses (bit metering), if the analysis meters
        bits; None when a report is a full value (non-private) or a noisy value.
    secure : {"optional", "required"}
        ``"required"``: tasks must set ``secure_aggregation`` (the analysis's reports are private only
        under it; its plan keys its projections by the run's agreed ``public_seed``).
    """

    name: str
    version: int
    config: str
    encoders: frozenset[str]
    privacy: str
    bits: str | None = None
    secure: str = "optional"

    def bits_per_record(self, params: Mapping[str, Any]) -> float | None:
        """Private bits one record discloses under ``params`` (None: not metered; inf: exact values)."""
        if self.privacy == "none":
            return math.inf
        if self.bits is None:
            return None
        return float(params.get(self.bits, 1))


_EXACT = "fedstats.analyses.exact"
_BP = "fedstats.analyses.bitpushing"
_GAP = "fedstats.analyses.performance_gap"
_HET = "fedstats.analyses.heterogeneity"
_CHI2 = "fedstats.analyses.chi2"
_ENT = "fedstats.analyses.entropy"

_SPECS = (
    AnalysisSpec(
        "exact-mean",
        1,
        f"{_EXACT}.config:ExactMeanConfig",
        frozenset({f"{_EXACT}.client:encode_value"}),
        "none",
    ),
    AnalysisSpec(
        "bitpushing-mean",
        1,
        f"{_BP}.config:BitPushingMeanConfig",
        frozenset({f"{_BP}.client:encode_bits"}),
        "local",
        bits="bits_per_client",
    ),
    AnalysisSpec(
        "bitpushing-variance",
        1,
        f"{_BP}.config:BitPushingVarianceConfig",
        frozenset({f"{_BP}.client:encode_bits"}),
        "local",
        bits="bits_per_client",
    ),
    AnalysisSpec(
        "performance-gap",
        1,
        f"{_GAP}.config:PerformanceGapConfig",
        frozenset({f"{_GAP}.client:encode_gap_report"}),
        "local",
    ),
    AnalysisSpec(
        "heterogeneity",
        1,
        f"{_HET}.config:HeterogeneityConfig",
        frozenset({f"{_HET}.client:encode_centre", f"{_HET}.client:encode_spread"}),
        "distributed",
    ),
    AnalysisSpec(
        "fed-chi2",
        1,
        f"{_CHI2}.config:FedChi2Config",
        frozenset({f"{_CHI2}.client:encode_marginals", f"{_CHI2}.client:encode_projection"}),
        "none",
        secure="required",
    ),
    AnalysisSpec(
        "fed-entropy",
        1,
        f"{_ENT}.config:FedEntropyConfig",
        frozenset(
            {f"{_ENT}.client:encode_histogram_size", f"{_ENT}.client:encode_entropy_projection"}
        ),
        "none",
        secure="required",
    ),
    AnalysisSpec(
        "g-test",
        1,
        f"{_ENT}.config:GTestConfig",
        frozenset({f"{_CHI2}.client:encode_marginals", f"{_ENT}.client:encode_entropy_projection"}),
        "none",
        secure="required",
    ),
)
ANALYSES: dict[tuple[str, int], AnalysisSpec] = {(s.name, s.version): s for s in _SPECS}
"""Every installed analysis version, by (name, version)."""


def lookup(name: str, version: int) -> AnalysisSpec:
    """The registered analysis ``name`` version ``version``.

    Raises
    ------
    ParameterError
        If no such analysis version is registered.
    """
    spec = ANALYSES.get((str(name), int(version)))
    if spec is None:
        known = ", ".join(f"{n} v{v}" for n, v in sorted(ANALYSES))
        raise ParameterError("analysis", f"{name} v{version}", f"one of: {known}")
    return spec


def resolve(ref: str) -> Any:
    """Import ``"module:qualname"`` and return the object."""
    module, _, qual = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def encoder_name(fn: Callable[..., Any]) -> str:
    """``"module:qualname"`` of a module-level encoder function."""
    return f"{fn.__module__}:{fn.__qualname__}"


def resolve_encoder(ref: str, name: str, version: int) -> Callable[..., Any]:
    """The installed encoder ``ref`` of analysis ``name`` v``version``, or refuse.

    Raises
    ------
    SecurityError
        If ``ref`` is not one of the encoders registered for that analysis version (a client never runs
        code it was not installed with for that purpose).
    ParameterError
        If the analysis version is unknown.
    """
    spec = lookup(name, version)
    if ref not in spec.encoders:
        raise SecurityError(
            f"encoder {ref!r} is not registered for analysis {name} v{version}; refusing to run it"
        )
    fn: Callable[..., Any] = resolve(ref)
    return fn


def config_for(task: Mapping[str, Any]) -> AnalysisFace:
    """The analysis's validated configuration of a normalized ``task`` (its params and privacy).

    Parameters
    ----------
    task : Mapping
        With ``analysis``, ``version``, ``params`` and ``privacy`` (``epsilon``, ``delta``; ``population``
        is not the analysis's business).

    Returns
    -------
    AnalysisFace
        The frozen config of the analysis (e.g. :class:`~fedstats.analyses.heterogeneity.config.
        HeterogeneityConfig`).

    Raises
    ------
    ParameterError
        If the analysis is unknown, a key is unknown, or an option is out of range (the error names it:
        ``params.<name>``, ``privacy.epsilon``, ...).
    """
    spec = lookup(str(task["analysis"]), int(task.get("version", 1)))
    privacy = task.get("privacy") or {}
    if not isinstance(privacy, Mapping):
        raise ParameterError("privacy", privacy, "an object {epsilon, delta, population}")
    cls: type[AnalysisFace] = resolve(spec.config)
    return cls.from_params(
        task.get("params") or {}, epsilon=privacy.get("epsilon"), delta=privacy.get("delta")
    )


def plan_for(task: Mapping[str, Any], *, n_clients: int, public_seed: bytes) -> PlanGenerator:
    """The plan of ``task``'s rounds: a protocol generator that yields each round and receives its sum.

    Deterministic given ``(task, n_clients, public_seed)`` and using no server secret: a device replays it
    with the public sums it is shown to derive every round's encoder and public parameters itself, and a
    restarted server replays it from its journal. ``public_seed`` (32 bytes) is the run's public seed: the
    verified commit-reveal seed of a secure run, the server's stated seed of a plain run (it shapes only
    public choices, such as which records report which bit, never a device's privacy).

    Parameters
    ----------
    task : Mapping
        A normalized task (see :func:`config_for`).
    n_clients : int
        Records in the run's cohort, >= 1.
    public_seed : bytes
        The run's 32-byte public seed.

    Returns
    -------
    PlanGenerator
        Yields :class:`~fedstats.engine.rounds.Round`, receives
        :class:`~fedstats.engine.rounds.RoundSum`, returns the :class:`~fedstats.results.AnalysisResult`.

    Raises
    ------
    ParameterError
        If the analysis is unknown, an option is out of range, or the seed is not 32 bytes.
    """
    if not isinstance(public_seed, bytes) or len(public_seed) != 32:
        raise ParameterError("public_seed", public_seed, "32 bytes")
    return config_for(task).plan(n_clients=int(n_clients), public_seed=public_seed)


def privacy_loss_for(task: Mapping[str, Any]) -> PrivacyLoss:
    """The privacy loss of one run of ``task`` on each record: a :class:`~fedstats.privacy.PrivacyLoss`.

    The one arithmetic of the library's ledger, the server's ledger and the device's budget: each charges
    this (epsilon, delta, rho) and composes charges the way :class:`fedstats.privacy.ledger.PrivacyLedger`
    does. It is the analysis's true loss computed from its config (e.g. the performance gap's mechanism
    loss, heterogeneity's two Gaussian rounds composed in zCDP); an analysis releasing exact sums returns
    ``PrivacyLoss(inf, 1.0, None)`` (not private: both ledgers treat it as non-private).

    Raises
    ------
    ParameterError
        If the analysis is unknown or an option is out of range.
    """
    return config_for(task).privacy_loss()
