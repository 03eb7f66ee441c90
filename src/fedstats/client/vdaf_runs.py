"""A device's signed Prio3 tasks on one leader, long-polled (``fedstats client run --prio3``).

:class:`Prio3Runs` is the loop of a :class:`~fedstats.client.vdaf.Prio3Device`: it long-polls the leader's
``GET /v1/vdaf/work`` (the open signed Prio3 tasks of the device's population and the round of each that
takes uploads; the leader holds the poll until that list changes, at most ``wait`` seconds, so an idle
device makes one request per ``wait`` and a busy one a few per round), joins each new task (the device
verifies it, checks its policy and reserves its loss in its budget) and answers each round once
(:meth:`~fedstats.client.vdaf.Prio3Device.answer`). A task leaves the list when the operator closes it
after its last collection; the device then stops answering it.

:meth:`Prio3Runs.for_device` builds it from a :class:`fedstats.client.Device`: the same identity, policy,
budget file, randomness and log as the device's other tasks, its data's first record as its record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from fedstats.client import Device, check_server_url
from fedstats.client.polling import PollClock
from fedstats.client.vdaf import Answer, Prio3Device
from fedstats.errors import DataError, ParameterError
from fedstats.wire.enrollment import load_identity

__all__ = ["Prio3Runs"]


class Prio3Runs:
    """Join and answer a leader's signed Prio3 tasks, long-polling for work.

    Parameters
    ----------
    device : Prio3Device
        The device (identity, record, policy, budget, randomness, transport).
    leader_url : str
        The leader's base URL (``https://``; ``http://`` only to loopback).
    log : callable, optional
        Receives one line per event (joins, refusals, uploads, retries).

    Attributes
    ----------
    answers : dict
        ``(task id, round) -> Answer`` of every round handled.
    polls : int
        Work polls sent (``GET /v1/vdaf/work``).
    """

    def __init__(
        self,
        device: Prio3Device,
        leader_url: str,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.device = device
        self.leader = check_server_url(leader_url).rstrip("/")
        self.log = log or (lambda _line: None)
        self.answers: dict[tuple[str, int], Answer] = {}
        self.skipped: dict[str, str] = {}  # tasks the aggregators would not let this device join
        self.polls = 0
        self.work: list[dict[str, Any]] = []
        self._etag: str | None = None
        self.max_tasks: int | None = None  # join no more tasks than this (run(runs=...))

    @classmethod
    def for_device(
        cls,
        device: Device,
        identity: Path | str | Mapping[str, Any],
        *,
        ca: Path | str | None = None,
    ) -> Prio3Runs:
        """The Prio3 loop of ``device``: its server as the leader, its policy, budget, randomness, log.

        Parameters
        ----------
        device : Device
        identity : path or mapping
            The device's identity file (the one ``device`` was made with) or its contents.
        ca : path, optional
            CA certificate of both aggregators' TLS certificates.
        """
        ident = dict(identity) if isinstance(identity, Mapping) else load_identity(identity)
        record = {k: v[0] for k, v in device.columns.items()}  # a Prio3 task takes one record
        prio3 = Prio3Device(
            ident,
            record,
            policy=device.policy,
            budget=device.budget,
            randomness=device.randomness,
            ca=ca,
            timeout=device._timeout,
        )
        return cls(prio3, str(device._http.base_url), log=device.log)

    @property
    def requests(self) -> int:
        """Requests sent to both aggregators so far (polls, joins, announcements, uploads)."""
        return self.device.uploader.requests

    def step(self, wait: float = 0.0) -> list[dict[str, Any]]:
        """Poll once (held up to ``wait`` seconds until the list changes); join and answer; the list.

        Raises
        ------
        httpx.TransportError
            If the leader cannot be reached.
        DataError
            If the leader refuses the poll (e.g. 401 for a revoked device).
        """
        headers = {"If-None-Match": self._etag} if self._etag else None
        r = self.device.uploader.get(
            self.leader,
            "/v1/vdaf/work",
            params={"wait": f"{max(0.0, wait):.3f}"},
            headers=headers,
            timeout=self.device.uploader._timeout + max(0.0, wait),
        )
        self.polls += 1
        if r.status_code == 200:
            self.work = list(r.json().get("tasks", []))
            self._etag = r.headers.get("etag")
        elif r.status_code != 304:
            raise DataError(f"{self.leader}/v1/vdaf/work: {r.status_code} {r.text[:300]}")
        self._handle()
        return self.work

    def _handle(self) -> None:
        dev = self.device
        for entry in self.work:
            tid = str(entry.get("task_id"))
            if tid in dev.refused or tid in self.skipped:
                continue
            if tid not in dev.tasks:
                if self.max_tasks is not None and len(dev.tasks) >= self.max_tasks:
                    continue  # joined as many as asked: leave the slots to other devices
                try:
                    joined = dev.join(self.leader, tid)
                except DataError as exc:  # the cohort is full, the task closed meanwhile
                    self.skipped[tid] = str(exc)
                    self.log(f"prio3 task {tid[:16]}: not joined ({str(exc)[:160]})")
                    continue
                if not joined:
                    self.log(f"prio3 task {tid[:16]}: refused ({dev.refused.get(tid)})")
                    continue
                self.log(f"prio3 task {tid[:16]}: joined (slot {dev.tasks[tid].slot})")
            index = entry.get("open")
            if not isinstance(index, int) or isinstance(index, bool):
                continue
            if (tid, index) in self.answers:
                continue
            try:
                got = dev.answer(tid, index)
            except DataError as exc:  # an aggregator refused the upload (e.g. the round was frozen)
                self.answers[(tid, index)] = Answer.REFUSED
                self.log(f"prio3 task {tid[:16]}: round {index} not taken ({str(exc)[:160]})")
                continue
            if got is Answer.NOT_OPEN:
                continue  # the helper has not opened it yet: asked again at the next poll
            self.answers[(tid, index)] = got
            if got is Answer.SENT:
                self.log(f"prio3 task {tid[:16]}: reported round {index}")
            elif got is Answer.REFUSED:
                self.log(f"prio3 task {tid[:16]}: refused round {index} ({dev.refused.get(tid)})")
            else:
                self.log(f"prio3 task {tid[:16]}: round {index}: {got.value}")

    def _waiting(self) -> bool:
        """Whether an open round was not open on both aggregators at the last try."""
        return any(
            isinstance(e.get("open"), int)
            and str(e.get("task_id")) in self.device.tasks
            and str(e.get("task_id")) not in self.device.refused
            and (str(e.get("task_id")), e["open"]) not in self.answers
            for e in self.work
        )

    def finished(self) -> set[str]:
        """Joined tasks that left the work list (closed or abandoned) or that this device refused."""
        listed = {str(e.get("task_id")) for e in self.work}
        return {t for t in self.device.tasks if t not in listed or t in self.device.refused}

    def run(
        self,
        *,
        wait: float = 20.0,
        poll: float = 0.5,
        runs: int | None = None,
        max_seconds: float | None = None,
        until: Callable[[Prio3Runs], bool] | None = None,
    ) -> None:
        """Register with the leader, then poll until ``runs`` tasks finished, ``until``, or ``max_seconds``.

        Parameters
        ----------
        wait : float
            Long polling (>= 0): each poll is held by the leader up to this many seconds (it caps it at
            25) until the work list changes. 0: poll every ``poll`` seconds.
        poll : float
            Seconds between polls with ``wait`` 0, before a retry after a failed poll, and the longest
            a poll is held while a round is open on the leader but not yet on the helper (> 0).
        runs : int, optional
            Join exactly this many tasks (>= 1) and stop once they all finished (left the work list).
        max_seconds : float, optional
            Stop after this long.
        until : callable, optional
            Stop once it returns True (checked after each poll).

        Raises
        ------
        ParameterError
            If ``runs`` < 1, ``poll`` <= 0 or ``wait`` < 0.
        DataError
            If the leader refuses a request with a 4xx (other than 409 and 429).
        """
        if runs is not None and runs < 1:
            raise ParameterError("runs", runs, "an integer >= 1")
        if not poll > 0:
            raise ParameterError("poll", poll, "a number of seconds > 0")
        if not wait >= 0:
            raise ParameterError("wait", wait, "a number of seconds >= 0")
        self.max_tasks = runs
        clock = PollClock(max_seconds)
        registered = False
        while True:
            hold = clock.hold(poll if self._waiting() else wait)
            try:
                if not registered:
                    self.device.uploader._post(
                        self.leader,
                        "/v1/client/register",
                        {"certificate": self.device.uploader._cert},
                    )
                    registered = True
                self.step(hold)
            except (httpx.TransportError, DataError) as exc:
                text = str(exc)
                if isinstance(exc, DataError) and not any(
                    f": {code} " in text for code in ("409", "429", "500", "502", "503", "504")
                ):
                    raise
                self.log(f"prio3 poll failed ({type(exc).__name__}: {text[:160]}); retrying")
                if not clock.retry(poll):
                    return
                continue
            tasks = set(self.device.tasks)
            all_done = runs is not None and len(tasks) >= runs and tasks <= self.finished()
            if clock.done(all_done or (until is not None and until(self)), wait=wait, poll=poll):
                return

    def close(self) -> None:
        """Close the connections."""
        self.device.close()
