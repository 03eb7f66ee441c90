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
joined before (it is a dropout there, and tells the server so); its budget file keeps their charges, and
``run(runs=N)`` counts those runs (:class:`fedstats.client.refusals.Rejoined`).

**Refusals are told.** A device that refuses an offered task, a round or a run sends the server a signed
refusal with a reason code (:data:`fedstats.wire.refusals.REASONS`) and its message
(:mod:`fedstats.client.refusals`); the operator reads them per run.

**Data, per run.** The data file is read at start and read again before each run the device accepts if
it changed since (:class:`fedstats.client.data.DeviceData`): a fixed file is picked up at the next run,
without a restart. Before checking in, the device encodes the task's first round on its first records
(:func:`fedstats.client.data.check_data`; nothing is sent or charged), so data that cannot fit the task is
refused (``data_invalid``, naming the column) before the run counts on it.

Importing this package does not import SQLAlchemy, uvicorn, FastAPI or pandas.

Data columns: see :mod:`fedstats.client.data`.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fedstats.client.checks import (
    ConnectionFailed,
    _check_key_matches,
    ca_context,
    check_private_file,
    check_server_url,
    default_context,
)
from fedstats.client.checks import (
    _connect_failure as _connect_failure,
)
from fedstats.client.data import DeviceData, check_data, column_sums, load_data
from fedstats.client.data import _integer_csv as _integer_csv
from fedstats.client.derive import Derivation, _Accepted, _Replay
from fedstats.client.derive import _received_digest as _received_digest
from fedstats.client.policy import LocalBudget, Policy, RefusedTask, is_exact
from fedstats.client.polling import PollClock
from fedstats.client.refusals import RESTARTED, Refusals, Rejoined, refusal_code
from fedstats.client.secure import VERIFIED_CERTIFICATES, SecureRuns, SecureState
from fedstats.client.transport import DeviceHTTP, read_capped
from fedstats.engine.rounds import ClientBatch, Round
from fedstats.errors import (
    BudgetExceededError,
    DataError,
    FedstatsError,
    ParameterError,
    SecurityError,
)
from fedstats.randomness import RandomSource
from fedstats.wire import auth
from fedstats.wire.enrollment import load_identity
from fedstats.wire.registry import encoder_name, privacy_loss_for, resolve_encoder
from fedstats.wire.tasks import task_id as task_id_of
from fedstats.wire.tasks import verify_task

