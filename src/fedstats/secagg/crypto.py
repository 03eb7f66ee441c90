"""Cryptographic building blocks of secure aggregation, all from the ``cryptography`` package.

* Key agreement: X25519 (two key pairs per client per session: one for mask seeds, one for encrypting
  shares), Bell et al. 2020, Alg. 2 steps 2, 3 and 5.
* Key derivation: HKDF-SHA256 with the session id as salt and a purpose label (plus the ordered pair of
  client indices) as info, so keys for different sessions, purposes and pairs are independent.
* Authenticated encryption of shares: ChaCha20-Poly1305 with associated data (session, sender, receiver).
* Pseudorandom generator ``F`` expanding a 32-byte seed into a mask of ``length`` integers mod 2^b:
  the AES-256-CTR keystream viewed as ``uint16/uint32/uint64`` (one keystream call per mask, no per-element
  Python).
* :class:`VerificationCache`: Ed25519 verification results (and parsed keys and rosters) shared by the
  parties of one simulated session, keyed by the exact bytes.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from fedstats.errors import ParameterError, SecurityError

if TYPE_CHECKING:
    from fedstats.secagg.identity import RosterVerifier, SessionRoster

__all__ = [
    "DTYPES",
    "LABEL_MASK",
    "LABEL_SELF_MASK",
    "LABEL_SHARE_ENCRYPTION",
    "KeyPair",
    "VerificationCache",
    "add_mask",
    "add_masks",
    "agree",
    "check_bits",
    "check_public_key",
    "decrypt_share",
    "derive_key",
    "encrypt_share",
    "expand_mask",
    "generate_key_pair",
    "mask_scratch",
    "mask_sign",
    "pair_key",
    "public_from_private",
    "roster_transcript",
    "seed_commitment",
    "self_mask_seed",
    "session_id",
]

LABEL_MASK = b"fedstats/secagg/v1/pairwise-mask"
LABEL_SELF_MASK = b"fedstats/secagg/v1/self-mask"
LABEL_SHARE_ENCRYPTION = b"fedstats/secagg/v1/share-encryption"
DTYPES: dict[int, type[np.unsignedinteger]] = {16: np.uint16, 32: np.uint32, 64: np.uint64}
"""Unsigned numpy dtype for each supported modulus width ``b`` (arithmetic mod 2^b wraps natively)."""


class KeyPair:
    """An X25519 key pair: the private key object and the 32-byte raw public key."""

    __slots__ = ("private", "public")

    def __init__(self, private: X25519PrivateKey) -> None:
        self.private = private
        self.public = private.public_key().public_bytes_raw()

    def private_bytes(self) -> bytes:
        """The 32-byte raw private key (what is secret-shared)."""
        return self.private.private_bytes_raw()


def generate_key_pair() -> KeyPair:
    """A fresh X25519 key pair from OS entropy (``cryptography``'s key generation)."""
    return KeyPair(X25519PrivateKey.generate())


def public_from_private(private: bytes) -> bytes:
    """The raw X25519 public key of a raw 32-byte private key (to check a reconstructed key)."""
    return X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()


def agree(private: X25519PrivateKey | bytes, peer_public: bytes) -> bytes:
    """X25519 shared secret with a peer's raw public key.

    Raises
    ------
    SecurityError
        If the peer's public key is malformed or a low-order point (all-zero shared secret).
    """
    priv = X25519PrivateKey.from_private_bytes(private) if isinstance(private, bytes) else private
    try:
        return priv.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError as exc:
        raise SecurityError(f"invalid X25519 public key from a peer: {exc}") from exc


_P25519 = (1 << 255) - 19
_LOW_ORDER_U = frozenset(
    {
        0,
        1,
        _P25519 - 1,
        325606250916557431795983626356110631294008115727848805560023387167927233504,
        39382357235489614581723060781553021112529911719440698176882885853963445705823,
    }
)
"""u-coordinates (mod p) of the points of order 1, 2, 4 and 8 on Curve25519 (libsodium's blocklist)."""


def check_public_key(public: bytes) -> None:
    """Validate an advertised X25519 public key: exactly 32 bytes and not a low-order point.

    A low-order point makes every Diffie-Hellman agreement with it one of at most 8 values, independent
    of the other party's key. The key is decoded as RFC 7748 does (top bit cleared, reduced mod
    ``2^255 - 19``, so non-canonical encodings are caught too) and compared with the five low-order
    u-coordinates.

    Raises
    ------
    SecurityError
        If the key has the wrong length or is a low-order point.
    """
    if len(public) != 32:
        raise SecurityError(f"an X25519 public key must be 32 bytes, got {len(public)}")
    u = (int.from_bytes(public, "little") & ((1 << 255) - 1)) % _P25519
    if u in _LOW_ORDER_U:
        raise SecurityError("advertised X25519 public key is a low-order point")


def session_id(round_id: bytes, advertised: dict[int, tuple[bytes, bytes]]) -> bytes:
    """SHA-256 of the round id, the participants and their two public keys, in index order.

    Parameters
    ----------
    round_id : bytes
        Caller-chosen identifier of the aggregation round (unique per round).
    advertised : dict int -> (bytes, bytes)
        Client index -> (mask public key, encryption public key) of every client that advertised keys.

    Returns
    -------
    bytes
        32 bytes, used as HKDF salt and in the associated data of every ciphertext.
    """
    h = hashlib.sha256()
    h.update(b"fedstats/secagg/v1/session\x00")
    h.update(struct.pack("<I", len(round_id)) + round_id)
    for idx in sorted(advertised):
        c_pk, s_pk = advertised[idx]
        h.update(struct.pack("<I", idx) + c_pk + s_pk)
    return h.digest()


def derive_key(shared: bytes, *, session: bytes, label: bytes, low: int, high: int) -> bytes:
    """HKDF-SHA256 of a shared secret, salted with the session id, info = label || (low, high) indices.

    The pair is ordered (``low < high``) so both ends derive the same key.
    """
    info = label + struct.pack("<II", low, high)
    # RFC 5869 with L = 32 = HashLen: PRK = HMAC(salt, IKM), OKM = T(1) = HMAC(PRK, info || 0x01).
    # The same bytes as cryptography's HKDF (a test checks it), without building an object per key:
    # every client derives about 2k of these per session.
    prk = hmac_sha256(session, shared)  # an empty salt is HMAC's zero key, as in RFC 5869
    return hmac_sha256(prk, info + b"\x01")


_TRANS_36 = bytes(x ^ 0x36 for x in range(256))
_TRANS_5C = bytes(x ^ 0x5C for x in range(256))


def hmac_sha256(key: bytes, msg: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104) of ``msg`` under ``key``: the bytes of ``hmac.digest(key, msg, "sha256")``.

    Built from two :func:`hashlib.sha256` calls, which keep the GIL for inputs under 2 KiB, whereas
    ``hmac.digest`` releases and re-takes it around every call. A device derives about ``4k`` of these per
    session (two per pair key, ``2k`` pair keys); with the 250 simulated devices of one benchmark process
    contending for the GIL, ``hmac.digest`` took 132 µs of CPU per call in their profile (n = 1,000 on
    the 2-core machine), against a few µs alone.
    """
    if len(key) > 64:
        key = hashlib.sha256(key).digest()
    key = key.ljust(64, b"\x00")
    inner = hashlib.sha256(key.translate(_TRANS_36) + msg).digest()
    return hashlib.sha256(key.translate(_TRANS_5C) + inner).digest()


def pair_key(
    private: X25519PrivateKey | bytes,
    peer_public: bytes,
    *,
    session: bytes,
    label: bytes,
    me: int,
    peer: int,
) -> bytes:
    """The key clients ``me`` and ``peer`` share for ``label`` (Bell et al. 2020, Alg. 2, key agreement).

    :func:`derive_key` of their X25519 secret (:func:`agree`), the pair ordered so that both ends (or
    the server, from a reconstructed private key) derive the same key.

    Parameters
    ----------
    private : X25519PrivateKey or bytes
        The private key of ``me`` (32 raw bytes when reconstructed by the server).
    peer_public : bytes
        The 32-byte raw X25519 public key of ``peer``.
    session : bytes
        The session transcript (HKDF salt).
    label : bytes
        What the key is for (``LABEL_MASK``, ``LABEL_SHARE_ENCRYPTION``).
    me, peer : int
        The two clients' indices in the session, ``>= 0`` and distinct.

    Returns
    -------
    bytes
        32 bytes.

    Raises
    ------
    SecurityError
        If ``peer_public`` is malformed or a low-order point.
    """
    shared = agree(private, peer_public)
    return derive_key(shared, session=session, label=label, low=min(me, peer), high=max(me, peer))


def mask_sign(me: int, peer: int) -> int:
    """The sign with which client ``me`` adds the mask it shares with ``peer`` (Bell et al. 2020, Alg. 2).

    Parameters
    ----------
    me, peer : int
        Two distinct client indices.

    Returns
    -------
    int
        +1 if ``peer`` is the higher index, else -1: the pair's two masks cancel in the sum.
    """
    return +1 if peer > me else -1


def mask_scratch() -> bytearray:
    """A buffer for :func:`add_mask` to reuse across calls.

    Returns
    -------
    bytearray
        ``2**18 + 15`` bytes: one keystream step and 15 spare bytes.
    """
    return bytearray(_CHUNK + 15)


def seed_commitment(session: bytes, client: int, seed: bytes) -> bytes:
    """SHA-256 commitment to a client's self-mask seed (the server checks the reconstructed seed)."""
    return hashlib.sha256(
        b"fedstats/secagg/v2/seed-commit" + session + struct.pack("<I", client) + seed
    ).digest()


def self_mask_seed(session: bytes, client: int, seed: bytes) -> bytes:
    """PRG key of the self mask ``r_i = F(b_i)``, derived from ``b_i`` with its own HKDF label."""
    return derive_key(seed, session=session, label=LABEL_SELF_MASK, low=client, high=client)


def roster_transcript(roster: SessionRoster) -> bytes:
    """HKDF salt of a malicious-model session: SHA-256 of a label and the signed roster."""
    return hashlib.sha256(b"fedstats/secagg/v2/transcript\x00" + roster.digest()).digest()


def _aad(session: bytes, sender: int, receiver: int) -> bytes:
    return session + struct.pack("<II", sender, receiver)


def _nonce(sender: int, receiver: int) -> bytes:
    # One message per direction per (session-bound) key, so (sender, receiver) is a unique nonce.
    return struct.pack("<IIi", sender, receiver, 0)


def encrypt_share(
    key: bytes, plaintext: bytes, *, session: bytes, sender: int, receiver: int
) -> bytes:
    """ChaCha20-Poly1305 encryption of a share message with AD = session || sender || receiver."""
    return ChaCha20Poly1305(key).encrypt(
        _nonce(sender, receiver), plaintext, _aad(session, sender, receiver)
    )


def decrypt_share(
    key: bytes, ciphertext: bytes, *, session: bytes, sender: int, receiver: int
) -> bytes:
    """Decrypt and authenticate a share ciphertext.

    Raises
    ------
    SecurityError
        If the ciphertext, the session, the sender or the receiver was altered (authentication fails).
    """
    try:
        return ChaCha20Poly1305(key).decrypt(
            _nonce(sender, receiver), ciphertext, _aad(session, sender, receiver)
        )
    except InvalidTag as exc:
        raise SecurityError(
            f"share ciphertext from client {sender} to client {receiver} failed authentication"
        ) from exc


_local = threading.local()


def _zeros(nbytes: int) -> bytes:
    z: bytes | None = getattr(_local, "zeros", None)
    if z is None or len(z) < nbytes:
        z = bytes(max(nbytes, 1 << 16))
        _local.zeros = z
    return z


def check_bits(bits: int) -> type[np.unsignedinteger]:
    """The unsigned dtype of a modulus width.

    Parameters
    ----------
    bits : int
        The ring is the integers mod ``2**bits``: 16, 32 or 64.

    Returns
    -------
    type
        ``numpy.uint16``, ``numpy.uint32`` or ``numpy.uint64``.

    Raises
    ------
    ParameterError
        If ``bits`` is not 16, 32 or 64.
    """
    if bits not in DTYPES:
        raise ParameterError("bits", bits, "one of 16, 32, 64")
    return DTYPES[bits]


_CHUNK = 1 << 18
"""Bytes of keystream per step when adding a mask: small enough to stay in cache while it is added."""


_CTR_ZERO = modes.CTR(bytes(16))  # an immutable value: one object for every mask


def _cipher(seed: bytes) -> Any:
    return Cipher(algorithms.AES(seed), _CTR_ZERO).encryptor()


def expand_mask(seed: bytes, length: int, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """PRG ``F``: expand a 32-byte seed into ``length`` uniform integers mod 2^bits.

    The AES-256-CTR keystream (key = seed, zero counter block) is written by ``cryptography`` straight
    into the output array's memory and viewed as unsigned integers of width ``bits`` (one keystream call,
    plus one for the last 15 bytes); each seed is used for exactly one mask.

    Parameters
    ----------
    seed : bytes
        32-byte key (from HKDF, never reused across sessions or purposes).
    length : int
        Number of elements, >= 0.
    bits : int
        16, 32 or 64.
    out : numpy.ndarray, optional
        C-contiguous ``uint{bits}`` array of shape ``(length,)`` to fill (avoids an allocation).

    Returns
    -------
    numpy.ndarray
        Shape ``(length,)``, dtype ``uint{bits}``, writable (``out`` when given).

    Raises
    ------
    ParameterError
        If ``bits`` is not 16, 32 or 64, or ``out`` has the wrong shape or dtype.
    """
    dtype = check_bits(bits)
    if out is None:
        out = np.empty(length, dtype=dtype)
    elif out.dtype != dtype or out.shape != (length,) or not out.flags.c_contiguous:
        raise ParameterError(
            "out", f"<{out.dtype} {out.shape}>", f"a contiguous uint{bits} ({length},) array"
        )
    nbytes = out.nbytes
    mv = memoryview(out.view(np.uint8))  # type: ignore[arg-type]
    zeros = memoryview(_zeros(nbytes))
    enc = _cipher(seed)
    head = max(0, nbytes - 15)  # update_into needs 15 spare bytes after the data
    if head:
        enc.update_into(zeros[:head], mv)
    tail = nbytes - head
    if tail:
        scratch = bytearray(tail + 15)
        enc.update_into(zeros[:tail], scratch)
        mv[head:] = scratch[:tail]
    return out


def add_mask(acc: np.ndarray, seed: bytes, *, sign: int, scratch: bytearray | None = None) -> None:
    """``acc += sign * F(seed)`` in place, mod 2^b (b from ``acc.dtype``).

    The keystream is produced in 256 KiB steps into a small reusable buffer and added while it is still in
    cache, so a mask costs one pass over ``acc`` (about the raw AES-CTR throughput). Several masks:
    :func:`add_masks`.

    Parameters
    ----------
    acc : numpy.ndarray
        1-D C-contiguous unsigned array (uint16/32/64), modified in place.
    seed : bytes
        32-byte PRG seed.
    sign : int
        +1 or -1.
    scratch : bytearray, optional
        Buffer of at least 256 KiB + 15 bytes reused across calls.
    """
    add_masks(acc, [(seed, sign)], scratch=scratch)


def add_masks(
    acc: np.ndarray, masks: Sequence[tuple[bytes, int]], *, scratch: bytearray | None = None
) -> None:
    """``acc += sum(sign * F(seed) for seed, sign in masks)`` in place, mod 2^b.

    The same result as one :func:`add_mask` per mask, computed block by block: each 256 KiB block of
    ``acc`` receives every mask's keystream for that block while it stays in cache (one AES-CTR context
    per mask, advanced block by block), so ``acc`` is read and written once from memory, not once per
    mask.

    Parameters
    ----------
    acc : numpy.ndarray
        1-D C-contiguous unsigned array (uint16/32/64), modified in place.
    masks : sequence of (bytes, int)
        ``(32-byte seed, sign)`` pairs, sign +1 or -1.
    scratch : bytearray, optional
        Buffer of at least 256 KiB + 15 bytes reused across calls.
    """
    if not masks:
        return
    if scratch is None or len(scratch) < _CHUNK + 15:
        scratch = bytearray(_CHUNK + 15)
    item = acc.dtype.itemsize
    step = _CHUNK // item
    view = np.frombuffer(scratch, dtype=np.uint8, count=_CHUNK).view(acc.dtype)
    zeros = memoryview(_zeros(_CHUNK))
    streams = [
        (_cipher(seed).update_into, np.add if sign > 0 else np.subtract) for seed, sign in masks
    ]
    n = acc.size
    for s in range(0, n, step):
        e = min(n, s + step)
        block, key, z = acc[s:e], view[: e - s], zeros[: (e - s) * item]
        for update_into, op in streams:
            update_into(z, scratch)
            op(block, key, out=block)


_SIGNATURE_BYTES = 64


class VerificationCache:
    """Ed25519 verification results shared by the parties of one simulated session.

    In :func:`~fedstats.secagg.driver.run_secure_aggregation` all ``n`` clients and the server live in
    one process, and the malicious model makes them verify the same signatures over and over: the
    server checks each client's key advertisement, then each of the client's ``k`` neighbours checks it
    again; each consistency signature is checked by the server and by every client within two hops.
    This cache verifies each distinct ``(public key, signature, message)`` once and hands the same
    answer to every later party that asks.

    Why this is sound: Ed25519 verification (RFC 8032, as ``cryptography``/OpenSSL implement it) is a
    deterministic function of the three byte strings, with no secret input and no state. The cache key
    is the triple itself (a tuple of the exact ``bytes``, compared for equality by the dictionary, not a
    digest of them), so a hit means that the very same bytes were verified under the very same public
    key, and the party asking gets exactly the answer its own computation would give, valid or invalid.
    A party that is meant to check independently still does: a forged or altered signature, message or
    key is a different key in the cache and is verified afresh. Everything in the cache is public (keys,
    signatures, signed bytes), so sharing it between parties reveals nothing. The cache is per run
    (never global), so it is bounded by the session's messages and dies with it.

    The rosters are cached the same way (:meth:`roster`): the serialized roster each client receives is
    parsed and checked by the pinned verifier once per distinct ``(verifier, bytes)``.

    It is a simulation device: in a deployment every device verifies on its own, and the per-party
    compute times of a cached run no longer include the verifications another party already paid for
    (:attr:`verified` and :attr:`hits` count both).

    Parameters
    ----------
    rosters : bool, default True
        Cache roster checks too (:meth:`roster`). A long-lived cache shared by parties that come and go
        (the device SDK's, :data:`fedstats.client.secure.SIGNATURES`) passes False: every roster is then
        parsed and checked by its own verifier, and only the Ed25519 triples are shared.
    max_entries : int, optional
        Forget every remembered result once this many are held (a bound for a process-wide cache); None:
        unbounded (a cache that lives for one run).

    Attributes
    ----------
    verified : int
        Signatures actually verified (cache misses).
    hits : int
        Verifications answered from the cache.
    """

    __slots__ = (
        "_keys",
        "_max_entries",
        "_results",
        "_rosters",
        "_share_rosters",
        "hits",
        "verified",
    )

    def __init__(self, *, rosters: bool = True, max_entries: int | None = None) -> None:
        if max_entries is not None and (isinstance(max_entries, bool) or int(max_entries) < 1):
            raise ParameterError("max_entries", max_entries, "None or an integer >= 1")
        self._keys: dict[bytes, Ed25519PublicKey | None] = {}
        self._results: dict[tuple[bytes, bytes, bytes], bool] = {}
        self._rosters: dict[tuple[int, bytes], tuple[SessionRoster, bytes, RosterVerifier]] = {}
        self._share_rosters = bool(rosters)
        self._max_entries = None if max_entries is None else int(max_entries)
        self.verified = 0
        self.hits = 0

    def public_key(self, public: bytes) -> Ed25519PublicKey | None:
        """The parsed Ed25519 public key of 32 raw bytes (None when malformed), parsed once.

        Parameters
        ----------
        public : bytes
            Raw public key.

        Returns
        -------
        Ed25519PublicKey or None
        """
        public = bytes(public)
        try:
            return self._keys[public]
        except KeyError:
            pass
        key: Ed25519PublicKey | None = None
        if len(public) == 32:
            try:
                key = Ed25519PublicKey.from_public_bytes(public)
            except ValueError:
                key = None
        self._keys[public] = key
        return key

    def verify(self, public: bytes, signature: bytes, data: bytes) -> bool:
        """True when ``signature`` is a valid Ed25519 signature of ``data`` under ``public``.

        The same answer as :func:`fedstats.secagg.identity.verify_signature`, computed once per distinct
        triple of byte strings.

        Parameters
        ----------
        public : bytes
            Raw 32-byte Ed25519 public key.
        signature : bytes
            64-byte signature.
        data : bytes
            The signed message.

        Returns
        -------
        bool
        """
        triple = (bytes(public), bytes(signature), bytes(data))
        try:
            ok = self._results[triple]
        except KeyError:
            pass
        else:
            self.hits += 1
            return ok
        key = self.public_key(triple[0])
        ok = False
        if key is not None and len(triple[1]) == _SIGNATURE_BYTES:
            self.verified += 1
            try:
                key.verify(triple[1], triple[2])
                ok = True
            except InvalidSignature:
                ok = False
        if self._max_entries is not None and len(self._results) >= self._max_entries:
            self._results.clear()
            self._keys.clear()
        self._results[triple] = ok
        return ok

    def roster(
        self, data: bytes, verifier: RosterVerifier, *, max_clients: int
    ) -> tuple[SessionRoster, bytes]:
        """Parse a serialized roster, check it with ``verifier`` and compute its transcript, once.

        Parameters
        ----------
        data : bytes
            The serialized :class:`~fedstats.secagg.identity.SessionRoster`.
        verifier : RosterVerifier
            The client's pinned verifier (results are cached per verifier object: a client with another
            verifier checks the roster itself).
        max_clients : int
            Refuse rosters listing more clients.

        Returns
        -------
        roster : SessionRoster
        transcript : bytes
            :func:`roster_transcript` of the roster.

        Raises
        ------
        DataError
            Malformed roster.
        SecurityError
            ``verifier`` refuses it (failures are not cached: every client gets its own exception).
        """
        from fedstats.secagg.identity import SessionRoster

        if not self._share_rosters:
            roster = SessionRoster.from_bytes(data, max_clients=max_clients)
            verifier.verify(roster)
            return roster, roster_transcript(roster)
        key = (id(verifier), bytes(data))
        hit = self._rosters.get(key)
        if hit is not None and hit[2] is verifier and hit[0].n <= max_clients:
            self.hits += 1
            return hit[0], hit[1]
        roster = SessionRoster.from_bytes(data, max_clients=max_clients)
        verifier.verify(roster)
        transcript = roster_transcript(roster)
        self._rosters[key] = (roster, transcript, verifier)  # holds verifier: its id stays unique
        return roster, transcript
