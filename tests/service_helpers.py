"""Shared fixtures of the service tests: real server and client processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from deadlines import scaled
from fedstats.service.domain.operators import add_operator
from fedstats.service.http.tls import make_dev_certificates
from fedstats.service.store import open_store
from fedstats.wire.enrollment import init_authority, issue_analyst, issue_identity
from fedstats.wire.tasks import sign_task

FEDSTATS = [str(Path(sys.executable).with_name("fedstats"))]
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def pg_reachable() -> str | None:
    """None if PostgreSQL answers at 127.0.0.1:5432, else the reason (a skip outside CI).

    In CI (``CI`` set) the production store must be tested: an unreachable server fails the test instead
    of skipping it.
    """
    try:
        import psycopg

        with psycopg.connect(
            "host=127.0.0.1 port=5432 dbname=test user=postgres", connect_timeout=3
        ):
            return None
    except Exception as exc:
        reason = f"PostgreSQL at 127.0.0.1:5432 unreachable: {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must test the PostgreSQL store, not skip it)")
        return reason


@contextmanager
def store_url(kind: str, sqlite_file: Path) -> Iterator[str]:
    """The URL of a fresh store of ``kind`` ("sqlite": ``sqlite_file``; "postgresql": a schema of its own,
    dropped afterwards); a PostgreSQL that cannot be reached skips the test (fails it in CI)."""
    if kind == "postgresql":
        why = pg_reachable()
        if why is not None:
            pytest.skip(why)
        with pg_schema() as u:
            yield u
        return
    yield f"sqlite:///{sqlite_file}"


@contextmanager
def fresh_store(kind: str, tmp_path: Path) -> Iterator[Any]:
    """A fresh, migrated store of ``kind`` ("memory", "sqlite" or "postgresql": a schema of its own, dropped
    afterwards), closed afterwards; a PostgreSQL that cannot be reached skips the test (fails it in CI)."""
    if kind == "memory":
        st = open_store("memory://")
        try:
            yield st
        finally:
            st.close()
        return
    with store_url(kind, tmp_path / "store.db") as url:
        st = open_store(url)
        try:
            yield st
        finally:
            st.close()


@contextmanager
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema, dropped afterwards; yields a URL whose search_path is that schema."""
    import psycopg

    name = "fedstats_test_" + uuid.uuid4().hex[:10]
    conninfo = "host=127.0.0.1 port=5432 dbname=test user=postgres"
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {name}")
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(conninfo, autocommit=True) as c:
            c.execute(f"DROP SCHEMA {name} CASCADE")


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Deployment:
    """A temporary deployment: CA and certificates, authority, operator token, database, server process."""

    root: Path
    db: str
    port: int = field(default_factory=free_port)
    token: str = ""
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.certs = make_dev_certificates(self.root / "tls", ["127.0.0.1"])
        init_authority(self.root / "authority")
        self.analysts: dict[str, dict[str, Any]] = {}
        store = open_store(self.db)
        self.token = add_operator(store, "alice")
        store.close()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, *extra: str, crash_after: str | None = None) -> None:
        self.proc = self.spawn(self.port, *extra, crash_after=crash_after)

    def spawn(
        self, port: int, *extra: str, crash_after: str | None = None
    ) -> subprocess.Popen[bytes]:
        """Start a server process on ``port`` against this deployment's database; wait for /healthz."""
        env = dict(os.environ, **self.env)
        env.pop("FEDSTATS_CRASH_AFTER", None)
        if crash_after:
            env["FEDSTATS_CRASH_AFTER"] = crash_after
        proc = subprocess.Popen(
            [
                *FEDSTATS,
                "server",
                "--db",
                self.db,
                "--port",
                str(port),
                "--tls-cert",
                str(self.certs["cert"]),
                "--tls-key",
                str(self.certs["key"]),
                "--authority",
                str(self.root / "authority" / "authority.pub"),
                "--tick",
                "0.5",
                *extra,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / f"server-{port}.log", "ab"),
        )
        # a loaded machine can take long to import the server
        deadline = time.monotonic() + scaled(120)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited {proc.returncode}")
            try:
                if (
                    httpx.get(
                        f"https://127.0.0.1:{port}/healthz",
                        verify=ssl.create_default_context(cafile=str(self.certs["ca"])),
                        timeout=1,
                    ).status_code
                    == 200
                ):
                    return proc
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        proc.kill()
        raise RuntimeError("server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            verify=ssl.create_default_context(cafile=str(self.certs["ca"])),
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )

    def analyst(self, population: str = "default") -> dict[str, Any]:
        """The analyst identity (issued by this deployment's authority) that signs tasks for ``population``."""
        if population not in self.analysts:
            out = self.root / "analysts" / f"{population}.json"
            out.parent.mkdir(exist_ok=True)
            self.analysts[population] = issue_analyst(
                self.root / "authority", f"analyst-{population}", [population], out
            )
        return self.analysts[population]

    def sign(self, task: dict[str, Any]) -> dict[str, Any]:
        """``task`` signed by the analyst of its population: the body of ``POST /v1/admin/tasks``."""
        population = str((task.get("privacy") or {}).get("population", "default"))
        return sign_task(task, self.analyst(population))

    def identity(self, client_id: str, population: str = "default") -> Path:
        out = self.root / "ids" / f"{client_id}.json"
        out.parent.mkdir(exist_ok=True)
        issue_identity(self.root / "authority", client_id, population, out)
        return out

    def start_client(
        self, client_id: str, data: Path, *extra: str, url: str | None = None
    ) -> subprocess.Popen[bytes]:
        ident = self.identity(client_id)
        return subprocess.Popen(
            [
                *FEDSTATS,
                "client",
                "run",
                "--server",
                url or self.url,
                "--identity",
                str(ident),
                "--data",
                str(data),
                "--ca",
                str(self.certs["ca"]),
                "--poll",
                "0.1",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / f"client-{client_id}.log", "ab"),
        )


