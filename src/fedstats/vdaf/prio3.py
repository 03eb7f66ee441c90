"""Prio3 (draft-irtf-cfrg-vdaf-20, §7): sharding, verification, aggregation and unsharding, batched.

A client encodes its measurement, splits it into additive shares, one per aggregator, and attaches a
secret-shared fully linear proof that the encoding is valid (a bit, a one-hot vector, ...). Each
aggregator queries its proof share and sends a short *verifier share*; the sum of the verifier shares
decides validity without revealing the measurement. With two aggregators the leader (id 0) receives its
shares in full, the helper (id 1) a 32-byte seed that expands into them (§7.2.1). Circuits with joint
randomness (SumVec, Histogram, MultihotCountVec) bind the proof to the shares through "joint randomness
parts" in the public share, which each aggregator recomputes for its own share and checks in the second
step (``verify_next``).

Two APIs over the same code:

* the **batch API** (``shard_batch``, ``verify_init_batch``, ``verifier_shares_to_message_batch``,
  ``verify_next_batch``, ``aggregate``) holds many reports' shares in numpy arrays, one row per report,
  and returns a boolean mask of the reports that passed instead of raising;
* the **per-report API** (``shard``, ``verify_init``, ``verifier_shares_to_message``, ``verify_next``)
  speaks the draft's byte encodings (§7.2.7) and is a batch of one; a failed check raises
  :class:`~fedstats.errors.SecurityError`, a malformed message :class:`~fedstats.errors.DataError`.

The draft-20 names are used (``verify_init`` and so on; earlier drafts said ``prep_init``, ``prep_shares_to_prep``
and ``prep_next``). Any number of aggregators in [2, 255] is supported, as the draft's test vectors need.

Examples
--------
>>> import os
>>> from fedstats.vdaf import Prio3Histogram
>>> vdaf = Prio3Histogram(length=4, chunk_length=2)
>>> key, ctx = os.urandom(32), b"example"
>>> nonces = [os.urandom(16) for _ in range(3)]
>>> batch = vdaf.shard_batch(ctx, [0, 2, 2], nonces)
>>> states, shares = zip(*[vdaf.verify_init_batch(key, ctx, j, nonces, batch.public_shares,
...                                               batch.input_shares[j]) for j in range(2)])
>>> msgs, ok = vdaf.verifier_shares_to_message_batch(ctx, list(shares))
>>> outs = [vdaf.verify_next_batch(states[j], msgs)[0] for j in range(2)]
>>> vdaf.unshard([vdaf.aggregate(o, ok) for o in outs], int(ok.sum()))
[1, 0, 2, 0]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from fedstats.errors import DataError, ParameterError, SecurityError
from fedstats.vdaf import flp as flp_mod
from fedstats.vdaf.field import Field, FieldArray
from fedstats.vdaf.single import (
    USAGE_JOINT_RAND_PART,
    USAGE_JOINT_RAND_SEED,
    USAGE_JOINT_RANDOMNESS,
    USAGE_MEAS_SHARE,
    USAGE_PROOF_SHARE,
    USAGE_PROVE_RANDOMNESS,
    USAGE_QUERY_RANDOMNESS,
    shard_one,
    supported,
)
from fedstats.vdaf.xof import SEED_SIZE, derive_seeds, expand_into_vecs

__all__ = [
    "VERSION",
    "InputShares",
    "Prio3",
    "ShardBatch",
    "VerifierShares",
    "VerifyState",
]

VERSION = 18  # the draft's VERSION constant (§2), unchanged since draft 18 (also in single.py)
NONCE_SIZE = 16


BoolArray = npt.NDArray[np.bool_]


@dataclass
class InputShares:
    """One aggregator's input shares for ``n`` reports.

    Attributes
    ----------
    agg_id : int
        0 for the leader, ``1..SHARES-1`` for the helpers.
    meas, proofs : numpy.ndarray or None
        Leader only: ``(n, MEAS_LEN)`` and ``(n, PROOF_LEN * PROOFS)`` field arrays.
    seeds : list of bytes or None
        Helpers only: one 32-byte share seed per report.
    blinds : list of bytes or None
        Joint-randomness blinds (32 bytes each) when the circuit uses joint randomness.
    """

    agg_id: int
    meas: FieldArray | None = None
    proofs: FieldArray | None = None
    seeds: list[bytes] | None = None
    blinds: list[bytes] | None = None

    def __len__(self) -> int:
        if self.meas is not None:
            return int(self.meas.shape[0])
        return len(self.seeds or [])


@dataclass
class ShardBatch:
    """The output of :meth:`Prio3.shard_batch` for ``n`` reports.

    Attributes
    ----------
    public_shares : list of list of bytes, or None
        Per report, the ``SHARES`` joint-randomness parts (None when the circuit has no joint randomness).
    input_shares : list of InputShares
        One entry per aggregator.
    """

    public_shares: list[list[bytes]] | None
    input_shares: list[InputShares]


@dataclass
class _PerReport:
    """Fields that hold one entry per report: arrays (first axis), lists of seeds, or None."""

    def select(self, rows: Sequence[int]) -> Self:
        """The same fields for the reports at ``rows`` only (indices, in that order)."""
        idx = np.asarray(rows, dtype=np.intp)
        picked: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list):
                value = [value[i] for i in rows]
            elif value is not None:
                value = value[idx]
            picked[f.name] = value
        return replace(self, **picked)


@dataclass
class VerifyState(_PerReport):
    """An aggregator's state between ``verify_init`` and ``verify_next`` for ``n`` reports."""

    out_shares: FieldArray
    corrected_joint_rand_seeds: list[bytes] | None
    ok: BoolArray


