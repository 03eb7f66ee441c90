"""The fully linear proof of Prio3 (FlpBBCGGI19) and its validity circuits, vectorized over reports.

Source: draft-irtf-cfrg-vdaf-20, §7.3 (the FLP: validity circuits §7.3.2, proving §7.3.3, querying
§7.3.4, deciding §7.3.5), §7.4 (the circuits Count, Sum, SumVec, Histogram, MultihotCountVec) and
Appendix A (the gadgets Mul, PolyEval, ParallelSum); Boneh, Boyle, Corrigan-Gibbs, Gilboa, Ishai (2019),
"Zero-knowledge proofs on secret-shared data via fully linear PCPs", CRYPTO 2019, Theorem 4.3.

Every function takes arrays whose first axis runs over reports: a measurement (share) is ``(n, MEAS_LEN)``,
joint randomness ``(n, JOINT_RAND_LEN)``, a proof ``(n, PROOF_LEN)``, a verifier ``(n, VERIFIER_LEN)``.

How the circuits are evaluated here. All five circuits call a single gadget (``Mul``, ``PolyEval`` or
``ParallelSum(Mul)``) ``calls`` times on inputs that are affine in the measurement and the joint
randomness, never on an earlier gadget's output. So a circuit is two vectorized maps: ``gadget_inputs``
gives the ``(n, calls, ARITY)`` inputs of every call at once, and ``combine`` turns the ``(n, calls)``
gadget outputs into the circuit's ``EVAL_OUTPUT_LEN`` outputs. Polynomials are in the Lagrange basis, as
in the draft: a wire polynomial is given by its ``P`` values at the powers of a ``P``-th root of unity
(value 0 is the wire seed, value ``k`` the ``k``-th call's input), and the gadget polynomial by its values at
the powers of an ``M``-th root, ``M = next_power_of_2(gadget_poly_len)``, of which the proof carries the
first ``gadget_poly_len``. Evaluations at the query point ``t`` use the barycentric weights
``w_i(t) = (alpha^i / P) * prod_{j != i} (t - alpha^j)`` (from prefix and suffix products: no inversion),
which are what the draft's ``poly_eval_batched`` computes (§6.1.3.2).
"""

# The circuits implement one interface (gadget_inputs, combine, decode) whose arguments not every
# circuit needs, as in the draft (§7.3.2).
# ruff: noqa: ARG002

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from fedstats.errors import ParameterError
from fedstats.vdaf.field import Field, FieldArray, next_power_of_2

__all__ = [
    "Circuit",
    "Count",
    "FlpBBCGGI19",
    "Gadget",
    "Histogram",
    "Mul",
    "MultihotCountVec",
    "ParallelSum",
    "PolyEval",
    "Sum",
    "SumVec",
    "gadget_poly_len",
    "wire_poly_len",
]

IntArray = npt.NDArray[np.int64]

PROVE_BLOCK = 2**16  # wire-array elements per block of reports when proving
QUERY_BLOCK = 2**20  # ... when querying


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


# --- gadgets (Appendix A) ----------------------------------------------------------------------


class Gadget(ABC):
    """A gadget: ``eval`` on values, ``eval_poly`` on polynomials given by their values (App. A).

    Abstract: :class:`Mul`, :class:`PolyEval` and :class:`ParallelSum` implement both.
    """

    ARITY: int
    DEGREE: int

    @abstractmethod
    def eval(self, field: type[Field], inp: FieldArray) -> FieldArray:
        """Evaluate on inputs of shape ``(..., ARITY)``; returns shape ``(...)``."""
        ...

    @abstractmethod
    def eval_poly(self, field: type[Field], wires: FieldArray, out_len: int) -> FieldArray:
        """The gadget polynomial's values at ``root(out_len) ** i``.

        ``wires`` has shape ``(..., ARITY, P)`` (values at the ``P``-th roots); returns ``(..., out_len)``.
        """
        ...


