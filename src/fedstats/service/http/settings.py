"""The server's settings: one dataclass, the one home of every default (the CLI reads them from here).

Light on purpose (no FastAPI, no SQLAlchemy): ``fedstats server --help`` shows these defaults without
importing the service.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ServerSettings"]


@dataclass
class ServerSettings:
    """Knobs of the server.

    Attributes
    ----------
    max_body : int
        Largest request body in bytes (default 1 MiB).
    rate, burst : float
        Token bucket per client: sustained requests per second and burst size.
    replay_window : float
        Seconds a signed request's timestamp may differ from the server clock; nonces are kept this long.
    tick : float
        Longest time between two passes of the run driver (deadlines, and changes made by other server
        processes, are noticed within it). A device's message also triggers a pass at once
        (:mod:`fedstats.service.domain.changes`), so this does not pace the rounds.
    max_wait : float
        Longest time a long-polling ``GET /v1/client/work`` is held open (a device asks for at most this).
    recheck : float
        How often this process reads the shared ``state_version`` counters: to wake its held polls when
        another server process on the same database changed a run (:mod:`fedstats.service.domain.changes`),
        and to keep trusting its cached device rows while no device was revoked, re-keyed or re-certified
        anywhere (:class:`~.deps.DeviceAuth`; above ``deps.REREAD`` seconds each row is re-read instead).
    lease_seconds : float
        How long this process's claim on a run lasts without renewal (:class:`~.driver.Driver`); after
        it, another server process on the same database takes the run over.
    server_id : str or None
        This process's name in the runs' leases; a process restarted under the same name resumes its runs
        at once. Default: a fresh name (host, pid, random), so a restart waits for its old leases to expire.
    store_threads : int
        Threads that run device requests' store work (:class:`~.client_api.Offload`), >= 1 (default 4).
        More let more requests wait on the database at once (a remote database); fewer contend less for
        the interpreter lock.
    work_cache_seconds : float
        Longest life of a device's cached work list (:class:`~.fastpath.WorkCache`; default 60 s), > 0:
        a device's write through another server process is seen by this one's cache within it
        (until then this process may answer a list that still shows what the device did there: a
        round it reported, an offer it took; the client skips those). A run's state change is seen
        at once. Shorter lists expire before the devices of a large cohort poll after a round opens
        and are read again (at 10 s, for most of the 10,000 devices of ``benchmarks/service.py``).
    vdaf : bool
        Serve the two-aggregator (Prio3) mode's routes ``/v1/vdaf/tasks`` (:mod:`.vdaf`; default False).
    vdaf_peer_ca : str or None
        CA certificate (PEM file) of the helper's TLS certificate, for the tasks this server leads
        (default: the system's trust store).
    vdaf_batch_size : int
        Reports per Prio3 aggregation job, in [1, 100000] (default 1000).
    dap : bool
        Serve DAP-09 for Prio3 tasks (:mod:`.dap`: ``/hpke_config``, ``/tasks/{task-id}/...``, binary
        messages; default False). Uses ``vdaf_peer_ca`` and ``vdaf_batch_size`` as the JSON routes do.
    dap_interop : str or None
        Also serve the DAP interoperation test design's ``/internal/test/...`` endpoints for one role
        (``aggregator``, ``client`` or ``collector``); unauthenticated, for test rigs only (default None: off).
    idempotency_retention : float
        Seconds an admin write's ``Idempotency-Key`` and first answer are kept (default 7 days, > 0); a
        retry after that is evaluated again (:func:`~fedstats.service.domain.idempotency.purge`).
    access_log : bool
        One JSON log line per request on stderr (default True); False logs only server errors.
    max_connections : int or None
        Most client connections open at once in this process (:mod:`.limits`; beyond it a connection is
        answered 503 and closed). Each holds one open file: with ``limits.FILE_RESERVE`` (128) more it
        must fit the process's open-file limit (``ulimit -n``; the soft limit is raised up to the hard
        one at start-up). Default None: the hard limit minus the reserve, at most 65,536.
    max_connections_per_peer : int
        Most connections open at once from one peer address (default 256; a NAT or proxy in front of
        many devices needs more); beyond it a connection is answered 503 with ``Retry-After``.
    header_timeout : float
        Seconds a request's headers may take to arrive after the connection opened (or after the first
        byte of the next request on a kept-alive one), > 0 (default 10); then the connection is
        answered 408 and closed. It bounds how long a client can hold a half-sent request.
    request_key_secret : bytes or None
        The secret devices' request keys are derived under (:func:`fedstats.wire.auth.open_request_key`),
        at least 32 bytes. Server processes behind one balancer given the same secret accept each
        other's keys. Default None: the secret kept in the state (drawn once, 32 random bytes, by the
        first process that needed it: :func:`fedstats.service.http.device.request_key_secret`), so
        every process on the database accepts a key, across restarts.
    cohort_tree_above : int or None
        A secure run whose check-in closes with more devices than this seeds by its cohort tree
        (:mod:`fedstats.service.domain.secure_tree`: a committee of ``min(n, 40)`` members reveals, each
        device checks ``O(k log n)`` bytes; ``docs/deploy.md``, "Secure aggregation over the network"); at most this many,
        by the commitment list every member checks (:mod:`fedstats.wire.seeding`). Default 64; None:
        never. The run's form is stored when its check-in closes.
    """

    max_body: int = 1 << 20
    rate: float = 50.0
    burst: float = 200.0
    replay_window: float = 300.0
    tick: float = 1.0
    max_wait: float = 25.0
    recheck: float = 2.0
    lease_seconds: float = 30.0
    server_id: str | None = None
    store_threads: int = 4
    work_cache_seconds: float = 60.0
    vdaf: bool = False
    vdaf_peer_ca: str | None = None
    vdaf_batch_size: int = 1000
    dap: bool = False
    dap_interop: str | None = None
    idempotency_retention: float = 7 * 86400.0
    access_log: bool = True
    max_connections: int | None = None
    max_connections_per_peer: int = 256
    header_timeout: float = 10.0
    request_key_secret: bytes | None = None
    cohort_tree_above: int | None = 64
