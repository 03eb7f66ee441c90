"""The face of FED-chi^2 in a deployment (task ``fed-chi2``; Pang et al. 2023, Alg. 2).

Exact sums over secure aggregation, no DP noise: the privacy loss is infinite (the server learns the
summed marginals and the projected table, exactly). The projection seed is derived from the run's agreed
public seed (:func:`fedstats.wire.seeding.projection_seed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fedstats._validation import check_bool, check_choice, check_int, check_open_unit
from fedstats.analyses._config import ExactSumsConfig, check_columns, check_public_seed
from fedstats.errors import ParameterError

if TYPE_CHECKING:  # the plan's types only: the protocol is imported when a plan is made
    from fedstats.analyses.chi2.estimator import Chi2Result
    from fedstats.engine.core import ProtocolGenerator

__all__ = ["FedChi2Config", "TableTestConfig", "check_task_shape"]

MAX_CATEGORIES = 10_000
"""Largest number of categories of one variable in a task."""


def check_task_shape(shape: Any) -> tuple[int, int]:
    """Return ``shape`` as ``(m_x, m_y)``, each in [2, :data:`MAX_CATEGORIES`].

    Raises
    ------
    ParameterError
        Naming ``shape``.
    """
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise ParameterError("shape", shape, "[m_x, m_y]")
    return (
        check_int("shape", shape[0], low=2, high=MAX_CATEGORIES),
        check_int("shape", shape[1], low=2, high=MAX_CATEGORIES),
    )


@dataclass(frozen=True)
class TableTestConfig(ExactSumsConfig):
    """The fields a test of independence on two category columns shares (FED-chi^2, the G-test via FED-H).

    ``shape`` (required) and the category columns ``x``, ``y``, validated here (:func:`check_task_shape`,
    :func:`~fedstats.analyses._config.check_columns`) and documented by each subclass.
    """

    shape: tuple[int, int]
    x: str = "x"
    y: str = "y"

    def __post_init__(self) -> None:
        """Validate the shape and the columns."""
        object.__setattr__(self, "shape", check_task_shape(self.shape))
        check_columns(x=self.x, y=self.y)


@dataclass(frozen=True)
class FedChi2Config(TableTestConfig):
    """Options of FED-chi^2 over secure aggregation (one record per row, 64-bit ring).

    Parameters
    ----------
    shape : (int, int)
        ``(m_x, m_y)`` categories, each in [2, 10000]. Required.
    x, y : str
        Category columns, codes in [0, m_x) and [0, m_y) (default ``"x"``, ``"y"``).
    encoding_size : int
        Projection length l, in [2, 100000] (default 50, the paper's).
    decoder : {"mean-of-squares", "geometric"}
        Decoder of F_2 (default ``"mean-of-squares"``).
    max_cell : int
        Largest count of one device in one cell, in [1, 2**20] (default 1).
    confidence, level : float
        Interval level and test level, in (0, 1) (defaults 0.95, 0.05).
    drop_empty : bool
        Drop categories empty in the summed marginals instead of failing (default False).
    merge_below : int
        Pool each variable's categories with fewer than this many people (round 1's summed marginals,
        which the server learns) into one category before round 2, in [0, 2**31) (default 0: none;
        :func:`~fedstats.analyses.chi2.rare.merge_groups`). The one default of ``fed_chi2`` and
        ``fedstats chi2 --merge-below``.

    Raises
    ------
    ParameterError
        If an option is out of range (named).
    """

    encoding_size: int = 50
    decoder: str = "mean-of-squares"
    max_cell: int = 1
    confidence: float = 0.95
    level: float = 0.05
    drop_empty: bool = False
    merge_below: int = 0

    def __post_init__(self) -> None:
        """Validate every option (see the class docstring)."""
        from fedstats.analyses.chi2.calibration import DECODERS

        super().__post_init__()
        check_int("encoding_size", self.encoding_size, low=2, high=100_000)
        check_choice("decoder", self.decoder, DECODERS)
        check_int("max_cell", self.max_cell, low=1, high=2**20)
        for name in ("confidence", "level"):
            v = check_open_unit(name, getattr(self, name))
            object.__setattr__(self, name, v)
        check_int("merge_below", self.merge_below, low=0, high=2**31 - 1)
        check_bool("drop_empty", self.drop_empty)

    def plan(self, *, n_clients: int, public_seed: bytes) -> ProtocolGenerator[Chi2Result]:
        """The two rounds (marginals, then the projection keyed by ``projection_seed(public_seed)``).

        Returns
        -------
        ProtocolGenerator[Chi2Result]
        """
        from fedstats.analyses.chi2.protocol import fed_chi2_protocol
        from fedstats.wire.seeding import projection_seed

        check_int("n_clients", n_clients, low=1)
        return fed_chi2_protocol(
            self.shape,
            encoding_size=self.encoding_size,
            decoder=self.decoder,
            projection_seed=projection_seed(check_public_seed(public_seed)),
            bits=64,
            max_cell=self.max_cell,
            confidence=self.confidence,
            level=self.level,
            categorical=(self.x, self.y),
            drop_empty=self.drop_empty,
            merge_below=self.merge_below,
        )