def write_shards(root: Path, columns: dict[str, np.ndarray], n_shards: int) -> list[Path]:
    """Split the records into ``n_shards`` CSV files (vector columns as ``name[i]``)."""
    flat: dict[str, Any] = {}
    for k, v in columns.items():
        if v.ndim == 2:
            for i in range(v.shape[1]):
                flat[f"{k}[{i}]"] = v[:, i]
        else:
            flat[k] = v
    df = pd.DataFrame(flat)
    paths = []
    for i, part in enumerate(np.array_split(np.arange(len(df)), n_shards)):
        p = root / f"shard-{i}.csv"
        df.iloc[part].to_csv(p, index=False)
        paths.append(p)
    return paths


def _started(
    dep: Deployment, prepare: Callable[[Deployment], None] | None, args: Sequence[str] = ()
) -> Iterator[Deployment]:
    dep.start(*args)
    try:
        if prepare is not None:
            prepare(dep)
        yield dep
    finally:
        dep.kill()


def store_deployment(
    store: str,
    root: Path,
    prepare: Callable[[Deployment], None] | None = None,
    args: Sequence[str] = (),
) -> Iterator[Deployment]:
    """A started deployment on ``store`` ("sqlite" or "postgresql", a fresh schema), killed afterwards.

    The server is started with the options ``args`` (besides those of :meth:`Deployment.spawn`);
    ``prepare(dep)`` runs once it is up (budgets, operators). PostgreSQL skips with the reason it is
    unreachable; in CI it must be reachable (``.ci/run``).
    """
    if store == "postgresql":
        reason = pg_reachable()
        if reason is not None:
            pytest.skip(reason)
        with pg_schema() as url:
            yield from _started(Deployment(root, url), prepare, args)
    else:
        yield from _started(Deployment(root, f"sqlite:///{root / 'fedstats.db'}"), prepare, args)


def production_deployment(
    root: Path, prepare: Callable[[Deployment], None] | None = None, args: Sequence[str] = ()
) -> Iterator[Deployment]:
    """A started deployment on the production store (a PostgreSQL schema) when reachable, else SQLite;
    ``prepare(dep)`` and ``args`` as for :func:`store_deployment`."""
    store = "postgresql" if pg_reachable() is None else "sqlite"
    yield from store_deployment(store, root, prepare, args)


