"""Client side of bit pushing (Cormode & Markov 2021): what runs on a device.

A client turns its value into a b-bit integer *code* (range policy, optional squaring for the variance
stage, unbiased randomized rounding; :func:`client_codes`), then reports the bits the server's public
allocation assigns it, each through randomized response when private (:func:`encode_bits`, Algorithm 1).
:func:`public_uniform` is the counter-based public randomness that client and server both compute (the
dither of subtractive dithering, :mod:`fedstats.analyses.mean_baselines.client`).

Imports numpy, :mod:`fedstats.privacy` and the errors only, so a device needs nothing of the server stack.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstats._numeric import round_to_integers
from fedstats.engine.validity import NOT_SMALL, Verdicts, output_check, small_output_check
from fedstats.errors import DataError, ParameterError
from fedstats.privacy.mechanisms import RandomizedResponse
from fedstats.randomness import RNG, SPLITMIX64_GAMMA, splitmix64

if TYPE_CHECKING:
    from fedstats.engine.rounds import ClientBatch, InputHistogram

__all__ = [
    "aggregate_bits",
    "check_bits_reports",
    "client_codes",
    "encode_bits",
    "enforce_range",
    "public_uniform",
    "sum_bits",
    "to_codes",
]


def enforce_range(
    values: Any, low: float, high: float, policy: str, *, name: str = "values"
) -> tuple[np.ndarray, int]:
    """Clip-and-count or refuse values outside ``[low, high]``.

    Parameters
    ----------
    values : array_like of float, shape (n,)
        The values.
    low, high : float
        Declared range, ``low < high``.
    policy : {"clip", "refuse"}
        Clip the values outside the range (and count them) or refuse them.
    name : str
        What the values are, for error messages.

    Returns
    -------
    values : numpy.ndarray of float64, shape (n,)
        Clipped to ``[low, high]``.
    n_clipped : int
        How many were outside.

    Raises
    ------
    DataError
        If a value is NaN or infinite, or outside the range under ``policy="refuse"``.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.size and low <= float(v.min()) and float(v.max()) <= high:
        return v, 0  # fast path: min/max are NaN if any value is, so this also proves finiteness
    if not np.isfinite(v).all():
        raise DataError(f"{name} has a NaN or infinite value")
    out = (v < low) | (v > high)
    n_out = int(np.count_nonzero(out))
    if n_out:
        if policy == "refuse":
            raise DataError(
                f"{n_out} of {v.size} {name} lie outside the declared range [{low:g}, {high:g}] "
                "(use out_of_range='clip' to clip and count them)"
            )
        v = np.clip(v, low, high)
    return v, n_out


def to_codes(
    v: np.ndarray, offset: float, resolution: float, max_code: int, rng: RNG | None
) -> np.ndarray:
    """Integer codes ``(v - offset) / resolution`` in ``[0, max_code]``, by unbiased randomized rounding.

    Parameters
    ----------
    v : numpy.ndarray of float64, shape (n,)
        Values already inside the declared range.
    offset, resolution : float
        Code mapping (``resolution > 0``).
    max_code : int
        Largest code.
    rng : RNG or None
        Randomized rounding (``E[code]`` exact); None rounds to nearest.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
    """
    identity = offset == 0.0 and resolution == 1.0
    x = v if identity else (v - offset) / resolution
    fl = np.floor(x)
    frac = x - fl
    if frac.any():
        fl = round_to_integers(x, rng)
    elif identity:  # integers already in [0, max_code] (the range was enforced): no clipping pass
        return fl.astype(np.int64)
    out: np.ndarray = np.clip(fl, 0, max_code).astype(np.int64)
    return out


