"""The fedstats client SDK: a device that answers an aggregation server's rounds with its own data.

A :class:`Device` holds an enrolled identity (:mod:`fedstats.wire.enrollment`), its data (a CSV or
Parquet file, read lazily with pandas), a :class:`Policy` and a :class:`LocalBudget` kept in a local file.
:meth:`Device.run` polls the server; for each task offered it checks the task against the policy (allowed
analyses, largest epsilon and delta per task, largest number of private bits per record, whether exact
non-private analyses are allowed) and the local budget, and refuses what is weaker than the policy allows;
for each round of a run it joined it runs the round's encoder **only if** that encoder is registered for
the task's analysis version in the installed registry (:func:`fedstats.wire.registry.resolve_encoder`),
sums its records' reports and uploads the sum and the count, signed. Network errors are retried with
exponential backoff and jitter; an upload is idempotent, so a retry is counted once.

Importing this package does not import SQLAlchemy, uvicorn, FastAPI or pandas.

Data columns: a CSV column ``name`` is a value per record; columns ``name[0]``, ``name[1]``, ... are
stacked into a 2-D column ``name`` (a vector per record, e.g. heterogeneity's ``x``).
"""

from __future__ import annotations

import json
import os
import re
import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fedstats.client.policy import LocalBudget, Policy, RefusedTask
from fedstats.client.secure import SecureRuns, SecureState
from fedstats.engine.rounds import ClientBatch, Round
from fedstats.errors import (
    DataError,
    FedstatsError,
    SecurityError,
)
from fedstats.randomness import RandomSource
from fedstats import wire
from fedstats.wire import auth
from fedstats.wire.enrollment import load_identity
from fedstats.wire.registry import resolve_encoder

__all__ = ["Device", "LocalBudget", "Policy", "RefusedTask", "load_data"]

_VECTOR = re.compile(r"^(.+)\[(\d+)\]$")


def load_data(path: Path | str) -> dict[str, np.ndarray]:
    """Read a device's data file (CSV or Parquet) into columns (see the module docstring).

    Raises
    ------
    DataError
        If the file cannot be read, is empty, or has an unknown extension.
    """
    import pandas as pd  # lazily: the SDK must import without pandas

    p = Path(path)
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            df = pd.read_parquet(p)
        elif p.suffix.lower() in (".csv", ".gz", ".txt"):
            df = pd.read_csv(p)
        else:
            raise DataError(f"data file {p} must be .csv or .parquet")
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read data file {p}: {exc}") from None
    if len(df) == 0:
        raise DataError(f"data file {p} has no rows")
    cols: dict[str, np.ndarray] = {}
    vectors: dict[str, dict[int, np.ndarray]] = {}
    for name in df.columns:
        m = _VECTOR.match(str(name))
        if m:
            vectors.setdefault(m.group(1), {})[int(m.group(2))] = df[name].to_numpy()
        else:
            cols[str(name)] = df[name].to_numpy()
    for name, parts in vectors.items():
        if sorted(parts) != list(range(len(parts))):
            raise DataError(
                f"vector column {name!r} needs columns {name}[0] .. {name}[{len(parts) - 1}]"
            )
        cols[name] = np.stack([parts[i] for i in range(len(parts))], axis=1).astype(np.float64)
    return cols


