"""The device and collector sides of the two-aggregator mode (Prio3; ``docs/vdaf.md``).

A device shards its measurement with Prio3 (:meth:`fedstats.vdaf.Prio3.shard`) and uploads the leader's
input share to the leader and the helper's to the helper, each in a request signed with its enrolled key
(:func:`fedstats.wire.auth.sign_request`), over TLS to each server; neither aggregator alone learns anything
about the measurement. The collector (the operator or analyst) asks both aggregators for their aggregate
shares and combines them (:func:`collect`).
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from fedstats.client import check_server_url
from fedstats.errors import DataError, ParameterError
from fedstats.wire import auth
from fedstats.wire.enrollment import load_identity

__all__ = ["Collection", "Prio3Task", "Prio3Uploader", "collect", "shard_report", "unshard"]


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
        r = self._http(base).post(path, content=raw, headers=headers)
        if r.status_code != 200:
            raise DataError(f"{base}{path}: {r.status_code} {r.text[:300]}")
        out: dict[str, Any] = r.json()
        return out

    def register(self, task: Prio3Task) -> None:
        """Enroll with both aggregators (``POST /v1/client/register``; repeating it is harmless)."""
        for base in (task.leader_url, task.helper_url):
            self._post(base, "/v1/client/register", {"certificate": self._cert})

    def upload_shares(
        self, task: Prio3Task, report_id: str, public_share: bytes, input_shares: list[bytes]
    ) -> None:
        """Upload an already sharded report: the leader's share to the leader, the helper's to the helper.

        Raises
        ------
        DataError
            If an aggregator refuses the upload (the status and its message).
        """
        path = f"/v1/vdaf/tasks/{task.task_id}/reports"
        for base, share in ((task.leader_url, input_shares[0]), (task.helper_url, input_shares[1])):
            self._post(
                base,
                path,
                {
                    "report_id": report_id,
                    "public_share": public_share.hex(),
                    "input_share": share.hex(),
                },
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
    answers = []
    for c in (leader, helper):
        r = c.post(f"/v1/vdaf/tasks/{task.task_id}/collect")
        if r.status_code != 200:
            raise DataError(f"collection refused: {r.status_code} {r.text[:300]}")
        answers.append(r.json())
    return unshard(task, answers[0], answers[1])


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
    """

    result: list[int]
    accepted: int
    rejected: int


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
    return Collection([v - p if v > p // 2 else v for v in total], counts[0][0], rejected)
