"""The server-side protocol factories of the installed analyses (named in :mod:`fedstats.wire.registry`).

Each has the signature ``factory(params, *, n_clients, epsilon, delta, randomness)`` (plus
``public_seed`` for the analyses that require secure aggregation) and returns a protocol generator; see
:mod:`fedstats.wire.registry` for the contract (deterministic given its arguments: a restarted server replays it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedstats.errors import ParameterError


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
    from fedstats.wire.seeding import projection_seed

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
    return fed_chi2_protocol(
        _shape(params),
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


def _shape(params: Mapping[str, Any]) -> tuple[int, int]:
    shape = params.get("shape")
    if not isinstance(shape, (list, tuple)) or len(shape) != 2:
        raise ParameterError("params.shape", shape, "[m_x, m_y]")
    return int(shape[0]), int(shape[1])


def _fed_h_options(params: Mapping[str, Any], public_seed: bytes) -> dict[str, Any]:
    """FED-H's projection options shared by FED-H and the G-test (64-bit ring, one record per row)."""
    from fedstats.analyses.entropy.estimator import DEFAULT_FD_STEP
    from fedstats.wire.seeding import projection_seed

    return {
        "encoding_size": int(params.get("encoding_size", 1000)),
        "fd_step": float(params.get("fd_step", DEFAULT_FD_STEP)),
        "coupling": str(params.get("coupling", "coupled")),
        "projection_seed": projection_seed(public_seed),
        "bits": 64,
        "confidence": float(params.get("confidence", 0.95)),
    }


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
    from fedstats.analyses.entropy.protocol import fed_entropy_protocol

    del n_clients, epsilon, delta, randomness  # exact sums: no server randomness
    _only(params, {"m", "x", *_FED_H_KEYS})
    return fed_entropy_protocol(
        int(params["m"]),
        max_count=1,
        categorical=str(params.get("x", "x")),
        **_fed_h_options(params, public_seed),
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
    from fedstats.analyses.entropy.protocol import g_test_protocol

    del n_clients, epsilon, delta, randomness  # exact sums: no server randomness
    _only(params, {"shape", "x", "y", "level", "drop_empty", *_FED_H_KEYS})
    return g_test_protocol(
        _shape(params),
        max_cell=1,
        level=float(params.get("level", 0.05)),
        categorical=(str(params.get("x", "x")), str(params.get("y", "y"))),
        drop_empty=bool(params.get("drop_empty", False)),
        **_fed_h_options(params, public_seed),
    )
