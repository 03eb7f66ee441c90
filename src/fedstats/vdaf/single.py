"""Prio3's sharding of one report in plain Python integers: a device's path (draft-irtf-cfrg-vdaf-20, §7.2.1).

The batch API (:meth:`fedstats.vdaf.Prio3.shard_batch`) holds many reports in numpy arrays; for one
report its fixed cost per numpy call (a Field128 product is some sixty array operations) dominates. A
device shards one report at a time, so :meth:`fedstats.vdaf.Prio3.shard` runs this module instead: the
same algorithm (§7.2.1, the FLP's ``prove`` of §7.3.3 and the gadgets of Appendix A) on Python ``int``
lists, with the number-theoretic transforms' tables (roots, twiddles, the coset twist) computed once per
field and size and cached. Its output is byte for byte the batch API's (the draft's test vectors pass
through both).

Measurements are encoded here for Count, Sum and Histogram given as plain integers, with the batch
API's checks and errors; any other variant or form goes through the circuit's own ``encode``.
"""

from __future__ import annotations

import functools
import operator
import struct
from collections.abc import Sequence
from typing import Any

from fedstats.errors import ParameterError
from fedstats.vdaf.field import Field, Field64
from fedstats.vdaf.flp.gadgets import Mul, ParallelSum, PolyEval
from fedstats.vdaf.flp.types import Count, Histogram, Sum, _RangeCheckCircuit
from fedstats.vdaf.xof import SEED_SIZE, XofTurboShake128, turboshake_one

__all__ = [
    "USAGE_JOINT_RANDOMNESS",
    "USAGE_JOINT_RAND_PART",
    "USAGE_JOINT_RAND_SEED",
    "USAGE_MEAS_SHARE",
    "USAGE_PROOF_SHARE",
    "USAGE_PROVE_RANDOMNESS",
    "USAGE_QUERY_RANDOMNESS",
    "shard_one",
]

_VERSION = 18  # the draft's VERSION (§2), as fedstats.vdaf.prio3.VERSION
USAGE_MEAS_SHARE = 1
USAGE_PROOF_SHARE = 2
USAGE_JOINT_RANDOMNESS = 3
USAGE_PROVE_RANDOMNESS = 4
USAGE_QUERY_RANDOMNESS = 5
USAGE_JOINT_RAND_SEED = 6
USAGE_JOINT_RAND_PART = 7


# -- field elements as ints ---------------------------------------------------------------------------


def _encode(field: type[Field], vals: Sequence[int]) -> bytes:
    """The draft's encoding of a vector (§6.1.1)."""
    if field is Field64:
        return struct.pack(f"<{len(vals)}Q", *vals)
    size = field.ENCODED_SIZE
    return b"".join([v.to_bytes(size, "little") for v in vals])


def _parse(field: type[Field], data: bytes) -> list[int]:
    if field is Field64:
        return list(struct.unpack(f"<{len(data) // 8}Q", data))
    lohi = struct.unpack(f"<{len(data) // 8}Q", data)
    return [lo | (hi << 64) for lo, hi in zip(lohi[0::2], lohi[1::2], strict=True)]


def _expand(field: type[Field], seed: bytes, dst: bytes, binder: bytes, length: int) -> list[int]:
    """``expand_into_vec`` (§6.2) of one seed, as ints."""
    if length == 0:
        return []
    msg = len(dst).to_bytes(2, "little") + dst + bytes([len(seed)]) + seed + binder
    vals = _parse(field, turboshake_one(msg, length * field.ENCODED_SIZE))
    p = field.MODULUS
    if max(vals) >= p:  # a rejection (probability < 2^-31 per element): the stream, in order
        out: list[int] = field.to_ints(XofTurboShake128(seed, dst, binder).next_vec(field, length))
        return out
    return vals


def _derive_seed(seed: bytes, dst: bytes, binder: bytes) -> bytes:
    """``derive_seed`` (§6.2)."""
    msg = len(dst).to_bytes(2, "little") + dst + bytes([len(seed)]) + seed + binder
    return turboshake_one(msg, SEED_SIZE)