def client_codes(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Compute the codes of a batch of clients (range policy, optional squaring, randomized rounding).

    Parameters
    ----------
    batch : ClientBatch
        ``params["column"]`` holds one real value per client.
    params : Mapping
        The public code description (``CodeSpec.params()``): ``column``, ``low``, ``high``,
        ``out_of_range``, ``offset``, ``resolution``, ``max_code``, ``center`` (None, or the public center
        of the squared deviations ``(x - center)**2``).
    rng : RNG
        The clients' private randomness (randomized rounding).

    Returns
    -------
    numpy.ndarray of int64, shape (batch.n,)

    Raises
    ------
    DataError
        If a value is outside the declared range under ``out_of_range="refuse"`` or not finite.
    """
    x = batch.column(params["column"])
    v, _ = enforce_range(
        x, params["low"], params["high"], params["out_of_range"], name=f"{params['column']} values"
    )
    center = params.get("center")
    if center is not None:
        v = (v - center) ** 2
    return to_codes(v, params["offset"], params["resolution"], params["max_code"], rng)


def public_uniform(seed: int, indices: np.ndarray) -> np.ndarray:
    """Public uniforms in [0, 1) for global client indices (:func:`~fedstats.randomness.splitmix64`).

    Shared randomness that client and server both compute from the public seed (the dither of subtractive
    dithering): counter-based, so any range of clients can be regenerated in bounded memory.

    Parameters
    ----------
    seed : int
        Public seed (reduced mod 2**64).
    indices : numpy.ndarray of int
        Global client indices.

    Returns
    -------
    numpy.ndarray of float64, shape of ``indices``, with 53 random bits each.
    """
    s = np.uint64(int(seed) % (1 << 64))
    with np.errstate(over="ignore"):
        z = splitmix64(np.asarray(indices).astype(np.uint64) * SPLITMIX64_GAMMA + s)
    out: np.ndarray = (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    return out


def encode_bits(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """One bit-pushing round on the client: the assigned bits of its code, randomized if private.

    Cormode & Markov 2021, Algorithm 1 (Corollary 2 for several bits per client).

    Parameters
    ----------
    batch : ClientBatch
        The clients; ``params["column"]`` holds one real value each.
    params : Mapping
        The code description (:func:`client_codes`) plus ``bit_depth``, ``allocation``,
        ``bits_per_client``, ``epsilon_bit`` and either ``cum``/``a``/``c``/``size``/``lo`` (exact
        allocation: the public permutation and the cumulative counts per bit) or ``cum_pi`` (random
        allocation: cumulative inclusion probabilities).
    rng : RNG
        Private randomness: randomized rounding, random allocation, randomized response.

    Returns
    -------
    numpy.ndarray of int8 (0/1 entries), shape (batch.n, b) or (batch.n, 2 b)
        Exact allocation: entry j holds the reported (randomized) bit if the client reports bit j, else 0
        (which client reports which bit is public, so the server knows the counts). Random allocation:
        one-hot (bit index, bit), entry j is 1 if the client reports bit j, entry b + j the bit.
    """
    b = int(params["bit_depth"])
    s = int(params["bits_per_client"])
    codes = client_codes(batch, params, rng)
    n = batch.n
    ks = np.arange(s, dtype=np.int64)
    slots: np.ndarray
    cum: np.ndarray
    exact = params["allocation"] == "exact"
    if exact:
        size = int(params["size"])
        pos = (int(params["a"]) * (batch.indices - int(params["lo"])) + int(params["c"])) % size
        slots = pos[:, None] + size * ks[None, :]
        cum = np.asarray(params["cum"], dtype=np.int64)
    else:
        u = np.asarray(rng.random(n), dtype=np.float64)
        slots = u[:, None] + ks[None, :]
        cum = np.asarray(params["cum_pi"], dtype=np.float64)
    j = np.searchsorted(cum, slots.ravel(), side="right").reshape(n, s) - 1
    np.minimum(j, b - 1, out=j)
    bits = ((codes[:, None] >> j) & 1).astype(np.uint8)
    eps = params.get("epsilon_bit")
    if eps is not None:
        bits = RandomizedResponse(epsilon=eps).randomize(bits, rng)
    width = b if exact else 2 * b
    flat = (np.arange(n, dtype=np.int64)[:, None] * width + j).ravel()
    out = np.zeros(n * width, dtype=np.int8)  # 0/1 entries; the engine widens to int64
    if exact:
        # the bit index is implied by the public allocation: report only the bit, at its position
        out[flat] = bits.ravel()
    else:
        out[flat] = 1
        out[flat + b] = bits.ravel()
    return out.reshape(n, width)


def _code_cap(params: Mapping[str, Any]) -> int:
    """Largest code :func:`client_codes` can return under ``params``.

    That is ``max_code``, or more on the identity path, where integer values are not clipped to it.
    """
    cap = int(params["max_code"])
    if float(params["offset"]) == 0.0 and float(params["resolution"]) == 1.0:
        low, high = float(params["low"]), float(params["high"])
        center = params.get("center")
        top = high if center is None else max((high - center) ** 2, (center - low) ** 2)
        cap = max(cap, int(np.ceil(top)) + 1)
    return cap


def _exact_assigned(
    params: Mapping[str, Any], counts: np.ndarray, starts: np.ndarray, b: int
) -> np.ndarray:
    """Per report, how many of its records report each bit under the exact allocation: int64 ``(n, b)``.

    The records of report ``r`` are ``[starts[r], starts[r] + counts[r])``; each reports the distinct
    bits its public slots fall on, exactly as :func:`encode_bits` computes them.
    """
    s = int(params["bits_per_client"])
    size, lo = int(params["size"]), int(params["lo"])
    n = counts.size
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    first = np.repeat(starts - np.cumsum(counts) + counts, counts)
    idx = first + np.arange(owner.size, dtype=np.int64)
    if idx.size and (int(idx.min()) < lo or int(idx.max()) >= lo + size):
        raise ParameterError(
            "starts", starts.tolist(), f"records inside the round's [{lo}, {lo + size})"
        )
    pos = (int(params["a"]) * (idx - lo) + int(params["c"])) % size
    slots = pos[:, None] + size * np.arange(s, dtype=np.int64)[None, :]
    cum = np.asarray(params["cum"], dtype=np.int64)
    j = np.searchsorted(cum, slots.ravel(), side="right").reshape(slots.shape) - 1
    np.minimum(j, b - 1, out=j)
    # a record reports each of its bits once (two slots on one bit write one entry)
    cells = np.unique((np.arange(idx.size, dtype=np.int64)[:, None] * b + j).ravel())
    out = np.zeros(n * b, dtype=np.int64)
    np.add.at(out, owner[cells // b] * b + cells % b, 1)
    return out.reshape(n, b)


@output_check(encode_bits)
def check_bits_reports(
    vectors: np.ndarray, counts: np.ndarray, params: Mapping[str, Any], starts: np.ndarray | None
) -> Verdicts:
    """Output check of :func:`encode_bits`: bit counts within the records that report each bit.

    One record reports ``s = bits_per_client`` distinct bits, each 0 or 1 (randomized response makes any
    bit possible; without it, a bit above the largest code in the declared range is always 0).

    * **Exact allocation** (``b`` entries): entry ``j`` counts the device's records that report bit ``j``
      and sent a 1. With ``starts`` (the device's record indices) the bits each record reports are public,
      so the check is **exact**: ``0 <= v_j <= m_j``, ``m_j`` the device's records assigned bit ``j``
      (``unassigned_bit`` where ``m_j = 0``, ``bit_out_of_range`` above it). Without ``starts``: the
      necessary ``0 <= v_j <= count`` on bits with a non-empty allocation, ``sum v <= s count``.
    * **Random allocation** (``2 b`` entries: ``c_j`` reports of bit ``j``, then ``v_j`` ones): exact up to
      the joint law of the slots: ``0 <= v_j <= c_j`` (``bit_out_of_range``), ``c_j = 0`` where
      ``pi_j = 0`` (``unassigned_bit``), ``c_j <= count`` and ``sum c = s count`` (``total_mismatch``).
      With ``s > 1``, float cumulative probabilities leave slivers where two of a record's slots fall on
      one bit (a bit with ``pi_j`` within 1e-9 of 1, or the last bit when the top slot rounds up to
      ``s``); each such bit can absorb one slot, so the total is then only bounded:
      ``(s - slivers) count <= sum c <= s count``, and the last bit counts as possible.
    * Without randomized response (``epsilon_bit`` None): a bit ``j`` with ``2^j`` above the largest code
      is 0 (``vacuous_bit``), the loose-bound poisoning of a high-order bit.

    Parameters
    ----------
    vectors : numpy.ndarray
        int64 ``(n, b)`` (exact) or ``(n, 2 b)`` (random).
    counts : numpy.ndarray
        int64 ``(n,)``, >= 1.
    params : Mapping
        The round's parameters (:func:`encode_bits`).
    starts : numpy.ndarray or None
        int64 ``(n,)``: each report's first record index (exact allocation), or None.

    Returns
    -------
    Verdicts

    Raises
    ------
    ParameterError
        If ``starts`` puts records outside the round's client range.
    """
    b = int(params["bit_depth"])
    s = int(params["bits_per_client"])
    out = Verdicts(counts.size)
    k = counts[:, None]
    private = params.get("epsilon_bit") is not None
    vacuous = (1 << np.arange(b, dtype=np.int64)) > _code_cap(params) if not private else None
    if params["allocation"] == "exact":
        ones = vectors
        cum = np.asarray(params["cum"], dtype=np.int64)
        possible = np.diff(cum) > 0
        if cum[-1] < int(params["size"]) * s:  # never for the protocol's counts (they sum to n s)
            possible[-1] = True
        if starts is not None:
            cap = _exact_assigned(params, counts, np.asarray(starts, dtype=np.int64), b)
        else:
            cap = np.where(possible[None, :], k, 0)
        out.fail("bit_out_of_range", (ones < 0).any(axis=1), "a negative bit count")
        out.fail(
            "unassigned_bit",
            ((cap == 0) & (ones != 0)).any(axis=1),
            lambda i: (
                f"bit {int(np.flatnonzero((cap[i] == 0) & (ones[i] != 0))[0])} is reported "
                "by none of the device's records"
            ),
        )
        out.fail(
            "bit_out_of_range",
            (ones > cap).any(axis=1),
            lambda i: (
                f"bit {int(np.flatnonzero(ones[i] > cap[i])[0])} counts more ones than the "
                "records that report it"
            ),
        )
        if starts is None:
            out.fail(
                "total_mismatch",
                ones.sum(axis=1) > s * counts,
                lambda i: (
                    f"{int(ones[i].sum())} ones from {int(counts[i])} record(s) of {s} bit(s)"
                ),
            )
    else:
        reps, ones = vectors[:, :b], vectors[:, b:]
        cum_pi = np.asarray(params["cum_pi"], dtype=np.float64)
        widths = np.diff(cum_pi)
        possible = widths > 0.0
        slivers = 0
        if s > 1:
            possible[-1] = True
            slivers = int(np.count_nonzero(widths >= 1.0 - 1e-9)) + 1
        lowest = max(s - slivers, 1)
        out.fail(
            "bit_out_of_range",
            ((reps < 0) | (ones < 0)).any(axis=1),
            "a negative count",
        )
        out.fail(
            "unassigned_bit",
            (reps[:, ~possible] != 0).any(axis=1),
            "a bit with inclusion probability 0 is reported",
        )
        out.fail(
            "bit_out_of_range",
            (reps > k).any(axis=1),
            lambda i: f"a bit reported more than the {int(counts[i])} record(s)",
        )
        total = reps.sum(axis=1)
        out.fail(
            "total_mismatch",
            (total > s * counts) | (total < lowest * counts),
            lambda i: f"{int(total[i])} bit reports from {int(counts[i])} record(s) of {s} bit(s)",
        )
        out.fail(
            "bit_out_of_range",
            (ones > reps).any(axis=1),
            lambda i: f"bit {int(np.flatnonzero(ones[i] > reps[i])[0])} has more ones than reports",
        )
    if vacuous is not None:
        out.fail(
            "vacuous_bit",
            (ones[:, vacuous] != 0).any(axis=1),
            lambda i: (
                f"bit {int(np.flatnonzero(vacuous & (ones[i] != 0))[0])} is 1, above every "
                "code in the declared range"
            ),
        )
    return out


_SMALL_RECORDS = 64
"""Most records :func:`check_bits_report` walks one by one (more: the vectorized check)."""


@small_output_check(encode_bits)
def check_bits_report(
    vector: list[int], count: int, params: Mapping[str, Any], start: int | None
) -> str | None:
    """:func:`check_bits_reports` of one report, in plain Python (same conditions, same answers).

    For the few uploads a quiet server checks at once (:data:`fedstats.engine.validity.SMALL_BATCH`).

    Parameters
    ----------
    vector : list of int
        The report, ``b`` (exact allocation) or ``2 b`` (random) Python ints within ``+-2^62``.
    count : int
        Its records, >= 1.
    params : Mapping
        The round's parameters (:func:`encode_bits`).
    start : int or None
        Its first record index (exact allocation), or None.

    Returns
    -------
    str or None
        ``"reason: detail"`` as :func:`check_bits_reports` gives it, None if the report passes, or
        :data:`~fedstats.engine.validity.NOT_SMALL` (more than 64 records, or records outside the round:
        the vectorized check answers).
    """
    b = int(params["bit_depth"])
    s = int(params["bits_per_client"])
    if params["allocation"] == "exact":
        ones = vector
        cum = [int(x) for x in params["cum"]]
        if start is not None:
            size, lo = int(params["size"]), int(params["lo"])
            if count > _SMALL_RECORDS or start < lo or start + count > lo + size:
                return NOT_SMALL
            a, c = int(params["a"]), int(params["c"])
            cap = [0] * b
            for idx in range(start, start + count):
                pos = (a * (idx - lo) + c) % size
                bits = {min(bisect.bisect_right(cum, pos + size * k) - 1, b - 1) for k in range(s)}
                for bit in bits:
                    cap[bit] += 1
        else:
            possible = [cum[j + 1] > cum[j] for j in range(b)]
            if cum[-1] < int(params["size"]) * s:
                possible[-1] = True
            cap = [count if ok else 0 for ok in possible]
        if any(v < 0 for v in ones):
            return "bit_out_of_range: a negative bit count"
        bad = next((j for j in range(b) if cap[j] == 0 and ones[j] != 0), None)
        if bad is not None:
            return f"unassigned_bit: bit {bad} is reported by none of the device's records"
        bad = next((j for j in range(b) if ones[j] > cap[j]), None)
        if bad is not None:
            return f"bit_out_of_range: bit {bad} counts more ones than the records that report it"
        if start is None and sum(ones) > s * count:
            return f"total_mismatch: {sum(ones)} ones from {count} record(s) of {s} bit(s)"
    else:
        reps, ones = vector[:b], vector[b:]
        cum_pi = [float(x) for x in params["cum_pi"]]
        widths = [cum_pi[j + 1] - cum_pi[j] for j in range(b)]
        possible = [w > 0.0 for w in widths]
        slivers = 0
        if s > 1:
            possible[-1] = True
            slivers = sum(w >= 1.0 - 1e-9 for w in widths) + 1
        lowest = max(s - slivers, 1)
        if any(v < 0 for v in vector):
            return "bit_out_of_range: a negative count"
        if any(r != 0 and not ok for r, ok in zip(reps, possible, strict=True)):
            return "unassigned_bit: a bit with inclusion probability 0 is reported"
        if any(r > count for r in reps):
            return f"bit_out_of_range: a bit reported more than the {count} record(s)"
        total = sum(reps)
        if total > s * count or total < lowest * count:
            return f"total_mismatch: {total} bit reports from {count} record(s) of {s} bit(s)"
        bad = next((j for j in range(b) if ones[j] > reps[j]), None)
        if bad is not None:
            return f"bit_out_of_range: bit {bad} has more ones than reports"
    if params.get("epsilon_bit") is None:
        top = _code_cap(params)
        bad = next((j for j in range(b) if (1 << j) > top and ones[j] != 0), None)
        if bad is not None:
            return f"vacuous_bit: bit {bad} is 1, above every code in the declared range"
    return None


_SHORT_CUM = 16


def _count_at_or_below(cum: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``np.searchsorted(cum, x, side="right")`` (``cum`` sorted): how many entries are ``<= x``, int64.

    For a short ``cum`` (a bit depth's cumulative counts) as one comparison per entry, summed in uint8:
    branch-free, where a binary search per client mispredicts on random positions.
    """
    if cum.size > _SHORT_CUM:
        out: np.ndarray = np.searchsorted(cum, x, side="right")
        return out
    acc = np.zeros(x.shape, dtype=np.uint8)
    for c in cum:
        acc += x >= c
    return acc.astype(np.int64)


def sum_bits(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """The sum of :func:`encode_bits`' reports over the batch, from the same draws (the summed encoder).

    Equal bit for bit to ``encode_bits(batch, params, rng).sum(axis=0, dtype=np.int64)`` for the same
    generator state: the codes, the allocation and randomized response draw as there (randomized
    response keeps a bit when its uniform is below the keep probability, as
    :meth:`~fedstats.privacy.mechanisms.RandomizedResponse.randomize`), but the ``(n, b)`` reports are
    never built and the bits it drew are not checked again: the reported ones are counted per bit.
    Several bits per client (Corollary 2) fall back to the reports' sum.

    Parameters
    ----------
    batch : ClientBatch
    params : Mapping
        As for :func:`encode_bits`.
    rng : RNG
        Private randomness.

    Returns
    -------
    numpy.ndarray of int64, shape (b,) or (2 b,)
    """
    b = int(params["bit_depth"])
    if int(params["bits_per_client"]) != 1:
        out: np.ndarray = encode_bits(batch, params, rng).sum(axis=0, dtype=np.int64)
        return out
    codes = client_codes(batch, params, rng)
    n = batch.n
    exact = params["allocation"] == "exact"
    if exact:
        size = int(params["size"])
        slots = batch.indices
        slots -= int(params["lo"])
        slots *= int(params["a"])
        slots += int(params["c"])
        slots %= size
        cum = np.asarray(params["cum"], dtype=np.int64)
    else:
        slots = np.asarray(rng.random(n), dtype=np.float64)
        cum = np.asarray(params["cum_pi"], dtype=np.float64)
    j = _count_at_or_below(cum, slots)
    j -= 1
    np.minimum(j, b - 1, out=j)
    np.right_shift(codes, j, out=codes)
    codes &= 1
    eps = params.get("epsilon_bit")
    if eps is not None:
        keep = np.asarray(rng.random(n)) < RandomizedResponse(epsilon=eps).keep_probability
        codes = np.equal(codes, keep)  # the bit if kept, flipped otherwise (bits are 0 or 1)
    # one count of the cells 2 j + reported bit: the reported ones and the clients of each bit
    j *= 2
    j += codes
    cells = np.bincount(j, minlength=2 * b).reshape(b, 2)
    if exact:
        return cells[:, 1].astype(np.int64)
    return np.concatenate([cells.sum(axis=1), cells[:, 1]]).astype(np.int64)


def _code_histogram(
    values: np.ndarray, counts: np.ndarray, params: Mapping[str, Any], rng: RNG
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct codes and their counts for clients holding ``values`` (randomized rounding in aggregate).

    A client with value ``x`` rounds ``y = (x - offset) / resolution`` up with probability ``frac(y)``,
    so the clients holding ``x`` split Binomial(count, frac) up, the rest down.
    """
    from fedstats.engine.aggregate import binomial

    v, _ = enforce_range(
        values,
        params["low"],
        params["high"],
        params["out_of_range"],
        name=f"{params['column']} values",
    )
    if params.get("center") is not None:
        v = (v - params["center"]) ** 2
    y = (v - params["offset"]) / params["resolution"]
    fl = np.floor(y)
    up = binomial(rng, counts, y - fl)
    codes = np.clip(np.concatenate([fl, fl + 1]), 0, params["max_code"]).astype(np.int64)
    weights = np.concatenate([counts - up, up])
    uniq, inv = np.unique(codes, return_inverse=True)
    return uniq, np.bincount(inv.ravel(), weights=weights, minlength=uniq.size).astype(np.int64)


def slot_classes(params: Mapping[str, Any]) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """The bits a client reports, by slot class, and each class's share of the clients.

    Exact allocation: a client at public position ``p`` in ``[0, size)`` reports the bits whose cumulative
    counts contain ``p, p + size, ..., p + (s - 1) size``; the tuple changes only where one of these crosses
    a cumulative count, so the classes are the intervals between those points, weighted by their number of
    positions. Random allocation: a client draws ``u`` uniform in [0, 1) and reports the bits at ``u + k``,
    so the classes are the intervals of ``u`` between the fractional cumulative probabilities, weighted by
    their lengths.

    Parameters
    ----------
    params : Mapping
        A bit-pushing round's parameters (:func:`encode_bits`).

    Returns
    -------
    (list of tuple of int, numpy.ndarray)
        Each class's ``s`` distinct bit indices, and its clients (int64 counts summing to ``size``) or
        probability (float64, summing to 1).
    """
    b = int(params["bit_depth"])
    s = int(params["bits_per_client"])
    exact = params["allocation"] == "exact"
    if exact:
        cum: np.ndarray = np.asarray(params["cum"], dtype=np.float64)
        width = float(params["size"])
    else:
        cum = np.asarray(params["cum_pi"], dtype=np.float64)
        width = 1.0
    cuts = {0.0, width}
    for k in range(s):
        cuts |= {float(v) - k * width for v in cum if 0.0 < float(v) - k * width < width}
    edges = np.array(sorted(cuts))
    weights = np.diff(edges)
    # float cumulative probabilities leave slivers (2e-16 wide) where the encoder's own bits collide:
    # a probability far below any Monte Carlo resolution, left out
    keep = weights > (0.0 if exact else 1e-12)
    # each class read at its midpoint: no rounding of a cut can move a slot onto a neighbouring bit
    mids = ((edges[:-1] + edges[1:]) / 2.0)[keep]
    weights = weights[keep]
    slots = mids[:, None] + width * np.arange(s)[None, :]
    j = np.minimum(
        np.searchsorted(cum, slots.ravel(), side="right").reshape(slots.shape) - 1, b - 1
    )
    tuples = [tuple(int(x) for x in row) for row in j]
    out_w: np.ndarray = np.rint(weights).astype(np.int64) if exact else weights
    return tuples, out_w


def _several_bits(
    hist: InputHistogram, params: Mapping[str, Any], rng: RNG, b: int, s: int, exact: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Clients and true ones per bit when every client reports ``s > 1`` bits (see :func:`aggregate_bits`)."""
    from fedstats.engine.aggregate import multinomial, split_cohort, split_inputs
    from fedstats.errors import ParameterError

    col = params["column"]
    tuples, weights = slot_classes(params)
    if any(len(set(t)) != s for t in tuples):  # pragma: no cover - the allocation caps pi_j at 1
        raise ParameterError("bits_per_client", s, "an allocation giving each client distinct bits")
    assigned = np.zeros(b, dtype=np.int64)
    ones = np.zeros(b, dtype=np.int64)
    if exact:
        per_input = split_cohort(hist, weights, rng)  # (k, classes): clients of input i in class c
        values = np.asarray(split_inputs(hist)[col], dtype=np.float64)
        for c, bits in enumerate(tuples):
            if not per_input[:, c].any():
                continue
            codes, counts = _code_histogram(values, per_input[:, c], params, rng)
            for j in bits:
                assigned[j] += counts.sum()
                ones[j] += counts[((codes >> j) & 1) == 1].sum()
        return assigned, ones
    codes, counts = _code_histogram(
        np.asarray(hist.column(col), dtype=np.float64), hist.counts, params, rng
    )
    w = np.asarray(weights, dtype=np.float64)
    per_code = multinomial(rng, counts, np.broadcast_to(w / w.sum(), (codes.size, w.size)))
    for c, bits in enumerate(tuples):
        for j in bits:
            assigned[j] += per_code[:, c].sum()
            ones[j] += per_code[((codes >> j) & 1) == 1, c].sum()
    return assigned, ones


def aggregate_bits(hist: InputHistogram, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Aggregate form of :func:`encode_bits`: the round's sum drawn per distinct input (aggregate route).

    Clients with the same code are i.i.d. given the allocation, so (one bit per client): with the random
    allocation each code's clients spread over the bits Multinomial(count, p); with the exact allocation
    the public assignment of clients to bits is a uniform random split of the cohort into the public counts
    (:func:`fedstats.engine.aggregate.split_cohort`); then the reported ones of bit ``j`` are randomized
    response over the true ones and zeros among its clients. With ``s > 1`` bits per client (Corollary 2)
    the same holds per *slot class*: the clients whose ``s`` slots fall on the same ``s`` bits
    (:func:`slot_classes`); a client's code is drawn once and read at each of its bits, and randomized
    response is independent per reported bit. Equal in distribution to the per-client sum.

    Parameters
    ----------
    hist : InputHistogram
        Distinct values of ``params["column"]`` and their counts.
    params : Mapping
        As for :func:`encode_bits`.
    rng : RNG
        The round's generator.

    Returns
    -------
    numpy.ndarray of int64, shape (b,) or (2 b,)
        What :func:`encode_bits`' reports sum to.

    """
    from fedstats.engine.aggregate import (
        multinomial,
        randomized_response_sum,
        split_cohort,
        split_inputs,
    )

    b = int(params["bit_depth"])
    s = int(params["bits_per_client"])
    col = params["column"]
    exact = params["allocation"] == "exact"
    if s > 1:
        assigned, ones = _several_bits(hist, params, rng, b, s, exact)
    elif exact:
        cum = np.asarray(params["cum"], dtype=np.int64)
        per_input = split_cohort(hist, np.diff(cum), rng)  # (k, b): clients of input i on bit j
        values = np.asarray(split_inputs(hist)[col], dtype=np.float64)
        # each sub-cohort's clients round independently: codes per (input, bit)
        assigned = np.zeros(b, dtype=np.int64)
        ones = np.zeros(b, dtype=np.int64)
        for j in range(b):
            if not per_input[:, j].any():
                continue
            codes, counts = _code_histogram(values, per_input[:, j], params, rng)
            assigned[j] = counts.sum()
            ones[j] = counts[((codes >> j) & 1) == 1].sum()
    else:
        codes, counts = _code_histogram(
            np.asarray(hist.column(col), dtype=np.float64), hist.counts, params, rng
        )
        pi = np.diff(np.asarray(params["cum_pi"], dtype=np.float64))
        per_code = multinomial(rng, counts, np.broadcast_to(pi / pi.sum(), (codes.size, b)))
        assigned = per_code.sum(axis=0)
        ones = (per_code * ((codes[:, None] >> np.arange(b)[None, :]) & 1)).sum(axis=0)
    eps = params.get("epsilon_bit")
    if eps is not None:
        keep = RandomizedResponse(epsilon=eps).keep_probability
        ones = randomized_response_sum(rng, ones, assigned - ones, keep)
    if exact:
        out: np.ndarray = ones.astype(np.int64)
        return out
    return np.concatenate([assigned, ones]).astype(np.int64)