class Device(SecureRuns):
    """A client device talking to one server.

    Parameters
    ----------
    server : str
        Base URL, e.g. ``https://127.0.0.1:8443``.
    identity : path or dict
        Identity file (or its contents) from ``fedstats enroll client``.
    data : path or mapping
        Data file, or columns already in memory (one row per record).
    policy : Policy, optional
    budget : LocalBudget, optional
        Default: in memory, epsilon 10.
    ca : path, optional
        CA certificate to verify the server with (TLS); default the system store.
    randomness : RandomSource, optional
        The device's private randomness (default secure; seeded only for tests, not for release).
    timeout : float
        Per-request timeout, seconds.
    log : callable, optional
        Receives one line per event (refusals, uploads, retries).
    """

    def __init__(
        self,
        server: str,
        identity: Path | str | Mapping[str, Any],
        data: Path | str | Mapping[str, Any],
        *,
        policy: Policy | None = None,
        budget: LocalBudget | None = None,
        ca: Path | str | None = None,
        randomness: RandomSource | None = None,
        timeout: float = 30.0,
        log: Callable[[str], None] | None = None,
    ) -> None:
        ident = dict(identity) if isinstance(identity, Mapping) else load_identity(identity)
        self.client_id = str(ident["client_id"])
        self._key = auth.private_key_from_hex(ident["private_key"])
        self._cert = ident["certificate"]
        self.columns = (
            {k: np.asarray(v) for k, v in data.items()}
            if isinstance(data, Mapping)
            else load_data(data)
        )
        lengths = {int(v.shape[0]) for v in self.columns.values()}
        if len(lengths) != 1:
            raise DataError("every data column must have one entry per record")
        self.n_records = lengths.pop()
        self.policy = policy or Policy()
        self.budget = budget or LocalBudget(None)
        self.randomness = randomness or RandomSource()
        self.log = log or (lambda _line: None)
        self._timeout = float(timeout)
        self._http = httpx.Client(
            base_url=server.rstrip("/"),
            verify=ssl.create_default_context(cafile=str(ca)) if ca is not None else True,
            timeout=timeout,
        )
        self._work: dict[str, Any] = {"offers": [], "reveals": [], "rounds": [], "finished": []}
        self._etag: str | None = None  # the server's tag of the last work list handled in full
        self.refused: dict[str, str] = {}
        self.joined: dict[str, dict[str, int]] = {}
        self.reported: set[tuple[str, int]] = set()
        # secure runs: the pinned authority key, and each run's seed contribution and sessions
        self.authority_public_key: str | None = ident.get("authority_public_key")
        self.secure: dict[str, SecureState] = {}
        # certificates whose authority signature was checked (a session's roster), for later rounds
        self.verified_certificates: set[tuple[str, bytes]] = set()

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    # -- transport
    def _request(
        self,
        method: str,
        path: str,
        payload: Any = None,
        *,
        retries: int = 6,
        raw: bytes | None = None,
        binary: bool = False,
    ) -> Any:
        """Send a signed request (JSON ``payload`` or ``raw`` bytes); return its JSON or raw body."""
        body = raw if raw is not None else b"" if payload is None else json.dumps(payload).encode()
        kind = None if not body else "application/octet-stream" if raw else "application/json"
        r = self._send(method, path, body, content_type=kind, retries=retries)
        return r.content if binary else r.json()

    def _send(
        self,
        method: str,
        path: str,
        body: bytes,
        *,
        content_type: str | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        retries: int = 6,
    ) -> httpx.Response:
        """Send a signed request, retrying transport errors and 429/5xx with backoff; return a < 400 answer."""
        delay = 0.2
        for attempt in range(retries + 1):
            signed = auth.sign_request(self._key, self.client_id, method, path, body)
            if content_type is not None:
                signed["content-type"] = content_type
            signed.update(headers or {})
            try:
                r = self._http.request(
                    method,
                    path,
                    content=body,
                    headers=signed,
                    params=params,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                if attempt == retries:
                    raise
                self.log(f"retry {path} after {type(exc).__name__}")
            else:
                if r.status_code < 400:
                    return r
                # a request queued past the replay window (an overloaded server) is signed anew
                stale = r.status_code == 401 and "replay window" in r.text
                if (r.status_code not in (429, 502, 503, 504) and not stale) or attempt == retries:
                    raise _HTTPError(r.status_code, r.text)
                self.log(f"retry {path} after HTTP {r.status_code}")
            time.sleep(delay * (0.5 + self.randomness.generator("backoff").random()))
            delay = min(delay * 2.0, 5.0)
        raise AssertionError("unreachable")

    def register(self) -> None:
        """Present the enrollment certificate to the server (idempotent)."""
        self._request("POST", "/v1/client/register", {"certificate": self._cert})

    # -- one pass
    def step(self, wait: float = 0.0) -> dict[str, Any]:
        """Poll once: answer offers (check in or refuse) and rounds; return the server's work list.

        Parameters
        ----------
        wait : float
            Long polling: if the work list is still the one this device last handled in full, the server
            holds the poll up to this many seconds (it caps it, by default at 25) until the list changes;
            if it does not, nothing is done. 0 (default) answers at once.
        """
        headers = {"If-None-Match": self._etag} if self._etag else None
        r = self._send(
            "GET",
            "/v1/client/work",
            b"",
            params={"wait": f"{max(0.0, wait):.3f}"},
            headers=headers,
            timeout=self._timeout + max(0.0, wait),
        )
        if r.status_code == 304:  # nothing new since the last list, which was handled in full
            return self._work
        work: dict[str, Any] = r.json()
        self._handle(work, max(0.0, wait))
        # only now: a list whose handling failed part-way is fetched (and handled) again at once
        self._work, self._etag = work, r.headers.get("etag")
        return work

    def _handle(self, work: Mapping[str, Any], wait: float = 0.0) -> None:
        for offer in work["offers"]:
            rid = offer["run_id"]
            if rid in self.refused or rid in self.joined:
                continue
            task = wire.decode(offer["task"])
            try:
                self.policy.check(task)
                eps = task["privacy"]["epsilon"]
                if eps is not None:
                    self.budget.check(float(eps), float(task["privacy"].get("delta") or 0.0))
            except RefusedTask as exc:
                self.refused[rid] = str(exc)
                self.log(f"refused run {rid}: {exc}")
                continue
            body: dict[str, Any] = {"records": self.n_records}
            if task.get("secure_aggregation") is not None:
                if self.authority_public_key is None:
                    self.refused[rid] = "secure task, but no pinned authority key in the identity"
                    self.log(f"refused run {rid}: {self.refused[rid]}")
                    continue
                state = self.secure.setdefault(rid, SecureState(os.urandom(32), task=task))
                body["commitment"] = state.commitment(rid, self.client_id)
            try:
                self.joined[rid] = self._request("POST", f"/v1/client/runs/{rid}/checkin", body)
            except _HTTPError as exc:
                if exc.status != 409:
                    raise
                self.refused[rid] = "check-in closed"
        for item in work.get("reveals", []):
            rid = str(item["run_id"])
            if rid in self.refused:
                continue
            try:
                self._reveal(rid)
            except SecurityError as exc:  # the commitment list is not the run's: reveal nothing
                self.refused[rid] = str(exc)
                self.log(f"refused run {rid}: {exc}")
        for rnd in work["rounds"]:
            if rnd.get("secure") is not None:
                self._secure_stage(rnd, wait)
                continue
            key = (rnd["run_id"], int(rnd["round"]))
            if key in self.reported:
                continue
            self._answer(rnd)
            self.reported.add(key)

    def _answer(self, rnd: Mapping[str, Any]) -> None:
        run_id = str(rnd["run_id"])
        vector = self._encode(rnd)
        a, b = (int(x) for x in rnd["records"])
        self._request(
            "POST",
            f"/v1/client/runs/{run_id}/rounds/{int(rnd['round'])}/report",
            {"vector": vector, "count": b - a},
        )
        self.log(f"reported run {run_id} round {rnd['round']} ({b - a} records)")

    def _encode(self, rnd: Mapping[str, Any]) -> list[int]:
        """Run the round's registered encoder on this device's records; return the summed report."""
        run_id = str(rnd["run_id"])
        fn = resolve_encoder(str(rnd["encode"]), str(rnd["analysis"]), int(rnd["version"]))
        a, b = (int(x) for x in rnd["records"])
        first = a - int(rnd["slot_start"])
        cols = {k: v[first : first + (b - a)] for k, v in self.columns.items()}
        batch = ClientBatch(cols, start=a, total=int(rnd["n_clients"]))
        spec = Round(
            str(rnd["name"]),
            fn,
            wire.decode(rnd["params"]),
            dim=int(rnd["dim"]),
            bound=int(rnd["bound"]),
        )
        eps = rnd["privacy"]["epsilon"]
        if eps is not None:  # charge the local budget before anything leaves the device
            self.budget.charge(run_id, float(eps), float(rnd["privacy"].get("delta") or 0.0))
        rng = self.randomness.generator(run_id, int(rnd["round"]))
        reports = spec.encode_checked(batch, rng)
        return [int(x) for x in reports.sum(axis=0, dtype=object)]

    def run(
        self,
        *,
        poll: float = 0.5,
        wait: float = 20.0,
        until: Callable[[Device], bool] | None = None,
        max_seconds: float | None = None,
    ) -> None:
        """Register, then poll until ``until(self)`` or ``max_seconds`` elapse.

        Parameters
        ----------
        poll : float
            Seconds between two polls when ``wait`` is 0, and before a retry after a failed poll (> 0).
        wait : float
            Long polling (>= 0): each poll is held by the server up to this many seconds until there is
            something new, and the next one follows at once. 0: poll every ``poll`` seconds.
        until : callable, optional
            Stop once it returns True (checked after each poll).
        max_seconds : float, optional
            Stop after this long.
        """
        t0 = time.monotonic()
        registered = False
        while True:
            left = None if max_seconds is None else max_seconds - (time.monotonic() - t0)
            try:
                if not registered:
                    self.register()
                    registered = True
                work = self.step(wait if left is None else max(0.0, min(wait, left)))
            except (httpx.TransportError, _HTTPError) as exc:
                # a server restarting or overloaded: keep polling (a 4xx other than 409/429 is fatal)
                status = getattr(exc, "status", 503)
                if status < 500 and status not in (409, 429):
                    raise
                self.log(f"poll failed ({exc}); retrying")
                if max_seconds is not None and time.monotonic() - t0 > max_seconds:
                    return
                time.sleep(poll)
                continue
            done = {f["run_id"] for f in work.get("finished", [])}
            self.finished = done
            if until is not None and until(self):
                return
            if max_seconds is not None and time.monotonic() - t0 > max_seconds:
                return
            if wait <= 0:
                time.sleep(poll)


class _HTTPError(FedstatsError):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"server answered HTTP {status}: {text[:300]}")
        self.status = status