@functools.lru_cache(maxsize=256)
def _dst(algorithm_id: int, usage: int, ctx: bytes) -> bytes:
    """The domain separation tag ``VERSION || 0 || ID || usage || ctx`` (§5), cached."""
    return bytes([_VERSION, 0]) + algorithm_id.to_bytes(4, "big") + usage.to_bytes(2, "big") + ctx


# -- NTT tables and transforms ------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _tables(field: type[Field], n: int) -> tuple[list[int], list[list[int]], list[int]]:
    """Bit-reversal order, per-stage twiddles and the coset twist ``s^k / n`` of size ``n``."""
    p = field.MODULUS
    bits = n.bit_length() - 1
    rev = [int(f"{i:0{bits}b}"[::-1], 2) if bits else 0 for i in range(n)]
    stages = []
    h = 1
    while h < n:
        stages.append(field.root_powers(2 * h)[:h])
        h *= 2
    inv_n = pow(n, p - 2, p)
    twist = [w * inv_n % p for w in field.root_powers(2 * n)[:n]]
    return rev, stages, twist


def _ntt(vals: list[int], n: int, p: int, rev: list[int], stages: list[list[int]]) -> list[int]:
    """Values at ``root(n) ** i`` of the polynomial with coefficients ``vals`` (radix 2)."""
    x = [vals[r] for r in rev]
    h = 1
    for tw in stages:
        for start in range(0, n, 2 * h):
            for j in range(h):
                a = x[start + j]
                b = x[start + j + h] * tw[j] % p
                x[start + j] = (a + b) % p
                x[start + j + h] = (a - b) % p
        h *= 2
    return x


_MATRIX_MAX = 64  # wires up to this length extend by a cached matrix (n^2 inverses to build it)


@functools.lru_cache(maxsize=32)
def _coset_matrix(field: type[Field], n: int) -> list[list[int]]:
    """The coset extension matrix of size ``n``: row ``i`` gives the value at ``s w^i``.

    Row ``i`` holds the Lagrange weights giving a polynomial's value at ``s w^i`` from its values at the
    ``w^k`` (``w = root(n)``, ``s = root(2n)``): ``L_k(x) = (x^n - 1) / (n (x / w^k - 1))`` and
    ``x^n = s^n = -1``, so ``L_k(s w^i) = -2 / (n (s w^(i-k) - 1))``.
    """
    p = field.MODULUS
    w = field.root_powers(n)
    s = field.root(2 * n)
    minus_two_over_n = (-2 * pow(n, p - 2, p)) % p
    return [
        [minus_two_over_n * pow((s * w[(i - k) % n] - 1) % p, p - 2, p) % p for k in range(n)]
        for i in range(n)
    ]


@functools.lru_cache(maxsize=8)
def _halves(field: type[Field]) -> tuple[int, int]:
    """``1/2`` and ``root(4)/2`` in ``field`` (the extension of a length-2 wire)."""
    p = field.MODULUS
    half = (p + 1) // 2
    return half, field.root(4) * half % p


def _extend(field: type[Field], wire: list[int], out_len: int) -> list[int]:
    """A wire polynomial's values at the ``out_len``-th roots from its ``n`` values (``out_len = 2n``)."""
    n = len(wire)
    p = field.MODULUS
    if out_len != 2 * n:
        raise ValueError("the single-report path extends wires to twice their length only")
    if n == 1:
        return [wire[0], wire[0]]
    if n == 2:  # f = a + b x with f(1) = v0, f(-1) = v1; the odd points are s and s^3 = -s
        a, b = wire
        half, s_half = _halves(field)
        c0, cs = (a + b) * half % p, (a - b) * s_half % p  # f(s) = c0 + c1 s, c1 = (a - b) / 2
        return [a, (c0 + cs) % p, b, (c0 - cs) % p]
    if n <= _MATRIX_MAX:  # one n x n product: fewer Python-level steps than two transforms
        odd = [sum(map(operator.mul, row, wire)) % p for row in _coset_matrix(field, n)]
        out = [0] * (2 * n)
        out[0::2] = wire
        out[1::2] = odd
        return out
    rev, stages, twist = _tables(field, n)
    raw = _ntt(wire, n, p, rev, stages)
    coeffs_n = [raw[(-i) % n] for i in range(n)]  # n * coefficients
    odd = _ntt([c * t % p for c, t in zip(coeffs_n, twist, strict=True)], n, p, rev, stages)
    out = [0] * (2 * n)
    out[0::2] = wire
    out[1::2] = odd
    return out


