"""Helpers shared by the benchmark scripts: results file, peak memory, timing."""

from __future__ import annotations

import json
import os
import platform
import resource
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedstats._io import atomic_write_text
from fedstats.results import to_jsonable

RESULTS = Path(__file__).resolve().parent / "results"


def memory_touch_rate(gib: float = 1.0) -> dict[str, float]:
    """How fast this process's new memory is touched for the first time, GiB/s (a machine descriptor).

    On this project's machines (virtual machines) the host backs guest memory only when the guest
    touches it, and takes back within seconds what the guest frees (``benchmarks/memory_touch.py``: 2 GiB
    allocated and written took 4.6 s, again at once 0.23 s, after 5 s 2.9 s and after 20 s 5.0 s).
    Every page a process takes from the kernel therefore costs it about 9 microseconds of CPU here,
    on any machine of this kind and however long it has run: page faults count in a server's CPU
    (``server_page_faults`` of ``benchmarks/service_secagg.py``). The rate varies with the host's load,
    so it is recorded beside each benchmark's results.

    Parameters
    ----------
    gib : float
        Memory to allocate and write, GiB, in (0, 16].

    Returns
    -------
    dict
        ``gib``, ``seconds`` and ``gib_per_second``.

    Raises
    ------
    ValueError
        If ``gib`` is outside (0, 16].
    """
    if not 0 < gib <= 16:
        raise ValueError("gib must be in (0, 16]")
    began = time.perf_counter()
    block = np.ones(int(gib * 2**30) // 8)  # written, so every page is touched
    seconds = time.perf_counter() - began
    del block
    return {"gib": gib, "seconds": seconds, "gib_per_second": gib / max(seconds, 1e-9)}


def cpu_yardstick(repeat: int = 5) -> dict[str, float]:
    """One thread's speed at the work a secure run's server does most (a machine descriptor).

    The project's machines differ from session to session (an AMD EPYC at stop 57, an Intel Xeon at
    2.1 GHz at stop 58, where stop 57's code took 20.5-21.9 ms of server CPU per device at n = 1,000,
    ``benchmarks/results/s58ab_base_*.json``, against 15.3 ms on the EPYC), so a CPU figure is only
    comparable with this recorded beside it. Each value is the fastest of
    ``repeat`` timings of one thread's CPU (``time.thread_time``).

    Parameters
    ----------
    repeat : int
        Timings per value, >= 1.

    Returns
    -------
    dict
        ``python_ms``: a fixed pure-Python workload (dict, tuple and integer operations, 200,000
        steps), ms; ``ed25519_verify_us``, ``x25519_exchange_us``: one ``cryptography`` call, µs;
        ``sha256_mib_ms``: SHA-256 of 1 MiB, ms.

    Raises
    ------
    ValueError
        If ``repeat`` < 1.
    """
    import hashlib

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    if repeat < 1:
        raise ValueError("repeat must be >= 1")

    def fastest(work: Callable[[], object], per: int) -> float:
        best = float("inf")
        for _ in range(repeat):
            began = time.thread_time()
            work()
            best = min(best, time.thread_time() - began)
        return best / per

    def python_work() -> int:
        table: dict[int, tuple[int, int]] = dict.fromkeys(range(1024), (0, 0))
        acc = 0
        for i in range(200_000):
            table[i & 1023] = (i, acc)
            acc = (acc * 31 + table[(i * 7) & 1023][0]) & 0xFFFFFFFF
        return acc

    signer = Ed25519PrivateKey.generate()
    public, message = signer.public_key(), b"m" * 200
    signature = signer.sign(message)
    mine, theirs = X25519PrivateKey.generate(), X25519PrivateKey.generate().public_key()
    mib = b"\x5a" * 2**20
    return {
        "python_ms": fastest(python_work, 1) * 1e3,
        "ed25519_verify_us": fastest(
            lambda: [public.verify(signature, message) for _ in range(200)], 200
        )
        * 1e6,
        "x25519_exchange_us": fastest(lambda: [mine.exchange(theirs) for _ in range(200)], 200)
        * 1e6,
        "sha256_mib_ms": fastest(lambda: hashlib.sha256(mib).digest(), 1) * 1e3,
    }


def random_cohort(n: int) -> tuple[Any, str, list[Any], list[bytes], list[Any]]:
    """A tree run's cohort of ``n`` members, drawn from ``random.Random(n)`` (the cohort-tree benchmarks').

    Parameters
    ----------
    n : int
        Members, >= 1.

    Returns
    -------
    tuple
        ``(rng, run, identities, values, leaves)``: the ``random.Random`` after the draws (the caller
        draws on from it), the run id, each member's ``ClientIdentity``, its 32-byte committed value and
        its ``fedstats.wire.cohort_tree.Leaf`` (1-3 slots), in position order.
    """
    import random
    import uuid

    from fedstats.secagg.identity import ClientIdentity
    from fedstats.wire import cohort_tree, seeding

    rng = random.Random(n)
    run = "run-" + uuid.uuid4().hex
    ids = [ClientIdentity() for _ in range(n)]
    values = [rng.randbytes(32) for _ in range(n)]
    leaves = []
    for i in range(n):
        cid = str(uuid.UUID(int=rng.getrandbits(128)))
        com = bytes.fromhex(seeding.commitment(run, cid, values[i]))
        leaves.append(cohort_tree.Leaf(cid, com, ids[i].public, rng.randint(1, 3)))
    return rng, run, ids, values, leaves


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def best_of(
    fn: Callable[[], Any], repeat: int = 3, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Smallest time of ``repeat`` calls by ``clock`` (wall time; ``time.process_time``: CPU), seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def numpy_raw_bernoulli_seconds(
    n: int, probabilities: Sequence[float], block: int = 1 << 16
) -> float:
    """Wall seconds of the simulation peer: numpy drawing one Bernoulli per client and probability.

    Block by block, ``(rng.random(m) < p).sum()`` for each probability: the randomness a one-bit protocol
    needs, with none of its logic (the limit any simulation of it can reach).
    """
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    acc = 0
    for start in range(0, n, block):
        m = min(block, n - start)
        for p in probabilities:
            acc += int((rng.random(m) < p).sum())
    return time.perf_counter() - t0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_status_kib(pid: int, key: str) -> int:
    """A ``kB`` field (``VmHWM``, ``VmRSS``) of ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_page_faults(pid: int) -> tuple[int, int]:
    """Minor and major page faults of process ``pid`` so far (all its threads), from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7]), int(fields[9])


