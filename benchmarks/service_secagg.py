"""Benchmark: one FED-chi^2 secure run over the network (``fedstats server`` + devices) vs Flower's SecAgg+.

Usage::

    python benchmarks/service_secagg.py [--quick] [--clients 100 1000] [--procs 4] [--wait SECONDS]
        [--poll SECONDS]
        [--timeout SECONDS] [--flower-timeout SECONDS] [--no-flower] [--db auto|sqlite|postgresql]
        [--flower-transport] [--flower-transport-timeout SECONDS]
        [--encoding-size L] [--dropout FRACTION] [--drop-stage S] [--stage-seconds SECONDS]
        [--quiet-seconds SECONDS] [--profile]
        [--profile-devices] [--device-timers] [--server-threads] [--tls-proxy] [--note TEXT]

The secure-round target of issue 28 (n = 1,000, L = 1,000, 10% dropout)::

    python benchmarks/service_secagg.py --clients 1000 --no-flower --encoding-size 1000 --dropout 0.1 \
        --stage-seconds 45 --wait 25 --timeout 480 --output service_secagg_secure_n1000

(the stage deadline must exceed the slowest stage every device answers, the advertise stage of 1,000
simulated devices on this machine; the masked-input stage then closes once its quorum answered and
5 s passed without a message, reported apart as ``deadline_wait_seconds``; see the results' ``note``.)
The target is read per secure round: each round's wall time (``journal.phases.rounds_seconds``, from
its opening to its sum journaled) and the server's CPU in it (``cpu_by_phase.rounds``); the run's
check-in and seeding come before its first round and are reported beside them.

Issue 40's scale table (whole runs: check-in, seeding, both rounds; PostgreSQL, L = 1,000, 10% dropouts at
the masked input; the devices register, once per device, before the run is created)::

    python benchmarks/service_secagg.py --scale --clients 200 1000 --timeout 900
    python benchmarks/service_secagg.py --scale --clients 5000 --keep-others --stage-seconds 600 --timeout 2400

writes ``benchmarks/results/service_secagg_scale.json``, whose ``scale`` key (:func:`scale_summary`) has per
``n`` ``server_cpu_ms_per_device``, ``wall_s``, ``requests_per_device``, ``bytes_per_device``,
``server_rss_mib``, Flower SecAgg+ where it ran (``--flower-max-n``, 200 with ``--scale``), and the fitted
exponent of the server's CPU in ``n``. Every simulated device connects from 127.0.0.1, so the server is
started with ``--max-connections-per-peer 2n + 64`` (its default cap of 256 per address is for one
address, not a population behind it).

With ``--tls-proxy`` TLS ends in an nginx in front of the server (``benchmarks/_tls_proxy.py``; the
deployment ``docs/deploy.md`` describes under "Production TLS", *A terminating proxy*): the server
speaks plain HTTP on loopback, every device connects to nginx, and nginx's CPU and peak RSS over the run
are reported beside the server's (``tls_proxy_cpu_ms_per_device``, ``tls_proxy_rss_mib``)::

    python benchmarks/service_secagg.py --scale --clients 1000 --no-flower --tls-proxy --timeout 900 \
        --output service_secagg_scale_tls_proxy

``--encoding-size`` sets FED-chi^2's second round's vector length; ``--dropout`` makes that fraction of the
devices (fixed seed) stop answering at secure stage ``--drop-stage`` (default 2, the masked input: the
costliest dropout, whose pair masks the server must remove from key shares) of every session, so that
stage closes at its deadline (``--stage-seconds``, the task's round deadline) or, once the session's
quorum answered, after ``--quiet-seconds`` without a message (the task's
``secure_aggregation.quiet_seconds``, default 5 here; 0: deadline only); ``--profile`` runs the
server under cProfile in every thread and records its top functions (the CPU is then not comparable);
``--profile-devices`` does the same for the devices of the first worker process; ``--device-timers``
times the devices' main steps by their threads' CPU clocks instead (a few wrapped functions, not every
call: the shares are not distorted as cProfile's are; ``device_timers`` in the results, per device);
``--server-threads`` reads the server's threads' CPU clocks when the run is created and when it ended
(``server_thread_cpu_seconds``: the event loop's thread, the store threads, the run driver's).

For each ``n`` in ``--clients`` (``--quick``: 100 only), in the same invocation:

1. **fedstats.** A real ``fedstats server`` process (HTTPS on 127.0.0.1, the worktree's sources) and ``n``
   enrolled devices: unchanged :class:`fedstats.client.Device` objects (the real SDK: signed requests,
   certificate checks of the roster, the seed transcript, the five-stage malicious-server protocol), run in
   threads of ``--procs`` worker processes (``Device.run`` long-polling with ``--wait``; with
   ``--wait 0`` they poll every ``--poll`` seconds instead). One ``fed-chi2`` task
   with ``secure_aggregation.max_session = n`` (one session of ``n``) and ``n * records`` records; the run
   is two secure rounds (marginals, length ``m_x + m_y``; projection, length ``encoding_size``). Measured:

   * per round and stage, the stage's wall time from the server's journal (``secure_messages.created_at``:
     stage ``s`` lasts from the server's stage-``s`` messages to its stage-``s+1`` messages; the last stage
     ends when the round's sum is journaled, i.e. the next round opens or the result is released), and the
     mean bytes per device of the stage's payloads in each direction; a stage that some addressed device
     never answered closes at its deadline, and the time from its last answer to its close is recorded
     as ``deadline_wait_seconds`` (summed per round and for the run, beside
     ``run_seconds_without_deadline_waits``: the run's wall time less the waiting for dropouts);
   * the requests of one device that does not drop out, in order (time, method, endpoint, status, bytes);
   * per device, the bytes of every request and response body it sent and received over the whole run
     (polls included), by endpoint; TLS and HTTP headers are not counted;
   * the server process's CPU seconds (``utime + stime`` from ``/proc/<pid>/stat``) from just before the
     run is created to its release, and its peak RSS (``VmHWM``, reset through ``clear_refs`` before the run
     when the kernel allows it, else since the process started);
   * the run's phases: check-in, seeding (commit-then-reveal), each round, and the total; and the CPU
     seconds of the server and of the device processes in each phase (``cpu_by_phase``: both sampled
     every 0.25 s and interpolated at the journal's phase boundaries). A round's wall time and server CPU
     are issue 28's "secure round" numbers; check-in and seeding are the run's, before its first round;
   * the server's protocol CPU alone: every session replayed in the benchmark process from the journal
     (:func:`protocol_replay`: the journaled device messages fed to a fresh ``SecAggServer``, no HTTP,
     TLS, signatures or store), checked to give the journaled sum.

   The store is PostgreSQL when reachable at 127.0.0.1:5432 (a throwaway schema of database ``test``), else
   SQLite. Before the run the server's idle CPU rate (run-driver ticks alone) is measured for 5 s.

2. **Flower.** ``flwr``'s ``SecAggPlusWorkflow`` and ``secaggplus_mod`` (virtualenv
   ``benchmarks/.venv-peers``, made by ``benchmarks/secagg.py`` if missing) with the same ``n``, ``k``,
   ``t`` (``num_shares = k + 1``, ``reconstruction_threshold = t``, from
   :func:`fedstats.secagg.find_parameters`) and the same two vector lengths, one SecAgg+ round per length.
   Flower runs through the in-process stub grid of ``benchmarks/secagg.py`` (messages serialized as
   Flower's protobuf, no network), via ``_flower_cpu_peer.py``, which makes its client/server split CPU
   seconds instead of wall seconds. Its real SuperLink/SuperNode transport is not run by default (see 3): it
   needs one SuperNode process per client (and ClientApp processes per message in subprocess isolation), which does
   not fit this 2-core machine at n = 1000 within the benchmark's time bounds. The stub favours Flower (no
   network, no TLS, no polling, no store). A Flower round that exceeds ``--flower-timeout`` is recorded
   as timed out and its wall time is then a lower bound.

3. **Flower over its real transport** (opt-in, ``--flower-transport``). ``_flower_transport.py`` (peers venv)
   writes a Flower App (a ServerApp running ``SecAggPlusWorkflow``, a ClientApp with ``secaggplus_mod``),
   starts ``flower-superlink --insecure`` and ``n`` ``flower-supernode --insecure`` processes on loopback
   (subprocess isolation), submits it with ``flwr run`` and records, under the configuration's
   ``flower_transport`` key, the wall time from submission to the ServerApp's result, the CPU seconds of
   the SuperLink's process tree (SuperLink, SuperExec, ServerApp) and of the SuperNodes' (with their
   ClientApp processes), the peak summed RSS, and whether the aggregate equals the inputs' mean. It
   aborts if the machine's available memory falls below 3 GiB. On the 2-core, 24 GiB machine it was
   correct at n = 5, 20 and 30; at n = 50 the overloaded SuperNodes missed heartbeats, the SuperLink
   counted them as dropped and no round aggregated; at n = 100 the 200 idle SuperNode and SuperExec
   processes alone took about 20 GiB and the run was aborted for memory.

Ratios (Flower / fedstats) of server CPU and wall time are reported as measured. Results go to
``benchmarks/results/service_secagg.json`` (atomically, also after each configuration, marked incomplete),
with the command line, the machine, and the load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import _device_timers
import fedstats
from _tls_proxy import NginxProxy
from _util import (
    cpu_yardstick,
    free_port,
    memory_touch_rate,
    proc_cpu_seconds,
    proc_page_faults,
    proc_status_kib,
    reset_peak_rss,
    write_results,
)
from fedstats.wire.seeding import STAGES

HERE = Path(__file__).resolve().parent
DEVICE_SWITCH_INTERVAL = 0.1  # seconds: sys.setswitchinterval in the device worker processes
SRC = Path(fedstats.__file__).resolve().parents[1]
PG_CONNINFO = "host=127.0.0.1 port=5432 dbname=test user=postgres"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SHAPE = (4, 3)
ENCODING_SIZE = 50
RECORDS_PER_DEVICE = 10


# ---------------------------------------------------------------------------------------------------
# deployment: certificates, authority, store, server process
# ---------------------------------------------------------------------------------------------------

# ``fedstats server``; with FEDSTATS_BENCH_PROFILE=path, under cProfile in every thread (the event loop's
# and the store threads'), timed by each thread's CPU clock (waits for the database, locks and the network
# cost nothing), the merged statistics written to ``path`` when the server exits (SIGTERM)
_SERVER_MAIN = """
import os, sys, threading
out = os.environ.get("FEDSTATS_BENCH_PROFILE")
profs = []
if out:
    import cProfile, pstats, time
    lock = threading.Lock()
    def boot(frame, event, arg):
        p = cProfile.Profile(time.thread_time)
        with lock:
            profs.append(p)
        p.enable()
    threading.setprofile(boot)
    # uvicorn re-raises the SIGTERM it handled once it has shut down: exit through this finally
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # SIGUSR1 starts the profile afresh (the benchmark sends it when its measured phase begins)
    def _restart(*_):
        for p in list(profs):
            p.clear()
    signal.signal(signal.SIGUSR1, _restart)
    first = cProfile.Profile(time.thread_time)
    profs.append(first)
    first.enable()
