"""Polynomials of the FLP (draft-irtf-cfrg-vdaf-20, §6.1.3, §7.3): lengths, NTTs, Lagrange weights.

Polynomials are in the Lagrange basis, as in the draft: a wire polynomial is given by its ``P`` values at the
powers of a ``P``-th root of unity, the gadget polynomial by its values at the powers of an ``M``-th root.
Evaluations at a point ``t`` use the barycentric weights of :func:`lagrange_weights`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fedstats.vdaf.field import Field, FieldArray, next_power_of_2

__all__ = ["gadget_poly_len", "inv_ntt", "lagrange_weights", "ntt", "wire_poly_len"]

IntArray = npt.NDArray[np.int64]


def wire_poly_len(calls: int) -> int:
    """Values per wire polynomial: ``next_power_of_2(1 + calls)`` (§7.3.3)."""
    return next_power_of_2(1 + calls)


def gadget_poly_len(degree: int, wire_len: int) -> int:
    """Values of the gadget polynomial in the proof: ``degree * (wire_len - 1) + 1`` (§7.3.3)."""
    return degree * (wire_len - 1) + 1


# --- NTT and Lagrange-basis helpers (vectorized over all leading axes) ---------------------------


def _bitrev_perm(n: int) -> IntArray:
    bits = n.bit_length() - 1
    return np.array(
        [int(f"{i:0{bits}b}"[::-1], 2) if bits else 0 for i in range(n)], dtype=np.int64
    )


def ntt(field: type[Field], coeffs: FieldArray, n: int) -> FieldArray:
    """Evaluate polynomials (coefficients on the last axis, zero-padded to ``n``) at ``root(n) ** i``.

    Parameters
    ----------
    field : type[Field]
    coeffs : numpy.ndarray
        Shape ``(..., k)`` with ``k <= n``: monomial coefficients, lowest degree first.
    n : int
        A power of two dividing the field's ``GEN_ORDER``.

    Returns
    -------
    numpy.ndarray
        Shape ``(..., n)``: ``[P(w ** i) for i in range(n)]``, ``w = field.root(n)`` (§6.1.2, ``ntt``).
    """
    lead = coeffs.shape[:-1]
    k = coeffs.shape[-1]
    if k < n:
        coeffs = np.concatenate([coeffs, field.zeros((*lead, n - k))], axis=-1)
    x = coeffs[..., _bitrev_perm(n)]
    h = 1
    while h < n:
        blocks = x.reshape(*lead, n // (2 * h), 2, h)
        u = blocks[..., 0, :]
        b = blocks[..., 1, :]
        if h == 1:
            v = b
        else:  # the first twiddle is 1: multiply only the others
            v = np.concatenate(
                [b[..., :1], field.mul(b[..., 1:], _twiddles(field, h)[1:])], axis=-1
            )
        # sums and differences stay unreduced (Field128) until the next product or the end
        x = np.stack([field.add_lazy(u, v), field.sub_lazy(u, v)], axis=-2).reshape(*lead, n)
        h *= 2
    return field.reduce(x)


_CACHE: dict[tuple[str, str, int], FieldArray] = {}


def _twiddles(field: type[Field], h: int) -> FieldArray:
    """``[root(2h) ** j for j < h]`` (cached)."""
    key = ("twiddles", field.NAME, h)
    if key not in _CACHE:
        _CACHE[key] = field.array(field.root_powers(2 * h)[:h])
    return _CACHE[key]


def _coset_twist(field: type[Field], n: int) -> FieldArray:
    """``[s ** k / n for k < n]``, ``s = root(2n)``: moves coefficients to the odd coset, with INTT's 1/n."""
    key = ("twist", field.NAME, n)
    if key not in _CACHE:
        p = field.MODULUS
        inv_n = pow(n, p - 2, p)
        _CACHE[key] = field.array([w * inv_n % p for w in field.root_powers(2 * n)[:n]])
    return _CACHE[key]


def inv_ntt(field: type[Field], values: FieldArray) -> FieldArray:
    """Monomial coefficients of the polynomials given by their values at ``root(n) ** i`` (last axis)."""
    n = values.shape[-1]
    out = ntt(field, values, n)
    order = (-np.arange(n)) % n
    inv_n = pow(n, field.MODULUS - 2, field.MODULUS)
    return field.mul(out[..., order], field.array([inv_n]))


def lagrange_weights(field: type[Field], t: FieldArray, n: int) -> FieldArray:
    """Weights ``w`` with ``P(t) = sum_i w_i P(root(n) ** i)`` for every ``P`` of degree ``< n``.

    Parameters
    ----------
    t : numpy.ndarray
        Shape ``(r,)``: one evaluation point per report.
    n : int
        Power of two.

    Returns
    -------
    numpy.ndarray
        Shape ``(r, n)``.
    """
    nodes = field.root_powers(n)
    r = t.shape[0]
    d = field.sub(t[:, None], field.array(nodes)[None, :])  # t - alpha^j
    pre = field.zeros((r, n))
    suf = field.zeros((r, n))
    one = field.constant(1, (r,))
    pre[:, 0] = one
    suf[:, n - 1] = one
    for i in range(1, n):
        pre[:, i] = field.mul(pre[:, i - 1], d[:, i - 1])
        suf[:, n - 1 - i] = field.mul(suf[:, n - i], d[:, n - i])
    inv_n = pow(n, field.MODULUS - 2, field.MODULUS)
    scale = field.array([a * inv_n % field.MODULUS for a in nodes])
    return field.mul(field.mul(pre, suf), scale[None, :])


def _extension_matrix(field: type[Field], m: int, big_m: int) -> list[list[int]]:
    """Rows r: the weights giving P(x_{m+r}) from P(x_0..x_{m-1}), deg P < m, x_i = root(M) ** i."""
    p = field.MODULUS
    xs = field.root_powers(big_m)
    denom = []
    for i in range(m):
        acc = 1
        for j in range(m):
            if j != i:
                acc = acc * (xs[i] - xs[j]) % p
        denom.append(pow(acc, p - 2, p))
    rows = []
    for r in range(m, big_m):
        x = xs[r]
        full = 1
        for j in range(m):
            full = full * (x - xs[j]) % p
        rows.append([full * pow(x - xs[i], p - 2, p) % p * denom[i] % p for i in range(m)])
    return rows
