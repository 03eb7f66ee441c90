"""Server side of the exact (non-private) baselines: a global contingency table and a mean.

These are the baselines every private analysis is measured against, computed through the same engine (so
the same routes, shards and secure aggregation apply): the server learns only the sum of the reports.
Nothing is private here: the results carry no epsilon.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedstats._validation import check_int, check_real
from fedstats.analyses.exact.client import (
    aggregate_table,
    aggregate_value,
    encode_table,
    encode_value,
)
from fedstats.engine.core import ProtocolGenerator
from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import DataError
from fedstats.results import AnalysisResult

__all__ = ["ChiSquareResult", "MeanResult", "chi_square_protocol", "mean_protocol"]


@dataclass
class ChiSquareResult(AnalysisResult):
    r"""Pearson chi-square test of independence on the summed table (``analysis="exact.chi2"``).

    ``estimate`` is Pearson's :math:`X^2` (no continuity correction); :attr:`statistic` is the same value
    under the test's usual name.

    Attributes
    ----------
    p_value : float
        Upper tail of :math:`\chi^2_{\mathrm{dof}}` at the statistic, in [0, 1].
    dof : int
        ``(m_x - 1)(m_y - 1)`` after dropping empty rows and columns.
    table : numpy.ndarray
        The global table (int64, ``(m_x, m_y)``) the server assembled.
    """

    p_value: float = 1.0
    dof: int = 0
    table: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))

    @property
    def statistic(self) -> float:
        """Pearson's :math:`X^2` (the same value as :attr:`estimate`)."""
        return self.estimate


@dataclass
class MeanResult(AnalysisResult):
    """Exact federated mean (``analysis="exact.mean"``, non-private).

    ``details["resolution"]`` is the fixed-point step :math:`2^{-f}`: the estimate is exact to it.
    """


def chi_square_protocol(
    shape: tuple[int, int], *, max_cell: int, column: str = "table"
) -> ProtocolGenerator[ChiSquareResult]:
    """One round: clients send their contingency tables; the server tests independence on the sum.

    Parameters
    ----------
    shape : tuple of int
        ``(m_x, m_y)``, each >= 2.
    max_cell : int
        Largest count any single client holds in one cell (the round's bound), >= 1.
    column : str
        Population column holding the ``(n, m_x, m_y)`` tables.

    Returns
    -------
    ProtocolGenerator[ChiSquareResult]
        Use with :meth:`fedstats.engine.Engine.run`.

    Raises
    ------
    ParameterError
        If ``shape`` or ``max_cell`` is out of range.
    DataError
        If the summed table has fewer than two non-empty rows or columns.
    """
    import scipy.stats  # lazily (costly import; server side only)

    m_x = check_int("m_x", shape[0], low=2)
    m_y = check_int("m_y", shape[1], low=2)
    bound = check_int("max_cell", max_cell, low=1)
    s: RoundSum = yield Round(
        "table",
        encode_table,
        {"column": column},
        dim=m_x * m_y,
        bound=bound,
        aggregate=aggregate_table,
    )
    table = np.asarray(s.total, dtype=np.int64).reshape(m_x, m_y)
    kept = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    if kept.shape[0] < 2 or kept.shape[1] < 2:
        raise DataError(
            f"the summed table has only {kept.shape} non-empty rows x columns; need 2 x 2"
        )
    stat, p, dof, _ = scipy.stats.chi2_contingency(kept, correction=False)
    return ChiSquareResult(
        analysis="exact.chi2",
        estimate=float(stat),
        n_clients=s.n_clients,
        p_value=float(p),
        dof=int(dof),
        table=table,
        truth=float(stat),
    )


def mean_protocol(
    column: str, *, clip: float, frac_bits: int = 16
) -> ProtocolGenerator[MeanResult]:
    """One round: each client sends its value in fixed point and a 1; the server divides.

    Parameters
    ----------
    column : str
        The population column holding one real value per client.
    clip : float
        Declared bound: values must lie in ``[-clip, clip]`` (> 0); larger values are clipped.
    frac_bits : int
        Fixed-point fractional bits, in [0, 52].

    Returns
    -------
    ProtocolGenerator[MeanResult]

    Raises
    ------
    ParameterError
        If ``clip`` or ``frac_bits`` is out of range.
    """
    check_real("clip", clip, low=0.0, high=float("inf"), low_open=True, high_open=True)
    fp = FixedPoint(frac_bits, clip)
    s: RoundSum = yield Round(
        "sum",
        encode_value,
        {"column": column, "frac_bits": frac_bits, "clip": clip},
        dim=2,
        bound=max(fp.bound, 1),
        aggregate=aggregate_value,
    )
    total, count = int(s.total[0]), int(s.total[1])
    return MeanResult(
        analysis="exact.mean",
        estimate=float(fp.decode(total)) / count,
        n_clients=count,
        details={"resolution": 1 / fp.scale},
    )
