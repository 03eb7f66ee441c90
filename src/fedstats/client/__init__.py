"""The fedstats client SDK: a device that answers an aggregation server's rounds with its own data.

A :class:`Device` holds an enrolled identity (:mod:`fedstats.wire.enrollment`, with the enrollment
authority's public key pinned), its data (a CSV or Parquet file, read lazily with pandas), a :class:`Policy`
and a :class:`LocalBudget` kept in a local file. :meth:`Device.run` polls the server. The device computes
only what it accepted; the server proposes, the device derives:

* **Signed tasks.** An offered task is accepted only through :func:`fedstats.wire.tasks.verify_task`: an
  analyst certificate chained to the pinned authority, for the device's population, and a valid signature
  over the task's canonical bytes (the server cannot create or alter a task). Then the task is checked
  against the policy (allowed analyses, the task's privacy loss against the largest epsilon and delta,
  private bits per record, non-private tasks) and the local budget, and the budget **reserves** the task's
  privacy loss (:func:`fedstats.wire.registry.privacy_loss_for`) before the device checks in.
* **Derived rounds.** For every round of a run it joined, the device replays the accepted task's plan
  itself (:func:`fedstats.wire.registry.plan_for` with the run's public seed, cohort size and the public
  sums of the earlier rounds, all carried by the round) and compares the round it derives with the one the
  server sent: name, encoder, canonical parameters, dim, bound, client range, and the records asked of it.
  A round that differs, a round beyond the plan, a round of a run whose task it did not accept (or whose
  task changed) is refused: the reason goes to :attr:`Device.refused`, nothing is uploaded, and an unspent
  reservation is given back. It encodes with **its own** derived round, and only with an encoder registered
  for the analysis in the installed registry (:func:`fedstats.wire.registry.resolve_encoder`); the
  reservation becomes a spend just before its data is first encoded.

Network errors are retried with exponential backoff and jitter; an upload is idempotent, so a retry is
counted once. The device talks TLS: a plain ``http://`` URL is refused unless the host is loopback.
The accepted tasks and the replays are kept in memory: a restarted device refuses the rounds of runs it
joined before (it is a dropout there); its budget file keeps their charges.

Importing this package does not import SQLAlchemy, uvicorn, FastAPI or pandas.

Data columns: a CSV column ``name`` is a value per record; columns ``name[0]``, ``name[1]``, ... are
stacked into a 2-D column ``name`` (a vector per record, e.g. heterogeneity's ``x``).
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import ssl
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fedstats import wire
from fedstats.client.policy import LocalBudget, Policy, RefusedTask, is_exact
from fedstats.client.secure import VERIFIED_CERTIFICATES, SecureRuns, SecureState
from fedstats.engine.rounds import ClientBatch, Round, RoundSum
from fedstats.errors import (
    BudgetExceededError,
    DataError,
    FedstatsError,
    ParameterError,
    SecurityError,
)
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.randomness import RandomSource
from fedstats.wire import auth
from fedstats.wire.enrollment import load_identity
from fedstats.wire.registry import encoder_name, plan_for, privacy_loss_for, resolve_encoder
from fedstats.wire.tasks import task_id as task_id_of
from fedstats.wire.tasks import verify_task

__all__ = [
    "ConnectionFailed",
    "Device",
    "LocalBudget",
    "Policy",
    "RefusedTask",
    "ca_context",
    "check_private_file",
    "check_server_url",
    "load_data",
]

KEEP_ALIVE_SECONDS = 55.0
"""How long a device keeps an idle connection to its server (the server keeps it 60 s)."""
_VECTOR = re.compile(r"^(.+)\[(\d+)\]$")
# what a work list says of a round besides the fields Device._derive checks: not part of its cache key
_UNCHECKED_ROUND_FIELDS = frozenset({"secure", "deadline"})

REGISTER_PATH = "/v1/client/register"
REQUEST_KEY_PATH = "/v1/client/request-key"


def check_server_url(server: str) -> str:
    """The server URL, if the device may talk to it: ``https://``, or ``http://`` to loopback only.

    Loopback: ``localhost``, 127.0.0.0/8 and ``::1``. Reports of non-secure runs travel in the clear over
    plain HTTP, so a device never sends them beyond its own machine.

    Raises
    ------
    SecurityError
        If the URL is ``http://`` to a host that is not loopback.
    ParameterError
        If the scheme is neither ``https`` nor ``http``, or the URL has no host.
    """
    url = httpx.URL(server)
    if url.scheme not in ("https", "http") or not url.host:
        raise ParameterError("server", server, "an https:// URL (http:// only to loopback)")
    if url.scheme == "http" and not _loopback(url.host):
        raise SecurityError(
            f"refusing plain http:// to {url.host}: use https:// (http:// is allowed only to "
            "loopback: localhost, 127.0.0.0/8, ::1)"
        )
    return server


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class _Accepted:
    """A run whose signed task this device accepted: the task, its id and its privacy loss."""

    task_id: str
    task: dict[str, Any]
    loss: PrivacyLoss
    analyst: str = (
        ""  # the name in the task's signed certificate (Policy.max_exact_runs_per_analyst)
    )


@dataclass
class _Replay:
    """The device's replay of a run's plan: the generator and the rounds derived so far (cached)."""

    key: tuple[int, str]  # (n_clients, public seed hex) it was built with
    gen: Generator[Round, RoundSum, Any]
    rounds: list[Round] = field(default_factory=list)
    sums: list[str] = field(default_factory=list)  # digests of the public sums sent into the plan
    params: list[str] = field(default_factory=list)  # digest of each derived round's params


# the canonical digest (wire.digest) of values the server sent, remembered by their JSON (sorted keys):
# every poll of a round lists the same ~20 kB of params and history, and every device of a process is
# sent the same ones; json.dumps in C is faithful to parsed JSON (1, 1.0 and true, -0.0 and 0.0, and
# every float's repr differ), so equal keys are equal values
_DIGESTS: dict[str, str] = {}
# the same for the device's own derived rounds' params (kept apart from what the server sent: a derived
# tuple and a sent list have one JSON): every device of a process derives the same rounds
_DERIVED_DIGESTS: dict[str, str] = {}


def _received_digest(value: Any, memo: dict[str, str] = _DIGESTS) -> str:
    """``wire.digest(value)`` of a parsed JSON value, remembered per process by its whole content."""
    try:
        key = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):  # not plain JSON (numpy values): digested each time
        return wire.digest(value)
    got = memo.get(key)
    if got is None:
        got = wire.digest(value)
        if len(memo) >= 256:
            memo.clear()
        memo[key] = got
    return got


_DECIMAL = re.compile(r"-?[0-9]{1,18}")  # a decimal integer that fits int64 (at most 18 digits)
_PLAIN_CSV_BYTES = 1 << 18  # above this pandas' parser, not Python's, is the cheaper way


def _integer_csv(p: Path) -> dict[str, np.ndarray] | None:
    """The columns of a plain CSV file of decimal integers, as ``int64``; None for any other file.

    pandas' ``read_csv`` gives the same columns for such a file (unique, non-empty names in the header, as
    many fields in every row, at least one row, every field a decimal integer of at most 18 digits), and
    importing pandas is a quarter of a device process's start-up: a ``fedstats client run`` reading a
    small table of category codes does without it. Anything else (floats, empty fields, blank lines,
    names with surrounding spaces, a byte-order mark, a file over 256 KiB) returns None: pandas reads it.
    """
    import csv

    try:
        if p.stat().st_size > _PLAIN_CSV_BYTES:
            return None
        with open(p, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if len(rows) < 2:
        return None
    header, body = rows[0], rows[1:]
    if (
        not header
        or len(set(header)) != len(header)
        or any(not name or name != name.strip() or name.startswith("\ufeff") for name in header)
    ):
        return None
    width = len(header)
    if any(len(row) != width for row in body):
        return None
    if not all(_DECIMAL.fullmatch(field) for row in body for field in row):
        return None
    values = np.array([[int(field) for field in row] for row in body], dtype=np.int64)
    return {name: values[:, j].copy() for j, name in enumerate(header)}


def load_data(path: Path | str) -> dict[str, np.ndarray]:
    """Read a device's data file (CSV or Parquet) into columns (see the module docstring).

    A ``.csv`` file of decimal integers only is read without pandas (:func:`_integer_csv`: the same
    ``int64`` columns); any other file with pandas.

    Raises
    ------
    DataError
        If the file cannot be read, is empty, or has an unknown extension.
    """
    p = Path(path)
    plain = _integer_csv(p) if p.suffix.lower() == ".csv" else None
    if plain is not None:
        return _columns(plain)
    import pandas as pd  # lazily: the SDK must import without pandas

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
    return _columns({str(name): df[name].to_numpy() for name in df.columns})


def _columns(table: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A file's columns by name, with ``name[0]``, ``name[1]``, ... stacked into a 2-D column ``name``."""
    cols: dict[str, np.ndarray] = {}
    vectors: dict[str, dict[int, np.ndarray]] = {}
    for name, column in table.items():
        m = _VECTOR.match(name)
        if m:
            vectors.setdefault(m.group(1), {})[int(m.group(2))] = column
        else:
            cols[name] = column
    for name, parts in vectors.items():
        if sorted(parts) != list(range(len(parts))):
            raise DataError(
                f"vector column {name!r} needs columns {name}[0] .. {name}[{len(parts) - 1}]"
            )
        cols[name] = np.stack([parts[i] for i in range(len(parts))], axis=1).astype(np.float64)
    return cols


