"""The analyses a deployment can run: the one place that names concrete analysis code.

A task names an analysis and its version (``"bitpushing-mean"``, ``1``). Both sides look it up here:

* the **server** builds the protocol generator with the entry's ``factory`` from the task's parameters,
  its cohort size and its privacy budget (:func:`protocol_for`);
* a **client** runs only an encoder listed in its *installed* registry for that analysis version
  (:func:`resolve_encoder`): no code is ever shipped, a round names its encoder as ``"module:qualname"``
  and a client refuses any name not listed here.

Every reference is a ``"module:qualname"`` string imported on first use, so importing this module imports
no analysis (the client stays light) and the lead can repoint paths when analyses move.

Factories (:mod:`fedstats.service.factories`) have the signature ``factory(params, *, n_clients, epsilon, delta, randomness)`` and return a
:data:`~fedstats.engine.core.ProtocolGenerator` of an :class:`~fedstats.results.AnalysisResult`. They must be
deterministic given their arguments: a restarted server rebuilds a run by replaying the generator from the
journal, with ``randomness`` keyed by the run's stored secret (public seeds and server-side noise come from
it, never from fresh entropy).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fedstats.errors import ParameterError, SecurityError

__all__ = [
    "ANALYSES",
    "AnalysisSpec",
    "encoder_name",
    "lookup",
    "protocol_for",
    "resolve",
    "resolve_encoder",
]


@dataclass(frozen=True)
class AnalysisSpec:
    """One registered analysis version.

    Attributes
    ----------
    name : str
        Analysis name as tasks spell it.
    version : int
        Version >= 1; an incompatible change of encoders or parameters gets a new version.
    factory : str
        ``"module:qualname"`` of the server-side protocol factory (see module docstring).
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
        under it), and the factory receives the run's agreed ``public_seed`` (32 bytes).
    """

    name: str
    version: int
    factory: str
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


_EXACT = "fedstats.analyses.exact.client"
_BP = "fedstats.analyses.bitpushing.client"
_GAP = "fedstats.analyses.performance_gap.client"
_HET = "fedstats.analyses.heterogeneity.client"
_CHI2 = "fedstats.analyses.chi2.client"
_ENT = "fedstats.analyses.entropy.client"
_HERE = "fedstats.service.factories"

_SPECS = (
    AnalysisSpec(
        "exact-mean", 1, f"{_HERE}:_exact_mean", frozenset({f"{_EXACT}:encode_value"}), "none"
    ),
    AnalysisSpec(
        "bitpushing-mean",
        1,
        f"{_HERE}:_bitpushing_mean",
        frozenset({f"{_BP}:encode_bits"}),
        "local",
        bits="bits_per_client",
    ),
    AnalysisSpec(
        "bitpushing-variance",
        1,
        f"{_HERE}:_bitpushing_variance",
        frozenset({f"{_BP}:encode_bits"}),
        "local",
        bits="bits_per_client",
    ),
    AnalysisSpec(
        "performance-gap",
        1,
        f"{_HERE}:_performance_gap",
        frozenset({f"{_GAP}:encode_gap_report"}),
        "local",
    ),
    AnalysisSpec(
        "heterogeneity",
        1,
        f"{_HERE}:_heterogeneity",
        frozenset({f"{_HET}:encode_centre", f"{_HET}:encode_spread"}),
        "distributed",
    ),
    AnalysisSpec(
        "fed-chi2",
        1,
        f"{_HERE}:_fed_chi2",
        frozenset({f"{_CHI2}:encode_marginals", f"{_CHI2}:encode_projection"}),
        "none",
        secure="required",
    ),
    AnalysisSpec(
        "fed-entropy",
        1,
        f"{_HERE}:_fed_entropy",
        frozenset({f"{_ENT}:encode_histogram_size", f"{_ENT}:encode_entropy_projection"}),
        "none",
        secure="required",
    ),
    AnalysisSpec(
        "g-test",
        1,
        f"{_HERE}:_g_test",
        frozenset({f"{_CHI2}:encode_marginals", f"{_ENT}:encode_entropy_projection"}),
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


def protocol_for(
    name: str,
    version: int,
    params: Mapping[str, Any],
    *,
    n_clients: int,
    epsilon: float | None,
    delta: float | None,
    randomness: Any,
    public_seed: bytes | None = None,
) -> Any:
    """The server-side protocol generator of a task (see module docstring).

    ``public_seed`` is the run's agreed seed (:mod:`fedstats.wire.seeding`), given to the factories of
    analyses that require secure aggregation.

    Raises
    ------
    ParameterError
        If the analysis is unknown or a parameter is invalid.
    """
    spec = lookup(name, version)
    factory: Callable[..., Any] = resolve(spec.factory)
    extra: dict[str, Any] = {}
    if spec.secure == "required":
        if public_seed is None or len(public_seed) != 32:
            raise ParameterError("public_seed", public_seed, "the run's agreed 32-byte seed")
        extra["public_seed"] = public_seed
    return factory(
        dict(params),
        n_clients=n_clients,
        epsilon=epsilon,
        delta=delta,
        randomness=randomness,
        **extra,
    )


# -- the task-level face both sides use (issue 25). Devices and servers call only these three with a
# -- (verified) task; how an analysis builds its config, plan and privacy loss stays behind them.


def config_for(task: Mapping[str, Any]) -> Any:
    """The analysis's validated configuration of a normalized ``task`` (its params and privacy).

    Raises
    ------
    ParameterError
        If the analysis is unknown or an option is out of range (the error names the option).
    """
    spec = lookup(str(task["analysis"]), int(task["version"]))
    return {
        "spec": spec,
        "params": dict(task.get("params") or {}),
        "privacy": dict(task["privacy"]),
    }


def plan_for(task: Mapping[str, Any], *, n_clients: int, public_seed: bytes) -> Any:
    """The plan of ``task``'s rounds: a protocol generator that yields each round and receives its sum.

    Deterministic given ``(task, n_clients, public_seed)``: a device replays it with the public sums it is
    shown to derive every round's encoder and public parameters itself, and a restarted server replays it
    from its journal. ``public_seed`` (32 bytes) is the run's public seed: the verified commit-reveal seed
    of a secure run, the server's stated seed of a plain run (it shapes only public choices, such as which
    records report which bit, never a device's privacy).

    Raises
    ------
    ParameterError
        If the analysis is unknown, an option is out of range, or the seed is not 32 bytes.
    """
    import hashlib

    from fedstats.randomness import RandomSource

    if not isinstance(public_seed, bytes) or len(public_seed) != 32:
        raise ParameterError("public_seed", public_seed, "32 bytes")
    # every public choice of the plan is keyed by the public seed (never by a server secret)
    randomness = RandomSource(
        None, _master=hashlib.sha256(b"fedstats/plan/v1" + public_seed).digest()
    )
    privacy = task["privacy"]
    return protocol_for(
        str(task["analysis"]),
        int(task["version"]),
        dict(task.get("params") or {}),
        n_clients=int(n_clients),
        epsilon=privacy.get("epsilon"),
        delta=privacy.get("delta"),
        randomness=randomness,
        public_seed=public_seed,
    )


def privacy_loss_for(task: Mapping[str, Any]) -> Any:
    """The privacy loss of one run of ``task`` on each record: a :class:`~fedstats.privacy.PrivacyLoss`.

    The one arithmetic of the library's ledger, the server's ledger and the device's budget: each charges
    this (epsilon, delta, rho) and composes charges the way :class:`fedstats.privacy.ledger.PrivacyLedger`
    does.
    """
    from fedstats.privacy.analysis.loss import PrivacyLoss

    privacy = task["privacy"]
    eps = privacy.get("epsilon")
    if eps is None:
        return PrivacyLoss(math.inf, 1.0, None)  # exact values: no DP guarantee
    return PrivacyLoss(float(eps), float(privacy.get("delta") or 0.0), None)