def _extend_wires(field: type[Field], wires: FieldArray, out_len: int) -> FieldArray:
    """Values of the wire polynomials at the ``out_len``-th roots (``out_len`` a multiple of ``P``).

    For ``out_len = 2P`` (every degree-2 gadget) the even positions are the given values and only the
    odd coset is computed: two size-``P`` transforms instead of one of size ``P`` and one of ``2P``
    (the draft's ``double_evaluations``, §6.1.3.2).
    """
    n = wires.shape[-1]
    if out_len != 2 * n:
        return ntt(field, inv_ntt(field, wires), out_len)
    raw = ntt(field, wires, n)[..., (-np.arange(n)) % n]  # n * coefficients
    odd = ntt(field, field.mul(raw, _coset_twist(field, n)), n)
    return np.stack([wires, odd], axis=-1).reshape(*wires.shape[:-1], 2 * n)


class Mul(Gadget):
    """``Mul(x, y) = x * y`` (App. A.1)."""

    ARITY = 2
    DEGREE = 2

    def eval(self, field: type[Field], inp: FieldArray) -> FieldArray:
        """``inp[..., 0] * inp[..., 1]``."""
        return field.mul(inp[..., 0], inp[..., 1])

    def eval_poly(self, field: type[Field], wires: FieldArray, out_len: int) -> FieldArray:
        """Pointwise product of the two extended wire polynomials."""
        ext = _extend_wires(field, wires, out_len)
        return field.mul(ext[..., 0, :], ext[..., 1, :])


class PolyEval(Gadget):
    """``PolyEval(x) = sum_k coeffs[k] x^k`` (App. A.2); Prio3Sum uses ``[0, -1, 1]``."""

    ARITY = 1

    def __init__(self, coeffs: list[int]) -> None:
        while len(coeffs) > 1 and coeffs[-1] == 0:
            coeffs = coeffs[:-1]
        self.coeffs = list(coeffs)
        self.DEGREE = len(self.coeffs) - 1

    def _horner(self, field: type[Field], x: FieldArray) -> FieldArray:
        acc = field.constant(self.coeffs[-1], np.shape(x))
        for c in reversed(self.coeffs[:-1]):
            acc = field.add(field.mul(acc, x), field.constant(c, np.shape(x)))
        return acc

    def eval(self, field: type[Field], inp: FieldArray) -> FieldArray:
        """The polynomial at ``inp[..., 0]``."""
        return self._horner(field, inp[..., 0])

    def eval_poly(self, field: type[Field], wires: FieldArray, out_len: int) -> FieldArray:
        """The polynomial applied pointwise to the extended wire polynomial."""
        return self._horner(field, _extend_wires(field, wires, out_len)[..., 0, :])


class ParallelSum(Gadget):
    """``ParallelSum(Mul, count)``: the sum of ``count`` products of consecutive input pairs (App. A.3)."""

    DEGREE = 2

    def __init__(self, count: int) -> None:
        self.count = count
        self.ARITY = 2 * count

    def eval(self, field: type[Field], inp: FieldArray) -> FieldArray:
        """``sum_j inp[..., 2j] * inp[..., 2j + 1]``."""
        return field.dot(inp[..., 0::2], inp[..., 1::2], axis=-1)

    def eval_poly(self, field: type[Field], wires: FieldArray, out_len: int) -> FieldArray:
        """Sum over the pairs of the pointwise products of the extended wire polynomials."""
        ext = _extend_wires(field, wires, out_len)
        return field.dot(ext[..., 0::2, :], ext[..., 1::2, :], axis=-2)


# --- validity circuits (§7.3.2, §7.4) ------------------------------------------------------------


