"""The faces of FED-H in a deployment (tasks ``fed-entropy`` and ``g-test``; Pang et al. 2023, Sec. 3.5).

Exact sums over secure aggregation, no DP noise: the privacy loss is infinite. The projection seed is
derived from the run's agreed public seed (:func:`fedstats.wire.seeding.projection_seed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fedstats._validation import check_bool, check_choice, check_int, check_open_unit
from fedstats.analyses._config import ExactSumsConfig, check_columns, check_public_seed
from fedstats.analyses.chi2.config import MAX_CATEGORIES, TableTestConfig

if TYPE_CHECKING:  # the plan's types only: the protocol is imported when a plan is made
    from fedstats.analyses.chi2.estimator import Chi2Result
    from fedstats.analyses.entropy.estimator import EntropyResult
    from fedstats.engine.core import ProtocolGenerator

__all__ = ["FedEntropyConfig", "GTestConfig"]

_FD_STEP = 0.05  # fedstats.analyses.entropy.estimator.DEFAULT_FD_STEP (checked in the tests)


def _check_fed_h(cfg: Any) -> None:
    from fedstats.analyses.entropy.estimator import COUPLINGS, check_fd_step

    check_int("encoding_size", cfg.encoding_size, low=2, high=100_000)
    object.__setattr__(cfg, "fd_step", check_fd_step(cfg.fd_step))
    check_choice("coupling", cfg.coupling, COUPLINGS)
    conf = check_open_unit("confidence", cfg.confidence)
    object.__setattr__(cfg, "confidence", conf)


def _fed_h_options(cfg: Any, public_seed: bytes) -> dict[str, Any]:
    from fedstats.wire.seeding import projection_seed

    return {
        "encoding_size": cfg.encoding_size,
        "fd_step": cfg.fd_step,
        "coupling": cfg.coupling,
        "projection_seed": projection_seed(check_public_seed(public_seed)),
        "bits": 64,
        "confidence": cfg.confidence,
    }


@dataclass(frozen=True)
class FedEntropyConfig(ExactSumsConfig):
    """Options of FED-H: the Shannon entropy of one category column (one record per row).

    Parameters
    ----------
    m : int
        Categories, in [2, 10000]. Required.
    x : str
        Column of codes in [0, m) (default ``"x"``).
    encoding_size : int
        Projection length, in [2, 100000] (default 1000).
    fd_step : float
        Finite-difference step D, in (0, 0.5] (default 0.05).
    coupling : {"coupled", "independent"}
        Projections at alpha = 1 +/- D share their randomness or not (default ``"coupled"``).
    confidence : float
        Interval level, in (0, 1) (default 0.95).

    Raises
    ------
    ParameterError
        If an option is out of range (named).
    """

    m: int
    x: str = "x"
    encoding_size: int = 1000
    fd_step: float = _FD_STEP
    coupling: str = "coupled"
    confidence: float = 0.95

    def __post_init__(self) -> None:
        """Validate every option (see the class docstring)."""
        check_int("m", self.m, low=2, high=MAX_CATEGORIES)
        check_columns(x=self.x)
        _check_fed_h(self)

    def plan(self, *, n_clients: int, public_seed: bytes) -> ProtocolGenerator[EntropyResult]:
        """The rounds of FED-H (:func:`~fedstats.analyses.entropy.protocol.fed_entropy_protocol`)."""
        from fedstats.analyses.entropy.protocol import fed_entropy_protocol

        check_int("n_clients", n_clients, low=1)
        return fed_entropy_protocol(
            self.m, max_count=1, categorical=self.x, **_fed_h_options(self, public_seed)
        )


@dataclass(frozen=True)
class GTestConfig(TableTestConfig):
    """Options of the G-test of independence via FED-H (one record per row).

    Parameters
    ----------
    shape : (int, int)
        ``(m_x, m_y)``, each in [2, 10000]. Required.
    x, y : str
        Category columns (default ``"x"``, ``"y"``).
    encoding_size, fd_step, coupling, confidence
        As :class:`FedEntropyConfig`.
    level : float
        Test level, in (0, 1) (default 0.05).
    drop_empty : bool
        Drop categories empty in the summed marginals instead of failing (default False).

    Raises
    ------
    ParameterError
        If an option is out of range (named).
    """

    encoding_size: int = 1000
    fd_step: float = _FD_STEP
    coupling: str = "coupled"
    confidence: float = 0.95
    level: float = 0.05
    drop_empty: bool = False

    def __post_init__(self) -> None:
        """Validate every option (see the class docstring)."""
        super().__post_init__()
        _check_fed_h(self)
        lev = check_open_unit("level", self.level)
        object.__setattr__(self, "level", lev)
        check_bool("drop_empty", self.drop_empty)

    def plan(self, *, n_clients: int, public_seed: bytes) -> ProtocolGenerator[Chi2Result]:
        """The rounds of the G-test (:func:`~fedstats.analyses.entropy.protocol.g_test_protocol`)."""
        from fedstats.analyses.entropy.protocol import g_test_protocol

        check_int("n_clients", n_clients, low=1)
        return g_test_protocol(
            self.shape,
            max_cell=1,
            level=self.level,
            categorical=(self.x, self.y),
            drop_empty=self.drop_empty,
            **_fed_h_options(self, public_seed),
        )
