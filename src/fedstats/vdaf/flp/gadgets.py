"""The gadgets of Prio3's validity circuits (draft-irtf-cfrg-vdaf-20, Appendix A).

Mul, PolyEval and ParallelSum, each evaluated on values and on polynomials given by their values,
vectorized over reports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from fedstats.vdaf.field import Field, FieldArray
from fedstats.vdaf.flp.polynomial import _coset_twist, inv_ntt, ntt

__all__ = ["Gadget", "Mul", "ParallelSum", "PolyEval"]


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