def wait_run(admin: httpx.Client, run_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """Poll a run until it is done or aborted."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = admin.get(f"/v1/admin/runs/{run_id}")
        if r.status_code == 200 and r.json()["status"] in ("done", "aborted"):
            return dict(r.json())
        time.sleep(0.1)
    raise TimeoutError(f"run {run_id} did not finish")


def run_devices(
    devices: Sequence[Any], poll: float, wait: float, seconds: float, until: Callable[[Any], bool]
) -> list[threading.Thread]:
    """Start each device's :meth:`~fedstats.client.Device.run` in a daemon thread; the threads.

    ``poll``, ``wait`` and ``until`` as :meth:`Device.run` takes them; ``seconds`` its ``max_seconds``.
    """
    threads = [
        threading.Thread(
            target=d.run,
            kwargs={"poll": poll, "wait": wait, "max_seconds": seconds, "until": until},
            daemon=True,
        )
        for d in devices
    ]
    for t in threads:
        t.start()
    return threads


def attacked_devices(
    url: str,
    idents: Sequence[dict[str, Any]],
    ca: Path,
    *,
    records: int,
    seed: int,
    randomness: int,
    aborts: int,
    log: list[str],
) -> list[Any]:
    """Unmodified devices for an attack on a secure run: ``records`` values in ``[-1, 1)`` each.

    Their policy admits 2-member sessions and any colluder fraction (a small test cohort) and
    ``aborts`` aborted runs; each logs into ``log`` with the time and its client id; the values are
    drawn with ``default_rng(seed)``, device ``i``'s randomness is ``RandomSource(randomness + i)``.
    """
    from fedstats.client import Device, LocalBudget, Policy
    from fedstats.randomness import RandomSource

    rng = np.random.default_rng(seed)
    policy = Policy(min_session_size=2, min_colluder_fraction=0.0, max_aborted_runs=aborts)
    return [
        Device(
            url,
            ident,
            {"value": rng.uniform(-1, 1, records)},
            ca=ca,
            policy=policy,
            budget=LocalBudget(None, epsilon=1e3),
            randomness=RandomSource(randomness + i),
            log=lambda line, c=ident["client_id"]: log.append(f"{time.time():.2f} {c}: {line}"),
        )
        for i, ident in enumerate(idents)
    ]


def run_polled(
    dep: Deployment, devices: Sequence[Any], runs: dict[str, str], seconds: float
) -> dict[str, dict[str, Any]]:
    """Run ``devices`` (in threads) until every run of ``runs`` (name -> run id) ended; their views.

    The devices poll (every 0.2 s, no long polling): a held request in one run (up to ``wait`` s,
    chained over a session's stages) delayed a device's reading of its other runs past their
    deadlines on a loaded machine, and a run then aborted before any member read the attacked
    session; polled, a device reads every listed run's stage within one loop of short requests. Each
    device stops once it saw every run end (or after ``seconds``); they are closed before returning.
    """
    wanted = set(runs.values())
    threads = run_devices(
        devices, 0.2, 0.0, seconds, lambda dev: wanted <= set(getattr(dev, "finished", set()))
    )
    views = {}
    try:
        with dep.admin() as a:
            for name, run_id in runs.items():
                views[name] = wait_run(a, run_id, timeout=seconds)
    finally:
        for t in threads:
            t.join(60)
        for d in devices:
            d.close()
    return views


def counted_routes(store: Any) -> tuple[Any, list[Any]]:
    """A :class:`~fedstats.service.http.secure.SecureRoutes` over ``store`` whose store hand-offs are
    counted (each waits 10 ms, so that requests asked together arrive meanwhile); its other
    dependencies refuse to be called. Returns the routes and the list of hand-offs."""
    import asyncio

    from fedstats.service.domain.changes import Changes, Wakeup
    from fedstats.service.http.secure import SecureRoutes

    handoffs: list[Any] = []

    async def offload(fn: Any, *args: Any) -> Any:
        handoffs.append(fn)
        await asyncio.sleep(0.01)  # the others arrive meanwhile
        return fn(*args)

    async def nothing(*_a: Any) -> Any:
        raise AssertionError("not called")

    routes = SecureRoutes(
        store,
        nothing,
        nothing,
        json.loads,
        {},
        Wakeup(),
        changes=Changes(),
        population_of=nothing,
        max_wait=1.0,
        offload=offload,
    )
    return routes, handoffs