def check_private_file(path: Path | str, name: str) -> None:
    """Refuse a file holding a private key that others on the machine can read (mode beyond 0600).

    Raises
    ------
    ParameterError
        Naming ``name``, if the file is group- or world-readable or writable (``chmod 600 FILE`` fixes
        it). A missing file is left to the reader's own error.
    """
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return
    if mode & 0o077:
        raise ParameterError(
            name,
            str(path),
            f"a private key file only its owner can read (mode {mode:04o}; run 'chmod 600 {path}')",
        )


def _check_key_matches(key: Any, cert: Any, path: Path | str) -> None:
    """Refuse an identity whose private key is not the one its certificate certifies."""
    body = cert.get("body", {}) if isinstance(cert, Mapping) else {}
    if auth.public_key_hex(key) != body.get("public_key"):
        raise ParameterError(
            "identity",
            str(path),
            "an identity whose private key matches its certificate (this key is not the certified "
            "one: re-enroll the device)",
        )


def ca_context(ca: Path | str, name: str = "ca") -> ssl.SSLContext:
    """A TLS context trusting the PEM CA certificate(s) in file ``ca`` (``--ca``).

    Parameters
    ----------
    ca : path
        A PEM file of one or more CA certificates.
    name : str
        The parameter named in the error.

    Raises
    ------
    ParameterError
        If ``ca`` cannot be read or holds no PEM certificate.
    """
    try:
        return ssl.create_default_context(cafile=str(ca))
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ParameterError(
            name, str(ca), f"a PEM CA certificate file ({getattr(exc, 'strerror', None) or exc})"
        ) from None