mem_out = os.environ.get("FEDSTATS_BENCH_MEMTRACE")
if mem_out:
    # memory diagnosis (off unless asked): every FEDSTATS_BENCH_MEMTRACE_SECONDS (default 2) a JSON line
    # of ``path.log``: RSS, glibc's heap (mallinfo2: in use, free, mmapped), open descriptors, threads,
    # every tenth line the commonest object types; with FEDSTATS_BENCH_MEMTRACE_FRAMES=f > 0 also
    # tracemalloc (f frames; slow, and its own bookkeeping inflates RSS), the snapshot with the most
    # traced bytes kept in ``path.snap`` and one every 15 lines in ``path.<line>.snap``
    # (tracemalloc.Snapshot.load)
    import ctypes, gc, json as _json, time as _time, tracemalloc
    from collections import Counter
    _frames = int(os.environ.get("FEDSTATS_BENCH_MEMTRACE_FRAMES", "0"))
    if _frames and os.environ.get("FEDSTATS_BENCH_MEMTRACE_FROM_RUN"):
        # traced from the run's creation on (SIGUSR2 from the benchmark), not through the devices'
        # registration, which tracemalloc slows several times
        import signal as _signal
        _signal.signal(_signal.SIGUSR2, lambda *_: tracemalloc.start(_frames))
    elif _frames:
        tracemalloc.start(_frames)
    class _MallInfo2(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]
    _libc = ctypes.CDLL("libc.so.6")
    _libc.mallinfo2.restype = _MallInfo2
    def _status():
        got = {}
        for line in open("/proc/self/status"):
            k = line.split(":")[0]
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
                got[k] = int(line.split()[1])
        return got
    def _maps():
        # resident KiB by kind of mapping: glibc's main heap, its other arenas (64 MiB heaps), other
        # anonymous memory (pymalloc's arenas, large mmapped blocks, thread stacks), mapped files
        got = {"rss_heap": 0, "rss_arenas": 0, "rss_anon": 0, "rss_files": 0}
        kind = "rss_anon"
        for line in open("/proc/self/smaps"):
            head = line.split(None, 6)
            if "-" in head[0] and len(head) >= 5:
                lo = int(head[0].split("-")[0], 16)
                name = head[5].strip() if len(head) > 5 else ""
                kind = ("rss_heap" if name == "[heap]" else "rss_files" if name.startswith("/")
                        else "rss_arenas" if not name and lo % (1 << 26) == 0 else "rss_anon")
            elif head[0] == "Rss:":
                got[kind] += int(head[1])
        return got
    def _mem_loop():
        best, i = 0, 0
        with open(mem_out + ".log", "a") as log:
            while True:
                _time.sleep(float(os.environ.get("FEDSTATS_BENCH_MEMTRACE_SECONDS", "2")))
                mi = _libc.mallinfo2()
                entry = {"t": _time.time(), **_status(),
                         "heap_in_use": mi.uordblks, "heap_free": mi.fordblks, "heap_arena": mi.arena,
                         "mmapped": mi.hblkhd, "mmapped_blocks": mi.hblks,
                         "fds": len(os.listdir("/proc/self/fd")), **_maps()}
                if os.environ.get("FEDSTATS_BENCH_MEMTRACE_TRIM"):
                    # how much of the resident memory the allocator could give back now (malloc_trim)
                    _libc.malloc_trim(0)
                    entry["rss_after_trim"] = _status()["VmRSS"]
                if i % 10 == 0:
                    entry["types"] = Counter(type(o).__name__ for o in gc.get_objects()).most_common(20)
                    entry["thread_names"] = Counter(
                        t.name.rstrip("0123456789_") for t in threading.enumerate()).most_common()
                i += 1
                if _frames and tracemalloc.is_tracing():
                    cur, peak = tracemalloc.get_traced_memory()
                    entry.update(traced=cur, traced_peak=peak)
                    if cur > best:
                        best = cur
                        tracemalloc.take_snapshot().dump(mem_out + ".snap")
                        entry["snapshot"] = True
                    elif i % 15 == 0:  # a few more along the run, to compare (path.<i>.snap)
                        tracemalloc.take_snapshot().dump(f"{mem_out}.{i}.snap")
                        entry["snapshot"] = i
                log.write(_json.dumps(entry) + "\\n")
                log.flush()
    threading.Thread(target=_mem_loop, name="memtrace", daemon=True).start()
tcpu_out = os.environ.get("FEDSTATS_BENCH_THREAD_CPU")
if tcpu_out:
    # the CPU of each of the server's threads by name (the event loop's MainThread, fedstats-store, the
    # driver's), read from their CPU clocks at each signal SIGRTMIN+1 (the benchmark sends one when the
    # run is created and one when it ended); the list of readings is rewritten to ``path`` each time
    import json as _tjson, signal as _tsig, time as _ttime
    _tsnaps = []
    def _tsnap(*_):
        got = {"process": sum(os.times()[:2])}
        for t in threading.enumerate():
            try:
                spent = _ttime.clock_gettime(_ttime.pthread_getcpuclockid(t.ident))
            except (OSError, TypeError, ValueError, OverflowError):
                continue
            name = t.name.rstrip("0123456789_-")
            got[name] = got.get(name, 0.0) + spent
        _tsnaps.append(got)
        with open(tcpu_out + ".tmp", "w") as _f:
            _tjson.dump(_tsnaps, _f)
        os.replace(tcpu_out + ".tmp", tcpu_out)
    _tsig.signal(_tsig.SIGRTMIN + 1, _tsnap)
gc_out = os.environ.get("FEDSTATS_BENCH_GCTIME")
if gc_out:
    # the collector's own CPU (off unless asked): the thread time of every collection, summed per
    # generation, written to ``path`` as JSON when the server exits (docs/deploy.md, "Start-up")
    import gc, json as _gjson, time as _gtime
    _gc_at = threading.local()
    _gc_seconds = {0: 0.0, 1: 0.0, 2: 0.0}
    def _gc_timer(phase, info):
        if phase == "start":
            _gc_at.t = _gtime.thread_time()
        elif getattr(_gc_at, "t", None) is not None:
            _gc_seconds[info["generation"]] += _gtime.thread_time() - _gc_at.t
            _gc_at.t = None
    gc.callbacks.append(_gc_timer)
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # written in the finally below
gc_thresholds = os.environ.get("FEDSTATS_BENCH_GC_THRESHOLDS")
if gc_thresholds:
    # the collector's thresholds the server sets after start-up, replaced for a comparison (e.g. Python's
    # defaults: FEDSTATS_BENCH_GC_THRESHOLDS=700,10,10); the JSON of FEDSTATS_BENCH_GCTIME names them
    import fedstats.cli.server as _server
    _server._GC_THRESHOLDS = tuple(int(v) for v in gc_thresholds.split(","))
from fedstats.cli.app import main
sys.argv[0] = "fedstats"
try:
    main()
finally:
    if gc_out:
        with open(gc_out, "w") as _f:
            _gjson.dump({"seconds_by_generation": _gc_seconds, "thresholds": gc.get_threshold()}, _f)
    if out:
        stats = None
        for p in list(profs):
            try:
                p.create_stats()
                stats = pstats.Stats(p) if stats is None else stats.add(p)
            except Exception:
                pass
        if stats is not None:
            stats.dump_stats(out)
"""


def header_timeout_for(n: int) -> float:
    """The server's ``--header-timeout`` for ``n`` simulated devices: its default 10 s, and ``n / 50`` s
    from n = 500 on (100 s at n = 5,000).

    The simulated devices are threads of a few processes that share one interpreter lock each (1,250 a
    process at n = 5,000, switching every 0.1 s), so a thread can wait tens of seconds between opening a
    connection and writing its headers, a wait a device with its own CPU never has. At 10 s the n = 5,000
    run of stop 47 lost devices to 408 answers. The default stays a real server's protection against slow
    clients; this is the simulation's allowance, recorded in the results (``server_header_timeout_seconds``).
    """
    return max(10.0, n / 50.0)


def pg_reachable() -> str | None:
    """None if PostgreSQL answers at 127.0.0.1:5432 (database ``test``), else the reason."""
    try:
        import psycopg

        with psycopg.connect(PG_CONNINFO, connect_timeout=3):
            return None
    except Exception as exc:
        return f"PostgreSQL at 127.0.0.1:5432 unreachable: {exc}"


@contextlib.contextmanager
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema, dropped afterwards; yields a URL whose search_path is that schema."""
    import psycopg

    name = "fedstats_bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(PG_CONNINFO, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {name}")
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(PG_CONNINFO, autocommit=True) as c:
            c.execute(f"DROP SCHEMA {name} CASCADE")


class Server:
    """A ``fedstats server`` process on a free loopback port with dev TLS certificates and an authority.

    Parameters
    ----------
    root : Path
        Scratch folder (certificates, authority, identities, server log).
    db : str
        Store URL.
    tick : float
        Seconds between run-driver passes.
    store_threads : int
        ``fedstats server --store-threads``.
    """

    def __init__(
        self,
        root: Path,
        db: str,
        tick: float,
        store_threads: int,
        profile: Path | None = None,
        peer_connections: int = 256,
        header_timeout: float = 10.0,
        tls_proxy: bool = False,
        cohort_tree_above: int | None = None,
    ) -> None:
        from fedstats.service.domain.operators import add_operator
        from fedstats.service.http.tls import make_dev_certificates
        from fedstats.service.store import open_store
        from fedstats.wire.enrollment import init_authority

        self.root, self.db, self.tick, self.store_threads = root, db, tick, store_threads
        self.profile = profile
        self.peer_connections = peer_connections
        self.header_timeout = header_timeout
        self.cohort_tree_above = cohort_tree_above
        self.certs = make_dev_certificates(root / "tls", ["127.0.0.1"])
        init_authority(root / "authority")
        store = open_store(db)
        self.token = add_operator(store, "bench")
        store.close()
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        # with ``tls_proxy`` the server speaks plain HTTP on loopback and nginx terminates TLS in front
        # of it (docs/deploy.md, "Production TLS"): devices and the operator use the proxy's URL
        self.proxy: NginxProxy | None = None
        if tls_proxy:
            self.proxy = NginxProxy(
                root / "proxy", free_port(), self.port, self.certs["cert"], self.certs["key"]
            )
            self.url = f"https://127.0.0.1:{self.proxy.port}"
        self.log = root / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Spawn the server (the worktree's sources first on PYTHONPATH) and wait for /healthz."""
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
        )
        env.pop("FEDSTATS_CRASH_AFTER", None)
        env.pop("FEDSTATS_BENCH_PROFILE", None)
        if self.profile is not None:
            env["FEDSTATS_BENCH_PROFILE"] = str(self.profile)
        cmd = [
            sys.executable,
            "-c",
            _SERVER_MAIN,
            "server",
            "--db",
            self.db,
            "--port",
            str(self.port),
            *(
                ["--tls-cert", str(self.certs["cert"]), "--tls-key", str(self.certs["key"])]
                if self.proxy is None
                else []
            ),
            "--authority",
            str(self.root / "authority" / "authority.pub"),
            "--tick",
            str(self.tick),
            "--store-threads",
            str(self.store_threads),
            # every simulated device connects from 127.0.0.1: lift the per-peer cap (default 256,
            # meant for one address) to what n devices on n addresses would open
            "--max-connections-per-peer",
            str(self.peer_connections),
            "--header-timeout",
            str(self.header_timeout),
            *(
                []
                if self.cohort_tree_above is None
                else ["--cohort-tree-above", str(self.cohort_tree_above)]
            ),
        ]
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "ab"),
            start_new_session=True,
        )
        if self.proxy is not None:
            self.proxy.start()
        deadline = time.monotonic() + 180
        with self.admin() as a:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited {self.proc.returncode}: {self.log_tail()}")
                try:
                    if a.get("/healthz", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
        raise RuntimeError("server did not start within 180 s")

    def stop(self) -> None:
        """SIGTERM the server (SIGKILL after 20 s, 120 s when profiled); stop the TLS proxy."""
        if self.proxy is not None:
            self.proxy.stop()
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20 if self.profile is None else 120)  # a profile is merged on exit
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def admin(self) -> httpx.Client:
        """An operator HTTP client."""
        return httpx.Client(
            base_url=self.url,
            verify=ssl.create_default_context(cafile=str(self.certs["ca"])),
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=300,
        )

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the server's stderr."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# ---------------------------------------------------------------------------------------------------
# devices: worker processes driving unchanged Device objects in threads
# ---------------------------------------------------------------------------------------------------


