"""The device and collector sides of the two-aggregator mode (Prio3; ``docs/vdaf.md``).

A device shards its measurement with Prio3 (:meth:`fedstats.vdaf.Prio3.shard`) and uploads the leader's
input share to the leader, then the helper's to the helper with the leader's receipt of the report, each
in a request signed with its enrolled key (:func:`fedstats.wire.auth.sign_request`), over TLS to each
server; neither aggregator alone learns anything about the measurement. The collector (the operator or analyst) asks both aggregators for their aggregate
shares and combines them (:func:`collect`).

:class:`Prio3Device` is the device of a **signed** Prio3 task (:mod:`fedstats.analyses._prio3_tasks`): it
verifies the analyst's envelope, checks its policy and budget, and derives every round (encoder, Prio3
variant and parameters, round task id, client range) from the task itself; it uploads nothing and charges
nothing when what the aggregators announce differs. :class:`Prio3Uploader` is the transport underneath
(and what a test uses to play a malicious device).
"""

from __future__ import annotations

import enum
import json
import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fedstats.client import check_server_url
from fedstats.client.policy import LocalBudget, Policy, RefusedTask
from fedstats.errors import (
    BudgetExceededError,
    DataError,
    FedstatsError,
    ParameterError,
    SecurityError,
)
from fedstats.randomness import RandomSource
from fedstats.wire import auth, digest
from fedstats.wire.enrollment import load_identity

__all__ = [
    "Answer",
    "Collection",
    "Prio3Device",
    "Prio3Task",
    "Prio3Uploader",
    "collect",
    "collect_signed",
    "open_round",
    "shard_report",
    "unshard",
]


@dataclass(frozen=True)
class Prio3Task:
    """What a device must know of a Prio3 task (given to it out of band, like DAP's task parameters).

    Attributes
    ----------
    task_id : str
        64 hex digits.
    vdaf : dict
        The variant and its parameters (:func:`fedstats.service.domain.vdaf.vdaf_from_spec` form).
    ctx : bytes
        Prio3's application context.
    leader_url, helper_url : str
        The two aggregators' base URLs (``https://``; ``http://`` only to loopback).
    """

    task_id: str
    vdaf: Mapping[str, Any]
    ctx: bytes
    leader_url: str
    helper_url: str

    def __post_init__(self) -> None:
        check_server_url(self.leader_url)
        check_server_url(self.helper_url)
        if self.leader_url.rstrip("/") == self.helper_url.rstrip("/"):
            raise ParameterError(
                "helper_url", self.helper_url, "a server other than the leader (two aggregators)"
            )

    def prio3(self) -> Any:
        """The task's Prio3 instance."""
        from fedstats.vdaf import (
            Prio3Count,
            Prio3Histogram,
            Prio3MultihotCountVec,
            Prio3Sum,
            Prio3SumVec,
        )

        spec = dict(self.vdaf)
        kind = spec.pop("type", None)
        classes = {
            "count": Prio3Count,
            "sum": Prio3Sum,
            "sumvec": Prio3SumVec,
            "histogram": Prio3Histogram,
            "multihot": Prio3MultihotCountVec,
        }
        if kind not in classes:
            raise ParameterError("vdaf.type", kind, f"one of {sorted(classes)}")
        return classes[str(kind)](**spec)


def shard_report(task: Prio3Task, measurement: Any) -> tuple[str, bytes, list[bytes]]:
    """Shard one measurement: (report id in hex, public share, [leader's, helper's input share]).

    Raises
    ------
    ParameterError
        If the measurement is outside the variant's range (an honest device cannot send it).
    """
    nonce = os.urandom(16)
    public, shares = task.prio3().shard(task.ctx, measurement, nonce)
    return nonce.hex(), public, shares