class Circuit(ABC):
    """A validity circuit with one gadget, evaluated for many reports at once (§7.3.2).

    Abstract: :class:`Count`, :class:`Sum`, :class:`SumVec`, :class:`Histogram` and
    :class:`MultihotCountVec` implement its encoding, gadget inputs, output and decoding.

    Attributes
    ----------
    field : type[Field]
    MEAS_LEN, JOINT_RAND_LEN, OUTPUT_LEN, EVAL_OUTPUT_LEN : int
        As in the draft.
    gadget : Gadget
    calls : int
        How many times the circuit calls the gadget (``GADGET_CALLS[0]``).
    """

    field: type[Field]
    MEAS_LEN: int
    JOINT_RAND_LEN: int
    OUTPUT_LEN: int
    EVAL_OUTPUT_LEN: int
    gadget: Gadget
    calls: int

    @abstractmethod
    def encode(self, measurements: Any) -> FieldArray:
        """Encode measurements; returns ``(n, MEAS_LEN)``.

        Raises
        ------
        ParameterError
            If a measurement is outside the circuit's domain.
        """
        ...

    @abstractmethod
    def gadget_inputs(
        self, meas: FieldArray, joint_rand: FieldArray, num_shares: int
    ) -> FieldArray:
        """The inputs of every gadget call, ``(n, calls, ARITY)``."""
        ...

    @abstractmethod
    def combine(
        self, gadget_out: FieldArray, meas: FieldArray, joint_rand: FieldArray, num_shares: int
    ) -> FieldArray:
        """The circuit output ``(n, EVAL_OUTPUT_LEN)`` from the gadget outputs ``(n, calls)``."""
        ...

    @abstractmethod
    def truncate(self, meas: FieldArray) -> FieldArray:
        """The aggregatable output ``(n, OUTPUT_LEN)`` of (shares of) encoded measurements."""
        ...

    @abstractmethod
    def decode(self, agg: FieldArray, num_measurements: int) -> Any:
        """The aggregate result from the ``(OUTPUT_LEN,)`` aggregate."""
        ...

    def params(self) -> dict[str, int]:
        """The circuit's parameters, named as in the draft's test vectors."""
        return {}

    # helpers
    def _shares_inv(self, num_shares: int) -> int:
        p = self.field.MODULUS
        return pow(num_shares, p - 2, p)


def _range_checked_weights(max_measurement: int) -> list[int]:
    """Weights of the bits of ``encode_range_checked_int`` (§7.4.2): 1, 2, ..., 2^(b-2), last."""
    bits = max_measurement.bit_length()
    rest = 2 ** (bits - 1) - 1
    return [1 << i for i in range(bits - 1)] + [max_measurement - rest]


def _encode_range_checked(values: IntArray, max_measurement: int) -> IntArray:
    """Bits of ``encode_range_checked_int`` (§7.4.2) for an int array; shape ``(*values.shape, bits)``."""
    bits = max_measurement.bit_length()
    rest_all_ones = 2 ** (bits - 1) - 1
    last_weight = max_measurement - rest_all_ones
    v = np.asarray(values, dtype=object)
    high = v > rest_all_ones
    rest = np.where(high, v - last_weight, v)
    out = np.zeros((*v.shape, bits), dtype=np.int64)
    for i in range(bits - 1):
        out[..., i] = ((rest >> i) & 1).astype(np.int64)
    out[..., bits - 1] = high.astype(np.int64)
    return out


def _as_int_array(name: str, values: Any, shape_tail: tuple[int, ...]) -> Any:
    arr = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iuO":
        raise ParameterError(name, f"dtype {arr.dtype}", "integers")
    if arr.ndim != 1 + len(shape_tail) or arr.shape[1:] != shape_tail:
        raise ParameterError(
            name, f"shape {arr.shape}", f"shape (n, {', '.join(map(str, shape_tail))})"
        )
    if arr.dtype.kind == "O":
        for v in arr.ravel():
            if isinstance(v, (bool, np.bool_)):
                continue
            if not isinstance(v, (int, np.integer)):
                raise ParameterError(name, v, "integers")
    return arr


def _check_range(name: str, arr: Any, low: int, high: int) -> None:
    if arr.size and (bool((arr < low).any()) or bool((arr > high).any())):
        bad = arr[(arr < low) | (arr > high)].ravel()[0]
        raise ParameterError(name, int(bad), f"integers in [{low}, {high}]")


