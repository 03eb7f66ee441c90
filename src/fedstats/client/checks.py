"""What a device checks before it connects: the server URL, its key files, the CA, and why a connection failed.

Each problem is one :class:`~fedstats.errors.FedstatsError` naming the user's parameter (the CLI prints one
``error:`` line): a plain ``http://`` URL beyond loopback, a private key others can read, a key that is
not the certified one, a CA file that is not PEM; :func:`_connect_failure` says why the server was never
reached (a TLS failure, an unknown host, a refused connection, a clock that makes the server's
certificate look not yet valid or expired).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from fedstats.errors import FedstatsError, ParameterError, SecurityError
from fedstats.wire import auth

__all__ = [
    "ConnectionFailed",
    "ca_context",
    "check_private_file",
    "check_server_url",
]


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

    The devices of one process that trust the same file share one context (keyed by the file's real
    path, modification time and size: an edited file gives a new one); a context loads its CA store
    once, about 20 ms of CPU, and is safe to share between connections and threads.

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
        path = os.path.realpath(ca)
        st = os.stat(path)
        return _ca_context(path, st.st_mtime_ns, st.st_size)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ParameterError(
            name, str(ca), f"a PEM CA certificate file ({getattr(exc, 'strerror', None) or exc})"
        ) from None


@functools.lru_cache(maxsize=16)
def _ca_context(path: str, _mtime_ns: int, _size: int) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=path)


@functools.lru_cache(maxsize=1)
def default_context() -> ssl.SSLContext:
    """The TLS context of a device given no CA: ``httpx``'s default (certifi's CA store), one per process.

    ``httpx.Client(verify=True)`` builds it again for every client: about 20 ms of CPU and the whole CA
    store in memory per device, for the devices a process simulates or hosts.

    Returns
    -------
    ssl.SSLContext
        The same object on every call in this process (verifying certificates and host names).
    """
    return httpx.create_ssl_context()


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
        lowered = text.lower()
        clock = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if "not yet valid" in lowered:  # the device's clock, not its CA: say so
            return (
                f"cannot connect to {url}: TLS failure: the server's certificate is not yet valid "
                f"by this device's clock ({clock} UTC): the device's clock is behind (set it, e.g. "
                "by NTP)"
            ), True
        if "certificate has expired" in lowered:
            return (
                f"cannot connect to {url}: TLS failure: the server's certificate has expired by "
                f"this device's clock ({clock} UTC): the device's clock is ahead, or the "
                "certificate is out of date"
            ), True
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
