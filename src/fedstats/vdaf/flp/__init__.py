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

The package follows libprio-rs' layout: :mod:`~fedstats.vdaf.flp.polynomial` (NTTs, Lagrange weights),
:mod:`~fedstats.vdaf.flp.gadgets` (Appendix A), :mod:`~fedstats.vdaf.flp.types` (the circuits, §7.4), and
the proof system itself (:class:`FlpBBCGGI19`, §7.3.3-§7.3.5) here.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import numpy.typing as npt

from fedstats.errors import ParameterError
from fedstats.vdaf.field import FieldArray, next_power_of_2
from fedstats.vdaf.flp.gadgets import Gadget, Mul, ParallelSum, PolyEval
from fedstats.vdaf.flp.polynomial import (
    _extension_matrix,
    gadget_poly_len,
    inv_ntt,
    lagrange_weights,
    ntt,
    wire_poly_len,
)
from fedstats.vdaf.flp.types import Circuit, Count, Histogram, MultihotCountVec, Sum, SumVec

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
    "inv_ntt",
    "lagrange_weights",
    "ntt",
    "wire_poly_len",
]

PROVE_BLOCK = 2**16  # wire-array elements per block of reports when proving
QUERY_BLOCK = 2**20  # ... when querying


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