@dataclass
class VerifierShares(_PerReport):
    """An aggregator's verifier shares ``(n, VERIFIER_LEN * PROOFS)`` and joint-randomness parts."""

    verifiers: FieldArray
    joint_rand_parts: list[bytes] | None
    ok: BoolArray


def _check_bytes(name: str, value: bytes, size: int) -> bytes:
    if not isinstance(value, (bytes, bytearray)) or len(value) != size:
        shown = f"{len(value)} bytes" if isinstance(value, (bytes, bytearray)) else value
        raise ParameterError(name, shown, f"{size} bytes")
    return bytes(value)


class Prio3:
    """A Prio3 VDAF over a validity circuit (draft-irtf-cfrg-vdaf-20, §7.2).

    Parameters
    ----------
    algorithm_id : int
        The 32-bit algorithm identifier (§10), part of every domain separation tag.
    circuit : Circuit
        The validity circuit (:mod:`fedstats.vdaf.flp`).
    shares : int
        Number of aggregators, in ``[2, 255]``.
    num_proofs : int
        Number of independent proofs, in ``[1, 255]`` (§7.1.2); the five standard variants use 1.

    Raises
    ------
    ParameterError
        If ``shares`` or ``num_proofs`` is out of range.
    """

    NONCE_SIZE = NONCE_SIZE
    VERIFY_KEY_SIZE = SEED_SIZE
    ROUNDS = 1

    def __init__(
        self, algorithm_id: int, circuit: flp_mod.Circuit, shares: int, num_proofs: int = 1
    ) -> None:
        if isinstance(shares, bool) or not isinstance(shares, int) or not 2 <= shares <= 255:
            raise ParameterError("shares", shares, "an integer in [2, 255]")
        if (
            isinstance(num_proofs, bool)
            or not isinstance(num_proofs, int)
            or not 1 <= num_proofs <= 255
        ):
            raise ParameterError("num_proofs", num_proofs, "an integer in [1, 255]")
        self.ID = algorithm_id
        self.SHARES = shares
        self.PROOFS = num_proofs
        self.flp = flp_mod.FlpBBCGGI19(circuit)
        self.field: type[Field] = circuit.field
        self.uses_joint_rand = self.flp.JOINT_RAND_LEN > 0
        self.RAND_SIZE = shares * SEED_SIZE * (2 if self.uses_joint_rand else 1)
        self._single = supported(self)  # shard() takes the single-report path

    # --- helpers (§7.2.6) -----------------------------------------------------------------------
    def domain_separation_tag(self, usage: int, ctx: bytes) -> bytes:
        """``VERSION || 0 || ID || usage || ctx`` (§5, §6.2.3)."""
        return bytes([VERSION, 0]) + self.ID.to_bytes(4, "big") + usage.to_bytes(2, "big") + ctx

    def _helper_meas(self, ctx: bytes, agg_id: int, seeds: Sequence[bytes]) -> FieldArray:
        dst = self.domain_separation_tag(USAGE_MEAS_SHARE, ctx)
        return expand_into_vecs(
            self.field, seeds, dst, [bytes([agg_id])] * len(seeds), self.flp.MEAS_LEN
        )

    def _helper_proofs(self, ctx: bytes, agg_id: int, seeds: Sequence[bytes]) -> FieldArray:
        dst = self.domain_separation_tag(USAGE_PROOF_SHARE, ctx)
        binder = bytes([self.PROOFS, agg_id])
        return expand_into_vecs(
            self.field, seeds, dst, [binder] * len(seeds), self.flp.PROOF_LEN * self.PROOFS
        )

    def _joint_rand_parts(
        self,
        ctx: bytes,
        agg_id: int,
        blinds: Sequence[bytes],
        meas: FieldArray,
        nonces: Sequence[bytes],
    ) -> list[bytes]:
        dst = self.domain_separation_tag(USAGE_JOINT_RAND_PART, ctx)
        rows = self.field.encode_rows(meas)
        head = bytes([agg_id])
        return derive_seeds(
            blinds, dst, [head + nc + r for nc, r in zip(nonces, rows, strict=True)]
        )

    def _joint_rand_seeds(self, ctx: bytes, parts: Sequence[Sequence[bytes]]) -> list[bytes]:
        dst = self.domain_separation_tag(USAGE_JOINT_RAND_SEED, ctx)
        zero = bytes(SEED_SIZE)
        return derive_seeds([zero] * len(parts), dst, [b"".join(p) for p in parts])

    def _seeded_rands(
        self, usage: int, ctx: bytes, seeds: Sequence[bytes], length: int
    ) -> FieldArray:
        """``length`` elements per proof expanded from each seed (binder: the number of proofs)."""
        dst = self.domain_separation_tag(usage, ctx)
        binders = [bytes([self.PROOFS])] * len(seeds)
        return expand_into_vecs(self.field, seeds, dst, binders, length * self.PROOFS)

    def _joint_rands(self, ctx: bytes, seeds: Sequence[bytes]) -> FieldArray:
        return self._seeded_rands(USAGE_JOINT_RANDOMNESS, ctx, seeds, self.flp.JOINT_RAND_LEN)

    def _prove_rands(self, ctx: bytes, seeds: Sequence[bytes]) -> FieldArray:
        return self._seeded_rands(USAGE_PROVE_RANDOMNESS, ctx, seeds, self.flp.PROVE_RAND_LEN)

    def _query_rands(self, verify_key: bytes, ctx: bytes, nonces: Sequence[bytes]) -> FieldArray:
        dst = self.domain_separation_tag(USAGE_QUERY_RANDOMNESS, ctx)
        head = bytes([self.PROOFS])
        return expand_into_vecs(
            self.field,
            [verify_key] * len(nonces),
            dst,
            [head + nc for nc in nonces],
            self.flp.QUERY_RAND_LEN * self.PROOFS,
        )

    def _check_nonces(self, nonces: Sequence[bytes]) -> list[bytes]:
        return [_check_bytes("nonce", nc, NONCE_SIZE) for nc in nonces]

    # --- sharding (§7.2.1) -----------------------------------------------------------------------
    def shard_batch(
        self,
        ctx: bytes,
        measurements: Any,
        nonces: Sequence[bytes],
        rands: Sequence[bytes] | None = None,
    ) -> ShardBatch:
        """Shard ``n`` measurements (§7.2.1).

        Parameters
        ----------
        ctx : bytes
            Application context string (part of every domain separation tag).
        measurements : array-like
            ``n`` measurements in the variant's form (see the variant's class).
        nonces : sequence of bytes
            ``n`` nonces of 16 bytes.
        rands : sequence of bytes, optional
            ``n`` strings of ``RAND_SIZE`` random bytes; drawn from :func:`os.urandom` when omitted.

        Returns
        -------
        ShardBatch

        Raises
        ------
        ParameterError
            If a measurement, nonce or random string is invalid.
        """
        meas = self.flp.valid.encode(measurements)
        return self.shard_encoded(ctx, meas, nonces, rands)

    def shard_encoded(
        self,
        ctx: bytes,
        meas: FieldArray,
        nonces: Sequence[bytes],
        rands: Sequence[bytes] | None = None,
    ) -> ShardBatch:
        """Shard already encoded measurements ``(n, MEAS_LEN)`` without checking them.

        This is what a *malicious* client can do (send any field vector with an honestly computed
        proof); tests use it to show that preparation rejects invalid encodings.
        """
        f = self.field
        n = meas.shape[0]
        if meas.ndim != 2 or meas.shape[1] != self.flp.MEAS_LEN:
            raise ParameterError("meas", f"shape {meas.shape}", f"shape (n, {self.flp.MEAS_LEN})")
        nonces = self._check_nonces(nonces)
        if len(nonces) != n:
            raise ParameterError(
                "nonces", f"{len(nonces)} nonces", f"{n} nonces, one per measurement"
            )
        if rands is None:
            rands = [os.urandom(self.RAND_SIZE) for _ in range(n)]
        if len(rands) != n:
            raise ParameterError(
                "rands", f"{len(rands)} strings", f"{n} strings, one per measurement"
            )
        rands = [_check_bytes("rand", r, self.RAND_SIZE) for r in rands]
        k = self.SHARES - 1
        seeds = [[r[i : i + SEED_SIZE] for i in range(0, self.RAND_SIZE, SEED_SIZE)] for r in rands]
        if self.uses_joint_rand:
            helper_seeds = [[s[2 * j] for s in seeds] for j in range(k)]
            helper_blinds: list[list[bytes]] | None = [
                [s[2 * j + 1] for s in seeds] for j in range(k)
            ]
            leader_blinds: list[bytes] | None = [s[2 * k] for s in seeds]
            prove_seeds = [s[2 * k + 1] for s in seeds]
        else:
            helper_seeds = [[s[j] for s in seeds] for j in range(k)]
            helper_blinds = None
            leader_blinds = None
            prove_seeds = [s[k] for s in seeds]

        leader_meas = meas
        helper_parts: list[list[bytes]] = []
        for j in range(k):
            hm = self._helper_meas(ctx, j + 1, helper_seeds[j])
            leader_meas = f.sub(leader_meas, hm)
            if helper_blinds is not None:
                helper_parts.append(
                    self._joint_rand_parts(ctx, j + 1, helper_blinds[j], hm, nonces)
                )

        public: list[list[bytes]] | None = None
        joint_rands = f.zeros((n, 0))
        if leader_blinds is not None:
            leader_parts = self._joint_rand_parts(ctx, 0, leader_blinds, leader_meas, nonces)
            public = [[leader_parts[i]] + [helper_parts[j][i] for j in range(k)] for i in range(n)]
            joint_rands = self._joint_rands(ctx, self._joint_rand_seeds(ctx, public))

        prove_rands = self._prove_rands(ctx, prove_seeds)
        prl, jrl = self.flp.PROVE_RAND_LEN, self.flp.JOINT_RAND_LEN
        proofs = np.concatenate(
            [
                self.flp.prove(
                    meas,
                    prove_rands[:, i * prl : (i + 1) * prl],
                    joint_rands[:, i * jrl : (i + 1) * jrl],
                )
                for i in range(self.PROOFS)
            ],
            axis=1,
        )
        for j in range(k):
            proofs = f.sub(proofs, self._helper_proofs(ctx, j + 1, helper_seeds[j]))

        shares = [InputShares(0, meas=leader_meas, proofs=proofs, blinds=leader_blinds)]
        for j in range(k):
            shares.append(
                InputShares(
                    j + 1,
                    seeds=helper_seeds[j],
                    blinds=None if helper_blinds is None else helper_blinds[j],
                )
            )
        return ShardBatch(public, shares)

    # --- verification (§7.2.2) -----------------------------------------------------------------
    def verify_init_batch(
        self,
        verify_key: bytes,
        ctx: bytes,
        agg_id: int,
        nonces: Sequence[bytes],
        public_shares: Sequence[Sequence[bytes]] | None,
        input_shares: InputShares,
    ) -> tuple[VerifyState, VerifierShares]:
        """An aggregator's first verification step for ``n`` reports (§7.2.2, ``verify_init``).

        Parameters
        ----------
        verify_key : bytes
            32 bytes shared by the aggregators and secret from the clients.
        ctx : bytes
            Application context.
        agg_id : int
            This aggregator's id in ``[0, SHARES)``.
        nonces : sequence of bytes
            ``n`` report nonces (16 bytes).
        public_shares : sequence of sequence of bytes, or None
            ``n`` lists of ``SHARES`` joint-randomness parts (None without joint randomness).
        input_shares : InputShares
            This aggregator's shares.

        Returns
        -------
        (VerifyState, VerifierShares)
            ``ok`` is False for reports whose query point was unusable (negligible probability).

        Raises
        ------
        ParameterError
            If an argument has the wrong size or ``agg_id`` is out of range.
        """
        f = self.field
        key = _check_bytes("verify_key", verify_key, self.VERIFY_KEY_SIZE)
        if isinstance(agg_id, bool) or not isinstance(agg_id, int) or not 0 <= agg_id < self.SHARES:
            raise ParameterError("agg_id", agg_id, f"an integer in [0, {self.SHARES})")
        if input_shares.agg_id != agg_id:
            raise ParameterError(
                "input_shares", f"shares of aggregator {input_shares.agg_id}", f"shares of {agg_id}"
            )
        nonces = self._check_nonces(nonces)
        n = len(nonces)
        if len(input_shares) != n:
            raise ParameterError(
                "input_shares", f"{len(input_shares)} reports", f"{n} reports, one per nonce"
            )
        if agg_id == 0:
            if input_shares.meas is None or input_shares.proofs is None:
                raise ParameterError(
                    "input_shares", "no measurement or proof shares", "the leader's shares"
                )
            meas, proofs = input_shares.meas, input_shares.proofs
            if meas.shape != (n, self.flp.MEAS_LEN) or proofs.shape != (
                n,
                self.flp.PROOF_LEN * self.PROOFS,
            ):
                raise ParameterError(
                    "input_shares",
                    f"shapes {meas.shape} and {proofs.shape}",
                    f"({n}, {self.flp.MEAS_LEN}) and ({n}, {self.flp.PROOF_LEN * self.PROOFS})",
                )
        else:
            if input_shares.seeds is None:
                raise ParameterError("input_shares", "no share seeds", "a helper's seeds")
            meas = self._helper_meas(ctx, agg_id, input_shares.seeds)
            proofs = self._helper_proofs(ctx, agg_id, input_shares.seeds)
        out_shares = self.flp.valid.truncate(meas)

        corrected: list[bytes] | None = None
        part: list[bytes] | None = None
        joint_rands = f.zeros((n, 0))
        if self.uses_joint_rand:
            if public_shares is None or input_shares.blinds is None or len(public_shares) != n:
                raise ParameterError(
                    "public_shares", "missing", f"{n} lists of {self.SHARES} joint randomness parts"
                )
            part = self._joint_rand_parts(ctx, agg_id, input_shares.blinds, meas, nonces)
            parts = [list(ps) for ps in public_shares]
            for i in range(n):
                if len(parts[i]) != self.SHARES:
                    raise ParameterError(
                        "public_shares", f"{len(parts[i])} parts", f"{self.SHARES} parts"
                    )
                parts[i][agg_id] = part[i]
            corrected = self._joint_rand_seeds(ctx, parts)
            joint_rands = self._joint_rands(ctx, corrected)

        query_rands = self._query_rands(key, ctx, nonces)
        pl, ql, jl = self.flp.PROOF_LEN, self.flp.QUERY_RAND_LEN, self.flp.JOINT_RAND_LEN
        verifiers = []
        ok = np.ones(n, dtype=bool)
        for i in range(self.PROOFS):
            v, usable = self.flp.query(
                meas,
                proofs[:, i * pl : (i + 1) * pl],
                query_rands[:, i * ql : (i + 1) * ql],
                joint_rands[:, i * jl : (i + 1) * jl],
                self.SHARES,
            )
            verifiers.append(v)
            ok &= usable
        state = VerifyState(out_shares, corrected, ok.copy())
        return state, VerifierShares(np.concatenate(verifiers, axis=1), part, ok)

    def verifier_shares_to_message_batch(
        self, ctx: bytes, verifier_shares: Sequence[VerifierShares]
    ) -> tuple[list[bytes | None], BoolArray]:
        """Combine the aggregators' verifier shares and decide each report (§7.2.2).

        Parameters
        ----------
        ctx : bytes
        verifier_shares : sequence of VerifierShares
            One per aggregator, in aggregator order.

        Returns
        -------
        messages : list of (bytes or None)
            The verifier message per report: the joint randomness seed, ``b""`` without joint
            randomness, None for a rejected report.
        ok : numpy.ndarray of bool
            ``(n,)``, True where every proof was accepted.
        """
        if len(verifier_shares) != self.SHARES:
            raise ParameterError(
                "verifier_shares",
                f"{len(verifier_shares)} shares",
                f"{self.SHARES} (one per aggregator)",
            )
        f = self.field
        total = verifier_shares[0].verifiers
        ok = verifier_shares[0].ok.copy()
        for vs in verifier_shares[1:]:
            total = f.add(total, vs.verifiers)
            ok &= vs.ok
        vl = self.flp.VERIFIER_LEN
        for i in range(self.PROOFS):
            ok &= self.flp.decide(total[:, i * vl : (i + 1) * vl])
        n = total.shape[0]
        if self.uses_joint_rand:
            parts_by_agg = [vs.joint_rand_parts for vs in verifier_shares]
            if any(p is None for p in parts_by_agg):
                raise ParameterError(
                    "verifier_shares",
                    "missing joint randomness parts",
                    "parts from every aggregator",
                )
            parts = [[p[i] for p in parts_by_agg if p is not None] for i in range(n)]
            seeds = self._joint_rand_seeds(ctx, parts)
            messages: list[bytes | None] = [
                s if good else None for s, good in zip(seeds, ok, strict=True)
            ]
        else:
            messages = [b"" if good else None for good in ok]
        return messages, ok

    def verify_next_batch(
        self, state: VerifyState, messages: Sequence[bytes | None]
    ) -> tuple[FieldArray, BoolArray]:
        """Finish verification (§7.2.2, ``verify_next``): check the joint randomness seed.

        Returns
        -------
        out_shares : numpy.ndarray
            ``(n, OUTPUT_LEN)`` output shares (aggregate only the rows where ``ok``).
        ok : numpy.ndarray of bool
            ``(n,)``: False where the message was None or did not match the corrected seed.
        """
        n = state.out_shares.shape[0]
        if len(messages) != n:
            raise ParameterError("messages", f"{len(messages)} messages", f"{n}, one per report")
        ok = state.ok.copy()
        for i, msg in enumerate(messages):
            if msg is None:
                ok[i] = False
            elif self.uses_joint_rand:
                seeds = state.corrected_joint_rand_seeds
                ok[i] &= seeds is not None and msg == seeds[i]
            else:
                ok[i] &= msg == b""
        return state.out_shares, ok

    # --- aggregation and unsharding (§7.2.4, §7.2.5) --------------------------------------------
    def aggregate(self, out_shares: FieldArray, mask: BoolArray | None = None) -> FieldArray:
        """The aggregate share: the sum of the output shares (rows where ``mask``); ``(OUTPUT_LEN,)``."""
        rows = out_shares if mask is None else out_shares[np.asarray(mask, dtype=bool)]
        if rows.shape[0] == 0:
            return self.field.zeros(self.flp.OUTPUT_LEN)
        return self.field.sum(rows, axis=0)

    def merge(self, agg_shares: Sequence[FieldArray]) -> FieldArray:
        """Sum of aggregate shares (§7.2.5)."""
        acc = self.field.zeros(self.flp.OUTPUT_LEN)
        for a in agg_shares:
            acc = self.field.add(acc, a)
        return acc

    def unshard(self, agg_shares: Sequence[FieldArray], num_measurements: int) -> Any:
        """The aggregate result from every aggregator's aggregate share (§7.2.5)."""
        if len(agg_shares) != self.SHARES:
            raise ParameterError("agg_shares", f"{len(agg_shares)} shares", f"{self.SHARES}")
        return self.flp.valid.decode(self.merge(agg_shares), num_measurements)

    # --- message encodings (§7.2.7) ------------------------------------------------------------
    def encode_public_share(self, public_share: Sequence[bytes] | None) -> bytes:
        """The public share's encoding: the joint randomness parts, concatenated."""
        return b"" if public_share is None else b"".join(public_share)

    def decode_public_share(self, encoded: bytes) -> list[bytes] | None:
        """Parse a public share. Raises DataError on a wrong length."""
        if not self.uses_joint_rand:
            if encoded:
                raise DataError("public share: expected 0 bytes")
            return None
        if len(encoded) != self.SHARES * SEED_SIZE:
            raise DataError(
                f"public share: {len(encoded)} bytes, expected {self.SHARES * SEED_SIZE}"
            )
        return [encoded[i : i + SEED_SIZE] for i in range(0, len(encoded), SEED_SIZE)]

    def encode_input_share(self, shares: InputShares, index: int) -> bytes:
        """Report ``index``'s input share for ``shares.agg_id`` (§7.2.7.2)."""
        blind = b"" if shares.blinds is None else shares.blinds[index]
        if shares.agg_id == 0:
            if shares.meas is None or shares.proofs is None:
                raise ParameterError(
                    "shares", "no measurement or proof shares", "the leader's shares"
                )
            return (
                self.field.encode(shares.meas[index])
                + self.field.encode(shares.proofs[index])
                + blind
            )
        if shares.seeds is None:
            raise ParameterError("shares", "no share seeds", "a helper's seeds")
        return shares.seeds[index] + blind

    def decode_input_shares(self, agg_id: int, encoded: Sequence[bytes]) -> InputShares:
        """Parse ``n`` input shares for aggregator ``agg_id``.

        Raises
        ------
        DataError
            If a share has the wrong length or an element is not below the modulus.
        """
        blind_len = SEED_SIZE if self.uses_joint_rand else 0
        f = self.field
        if agg_id == 0:
            ml = self.flp.MEAS_LEN * f.ENCODED_SIZE
            pl = self.flp.PROOF_LEN * self.PROOFS * f.ENCODED_SIZE
            want = ml + pl + blind_len
            for e in encoded:
                if len(e) != want:
                    raise DataError(f"leader input share: {len(e)} bytes, expected {want}")
            n = len(encoded)
            vals = f.decode(b"".join(e[: ml + pl] for e in encoded), "leader input share")
            vals = vals.reshape(n, self.flp.MEAS_LEN + self.flp.PROOF_LEN * self.PROOFS)
            blinds = [e[ml + pl :] for e in encoded] if blind_len else None
            return InputShares(
                0,
                meas=vals[:, : self.flp.MEAS_LEN],
                proofs=vals[:, self.flp.MEAS_LEN :],
                blinds=blinds,
            )
        want = SEED_SIZE + blind_len
        for e in encoded:
            if len(e) != want:
                raise DataError(f"helper input share: {len(e)} bytes, expected {want}")
        return InputShares(
            agg_id,
            seeds=[e[:SEED_SIZE] for e in encoded],
            blinds=[e[SEED_SIZE:] for e in encoded] if blind_len else None,
        )

    def encode_verifier_share(self, shares: VerifierShares, index: int) -> bytes:
        """Report ``index``'s verifier share (§7.2.7.3)."""
        part = b"" if shares.joint_rand_parts is None else shares.joint_rand_parts[index]
        return self.field.encode(shares.verifiers[index]) + part

    def decode_verifier_shares(self, encoded: Sequence[bytes]) -> VerifierShares:
        """Parse ``n`` verifier shares. Raises DataError on a malformed share."""
        f = self.field
        vl = self.flp.VERIFIER_LEN * self.PROOFS * f.ENCODED_SIZE
        want = vl + (SEED_SIZE if self.uses_joint_rand else 0)
        for e in encoded:
            if len(e) != want:
                raise DataError(f"verifier share: {len(e)} bytes, expected {want}")
        n = len(encoded)
        vals = f.decode(b"".join(e[:vl] for e in encoded), "verifier share").reshape(n, -1)
        parts = [e[vl:] for e in encoded] if self.uses_joint_rand else None
        return VerifierShares(vals, parts, np.ones(n, dtype=bool))

    def encode_agg_share(self, agg_share: FieldArray) -> bytes:
        """An aggregate share's encoding (§7.2.7.5)."""
        return self.field.encode(agg_share)

    def decode_agg_share(self, encoded: bytes) -> FieldArray:
        """Parse an aggregate share. Raises DataError on a malformed share."""
        vals = self.field.decode(encoded, "aggregate share")
        if vals.shape[0] != self.flp.OUTPUT_LEN:
            raise DataError(
                f"aggregate share: {vals.shape[0]} elements, expected {self.flp.OUTPUT_LEN}"
            )
        return vals

    # --- per-report API (a batch of one; bytes in, bytes out) -----------------------------------
    def shard(
        self, ctx: bytes, measurement: Any, nonce: bytes, rand: bytes | None = None
    ) -> tuple[bytes, list[bytes]]:
        """Shard one measurement; returns the encoded public share and input shares (§7.2.1).

        A device's path: plain Python integers and cached NTT tables (:mod:`fedstats.vdaf.single`),
        without the batch API's numpy overhead; the same bytes as :meth:`shard_batch`.

        Raises
        ------
        ParameterError
            If the measurement, nonce or ``rand`` is invalid.
        """
        if self._single:
            nonce = _check_bytes("nonce", nonce, NONCE_SIZE)
            rand = os.urandom(self.RAND_SIZE) if rand is None else rand
            rand = _check_bytes("rand", rand, self.RAND_SIZE)
            return shard_one(self, ctx, measurement, nonce, rand)
        batch = self.shard_batch(ctx, [measurement], [nonce], None if rand is None else [rand])
        public = self.encode_public_share(
            None if batch.public_shares is None else batch.public_shares[0]
        )
        return public, [self.encode_input_share(s, 0) for s in batch.input_shares]

    def verify_init(
        self,
        verify_key: bytes,
        ctx: bytes,
        agg_id: int,
        nonce: bytes,
        public_share: bytes,
        input_share: bytes,
    ) -> tuple[VerifyState, bytes]:
        """One aggregator's ``verify_init`` on encoded messages; returns its state and verifier share.

        Raises
        ------
        DataError
            If a message is malformed.
        SecurityError
            If the query point is unusable (negligible probability).
        """
        public = self.decode_public_share(public_share)
        shares = self.decode_input_shares(agg_id, [input_share])
        state, vs = self.verify_init_batch(
            verify_key, ctx, agg_id, [nonce], None if public is None else [public], shares
        )
        if not bool(vs.ok[0]):
            raise SecurityError("Prio3 verification: the query point is a root of unity")
        return state, self.encode_verifier_share(vs, 0)

    def verifier_shares_to_message(self, ctx: bytes, verifier_shares: Sequence[bytes]) -> bytes:
        """Combine encoded verifier shares into the verifier message.

        Raises
        ------
        SecurityError
            If the proof is rejected (the report is invalid or was tampered with).
        """
        decoded = [self.decode_verifier_shares([v]) for v in verifier_shares]
        messages, ok = self.verifier_shares_to_message_batch(ctx, decoded)
        if not bool(ok[0]) or messages[0] is None:
            raise SecurityError("Prio3 verification: proof verifier check failed")
        return messages[0]

    def verify_next(self, state: VerifyState, message: bytes) -> FieldArray:
        """Finish verification of one report; returns its output share ``(OUTPUT_LEN,)``.

        Raises
        ------
        SecurityError
            If the verifier message does not match this aggregator's joint randomness.
        """
        out, ok = self.verify_next_batch(state, [message])
        if not bool(ok[0]):
            raise SecurityError("Prio3 verification: joint randomness check failed")
        row: FieldArray = out[0]
        return row
