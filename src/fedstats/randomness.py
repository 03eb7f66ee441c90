"""Randomness for fedstats: secure by default, reproducible on request, keyed by (run, round, shard).

A :class:`RandomSource` hands out independent random streams, each named by a *key* (a tuple of
non-negative integers and strings such as ``("round", 1, "block", 17)``). Two domains are kept apart:

* **private** randomness (:meth:`RandomSource.generator`): a client's coins and noise, never shared;
* **public** randomness (:meth:`RandomSource.public`, :meth:`RandomSource.public_seed`): values every party
  may know, such as a projection seed or a dithering offset.

Without a seed the source is *secure*: a 256-bit key from the operating system's entropy pool feeds an
AES-256-CTR keystream from the ``cryptography`` package (one independent key per stream, derived with
HMAC-SHA256), wrapped by :class:`SecureGenerator`, which offers the subset of
:class:`numpy.random.Generator` methods fedstats uses. With a seed the source is *reproducible*: each stream
is a PCG64DXSM generator seeded by ``SeedSequence(seed, spawn_key=key)``, so a stream depends only on the
seed and its key, never on the order of calls, the worker or the chunk size. A seeded run is marked
"not for release".

Examples
--------
>>> rs = RandomSource(seed=7)
>>> a = rs.generator("round", 0, "block", 3).random(2)
>>> b = RandomSource(seed=7).generator("round", 0, "block", 3).random(2)
>>> bool((a == b).all()), rs.reproducible
(True, True)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from fedstats._validation import check_int
from fedstats.errors import ParameterError

__all__ = [
    "RNG",
    "SPLITMIX64_GAMMA",
    "KeyPart",
    "RandomSource",
    "SecureGenerator",
    "as_generator",
    "binomial_quantile",
    "splitmix64",
]

KeyPart: TypeAlias = int | str
Size: TypeAlias = int | tuple[int, ...] | None

_DOMAIN_PRIVATE = 0
_DOMAIN_PUBLIC = 1
_DOMAIN_NAMES = {_DOMAIN_PRIVATE: "private", _DOMAIN_PUBLIC: "public"}
_TWO_POW_53 = float(2**53)
_CHUNK = 1 << 20  # bytes of keystream per cipher call in SecureGenerator._words
_ZEROS = bytes(_CHUNK)  # shared, immutable plaintext: the CTR keystream is the encryption of zeros
_RELEASE_NOTE = "reproducible (seeded) run: not for release"


def _key_ints(key: Sequence[KeyPart]) -> tuple[int, ...]:
    """Map a stream key to non-negative 64-bit integers (strings through SHA-256)."""
    out: list[int] = []
    for part in key:
        if isinstance(part, bool):
            raise ParameterError("key", part, "non-negative integers or strings")
        if isinstance(part, (int, np.integer)):
            v = int(part)
            if v < 0 or v >= 2**64:
                raise ParameterError("key", part, "non-negative integers below 2**64 or strings")
            out.append(v)
        elif isinstance(part, str):
            out.append(int.from_bytes(hashlib.sha256(part.encode()).digest()[:8], "little"))
        else:
            raise ParameterError("key", part, "non-negative integers or strings")
    return tuple(out)


def _key_bytes(ints: Sequence[int]) -> bytes:
    return b"".join(i.to_bytes(8, "little") for i in ints)


SPLITMIX64_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's counter increment (golden ratio)
_MIX_M1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function, vectorized: the library's one counter hash.

    Counter-based public randomness (the stable projection's entries, bit pushing's shared dither) is
    ``splitmix64(key + i * SPLITMIX64_GAMMA)`` for counters ``i``: any range of counters can be
    regenerated, in any order, in bounded memory, by client and server alike. Not cryptographic: it spreads
    a secret-free public seed; private randomness comes from :class:`RandomSource`.

    Parameters
    ----------
    z : numpy.ndarray of uint64
        Any shape (wrap-around arithmetic: call under ``np.errstate(over="ignore")``).

    Returns
    -------
    numpy.ndarray of uint64
        Same shape.

    Notes
    -----
    Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014 (the ``mix64``
    variant 13 constants of Java's ``SplittableRandom``).
    """
    z = (z ^ (z >> np.uint64(30))) * _MIX_M1
    z = (z ^ (z >> np.uint64(27))) * _MIX_M2
    out: np.ndarray = z ^ (z >> np.uint64(31))
    return out


