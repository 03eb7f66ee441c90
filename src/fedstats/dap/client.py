"""A DAP-09 client: shard a measurement with Prio3, seal the input shares with HPKE, upload the report.

The client fetches each aggregator's HPKE configuration (``GET /hpke_config?task_id=``), shards the
measurement with the report id as the VDAF nonce (VDAF-20, context :func:`~fedstats.dap.task.vdaf_ctx`),
seals ``PlaintextInputShare(extensions, input_share)`` to each aggregator with the associated data
``InputShareAad(task_id, metadata, public_share)`` and uploads the :class:`~fedstats.dap.messages.Report` to
the leader (``PUT /tasks/{task-id}/reports``, ``application/dap-report``; DAP-09 §4.4).

Examples
--------
>>> from fedstats.vdaf import Prio3Count
>>> client = Client(leader="http://127.0.0.1:9001", helper="http://127.0.0.1:9002",
...                 task_id=bytes(32), vdaf=Prio3Count(), time_precision=3600)  # doctest: +SKIP
>>> client.upload(1)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time as _time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from fedstats.dap.hpke import HpkeConfig, HpkeConfigList, seal
from fedstats.dap.messages import (
    Extension,
    InputShareAad,
    PlaintextInputShare,
    Report,
    ReportMetadata,
    Role,
)
from fedstats.dap.task import b64encode, input_share_info, vdaf_ctx
from fedstats.errors import DataError, ParameterError, UnavailableError
from fedstats.vdaf import Prio3

__all__ = ["Client", "check_response"]


def check_response(resp: httpx.Response, what: str) -> None:
    """Raise a FedstatsError for a non-2xx DAP answer, with the problem document's type if any.

    Raises
    ------
    UnavailableError
        On a 5xx answer (a retry may succeed).
    DataError
        On a 4xx answer (the request was refused).
    """
    if resp.status_code < 300:
        return
    detail = resp.text[:300]
    if resp.status_code >= 500:
        raise UnavailableError(f"{what}: the aggregator answered {resp.status_code}: {detail}")
    raise DataError(f"{what}: the aggregator refused the request ({resp.status_code}): {detail}")


class Client:
    """Uploads measurements to a DAP-09 task.

    Parameters
    ----------
    leader, helper : str
        The aggregators' base URLs (``https://leader.example/``); DAP paths are appended.
    task_id : bytes
        The 32-byte task id.
    vdaf : Prio3
        The task's VDAF (two aggregators).
    time_precision : int
        The task's time precision in seconds (>= 1): report times are rounded down to a multiple.
    extensions : sequence of Extension, optional
        Report extensions put in both plaintext input shares (a fedstats device adds the signed task's).
    http : httpx.Client, optional
        The HTTP client (a new one with a 30 s timeout by default).
    random_bytes : callable, optional
        Randomness for report ids, VDAF sharding and HPKE (OS entropy by default).
    """

    def __init__(
        self,
        *,
        leader: str,
        helper: str,
        task_id: bytes,
        vdaf: Prio3,
        time_precision: int,
        extensions: Sequence[Extension] = (),
        http: httpx.Client | None = None,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        if not isinstance(task_id, bytes) or len(task_id) != 32:
            raise ParameterError("task_id", task_id, "32 bytes")
        if (
            isinstance(time_precision, bool)
            or not isinstance(time_precision, int)
            or time_precision < 1
        ):
            raise ParameterError(
                "time_precision", time_precision, "an integer number of seconds >= 1"
            )
        if vdaf.SHARES != 2:
            raise ParameterError("vdaf", vdaf.SHARES, "a Prio3 with two aggregators")
        self.leader = leader.rstrip("/")
        self.helper = helper.rstrip("/")
        self.task_id = task_id
        self.vdaf = vdaf
        self.time_precision = time_precision
        self.extensions = tuple(extensions)
        self.http = http or httpx.Client(timeout=30.0)
        self.random_bytes = random_bytes
        self._configs: dict[str, HpkeConfig] = {}

    def hpke_config(self, aggregator: str) -> HpkeConfig:
        """The aggregator's HPKE configuration for this task (fetched once, then cached).

        Raises
        ------
        DataError
            If the aggregator offers no configuration of the supported suite.
        """
        if aggregator not in self._configs:
            try:
                resp = self.http.get(
                    f"{aggregator}/hpke_config", params={"task_id": b64encode(self.task_id)}
                )
            except httpx.HTTPError as exc:
                raise UnavailableError(f"GET {aggregator}/hpke_config: {exc}") from None
            check_response(resp, f"GET {aggregator}/hpke_config")
            configs = HpkeConfigList.decode(resp.content).configs
            usable = [c for c in configs if c.supported]
            if not usable:
                raise DataError(
                    f"{aggregator} offers no X25519/HKDF-SHA256/AES-128-GCM HPKE configuration"
                )
            self._configs[aggregator] = usable[0]
        return self._configs[aggregator]

    def prepare(self, measurement: Any, *, time: int | None = None) -> Report:
        """Build the sealed report of one measurement (no network besides fetching HPKE configs).

        Parameters
        ----------
        measurement : object
            In the VDAF's form (0/1 for Count, an int in [0, max_measurement] for Sum, ...).
        time : int, optional
            Seconds since the epoch (now by default), rounded down to the time precision.
        """
        now = int(_time.time()) if time is None else int(time)
        metadata = ReportMetadata(self.random_bytes(16), now - now % self.time_precision)
        public, shares = self.vdaf.shard(
            vdaf_ctx(self.task_id),
            measurement,
            metadata.report_id,
            self.random_bytes(self.vdaf.RAND_SIZE),
        )
        aad = InputShareAad(self.task_id, metadata, public).encode()
        sealed = [
            seal(
                self.hpke_config(url),
                input_share_info(role),
                PlaintextInputShare(self.extensions, share).encode(),
                aad,
                random_bytes=self.random_bytes,
            )
            for url, role, share in (
                (self.leader, Role.LEADER, shares[0]),
                (self.helper, Role.HELPER, shares[1]),
            )
        ]
        return Report(metadata, public, sealed[0], sealed[1])

    def upload(self, measurement: Any, *, time: int | None = None) -> bytes:
        """Shard, seal and upload one measurement; returns its report id.

        Raises
        ------
        DataError
            If the leader refuses the report (4xx).
        UnavailableError
            If the leader cannot be reached or answers 5xx.
        """
        report = self.prepare(measurement, time=time)
        url = f"{self.leader}/tasks/{b64encode(self.task_id)}/reports"
        try:
            resp = self.http.put(
                url, content=report.encode(), headers={"Content-Type": Report.MEDIA_TYPE}
            )
        except httpx.HTTPError as exc:
            raise UnavailableError(f"PUT {url}: {exc}") from None
        check_response(resp, f"PUT {url}")
        return report.metadata.report_id