class Device(SecureRuns):
    """A client device talking to one server.

    Parameters
    ----------
    server : str
        Base URL, e.g. ``https://127.0.0.1:8443``; ``http://`` only to loopback (else
        :class:`~fedstats.errors.SecurityError`).
    identity : path or dict
        Identity file (or its contents) from ``fedstats enroll client``; its ``authority_public_key`` is
        the pinned key every accepted task must chain to.
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
        check_server_url(server)
        if isinstance(identity, Mapping):
            ident = dict(identity)
        else:
            check_private_file(identity, "identity")
            ident = load_identity(identity)
        self.client_id = str(ident["client_id"])
        self._key = auth.private_key_from_hex(ident["private_key"])
        self._cert = ident["certificate"]
        if not isinstance(identity, Mapping):
            _check_key_matches(self._key, self._cert, identity)
        verify = True if ca is None else ca_context(ca)
        # a request key (auth.open_request_key): (key id, 32-byte key, expires), opened after the device
        # is enrolled; until then, and whenever the server no longer accepts it, requests are signed
        self._request_key: tuple[str, bytes, float] | None = None
        self._next_key_try = 0.0  # monotonic time of the next attempt to open one
        self._key_opened_at = -math.inf  # monotonic time the current (or last) key was opened
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
            verify=verify,
            timeout=timeout,
            # one connection, kept between requests that are seconds apart (a secure stage's work):
            # each new one costs a TLS handshake on both sides
            limits=httpx.Limits(
                max_connections=100,
                max_keepalive_connections=20,
                keepalive_expiry=KEEP_ALIVE_SECONDS,
            ),
        )
        self._work: dict[str, Any] = {"offers": [], "reveals": [], "rounds": [], "finished": []}
        self._etag: str | None = None  # the server's tag of the last work list handled in full
        self.refused: dict[str, str] = {}
        self.joined: dict[str, dict[str, int]] = {}
        self.max_runs: int | None = None  # join no more runs than this (Device.run(runs=...))
        self.connected = False  # whether the server answered once (Device.run)
        # runs whose signed task this device accepted, and its cached replay of each run's plan
        self.accepted: dict[str, _Accepted] = {}
        self._replays: dict[str, _Replay] = {}
        # (run, round) -> (context, the round's checked fields, the derived round): see _derive
        self._derived: dict[tuple[str, Any], tuple[Any, dict[str, Any], Round]] = {}
        self.population = str((self._cert.get("body") or {}).get("population", ""))
        self.reported: set[tuple[str, int]] = set()
        # secure runs: the pinned authority key, and each run's seed contribution and sessions
        self.authority_public_key: str | None = ident.get("authority_public_key")
        self.secure: dict[str, SecureState] = {}
        # certificates whose authority signature was checked (a session's roster), for later rounds and
        # the other devices of this process (the whole verified content is the key)
        self.verified_certificates: set[tuple[str, str, bytes]] = VERIFIED_CERTIFICATES

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
        limit: int | None = None,
        content_type: str | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        retries: int = 6,
        keyed: bool = True,
    ) -> httpx.Response:
        """Send a signed request, retrying transport errors and 429/5xx with backoff; return a < 400 answer.

        With ``keyed`` (default) the request is authenticated with the device's request key when it has a
        valid one (:meth:`_refresh_request_key`), else signed with its Ed25519 key; a request whose key
        the server refuses is signed and sent again at once.

        With ``limit``, at most ``limit`` bytes of the answer are read (streamed): a longer answer, declared
        or not, is refused before parsing and the rest is not read.

        Raises
        ------
        SecurityError
            If the answer is longer than ``limit``.
        """
        delay = 0.2
        if keyed and path != REGISTER_PATH:
            self._refresh_request_key()
        for attempt in range(retries + 1):
            key = self._request_key if keyed else None
            if key is not None:
                signed = auth.sign_request_with_key(
                    key[0], key[1], self.client_id, method, path, body
                )
            else:
                signed = auth.sign_request(self._key, self.client_id, method, path, body)
            if content_type is not None:
                signed["content-type"] = content_type
            signed.update(headers or {})
            wait = timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT
            try:
                if limit is None:
                    r = self._http.request(
                        method, path, content=body, headers=signed, params=params, timeout=wait
                    )
                else:
                    r = self._read_capped(method, path, body, signed, params, wait, limit)
            except httpx.TransportError as exc:
                if attempt == retries:
                    raise
                self.log(f"retry {path} after {type(exc).__name__}")
            else:
                if r.status_code < 400:
                    return r
                text = r.content[:300].decode(errors="replace")
                if key is not None and r.status_code == 401 and "request key" in text:
                    # expired, or opened on another server process or before a restart: sign this
                    # request again with the device key (and open a new key at the next request)
                    self.log(f"request key refused ({text[:80]}); signing with the device key")
                    self._request_key = None
                    # a key refused within a minute of its opening (devices behind a balancer that
                    # spreads requests over server processes): no new one before that minute is over
                    self._next_key_try = self._key_opened_at + 60.0
                    return self._send(
                        method,
                        path,
                        body,
                        limit=limit,
                        content_type=content_type,
                        params=params,
                        headers=headers,
                        timeout=timeout,
                        retries=retries - attempt,
                        keyed=False,
                    )
                # a request queued past the replay window (an overloaded server) is signed anew
                stale = r.status_code == 401 and "replay window" in text
                if (r.status_code not in (429, 502, 503, 504) and not stale) or attempt == retries:
                    raise _HTTPError(r.status_code, r.text if limit is None else text)
                self.log(f"retry {path} after HTTP {r.status_code}")
            time.sleep(delay * (0.5 + self.randomness.generator("backoff").random()))
            delay = min(delay * 2.0, 5.0)
        raise AssertionError("unreachable")

    def _refresh_request_key(self) -> None:
        """Open a request key (``POST /v1/client/request-key``, signed) if none is valid for 2 more minutes.

        After a failed attempt, none for a minute: a server that refuses (an older server, a device not
        yet enrolled) leaves the requests signed, as they always may be. A key the server refuses within a
        minute of opening it is not replaced before that minute is over (:meth:`_send`).
        """
        key = self._request_key
        if key is not None and key[2] - 120.0 > time.time():
            return
        self._request_key = None
        now = time.monotonic()
        if now < self._next_key_try:
            return
        self._next_key_try = now + 60.0
        try:
            got = self._send("POST", REQUEST_KEY_PATH, b"", retries=0, keyed=False).json()
            raw = bytes.fromhex(str(got["key"]))
            if len(raw) != 32:
                raise ValueError("a request key is 32 bytes")
            self._request_key = (str(got["key_id"]), raw, float(got["expires"]))
            self._key_opened_at = now
            self._next_key_try = 0.0  # a successor is opened as soon as this one nears its expiry
        except (FedstatsError, httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self.log(
                f"no request key ({type(exc).__name__}: {str(exc)[:80]}); requests stay signed"
            )

    def _read_capped(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        params: Mapping[str, Any] | None,
        timeout: Any,
        limit: int,
    ) -> httpx.Response:
        """One streamed exchange reading at most ``limit`` bytes of the answer (see :meth:`_send`)."""
        with self._http.stream(
            method, path, content=body, headers=headers, params=params, timeout=timeout
        ) as r:
            declared = r.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise SecurityError(
                    f"the server's answer to {path} ({declared} bytes) exceeds the "
                    f"{limit} bytes this device reads for it"
                )
            parts, got = [], 0
            for chunk in r.iter_bytes():
                got += len(chunk)
                if got > limit:
                    raise SecurityError(
                        f"the server's answer to {path} exceeds the {limit} bytes this "
                        "device reads for it"
                    )
                parts.append(chunk)
            return httpx.Response(r.status_code, headers=r.headers, content=b"".join(parts))

    def register(self) -> None:
        """Present the enrollment certificate to the server (idempotent)."""
        self._request("POST", REGISTER_PATH, {"certificate": self._cert})
        self._next_key_try = 0.0  # enrolled: a request key can be opened now

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
            rid = str(offer["run_id"])
            if rid in self.refused or rid in self.joined:
                continue
            if self.max_runs is not None and len(self.joined) >= self.max_runs:
                break  # joined as many runs as asked: leave the others' slots to other devices
            try:
                acc = self._accept(offer)
            except (RefusedTask, SecurityError, ParameterError) as exc:  # invalid content too
                self._refuse(rid, str(exc))
                continue
            body: dict[str, Any] = {"records": self.n_records}
            if acc.task.get("secure_aggregation") is not None:
                state = self.secure.setdefault(rid, SecureState(os.urandom(32), task=acc.task))
                body["commitment"] = state.commitment(rid, self.client_id)
            # reserved before the device checks in: its data may be used from then on
            try:
                self.budget.reserve(rid, acc.loss)
            except BudgetExceededError as exc:
                self._refuse(rid, str(exc))
                continue
            if is_exact(acc.task):  # counted like a reservation: differencing needs consent
                self.budget.reserve_exact(rid, acc.task_id, acc.analyst)
            self.accepted[rid] = acc
            try:
                self.joined[rid] = self._request("POST", f"/v1/client/runs/{rid}/checkin", body)
            except _HTTPError as exc:
                if exc.status != 409:
                    raise
                self._refuse(rid, "check-in closed")
        for item in work.get("reveals", []):
            rid = str(item["run_id"])
            if rid in self.refused:
                continue
            if rid not in self.accepted:
                self._refuse(
                    rid, "seed reveal asked for a run whose task this device did not accept"
                )
                continue
            try:
                self._reveal(rid, wait)
            except SecurityError as exc:  # the commitment list is not the run's: reveal nothing
                self._refuse(rid, str(exc))
        for rnd in work["rounds"]:
            rid = str(rnd.get("run_id"))
            if rid in self.refused:
                continue
            key = (rid, int(rnd["round"]))
            if rnd.get("secure") is None and key in self.reported:
                continue
            try:
                self._derive(rnd)  # before anything of the device's data is used
            except SecurityError as exc:
                self._refuse(rid, str(exc))
                continue
            if rnd.get("secure") is not None:
                self._secure_stage(rnd, wait)
                continue
            try:
                self._answer(rnd)
            except BudgetExceededError as exc:  # its reservation was given back and no longer fits
                self._refuse(rid, str(exc))
                continue
            self.reported.add(key)
        for fin in work.get("finished", []):
            rid = str(fin.get("run_id"))
            self._note_finished(rid, str(fin.get("status")))
            # a run that ended before this device encoded anything for it: its reservation comes back
            if self.budget.release(rid):
                self.log(f"run {rid} ended ({fin.get('status')}) before this device took part")

    def _note_finished(self, run_id: str, status: str) -> None:
        """Count a secure run that aborted after this device revealed (``Policy.max_aborted_runs``)."""
        state, acc = self.secure.get(run_id), self.accepted.get(run_id)
        if status == "aborted" and state is not None and state.seen is not None and acc is not None:
            self.budget.note_aborted(acc.task_id, run_id)

    def _refuse(self, run_id: str, reason: str) -> None:
        """Refuse a run: remember why, log it, and give back its reservation if nothing was spent."""
        self.refused[run_id] = reason
        self.budget.release(run_id)
        self._replays.pop(run_id, None)
        for key in [k for k in self._derived if k[0] == run_id]:
            del self._derived[key]
        self.log(f"refused run {run_id}: {reason}")

    def _accept(self, offer: Mapping[str, Any]) -> _Accepted:
        """Verify an offered task's signature, then check it against the policy and the budget.

        Raises
        ------
        SecurityError
            If the task is unsigned, altered, signed under a certificate the pinned authority did not
            issue for this device's population, or its id is not the one offered.
        RefusedTask
            If the policy or the local budget refuses it.
        """
        if self.authority_public_key is None:
            raise SecurityError("no pinned authority key in the identity: no task can be verified")
        task = verify_task(offer.get("envelope"), self.authority_public_key, self.population)
        tid = task_id_of(task)
        if str(offer.get("task_id")) != tid:
            raise SecurityError("the offered task id is not the digest of the signed task")
        self.policy.check(task)
        analyst = str(offer["envelope"]["certificate"]["body"]["analyst"])  # verified with the task
        self.policy.check_history(task, tid, analyst, self.budget, str(offer["run_id"]))
        loss = privacy_loss_for(task)
        if (
            self.budget.status(str(offer["run_id"])) is None
        ):  # not already reserved (a retried check-in)
            self.budget.check(loss)
        return _Accepted(tid, task, loss, analyst)

    def _derive(self, rnd: Mapping[str, Any]) -> Round:
        """Derive the round ``rnd`` proposes from the accepted task; refuse (raise) if they differ.

        Replays the accepted task's plan (cached per run) with the round's stated cohort size, public seed
        and the public sums of the earlier rounds, and compares the derived round with the proposed one.

        Raises
        ------
        SecurityError
            If the run's task was not accepted or changed, the round is beyond the plan, any field differs
            from the derived round, or the records asked of the device are not its own slots in the
            derived client range.
        """
        rid = str(rnd["run_id"])
        acc = self.accepted.get(rid)
        if acc is None or rid not in self.joined:
            raise SecurityError(f"a round of run {rid}, whose task this device did not accept")
        # a round listed again (every poll and stage lists it) is checked once: the same fields (equal
        # as parsed JSON, compared in C) and the same verified seed and cohort give the same answer
        state = self.secure.get(rid)
        context = (
            acc.task_id,
            getattr(state, "seed", None),
            getattr(state, "cohort", None) is not None,
        )
        fields = {k: v for k, v in rnd.items() if k not in _UNCHECKED_ROUND_FIELDS}
        key = (rid, fields.get("round"))
        hit = self._derived.get(key)
        if hit is not None and hit[0] == context and hit[1] == fields:
            return hit[2]
        try:
            derived = self._derive_checked(rnd, rid, acc)
        except SecurityError:
            raise
        except (FedstatsError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise SecurityError(f"malformed round: {type(exc).__name__}: {exc}") from None
        if len(self._derived) > 64:
            self._derived.clear()
        self._derived[key] = (context, fields, derived)
        return derived

    def _derive_checked(self, rnd: Mapping[str, Any], rid: str, acc: _Accepted) -> Round:
        task = acc.task
        if str(rnd["task_id"]) != acc.task_id:
            raise SecurityError("the run's task changed after this device accepted it")
        if (str(rnd["analysis"]), int(rnd["version"])) != (task["analysis"], task["version"]):
            raise SecurityError("the round names another analysis than the accepted task")
        if _received_digest(rnd["privacy"]) != wire.digest(task["privacy"]):
            raise SecurityError("the round's privacy parameters are not the accepted task's")
        index = int(rnd["round"])
        n = int(rnd["n_clients"])
        seed = str(rnd["public_seed"])
        if len(seed) != 64 or len(bytes.fromhex(seed)) != 32:
            raise SecurityError("the run's public seed is not 32 bytes")
        mine = self.joined[rid]
        start, count = int(mine["slot_start"]), int(mine["slot_count"])
        # n counts records: at least one per device, at most max_records_per_client per device
        most = int(task["cohort_size"]) * int(task.get("max_records_per_client", 1))
        if not (int(task["min_clients"]) <= n <= most and start + count <= n):
            raise SecurityError(
                f"cohort size {n} is impossible for this task and this device's slots"
            )
        state = self.secure.get(rid)
        if task.get("secure_aggregation") is not None:
            cohort = getattr(
                state, "cohort", None
            )  # the verified cohort, once the seed is verified
            if cohort is not None:
                if n != sum(int(c[2]) for c in cohort):
                    raise SecurityError("the cohort size is not the verified cohort's")
                if (self.client_id, start, count) not in [
                    (str(c[0]), int(c[1]), int(c[2])) for c in cohort
                ]:
                    raise SecurityError(
                        "this device's slots are not its slots in the verified cohort"
                    )
            if state is not None and state.seed is not None and state.seed.hex() != seed:
                raise SecurityError("the round's public seed is not the run's verified seed")
        derived = self._replay(rid, acc, index, n, seed, rnd["history"])
        lo, hi = derived.client_range if derived.client_range is not None else (0, n)
        proposed = {
            "name": str(rnd["name"]),
            "encode": str(rnd["encode"]),
            "params": _received_digest(rnd["params"]),
            "dim": int(rnd["dim"]),
            "bound": int(rnd["bound"]),
            "client_range": [int(x) for x in rnd["client_range"]],
        }
        own = {
            "name": derived.name,
            "encode": encoder_name(derived.encode),
            "params": self._replays[rid].params[index],
            "dim": int(derived.dim),
            "bound": int(derived.bound),
            "client_range": [int(lo), int(hi)],
        }
        for k, v in own.items():
            if proposed[k] != v:
                raise SecurityError(
                    f"round {index} differs from the task's plan in its {k} "
                    f"(derived {str(v)[:80]}, proposed {str(proposed[k])[:80]})"
                )
        a, b = max(start, lo), max(max(start, lo), min(start + count, hi))
        if [int(x) for x in rnd["records"]] != [a, b] or int(rnd["slot_start"]) != start or b <= a:
            raise SecurityError(
                f"round {index} asks for records {rnd['records']}; this device's are [{a}, {b})"
            )
        return derived

    def _replay(
        self, rid: str, acc: _Accepted, index: int, n: int, seed: str, history: Any
    ) -> Round:
        """Round ``index`` of the run's plan, replayed with the stated public sums (cached per run)."""
        if not isinstance(history, list) or len(history) != index:
            raise SecurityError(f"round {index} must come with the {index} earlier public sums")
        rep = self._replays.get(rid)
        if rep is not None and rep.key != (n, seed):
            raise SecurityError("the run's cohort size or public seed changed between rounds")
        if rep is None:
            gen = plan_for(acc.task, n_clients=n, public_seed=bytes.fromhex(seed))
            rep = _Replay((n, seed), gen, [next(gen)])
            self._replays[rid] = rep
        sums = [_received_digest(h) for h in history]
        if sums[: len(rep.sums)] != rep.sums[: len(sums)]:
            raise SecurityError("the public sums of earlier rounds changed")
        while len(rep.rounds) <= index:
            h = history[len(rep.rounds) - 1]
            total = np.asarray(wire.decode(h["total"]))
            try:
                nxt = rep.gen.send(RoundSum(total, int(h["n_clients"])))
            except StopIteration:
                raise SecurityError(
                    f"round {index} is beyond the task's plan ({len(rep.rounds)} round(s))"
                ) from None
            rep.sums.append(sums[len(rep.rounds) - 1])
            rep.rounds.append(nxt)
        while len(rep.params) < len(rep.rounds):  # each derived round's params digested once
            derived = dict(rep.rounds[len(rep.params)].params)
            rep.params.append(_received_digest(derived, _DERIVED_DIGESTS))
        return rep.rounds[index]

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
        """Run this device's own derived round on its records; return the summed report.

        The round is derived from the accepted task (:meth:`_derive`), never taken from the server; its
        encoder must be registered for the analysis in the installed registry. The run's reservation
        becomes a spend before the data is encoded.
        """
        run_id = str(rnd["run_id"])
        derived = self._derive(rnd)
        acc = self.accepted[run_id]
        state = self.secure.get(run_id)
        if state is not None and state.seed is not None and state.seed.hex() != rnd["public_seed"]:
            raise SecurityError("the round's public seed is not the run's verified seed")
        fn = resolve_encoder(
            encoder_name(derived.encode), acc.task["analysis"], int(acc.task["version"])
        )
        spec = Round(derived.name, fn, derived.params, dim=derived.dim, bound=derived.bound)
        # the reservation becomes a spend before anything is computed from the data
        self.budget.spend(run_id, acc.loss)
        return self._report(rnd, spec)

    def _report(self, rnd: Mapping[str, Any], spec: Round) -> list[int]:
        """Encode the records ``rnd["records"]`` with ``spec``; return their summed report.

        No check here: :meth:`_encode` derives ``spec`` and checks the records first. The randomness is
        keyed by (run, round), so the same data and seed give the same report (tests rebuild a device's
        reports with it).
        """
        run_id = str(rnd["run_id"])
        a, b = (int(x) for x in rnd["records"])
        first = a - int(rnd["slot_start"])
        cols = {k: v[first : first + (b - a)] for k, v in self.columns.items()}
        batch = ClientBatch(cols, start=a, total=int(rnd["n_clients"]))
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
        runs: int | None = None,
        connect_timeout: float = 30.0,
    ) -> None:
        """Register, then poll until ``until(self)``, ``runs`` runs finished, or ``max_seconds`` elapse.

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
        runs : int, optional
            Join exactly this many runs (>= 1; later offers are left alone) and stop once they all
            finished (done or aborted).
        connect_timeout : float
            How long to keep trying to reach a server that refuses connections before the first answer
            (> 0). A TLS failure or an unknown host fails at once.

        Raises
        ------
        ConnectionFailed
            If the server never answered: TLS failure, unknown host, or connections refused for
            ``connect_timeout`` seconds (or until ``max_seconds``).
        ParameterError
            If ``runs`` < 1 or ``connect_timeout`` <= 0.
        """
        if runs is not None and runs < 1:
            raise ParameterError("runs", runs, "an integer >= 1")
        if not connect_timeout > 0:
            raise ParameterError("connect_timeout", connect_timeout, "a number of seconds > 0")
        self.max_runs = runs
        t0 = time.monotonic()
        registered = False
        while True:
            left = None if max_seconds is None else max_seconds - (time.monotonic() - t0)
            if not self.connected:
                self._probe(t0, poll, connect_timeout, max_seconds)
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
            if runs is not None and len(self.joined) >= runs and set(self.joined) <= done:
                return
            if until is not None and until(self):
                return
            if max_seconds is not None and time.monotonic() - t0 > max_seconds:
                return
            if wait <= 0:
                time.sleep(poll)

    def _probe(
        self, t0: float, poll: float, connect_timeout: float, max_seconds: float | None
    ) -> None:
        """Reach the server once (``GET /healthz``, unsigned); raise :class:`ConnectionFailed` if not."""
        while True:
            try:
                self._http.get("/healthz")
            except httpx.TransportError as exc:
                reason, permanent = _connect_failure(exc, str(self._http.base_url))
                waited = time.monotonic() - t0
                out_of_time = max_seconds is not None and waited > max_seconds
                if permanent or waited > connect_timeout or out_of_time:
                    raise ConnectionFailed(reason) from None
                self.log(f"{reason}; retrying")
                time.sleep(poll)
                continue
            self.connected = True
            return