def binomial_quantile(u: Any, n: Any, p: Any) -> np.ndarray:
    """``scipy.stats.binom.ppf(u, n, p)`` as int64, for ``u`` in (0, 1], without importing ``scipy.stats``.

    The same computation as scipy's (its ``binom`` distribution calls the boost ufunc ``_binom_ppf`` for
    ``0 < u < 1`` and returns ``n`` at ``u = 1``), reached through ``scipy.special`` (26 ms to import
    instead of 200 ms); if a scipy release moves the ufunc, ``scipy.stats`` is used. Equality with
    ``scipy.stats.binom.ppf`` is tested.

    Parameters
    ----------
    u : array_like of float
        Probabilities in (0, 1].
    n : array_like of int
        Trials, >= 0.
    p : array_like of float
        Success probabilities in [0, 1].

    Returns
    -------
    numpy.ndarray
        int64, the broadcast shape of the arguments.
    """
    try:
        from scipy.special._ufuncs import _binom_ppf
    except ImportError:  # pragma: no cover - a scipy that moved the ufunc
        import scipy.stats

        return np.asarray(scipy.stats.binom.ppf(u, n, p)).astype(np.int64)
    u, n, p = np.asarray(u, dtype=np.float64), np.asarray(n), np.asarray(p, dtype=np.float64)
    q = np.where(u >= 1.0, 0.5, u)  # u = 1 maps to n below
    return np.asarray(np.where(u >= 1.0, n, _binom_ppf(q, n, p))).astype(np.int64)