__all__ = [
    "ConnectionFailed",
    "Device",
    "DeviceData",
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
# what a work list says of a round besides the fields Device._derive checks: not part of its cache key

REGISTER_PATH = "/v1/client/register"
WORK_PATH = "/v1/client/work"
REQUEST_KEY_PATH = "/v1/client/request-key"
# statuses a request is sent again after (with backoff): the server timed its headers out, throttled it,
# or its gateway or the server was overloaded or restarting
_RETRIED = frozenset({408, 429, 502, 503, 504})


class Device(SecureRuns, Derivation, Refusals):
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
        Data file (read again before a run when it changed), or columns already in memory (one row
        per record).
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
        verify = default_context() if ca is None else ca_context(ca)
        # a request key (auth.open_request_key): (key id, 32-byte key, expires), opened after the device
        # is enrolled; until then, and whenever the server no longer accepts it, requests are signed
        self._request_key: tuple[str, bytes, float] | None = None
        self._next_key_try = 0.0  # monotonic time of the next attempt to open one
        self._key_opened_at = -math.inf  # monotonic time the current (or last) key was opened
        self.data = DeviceData(data)
        # the columns each accepted run uses (as read when it was accepted)
        self._run_columns: dict[str, dict[str, np.ndarray]] = {}
        self.policy = policy or Policy()
        self.budget = budget or LocalBudget(None)
        self.randomness = randomness or RandomSource()
        self.log = log or (lambda _line: None)
        self._timeout = float(timeout)
        self._http = DeviceHTTP(
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
        # the next work list (and its tag), carried by a held last stage's answer (SecureRuns)
        self._carried: tuple[dict[str, Any], str | None] | None = None
        self.refused: dict[str, str] = {}
        self.joined: dict[str, dict[str, int]] = {}
        self.rejoined = Rejoined()  # runs it was in before a restart (Device.run(runs=...))
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

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """The device's data columns, as last read (:class:`~fedstats.client.data.DeviceData`)."""
        return self.data.columns

    @property
    def n_records(self) -> int:
        """Records in :attr:`columns`."""
        return self.data.n_records

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
        """Send a signed request, retrying transport errors, 408, 429 and 502-504 with backoff; return a < 400 answer.

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
        # a work poll asks for the request key in its answer (auth.HEADER_OPEN_KEY), no request apart
        inline = keyed and method == "GET" and path == WORK_PATH
        ask = keyed and path != REGISTER_PATH and self._refresh_request_key(inline)
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
            if ask and key is None:
                signed[auth.HEADER_OPEN_KEY] = "1"
            signed.update(headers or {})
            wait = timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT
            try:
                if limit is None:
                    r = self._http.request(
                        method, path, content=body, headers=signed, params=params, timeout=wait
                    )
                else:
                    r = read_capped(self._http, method, path, body, signed, params, wait, limit)
            except httpx.TransportError as exc:
                if attempt == retries:
                    raise
                self.log(f"retry {path} after {type(exc).__name__}")
            else:
                if r.status_code < 400:
                    if ask and key is None:
                        self._take_request_key(r)
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
                # a request queued past the replay window (an overloaded server) is signed anew; 408:
                # the server timed the headers out (RFC 9110 15.5.9: the request may be repeated), as
                # when a device short of CPU is slow to write them
                stale = r.status_code == 401 and "replay window" in text
                if (r.status_code not in _RETRIED and not stale) or attempt == retries:
                    raise _HTTPError(r.status_code, r.text if limit is None else text)
                self.log(f"retry {path} after HTTP {r.status_code}")
            time.sleep(delay * (0.5 + self.randomness.generator("backoff").random()))
            delay = min(delay * 2.0, 5.0)
        raise AssertionError("unreachable")

    def _refresh_request_key(self, inline: bool = False) -> bool:
        """Open a request key (``POST /v1/client/request-key``, signed) if none is valid for 2 more minutes.

        After a failed attempt, none for a minute: a server that refuses (an older server, a device not
        yet enrolled) leaves the requests signed, as they always may be. A key the server refuses within a
        minute of opening it is not replaced before that minute is over (:meth:`_send`).

        With ``inline`` (the request about to be sent is a work poll) no request is sent: True says
        that the poll is to ask for the key in its answer (:meth:`_take_request_key`).
        """
        key = self._request_key
        if key is not None and key[2] - 120.0 > time.time():
            return False
        self._request_key = None
        now = time.monotonic()
        if now < self._next_key_try:
            return False
        self._next_key_try = now + 60.0
        if inline:
            return True
        try:
            self._keep_request_key(
                self._send("POST", REQUEST_KEY_PATH, b"", retries=0, keyed=False).json(), now
            )
        except (FedstatsError, httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self.log(
                f"no request key ({type(exc).__name__}: {str(exc)[:80]}); requests stay signed"
            )
        return False

    def _keep_request_key(self, got: Any, opened_at: float) -> None:
        """Keep the key ``{"key_id", "key", "expires"}`` opened at monotonic time ``opened_at``.

        Raises
        ------
        ValueError, KeyError, TypeError
            If ``got`` is not such a key (32 bytes in hex).
        """
        raw = bytes.fromhex(str(got["key"]))
        if len(raw) != 32:
            raise ValueError("a request key is 32 bytes")
        self._request_key = (str(got["key_id"]), raw, float(got["expires"]))
        self._key_opened_at = opened_at
        self._next_key_try = 0.0  # a successor is opened as soon as this one nears its expiry

    def _take_request_key(self, r: httpx.Response) -> None:
        """Keep the request key a work poll's answer carries; without one, open it by its own request.

        A server that answers none (an older one) gets ``POST /v1/client/request-key`` at once, as
        before: the device pays the request it would have paid.
        """
        text = r.headers.get(auth.HEADER_OPEN_KEY)
        try:
            if text is None:
                raise KeyError("no key in the answer")
            self._keep_request_key(json.loads(text), time.monotonic())
        except (ValueError, KeyError, TypeError):
            self._next_key_try = 0.0
            self._refresh_request_key()

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
        carried, self._carried = self._carried, None
        if carried is not None:  # a held last stage's answer carried the next list: no poll
            self._handle(carried[0], max(0.0, wait))
            self._work, self._etag = carried
            return carried[0]
        headers = {"If-None-Match": self._etag} if self._etag else None
        r = self._send(
            "GET",
            WORK_PATH,
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
        done = self.joined.keys() | self.refused.keys()
        offers = [o for o in work["offers"] if str(o["run_id"]) not in done]
        # a check-in is held (until check-in closes) only when nothing else of the list waits on it
        alone = not work.get("reveals") and not work["rounds"]
        for offer in offers:
            rid = str(offer["run_id"])
            if rid in self.refused:
                continue
            if self.max_runs is not None and len(self._mine()) >= self.max_runs:
                break  # joined as many runs as asked: leave the others' slots to other devices
            try:
                self.data.refresh()  # a changed file is read again before the run is accepted
                acc = self._accept(offer)
            except (RefusedTask, SecurityError, ParameterError, DataError) as exc:  # content too
                self._refuse(rid, str(exc), refusal_code(exc, "offer"))
                continue
            columns = self.data.columns  # this run's records, whatever the file does later
            body: dict[str, Any] = {"records": self.data.n_records}
            if acc.task.get("secure_aggregation") is not None:
                state = self.secure.setdefault(rid, SecureState(os.urandom(32), task=acc.task))
                body["commitment"] = state.commitment(rid, self.client_id)
            # reserved before the device checks in: its data may be used from then on
            try:
                self.budget.reserve(rid, acc.loss)
            except BudgetExceededError as exc:
                self._refuse(rid, str(exc), "budget_exhausted")
                continue
            if is_exact(acc.task):  # counted like a reservation: differencing needs consent
                self.budget.reserve_exact(rid, acc.task_id, acc.analyst)
            self.accepted[rid] = acc
            self._run_columns[rid] = columns
            try:
                if "commitment" in body and wait > 0 and alone and offer is offers[-1]:
                    self._secure_checkin(rid, body, self.secure[rid], wait)
                else:
                    self.joined[rid] = self._request("POST", f"/v1/client/runs/{rid}/checkin", body)
            except _HTTPError as exc:
                if exc.status != 409:
                    raise
                self._refuse(rid, "check-in closed", None)  # the server knows: nothing to tell
        for item in work.get("reveals", []):
            rid = str(item["run_id"])
            if rid in self.refused:
                continue
            if rid not in self.accepted:
                self._not_accepted(rid, "seed reveal asked for a run")
                continue
            try:
                self._reveal(rid, wait)
            except SecurityError as exc:  # the commitment list is not the run's: reveal nothing
                self._refuse(rid, str(exc), "round_mismatch")
        for rnd in work["rounds"]:
            rid = str(rnd.get("run_id"))
            if rid in self.refused:
                continue
            key = (rid, int(rnd["round"]))
            if rnd.get("secure") is None and key in self.reported:
                continue
            if rid not in self.joined:
                self._not_accepted(rid, f"a round of run {rid}")
                continue
            try:
                self._derive(rnd)  # before anything of the device's data is used
            except SecurityError as exc:
                self._refuse(rid, str(exc), "round_mismatch")
                continue
            if rnd.get("secure") is not None:
                self._secure_stage(rnd, wait)
                continue
            try:
                self._answer(rnd)
            except BudgetExceededError as exc:  # its reservation was given back and no longer fits
                self._refuse(rid, str(exc), "budget_exhausted")
                continue
            except DataError:  # refused (and told) by _encode
                continue
            self.reported.add(key)
        self.rejoined.note_finished(work.get("finished", []), self.joined, self.budget.status)
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

    def _refuse(self, run_id: str, reason: str, code: str | None = "other") -> None:
        """Refuse a run: remember why, log it, give back an unspent reservation, tell the server.

        ``code``: the reason code told (:data:`fedstats.wire.refusals.REASONS`); None tells nothing.
        """
        self.refused[run_id] = reason
        self.budget.release(run_id)
        self._replays.pop(run_id, None)
        self._run_columns.pop(run_id, None)
        for key in [k for k in self._derived if k[0] == run_id]:
            del self._derived[key]
        self.log(f"refused run {run_id}: {reason}")
        if code is not None:
            self.tell_refusal(run_id, code, reason)

    def _not_accepted(self, rid: str, what: str) -> None:
        """Refuse work of a run this device did not accept in this process.

        If its budget file holds the run's charge the device was in the run before it restarted: the
        run counts as one of its own (``run(runs=...)``) and the refusal says so; else the server
        listed a run the device never accepted.
        """
        if self.budget.status(rid) is not None:
            self.rejoined.runs.add(rid)
            self._refuse(rid, RESTARTED, "restarted")
        else:
            self._refuse(rid, f"{what}, whose task this device did not accept", "round_mismatch")

    def _mine(self) -> set[str]:
        """The runs this device counts as its own: joined here, or found after a restart."""
        return set(self.joined) | self.rejoined.runs

    def _accept(self, offer: Mapping[str, Any]) -> _Accepted:
        """Verify an offered task's signature, then check it against the policy and the budget.

        Raises
        ------
        SecurityError
            If the task is unsigned, altered, signed under a certificate the pinned authority did not
            issue for this device's population, or its id is not the one offered.
        RefusedTask
            If the policy or the local budget refuses it.
        DataError
            If the device's data cannot be encoded for the task's first round
            (:func:`~fedstats.client.data.check_data`).
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
        # the data fits the task's first round (nothing sent, nothing charged), else data_invalid
        rng = self.randomness.generator("data-check", str(offer["run_id"]))
        check_data(task, self.data.columns, self.data.n_records, rng)
        return _Accepted(tid, task, loss, analyst)

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
        first = self.budget.status(run_id) == "reserved"
        self.budget.spend(run_id, acc.loss)
        try:
            return self._report(rnd, spec)
        except DataError as exc:  # nothing was sent: a first spend goes back to a reservation
            if first:
                self.budget.unspend(run_id)
            self._refuse(run_id, str(exc), "data_invalid")
            raise

    def _report(self, rnd: Mapping[str, Any], spec: Round) -> list[int]:
        """Encode the records ``rnd["records"]`` with ``spec``; return their summed report.

        No check here: :meth:`_encode` derives ``spec`` and checks the records first. The randomness is
        keyed by (run, round), so the same data and seed give the same report (tests rebuild a device's
        reports with it).
        """
        run_id = str(rnd["run_id"])
        a, b = (int(x) for x in rnd["records"])
        first = a - int(rnd["slot_start"])
        columns = self._run_columns.get(run_id, self.data.columns)
        cols = {k: v[first : first + (b - a)] for k, v in columns.items()}
        batch = ClientBatch(cols, start=a, total=int(rnd["n_clients"]))
        rng = self.randomness.generator(run_id, int(rnd["round"]))
        return column_sums(spec.encode_checked(batch, rng))

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
            finished (done or aborted). A run the device was in before it restarted counts (it finds
            it in the work list: :class:`~fedstats.client.refusals.Rejoined`).
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
        clock = PollClock(max_seconds)
        registered = False
        while True:
            hold = clock.hold(wait)
            if not self.connected:
                self._probe(clock.t0, poll, connect_timeout, max_seconds)
            try:
                if not registered:
                    self.register()
                    registered = True
                work = self.step(hold)
            except (httpx.TransportError, _HTTPError) as exc:
                # a server restarting or overloaded: keep polling (a 4xx other than 408/409/429 is
                # fatal; 408: the server timed the request's headers out, e.g. a device short of CPU)
                status = getattr(exc, "status", 503)
                if status < 500 and status not in (408, 409, 429):
                    raise
                self.log(f"poll failed ({exc}); retrying")
                if not clock.retry(poll):
                    return
                continue
            done = {f["run_id"] for f in work.get("finished", [])}
            self.finished = done
            mine = self._mine()
            all_done = runs is not None and len(mine) >= runs and mine <= done
            if clock.done(all_done or (until is not None and until(self)), wait=wait, poll=poll):
                return

    def _probe(
        self, t0: float, poll: float, connect_timeout: float, max_seconds: float | None
    ) -> None:
        """Reach the server once (``GET /livez``, unsigned); raise :class:`ConnectionFailed` if not.

        ``/livez`` answers without touching the server's store (``/healthz`` probes it with a write):
        this probe asks only whether the server is reachable and its TLS holds.
        """
        while True:
            try:
                self._http.get("/livez")
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


class _HTTPError(FedstatsError):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"server answered HTTP {status}: {text[:300]}")
        self.status = status