class Count(Circuit):
    """Prio3Count's circuit (§7.4.1): ``x * x - x == 0``, so x is 0 or 1. Field64 by default."""

    MEAS_LEN = 1
    JOINT_RAND_LEN = 0
    OUTPUT_LEN = 1
    EVAL_OUTPUT_LEN = 1

    def __init__(self, field: type[Field]) -> None:
        self.field = field
        self.gadget = Mul()
        self.calls = 1

    def encode(self, measurements: Any) -> FieldArray:
        """Measurements ``(n,)`` of 0/1 (or bools) to ``(n, 1)``."""
        arr = _as_int_array("measurement", measurements, ())
        _check_range("measurement", arr, 0, 1)
        return self.field.array(np.asarray(arr, dtype=np.int64).reshape(-1, 1))

    def gadget_inputs(
        self, meas: FieldArray, joint_rand: FieldArray, num_shares: int
    ) -> FieldArray:
        """One call: ``Mul(x, x)``."""
        return np.stack([meas[:, 0], meas[:, 0]], axis=-1)[:, None, :]

    def combine(
        self, gadget_out: FieldArray, meas: FieldArray, joint_rand: FieldArray, num_shares: int
    ) -> FieldArray:
        """``x^2 - x``."""
        return self.field.sub(gadget_out[:, 0], meas[:, 0])[:, None]

    def truncate(self, meas: FieldArray) -> FieldArray:
        """The encoded bit itself."""
        return meas

    def decode(self, agg: FieldArray, num_measurements: int) -> int:
        """The count of ones."""
        return int(self.field.to_ints(agg)[0])


class Sum(Circuit):
    """Prio3Sum's circuit (§7.4.2): each bit of the range-checked encoding satisfies ``b^2 - b == 0``.

    Parameters
    ----------
    field : type[Field]
    max_measurement : int
        Measurements lie in ``[0, max_measurement]``; ``max_measurement >= 1``.
    """

    JOINT_RAND_LEN = 0
    OUTPUT_LEN = 1

    def __init__(self, field: type[Field], max_measurement: int) -> None:
        if max_measurement < 1 or 2 ** max_measurement.bit_length() >= field.MODULUS:
            raise ParameterError(
                "max_measurement", max_measurement, f"an integer in [1, {field.NAME} range)"
            )
        self.field = field
        self.max_measurement = max_measurement
        self.bits = max_measurement.bit_length()
        self.MEAS_LEN = self.bits
        self.EVAL_OUTPUT_LEN = self.bits
        self.gadget = PolyEval([0, -1 % field.MODULUS, 1])
        self.calls = self.bits
        self._weights = field.array(_range_checked_weights(max_measurement))

    def encode(self, measurements: Any) -> FieldArray:
        """Measurements ``(n,)`` in ``[0, max_measurement]`` to ``(n, bits)``."""
        arr = _as_int_array("measurement", measurements, ())
        _check_range("measurement", arr, 0, self.max_measurement)
        return self.field.array(_encode_range_checked(arr, self.max_measurement))

    def gadget_inputs(
        self, meas: FieldArray, joint_rand: FieldArray, num_shares: int
    ) -> FieldArray:
        """Call ``i`` gets bit ``i``."""
        return meas[:, :, None]

    def combine(
        self, gadget_out: FieldArray, meas: FieldArray, joint_rand: FieldArray, num_shares: int
    ) -> FieldArray:
        """``b_i^2 - b_i`` for each bit (``EVAL_OUTPUT_LEN = bits``)."""
        return gadget_out

    def truncate(self, meas: FieldArray) -> FieldArray:
        """The weighted sum of the bits (``decode_range_checked_int``)."""
        return self.field.dot(meas, self._weights[None, :], axis=-1)[:, None]

    def decode(self, agg: FieldArray, num_measurements: int) -> int:
        """The sum."""
        return int(self.field.to_ints(agg)[0])

    def params(self) -> dict[str, int]:
        """``max_measurement``."""
        return {"max_measurement": self.max_measurement}


