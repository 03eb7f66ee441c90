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

import os
from collections.abc import Sequence

from fedstats.errors import ParameterError, ProtocolAbortError, SecurityError

__all__ = ["FIELD_PRIME", "SECRET_BYTES", "SHARE_BYTES", "reconstruct_secret", "split_secret"]

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
    coeffs += [_random_field_element() for _ in range(threshold - 1)]
    rev = coeffs[::-1]
    shares = []
    for x in xs:
        acc = 0
        for c in rev:  # Horner
            acc = (acc * x + c) % p
        shares.append(acc)
    return shares


def _lagrange_at_zero(xs: Sequence[int]) -> list[int]:
    """Lagrange basis values ``l_j(0) = prod_{m != j} x_m / (x_m - x_j)`` modulo p."""
    p = FIELD_PRIME
    num = 1
    for x in xs:
        num *= x
    dens = []
    for j, xj in enumerate(xs):
        d = xj
        for m, xm in enumerate(xs):
            if m != j:
                d *= xm - xj
        dens.append(d % p)
    # Montgomery batch inversion: one pow(., -1, p) for all denominators.
    prefix = [1] * (len(dens) + 1)
    for j, d in enumerate(dens):
        prefix[j + 1] = prefix[j] * d % p
    inv_all = pow(prefix[-1], -1, p)
    coeffs = [0] * len(dens)
    for j in range(len(dens) - 1, -1, -1):
        coeffs[j] = inv_all * prefix[j] % p * num % p
        inv_all = inv_all * dens[j] % p
    return coeffs


def reconstruct_secret(shares: Sequence[tuple[int, int]], *, threshold: int) -> bytes:
    """Recover a 32-byte secret from exactly ``threshold`` shares (the first ``threshold`` given).

    Parameters
    ----------
    shares : sequence of (int, int)
        ``(x, f(x))`` pairs with distinct ``x``; at least ``threshold`` of them. Only the first
        ``threshold`` are used (Bell et al. 2020, Alg. 2 step 8: the shares from the lowest client ids).
    threshold : int
        ``t``, the polynomial degree plus one.

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
    lam = _lagrange_at_zero(xs)
    s = sum(li * y for li, (_, y) in zip(lam, used, strict=True)) % FIELD_PRIME
    if s >= 1 << (8 * SECRET_BYTES):
        # Wrong or inconsistent shares give a random field element, almost never < 2^256.
        raise SecurityError(
            "reconstructed value is not a 32-byte secret: the shares are inconsistent"
        )
    return s.to_bytes(SECRET_BYTES, "little")