class Prio3Uploader:
    """A device's uploads to the two aggregators of Prio3 tasks.

    Parameters
    ----------
    identity : path or mapping
        The device's identity file (``fedstats enroll client``) or its contents.
    ca : path, optional
        CA certificate of both servers' TLS certificates (default: the system store).
    timeout : float
        Seconds per request.
    clients : mapping, optional
        Tests: base URL -> the ``httpx.Client`` to use for it (e.g. a FastAPI ``TestClient``) instead
        of the network.
    """

    def __init__(
        self,
        identity: Path | str | Mapping[str, Any],
        *,
        ca: Path | str | None = None,
        timeout: float = 30.0,
        clients: Mapping[str, httpx.Client] | None = None,
    ) -> None:
        ident = dict(identity) if isinstance(identity, Mapping) else load_identity(identity)
        self.client_id = str(ident["client_id"])
        self._key = auth.private_key_from_hex(str(ident["private_key"]))
        self._cert = ident["certificate"]
        self._verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=str(ca)) if ca is not None else True
        )
        self._timeout = timeout
        self._given = {k.rstrip("/"): v for k, v in (clients or {}).items()}
        self._clients: dict[str, httpx.Client] = {}
        self.requests = 0  # requests sent (both aggregators)

    def _http(self, base: str) -> httpx.Client:
        base = base.rstrip("/")
        if base in self._given:
            return self._given[base]
        if base not in self._clients:
            self._clients[base] = httpx.Client(
                base_url=base, verify=self._verify, timeout=self._timeout
            )
        return self._clients[base]

    def _post(self, base: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        raw = json.dumps(body, separators=(",", ":")).encode()
        headers = auth.sign_request(self._key, self.client_id, "POST", path, raw)
        headers["content-type"] = "application/json"
        self.requests += 1
        r = self._http(base).post(path, content=raw, headers=headers)
        if r.status_code != 200:
            raise DataError(f"{base}{path}: {r.status_code} {r.text[:300]}")
        out: dict[str, Any] = r.json()
        return out

    def get(
        self,
        base: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        """A signed ``GET`` (e.g. the long-polled ``/v1/vdaf/work``); the answer as it came.

        Raises
        ------
        httpx.TransportError
            If the aggregator cannot be reached.
        """
        signed = auth.sign_request(self._key, self.client_id, "GET", path, b"")
        signed.update(headers or {})
        self.requests += 1
        return self._http(base).get(
            path,
            params=params,
            headers=signed,
            timeout=self._timeout if timeout is None else timeout,
        )

    def register(self, task: Prio3Task) -> None:
        """Enroll with both aggregators (``POST /v1/client/register``; repeating it is harmless)."""
        for base in (task.leader_url, task.helper_url):
            self._post(base, "/v1/client/register", {"certificate": self._cert})

    def upload_shares(
        self, task: Prio3Task, report_id: str, public_share: bytes, input_shares: list[bytes]
    ) -> None:
        """Upload an already sharded report: the leader's share to the leader, the helper's to the helper.

        The leader first: its answer carries its receipt of the report, which the helper requires with
        the helper's share (so the helper holds only reports the leader acknowledged, and refuses to
        release its aggregate share while the leader leaves one of them out, ``docs/vdaf.md``).

        Raises
        ------
        DataError
            If an aggregator refuses the upload (the status and its message), or the leader answers no
            receipt (nothing is sent to the helper then).
        """
        path = f"/v1/vdaf/tasks/{task.task_id}/reports"
        body = {"report_id": report_id, "public_share": public_share.hex()}
        ack = self._post(task.leader_url, path, {**body, "input_share": input_shares[0].hex()})
        receipt = ack.get("receipt")
        if not isinstance(receipt, str) or len(receipt) != 64:
            raise DataError(f"{task.leader_url}{path}: the leader answered no receipt")
        self._post(
            task.helper_url,
            path,
            {**body, "input_share": input_shares[1].hex(), "leader_receipt": receipt},
        )

    def upload(self, task: Prio3Task, measurement: Any) -> str:
        """Shard ``measurement`` and upload its two shares; returns the report id (hex).

        Raises
        ------
        ParameterError
            If the measurement is outside the variant's range.
        DataError
            If an aggregator refuses the upload.
        """
        report_id, public, shares = shard_report(task, measurement)
        self.upload_shares(task, report_id, public, shares)
        return report_id

    def close(self) -> None:
        """Close the connections."""
        for c in self._clients.values():
            c.close()
        self._clients.clear()


def collect(
    task: Prio3Task,
    leader: httpx.Client,
    helper: httpx.Client,
) -> Any:
    """The collector: ask the leader (which finishes aggregation), then the helper, and combine.

    Parameters
    ----------
    task : Prio3Task
    leader, helper : httpx.Client
        Clients with each aggregator's base URL and the operator's bearer token (``Authorization``).

    Returns
    -------
    Collection
        The aggregate (noised if the task has noise) and the counts of accepted and rejected reports.

    Raises
    ------
    DataError
        If an aggregator refuses, or the two aggregated different batches.
    """
    path = f"/v1/vdaf/tasks/{task.task_id}/collect"
    answers = [_operator_post(c, path, "collection") for c in (leader, helper)]
    return unshard(task, answers[0], answers[1])


def _operator_post(client: httpx.Client, path: str, what: str, body: Any = None) -> Any:
    """POST ``body`` (JSON, if any) with the operator's client: the answer, or DataError naming ``what``."""
    r = client.post(path, json=body)
    if r.status_code != 200:
        raise DataError(f"{what} refused: {r.status_code} {r.text[:300]}")
    return r.json()


@dataclass(frozen=True)
class Collection:
    """The collector's result of a Prio3 task.

    Attributes
    ----------
    result : list of int
        The aggregate, one entry per output element (Count and Sum: one), each field element taken in
        ``(-p/2, p/2]``, so that noise may make an entry negative.
    accepted, rejected : int
        Reports summed, and reports refused (the leader's count, which includes reports the helper never
        received).
    noises : (dict or None, dict or None)
        The noise the leader and the helper each say they added (``{mechanism, parameter}``; None: none).
    """

    result: list[int]
    accepted: int
    rejected: int
    noises: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)


def unshard(task: Prio3Task, leader: Mapping[str, Any], helper: Mapping[str, Any]) -> Collection:
    """Combine the two aggregators' collection answers (``POST .../collect`` on each).

    Parameters
    ----------
    task : Prio3Task
    leader, helper : mapping
        The answers: ``{"agg_share" (hex), "accepted", "rejected", "jobs", ...}``.

    Returns
    -------
    Collection

    Raises
    ------
    DataError
        If an answer is malformed, or the two aggregated different batches (accepted reports or number
        of aggregation jobs differ).
    """
    vdaf = task.prio3()
    try:
        shares = [
            vdaf.decode_agg_share(bytes.fromhex(str(a["agg_share"]))) for a in (leader, helper)
        ]
        counts = [(int(a["accepted"]), int(a["jobs"])) for a in (leader, helper)]
        rejected = int(leader["rejected"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"collection answer malformed: {exc}") from None
    if counts[0] != counts[1]:
        raise DataError(
            f"the aggregators aggregated different batches: leader {counts[0]}, helper "
            f"{counts[1]} (accepted reports, jobs)"
        )
    p = vdaf.field.MODULUS
    total = vdaf.field.to_ints(vdaf.merge(shares))
    noises = (leader.get("noise"), helper.get("noise"))
    return Collection([v - p if v > p // 2 else v for v in total], counts[0][0], rejected, noises)


def open_round(
    task_id: str, index: int, history: list[Any], leader: httpx.Client, helper: httpx.Client
) -> dict[str, Any]:
    """The collector opens round ``index`` of a signed Prio3 task on both aggregators.

    Parameters
    ----------
    task_id : str
        The signed task's id.
    index : int
    history : list
        The public sums of rounds ``0 .. index - 1``
        (:func:`fedstats.analyses._prio3_tasks.history_entry` of each collected round).
    leader, helper : httpx.Client
        Operator clients of the two aggregators.

    Returns
    -------
    dict
        The round's announcement (the leader's; the helper's must be equal).

    Raises
    ------
    DataError
        If an aggregator refuses, or the two announce different rounds.
    """
    path, body = f"/v1/vdaf/tasks/{task_id}/rounds", {"round": index, "history": history}
    got = [_operator_post(c, path, f"round {index}", body) for c in (leader, helper)]
    if got[0] != got[1]:
        raise DataError(f"the aggregators announce different rounds {index}")
    out: dict[str, Any] = got[0]
    return out


def collect_signed(
    task: Mapping[str, Any],
    task_id: str,
    leader: httpx.Client,
    helper: httpx.Client,
    on_round: Callable[[int, Mapping[str, Any]], None],
) -> tuple[Any, list[dict[str, Any]]]:
    """The collector of a signed Prio3 task: open each round, let devices upload, aggregate, collect.

    The collector derives every round from the task as everyone else does
    (:func:`fedstats.analyses._prio3_tasks.derive_round`), feeds each round's released sum (the
    aggregate turned back into the round's sum, :attr:`~fedstats.analyses._prio3.Validity.from_total`)
    into the task's plan, and announces it as the next round's history.

    Parameters
    ----------
    task : mapping
        The normalized task (verified by the caller).
    task_id : str
    leader, helper : httpx.Client
        Operator clients of the two aggregators.
    on_round : callable
        ``on_round(index, announcement)``: called once the round is open on both; returns when the
        devices uploaded.

    Returns
    -------
    (result, rounds)
        The analysis's result and, per round, ``{"round", "variant", "accepted", "rejected"}``.

    Raises
    ------
    DataError
        If an aggregator refuses, or the two disagree.
    """
    from fedstats.analyses._prio3_tasks import (
        derive_round,
        history_entry,
        plan_on_route,
        released_sum,
    )

    gen = plan_on_route(task, task_id)
    history: list[Any] = []
    rounds: list[dict[str, Any]] = []
    next(gen)
    while True:
        index = len(history)
        derived = derive_round(task, task_id, index, history)
        announced = open_round(task_id, index, history, leader, helper)
        if announced.get("task_id") != derived.task_id:
            raise DataError(f"the aggregators announce another round {index}")
        on_round(index, announced)
        _operator_post(leader, f"/v1/vdaf/tasks/{derived.task_id}/aggregate", "aggregation", {})
        prio3 = Prio3Task(
            derived.task_id,
            derived.spec,
            derived.ctx,
            str(task["prio3"]["leader"]),
            str(task["prio3"]["helper"]),
        )
        got = collect(prio3, leader, helper)
        total = derived.validity.from_total(np.asarray(got.result, dtype=object), got.accepted)
        history.append(history_entry(total, got.accepted))
        rounds.append(
            {
                "round": index,
                "variant": derived.validity.description,
                "accepted": got.accepted,
                "rejected": got.rejected,
            }
        )
        try:
            gen.send(released_sum(total, got.accepted, got.noises))
        except StopIteration as stop:
            return stop.value, rounds


class Answer(enum.Enum):
    """What :meth:`Prio3Device.answer` did with a round.

    Only :attr:`SENT` uploaded a report (and spent the reservation); ``bool(answer)`` is True for it
    alone. :attr:`NOT_OPEN` is worth asking again later; the others are final for that round.
    """

    SENT = "sent"
    """A report was sharded and uploaded to both aggregators."""
    NOT_OPEN = "not_open"
    """Neither aggregator announces the round yet."""
    NOT_MY_SLOT = "not_my_slot"
    """The round is open, but this device's slot is outside its client range: nothing to send."""
    ANSWERED = "answered"
    """This device answered the round before (a device answers each round at most once)."""
    REFUSED = "refused"
    """The task is refused (:attr:`Prio3Device.refused` says why) or was never joined."""

    def __bool__(self) -> bool:
        return self is Answer.SENT


@dataclass
class _Joined:
    """A signed Prio3 task this device accepted."""

    task_id: str
    task: dict[str, Any]
    loss: Any
    slot: int
    leader: str
    helper: str


class Prio3Device:
    """A device of signed Prio3 tasks: verifies, checks its policy and budget, derives, then uploads.

    For a task (:meth:`join`) the device

    1. asks the leader to join (signed request) and gets the analyst's envelope and its slot, then asks
       the helper; it verifies the envelope itself (:func:`fedstats.wire.tasks.verify_task`: the
       authority pinned at enrollment, an analyst certificate for its population, the signature over the
       normalized task), requires both aggregators to relay the same envelope, the task's ``prio3``
       section to name exactly these two aggregators, and the task id to be the task's digest;
    2. checks the task against its :class:`~fedstats.client.policy.Policy` and reserves the task's loss
       (:func:`fedstats.wire.registry.privacy_loss_for`) in its :class:`~fedstats.client.policy.LocalBudget`
       (under ``"prio3:" + task id``), before anything is sharded;

    and for each round (:meth:`answer`)

    3. reads both aggregators' announcements of the round, which must be equal, and derives the round
       itself from the accepted task and the announced public sums
       (:func:`fedstats.analyses._prio3_tasks.derive_round`): the encoder, the Prio3 variant and its
       parameters, the round task id and ``ctx``, the client range and cohort size must all match the
       announcement (another variant, length or bits, a round beyond the plan: refused);
    4. if its slot lies in the round's client range, encodes its own record with the derived round's
       encoder, turns the report into the derived variant's measurement, spends the reservation, shards
       and uploads one share to each aggregator.

    A refusal (:attr:`refused`) uploads nothing and gives an unspent reservation back. The slot is fixed at
    the first join; a device answers each round at most once.

    Parameters
    ----------
    identity : path or mapping
        The device's identity file (with the pinned ``authority_public_key``) or its contents.
    record : mapping
        The device's one record: column name -> value (a task's ``max_records_per_client`` is 1).
    policy : Policy, optional
    budget : LocalBudget, optional
        Default: in memory, epsilon 10.
    randomness : RandomSource, optional
        The device's private randomness (default secure; seeded only for tests, not for release).
    ca : path, optional
    clients : mapping, optional
        As :class:`Prio3Uploader`.
    """

    def __init__(
        self,
        identity: Path | str | Mapping[str, Any],
        record: Mapping[str, Any],
        *,
        policy: Policy | None = None,
        budget: LocalBudget | None = None,
        randomness: RandomSource | None = None,
        ca: Path | str | None = None,
        timeout: float = 30.0,
        clients: Mapping[str, httpx.Client] | None = None,
    ) -> None:
        ident = dict(identity) if isinstance(identity, Mapping) else load_identity(identity)
        self.uploader = Prio3Uploader(ident, ca=ca, timeout=timeout, clients=clients)
        self.client_id = self.uploader.client_id
        self.authority_public_key: str | None = ident.get("authority_public_key")
        self.population = str((ident["certificate"].get("body") or {}).get("population", ""))
        self.record = {k: np.asarray(v) for k, v in record.items()}
        self.policy = policy or Policy()
        self.budget = budget or LocalBudget(None)
        self.randomness = randomness or RandomSource()
        self.tasks: dict[str, _Joined] = {}
        self.refused: dict[str, str] = {}
        self.answered: set[tuple[str, int]] = set()

    @staticmethod
    def budget_key(task_id: str) -> str:
        """The key of a task's charge in the device's budget."""
        return f"prio3:{task_id}"

    def _refuse(self, task_id: str, reason: str) -> None:
        self.refused[task_id] = reason
        self.budget.release(self.budget_key(task_id))

    def join(self, leader_url: str, task_id: str) -> bool:
        """Accept a signed Prio3 task (steps 1 and 2 above); False (and :attr:`refused`) if refused.

        Raises
        ------
        DataError
            If an aggregator is unreachable or refuses the request (nothing is reserved then).
        """
        if task_id in self.tasks:
            return True
        if task_id in self.refused:
            return False
        leader_url = check_server_url(leader_url).rstrip("/")
        self.uploader._post(leader_url, "/v1/client/register", {"certificate": self.uploader._cert})
        first = self.uploader._post(leader_url, f"/v1/vdaf/tasks/{task_id}/join", {})
        try:
            acc = self._accept(first, leader_url, task_id)
        except (SecurityError, RefusedTask, ParameterError) as exc:
            self._refuse(task_id, str(exc))
            return False
        self.uploader._post(acc.helper, "/v1/client/register", {"certificate": self.uploader._cert})
        second = self.uploader._post(acc.helper, f"/v1/vdaf/tasks/{task_id}/join", {})
        if digest(second.get("envelope")) != digest(first.get("envelope")):
            self._refuse(task_id, "the two aggregators relay different envelopes")
            return False
        try:  # reserved before anything is sharded
            self.budget.reserve(self.budget_key(task_id), acc.loss)
        except BudgetExceededError as exc:
            self._refuse(task_id, str(exc))
            return False
        self.tasks[task_id] = acc
        return True

    def _accept(self, answer: Mapping[str, Any], leader_url: str, task_id: str) -> _Joined:
        from fedstats.wire.registry import privacy_loss_for
        from fedstats.wire.tasks import task_id as task_id_of
        from fedstats.wire.tasks import verify_task

        if self.authority_public_key is None:
            raise SecurityError("no pinned authority key in the identity: no task can be verified")
        task = verify_task(answer.get("envelope"), self.authority_public_key, self.population)
        if task_id_of(task) != task_id:
            raise SecurityError("the task id is not the digest of the signed task")
        route = task.get("prio3")
        if not isinstance(route, Mapping):
            raise SecurityError("the signed task is not a Prio3 task")
        if route["leader"] != leader_url:
            raise SecurityError(f"the signed task names leader {route['leader']}, not {leader_url}")
        check_server_url(route["helper"])
        slot = answer.get("slot")
        if isinstance(slot, bool) or not isinstance(slot, int):
            raise SecurityError("the leader gave no slot")
        if not 0 <= slot < int(task["cohort_size"]):
            raise SecurityError(f"slot {slot} is outside the task's cohort")
        self.policy.check(task)
        loss = privacy_loss_for(task)
        self.budget.check(loss)
        return _Joined(task_id, task, loss, slot, leader_url, str(route["helper"]))

    def _announcements(self, acc: _Joined, index: int) -> dict[str, Any] | None:
        """Both aggregators' announcement of round ``index`` (None while one of them has none yet).

        A round announced by only one aggregator is not open yet (the collector opens it on one, then
        on the other; nothing is uploaded before both announce it); two different announcements are
        refused.
        """
        got = []
        for base in (acc.leader, acc.helper):
            answer = self.uploader._post(base, f"/v1/vdaf/tasks/{acc.task_id}/join", {})
            if base == acc.leader and answer.get("slot") != acc.slot:
                raise SecurityError("the leader changed this device's slot")
            rounds = answer.get("rounds")
            if not isinstance(rounds, list):
                raise SecurityError("malformed announcement")
            got.append(rounds[index] if index < len(rounds) else None)
        if got[0] is None or got[1] is None:  # not open on both yet (the collector opens one first)
            return None
        if digest(got[0]) != digest(got[1]):
            raise SecurityError(f"the two aggregators announce different rounds {index}")
        out: dict[str, Any] = got[0]
        return out

    def derive(self, task_id: str, announced: Mapping[str, Any]) -> Any:
        """Derive the announced round from the accepted task; raise SecurityError if they differ."""
        from fedstats.analyses._prio3_tasks import derive_round

        acc = self.tasks[task_id]
        try:
            index = announced["round"]
            derived = derive_round(acc.task, task_id, index, announced["history"])
            own = derived.announcement(announced["history"])
        except SecurityError:
            raise
        except (FedstatsError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise SecurityError(f"malformed round: {type(exc).__name__}: {exc}") from None
        for k, v in own.items():
            if digest(announced.get(k)) != digest(v):
                raise SecurityError(
                    f"round {index} differs from the task's plan in its {k} "
                    f"(derived {str(v)[:80]}, announced {str(announced.get(k))[:80]})"
                )
        if set(announced) - set(own) - {"status"}:
            raise SecurityError(f"round {index} announces unknown fields")
        return derived

    def answer(self, task_id: str, index: int) -> Answer:
        """Answer round ``index`` of an accepted task (steps 3 and 4 above).

        Returns
        -------
        Answer
            :attr:`Answer.SENT` if a report was uploaded; :attr:`Answer.NOT_OPEN` if neither
            aggregator announces the round yet; :attr:`Answer.NOT_MY_SLOT` if this device's slot is
            not in its client range; :attr:`Answer.ANSWERED` if it answered the round before;
            :attr:`Answer.REFUSED` if it refused the task (:attr:`refused` says why; nothing uploaded)
            or never joined it.
        """
        acc = self.tasks.get(task_id)
        if acc is None or task_id in self.refused:
            return Answer.REFUSED
        if (task_id, index) in self.answered:
            return Answer.ANSWERED
        try:
            announced = self._announcements(acc, index)
            if announced is None:
                return Answer.NOT_OPEN
            derived = self.derive(task_id, announced)
        except SecurityError as exc:
            self._refuse(task_id, str(exc))
            return Answer.REFUSED
        lo, hi = derived.client_range
        if not lo <= acc.slot < hi:
            return Answer.NOT_MY_SLOT
        report = self._report(acc, derived)
        measurement = derived.validity.to_measurements(np.asarray(report)[None, :])[0]
        try:  # spent before the first share leaves the device
            self.budget.spend(self.budget_key(task_id), acc.loss)
        except BudgetExceededError as exc:
            self._refuse(task_id, str(exc))
            return Answer.REFUSED
        self._upload(acc, derived, measurement)
        self.answered.add((task_id, index))
        return Answer.SENT

    def _report(self, acc: _Joined, derived: Any) -> np.ndarray:
        """The device's report ``(dim,)`` for the derived round (its record, its own randomness)."""
        from fedstats.engine.rounds import ClientBatch, Round
        from fedstats.wire.registry import encoder_name, resolve_encoder

        rnd = derived.round
        fn = resolve_encoder(encoder_name(rnd.encode), acc.task["analysis"], acc.task["version"])
        spec = Round(rnd.name, fn, rnd.params, dim=rnd.dim, bound=rnd.bound)
        cols = {k: v[None, ...] for k, v in self.record.items()}
        batch = ClientBatch(cols, start=acc.slot, total=derived.n_clients)
        rng = self.randomness.generator("prio3", acc.task_id, derived.index)
        out: np.ndarray = spec.encode_checked(batch, rng)[0]
        return out

    def _upload(self, acc: _Joined, derived: Any, measurement: Any) -> None:
        """Shard ``measurement`` with the derived variant and upload one share to each aggregator."""
        task = Prio3Task(derived.task_id, derived.spec, derived.ctx, acc.leader, acc.helper)
        self.uploader.upload(task, measurement)

    def close(self) -> None:
        """Close the connections."""
        self.uploader.close()
