"""A DAP-09 collector: start a collection job at the leader, poll it, open the two aggregate shares.

The collector sends a :class:`~fedstats.dap.messages.CollectionReq` (``PUT
/tasks/{task-id}/collection_jobs/{job-id}``), polls the job (``POST`` on the same URL: 202 while the
aggregators work, 200 with a :class:`~fedstats.dap.messages.Collection`), opens each aggregator's sealed
aggregate share with its HPKE key (info ``"dap-09 aggregate share" || sender || collector``, associated
data ``AggregateShareAad``) and unshards them with the task's VDAF (DAP-09 §4.6). It speaks to any DAP-09
leader; the VDAF must be the leader's (fedstats' Prio3 is VDAF draft 20: see ``docs/vdaf.md``, "DAP").
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from fedstats.dap.client import check_response
from fedstats.dap.hpke import (
    AEAD_AES_128_GCM,
    KDF_HKDF_SHA256,
    KEM_X25519_HKDF_SHA256,
    HpkeConfig,
    HpkeKeypair,
    open_,
    public_key_of,
)
from fedstats.dap.messages import (
    QUERY_FIXED_SIZE,
    AggregateShareAad,
    BatchSelector,
    Collection,
    CollectionReq,
    Interval,
    Query,
    Role,
)
from fedstats.dap.task import AUTH_HEADER, agg_share_info, b64decode, b64encode
from fedstats.errors import DataError, ParameterError, ProtocolAbortError, UnavailableError
from fedstats.vdaf import Prio3

__all__ = ["CollectionResult", "Collector", "CollectorCredential"]


@dataclass(frozen=True)
class CollectionResult:
    """A collected batch: the aggregate, how many reports it sums, and the interval they span.

    Attributes
    ----------
    aggregate : object
        The VDAF's aggregate result (an int for Count and Sum, a list for the vector variants).
    report_count : int
    interval : Interval
        The smallest interval, in time-precision units, that holds the batch's report times.
    batch_id : bytes or None
        The batch id of a fixed-size batch (None for a time-interval batch).
    """

    aggregate: Any
    report_count: int
    interval: Interval
    batch_id: bytes | None


class Collector:
    """Collects aggregates of a DAP-09 task from its leader.

    Parameters
    ----------
    leader : str
        The leader's base URL.
    task_id : bytes
        The 32-byte task id.
    auth_token : str
        The collector's bearer token, sent in the ``DAP-Auth-Token`` header.
    hpke_keypair : HpkeKeypair
        The collector's HPKE key; its configuration is the task's collector HPKE configuration.
    vdaf : Prio3
        The task's VDAF.
    http : httpx.Client, optional
        The HTTP client (30 s timeout by default).
    random_bytes : callable, optional
        Source of collection job ids (OS entropy by default).
    """

    def __init__(
        self,
        *,
        leader: str,
        task_id: bytes,
        auth_token: str,
        hpke_keypair: HpkeKeypair,
        vdaf: Prio3,
        http: httpx.Client | None = None,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        if not isinstance(task_id, bytes) or len(task_id) != 32:
            raise ParameterError("task_id", task_id, "32 bytes")
        self.leader = leader.rstrip("/")
        self.task_id = task_id
        self.auth_token = auth_token
        self.keypair = hpke_keypair
        self.vdaf = vdaf
        self.http = http or httpx.Client(timeout=30.0)
        self.random_bytes = random_bytes

    def _url(self, job_id: bytes) -> str:
        return f"{self.leader}/tasks/{b64encode(self.task_id)}/collection_jobs/{b64encode(job_id)}"

    def _send(self, method: str, url: str, **kw: Any) -> httpx.Response:
        headers = {AUTH_HEADER: self.auth_token, **kw.pop("headers", {})}
        try:
            resp = self.http.request(method, url, headers=headers, **kw)
        except httpx.HTTPError as exc:
            raise UnavailableError(f"{method} {url}: {exc}") from None
        check_response(resp, f"{method} {url}")
        return resp

    def start(self, query: Query, aggregation_parameter: bytes = b"") -> bytes:
        """Create a collection job for ``query``; returns its 16-byte id."""
        job_id = self.random_bytes(16)
        body = CollectionReq(query, aggregation_parameter).encode()
        self._send(
            "PUT",
            self._url(job_id),
            content=body,
            headers={"Content-Type": CollectionReq.MEDIA_TYPE},
        )
        return job_id

    def poll(
        self, job_id: bytes, query: Query, aggregation_parameter: bytes = b""
    ) -> CollectionResult | None:
        """Poll a collection job: None while it runs (202), the opened result when done (200).

        Raises
        ------
        SecurityError
            If an aggregate share does not open (wrong key, or a share for another batch).
        """
        resp = self._send("POST", self._url(job_id))
        if resp.status_code == 202:
            return None
        collection = Collection.decode(resp.content)
        pbs = collection.partial_batch_selector
        if pbs.query_type != query.query_type:
            raise ProtocolAbortError(
                f"the leader answered query type {pbs.query_type}, asked {query.query_type}"
            )
        if pbs.query_type == QUERY_FIXED_SIZE:
            selector = BatchSelector(QUERY_FIXED_SIZE, batch_id=pbs.batch_id)
        else:
            selector = BatchSelector(query.query_type, batch_interval=query.batch_interval)
        aad = AggregateShareAad(self.task_id, aggregation_parameter, selector).encode()
        shares = [
            self.vdaf.decode_agg_share(open_(self.keypair, agg_share_info(role), ct, aad))
            for role, ct in (
                (Role.LEADER, collection.leader_encrypted_agg_share),
                (Role.HELPER, collection.helper_encrypted_agg_share),
            )
        ]
        aggregate = self.vdaf.unshard(shares, collection.report_count)
        return CollectionResult(
            aggregate, collection.report_count, collection.interval, pbs.batch_id
        )

    def collect(
        self,
        query: Query,
        aggregation_parameter: bytes = b"",
        *,
        timeout: float = 60.0,
        interval: float = 0.5,
    ) -> CollectionResult:
        """Start a collection job and poll it until done.

        Parameters
        ----------
        query : Query
            A time-interval query (the batch interval) or a fixed-size one.
        timeout : float
            Seconds to wait in total (> 0).
        interval : float
            Seconds between polls (> 0).

        Raises
        ------
        ProtocolAbortError
            If the job is not done within ``timeout``.
        """
        if not timeout > 0 or not interval > 0:
            raise ParameterError("timeout", (timeout, interval), "timeout and interval > 0 seconds")
        job_id = self.start(query, aggregation_parameter)
        deadline = time.monotonic() + timeout
        while True:
            result = self.poll(job_id, query, aggregation_parameter)
            if result is not None:
                return result
            if time.monotonic() > deadline:
                raise ProtocolAbortError(
                    f"collection job {b64encode(job_id)} not done after {timeout} s"
                )
            time.sleep(interval)


_SUITE_NAMES = {
    "kem": "X25519HkdfSha256",
    "kdf": "Sha256",
    "aead": "AesGcm128",
}  # hpke-dispatch names


@dataclass(frozen=True)
class CollectorCredential:
    """A DAP collector's credential: its HPKE key pair and (optionally) its bearer token.

    Stored as the JSON object Divvi Up's ``divviup collector-credential generate`` writes and Janus's
    ``collect --collector-credential-file`` reads: ``id`` (the HPKE config id), ``kem``
    (``"X25519HkdfSha256"``), ``kdf`` (``"Sha256"``), ``aead`` (``"AesGcm128"``), ``public_key`` and
    ``private_key`` (unpadded base64url, 32 bytes each) and ``token`` (or null).

    Attributes
    ----------
    keypair : HpkeKeypair
    token : str or None
    """

    keypair: HpkeKeypair
    token: str | None = None

    @classmethod
    def generate(
        cls, config_id: int, token: str | None, *, random_bytes: Callable[[int], bytes] = os.urandom
    ) -> CollectorCredential:
        """A fresh credential (the key from ``random_bytes``, OS entropy by default)."""
        return cls(HpkeKeypair.generate(config_id, random_bytes=random_bytes), token)

    def to_json(self) -> dict[str, Any]:
        """The credential as its JSON object (the private key included: keep the file private)."""
        cfg = self.keypair.config
        return {
            "id": cfg.id,
            **_SUITE_NAMES,
            "public_key": b64encode(cfg.public_key),
            "private_key": b64encode(self.keypair.private_key),
            "token": self.token,
        }

    @classmethod
    def from_json(cls, obj: Any, name: str = "credential") -> CollectorCredential:
        """Read a credential object; the public key must be the private key's.

        Raises
        ------
        ParameterError
            Naming ``name`` and the field, if a field is missing or invalid, the suite is not
            X25519/HKDF-SHA256/AES-128-GCM, or the public key does not belong to the private key.
        """
        if not isinstance(obj, Mapping):
            raise ParameterError(name, type(obj).__name__, "a JSON object (a collector credential)")
        for key, want in _SUITE_NAMES.items():
            if obj.get(key, want) != want:
                raise ParameterError(f"{name}.{key}", obj.get(key), f"{want!r} (the one suite)")
        cid = obj.get("id")
        if isinstance(cid, bool) or not isinstance(cid, int) or not 0 <= cid <= 255:
            raise ParameterError(f"{name}.id", cid, "an HPKE config id in [0, 255]")
        keys = {}
        for key in ("public_key", "private_key"):
            try:
                keys[key] = b64decode(str(obj.get(key, "")), f"{name}.{key}", 32)
            except DataError as exc:
                raise ParameterError(
                    f"{name}.{key}", "(hidden)", "32 bytes in unpadded base64url"
                ) from exc
        if public_key_of(keys["private_key"]) != keys["public_key"]:
            raise ParameterError(
                f"{name}.public_key", "(hidden)", "the public key of the credential's private key"
            )
        token = obj.get("token")
        if token is not None and (not isinstance(token, str) or not token):
            raise ParameterError(f"{name}.token", "(hidden)", "a non-empty string or null")
        config = HpkeConfig(
            cid, KEM_X25519_HKDF_SHA256, KDF_HKDF_SHA256, AEAD_AES_128_GCM, keys["public_key"]
        )
        return cls(HpkeKeypair(config, keys["private_key"]), token)

    @classmethod
    def from_text(cls, text: str, name: str = "credential") -> CollectorCredential:
        """Parse a credential file's text (see :meth:`from_json`)."""
        try:
            obj = json.loads(text)
        except ValueError:
            raise ParameterError(name, "(hidden)", "a JSON collector credential") from None
        return cls.from_json(obj, name)