class SecureGenerator:
    """Random variates from an AES-256-CTR keystream (``cryptography``), vectorized with numpy.

    Offers the subset of :class:`numpy.random.Generator` that fedstats uses, with the same signatures:
    ``random``, ``random_raw``, ``integers``, ``uniform``, ``standard_normal``, ``normal``,
    ``standard_exponential``, ``exponential``, ``laplace``, ``geometric``, ``binomial``, ``poisson``,
    ``choice``, ``permutation``, ``bytes``. Uniform doubles carry 53 random bits; normals use the
    Box-Muller transform and discrete variates exact inversion, so every variate is a deterministic
    function of the keystream.

    Parameters
    ----------
    key : bytes
        32-byte AES-256 key. Each stream must have its own key.
    nonce : bytes, optional
        16-byte initial counter block; default all zeros (safe because keys are never reused).

    Raises
    ------
    ParameterError
        If the key is not 32 bytes or the nonce not 16 bytes.
    """

    def __init__(self, key: bytes, nonce: bytes = bytes(16)) -> None:
        if len(key) != 32:
            raise ParameterError("key", f"<{len(key)} bytes>", "32 bytes")
        if len(nonce) != 16:
            raise ParameterError("nonce", f"<{len(nonce)} bytes>", "16 bytes")
        self._enc = Cipher(algorithms.AES(key), modes.CTR(nonce)).encryptor()

    # -- raw material -------------------------------------------------------------------------
    def bytes(self, length: int) -> bytes:
        """Return ``length`` bytes of keystream."""
        if length > _CHUNK:
            return self._keystream(length)[:length].tobytes()
        return self._enc.update(memoryview(_ZEROS)[:length])

    def _keystream(self, nbytes: int) -> np.ndarray:
        """The next ``nbytes`` keystream bytes written into a fresh uint8 array of ``nbytes + 16`` bytes.

        The cipher writes straight into the array (``update_into``, which needs block_size - 1 spare
        bytes) in chunks of ``_CHUNK`` bytes, so no intermediate ``bytes`` object is built; the zero
        plaintext is one module-level buffer shared by every generator (no per-generator memory). Only
        ``nbytes`` bytes of keystream are consumed, exactly as :meth:`bytes` would.
        """
        buf = np.empty(nbytes + 16, dtype=np.uint8)
        view = memoryview(buf.data).cast("B")
        zeros = memoryview(_ZEROS)
        pos = 0
        while pos < nbytes:
            step = min(_CHUNK, nbytes - pos)
            self._enc.update_into(zeros[:step], view[pos:])
            pos += step
        return buf

    def _words(self, n: int) -> np.ndarray:
        """``n`` keystream words as a fresh, writable uint64 array (keystream order as :meth:`bytes`)."""
        return self._keystream(8 * n)[: 8 * n].view(np.uint64)

    def random_raw(self, size: Size = None) -> Any:
        """Return uniform 64-bit unsigned integers of the given shape (a Python int when size is None)."""
        n = int(np.prod(size)) if size is not None else 1
        arr = self._words(n)
        return int(arr[0]) if size is None else arr.reshape(size)

    def _unit(self, size: Size, *, open_low: bool = False) -> Any:
        raw = self._words(1 if size is None else int(np.prod(size)))
        np.right_shift(raw, np.uint64(11), out=raw)
        u = raw.view(np.int64).astype(np.float64)  # exact: values below 2^53
        if open_low:
            u += 0.5  # values in (0, 1): (k + 1/2) / 2^53
        u *= 1.0 / _TWO_POW_53  # a power of two: identical to dividing
        return float(u[0]) if size is None else u.reshape(size)

    # -- continuous ---------------------------------------------------------------------------
    def random(self, size: Size = None) -> Any:
        """Uniform doubles in [0, 1) with 53 random bits."""
        return self._unit(size)

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Size = None) -> Any:
        """Uniform doubles in [low, high)."""
        return low + (np.asarray(high) - low) * self._unit(size)

    def standard_normal(self, size: Size = None) -> Any:
        """Standard normal variates (Box-Muller on open-interval uniforms)."""
        n = 1 if size is None else int(np.prod(size))
        half = (n + 1) // 2
        r = self._unit(half, open_low=True)
        theta = self._unit(half)
        # in place (same values as r = sqrt(-2 log u1), theta = 2 pi u2): fewer temporaries
        np.log(r, out=r)
        r *= -2.0
        np.sqrt(r, out=r)
        theta *= 2.0 * np.pi
        z = np.empty(2 * half)
        np.cos(theta, out=z[:half])
        z[:half] *= r
        np.sin(theta, out=z[half:])
        z[half:] *= r
        out = z[:n]
        return float(out[0]) if size is None else out.reshape(size)

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Size = None) -> Any:
        """Normal variates with mean ``loc`` and standard deviation ``scale``."""
        if size is None:
            size = np.broadcast(np.asarray(loc), np.asarray(scale)).shape or None
        return loc + np.asarray(scale) * self.standard_normal(size)

    def standard_exponential(self, size: Size = None) -> Any:
        """Exponential(1) variates by inversion, ``-log(U)`` with U in (0, 1)."""
        return -np.log(self._unit(size, open_low=True))

    def exponential(self, scale: Any = 1.0, size: Size = None) -> Any:
        """Exponential variates with the given scale (mean)."""
        if size is None:
            size = np.asarray(scale).shape or None
        return np.asarray(scale) * self.standard_exponential(size)

    def laplace(self, loc: Any = 0.0, scale: Any = 1.0, size: Size = None) -> Any:
        """Laplace variates (random sign times an exponential)."""
        if size is None:
            size = np.broadcast(np.asarray(loc), np.asarray(scale)).shape or None
        n = 1 if size is None else int(np.prod(size))
        raw = np.asarray(self.random_raw(n))
        sign = np.where((raw & np.uint64(1)) == 1, 1.0, -1.0)
        u = ((raw >> np.uint64(11)).astype(np.float64) + 0.5) / _TWO_POW_53
        e = -np.log(u) * sign
        e = e[0] if size is None else e.reshape(size)
        return loc + np.asarray(scale) * e

    # -- discrete -----------------------------------------------------------------------------
    def integers(
        self,
        low: int,
        high: int | None = None,
        size: Size = None,
        dtype: Any = np.int64,
        endpoint: bool = False,
    ) -> Any:
        """Uniform integers in [low, high) (or [low, high] with ``endpoint``), by masked rejection."""
        if high is None:
            low, high = 0, low
        span = int(high) - int(low) + (1 if endpoint else 0)
        if span <= 0:
            raise ParameterError("high", high, f"a value above low={low}")
        if span > 2**63:
            raise ParameterError("high - low", span, "at most 2**63")
        n = 1 if size is None else int(np.prod(size))
        mask = np.uint64((1 << (span - 1).bit_length()) - 1) if span > 1 else np.uint64(0)
        out = np.empty(n, dtype=np.uint64)
        filled = 0
        while filled < n:
            need = n - filled
            cand = np.asarray(self.random_raw(max(2 * need, 16))) & mask
            cand = cand[cand < np.uint64(span)][:need]
            out[filled : filled + cand.size] = cand
            filled += cand.size
        res = (out.astype(np.int64) + int(low)).astype(dtype)
        return res[0] if size is None else res.reshape(size)

    def geometric(self, p: Any, size: Size = None) -> Any:
        """Geometric variates on {1, 2, ...} with success probability ``p``, by inversion."""
        if size is None:
            size = np.asarray(p).shape or None
        u = self._unit(size, open_low=True)
        return (np.floor(np.log(u) / np.log1p(-np.asarray(p))) + 1).astype(np.int64)

    def binomial(self, n: Any, p: Any, size: Size = None) -> Any:
        """Binomial variates by exact inversion of the CDF (scipy's ``binom.ppf``)."""
        if size is None:
            size = np.broadcast(np.asarray(n), np.asarray(p)).shape or None
        u = self._unit(size, open_low=True)
        return binomial_quantile(u, n, p)

    def poisson(self, lam: Any = 1.0, size: Size = None) -> Any:
        """Poisson variates by exact inversion of the CDF (scipy's ``poisson.ppf``)."""
        if size is None:
            size = np.asarray(lam).shape or None
        u = self._unit(size, open_low=True)
        import scipy.stats

        return np.asarray(scipy.stats.poisson.ppf(u, lam)).astype(np.int64)

    def permutation(self, x: Any) -> Any:
        """A uniformly random permutation of ``range(x)`` (int) or of the first axis of ``x``."""
        arr = np.arange(x) if isinstance(x, (int, np.integer)) else np.asarray(x)
        keys = np.asarray(self.random_raw(len(arr)))
        return arr[np.argsort(keys, kind="stable")]

    def choice(self, a: Any, size: Size = None, replace: bool = True, p: Any = None) -> Any:
        """Random sample from ``a`` (int or 1-D array), uniform or with probabilities ``p``."""
        pool = np.arange(a) if isinstance(a, (int, np.integer)) else np.asarray(a)
        n = 1 if size is None else int(np.prod(size))
        if p is not None:
            cdf = np.cumsum(np.asarray(p, dtype=np.float64))
            cdf /= cdf[-1]
            if not replace:
                raise ParameterError("replace", replace, "True when p is given")
            idx = np.searchsorted(cdf, self._unit(n), side="right")
        elif replace:
            idx = self.integers(0, len(pool), size=n)
        else:
            if n > len(pool):
                raise ParameterError("size", size, f"at most {len(pool)} without replacement")
            idx = self.permutation(len(pool))[:n]
        out = pool[np.minimum(idx, len(pool) - 1)]
        return out[0] if size is None else out.reshape(size)