def _category(method: str, path: str) -> str:
    """An endpoint's name for the byte tally (secure stages by stage name and direction)."""
    parts = path.split("?")[0].strip("/").split("/")
    if "secure" in parts:
        last = parts[-1]
        if last == "certificates":
            return "certificates"
        return f"{STAGES[int(last)]}_{'up' if method == 'POST' else 'down'}"
    return parts[-1] if parts[-1] in ("work", "register", "checkin", "seed", "reveal") else "other"


class _MeteredHTTP:
    """Wraps a device's ``httpx.Client``: counts each request's and response's body bytes by endpoint."""

    def __init__(self, http: httpx.Client) -> None:
        self._http = http
        self.sent: dict[str, int] = defaultdict(int)
        self.received: dict[str, int] = defaultdict(int)
        self.requests: dict[str, int] = defaultdict(int)
        self.t0 = time.monotonic()
        self.sequence: list[tuple[float, str, str, int, int]] = []
        """``(seconds since start, method, endpoint, status, bytes received)`` of each request."""

    def reset(self) -> None:
        """Forget what was counted so far (the devices' registration, before the run)."""
        self.sent.clear()
        self.received.clear()
        self.requests.clear()
        self.sequence.clear()
        self.t0 = time.monotonic()

    def _note(self, method: str, cat: str, status: int, got: int) -> None:
        self.sequence.append((round(time.monotonic() - self.t0, 3), method, cat, status, got))

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        r = self._http.request(method, path, **kw)
        cat = _category(method, path)
        self.sent[cat] += len(kw.get("content") or b"")
        self.received[cat] += len(r.content)
        self.requests[cat] += 1
        self._note(method, cat, r.status_code, len(r.content))
        return r

    @contextlib.contextmanager
    def stream(self, method: str, path: str, **kw: Any) -> Iterator[httpx.Response]:
        """``httpx.Client.stream``, counted like :meth:`request` (the bytes the device read)."""
        with self._http.stream(method, path, **kw) as r:
            try:
                yield r
            finally:
                cat = _category(method, path)
                self.sent[cat] += len(kw.get("content") or b"")
                self.received[cat] += r.num_bytes_downloaded
                self.requests[cat] += 1
                self._note(method, cat, r.status_code, r.num_bytes_downloaded)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        """An unsigned GET (the device's health probe), not counted."""
        return self._http.get(path, **kw)

    @property
    def base_url(self) -> httpx.URL:
        """The wrapped client's base URL."""
        return self._http.base_url

    def close(self) -> None:
        self._http.close()


