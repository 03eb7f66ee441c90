"""Shamir secret sharing of 32-byte secrets over the prime field GF(2^521 - 1).

A secret ``s`` (a 32-byte seed or an X25519 private key, read as a little-endian integer < 2^256) is the
constant term of a random polynomial ``f`` of degree ``t - 1``; share ``j`` is ``f(x_j)`` for a non-zero,
distinct public abscissa ``x_j`` (fedstats uses the receiving client's index + 1). Any ``t`` shares give
``s = f(0)`` by Lagrange interpolation; ``t - 1`` shares are independent of ``s`` (Shamir 1979).

Only small secrets are shared (two per client per session), so plain Python integers are fast enough; the
Lagrange coefficients at 0 use one modular inversion per reconstruction (Montgomery's batch inversion).

Examples
--------
>>> shares = split_secret(bytes(range(32)), threshold=3, xs=[1, 2, 5, 9])
>>> reconstruct_secret([(2, shares[1]), (5, shares[2]), (9, shares[3])], threshold=3) == bytes(range(32))
True
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from fedstats.errors import ParameterError, ProtocolAbortError, SecurityError

__all__ = [
    "FIELD_PRIME",
    "SECRET_BYTES",
    "SHARE_BYTES",
    "lagrange_bases",
    "reconstruct_secret",
    "robust_reconstruct",
    "split_secret",
]

FIELD_PRIME = (1 << 521) - 1
"""The Mersenne prime 2^521 - 1: every 32-byte secret is a field element."""
SECRET_BYTES = 32
SHARE_BYTES = 66
"""Bytes of one serialized share (a field element, little-endian)."""
_TOP_MASK = (1 << 521) - 1


def _random_field_element() -> int:
    """A uniform element of GF(p) from OS entropy, by rejection (rejection probability 2^-521)."""
    while True:
        v = int.from_bytes(os.urandom(SHARE_BYTES), "little") & _TOP_MASK
        if v < FIELD_PRIME:
            return v


def _random_field_elements(count: int) -> list[int]:
    """``count`` uniform elements of GF(p), from one read of OS entropy (each rejected one drawn again).

    One ``os.urandom`` call instead of one per coefficient: each call releases the GIL, which costs far
    more than the read when many simulated devices share a process.
    """
    raw = os.urandom(SHARE_BYTES * count) if count > 0 else b""
    out = []
    for j in range(count):
        v = int.from_bytes(raw[j * SHARE_BYTES : (j + 1) * SHARE_BYTES], "little") & _TOP_MASK
        out.append(v if v < FIELD_PRIME else _random_field_element())
    return out


def split_secret(secret: bytes, *, threshold: int, xs: Sequence[int]) -> list[int]:
    """Split a 32-byte secret into shares, any ``threshold`` of which reconstruct it.

    Parameters
    ----------
    secret : bytes
        Exactly 32 bytes.
    threshold : int
        ``t`` in ``[1, len(xs)]``: the polynomial has degree ``t - 1``.
    xs : sequence of int
        Distinct abscissae in ``[1, 2^32)``, one per share (the receivers' indices + 1).

    Returns
    -------
    list of int
        ``f(x)`` for each ``x`` in ``xs``, field elements in ``[0, 2^521 - 1)``.

    Raises
    ------
    ParameterError
        If the secret is not 32 bytes, the threshold is out of range or the abscissae are not distinct
        positive integers.
    """
    if len(secret) != SECRET_BYTES:
        raise ParameterError("secret", f"<{len(secret)} bytes>", "exactly 32 bytes")
    if not 1 <= threshold <= len(xs):
        raise ParameterError("threshold", threshold, f"an integer in [1, {len(xs)}]")
    if len(set(xs)) != len(xs) or any(x <= 0 or x >= 1 << 32 for x in xs):
        raise ParameterError("xs", list(xs), "distinct integers in [1, 2**32)")
    p = FIELD_PRIME
    coeffs = [int.from_bytes(secret, "little")]
    coeffs += _random_field_elements(threshold - 1)
    rev = coeffs[::-1]
    shares = []
    for x in xs:
        acc = 0
        for c in rev:  # Horner over the integers (x < 2^32: acc grows 32 bits a step), reduced once
            acc = acc * x + c
        shares.append(acc % p)
    return shares


def _fold(v: int) -> int:
    """``v mod p`` for ``0 <= v < p^2`` by the Mersenne form of p (two folds of 521 bits, no division)."""
    v = (v & FIELD_PRIME) + (v >> 521)
    v = (v & FIELD_PRIME) + (v >> 521)
    return v - FIELD_PRIME if v >= FIELD_PRIME else v


def _denominators(xs: tuple[int, ...]) -> list[int]:
    """``x_j * prod_{m != j} (x_m - x_j)`` for each ``j``, as Python integers (not reduced).

    The ``t (t + 1)`` factors are formed in one int64 array and multiplied in groups whose products
    stay below 2^63 (exact), so only ``t (t + 1) / g`` products are Python big-integer ones, where
    ``g = floor(63 / b)`` and ``b`` bits bound every factor (abscissae below 2^31: ``g >= 2``; client
    indices + 1 below 2^10 at n = 1,000: ``g = 6``). Abscissae of 2^62 or more (not the callers') take
    the product one factor at a time.
    """
    t = len(xs)
    if max(xs) >= 1 << 62:
        return [
            xj * math.prod([xm - xj for m, xm in enumerate(xs) if m != j])
            for j, xj in enumerate(xs)
        ]
    a = np.asarray(xs, dtype=np.int64)
    factors = np.empty((t, t + 1), dtype=np.int64)
    factors[:, 0] = a
    factors[:, 1:] = a[None, :] - a[:, None]  # [j, 1 + m] = x_m - x_j
    factors[np.arange(t), np.arange(t) + 1] = 1  # m == j is not a factor
    bits = int(np.abs(factors).max()).bit_length()
    g = max(1, 63 // bits)
    cols = -(-(t + 1) // g) * g
    if cols != t + 1:
        factors = np.concatenate([factors, np.ones((t, cols - t - 1), dtype=np.int64)], axis=1)
    rows = factors.reshape(t, cols // g, g).prod(axis=2).tolist()
    return [math.prod(r) for r in rows]


def _prefix_products(xs: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """The denominators of :func:`_lagrange_at_zero` modulo p and their prefix products ``[1, d_0, ...]``."""
    p = FIELD_PRIME
    dens = [d % p for d in _denominators(xs)]
    # (the products below are < p^2: reduced by two Mersenne folds, :func:`_fold` inlined)
    prefix = [1] * (len(dens) + 1)
    for j, d in enumerate(dens):
        v = prefix[j] * d
        v = (v & p) + (v >> 521)
        v = (v & p) + (v >> 521)
        prefix[j + 1] = v - p if v >= p else v
    return dens, prefix


@functools.lru_cache(maxsize=64)
def _lagrange_at_zero(xs: tuple[int, ...]) -> tuple[int, ...]:
    """Lagrange basis values ``l_j(0) = prod_{m != j} x_m / (x_m - x_j)`` modulo p.

    Cached by abscissae: reconstructions from the same senders (a complete graph, or a session's
    survivors) share them.
    """
    # Montgomery batch inversion: one pow(., -1, p) for all denominators; the running inverse carries
    # the common numerator, so l_j(0) = num / d_j is one product
    dens, prefix = _prefix_products(xs)
    return _basis(xs, dens, prefix, pow(prefix[-1], -1, FIELD_PRIME))


def lagrange_bases(xss: Iterable[tuple[int, ...]]) -> dict[tuple[int, ...], tuple[int, ...]]:
    """:func:`_lagrange_at_zero` of many abscissae tuples, with one modular inversion for all of them.

    For the server's unmasking: each secret is shared among the client's own neighbours, so no two
    secrets of a sparse graph share abscissae, and this saves the one inversion per secret that the
    cache cannot (Montgomery's trick across the secrets' products of denominators).

    Parameters
    ----------
    xss : iterable of tuple of int
        Abscissae tuples; those that are not distinct integers in ``[1, 2^32)`` are left out (a
        reconstruction from them computes its own, or raises, as before).

    Returns
    -------
    dict
        Abscissae tuple -> its Lagrange basis values at 0 modulo p (pass it to
        :func:`robust_reconstruct`).
    """
    p = FIELD_PRIME
    todo = [
        xs
        for xs in dict.fromkeys(xss)
        if xs and len(set(xs)) == len(xs) and min(xs) > 0 and max(xs) < 1 << 32
    ]
    if not todo:
        return {}
    parts = [_prefix_products(xs) for xs in todo]
    products = [prefix[-1] for _, prefix in parts]
    # Montgomery's trick again, over the secrets: inverse of every product from one pow
    running = [1] * (len(products) + 1)
    for i, v in enumerate(products):
        running[i + 1] = _fold(running[i] * v)
    inv = pow(running[-1], -1, p)
    inverses = [0] * len(products)
    for i in range(len(products) - 1, -1, -1):
        inverses[i] = _fold(inv * running[i])
        inv = _fold(inv * products[i])
    return {
        xs: _basis(xs, dens, prefix, inverse)
        for xs, (dens, prefix), inverse in zip(todo, parts, inverses, strict=True)
    }


def _basis(
    xs: tuple[int, ...], dens: list[int], prefix: list[int], inverse: int
) -> tuple[int, ...]:
    """Lagrange basis values at 0 from the denominators, their prefix products and the last's inverse."""
    p = FIELD_PRIME
    inv_all = _fold(inverse * (math.prod(xs) % p))  # num / (d_0 ... d_{t-1})
    coeffs = [0] * len(dens)
    for j in range(len(dens) - 1, -1, -1):
        v = inv_all * prefix[j]
        v = (v & p) + (v >> 521)
        v = (v & p) + (v >> 521)
        coeffs[j] = v - p if v >= p else v
        v = inv_all * dens[j]
        v = (v & p) + (v >> 521)
        v = (v & p) + (v >> 521)
        inv_all = v - p if v >= p else v
    return tuple(coeffs)


def reconstruct_secret(
    shares: Sequence[tuple[int, int]],
    *,
    threshold: int,
    bases: Mapping[tuple[int, ...], tuple[int, ...]] | None = None,
) -> bytes:
    """Recover a 32-byte secret from exactly ``threshold`` shares (the first ``threshold`` given).

    Parameters
    ----------
    shares : sequence of (int, int)
        ``(x, f(x))`` pairs with distinct ``x``; at least ``threshold`` of them. Only the first
        ``threshold`` are used (Bell et al. 2020, Alg. 2 step 8: the shares from the lowest client ids).
    threshold : int
        ``t``, the polynomial degree plus one.
    bases : mapping, optional
        Lagrange basis values already computed (:func:`lagrange_bases`), by abscissae.

    Returns
    -------
    bytes
        The 32-byte secret.

    Raises
    ------
    ProtocolAbortError
        If fewer than ``threshold`` shares are given.
    ParameterError
        If the abscissae are not distinct or a share is not a field element.
    SecurityError
        If the interpolated value is not below 2^256 (inconsistent or tampered shares). Callers also
        check the secret against a commitment or public key.
    """
    if len(shares) < threshold:
        raise ProtocolAbortError(
            f"only {len(shares)} shares available, {threshold} needed to reconstruct a secret"
        )
    used = list(shares[:threshold])
    xs = [x for x, _ in used]
    if len(set(xs)) != len(xs) or any(x <= 0 for x in xs):
        raise ParameterError("shares", xs, "distinct positive abscissae")
    if any(not 0 <= y < FIELD_PRIME for _, y in used):
        raise ParameterError("shares", "<share value>", "field elements in [0, 2**521 - 1)")
    key = tuple(xs)
    lam = bases.get(key) if bases is not None else None
    if lam is None:
        lam = _lagrange_at_zero(key)
    s = sum(li * y for li, (_, y) in zip(lam, used, strict=True)) % FIELD_PRIME
    if s >= 1 << (8 * SECRET_BYTES):
        # Wrong or inconsistent shares give a random field element, almost never < 2^256.
        raise SecurityError(
            "reconstructed value is not a 32-byte secret: the shares are inconsistent"
        )
    return s.to_bytes(SECRET_BYTES, "little")


def _solve_mod(rows: list[list[int]], n_unknowns: int) -> list[int] | None:
    """Solve the linear system ``rows`` over GF(p) by Gaussian elimination.

    Each row holds ``n_unknowns`` coefficients and the right-hand side; free variables are set to 0.
    Returns one solution, or None when the system is inconsistent.
    """
    p = FIELD_PRIME
    a = [r[:] for r in rows]
    pivots: list[int] = []
    r = 0
    for c in range(n_unknowns):
        piv = next((i for i in range(r, len(a)) if a[i][c] % p), None)
        if piv is None:
            continue
        a[r], a[piv] = a[piv], a[r]
        inv = pow(a[r][c], -1, p)
        a[r] = [v * inv % p for v in a[r]]
        for i in range(len(a)):
            if i != r and a[i][c]:
                f = a[i][c]
                a[i] = [(vi - f * vr) % p for vi, vr in zip(a[i], a[r], strict=True)]
        pivots.append(c)
        r += 1
        if r == len(a):
            break
    if any(row[-1] % p and not any(row[:-1]) for row in a[r:]):
        return None
    sol = [0] * n_unknowns
    for i, c in enumerate(pivots):
        sol[c] = a[i][-1]
    return sol


def _berlekamp_welch(points: Sequence[tuple[int, int]], threshold: int) -> list[int] | None:
    """Decode a Shamir sharing with errors (Berlekamp-Welch).

    Returns the coefficients of the degree < ``threshold`` polynomial through all but at most
    ``e = (m - threshold) // 2`` of the points, or None when no such polynomial exists.
    """
    p = FIELD_PRIME
    m = len(points)
    e = (m - threshold) // 2
    nq = threshold + e
    rows = []
    for x, y in points:
        pw = [1] * (nq + 1)
        for j in range(1, nq + 1):
            pw[j] = pw[j - 1] * x % p
        rows.append(pw[:nq] + [(-y * pw[d]) % p for d in range(e)] + [y * pw[e] % p])
    sol = _solve_mod(rows, nq + e)
    if sol is None:
        return None
    q = sol[:nq]
    err = [*sol[nq:], 1]  # monic E of degree e
    # P = Q / E by long division (E monic); the remainder must vanish.
    rem = q[:]
    quot = [0] * max(1, nq - e)
    for d in range(nq - 1, e - 1, -1):
        c = rem[d] % p
        quot[d - e] = c
        if c:
            for j in range(e + 1):
                rem[d - e + j] = (rem[d - e + j] - c * err[j]) % p
    if any(v % p for v in rem[:e]):
        return None
    return quot[:threshold]


def robust_reconstruct(
    shares: Sequence[tuple[int, int]],
    *,
    threshold: int,
    check: Callable[[bytes], bool],
    bases: Mapping[tuple[int, ...], tuple[int, ...]] | None = None,
) -> tuple[bytes, set[int]]:
    """Reconstruct a secret despite wrong shares, and name the abscissae of the wrong ones.

    The ``threshold`` shares with the lowest abscissae are tried first (Bell et al. 2020, Alg. 2 step 8);
    when the result fails ``check`` (a commitment or public-key test), Berlekamp-Welch decoding over all
    shares corrects up to ``(m - threshold) // 2`` wrong ones (Reed-Solomon decoding of Shamir shares,
    McEliece and Sarwate 1981), and every share off the decoded polynomial is reported. Values that are
    not field elements are wrong shares from the start.

    Parameters
    ----------
    shares : sequence of (int, int)
        ``(x, y)`` pairs with distinct positive ``x`` (any ``y``; non-field values count as wrong).
    threshold : int
        ``t``.
    check : callable
        ``check(secret) -> bool``: True for the genuine secret.
    bases : mapping, optional
        As in :func:`reconstruct_secret`.

    Returns
    -------
    secret : bytes
        32 bytes, accepted by ``check``.
    bad : set of int
        Abscissae of the shares identified as wrong (empty when the first ``t`` were right).

    Raises
    ------
    ProtocolAbortError
        Too few valid shares, or too many wrong ones to decode.
    """
    valid = sorted((x, y) for x, y in shares if 0 <= y < FIELD_PRIME)
    bad = {x for x, y in shares if not 0 <= y < FIELD_PRIME}
    if len(valid) < threshold:
        raise ProtocolAbortError(
            f"only {len(valid)} valid shares available, {threshold} needed to reconstruct a secret"
        )
    try:
        secret = reconstruct_secret(valid, threshold=threshold, bases=bases)
        if check(secret):
            return secret, bad
    except SecurityError:
        pass
    poly = _berlekamp_welch(valid, threshold) if len(valid) > threshold + 1 else None
    if poly is not None and poly[0] < 1 << (8 * SECRET_BYTES):
        secret = poly[0].to_bytes(SECRET_BYTES, "little")
        if check(secret):
            p = FIELD_PRIME
            for x, y in valid:
                acc = 0
                for c in reversed(poly):
                    acc = (acc * x + c) % p
                if acc != y:
                    bad.add(x)
            return secret, bad
    raise ProtocolAbortError(
        f"the {len(valid)} shares of a secret hold too many wrong values to reconstruct it"
    )
