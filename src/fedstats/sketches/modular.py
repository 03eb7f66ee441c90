"""Fixed-point encodings of real sketches summed modulo ``2**bits`` (the secure-aggregation field).

Pang et al. 2023 quantise each client's encoding to 64-bit fixed point and sum it with secure aggregation
modulo ``2**64`` (Appendix O also tries ``2**16`` and ``2**32``). The sum modulo ``2**bits`` is the true sum
only when the *aggregate* fits in ``bits`` signed bits; partial sums may wrap freely. The number of
fractional bits is therefore chosen from a bound on the aggregate that the server can compute from public
values (marginals, the public projection), never from the private data:

* ``bits < 64``: every client reports its fixed-point value reduced to ``[-2**(bits-1), 2**(bits-1))``; the
  server reduces the sum the same way. ``frac_bits = floor(log2((2**(bits-1) - 1) / aggregate_bound))``.
* ``bits = 64``: reports are left unreduced (an exact integer sum is the sum modulo ``2**64`` when it fits);
  ``frac_bits`` is limited so that one client's report stays below ``2**40`` (any engine block size up to
  ``2**22`` then sums exactly in int64) and the aggregate below ``2**62``; at most 52 (float64 precision).

Randomized rounding (unbiased) is used, so quantisation adds zero-mean noise of variance at most
``n / 4 * 4**(-frac_bits)`` per coordinate over ``n`` clients.
"""

from __future__ import annotations

import math

import numpy as np

from fedstats._validation import check_choice
from fedstats.errors import OverflowRiskError

__all__ = ["BITS", "choose_frac_bits", "reduce_signed", "wrap_reports"]

BITS: tuple[int, ...] = (16, 32, 64)
_CLIENT_LIMIT_64 = 2.0**40
_SUM_LIMIT_64 = 2.0**62


def choose_frac_bits(bits: int, client_bound: float, aggregate_bound: float) -> int:
    """Fractional bits for reports bounded by ``client_bound`` whose sum is bounded by ``aggregate_bound``.

    Parameters
    ----------
    bits : {16, 32, 64}
        Width of the modular sum.
    client_bound : float
        Upper bound on ``|entry|`` of any one client's real-valued report (> 0).
    aggregate_bound : float
        Upper bound on ``|entry|`` of the sum of all reports (> 0).

    Returns
    -------
    int
        In ``[0, 52]``.

    Raises
    ------
    OverflowRiskError
        If even integer resolution (``frac_bits = 0``) cannot hold the bound in ``bits`` bits.
    """
    check_choice("bits", str(bits), tuple(str(b) for b in BITS))
    cb = max(float(client_bound), 1e-300)
    ab = max(float(aggregate_bound), 1e-300)
    if bits < 64:
        f = math.floor(math.log2((2.0 ** (bits - 1) - 1) / ab))
    else:
        f = min(
            math.floor(math.log2(_CLIENT_LIMIT_64 / cb)), math.floor(math.log2(_SUM_LIMIT_64 / ab))
        )
    if f < 0:
        raise OverflowRiskError(
            f"bits={bits} cannot hold the aggregated encoding (bound {ab:.4g}) even at integer "
            f"resolution; use a wider field (bits=32 or 64)"
        )
    return min(f, 52)


def wrap_reports(q: np.ndarray, bits: int) -> np.ndarray:
    """Reduce int64 reports into ``[-2**(bits-1), 2**(bits-1))`` (no-op for ``bits = 64``)."""
    if bits >= 64:
        return q
    half = np.int64(1 << (bits - 1))
    mod = np.int64(1 << bits)
    out: np.ndarray = ((q + half) % mod) - half
    return out


def reduce_signed(total: np.ndarray, bits: int) -> np.ndarray:
    """The sum modulo ``2**bits`` as signed integers (object or int64 in, float64 out, exact below 2**53).

    Parameters
    ----------
    total : numpy.ndarray
        The exact integer sum of the reports (int64 or object of Python ints), shape ``(dim,)``.
    bits : {16, 32, 64}
    """
    mod = 1 << bits
    half = 1 << (bits - 1)
    vals = [((int(t) + half) % mod) - half for t in np.asarray(total).ravel()]
    return np.asarray(vals, dtype=np.float64)