# -- circuits on one report ---------------------------------------------------------------------------


def _encode_measurement(circuit: Any, measurement: Any) -> list[int]:
    """The encoded measurement ``MEAS_LEN`` ints; the circuit's own ``encode`` unless a plain int."""
    if type(measurement) is int:
        m = measurement
        if isinstance(circuit, Count):
            if not 0 <= m <= 1:
                raise ParameterError("measurement", m, "integers in [0, 1]")
            return [m]
        if isinstance(circuit, Histogram):
            if not 0 <= m <= circuit.length - 1:
                raise ParameterError("measurement", m, f"integers in [0, {circuit.length - 1}]")
            out = [0] * circuit.length
            out[m] = 1
            return out
        if isinstance(circuit, Sum):
            mx = circuit.max_measurement
            if not 0 <= m <= mx:
                raise ParameterError("measurement", m, f"integers in [0, {mx}]")
            bits = mx.bit_length()
            rest_all_ones = 2 ** (bits - 1) - 1
            high = m > rest_all_ones
            rest = m - (mx - rest_all_ones) if high else m
            return [(rest >> i) & 1 for i in range(bits - 1)] + [int(high)]
    enc: list[list[int]] = circuit.field.to_ints(circuit.encode([measurement]))
    return enc[0]


def _gadget_inputs(circuit: Any, meas: list[int], joint_rand: list[int]) -> list[list[int]]:
    """The inputs of every gadget call of one report (``num_shares`` 1: the prover's view)."""
    p = circuit.field.MODULUS
    if isinstance(circuit, Count):
        return [[meas[0], meas[0]]]
    if isinstance(circuit, Sum):
        return [[b] for b in meas]
    if isinstance(circuit, _RangeCheckCircuit):
        c = circuit.chunk_length
        shares_inv = circuit._shares_inv(1)
        calls = []
        for i in range(circuit.calls):
            r = joint_rand[i]
            rp = r
            row = []
            for j in range(c):
                k = i * c + j
                x = meas[k] if k < circuit.MEAS_LEN else 0
                row.append(rp * x % p)
                row.append((x - shares_inv) % p)
                rp = rp * r % p
            calls.append(row)
        return calls
    raise TypeError(f"no single-report path for {type(circuit).__name__}")


def _gadget_poly(
    gadget: Any, field: type[Field], wires: list[list[int]], out_len: int
) -> list[int]:
    """The gadget polynomial's values at the ``out_len``-th roots (Appendix A)."""
    p = field.MODULUS
    ext = [_extend(field, w, out_len) for w in wires]
    if isinstance(gadget, Mul):
        return [a * b % p for a, b in zip(ext[0], ext[1], strict=True)]
    if isinstance(gadget, PolyEval):
        coeffs = gadget.coeffs
        out = []
        for x in ext[0]:
            acc = coeffs[-1]
            for c in reversed(coeffs[:-1]):
                acc = (acc * x + c) % p
            out.append(acc)
        return out
    if isinstance(gadget, ParallelSum):
        total = [0] * out_len
        for j in range(gadget.count):
            u, v = ext[2 * j], ext[2 * j + 1]
            total = [s + x * y for s, x, y in zip(total, u, v, strict=True)]
        return [s % p for s in total]
    raise TypeError(f"no single-report path for {type(gadget).__name__}")


def _prove(flp: Any, meas: list[int], prove_rand: list[int], joint_rand: list[int]) -> list[int]:
    """The FLP proof of one report (§7.3.3): wire seeds, then the first ``m`` gadget values."""
    valid = flp.valid
    inputs = _gadget_inputs(valid, meas, joint_rand)
    arity = valid.gadget.ARITY
    pad = [0] * (flp.P - 1 - len(inputs))
    wires = [[prove_rand[a]] + [call[a] for call in inputs] + pad for a in range(arity)]
    gpoly = _gadget_poly(valid.gadget, flp.field, wires, flp.M)
    return list(prove_rand) + gpoly[: flp.m]