class _RangeCheckCircuit(Circuit):
    """Shared part of SumVec, Histogram and MultihotCountVec: every encoded element is 0 or 1.

    Call ``i`` of ``ParallelSum(Mul, chunk_length)`` takes, for ``j < chunk_length`` and element
    ``x = meas[i * chunk_length + j]`` (0 past the end), the pair ``(r_i^(j+1) x, x - 1/num_shares)``,
    with ``r_i`` the ``i``-th joint random element (§7.4.3).
    """

    chunk_length: int

    def _setup_range_check(self, field: type[Field], meas_len: int, chunk_length: int) -> None:
        if chunk_length < 1:
            raise ParameterError("chunk_length", chunk_length, "an integer >= 1")
        self.field = field
        self.chunk_length = chunk_length
        self.MEAS_LEN = meas_len
        self.calls = (meas_len + chunk_length - 1) // chunk_length
        self.JOINT_RAND_LEN = self.calls
        self.gadget = ParallelSum(chunk_length)

    def gadget_inputs(
        self, meas: FieldArray, joint_rand: FieldArray, num_shares: int
    ) -> FieldArray:
        """``(n, calls, 2 * chunk_length)`` interleaved ``(r^(j+1) x, x - 1/num_shares)`` pairs."""
        f = self.field
        n = meas.shape[0]
        c = self.chunk_length
        pad = self.calls * c - self.MEAS_LEN
        x = meas if pad == 0 else np.concatenate([meas, f.zeros((n, pad))], axis=1)
        x = x.reshape(n, self.calls, c)
        r = joint_rand[:, : self.calls]
        rpow = f.zeros((n, self.calls, c))
        rpow[:, :, 0] = r
        for j in range(1, c):
            rpow[:, :, j] = f.mul(rpow[:, :, j - 1], r)
        a = f.mul(rpow, x)
        b = f.sub(x, f.constant(self._shares_inv(num_shares), (1, 1, 1)))
        return np.stack([a, b], axis=-1).reshape(n, self.calls, 2 * c)

    def _range_check(self, gadget_out: FieldArray) -> FieldArray:
        return self.field.sum(gadget_out, axis=1)

    def params(self) -> dict[str, int]:
        """``chunk_length`` and the circuit's size parameters."""
        return {"chunk_length": self.chunk_length}


class SumVec(_RangeCheckCircuit):
    """Prio3SumVec's circuit (§7.4.3): ``length`` integers in ``[0, max_measurement]``.

    Parameters
    ----------
    field : type[Field]
    length : int
        Vector length, ``>= 1``.
    max_measurement : int
        Upper bound of each entry, ``>= 1``.
    chunk_length : int
        ``ParallelSum`` width (§7.4.3.1 suggests about ``sqrt(length * bits)``).
    """

    EVAL_OUTPUT_LEN = 1

    def __init__(
        self, field: type[Field], length: int, max_measurement: int, chunk_length: int
    ) -> None:
        if length < 1:
            raise ParameterError("length", length, "an integer >= 1")
        if max_measurement < 1 or 2 ** max_measurement.bit_length() >= field.MODULUS:
            raise ParameterError(
                "max_measurement", max_measurement, f"an integer in [1, {field.NAME} range)"
            )
        self.length = length
        self.max_measurement = max_measurement
        self.bits = max_measurement.bit_length()
        self._setup_range_check(field, length * self.bits, chunk_length)
        self.OUTPUT_LEN = length
        self._weights = field.array(_range_checked_weights(max_measurement))

    def encode(self, measurements: Any) -> FieldArray:
        """Measurements ``(n, length)`` with entries in ``[0, max_measurement]`` to ``(n, length * bits)``."""
        arr = _as_int_array("measurement", measurements, (self.length,))
        _check_range("measurement", arr, 0, self.max_measurement)
        enc = _encode_range_checked(arr, self.max_measurement)
        return self.field.array(enc.reshape(enc.shape[0], -1))

    def combine(
        self, gadget_out: FieldArray, meas: FieldArray, joint_rand: FieldArray, num_shares: int
    ) -> FieldArray:
        """The range check."""
        return self._range_check(gadget_out)[:, None]

    def truncate(self, meas: FieldArray) -> FieldArray:
        """Each entry's weighted bit sum: ``(n, length)``."""
        n = meas.shape[0]
        return self.field.dot(meas.reshape(n, self.length, self.bits), self._weights, axis=-1)

    def decode(self, agg: FieldArray, num_measurements: int) -> list[int]:
        """The vector sum."""
        return [int(v) for v in self.field.to_ints(agg)]

    def params(self) -> dict[str, int]:
        """``length``, ``max_measurement``, ``chunk_length``."""
        return {
            "length": self.length,
            "max_measurement": self.max_measurement,
            "chunk_length": self.chunk_length,
        }