def _worker(
    wid: int,
    url: str,
    ca: str,
    idents: list[dict[str, Any]],
    columns: list[dict[str, list[int]]],
    poll: float,
    wait: float,
    seconds: float,
    go: Any,
    out: Any,
    drop: set[str] | None = None,
    drop_stage: int = 2,
    share_checks: bool = False,
    profile: str | None = None,
    preregister: bool = False,
) -> None:
    """Build this worker's devices, signal ready, wait for ``go`` (the run id), run them; put metrics.

    With ``profile`` (a path), the devices' threads run under cProfile timed by each thread's CPU clock,
    the merged statistics written there once they stopped.

    The devices named in ``drop`` answer every secure stage before ``drop_stage`` and none from it on
    (a dropout for the protocol in every session they are in). The worker's devices share their verified
    certificates and signatures in any case (the SDK's per-process caches, keyed by the whole verified
    content: each is checked once per worker process, not once per device; a real device checks its
    ``k + 16`` certificates and about ``2k`` signatures per session itself); ``share_checks`` hands them
    one explicit set of certificates, which changes nothing. With ``preregister`` each device registers
    (presents its enrollment certificate) before it signals ready, not in its run.
    """
    from fedstats.client import Device, LocalBudget, Policy
    from fedstats.secagg import find_parameters

    # 250 device threads per process (n = 1000) contend for one GIL: at the default 5 ms switch
    # interval every waiting thread wakes each 5 ms to ask for it, and the workers spent more CPU in the
    # kernel than in Python (an aborted run: stime 66 s, utime 43 s per worker, the share stage stalled).
    # A real device is one process; the interval is the simulation's, not the SDK's.
    sys.setswitchinterval(DEVICE_SWITCH_INTERVAL)
    timed = bool(os.environ.get(_device_timers.ENV))
    if timed:  # --device-timers
        _device_timers.install()
    find_parameters(len(idents))  # warm the imports the first stage needs (scipy)
    devices = []
    shared: set[tuple[str, bytes]] = set()
    for ident, cols in zip(idents, columns, strict=True):
        dev = Device(
            url,
            ident,
            {k: np.asarray(v, dtype=np.int64) for k, v in cols.items()},
            ca=ca,
            policy=Policy(allow_non_private=True),
            budget=LocalBudget(None, epsilon=100.0),
            timeout=120.0,
        )
        dev._http = _MeteredHTTP(dev._http)  # type: ignore[assignment]
        if share_checks:
            dev.verified_certificates = shared
        if drop and ident["client_id"] in drop:
            dev._answer_stage = _dropping(dev._answer_stage, drop_stage)  # type: ignore[method-assign]
        devices.append(dev)
    if preregister:
        # enrollment is once per device, not per run: register now (before the run is created) and
        # make Device.run's own registration a no-op; the server's CPU for it is measured apart
        for dev in devices:
            dev.register()
            dev.register = lambda: None  # type: ignore[method-assign]
            dev._http.reset()
    out.put(("ready", wid, None))
    run_id = go.get()
    if run_id is None:
        return
    errors: list[str] = []

    def drive(dev: Any) -> None:
        try:
            dev.run(poll=poll, wait=wait, max_seconds=seconds, until=lambda d: run_id in d.finished)
        except Exception as exc:  # reported, not raised: the run's outcome tells the rest
            errors.append(f"{dev.client_id}: {type(exc).__name__}: {exc}")

    profs: list[Any] = []
    if profile:
        import cProfile

        lock = threading.Lock()

        def boot(frame: Any, event: str, arg: Any) -> None:
            prof = cProfile.Profile(time.thread_time)
            with lock:
                profs.append(prof)
            prof.enable()

        threading.setprofile(boot)
    c0 = time.process_time()
    threads = [threading.Thread(target=drive, args=(d,), daemon=True) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = time.process_time() - c0
    if profs:
        import pstats

        threading.setprofile(None)  # type: ignore[arg-type]
        merged = None
        for prof in profs:
            with contextlib.suppress(Exception):
                prof.create_stats()
                merged = pstats.Stats(prof) if merged is None else merged.add(prof)
        if merged is not None:
            merged.dump_stats(str(profile))
    per_device = []
    for d in devices:
        http = d._http
        per_device.append(
            {
                "sent": dict(http.sent),
                "received": dict(http.received),
                "requests": dict(http.requests),
                "finished": run_id in getattr(d, "finished", set()),
                # the requests of one device that does not drop out, in order
                "sequence": http.sequence
                if wid == 0
                and not any(x["sequence"] for x in per_device)
                and not (drop and d.client_id in drop)
                else None,
                "refused": dict(d.refused),
            }
        )
        d.close()
    got = {"cpu_seconds": cpu, "devices": per_device, "errors": errors[:20]}
    if timed:
        got["timers"] = _device_timers.snapshot()
    out.put(("result", wid, got))


def _dropping(answer: Any, stage: int) -> Any:
    """``Device._answer_stage`` that answers nothing from secure stage ``stage`` on."""

    def go(rnd: Any, at: int, down: Any, wait: float = 0.0) -> Any:
        if at >= stage:
            return False, None, False
        return answer(rnd, at, down, wait)

    return go


# ---------------------------------------------------------------------------------------------------
# one fedstats configuration
# ---------------------------------------------------------------------------------------------------


def _data(n: int, seed: int) -> list[dict[str, list[int]]]:
    """Each device's ``x``, ``y`` columns (``RECORDS_PER_DEVICE`` records, dependent categories)."""
    rng = np.random.default_rng(seed)
    total = n * RECORDS_PER_DEVICE
    x = rng.integers(0, SHAPE[0], total)
    y = np.where(rng.random(total) < 0.4, x % SHAPE[1], rng.integers(0, SHAPE[1], total))
    return [
        {"x": x[i : i + RECORDS_PER_DEVICE].tolist(), "y": y[i : i + RECORDS_PER_DEVICE].tolist()}
        for i in range(0, total, RECORDS_PER_DEVICE)
    ]


def _journal(db: str, run_id: str) -> dict[str, Any]:
    """Per-round stage timings and payload sizes, and the run's phases, from the server's journal."""
    from sqlalchemy import func, select

    from fedstats.service.store import open_store
    from fedstats.service.store.tables import Audit, RoundRecord, Run, SecureMessage, SecureSession

    store = open_store(db, migrate=False)
    try:
        with store.session() as s:
            run = s.get(Run, run_id)
            assert run is not None
            audit = {
                a: float(ts)
                for a, ts in s.execute(
                    select(Audit.action, func.min(Audit.ts))
                    .where(Audit.run_id == run_id)
                    .group_by(Audit.action)
                ).all()
            }
            recs = list(
                s.execute(
                    select(RoundRecord)
                    .where(RoundRecord.run_id == run_id)
                    .order_by(RoundRecord.index)
                ).scalars()
            )
            rows = s.execute(
                select(
                    SecureMessage.round_index,
                    SecureMessage.stage,
                    SecureMessage.direction,
                    func.count(),
                    func.min(SecureMessage.created_at),
                    func.max(SecureMessage.created_at),
                    func.sum(func.length(SecureMessage.payload)),
                )
                .where(SecureMessage.run_id == run_id)
                .group_by(SecureMessage.round_index, SecureMessage.stage, SecureMessage.direction)
            ).all()
            sessions = list(
                s.execute(select(SecureSession).where(SecureSession.run_id == run_id)).scalars()
            )
            finished = float(run.finished_at or time.time())
            out: dict[str, Any] = {
                "status": run.status,
                "error": run.error,
                # how the run was seeded: by its cohort tree (O(k log n) bytes per device) or by the
                # O(n) commitment list (cohorts up to the server's --cohort-tree-above)
                "seeding_form": "list" if run.cohort_head is None else "tree",
                "n_sessions_per_round": len(sessions) // max(1, len(recs)),
                "included": [len(json.loads(r.included or "[]")) for r in sessions],
            }
            rounds_info = [
                {
                    "index": r.index,
                    "name": r.name,
                    "dim": int(r.dim),
                    "opened_at": float(r.opened_at),
                    "n_records": r.n_clients,
                }
                for r in recs
            ]
    finally:
        store.close()
    msgs: dict[tuple[int, int, str], dict[str, float]] = {
        (int(r), int(st), str(d)): {
            "count": int(c),
            "first": float(a),
            "last": float(b),
            "bytes": float(z or 0),
        }
        for r, st, d, c, a, b, z in rows
    }
    release = audit.get("release", finished)
    for i, info in enumerate(rounds_info):
        end = rounds_info[i + 1]["opened_at"] if i + 1 < len(rounds_info) else release
        stages = {}
        for st, name in enumerate(STAGES):
            down = msgs.get((info["index"], st, "down"))
            up = msgs.get((info["index"], st, "up"))
            if down is None:
                continue
            nxt = msgs.get((info["index"], st + 1, "down"))
            closed = nxt["first"] if nxt is not None else end
            answered = 0 if up is None else up["count"]
            last_up = None if up is None else up["last"] - down["first"]
            # a stage some addressed device never answered closes at its deadline: the time after
            # the last answer is spent waiting for the dropouts, not on the protocol or the service
            waited = (
                max(0.0, closed - down["first"] - (last_up or 0.0))
                if answered < down["count"]
                else 0.0
            )
            stages[name] = {
                "seconds": closed - down["first"],
                "first_up_after_seconds": None if up is None else up["first"] - down["first"],
                "last_up_after_seconds": last_up,
                "devices_addressed": int(down["count"]),
                "devices_answered": answered,
                "deadline_wait_seconds": waited,
                "down_bytes_per_device": down["bytes"] / down["count"],
                "up_bytes_per_device": 0.0 if up is None else up["bytes"] / up["count"],
            }
        info["round_seconds"] = end - info["opened_at"]
        info["deadline_wait_seconds"] = sum(v["deadline_wait_seconds"] for v in stages.values())
        info["stages"] = stages
        info["secure_bytes_per_device"] = sum(
            v["down_bytes_per_device"] + v["up_bytes_per_device"] for v in stages.values()
        )
    created = float(audit.get("start", rounds_info[0]["opened_at"] if rounds_info else finished))
    out["phases"] = {
        "checkin_seconds": created - _run_created(db, run_id),
        "seeding_seconds": audit.get("seeded", created) - created,
        "seeded_to_first_round_seconds": (rounds_info[0]["opened_at"] if rounds_info else finished)
        - audit.get("seeded", created),
        "rounds_seconds": [r["round_seconds"] for r in rounds_info],
        "run_seconds": release - _run_created(db, run_id),
        "deadline_wait_seconds": sum(r["deadline_wait_seconds"] for r in rounds_info),
    }
    out["phases"]["run_seconds_without_deadline_waits"] = (
        out["phases"]["run_seconds"] - out["phases"]["deadline_wait_seconds"]
    )
    out["rounds"] = rounds_info
    return out


def _run_created(db: str, run_id: str) -> float:
    from fedstats.service.store import open_store
    from fedstats.service.store.tables import Run

    store = open_store(db, migrate=False)
    try:
        with store.session() as s:
            run = s.get(Run, run_id)
            assert run is not None
            return float(run.created_at)
    finally:
        store.close()


def _wait_run(db: str, run_id: str, timeout: float) -> str:
    """Poll the run's status in the store until done or aborted (or ``timeout``); return it."""
    from fedstats.service.store import open_store
    from fedstats.service.store.tables import Run

    store = open_store(db, migrate=False)
    status = "unknown"
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with store.session() as s:
                run = s.get(Run, run_id)
                status = "unknown" if run is None else str(run.status)
            if status in ("done", "aborted"):
                break
            time.sleep(0.2)
    finally:
        store.close()
    return status


def _stop_all(procs: list[Any], go: Any) -> None:
    for _ in procs:
        with contextlib.suppress(Exception):
            go.put(None)
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.terminate()
            p.join(5)
        if p.is_alive():
            p.kill()
            p.join(5)


class CpuSampler:
    """Samples the CPU seconds of the server and of the device processes every ``period`` seconds.

    Each sample is ``(time.time(), server CPU, devices' CPU)``: the journal's timestamps are
    ``time.time()``, so a phase's CPU is the difference of the samples interpolated at its ends
    (:meth:`between`); the error is at most one period's CPU at each end.
    """

    def __init__(self, server_pid: int, device_pids: list[int], period: float = 0.25) -> None:
        self.server_pid, self.device_pids, self.period = server_pid, device_pids, period
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        devices = 0.0
        for p in self.device_pids:
            with contextlib.suppress(OSError):
                devices += proc_cpu_seconds(p)
        self.samples.append((time.time(), proc_cpu_seconds(self.server_pid), devices))

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                self._sample()
            self._stop.wait(self.period)

    def start(self) -> None:
        self._sample()
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (idempotent) after a last sample."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with contextlib.suppress(OSError):
            self._sample()

    def at(self, t: float) -> tuple[float, float]:
        """The (server, devices) CPU seconds at wall time ``t``, linearly interpolated."""
        times = [s[0] for s in self.samples]
        return (
            float(np.interp(t, times, [s[1] for s in self.samples])),
            float(np.interp(t, times, [s[2] for s in self.samples])),
        )

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """Server and devices' CPU seconds spent from wall time ``t0`` to ``t1``."""
        (s0, d0), (s1, d1) = self.at(t0), self.at(t1)
        return {"server_cpu_seconds": s1 - s0, "device_cpu_seconds": d1 - d0}


def _phase_cpu(journal: dict[str, Any], sampler: CpuSampler, created: float) -> dict[str, Any]:
    """Server and device CPU per phase of the run (check-in, seeding, each round), from the samples."""
    rounds = journal.get("rounds", [])
    ph = journal.get("phases", {})
    start = created + ph.get("checkin_seconds", 0.0)
    seeded = start + ph.get("seeding_seconds", 0.0)
    return {
        "checkin": sampler.between(created, start),
        "seeding": sampler.between(start, seeded),
        "rounds": [
            sampler.between(r["opened_at"], r["opened_at"] + r["round_seconds"]) for r in rounds
        ],
    }


def _summary(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "max": float(a.max()), "min": float(a.min())}


def _task(
    n: int, encoding_size: int, checkin: float, stage: float, quiet: float | None
) -> dict[str, Any]:
    """The benchmark's fed-chi2 task: one secure session of ``n`` devices, with these deadlines (s)."""
    return {
        "analysis": "fed-chi2",
        "params": {"shape": list(SHAPE), "encoding_size": encoding_size},
        "privacy": {"epsilon": None, "population": "default"},
        "cohort_size": n,  # devices
        "min_clients": n // 2,
        "max_records_per_client": RECORDS_PER_DEVICE,
        "deadlines": {"checkin": checkin, "round": stage},
        "secure_aggregation": {"max_session": n}
        | ({} if quiet is None else {"quiet_seconds": quiet}),
        "label": f"service_secagg n={n}",
    }


def _device_traffic(devices: list[dict[str, Any]]) -> dict[str, Any]:
    """The body bytes each device sent and received (summary), and per endpoint their and its requests' means."""
    cats = sorted({c for d in devices for c in (*d["sent"], *d["received"])})
    sent = [sum(d["sent"].values()) for d in devices]
    received = [sum(d["received"].values()) for d in devices]
    return {
        "sent": _summary(sent),
        "received": _summary(received),
        "total_mean": float(np.mean(sent) + np.mean(received)),
        "by_endpoint_mean": {
            c: {
                "sent": float(np.mean([d["sent"].get(c, 0) for d in devices])),
                "received": float(np.mean([d["received"].get(c, 0) for d in devices])),
                "requests": float(np.mean([d["requests"].get(c, 0) for d in devices])),
            }
            for c in cats
        },
    }


_HARNESS = {
    # the SDK shares them per process (fedstats.client.secure.VERIFIED_CERTIFICATES, SIGNATURES)
    "devices_share_certificate_checks_per_process": True,
    "devices_share_signature_checks_per_process": True,
    "device_worker_switch_interval_seconds": DEVICE_SWITCH_INTERVAL,
}
"""What every configuration's devices share (recorded with each result)."""


def _start_workers(
    ctx: Any,
    procs: int,
    server: Any,
    idents: list[dict[str, Any]],
    data: list[dict[str, list[int]]],
    common: tuple[Any, ...],
    device_profile: Path | None,
    preregister: bool,
    workers: list[Any],
) -> None:
    """Start ``procs`` device processes (:func:`_worker`) into ``workers``, each with every ``procs``-th device.

    ``common`` is ``_worker``'s arguments after the devices' data, up to ``share_checks``; the first
    process profiles its devices if ``device_profile`` is set. A process is in ``workers`` once started
    (the caller stops them all, whatever fails).
    """
    for w in range(procs):
        p = ctx.Process(
            target=_worker,
            args=(
                w,
                server.url,
                str(server.certs["ca"]),
                idents[w::procs],
                data[w::procs],
                *common,
                str(device_profile) if device_profile is not None and w == 0 else None,
                preregister,
            ),
            daemon=True,
        )
        p.start()
        workers.append(p)


def _collect(
    result: dict[str, Any],
    view: dict[str, Any],
    db: str,
    out: Any,
    procs: int,
    server_cpu: tuple[int, float],
    sampler: CpuSampler | None,
) -> None:
    """Put a finished run's measurements into ``result``: the devices' own (from their ``procs`` worker
    processes, through ``out``), the journal's phases and CPU, and the protocol's replay.

    ``server_cpu`` is the server's pid and its CPU seconds when the run was created; ``view`` the run as
    the admin API answers it.
    """
    run_id = result["run_id"]
    pid, cpu0 = server_cpu
    assert sampler is not None
    per_worker: list[dict[str, Any]] = []
    deadline = time.monotonic() + 120
    while len(per_worker) < procs:
        kind, _wid, payload = out.get(timeout=max(1.0, deadline - time.monotonic()))
        if kind == "result":
            per_worker.append(payload)
    cpu_all = proc_cpu_seconds(pid) - cpu0
    devices = [d for w in per_worker for d in w["devices"]]
    result.update(  # after what bench_fedstats put there (wall, CPU and RSS of the run)
        status=view["status"],
        error=view.get("error"),
        estimate=(view.get("result") or {}).get("estimate"),
        server_cpu_seconds_until_devices_stopped=cpu_all,
        client_cpu_seconds_total=sum(w["cpu_seconds"] for w in per_worker),
        device_errors=[e for w in per_worker for e in w["errors"]][:20],
        devices_finished=sum(d["finished"] for d in devices),
        bytes_per_client=_device_traffic(devices),
    )
    if any("timers" in w for w in per_worker):
        result["device_timers"] = _device_timers.merge(
            (w["timers"] for w in per_worker if "timers" in w), len(devices)
        )
    result["request_sequence_of_one_device"] = next(
        (d["sequence"] for d in devices if d.get("sequence")), None
    )
    result["journal"] = _journal(db, run_id)
    result["cpu_by_phase"] = _phase_cpu(result["journal"], sampler, _run_created(db, run_id))
    if view["status"] == "done":
        replay = protocol_replay(db, run_id)
        result["protocol_replay"] = replay
        result["protocol_server_cpu_seconds"] = sum(r["cpu_seconds"] for r in replay)


def bench_fedstats(
    n: int,
    db: str,
    root: Path,
    procs: int,
    poll: float,
    wait: float,
    tick: float,
    timeout: float,
    store_threads: int,
    encoding_size: int = ENCODING_SIZE,
    dropout: float = 0.0,
    drop_stage: int = 2,
    profile: Path | None = None,
    stage_seconds: float | None = None,
    share_checks: bool = False,
    device_profile: Path | None = None,
    quiet_seconds: float | None = None,
    preregister: bool = False,
    checkin_seconds: float | None = None,
    tls_proxy: bool = False,
    cohort_tree_above: int | None = None,
) -> dict[str, Any]:
    """Run one fed-chi2 secure run with ``n`` devices; return the measurements.

    ``checkin_seconds`` is the task's check-in deadline (default ``timeout``): a device of the harness that
    never checks in then delays the run by that long, not by the whole ``timeout``.

    ``encoding_size`` is the second round's vector length; ``floor(dropout * n)`` devices (chosen with a
    fixed seed) stop answering at secure stage ``drop_stage`` of every session (a stage then closes at
    its deadline, ``stage_seconds``, default ``timeout``); with ``profile`` the server runs under cProfile
    (every thread) and writes its statistics there; with ``device_profile`` so do the devices of the
    first worker process; ``quiet_seconds`` is the task's ``secure_aggregation.quiet_seconds`` (a stage
    whose quorum answered closes after that long without a message; None: at its deadline); with
    ``preregister`` the devices register (enrollment, once per device) before the run is created, and
    the server's CPU for it is reported apart (``registration_server_cpu_seconds``); with ``tls_proxy``
    an nginx terminates TLS in front of a plain-HTTP server (:class:`_tls_proxy.NginxProxy`), and its CPU
    and peak RSS over the run are reported beside the server's (``tls_proxy``).
    """
    from fedstats.wire.enrollment import issue_identity

    server = Server(
        root,
        db,
        tick,
        store_threads,
        profile,
        peer_connections=2 * n + 64,
        header_timeout=header_timeout_for(n),
        tls_proxy=tls_proxy,
        cohort_tree_above=cohort_tree_above,
    )
    idents = [
        issue_identity(root / "authority", f"dev{i}", "default", root / "ids" / f"dev{i}.json")
        for i in range(n)
    ]
    data = _data(n, seed=n)
    order = np.random.default_rng(n + 1).permutation(n)
    drop = {f"dev{i}" for i in order[: int(dropout * n)]}
    procs = max(1, min(procs, n))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    go = ctx.Queue()
    workers: list[Any] = []
    result: dict[str, Any] = {
        "n": n,
        "client_processes": procs,
        "long_poll_seconds": wait,
        "poll_seconds": poll,
        "tick": tick,
        "store_threads": store_threads,
        "encoding_size": encoding_size,
        "dropout": dropout,
        "dropped_devices": len(drop),
        "drop_stage": STAGES[drop_stage] if drop else None,
        "profiled": profile is not None,
        "stage_deadline_seconds": stage_seconds or timeout,
        "server_header_timeout_seconds": header_timeout_for(n),
        "checkin_deadline_seconds": checkin_seconds or timeout,
        "stage_quiet_seconds": quiet_seconds,
        "devices_profiled": device_profile is not None,
        "tls_terminated_by": "nginx in front of a plain-HTTP server" if tls_proxy else "the server",
        **_HARNESS,
    }
    sampler: CpuSampler | None = None
    try:
        server.start()
        assert server.proc is not None
        pid = server.proc.pid
        # the server's own cost when nobody talks to it (run-driver ticks against the store)
        idle0, t_idle = proc_cpu_seconds(pid), time.perf_counter()
        time.sleep(5.0)
        result["server_idle_cpu_seconds_per_second"] = (proc_cpu_seconds(pid) - idle0) / (
            time.perf_counter() - t_idle
        )
        _start_workers(
            ctx,
            procs,
            server,
            idents,
            data,
            (poll, wait, timeout, go, out, drop, drop_stage, share_checks),
            device_profile,
            preregister,
            workers,
        )
        ready = 0
        cpu_reg = proc_cpu_seconds(pid)
        deadline = time.monotonic() + 300 + (n / 10 if preregister else 0)
        while ready < procs:
            kind, _wid, _ = out.get(timeout=max(1.0, deadline - time.monotonic()))
            ready += kind == "ready"
        if preregister:
            result["devices_registered_before_run"] = True
            result["registration_server_cpu_seconds"] = proc_cpu_seconds(pid) - cpu_reg
        task = _task(
            n, encoding_size, checkin_seconds or timeout, stage_seconds or timeout, quiet_seconds
        )
        rss_before = proc_status_kib(pid, "VmRSS")
        result["server_peak_rss_reset_before_run"] = reset_peak_rss(pid)
        proxy = server.proxy
        proxy_rss_before = proxy.rss_kib() if proxy is not None else 0
        if proxy is not None:
            proxy.reset_peak()
        if os.environ.get("FEDSTATS_BENCH_MEMTRACE_FROM_RUN"):
            os.kill(pid, signal.SIGUSR2)  # the server's tracemalloc starts (memory diagnosis)
        _thread_cpu_mark(pid, 1)
        if server.profile is not None:
            # the profile starts afresh: the server's start-up and the devices' registration (its
            # imports compile every module when bytecode is not written) are not in it
            os.kill(pid, signal.SIGUSR1)
        from fedstats.wire.enrollment import issue_analyst
        from fedstats.wire.tasks import sign_task

        analyst = issue_analyst(root / "authority", "bench", ["default"], root / "analyst.json")
        with server.admin() as a:
            r = a.post("/v1/admin/tasks", json=sign_task(task, analyst))
            r.raise_for_status()
            passes0 = _driver_passes(a)
            sampler = CpuSampler(pid, [int(w.pid) for w in workers])
            sampler.start()
            cpu0 = proc_cpu_seconds(pid)
            faults0 = proc_page_faults(pid)
            proxy_cpu0 = proxy.cpu_seconds() if proxy is not None else 0.0
            t0 = time.perf_counter()
            r = a.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]})
            r.raise_for_status()
            run_id = str(r.json()["run_id"])
            result["run_id"] = run_id
            for _ in workers:
                go.put(run_id)
            # watch the run in the store, not over HTTP: an overloaded server answers the admin late
            status = _wait_run(db, run_id, timeout)
            wall = time.perf_counter() - t0
            cpu_run = proc_cpu_seconds(pid) - cpu0
            threads = _thread_cpu_mark(pid, 2)
            if threads is not None:
                result["server_thread_cpu_seconds"] = threads
            faults = proc_page_faults(pid)
            result["server_page_faults"] = {  # each costs more in a VM (_util.warm_guest_memory)
                "minor": faults[0] - faults0[0],
                "major": faults[1] - faults0[1],
            }
            if proxy is not None:
                result["tls_proxy"] = {
                    "cpu_seconds": proxy.cpu_seconds() - proxy_cpu0,
                    "rss_before_run_mib": proxy_rss_before / 1024,
                    "peak_rss_mib": proxy.peak_rss_kib() / 1024,
                    "processes": len(proxy.pids()),
                }
            sampler.stop()
            hwm = proc_status_kib(pid, "VmHWM")
            passes = _driver_passes(a)
            if passes is not None and passes0 is not None:
                result["driver_passes"] = passes - passes0
            result.update(  # kept even if the run did not finish
                wall_seconds=wall,
                server_cpu_seconds=cpu_run,
                server_rss_before_run_mib=rss_before / 1024,
                server_peak_rss_mib=hwm / 1024,
            )
            if status not in ("done", "aborted"):
                raise TimeoutError(f"run {run_id} not finished after {timeout:.0f} s ({status})")
            view = a.get(f"/v1/admin/runs/{run_id}", timeout=600).json()
        _collect(result, view, db, out, procs, (pid, cpu0), sampler)
        return result
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["server_log_tail"] = server.log_tail()
        if result.get("run_id"):  # what the journal holds of an unfinished run (stages so far)
            with contextlib.suppress(Exception):
                result["journal_partial"] = _journal(db, str(result["run_id"]))
        return result
    finally:
        if sampler is not None:  # a run that failed before its end: stop sampling its processes
            sampler.stop()
        _stop_all(workers, go)
        server.stop()