RNG: TypeAlias = np.random.Generator | SecureGenerator
"""A random generator fedstats code may draw from: numpy's (reproducible) or :class:`SecureGenerator`."""


class RandomSource:
    """Where every random draw in fedstats comes from.

    Parameters
    ----------
    seed : int or None, optional
        ``None`` (default): secure, from OS entropy, not reproducible. A non-negative integer: reproducible
        streams, and every result produced is marked "not for release".

    Raises
    ------
    ParameterError
        If ``seed`` is not a non-negative integer.

    Notes
    -----
    The object is small and picklable, so it can travel to Dask workers; a stream depends only on the
    seed (or secret key) and its key, which is what makes results identical on every backend.
    """

    __slots__ = ("_master", "_prefix", "_seed")

    def __init__(
        self,
        seed: int | None = None,
        *,
        _master: bytes | None = None,
        _prefix: tuple[int, ...] = (),
    ) -> None:
        if seed is not None:
            seed = check_int("seed", seed, low=0, high=2**128 - 1)
            self._master = None
        else:
            self._master = _master if _master is not None else os.urandom(32)
        self._seed = seed
        self._prefix = _prefix

    def __getstate__(self) -> tuple[Any, ...]:
        return (self._seed, self._master, self._prefix)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self._seed, self._master, self._prefix = state

    @classmethod
    def secure(cls) -> RandomSource:
        """A secure (OS-entropy) source."""
        return cls(None)

    @property
    def seed(self) -> int | None:
        """The seed, or ``None`` for a secure source."""
        return self._seed

    @property
    def reproducible(self) -> bool:
        """True when seeded: results are reproducible and must not be released."""
        return self._seed is not None

    @property
    def release_note(self) -> str | None:
        """``"reproducible (seeded) run: not for release"`` when seeded, else ``None``."""
        return _RELEASE_NOTE if self.reproducible else None

    def child(self, *key: KeyPart) -> RandomSource:
        """A source whose streams are all under ``key`` (e.g. one per run or repetition)."""
        return RandomSource(self._seed, _master=self._master, _prefix=self._prefix + _key_ints(key))

    def _stream(self, domain: int, key: Sequence[KeyPart]) -> RNG:
        ints = (domain, *self._prefix, *_key_ints(key))
        if self._seed is not None:
            ss = np.random.SeedSequence(entropy=self._seed, spawn_key=ints)
            return np.random.Generator(np.random.PCG64DXSM(ss))
        assert self._master is not None
        h = hmac.HMAC(self._master, hashes.SHA256())
        h.update(b"fedstats-stream\x00" + _key_bytes(ints))
        return SecureGenerator(h.finalize())

    def generator(self, *key: KeyPart) -> RNG:
        """Private randomness: the stream named ``key`` (a client's coins and noise)."""
        return self._stream(_DOMAIN_PRIVATE, key)

    def public(self, *key: KeyPart) -> RNG:
        """Public randomness: the stream named ``key`` in the public domain (shared values)."""
        return self._stream(_DOMAIN_PUBLIC, key)

    def public_seed(self, *key: KeyPart) -> int:
        """A 128-bit public seed named ``key``, to send to clients as a plain integer."""
        g = self.public("seed", *key)
        raw = g.random_raw(2) if isinstance(g, SecureGenerator) else g.integers(0, 2**63, size=2)
        return (int(raw[0]) << 64) | int(raw[1])

    def __repr__(self) -> str:
        kind = f"seed={self._seed}" if self._seed is not None else "secure"
        return f"RandomSource({kind}, prefix={self._prefix})"


def as_generator(seed: int | RNG | RandomSource | None, *key: KeyPart) -> RNG:
    """Turn the usual ways of passing randomness into a generator.

    Parameters
    ----------
    seed : int, numpy Generator, SecureGenerator, RandomSource or None
        ``None`` gives a secure generator; an int a reproducible one; a generator is returned as is; a
        RandomSource gives its private stream ``key``.
    *key : int or str
        Stream key used when a seed or source is given.

    Returns
    -------
    numpy.random.Generator or SecureGenerator
    """
    if isinstance(seed, (np.random.Generator, SecureGenerator)):
        return seed
    if isinstance(seed, RandomSource):
        return seed.generator(*key)
    return RandomSource(seed).generator(*key)