class Histogram(_RangeCheckCircuit):
    """Prio3Histogram's circuit (§7.4.4): a one-hot vector of ``length`` buckets.

    Parameters
    ----------
    field : type[Field]
    length : int
        Number of buckets, ``>= 1``.
    chunk_length : int
        ``ParallelSum`` width.
    """

    EVAL_OUTPUT_LEN = 2

    def __init__(self, field: type[Field], length: int, chunk_length: int) -> None:
        if length < 1:
            raise ParameterError("length", length, "an integer >= 1")
        self.length = length
        self._setup_range_check(field, length, chunk_length)
        self.OUTPUT_LEN = length

    def encode(self, measurements: Any) -> FieldArray:
        """Bucket indices ``(n,)`` in ``[0, length)`` to one-hot rows ``(n, length)``."""
        arr = _as_int_array("measurement", measurements, ())
        _check_range("measurement", arr, 0, self.length - 1)
        idx = np.asarray(arr, dtype=np.int64)
        onehot = np.zeros((idx.shape[0], self.length), dtype=np.int64)
        onehot[np.arange(idx.shape[0]), idx] = 1
        return self.field.array(onehot)

    def combine(
        self, gadget_out: FieldArray, meas: FieldArray, joint_rand: FieldArray, num_shares: int
    ) -> FieldArray:
        """The range check and ``sum(meas) - 1/num_shares``."""
        f = self.field
        total = f.sub(f.sum(meas, axis=1), f.constant(self._shares_inv(num_shares), (1,)))
        return np.stack([self._range_check(gadget_out), total], axis=-1)

    def truncate(self, meas: FieldArray) -> FieldArray:
        """The one-hot vector itself."""
        return meas

    def decode(self, agg: FieldArray, num_measurements: int) -> list[int]:
        """Bucket counts."""
        return [int(v) for v in self.field.to_ints(agg)]

    def params(self) -> dict[str, int]:
        """``length``, ``chunk_length``."""
        return {"length": self.length, "chunk_length": self.chunk_length}


class MultihotCountVec(_RangeCheckCircuit):
    """Prio3MultihotCountVec's circuit (§7.4.5): a 0/1 vector with at most ``max_weight`` ones.

    The encoding appends the weight in the range-checked encoding of §7.4.2; the circuit checks every
    element is a bit and that the ones add up to the claimed weight.

    Parameters
    ----------
    field : type[Field]
    length : int
        Vector length, ``>= 1``.
    max_weight : int
        In ``[1, length]``.
    chunk_length : int
        ``ParallelSum`` width.
    """

    EVAL_OUTPUT_LEN = 2

    def __init__(self, field: type[Field], length: int, max_weight: int, chunk_length: int) -> None:
        if length < 1 or length >= field.MODULUS:
            raise ParameterError("length", length, "an integer >= 1")
        if not 1 <= max_weight <= length:
            raise ParameterError("max_weight", max_weight, f"an integer in [1, {length}]")
        self.length = length
        self.max_weight = max_weight
        self.bits_for_weight = max_weight.bit_length()
        self._setup_range_check(field, length + self.bits_for_weight, chunk_length)
        self.OUTPUT_LEN = length
        self._weights = field.array(_range_checked_weights(max_weight))

    def encode(self, measurements: Any) -> FieldArray:
        """0/1 rows ``(n, length)`` with at most ``max_weight`` ones to ``(n, length + bits)``."""
        arr = _as_int_array("measurement", measurements, (self.length,))
        _check_range("measurement", arr, 0, 1)
        bits = np.asarray(arr, dtype=np.int64)
        weight = bits.sum(axis=1)
        _check_range("measurement weight", weight, 0, self.max_weight)
        enc = np.concatenate([bits, _encode_range_checked(weight, self.max_weight)], axis=1)
        return self.field.array(enc)

    def combine(
        self, gadget_out: FieldArray, meas: FieldArray, joint_rand: FieldArray, num_shares: int
    ) -> FieldArray:
        """The range check and ``sum(bits) - claimed weight``."""
        f = self.field
        weight = f.sum(meas[:, : self.length], axis=1)
        claimed = f.dot(meas[:, self.length :], self._weights[None, :], axis=-1)
        return np.stack([self._range_check(gadget_out), f.sub(weight, claimed)], axis=-1)

    def truncate(self, meas: FieldArray) -> FieldArray:
        """The 0/1 vector."""
        return meas[:, : self.length]

    def decode(self, agg: FieldArray, num_measurements: int) -> list[int]:
        """Per-position counts."""
        return [int(v) for v in self.field.to_ints(agg)]

    def params(self) -> dict[str, int]:
        """``length``, ``max_weight``, ``chunk_length``."""
        return {
            "length": self.length,
            "max_weight": self.max_weight,
            "chunk_length": self.chunk_length,
        }