def _thread_cpu_mark(pid: int, count: int) -> dict[str, float] | None:
    """With ``--server-threads``: ask the server to read its threads' CPU clocks (reading ``count``); after
    the second, the CPU seconds of each thread name between the two readings (None otherwise).

    A thread that ended between the readings is missing from the second (its CPU is in ``process`` only;
    ``unnamed`` is the rest of the process's CPU, which such threads and the kernel's work for the
    process make up).
    """
    path = os.environ.get("FEDSTATS_BENCH_THREAD_CPU")
    if not path:
        return None
    if count == 1:
        Path(path).unlink(missing_ok=True)
    os.kill(pid, signal.SIGRTMIN + 1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            snaps = json.loads(Path(path).read_text())
            if len(snaps) >= count:
                break
        time.sleep(0.1)
    else:
        return None
    if count < 2:
        return None
    start, end = snaps[0], snaps[1]
    got = {k: round(v - start.get(k, 0.0), 3) for k, v in end.items()}
    got["unnamed"] = round(got["process"] - sum(v for k, v in got.items() if k != "process"), 3)
    return got


def _driver_passes(admin: httpx.Client) -> int | None:
    """The server's run-driver passes so far (``fedstats_driver_passes_total`` of ``/metrics``), if it counts."""
    try:
        text = admin.get("/metrics", timeout=60).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith("fedstats_driver_passes_total "):
            return int(float(line.split()[1]))
    return None


# ---------------------------------------------------------------------------------------------------
# Flower
# ---------------------------------------------------------------------------------------------------


def _run_flower_cpu(peer_py: Path, cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One Flower round through ``_flower_cpu_peer.py`` (CPU-time split, wall time) in the peers venv."""
    try:
        out = subprocess.run(
            [str(peer_py), str(HERE / "_flower_cpu_peer.py"), json.dumps(cfg)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"skipped": f"timed out after {timeout:.0f} s"}
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else "failed"}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def protocol_replay(db: str, run_id: str) -> list[dict[str, Any]]:
    """The server's protocol CPU alone: each session replayed in this process from the journal.

    The journaled device messages are fed to a fresh :class:`fedstats.secagg.server.SecAggServer` stage by
    stage (as a restarted server does), timed with ``time.process_time`` (no HTTP, TLS, signatures, store);
    the replayed sum must equal the journaled one.
    """
    from fedstats import wire
    from fedstats.secagg.server import SecAggServer
    from fedstats.service.domain import secure
    from fedstats.service.store import open_store

    store = open_store(db, migrate=False)
    out = []
    try:
        with store.transaction(read_only=True) as tx:
            run = tx.run(run_id)
            assert run is not None
            rows = [
                row for r in tx.rounds_of(run_id) for row in tx.secure_sessions(run_id, r.index)
            ]
            for row in rows:
                dim = tx.round_dim(run_id, row.round_index)
                assert dim is not None
                members = json.loads(row.members)
                roster = secure._roster(tx, run, row.round_index, row.number, members)
                ups = [
                    [bytes(m.payload) for m in secure._ups(tx, row, st)]
                    for st in range(len(STAGES))
                ]
                c0 = time.process_time()
                server = SecAggServer(
                    secure.parameters_of(row), length=dim, bits=secure.BITS, roster=roster
                )
                server.setup()
                for st in range(len(STAGES)):
                    for data in ups[st]:
                        server.receive_bytes(data)
                    server.advance()
                total = server.result().view(np.int64).astype(np.int64)
                cpu = time.process_time() - c0
                same = [int(x) for x in total] == [int(x) for x in wire.loads(str(row.total))]
                out.append(
                    {
                        "round": row.round_index,
                        "session": row.number,
                        "dim": dim,
                        "cpu_seconds": cpu,
                        "sum_matches_journal": same,
                    }
                )
    finally:
        store.close()
    return out


def bench_flower(n: int, lengths: list[int], timeout: float) -> dict[str, Any]:
    """Flower SecAgg+ rounds (in-process stub grid of ``benchmarks/secagg.py``), one per vector length.

    A round that does not finish within ``timeout`` seconds is recorded as such (its time is then a lower
    bound), and the remaining lengths are not run.
    """
    import secagg as peer
    from fedstats.secagg import find_parameters

    params = find_parameters(n)
    rounds = []
    for length in lengths:
        cfg = {"n": n, "length": length, "k": params.k, "t": params.t, "drop": [], "seed": 1}
        t0 = time.perf_counter()
        res = _run_flower_cpu(peer.PEER_PY, cfg, timeout)
        res["length"] = length
        res["process_wall_seconds"] = time.perf_counter() - t0
        rounds.append(res)
        if "total_seconds" not in res:
            break
    out: dict[str, Any] = {"n": n, "k": params.k, "t": params.t, "rounds": rounds}
    if len(rounds) < len(lengths) or "total_seconds" not in rounds[-1]:
        out["timed_out"] = True
        out["wall_seconds_lower_bound"] = sum(
            r.get("wall_seconds", r["process_wall_seconds"]) for r in rounds
        )
    if all("total_seconds" in r for r in rounds):
        out["wall_seconds"] = sum(r["wall_seconds"] for r in rounds)
        out["server_cpu_seconds"] = sum(r["server_seconds"] for r in rounds)
        out["client_cpu_seconds"] = sum(r["client_seconds"] for r in rounds)
        out["server_seconds"] = out["server_cpu_seconds"]
        out["total_seconds"] = sum(r["total_seconds"] for r in rounds)
        out["total_cpu_seconds"] = sum(r["total_cpu_seconds"] for r in rounds)
        out["client_seconds"] = sum(r["client_seconds"] for r in rounds)
        out["bytes_per_client"] = sum(r["bytes_per_client"] for r in rounds)
        out["correct"] = all(r["correct"] for r in rounds)
    return out


def bench_flower_transport(n: int, lengths: list[int], timeout: float) -> dict[str, Any]:
    """Flower SecAgg+ over its real transport (``_flower_transport.py``: a SuperLink and ``n`` SuperNodes on
    loopback, one round per vector length, same ``k`` and ``t``) in the peers venv; its JSON result.
    """
    import secagg as peer
    from fedstats.secagg import find_parameters

    params = find_parameters(n)
    with tempfile.TemporaryDirectory(prefix="flower-transport-") as tmp:
        cfg = {
            "n": n,
            "k": params.k,
            "t": params.t,
            "lengths": lengths,
            "scratch": tmp,
            "timeout": timeout,
            "settle": max(3.0, n / 10),
        }
        try:
            out = subprocess.run(
                [str(peer.PEER_PY), str(HERE / "_flower_transport.py"), json.dumps(cfg)],
                capture_output=True,
                text=True,
                timeout=timeout + 120,  # the script kills its processes at ``timeout`` itself
            )
        except subprocess.TimeoutExpired:
            return {"n": n, "error": f"timed out after {timeout + 120:.0f} s", "correct": False}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        err = out.stderr.strip().splitlines()
        return {"n": n, "error": err[-1] if err else "failed", "correct": False}
    result: dict[str, Any] = json.loads(lines[-1])
    result.pop("logs", None)  # the scratch directory is gone
    return result


# ---------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cpu_count": os.cpu_count()}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        info["mem_total_kib"] = int(Path("/proc/meminfo").read_text().split()[1])
    return info


def profile_summary(path: Path, top: int = 40) -> dict[str, Any]:
    """The top functions of a cProfile dump by own time and by cumulative time (seconds, calls)."""
    import pstats

    st = pstats.Stats(str(path))
    raw: dict[Any, Any] = st.stats  # type: ignore[attr-defined]

    def name(f: tuple[str, int, str]) -> str:
        file, line, fn = f
        for marker in ("site-packages/", "/src/", "lib/python3.11/"):
            if marker in file:
                file = file.split(marker, 1)[1]
        return f"{file}:{line}({fn})"

    rows = [
        (name(f), int(nc), float(tt), float(ct)) for f, (_cc, nc, tt, ct, _callers) in raw.items()
    ]
    total = sum(r[2] for r in rows)

    def table(key: int) -> list[dict[str, Any]]:
        got = sorted(rows, key=lambda r: -r[key])[:top]
        return [{"function": r[0], "calls": r[1], "own_s": r[2], "cumulative_s": r[3]} for r in got]

    return {"total_own_seconds": total, "by_own": table(2), "by_cumulative": table(3)}


SCALE_SIZES = (200, 1000, 5000)
SCALE_GOALS = {
    "server_cpu_ms_per_device_at_most": 15.0,  # at n = 1,000 and 5,000
    "wall_s_at_n1000_at_most": 45.0,
    "server_rss_mib_at_n1000_at_most": 300.0,
}


def _requests_per_device(ours: dict[str, Any]) -> float:
    """Mean HTTP requests a device sent over the run (polls included; its one-off registration too)."""
    by = (ours.get("bytes_per_client") or {}).get("by_endpoint_mean") or {}
    return float(sum(v["requests"] for v in by.values()))


def fitted_exponent(ns: list[int], values: list[float]) -> float | None:
    """Least-squares slope of ``log(values)`` on ``log(ns)`` (``values ~ c n^slope``); None below 2 points."""
    pts = [(n, v) for n, v in zip(ns, values, strict=True) if v and v > 0]
    if len(pts) < 2:
        return None
    x = np.log([float(n) for n, _ in pts])
    y = np.log([float(v) for _, v in pts])
    return float(np.polyfit(x, y, 1)[0])


def scale_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 40's per-device table of whole runs (check-in, seeding, both rounds) and the fitted exponent.

    Per ``n``: ``server_cpu_ms_per_device`` (the server process's CPU from the run's creation to its
    release, over ``n``; the devices' one-off registration falls inside it unless they registered
    before the run, ``--preregister``, which ``--scale`` sets: then it is
    ``registration_server_cpu_ms_per_device``),
    ``wall_s``, ``requests_per_device`` (mean signed requests and long polls a device sent),
    ``bytes_per_device`` (mean request and response body bytes a device sent and received),
    ``server_rss_mib`` (peak resident memory of the server process during the run), and Flower SecAgg+ on
    the same machine where it was run (``server_cpu_ms_per_device``, ``wall_s``, ``bytes_per_device``).
    ``server_cpu_exponent``: the slope of ``log(server CPU)`` on ``log(n)`` over the completed runs
    (1: linear in ``n``, i.e. constant per device). A run with ``--tls-proxy`` adds
    ``tls_proxy_cpu_ms_per_device`` and ``tls_proxy_rss_mib`` (nginx's master and workers, RSS summed).
    With ``--repeat`` the row is the run of median server CPU and ``server_cpu_ms_per_device_runs`` lists
    every run's.
    """
    out_rows = []
    for row in rows:
        n = int(row["n"])
        ours = row.get("fedstats") or {}
        done = ours.get("status") == "done"
        entry: dict[str, Any] = {
            "n": n,
            "k": row.get("k"),
            "t": row.get("t"),
            "status": ours.get("status"),
            "error": ours.get("error"),
            "server_cpu_ms_per_device": 1000.0 * ours.get("server_cpu_seconds", 0.0) / n,
            "wall_s": ours.get("wall_seconds"),
            "requests_per_device": _requests_per_device(ours),
            "bytes_per_device": (ours.get("bytes_per_client") or {}).get("total_mean"),
            "server_rss_mib": ours.get("server_peak_rss_mib"),
            "server_rss_before_run_mib": ours.get("server_rss_before_run_mib"),
            "devices_registered_before_run": ours.get("devices_registered_before_run", False),
            "registration_server_cpu_ms_per_device": (
                None
                if ours.get("registration_server_cpu_seconds") is None
                else 1000.0 * ours["registration_server_cpu_seconds"] / n
            ),
            "load_average_before": row.get("load_average_before"),
            "load_average_after": row.get("load_average_after"),
            "completed": done,
            "seeding_form": (ours.get("journal") or {}).get("seeding_form"),
        }
        repeats = row.get("fedstats_repeats")
        if repeats:  # --repeat: the row is the median run; every run's CPU beside it
            entry["server_cpu_ms_per_device_runs"] = [
                1000.0 * float(r["server_cpu_seconds"] or 0.0) / n for r in repeats
            ]
        proxy = ours.get("tls_proxy")
        if proxy is not None:  # --tls-proxy: TLS ended in nginx, whose cost is reported beside
            entry["tls_terminated_by"] = ours.get("tls_terminated_by")
            entry["tls_proxy_cpu_ms_per_device"] = 1000.0 * proxy["cpu_seconds"] / n
            entry["tls_proxy_rss_mib"] = proxy["peak_rss_mib"]
        fl = row.get("flower")
        if fl is None:
            entry["flower"] = row.get("flower_not_run")
        elif "server_cpu_seconds" in fl:
            entry["flower"] = {
                "server_cpu_ms_per_device": 1000.0 * fl["server_cpu_seconds"] / n,
                "wall_s": fl["wall_seconds"],
                "bytes_per_device": fl.get("bytes_per_client"),
                "correct": fl.get("correct"),
            }
        else:
            entry["flower"] = {
                "timed_out": True,
                "wall_s_lower_bound": fl.get("wall_seconds_lower_bound"),
            }
        out_rows.append(entry)
    done_rows = [r for r in out_rows if r["completed"]]
    exponent = fitted_exponent(
        [r["n"] for r in done_rows], [r["server_cpu_ms_per_device"] * r["n"] for r in done_rows]
    )
    by_n = {r["n"]: r for r in done_rows}
    goals: dict[str, Any] = dict(SCALE_GOALS)
    if 1000 in by_n:
        goals["met_cpu_n1000"] = by_n[1000]["server_cpu_ms_per_device"] <= 15.0
        goals["met_wall_n1000"] = by_n[1000]["wall_s"] <= 45.0
        goals["met_rss_n1000"] = by_n[1000]["server_rss_mib"] <= 300.0
    if 5000 in by_n:
        goals["met_cpu_n5000"] = by_n[5000]["server_cpu_ms_per_device"] <= 15.0
    goals["n5000_completed"] = 5000 in by_n
    return {"rows": out_rows, "server_cpu_exponent": exponent, "goals": goals}


def _arguments() -> argparse.Namespace:
    """The command line, with ``--scale``'s defaults filled in."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n = 100 only")
    ap.add_argument("--clients", type=int, nargs="+", help="n values (default 100 1000)")
    ap.add_argument("--procs", type=int, default=4, help="device worker processes")
    ap.add_argument(
        "--poll",
        type=float,
        default=None,
        help="with --wait 0: seconds between a device's polls (default: n / 200, at least 0.5)",
    )
    ap.add_argument(
        "--wait",
        type=float,
        default=20.0,
        help="long polling: the server holds a device's poll up to this long (0: plain polling)",
    )
    ap.add_argument(
        "--cohort-tree-above",
        type=int,
        default=None,
        help="fedstats server --cohort-tree-above: cohorts above it seed by their cohort tree "
        "(default: the server's, 64); a number above n measures the O(n) commitment list instead",
    )
    ap.add_argument(
        "--tick", type=float, default=1.0, help="server run-driver's longest pause, seconds"
    )
    ap.add_argument(
        "--store-threads",
        type=int,
        default=4,
        help="fedstats server --store-threads (threads running device requests' database work)",
    )
    ap.add_argument("--timeout", type=float, default=1200.0, help="per configuration, seconds")
    ap.add_argument("--no-flower", action="store_true", help="skip the Flower comparison")
    ap.add_argument(
        "--flower-timeout",
        type=float,
        default=900.0,
        help="per Flower round, seconds (about 30 min per round at n = 1000 on an idle 2-core machine)",
    )
    ap.add_argument(
        "--flower-transport",
        action="store_true",
        help="also run Flower's SecAgg+ over its real transport (SuperLink + n SuperNodes on loopback); "
        "heavy: a SuperNode process per client and a ClientApp process per message (see the module "
        "docstring for the n that fit this machine)",
    )
    ap.add_argument(
        "--flower-transport-timeout",
        type=float,
        default=1200.0,
        help="per n, seconds, for --flower-transport",
    )
    ap.add_argument(
        "--encoding-size",
        type=int,
        default=ENCODING_SIZE,
        help="FED-chi^2's encoding size: the second round's vector length L (default 50)",
    )
    ap.add_argument(
        "--dropout",
        type=float,
        default=0.0,
        help="fraction of the devices that stop answering at --drop-stage of every session",
    )
    ap.add_argument(
        "--drop-stage",
        type=int,
        default=2,
        help="the secure stage (0-4) from which the dropped devices stop answering (2: masked input)",
    )
    ap.add_argument(
        "--stage-seconds",
        type=float,
        default=None,
        help="the task's round deadline (per secure stage: a stage with dropouts closes then); "
        "default --timeout",
    )
    ap.add_argument(
        "--quiet-seconds",
        type=float,
        default=5.0,
        help="the task's secure_aggregation.quiet_seconds: a stage whose quorum answered closes after "
        "this long without a message instead of at its deadline (default 5; 0: off, deadline only)",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="run the server under cProfile (all threads); write results/tmp/<output>_n<n>.prof and "
        "the top functions into the results (cProfile slows the server: its CPU is not comparable)",
    )
    ap.add_argument(
        "--profile-devices",
        action="store_true",
        help="run the devices of the first worker process under cProfile (per-thread CPU clock); write "
        "results/tmp/<output>_n<n>_devices.prof and the top functions into the results",
    )
    ap.add_argument(
        "--device-timers",
        action="store_true",
        help="time the devices' main steps by each thread's CPU clock (benchmarks/_device_timers.py) "
        "and put them per device into the results (device_timers)",
    )
    ap.add_argument(
        "--server-threads",
        action="store_true",
        help="read the CPU clock of each server thread when the run is created and when it ended "
        "(server_thread_cpu_seconds in the results: the event loop, the store threads, the driver)",
    )
    ap.add_argument(
        "--share-certificate-checks",
        action="store_true",
        help="no longer changes anything: every Device of a process shares its verified certificates "
        "and signatures (fedstats.client.secure.VERIFIED_CERTIFICATES and SIGNATURES, keyed by the whole "
        "verified content); kept so that older command lines still run",
    )
    ap.add_argument(
        "--flower-max-n",
        type=int,
        default=None,
        help="run Flower only for n up to this (larger n are recorded as not run, with the reason)",
    )
    ap.add_argument(
        "--preregister",
        action="store_true",
        help="devices register (present their enrollment certificate, once per device) before the run "
        "is created; the server's CPU for it is reported apart (registration_server_cpu_seconds)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="whole runs per n (default 1): the row is the run of median server CPU, every run's figures "
        "are kept beside it (fedstats_repeats; scale: server_cpu_ms_per_device_runs). Whole runs on "
        "this machine vary by up to 1.7x (docs/deploy.md, 'How much one row says')",
    )
    ap.add_argument(
        "--scale",
        action="store_true",
        help="issue 40's scale table: n = 200 1000 5000 (unless --clients), PostgreSQL, L = 1000, 10%% "
        "dropouts at the masked input, 45 s stages, devices registered before the run (--preregister), "
        "Flower up to n = 200 (unless --flower-max-n); writes "
        "results/service_secagg_scale.json with a 'scale' summary (scale_summary)",
    )
    ap.add_argument(
        "--checkin-seconds",
        type=float,
        default=None,
        help="the task's check-in deadline (default --timeout): the run goes on with the devices that "
        "checked in by then (at least half), instead of waiting for a harness device that never does",
    )
    ap.add_argument("--db", choices=["auto", "sqlite", "postgresql"], default="auto")
    ap.add_argument("--output", default="service_secagg", help="results name under results/")
    ap.add_argument(
        "--note", default=None, help="a note stored with the results (e.g. why a deadline)"
    )
    ap.add_argument(
        "--tls-proxy",
        action="store_true",
        help="terminate TLS in an nginx in front of a plain-HTTP server on loopback (docs/deploy.md, "
        "'Production TLS'); its CPU and peak RSS are reported beside the server's. Needs nginx "
        "(apt-get install -y nginx-light)",
    )
    ap.add_argument(
        "--keep-others",
        action="store_true",
        help="keep the configurations of other n from the existing results file (each row records "
        "its own command line, time and load averages)",
    )
    args = ap.parse_args()
    if args.scale:
        args.clients = args.clients or list(SCALE_SIZES)
        args.encoding_size = 1000 if args.encoding_size == ENCODING_SIZE else args.encoding_size
        args.dropout = args.dropout or 0.1
        args.stage_seconds = args.stage_seconds or 45.0
        args.db = "postgresql" if args.db == "auto" else args.db
        args.output = "service_secagg_scale" if args.output == "service_secagg" else args.output
        args.flower_max_n = 200 if args.flower_max_n is None else args.flower_max_n
        args.wait = 25.0 if args.wait == 20.0 else args.wait
        args.preregister = True
    return args


def _flower_row(row: dict[str, Any], ours: dict[str, Any], args: argparse.Namespace) -> None:
    """Flower's SecAgg+ at ``row["n"]`` (stub grid, and its transport if asked), with the ratios, in ``row``."""
    n = row["n"]
    if args.flower_max_n is not None and n > args.flower_max_n:
        row["flower_not_run"] = {
            "not_run": f"n > --flower-max-n {args.flower_max_n}",
            "note": "Flower's SecAgg+ (stub grid, no network) did not finish its first round at "
            "n = 1000 within 600 s on this machine (results/service_secagg.json, "
            "flower.wall_seconds_lower_bound)",
        }
    else:
        lengths = [sum(SHAPE), args.encoding_size]
        fl = bench_flower(n, lengths, timeout=args.flower_timeout)
        row["flower"] = fl
        if "server_cpu_seconds" in fl and ours.get("status") == "done":
            secure_wall = sum(r["round_seconds"] for r in ours["journal"]["rounds"])
            row["ratios_flower_over_fedstats"] = {
                "server_cpu": fl["server_cpu_seconds"] / ours["server_cpu_seconds"],
                "server_cpu_protocol_only": fl["server_cpu_seconds"]
                / ours["protocol_server_cpu_seconds"],
                "wall_secure_rounds": fl["wall_seconds"] / secure_wall,
                "wall_whole_run": fl["wall_seconds"] / ours["wall_seconds"],
                "bytes_per_client": fl["bytes_per_client"] / ours["bytes_per_client"]["total_mean"],
            }
        elif fl.get("timed_out") and ours.get("status") == "done":
            secure_wall = sum(r["round_seconds"] for r in ours["journal"]["rounds"])
            row["ratios_flower_over_fedstats_lower_bounds"] = {
                "wall_secure_rounds": fl["wall_seconds_lower_bound"] / secure_wall,
                "wall_whole_run": fl["wall_seconds_lower_bound"] / ours["wall_seconds"],
                "note": "Flower's first round did not finish within --flower-timeout: its wall time "
                "is a lower bound, its server CPU unknown",
            }
        print(f"n={n} flower: {json.dumps({k: v for k, v in fl.items() if k != 'rounds'})}")
        ratios = row.get("ratios_flower_over_fedstats") or row.get(
            "ratios_flower_over_fedstats_lower_bounds"
        )
        print(f"n={n} ratios: {ratios}", flush=True)
    if args.flower_transport:
        ft = bench_flower_transport(
            n, [sum(SHAPE), args.encoding_size], timeout=args.flower_transport_timeout
        )
        row["flower_transport"] = ft
        print(
            f"n={n} flower transport: wall {ft.get('wall_seconds')} s, SuperLink+ServerApp CPU "
            f"{ft.get('superlink_serverapp_cpu_seconds')} s, SuperNodes+ClientApps CPU "
            f"{ft.get('supernodes_clientapps_cpu_seconds')} s, correct {ft.get('correct')}, "
            f"error {ft.get('error')}",
            flush=True,
        )


REPEAT_KEYS = (
    "status",
    "server_cpu_seconds",
    "wall_seconds",
    "server_peak_rss_mib",
    "client_cpu_seconds_total",
    "driver_passes",
    "server_page_faults",
)
"""The figures of each of ``--repeat`` runs kept beside the median one (``fedstats_repeats``)."""


def _median_run(
    n: int, args: argparse.Namespace, kind: str, poll: float, row: dict[str, Any]
) -> dict[str, Any]:
    """``--repeat`` runs of :func:`_fedstats_run` at ``n``: the one of median server CPU (the lower of the
    two middle ones for an even count) becomes ``row["fedstats"]``; with more than one run, every run's
    :data:`REPEAT_KEYS`, time and protocol replay CPU go to ``row["fedstats_repeats"]``."""
    runs = []
    for i in range(max(1, args.repeat)):
        began = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        got = _fedstats_run(n, args, kind, poll)
        runs.append((began, got))
        if args.repeat > 1:
            print(
                f"n={n} run {i + 1}/{args.repeat}: server CPU "
                f"{got.get('server_cpu_seconds', 0):.2f} s, status {got.get('status')}",
                flush=True,
            )
    done = [r for r in runs if r[1].get("status") == "done"] or runs
    done.sort(key=lambda r: float(r[1].get("server_cpu_seconds", 0.0)))
    ours = done[(len(done) - 1) // 2][1]
    row["fedstats"] = ours
    if len(runs) > 1:
        row["fedstats_repeats"] = [
            {
                "time": began,
                **{k: got.get(k) for k in REPEAT_KEYS},
                "protocol_replay_cpu_seconds": sum(
                    float(r.get("cpu_seconds", 0.0)) for r in got.get("protocol_replay") or []
                ),
                "median": got is ours,
            }
            for began, got in runs
        ]
    return ours


def _fedstats_run(n: int, args: argparse.Namespace, kind: str, poll: float) -> dict[str, Any]:
    """:func:`bench_fedstats` at ``n`` with the command line's options, in a throwaway store and directory.

    The profiles asked for are summarized into the result; a failed run's server log is kept under
    ``results/tmp``.
    """
    prof = HERE / "results" / "tmp" / f"{args.output}_n{n}.prof" if args.profile else None
    if prof is not None:
        prof.parent.mkdir(parents=True, exist_ok=True)
        prof.unlink(missing_ok=True)
    dprof = (
        HERE / "results" / "tmp" / f"{args.output}_n{n}_devices.prof"
        if args.profile_devices
        else None
    )
    if dprof is not None:
        dprof.parent.mkdir(parents=True, exist_ok=True)
        dprof.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="svc-secagg-") as tmp:
        root = Path(tmp)
        store: contextlib.AbstractContextManager[str] = (
            pg_schema()
            if kind == "postgresql"
            else contextlib.nullcontext(f"sqlite:///{root / 'fedstats.db'}")
        )
        with store as db:
            ours = bench_fedstats(
                n,
                db,
                root,
                args.procs,
                poll,
                args.wait,
                args.tick,
                args.timeout,
                args.store_threads,
                args.encoding_size,
                args.dropout,
                args.drop_stage,
                prof,
                args.stage_seconds,
                args.share_certificate_checks,
                dprof,
                args.quiet_seconds or None,
                args.preregister,
                args.checkin_seconds,
                args.tls_proxy,
                args.cohort_tree_above,
            )
        if "error" in ours and ours.get("status") != "done":
            keep = HERE / "results" / "tmp" / f"service_secagg_n{n}.log"
            keep.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                shutil.copy(root / "server.log", keep)
    if prof is not None and prof.exists():
        ours["profile"] = profile_summary(prof)
    if dprof is not None and dprof.exists():
        ours["device_profile"] = profile_summary(dprof)
    return ours


def main() -> None:
    """Run the configurations; print one line each; write ``results/service_secagg.json``."""
    args = _arguments()
    clients = args.clients or ([100] if args.quick else [100, 1000])
    # a SIGTERM (kill, pkill) exits through the finally blocks, which stop the server (its own
    # session: it would outlive this process) and the device worker processes
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.device_timers:  # read by the device worker processes, which inherit the environment
        os.environ[_device_timers.ENV] = "1"
    if args.server_threads:  # read by the server process (its bootstrap, _SERVER_MAIN)
        os.environ["FEDSTATS_BENCH_THREAD_CPU"] = str(
            Path(tempfile.gettempdir()) / f"fedstats-bench-threads-{os.getpid()}.json"
        )

    import secagg as peer

    use_flower = not args.no_flower and peer.ensure_peers()
    pg = None if args.db == "sqlite" else pg_reachable()
    kind = (
        "sqlite" if args.db == "sqlite" or (args.db == "auto" and pg is not None) else "postgresql"
    )
    if kind == "postgresql" and pg is not None:
        raise SystemExit(pg)
    machine = _machine()
    machine["memory_first_touch"] = memory_touch_rate()  # page faults are dear here (its docstring)
    machine["cpu_yardstick"] = cpu_yardstick()  # machines differ between sessions (its docstring)
    doc: dict[str, Any] = {
        "command": " ".join(["python", "benchmarks/service_secagg.py", *sys.argv[1:]]),
        "machine_details": machine,
        "load_average_before": list(os.getloadavg()),
        "store": kind,
        "store_note": None if kind == "postgresql" else pg,
        "fedstats_sources": str(SRC),
        "task": {
            "analysis": "fed-chi2",
            "shape": list(SHAPE),
            "encoding_size": args.encoding_size,
            "records_per_device": RECORDS_PER_DEVICE,
            "vector_lengths": [sum(SHAPE), args.encoding_size],
            "max_session": "n (one session)",
        },
        "flower_transport": "in-process stub grid, no network" if use_flower else None,
        "flower_version": peer.flower_version() if use_flower else None,
        "flower_note": (
            "Flower's SecAggPlusWorkflow + secaggplus_mod driven through benchmarks/secagg.py's stub grid "
            "(protobuf-serialized messages, no network, no TLS, no polling); its SuperLink/SuperNode "
            "transport was not run (one SuperNode process per client does not fit 2 cores at n = 1000)"
        ),
        "configurations": [],
        "complete": False,
        "note": args.note,
    }
    if use_flower and args.flower_transport:
        doc["flower_real_transport_note"] = (
            "configurations[].flower_transport: Flower's SecAgg+ over its real transport "
            "(benchmarks/_flower_transport.py: flower-superlink --insecure and n flower-supernode "
            "--insecure on loopback, subprocess isolation, flwr run), same n, k, t and lengths; wall "
            "seconds from flwr run to the ServerApp's result; CPU from /proc of the SuperLink tree "
            "(SuperLink, SuperExec, ServerApp) and of the SuperNode trees (SuperNode, SuperExec, ClientApps)"
        )

    command = doc["command"]
    kept: list[dict[str, Any]] = []
    old_file = HERE / "results" / f"{args.output}.json"
    if args.keep_others and old_file.exists():
        old = json.loads(old_file.read_text())
        for earlier in old.get("configurations", []):
            if earlier["n"] not in clients:
                for key in ("command", "time", "load_average_before", "load_average_after"):
                    earlier.setdefault(key, old.get(key))
                kept.append(earlier)

    def save() -> None:
        doc["load_average_after"] = list(os.getloadavg())
        doc["configurations"] = sorted([*kept, *ran], key=lambda r: int(r["n"]))
        if args.scale:
            doc["scale"] = scale_summary(doc["configurations"])
        write_results(args.output, doc)

    ran: list[dict[str, Any]] = []

    for n in clients:
        poll = args.poll if args.poll is not None else max(0.5, n / 200)
        row: dict[str, Any] = {
            "n": n,
            "command": command,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_average_before": list(os.getloadavg()),
        }
        from fedstats.secagg import find_parameters

        p = find_parameters(n)
        row["k"], row["t"] = p.k, p.t
        ours = _median_run(n, args, kind, poll, row)
        print(
            f"n={n} fedstats: status {ours.get('status')} wall {ours.get('wall_seconds', 0):.1f} s, "
            f"server CPU {ours.get('server_cpu_seconds', 0):.1f} s, "
            f"peak RSS {ours.get('server_peak_rss_mib', 0):.0f} MiB, "
            f"error {ours.get('error')}",
            flush=True,
        )
        rounds_wall = (ours.get("journal") or {}).get("phases", {}).get("rounds_seconds", [])
        rounds_cpu = (ours.get("cpu_by_phase") or {}).get("rounds", [])
        for i, (w, c) in enumerate(zip(rounds_wall, rounds_cpu, strict=False)):
            print(
                f"  round {i}: wall {w:.1f} s, server CPU {c['server_cpu_seconds']:.1f} s, "
                f"devices' CPU {c['device_cpu_seconds']:.1f} s",
                flush=True,
            )
        if use_flower:
            _flower_row(row, ours, args)
        row["load_average_after"] = list(os.getloadavg())
        ran.append(row)
        save()
    doc["complete"] = True
    save()
    if args.scale:
        for r in doc["scale"]["rows"]:
            print(
                f"n={r['n']}: {r['server_cpu_ms_per_device']:.1f} ms server CPU per device, wall "
                f"{r['wall_s']} s, {r['requests_per_device']:.1f} requests and "
                f"{r['bytes_per_device']} bytes per device, RSS {r['server_rss_mib']} MiB",
                flush=True,
            )
        print(f"server CPU ~ n^{doc['scale']['server_cpu_exponent']}", flush=True)
    print(f"wrote {HERE / 'results' / (args.output + '.json')}")


if __name__ == "__main__":
    main()