def reset_peak_rss(pid: int) -> bool:
    """Reset ``VmHWM`` of ``pid`` to its current RSS (``clear_refs`` 5); False if not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def write_results(name: str, data: dict[str, Any]) -> Path:
    """Write ``benchmarks/results/<name>.json`` atomically with machine metadata."""
    payload = {
        "benchmark": name,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "processor": platform.processor(),
        },
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **data,
    }
    path = RESULTS / f"{name}.json"
    atomic_write_text(path, json.dumps(to_jsonable(payload), indent=2) + "\n")
    return path


def loaded_server_argv(db: str, port: int, certs: Mapping[str, Any] | None) -> list[str]:
    """``fedstats server`` arguments of a benchmark's server: ``db`` on ``port`` with TLS (plain HTTP if
    ``certs`` is None), the per-device rate limit out of the way (10^6 requests/s, burst 10^6) and 10,000
    connections per peer (every load-generator process connects from 127.0.0.1)."""
    tls = (
        [] if certs is None else ["--tls-cert", str(certs["cert"]), "--tls-key", str(certs["key"])]
    )
    return [
        "server",
        "--db",
        db,
        "--port",
        str(port),
        *tls,
        "--rate",
        "1000000",
        "--burst",
        "1000000",
        "--max-connections-per-peer",
        "10000",
    ]
