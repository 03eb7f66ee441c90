"""The analyses a deployment can run: the one place that names concrete analysis code.

A task names an analysis and its version (``"bitpushing-mean"``, ``1``). Both sides look it up here:

* the **server** builds the protocol generator with the entry's ``factory`` from the task's parameters,
  its cohort size and its privacy budget (:func:`protocol_for`);
* a **client** runs only an encoder listed in its *installed* registry for that analysis version
  (:func:`resolve_encoder`): no code is ever shipped, a round names its encoder as ``"module:qualname"``
  and a client refuses any name not listed here.

Every reference is a ``"module:qualname"`` string imported on first use, so importing this module imports
no analysis (the client stays light) and the lead can repoint paths when analyses move.

Factories have the signature ``factory(params, *, n_clients, epsilon, delta, randomness)`` and return a
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
_HERE = "fedstats.service.registry"

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

    ``public_seed`` is the run's agreed seed (:mod:`fedstats.service.seeding`), given to the factories of
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


# -- factories: task parameters -> protocol generators ----------------------------------------------------


def _only(params: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(params) - allowed)
    if extra:
        raise ParameterError("params", extra, f"keys among {sorted(allowed)}")


def _exact_mean(
    params: dict[str, Any],
    *,
    n_clients: int,
    epsilon: Any,
    delta: Any,
    randomness: Any,
) -> Any:
    """Exact federated mean: ``{"column", "clip", "frac_bits"}`` (not private)."""
    from fedstats.analyses.exact.protocol import mean_protocol

    _only(params, {"column", "clip", "frac_bits"})
    if epsilon is not None:
        raise ParameterError("privacy.epsilon", epsilon, "null (exact-mean is not private)")
    return mean_protocol(
        str(params.get("column", "value")),
        clip=float(params["clip"]),
        frac_bits=int(params.get("frac_bits", 16)),
    )


def _bitpushing_stage(
    params: dict[str, Any], epsilon: Any, extra: set[str]
) -> tuple[Any, Any, str]:
    """Check the parameters of a bit-pushing task; return (stage, encoding, method)."""
    from fedstats.analyses.bitpushing.encoding import BitEncoding
    from fedstats.analyses.bitpushing.protocol import make_stage

    keys = {"column", "low", "high", "resolution", "bit_depth", "method", "bits_per_client"}
    _only(params, keys | {"round1_fraction"} | extra)
    enc = BitEncoding(
        float(params["low"]),
        float(params["high"]),
        resolution=float(params.get("resolution", 1.0)),
        bit_depth=params.get("bit_depth"),
    )
    method = str(params.get("method", "adaptive"))
    options: dict[str, Any] = {
        "epsilon": epsilon,
        "bits_per_client": int(params.get("bits_per_client", 1)),
    }
    if "round1_fraction" in params:
        options["round1_fraction"] = float(params["round1_fraction"])
    return make_stage(method, **options), enc, method


def _bitpushing_mean(
    params: dict[str, Any],
    *,
    n_clients: int,
    epsilon: Any,
    delta: Any,
    randomness: Any,
) -> Any:
    """Bit-pushing mean (Cormode & Markov 2021): one round (``basic``/``weighted``) or adaptive two rounds.

    Parameters: ``column``, ``low``, ``high``, optional ``resolution``, ``bit_depth``, ``method``
    (``"adaptive"`` default, ``"weighted"``, ``"basic"``), ``bits_per_client``, ``round1_fraction``.
    The public seed of the allocation comes from the run's randomness.
    """
    from fedstats.analyses.bitpushing.protocol import mean_protocol

    stage, enc, method = _bitpushing_stage(params, epsilon, set())
    return mean_protocol(
        stage,
        str(params.get("column", "value")),
        enc,
        n_clients,
        method=method,
        public_seed=randomness.public_seed("bitpushing"),
    )


def _bitpushing_variance(
    params: dict[str, Any],
    *,
    n_clients: int,
    epsilon: Any,
    delta: Any,
    randomness: Any,
) -> Any:
    """Bit-pushing variance (Cormode & Markov 2021, Sec. 4): a mean stage, then squared deviations.

    Parameters: as ``bitpushing-mean``, plus ``mean_fraction`` (share of the cohort in the mean stage,
    in (0, 1), default 0.2). Each device's records take part in one stage only; with the adaptive
    method the task runs four rounds (two per stage).
    """
    from fedstats.analyses.bitpushing.protocol import variance_protocol

    stage, enc, method = _bitpushing_stage(params, epsilon, {"mean_fraction"})
    return variance_protocol(
        stage,
        str(params.get("column", "value")),
        enc,
        n_clients,
        method=method,
        mean_fraction=float(params.get("mean_fraction", 0.2)),
        public_seed=randomness.public_seed("bitpushing", "variance"),
    )


def _performance_gap(
    params: dict[str, Any],
    *,
    n_clients: int,
    epsilon: Any,
    delta: Any,
    randomness: Any,
) -> Any:
    """Performance gap (Juarez & Korolova 2023) with M_R or M_L; group sizes estimated from the reports.

    Parameters: ``mechanism`` ("R" or "L"), ``n_groups`` (default 2), ``pair`` (default [0, 1]),
    ``fractions`` (public planning guess of the group shares, default balanced), ``scale`` ("signed"
    default: values in [-1, 1]; "rate": values were mapped v = 2 r - 1 and results are rates),
    ``confidence``. Data columns ``group`` (code in [0, n_groups)) and ``value`` (in [-1, 1]).
    """
    from fedstats.analyses.performance_gap.allocation import allocate, layout_from_fractions
    from fedstats.analyses.performance_gap.protocol import check_pair, performance_gap_protocol

    _only(params, {"mechanism", "n_groups", "pair", "fractions", "scale", "confidence"})
    if epsilon is None:
        raise ParameterError("privacy.epsilon", epsilon, "a positive number (local DP)")
    d = int(params.get("n_groups", 2))
    pair = check_pair(params.get("pair", [0, 1]), d)
    fractions = params.get("fractions") or [1.0 / d] * d
    layout = layout_from_fractions(float(n_clients), fractions, pair)
    alloc = allocate(str(params["mechanism"]), float(epsilon), layout)
    result = yield from performance_gap_protocol(
        alloc.mechanism,
        sizes=None,  # estimated from the perturbed groups: the server learns no exact group size
        pair=pair,
        scale=str(params.get("scale", "signed")),
        confidence=float(params.get("confidence", 0.95)),
        allocation=alloc.to_dict(),
    )
    result.details["budget"] = float(epsilon)
    return result


def _heterogeneity(
    params: dict[str, Any], *, n_clients: int, epsilon: Any, delta: Any, randomness: Any
) -> Any:
    """Private heterogeneity (paper 000) with distributed discrete Gaussian shares.

    Parameters: ``dim`` (vector length d), and optionally ``statistic``, ``p``, ``min_variance``,
    ``round1_fraction``, ``min_reporting``, ``column`` (default ``"x"``: CSV columns ``x[0]..x[d-1]``).
    """
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig
    from fedstats.analyses.heterogeneity.protocol import heterogeneity_protocol

    _only(
        params,
        {"dim", "statistic", "p", "min_variance", "round1_fraction", "min_reporting", "column"},
    )
    cfg = HeterogeneityConfig(
        statistic=str(params.get("statistic", "all")),
        epsilon=epsilon,
        delta=delta,
        noise="distributed",
        secure=epsilon is not None,
        round1_fraction=float(params.get("round1_fraction", 0.5)),
        p=float(params.get("p", 2.0)),
        min_variance=float(params.get("min_variance", 0.05)),
        min_reporting=float(params.get("min_reporting", 1.0)),
        column=str(params.get("column", "x")),
    )
    return heterogeneity_protocol(
        cfg, n_clients=n_clients, dim=int(params["dim"]), randomness=randomness
    )


def _fed_chi2(
    params: dict[str, Any],
    *,
    n_clients: int,
    epsilon: Any,
    delta: Any,
    randomness: Any,
    public_seed: bytes,
) -> Any:
    """FED-chi^2 (Pang et al. 2023, Alg. 2) over secure aggregation; exact sums, no DP noise.

    Parameters: ``shape`` ([m_x, m_y]), ``x`` and ``y`` (category columns, one record per row; default
    "x", "y"), and optionally ``encoding_size`` (default 50), ``decoder``, ``max_cell`` (default 1),
    ``confidence``, ``level``, ``drop_empty``. The projection seed derives from the run's agreed seed.
    """
    from fedstats.analyses.chi2.protocol import fed_chi2_protocol
    from fedstats.service.seeding import projection_seed

    del n_clients, epsilon, delta, randomness  # exact sums: no server randomness
    _only(
        params,
        {
            "shape",
            "x",
            "y",
            "encoding_size",
            "decoder",
            "max_cell",
            "confidence",
            "level",
            "drop_empty",
        },
    )
    shape = params.get("shape")
    if not isinstance(shape, (list, tuple)) or len(shape) != 2:
        raise ParameterError("params.shape", shape, "[m_x, m_y]")
    return fed_chi2_protocol(
        (int(shape[0]), int(shape[1])),
        encoding_size=int(params.get("encoding_size", 50)),
        decoder=str(params.get("decoder", "mean-of-squares")),
        projection_seed=projection_seed(public_seed),
        bits=64,
        max_cell=int(params.get("max_cell", 1)),
        confidence=float(params.get("confidence", 0.95)),
        level=float(params.get("level", 0.05)),
        categorical=(str(params.get("x", "x")), str(params.get("y", "y"))),
        drop_empty=bool(params.get("drop_empty", False)),
    )


_FED_H_KEYS = {"encoding_size", "fd_step", "coupling", "confidence"}


def _fed_entropy(
    params: dict[str, Any],
    *,
    n_clients: int,
    epsilon: Any,
    delta: Any,
    randomness: Any,
    public_seed: bytes,
) -> Any:
    """FED-H (Pang et al. 2023, Sec. 3.5) over secure aggregation: Shannon entropy of one category column.

    Parameters: ``m`` (categories), ``x`` (column of codes in [0, m), one record per row; default "x"),
    and optionally ``encoding_size`` (default 1000), ``fd_step``, ``coupling``, ``confidence``.
    """
    from fedstats.analyses.entropy.estimator import DEFAULT_FD_STEP
    from fedstats.analyses.entropy.protocol import fed_entropy_protocol
    from fedstats.service.seeding import projection_seed

    del n_clients, epsilon, delta, randomness  # exact sums: no server randomness
    _only(params, {"m", "x", *_FED_H_KEYS})
    return fed_entropy_protocol(
        int(params["m"]),
        encoding_size=int(params.get("encoding_size", 1000)),
        fd_step=float(params.get("fd_step", DEFAULT_FD_STEP)),
        coupling=str(params.get("coupling", "coupled")),
        projection_seed=projection_seed(public_seed),
        bits=64,
        max_count=1,
        confidence=float(params.get("confidence", 0.95)),
        categorical=str(params.get("x", "x")),
    )


def _g_test(
    params: dict[str, Any],
    *,
    n_clients: int,
    epsilon: Any,
    delta: Any,
    randomness: Any,
    public_seed: bytes,
) -> Any:
    """The G-test of independence via FED-H over secure aggregation (Pang et al. 2023, Sec. 3.5).

    Parameters: ``shape`` ([m_x, m_y]), ``x`` and ``y`` (category columns, one record per row; default
    "x", "y"), and optionally ``encoding_size`` (default 1000), ``fd_step``, ``coupling``,
    ``confidence``, ``level``, ``drop_empty``.
    """
    from fedstats.analyses.entropy.estimator import DEFAULT_FD_STEP
    from fedstats.analyses.entropy.protocol import g_test_protocol
    from fedstats.service.seeding import projection_seed

    del n_clients, epsilon, delta, randomness  # exact sums: no server randomness
    _only(params, {"shape", "x", "y", "level", "drop_empty", *_FED_H_KEYS})
    shape = params.get("shape")
    if not isinstance(shape, (list, tuple)) or len(shape) != 2:
        raise ParameterError("params.shape", shape, "[m_x, m_y]")
    return g_test_protocol(
        (int(shape[0]), int(shape[1])),
        encoding_size=int(params.get("encoding_size", 1000)),
        fd_step=float(params.get("fd_step", DEFAULT_FD_STEP)),
        coupling=str(params.get("coupling", "coupled")),
        projection_seed=projection_seed(public_seed),
        bits=64,
        max_cell=1,
        level=float(params.get("level", 0.05)),
        confidence=float(params.get("confidence", 0.95)),
        categorical=(str(params.get("x", "x")), str(params.get("y", "y"))),
        drop_empty=bool(params.get("drop_empty", False)),
    )
