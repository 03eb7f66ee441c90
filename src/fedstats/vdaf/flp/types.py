"""The validity circuits of Prio3 (draft-irtf-cfrg-vdaf-20, §7.3.2, §7.4), vectorized over reports.

Count, Sum, SumVec, Histogram and MultihotCountVec.

Each circuit calls one gadget (:mod:`fedstats.vdaf.flp.gadgets`) ``calls`` times on inputs that are affine in
the measurement and the joint randomness: ``gadget_inputs`` gives the ``(n, calls, ARITY)`` inputs of every
call at once, and ``combine`` turns the ``(n, calls)`` gadget outputs into the ``EVAL_OUTPUT_LEN`` outputs.
"""

# The circuits implement one interface (gadget_inputs, combine, decode) whose arguments not every
# circuit needs, as in the draft (§7.3.2).
# ruff: noqa: ARG002

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from fedstats.errors import ParameterError
from fedstats.vdaf.field import Field, FieldArray
from fedstats.vdaf.flp.gadgets import Gadget, Mul, ParallelSum, PolyEval

__all__ = ["Circuit", "Count", "Histogram", "MultihotCountVec", "Sum", "SumVec"]

IntArray = npt.NDArray[np.int64]


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
    _PARAMS: ClassVar[tuple[str, ...]] = ()
    """The attributes :meth:`params` reports, in the draft's order."""

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
        return {name: getattr(self, name) for name in self._PARAMS}

    # helpers
    def _shares_inv(self, num_shares: int) -> int:
        p = self.field.MODULUS
        return pow(num_shares, p - 2, p)


def _check_max_measurement(field: type[Field], max_measurement: int) -> int:
    """``max_measurement`` if it is at least 1 and its range-checked encoding fits below the modulus."""
    if max_measurement < 1 or 2 ** max_measurement.bit_length() >= field.MODULUS:
        raise ParameterError(
            "max_measurement", max_measurement, f"an integer in [1, {field.NAME} range)"
        )
    return max_measurement


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
    _PARAMS = ("max_measurement",)

    def __init__(self, field: type[Field], max_measurement: int) -> None:
        self.field = field
        self.max_measurement = _check_max_measurement(field, max_measurement)
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

    def decode(self, agg: FieldArray, num_measurements: int) -> list[int]:
        """The sum of each position of the output vector (counts for Histogram and MultihotCountVec)."""
        return [int(v) for v in self.field.to_ints(agg)]


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
    _PARAMS = ("length", "max_measurement", "chunk_length")

    def __init__(
        self, field: type[Field], length: int, max_measurement: int, chunk_length: int
    ) -> None:
        if length < 1:
            raise ParameterError("length", length, "an integer >= 1")
        self.length = length
        self.max_measurement = _check_max_measurement(field, max_measurement)
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
    _PARAMS = ("length", "chunk_length")

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
    _PARAMS = ("length", "max_weight", "chunk_length")

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
