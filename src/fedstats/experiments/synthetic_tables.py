"""The synthetic contingency tables of the FED-chi^2 experiments (Pang et al. 2023, Sec. 4.1 and 4.3).

Each client draws its own ``m_x x m_y`` table cell by cell (the authors' generators; see
``PAPER_NOTES.md``, 004), and the global table is the sum over clients. With ``x`` the row index
(0-based) and ``noise`` a standard normal truncated toward zero (``trunc(N(0, 1))``, an integer):

* ``independent``: ``randint(0, 5)`` (uniform on {0, ..., 4});
* ``linear``: ``max(0, randint(0, 5) * x + noise)``;
* ``quadratic``: ``max(0, randint(0, 5) * x**2 + noise)``;
* ``logistic``: ``max(0, randint(0, 10) * floor(exp(-x)) + noise)``. Since ``floor(exp(-x))`` is 1 for
  ``x = 0`` and 0 otherwise, the signal lives in row 0 only; the other rows hold only clipped noise.

Note what these generators are: every cell of a row is drawn from the same distribution, so the *expected*
table is rank one and the rows and columns are independent in expectation. The "correlated" tables are
over-dispersed (cell variance ``2 x^2`` against mean ``2 x`` for ``linear``), which the chi-square test
detects as dependence; the ``logistic`` table is barely over-dispersed ("barely correlated").

For FED-H (Sec. 4.3) the same generators give one-dimensional histograms (``m_y = 1``) of length
``m_x = 100,000``; :func:`synthetic_global_histogram` sums clients in blocks, in bounded memory.

Real tables are split across clients with :func:`fedstats.datasets.split_contingency_table` (the authors'
cut-point method).
"""

from __future__ import annotations

from typing import Required, TypedDict, Unpack

import numpy as np

from fedstats._validation import check_choice, check_int
from fedstats.randomness import RNG, RandomSource, as_generator

__all__ = [
    "GENERATORS",
    "synthetic_client_tables",
    "synthetic_global_histogram",
    "synthetic_global_table",
]

GENERATORS: tuple[str, ...] = ("independent", "linear", "quadratic", "logistic")
_BLOCK_CELLS = 1 << 22


def _cells(kind: str, n: int, m_x: int, m_y: int, row0: int, gen: RNG, noise: bool) -> np.ndarray:
    """``(n, m_x, m_y)`` int64 cells for rows ``row0 .. row0 + m_x - 1``."""
    x = np.arange(row0, row0 + m_x, dtype=np.int64)[None, :, None]
    shape = (n, m_x, m_y)
    if kind == "independent":
        return np.asarray(gen.integers(0, 5, size=shape), dtype=np.int64)
    if kind == "logistic":
        base = np.asarray(gen.integers(0, 10, size=shape), dtype=np.int64) * (x == 0)
    else:
        power = 1 if kind == "linear" else 2
        base = np.asarray(gen.integers(0, 5, size=shape), dtype=np.int64) * x**power
    if noise:
        base = base + np.trunc(np.asarray(gen.standard_normal(shape))).astype(np.int64)
    return np.asarray(np.maximum(base, 0), dtype=np.int64)


def synthetic_client_tables(
    kind: str,
    n_clients: int,
    *,
    m_x: int = 20,
    m_y: int = 20,
    rng: RNG | RandomSource,
    noise: bool = True,
) -> np.ndarray:
    """Each client's synthetic contingency table (Pang et al. 2023, Sec. 4.1; authors' generators).

    Parameters
    ----------
    kind : {"independent", "linear", "quadratic", "logistic"}
        The generator (see the module docstring).
    n_clients : int
        Number of clients, at least 1.
    m_x, m_y : int, optional
        Table shape (default 20 x 20, as in Fig. 1).
    rng : numpy.random.Generator, SecureGenerator or RandomSource
        Randomness (stream ``("synthetic_tables", kind)`` of a RandomSource).
    noise : bool, optional
        Add the truncated normal noise (default True). ``False`` gives the noiseless signal, used in tests.

    Returns
    -------
    numpy.ndarray
        ``(n_clients, m_x, m_y)`` int64, non-negative.

    Raises
    ------
    ParameterError
        If ``kind`` is unknown or ``n_clients``, ``m_x`` or ``m_y`` is not a positive integer.
    """
    kind = check_choice("kind", kind, GENERATORS)
    n = check_int("n_clients", n_clients, low=1)
    m_x = check_int("m_x", m_x, low=1)
    m_y = check_int("m_y", m_y, low=1)
    gen = as_generator(rng, "synthetic_tables", kind)
    return _cells(kind, n, m_x, m_y, 0, gen, noise)


class _TableOptions(TypedDict, total=False):
    """The keyword arguments of :func:`synthetic_client_tables` (defaults there)."""

    m_x: int
    m_y: int
    rng: Required[RNG | RandomSource]
    noise: bool


def synthetic_global_table(
    kind: str, n_clients: int, **options: Unpack[_TableOptions]
) -> np.ndarray:
    """Sum over clients :func:`synthetic_client_tables` (same arguments), shape ``(m_x, m_y)``."""
    tables = synthetic_client_tables(kind, n_clients, **options)
    return np.asarray(tables.sum(axis=0), dtype=np.int64)


def synthetic_global_histogram(
    kind: str,
    n_clients: int,
    m: int,
    *,
    rng: RNG | RandomSource,
    noise: bool = True,
) -> np.ndarray:
    """Build the global histogram of length ``m`` summed over clients, built in blocks of bounded memory.

    Used for FED-H (Pang et al. 2023, Sec. 4.3, ``m_x = 100,000``): the generators of
    :func:`synthetic_client_tables` with ``m_y = 1``, clients drawn block by block (scratch memory about
    32 MiB whatever ``n_clients * m``).

    Parameters
    ----------
    kind : {"independent", "linear", "quadratic", "logistic"}
    n_clients : int
        Clients, at least 1.
    m : int
        Histogram length ``m_x``, at least 1.
    rng : numpy.random.Generator, SecureGenerator or RandomSource
    noise : bool, optional
        As in :func:`synthetic_client_tables`.

    Returns
    -------
    numpy.ndarray
        ``(m,)`` int64, non-negative.

    Raises
    ------
    ParameterError
        If ``kind`` is unknown or ``n_clients`` or ``m`` is not a positive integer.
    """
    kind = check_choice("kind", kind, GENERATORS)
    n = check_int("n_clients", n_clients, low=1)
    m = check_int("m", m, low=1)
    gen = as_generator(rng, "synthetic_histogram", kind)
    out = np.zeros(m, dtype=np.int64)
    rows = max(1, min(m, _BLOCK_CELLS))
    clients = max(1, _BLOCK_CELLS // rows)
    for r0 in range(0, m, rows):
        mr = min(rows, m - r0)
        for c0 in range(0, n, clients):
            nc = min(clients, n - c0)
            out[r0 : r0 + mr] += _cells(kind, nc, mr, 1, r0, gen, noise).sum(axis=0)[:, 0]
    return out