# --- the FLP (§7.3) -------------------------------------------------------------------------------


class FlpBBCGGI19:
    """The FLP of §7.3 for a one-gadget :class:`Circuit`, vectorized over reports.

    Parameters
    ----------
    valid : Circuit
        The validity circuit.

    Attributes
    ----------
    PROVE_RAND_LEN, QUERY_RAND_LEN, JOINT_RAND_LEN, MEAS_LEN, OUTPUT_LEN, PROOF_LEN, VERIFIER_LEN : int
        As in §7.3 (one gadget: ``PROOF_LEN = ARITY + gadget_poly_len``,
        ``VERIFIER_LEN = ARITY + 2``).
    """

    def __init__(self, valid: Circuit) -> None:
        self.valid = valid
        self.field = valid.field
        g = valid.gadget
        self.P = wire_poly_len(valid.calls)
        self.m = gadget_poly_len(g.DEGREE, self.P)
        self.M = next_power_of_2(self.m)
        self.step = self.M // self.P
        if self.field.GEN_ORDER % self.M:
            raise ParameterError(
                "length", valid.calls, f"a circuit small enough for {self.field.NAME}"
            )
        self.PROVE_RAND_LEN = g.ARITY
        self.QUERY_RAND_LEN = 1 + (valid.EVAL_OUTPUT_LEN if valid.EVAL_OUTPUT_LEN > 1 else 0)
        self.JOINT_RAND_LEN = valid.JOINT_RAND_LEN
        self.MEAS_LEN = valid.MEAS_LEN
        self.OUTPUT_LEN = valid.OUTPUT_LEN
        self.PROOF_LEN = g.ARITY + self.m
        self.VERIFIER_LEN = g.ARITY + 2

    @cached_property
    def _extension(self) -> FieldArray | None:
        if self.M == self.m:
            return None
        return self.field.array(_extension_matrix(self.field, self.m, self.M))

    def _rows_per_block(self, elements: int) -> int:
        """Reports per block so that a block's wire array has about ``elements`` elements."""
        return max(1, elements // (self.valid.gadget.ARITY * self.P))

    def _wires(self, seeds: FieldArray, inputs: FieldArray) -> FieldArray:
        """Wire values ``(n, ARITY, P)``: the seed, then one input per call, then zeros."""
        n, calls, arity = inputs.shape
        wires = self.field.zeros((n, arity, self.P))
        wires[:, :, 0] = seeds
        wires[:, :, 1 : calls + 1] = inputs.transpose(0, 2, 1)
        return wires

    def prove(self, meas: FieldArray, prove_rand: FieldArray, joint_rand: FieldArray) -> FieldArray:
        """Proofs for encoded measurements (§7.3.3).

        Parameters
        ----------
        meas : numpy.ndarray
            ``(n, MEAS_LEN)`` encoded measurements.
        prove_rand : numpy.ndarray
            ``(n, PROVE_RAND_LEN)``: the wire seeds.
        joint_rand : numpy.ndarray
            ``(n, JOINT_RAND_LEN)``.

        Returns
        -------
        numpy.ndarray
            ``(n, PROOF_LEN)``: wire seeds, then the first ``gadget_poly_len`` gadget-polynomial values.
        """
        rows = self._rows_per_block(PROVE_BLOCK)  # the NTTs run fastest on cache-sized blocks
        if meas.shape[0] > rows:
            return np.concatenate(
                [
                    self.prove(
                        meas[i : i + rows], prove_rand[i : i + rows], joint_rand[i : i + rows]
                    )
                    for i in range(0, meas.shape[0], rows)
                ]
            )
        inputs = self.valid.gadget_inputs(meas, joint_rand, 1)
        wires = self._wires(prove_rand, inputs)
        gpoly = self.valid.gadget.eval_poly(self.field, wires, self.M)
        return np.concatenate([prove_rand, gpoly[:, : self.m]], axis=1)

    def query(
        self,
        meas: FieldArray,
        proof: FieldArray,
        query_rand: FieldArray,
        joint_rand: FieldArray,
        num_shares: int,
    ) -> tuple[FieldArray, npt.NDArray[np.bool_]]:
        """Verifier shares from measurement and proof shares (§7.3.4).

        Parameters
        ----------
        meas : numpy.ndarray
            ``(n, MEAS_LEN)`` measurement shares.
        proof : numpy.ndarray
            ``(n, PROOF_LEN)`` proof shares.
        query_rand : numpy.ndarray
            ``(n, QUERY_RAND_LEN)``; the last element is the test point ``t``.
        joint_rand : numpy.ndarray
            ``(n, JOINT_RAND_LEN)``.
        num_shares : int
            Number of aggregators.

        Returns
        -------
        verifier : numpy.ndarray
            ``(n, VERIFIER_LEN)``: reduced circuit output, wire checks, gadget check.
        usable : numpy.ndarray of bool
            ``(n,)``: False where ``t`` is a ``P``-th root of unity (the draft aborts there; the
            probability is negligible).
        """
        rows = self._rows_per_block(QUERY_BLOCK)  # large: the per-report loops are over columns
        if meas.shape[0] > rows:
            parts = [
                self.query(
                    meas[i : i + rows],
                    proof[i : i + rows],
                    query_rand[i : i + rows],
                    joint_rand[i : i + rows],
                    num_shares,
                )
                for i in range(0, meas.shape[0], rows)
            ]
            return np.concatenate([q for q, _ in parts]), np.concatenate([u for _, u in parts])
        f = self.field
        v = self.valid
        arity = v.gadget.ARITY
        n = meas.shape[0]
        seeds = proof[:, :arity]
        gvals = proof[:, arity:]
        if self._extension is not None:
            extra = f.dot(gvals[:, None, :], self._extension[None, :, :], axis=-1)
            gvals = np.concatenate([gvals, extra], axis=1)
        gadget_out = gvals[:, self.step : self.step * (v.calls + 1) : self.step]
        inputs = v.gadget_inputs(meas, joint_rand, num_shares)
        out = v.combine(gadget_out, meas, joint_rand, num_shares)
        if v.EVAL_OUTPUT_LEN > 1:
            red = f.dot(out, query_rand[:, : v.EVAL_OUTPUT_LEN], axis=-1)
        else:
            red = out[:, 0]
        t = query_rand[:, -1]
        usable = f.pow(t, self.P) != f.constant(1, (n,))
        wires = self._wires(seeds, inputs)
        w_p = lagrange_weights(f, t, self.P)
        wire_checks = f.dot(wires, w_p[:, None, :], axis=-1)
        w_m = lagrange_weights(f, t, self.M)
        gadget_check = f.dot(gvals, w_m, axis=-1)
        verifier = np.concatenate([red[:, None], wire_checks, gadget_check[:, None]], axis=1)
        return verifier, np.asarray(usable, dtype=bool)

    def decide(self, verifier: FieldArray) -> npt.NDArray[np.bool_]:
        """Whether each (combined) verifier accepts (§7.3.5); ``(n, VERIFIER_LEN)`` -> ``(n,)`` bool."""
        f = self.field
        arity = self.valid.gadget.ARITY
        zero = f.zeros(verifier.shape[0])
        ok_out = verifier[:, 0] == zero
        ok_gadget = self.valid.gadget.eval(f, verifier[:, 1 : 1 + arity]) == verifier[:, 1 + arity]
        return np.asarray(ok_out & ok_gadget, dtype=bool)