def supported(vdaf: Any) -> bool:
    """Whether ``vdaf``'s circuit and gadget have the single-report path (every standard variant)."""
    valid = vdaf.flp.valid
    return (
        isinstance(valid, (Count, Sum, _RangeCheckCircuit))
        and isinstance(valid.gadget, (Mul, PolyEval, ParallelSum))
        and vdaf.flp.M == 2 * vdaf.flp.P
    )


def shard_one(
    vdaf: Any, ctx: bytes, measurement: Any, nonce: bytes, rand: bytes
) -> tuple[bytes, list[bytes]]:
    """Shard one measurement (§7.2.1); the encoded public share and input shares.

    Parameters
    ----------
    vdaf : Prio3
        The instance (its circuit must be :func:`supported`).
    ctx : bytes
        Application context.
    measurement : Any
        In the variant's form.
    nonce : bytes
        16 bytes (checked by the caller).
    rand : bytes
        ``RAND_SIZE`` random bytes (checked by the caller).

    Returns
    -------
    tuple of (bytes, list of bytes)
        As :meth:`fedstats.vdaf.Prio3.shard`.

    Raises
    ------
    ParameterError
        If the measurement is outside the variant's domain.
    """
    flp = vdaf.flp
    field = vdaf.field
    p = field.MODULUS
    meas = _encode_measurement(flp.valid, measurement)
    k = vdaf.SHARES - 1
    seeds = [rand[i : i + SEED_SIZE] for i in range(0, len(rand), SEED_SIZE)]
    joint = vdaf.uses_joint_rand
    if joint:
        helper_seeds = [seeds[2 * j] for j in range(k)]
        helper_blinds = [seeds[2 * j + 1] for j in range(k)]
        leader_blind = seeds[2 * k]
        prove_seed = seeds[2 * k + 1]
    else:
        helper_seeds = seeds[:k]
        helper_blinds = []
        leader_blind = b""
        prove_seed = seeds[k]
    dst = functools.partial(_dst, vdaf.ID)
    dst_meas, dst_part = dst(USAGE_MEAS_SHARE, ctx), dst(USAGE_JOINT_RAND_PART, ctx)
    leader_meas = meas
    helper_parts = []
    for j in range(k):
        hm = _expand(field, helper_seeds[j], dst_meas, bytes([j + 1]), flp.MEAS_LEN)
        leader_meas = [(a - b) % p for a, b in zip(leader_meas, hm, strict=True)]
        if joint:
            binder = bytes([j + 1]) + nonce + _encode(field, hm)
            helper_parts.append(_derive_seed(helper_blinds[j], dst_part, binder))
    public = b""
    joint_rands: list[int] = []
    if joint:
        leader_part = _derive_seed(
            leader_blind, dst_part, bytes([0]) + nonce + _encode(field, leader_meas)
        )
        public = leader_part + b"".join(helper_parts)
        jr_seed = _derive_seed(bytes(SEED_SIZE), dst(USAGE_JOINT_RAND_SEED, ctx), public)
        joint_rands = _expand(
            field,
            jr_seed,
            dst(USAGE_JOINT_RANDOMNESS, ctx),
            bytes([vdaf.PROOFS]),
            flp.JOINT_RAND_LEN * vdaf.PROOFS,
        )
    prl, jrl = flp.PROVE_RAND_LEN, flp.JOINT_RAND_LEN
    prove_rands = _expand(
        field, prove_seed, dst(USAGE_PROVE_RANDOMNESS, ctx), bytes([vdaf.PROOFS]), prl * vdaf.PROOFS
    )
    proof: list[int] = []
    for i in range(vdaf.PROOFS):
        proof += _prove(
            flp,
            meas,
            prove_rands[i * prl : (i + 1) * prl],
            joint_rands[i * jrl : (i + 1) * jrl],
        )
    dst_proof = dst(USAGE_PROOF_SHARE, ctx)
    for j in range(k):
        hp = _expand(field, helper_seeds[j], dst_proof, bytes([vdaf.PROOFS, j + 1]), len(proof))
        proof = [(a - b) % p for a, b in zip(proof, hp, strict=True)]
    shares = [_encode(field, leader_meas) + _encode(field, proof) + leader_blind]
    for j in range(k):
        shares.append(helper_seeds[j] + (helper_blinds[j] if joint else b""))
    return public, shares