class ConnectionFailed(FedstatsError):
    """The device never reached its server (TLS failure, unknown host, connection refused)."""


def _connect_failure(exc: BaseException, url: str) -> tuple[str, bool]:
    """A one-line reason for a failed connection, and whether retrying cannot help."""
    import socket

    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and len(chain) < 10:
        chain.append(e)
        e = e.__cause__ or e.__context__
    text = " ".join(str(x) for x in chain)
    if any(isinstance(x, ssl.SSLError) for x in chain) or "SSL" in text or "CERTIFICATE" in text:
        detail = (
            "certificate not trusted (pass the server's CA with --ca)"
            if ("CERTIFICATE_VERIFY_FAILED" in text)
            else text.split("\n")[0][:200]
        )
        return f"cannot connect to {url}: TLS failure: {detail}", True
    if any(isinstance(x, socket.gaierror) for x in chain) or "Name or service not known" in text:
        return f"cannot connect to {url}: unknown host", True
    if any(isinstance(x, ConnectionRefusedError) for x in chain) or "refused" in text.lower():
        return f"cannot connect to {url}: connection refused (is the server running?)", False
    return f"cannot connect to {url}: {type(exc).__name__}: {str(exc)[:200]}", False


class _HTTPError(FedstatsError):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"server answered HTTP {status}: {text[:300]}")
        self.status = status
