"""A TLS-terminating nginx in front of a plain-HTTP ``fedstats server`` on loopback, for benchmarks.

``docs/deploy.md`` ("Production TLS", *A terminating proxy*) allows TLS to end at a proxy or load
balancer in front of the server, with the server on loopback or a private network. This starts such a
proxy (Debian's ``nginx-light``: ``apt-get install -y nginx-light``) with the benchmark's development
certificate, forwarding every request to the server over kept-alive HTTP/1.1 connections, unbuffered
(long polls and held answers pass as they are), and measures its processes (master and workers): CPU
seconds from ``/proc/<pid>/stat`` and peak resident memory (``VmHWM``, summed over the processes: shared
pages counted once per process, an upper bound).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from _util import proc_cpu_seconds, proc_status_kib, reset_peak_rss

T = TypeVar("T")

_CONF = """\
worker_processes {workers};
pid {root}/nginx.pid;
error_log {root}/nginx-error.log warn;
daemon off;
worker_rlimit_nofile 65536;
{user}
events {{ worker_connections 16384; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    client_body_buffer_size 1m;
    client_max_body_size 64m;
    keepalive_timeout 600s;
    keepalive_requests 1000000;
    upstream fedstats {{
        server 127.0.0.1:{upstream};
        keepalive 4096;
        keepalive_timeout 600s;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {{
            proxy_pass http://fedstats;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Proto https;
            proxy_buffering off;
            proxy_read_timeout 900s;
            proxy_send_timeout 900s;
        }}
    }}
}}
"""


class NginxProxy:
    """nginx terminating TLS on ``127.0.0.1:port`` for a plain-HTTP server on ``127.0.0.1:upstream``.

    Parameters
    ----------
    root : Path
        Scratch folder for its configuration, pid file, log and temporary files.
    port, upstream : int
        The proxy's TLS port (devices connect there) and the server's plain-HTTP port.
    cert, key : Path
        The server certificate (chain) and its key, PEM.
    workers : int
        nginx worker processes (default 1).

    Raises
    ------
    RuntimeError
        If nginx is not installed, or does not start.
    """

    def __init__(
        self, root: Path, port: int, upstream: int, cert: Path, key: Path, workers: int = 1
    ) -> None:
        exe = shutil.which("nginx") or (
            "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
        )
        if exe is None:
            raise RuntimeError("--tls-proxy needs nginx (Debian: apt-get install -y nginx-light)")
        self.exe, self.root, self.port = exe, root, port
        root.mkdir(parents=True, exist_ok=True)
        self.conf = root / "nginx.conf"
        self.conf.write_text(
            _CONF.format(
                root=root,
                port=port,
                upstream=upstream,
                cert=cert,
                key=key,
                workers=workers,
                # a root master's workers would run as nobody, unable to use these folders
                user="user root;" if os.geteuid() == 0 else "",
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start nginx and wait until its workers run."""
        self.proc = subprocess.Popen(
            [self.exe, "-c", str(self.conf), "-p", str(self.root)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "nginx-stderr.log", "ab"),
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited {self.proc.returncode}: {self.log_tail()}")
            if self.pids()[1:]:
                return
            time.sleep(0.1)
        raise RuntimeError("nginx did not start its workers within 30 s")

    def pids(self) -> list[int]:
        """The master's pid, then its workers'."""
        if self.proc is None:
            return []
        master = self.proc.pid
        try:
            children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        except OSError:
            return []
        return [master, *map(int, children)]

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the master and its workers."""
        return sum(self._each(proc_cpu_seconds, 0.0))

    def _each(self, read: Callable[[int], T], gone: T) -> list[T]:
        """``read(pid)`` of each of its processes (``gone`` for one that ended meanwhile)."""
        out = []
        for pid in self.pids():
            try:
                out.append(read(pid))
            except (OSError, KeyError):
                out.append(gone)
        return out

    def rss_kib(self) -> int:
        """Resident memory of the master and its workers, KiB (summed)."""
        return sum(self._each(lambda pid: proc_status_kib(pid, "VmRSS"), 0))

    def peak_rss_kib(self) -> int:
        """Peak resident memory (``VmHWM``) of the master and its workers, KiB (summed)."""
        return sum(self._each(lambda pid: proc_status_kib(pid, "VmHWM"), 0))

    def reset_peak(self) -> None:
        """Reset each process's ``VmHWM`` to its current RSS (``clear_refs`` 5)."""
        self._each(reset_peak_rss, False)

    def stop(self) -> None:
        """Stop nginx (SIGQUIT, then SIGKILL after 10 s)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGQUIT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log_tail(self, lines: int = 10) -> str:
        """The last lines of nginx's error log."""
        text = ""
        for name in ("nginx-error.log", "nginx-stderr.log"):
            try:
                text += (self.root / name).read_text(errors="replace")
            except OSError:
                pass
        return "\n".join(text.splitlines()[-lines:])
