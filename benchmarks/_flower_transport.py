"""Flower SecAgg+ over its real transport: a SuperLink and ``n`` SuperNodes on loopback (benchmark helper).

Run with the peers virtualenv's python (``benchmarks/.venv-peers``, which has ``flwr``)::

    .venv-peers/bin/python benchmarks/_flower_transport.py '{"n": 5, "k": 4, "t": 3,
        "lengths": [7, 50], "scratch": "/tmp/x", "timeout": 600}'

It writes a minimal Flower App into ``scratch`` (a ServerApp running ``SecAggPlusWorkflow`` with
``num_shares = k + 1`` and ``reconstruction_threshold = t``, as ``secagg.py``'s ``flower_peer``, one round per
vector length; a ClientApp ``ClientApp(mods=[secaggplus_mod])`` whose input is a vector drawn from a seed, the
node's ``partition-id`` and the length, so the ServerApp recomputes the expected mean), starts
``flower-superlink --insecure`` and ``n`` ``flower-supernode --insecure`` processes (subprocess isolation: each
spawns ``flower-superexec``, which spawns ``flwr-serverapp`` / ``flwr-clientapp`` processes), waits until every
SuperNode is registered, submits the run with ``flwr run``, and waits for the ServerApp's result file.

Measured: wall seconds from ``flwr run`` to the ServerApp's result (and the ServerApp's own per-round times);
CPU seconds (``utime + stime`` of each process plus ``cutime + cstime`` of its reaped children, from
``/proc``) of the SuperLink's process tree (SuperLink, SuperExec, ServerApp) and of all SuperNode trees, as
the difference between just before ``flwr run`` and the end; the peak of the summed RSS of all processes
(sampled every 0.5 s) and the SuperLink tree's. Everything is killed by process group on exit or timeout.
Prints one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fsbench"
version = "1.0.0"
description = "fedstats benchmark: SecAgg+ over Flower's transport"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "fedstats"

[tool.flwr.app.components]
serverapp = "fsbench.server_app:app"
clientapp = "fsbench.client_app:app"

[tool.flwr.app.config]
n = {n}
k = {k}
t = {t}
lengths = "{lengths}"
seed = {seed}
out = "{out}"
round-timeout = {round_timeout}
"""

SERVER_APP = '''\
"""ServerApp: one SecAgg+ round (SecAggPlusWorkflow) per vector length; writes a JSON result."""

import json
import time

import numpy as np
from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat
from flwr.app import ConfigRecord
from flwr.server import ServerApp
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import SecAggPlusWorkflow

from fsbench.common import client_input

app = ServerApp()


class Proxy:
    def __init__(self, node_id):
        self.node_id = node_id


class Manager:
    def __init__(self, n):
        self.n = n

    def num_available(self):
        return self.n


class Strategy:
    def __init__(self, node_ids):
        self.node_ids = node_ids
        self.captured = {}

    def configure_fit(self, server_round, parameters, client_manager):
        return [(Proxy(nid), FitIns(parameters, {})) for nid in self.node_ids]

    def aggregate_fit(self, server_round, results, failures):
        self.captured["parameters"] = results[0][1].parameters if results else None
        self.captured["n_results"] = len(results)
        self.captured["n_failures"] = len(failures)
        return (results[0][1].parameters if results else None), {}


@app.main()
def main(grid, context):
    cfg = context.run_config
    n, k, t, seed = int(cfg["n"]), int(cfg["k"]), int(cfg["t"]), int(cfg["seed"])
    lengths = [int(x) for x in str(cfg["lengths"]).split(",")]
    out = {"started": time.time(), "rounds": []}
    t0 = time.perf_counter()
    deadline = time.monotonic() + 600
    node_ids = list(grid.get_node_ids())
    while len(node_ids) < n and time.monotonic() < deadline:
        time.sleep(0.2)
        node_ids = list(grid.get_node_ids())
    out["nodes_seen"] = len(node_ids)
    out["wait_nodes_seconds"] = time.perf_counter() - t0
    c0 = time.process_time()
    for rnd, length in enumerate(lengths, start=1):
        strategy = Strategy(sorted(node_ids))
        context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({"current_round": rnd})
        context.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
            ndarrays_to_parameters([np.zeros(length)]), True
        )
        ctx = LegacyContext(context, strategy=strategy, client_manager=Manager(n))
        workflow = SecAggPlusWorkflow(
            num_shares=k + 1,
            reconstruction_threshold=t,
            max_weight=1.0,
            timeout=float(cfg["round-timeout"]),
        )
        r0, rc0 = time.perf_counter(), time.process_time()
        workflow(grid, ctx)
        row = {
            "length": length,
            "seconds": time.perf_counter() - r0,
            "serverapp_cpu_seconds": time.process_time() - rc0,
            "n_results": strategy.captured.get("n_results"),
            "n_failures": strategy.captured.get("n_failures"),
            "correct": False,
            "max_abs_error": None,
        }
        if strategy.captured.get("parameters") is not None:
            agg = parameters_to_ndarrays(strategy.captured["parameters"])[0]
            want = np.mean([client_input(seed, pid, length) for pid in range(n)], axis=0)
            row["max_abs_error"] = float(np.max(np.abs(agg - want)))
            row["correct"] = bool(agg.shape == want.shape and row["max_abs_error"] < 1e-3)
        out["rounds"].append(row)
    out["serverapp_cpu_seconds"] = time.process_time() - c0
    out["finished"] = time.time()
    path = str(cfg["out"])
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    import os

    os.replace(path + ".tmp", path)
'''

CLIENT_APP = '''\
"""ClientApp: secaggplus_mod around a train handler returning the node's input vector."""

from flwr.app import Message
from flwr.client import ClientApp
from flwr.client.mod import secaggplus_mod
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat

from fsbench.common import client_input

app = ClientApp(mods=[secaggplus_mod])


@app.train()
def train(msg, context):
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    length = len(parameters_to_ndarrays(fitins.parameters)[0])
    pid = int(context.node_config["partition-id"])
    vec = client_input(int(context.run_config["seed"]), pid, length)
    res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([vec]), 1, {})
    return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)
'''

COMMON = '''\
"""Inputs both sides can compute."""

import numpy as np


def client_input(seed, pid, length):
    return np.random.default_rng([seed, pid, length]).uniform(-1, 1, size=length)
'''


def free_ports(count: int) -> list[int]:
    socks, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def write_app(cfg: dict[str, Any], scratch: Path) -> Path:
    app = scratch / "app"
    pkg = app / "fsbench"
    pkg.mkdir(parents=True, exist_ok=True)
    (app / "pyproject.toml").write_text(
        PYPROJECT.replace("{n}", str(cfg["n"]))
        .replace("{k}", str(cfg["k"]))
        .replace("{t}", str(cfg["t"]))
        .replace("{lengths}", ",".join(str(x) for x in cfg["lengths"]))
        .replace("{seed}", str(cfg.get("seed", 0)))
        .replace("{out}", str(scratch / "result.json"))
        .replace("{round_timeout}", str(float(cfg.get("round_timeout", cfg["timeout"]))))
    )
    (pkg / "__init__.py").write_text("")
    (pkg / "common.py").write_text(COMMON)
    (pkg / "server_app.py").write_text(SERVER_APP)
    (pkg / "client_app.py").write_text(CLIENT_APP)
    return app


# ---------------------------------------------------------------------------------------------------
# /proc accounting
# ---------------------------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, float, int] | None:
    """(ppid, cpu seconds incl. reaped children, rss bytes) of ``pid``, None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    ppid = int(fields[1])
    cpu = sum(int(x) for x in fields[11:15]) / CLK  # utime stime cutime cstime
    rss = int(fields[21]) * PAGE
    return ppid, cpu, rss


def _processes() -> dict[int, tuple[int, float, int]]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                out[int(entry)] = st
    return out


def _tree(procs: dict[int, tuple[int, float, int]], root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        if pid in procs:
            found.append(pid)
            stack.extend(children.get(pid, []))
    return found


def measure(roots: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Per group: cpu seconds (live processes' own + reaped children), rss bytes, process count."""
    procs = _processes()
    res = {}
    for name, pids in roots.items():
        members = [p for r in pids for p in _tree(procs, r)]
        res[name] = {
            "cpu": sum(procs[p][1] for p in members),
            "rss": sum(procs[p][2] for p in members),
            "procs": len(members),
        }
    return res


def _wait_ports(
    ports: list[int], deadline: float, started: list[subprocess.Popen[bytes]], abort: dict[str, str]
) -> None:
    for port in ports:
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if abort:
                raise RuntimeError(abort["reason"])
            if time.monotonic() > deadline:
                raise RuntimeError(f"port {port} not listening before the timeout")
            for p in started:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited with {p.returncode}")
            time.sleep(0.2)


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def _kill_all(started: list[subprocess.Popen[bytes]], marker: bytes) -> None:
    """SIGKILL every descendant, then the groups, then any orphan carrying ``marker`` in its environment.

    SuperExec processes start their own process groups, and outlive a SuperNode that exits early (they
    are then children of init), so the process tree alone does not find them.
    """
    procs = _processes()
    for pid in [d for p in started for d in _tree(procs, p.pid)]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for p in reversed(started):
        _kill_group(p)
    for pid in _processes():
        if pid == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------------


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    n, timeout = int(cfg["n"]), float(cfg["timeout"])
    scratch = Path(cfg["scratch"]).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    app = write_app(cfg, scratch)
    result_path = scratch / "result.json"
    result_path.unlink(missing_ok=True)
    logs = scratch / "logs"
    logs.mkdir(exist_ok=True)
    link_port, *node_ports = free_ports(1 + n)

    env = dict(os.environ)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env["FLWR_HOME"] = str(scratch / "home-superlink")
    env.pop("PYTHONPATH", None)
    env["FSBENCH_FLOWER_SCRATCH"] = str(scratch)  # marks our processes for the final cleanup
    marker = f"FSBENCH_FLOWER_SCRATCH={scratch}".encode()
    env["FLWR_TELEMETRY_ENABLED"] = "0"
    env["FLWR_UPDATE_CHECK"] = "0"
    started: list[subprocess.Popen[bytes]] = []

    def spawn(cmd: list[str], log: str, env_: dict[str, str]) -> subprocess.Popen[bytes]:
        f = open(logs / log, "wb")
        p = subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, env=env_, cwd=scratch, start_new_session=True
        )
        f.close()  # the child holds its own descriptor
        started.append(p)
        return p

    out: dict[str, Any] = {"n": n, "k": cfg["k"], "t": cfg["t"], "lengths": cfg["lengths"]}
    out["num_shares"] = int(cfg["k"]) + 1
    out["reconstruction_threshold"] = int(cfg["t"])
    t_start = time.monotonic()
    peak = {"total_rss": 0, "superlink_rss": 0, "supernodes_rss": 0}
    stop = threading.Event()
    roots: dict[str, list[int]] = {}

    min_avail = int(float(cfg.get("min_available_mib", 3072)) * 2**20)
    abort: dict[str, str] = {}

    def sampler() -> None:
        while not stop.wait(0.5):
            avail = _mem_available()
            peak["min_mem_available"] = min(peak.get("min_mem_available", avail), avail)
            if avail < min_avail and not abort:
                abort["reason"] = (
                    f"MemAvailable fell to {avail / 2**20:.0f} MiB (< {min_avail / 2**20:.0f} MiB): "
                    f"aborted before the kernel's OOM killer ({len(started) - 1} SuperNodes started)"
                )
                _kill_all(started, marker)
                return
            m = measure(roots)
            tot = sum(g["rss"] for g in m.values())
            peak["total_rss"] = max(peak["total_rss"], tot)
            peak["superlink_rss"] = max(peak["superlink_rss"], m["superlink"]["rss"])
            peak["supernodes_rss"] = max(peak["supernodes_rss"], m["supernodes"]["rss"])

    try:
        link = spawn(
            [
                str(BIN / "flower-superlink"),
                "--insecure",
                "--isolation",
                "subprocess",
                "--disable-runtime-dependency-installation",
                "--host",
                "127.0.0.1",
                "--port",
                str(link_port),
            ],
            "superlink.log",
            env,
        )
        roots["superlink"] = [link.pid]
        roots["supernodes"] = []
        threading.Thread(target=sampler, daemon=True).start()
        deadline = t_start + timeout
        _wait_ports([link_port], deadline, started, abort)
        nodes = []
        batch = int(cfg.get("start_batch", 10))
        for pid, port in enumerate(node_ports):
            env_n = dict(env)
            env_n["FLWR_HOME"] = str(scratch / f"home-node{pid}")
            nodes.append(
                spawn(
                    [
                        str(BIN / "flower-supernode"),
                        "--insecure",
                        "--superlink",
                        f"127.0.0.1:{link_port}",
                        "--isolation",
                        "subprocess",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--node-config",
                        f"partition-id={pid} num-partitions={n}",
                        "--max-retries",
                        "1000000",
                        "--max-wait-time",
                        str(int(timeout)),
                    ],
                    f"supernode{pid}.log",
                    env_n,
                )
            )
            roots["supernodes"] = [p.pid for p in nodes]
            if (pid + 1) % batch == 0:  # start in batches: 2 cores, each process imports flwr
                _wait_ports(node_ports[pid + 1 - batch : pid + 1], deadline, started, abort)
        # Flower CLI connection config
        home = scratch / "home-superlink"
        home.mkdir(exist_ok=True)
        (home / "config.toml").write_text(
            '[superlink]\ndefault = "bench"\n\n[superlink.bench]\n'
            f'address = "127.0.0.1:{link_port}"\ninsecure = true\n'
        )
        # wait until all SuperNodes are up (their Runtime API ports accept connections) and settled
        _wait_ports(node_ports, deadline, started, abort)
        time.sleep(float(cfg.get("settle", 3.0)))
        for p in started:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with {p.returncode} before the run")
        out["startup_seconds"] = time.monotonic() - t_start
        before = measure(roots)
        out["idle_processes"] = {k: v["procs"] for k, v in before.items()}
        out["idle_rss_mib"] = {k: v["rss"] / 2**20 for k, v in before.items()}
        t0 = time.monotonic()
        sub = subprocess.run(
            [str(BIN / "flwr"), "run", str(app), "--format", "json"],
            env=env,
            cwd=scratch,
            capture_output=True,
            timeout=max(10.0, deadline - time.monotonic()),
        )
        out["flwr_run_submit_seconds"] = time.monotonic() - t0
        if sub.returncode != 0:
            raise RuntimeError(
                f"flwr run failed ({sub.returncode}): {sub.stdout.decode()[-2000:]} "
                f"{sub.stderr.decode()[-2000:]}"
            )
        with open(logs / "flwr_run.out", "wb") as f:
            f.write(sub.stdout + sub.stderr)
        mid: dict[str, Any] = {}
        while not result_path.exists():
            if time.monotonic() > deadline:
                out["timed_out"] = True
                break
            if abort:
                raise RuntimeError(abort["reason"])
            if link.poll() is not None:
                raise RuntimeError(f"superlink exited with {link.returncode}")
            time.sleep(0.1)
            mid = measure(roots)
        t1 = time.monotonic()
        time.sleep(0.3)  # let the ServerApp process exit and be reaped
        after = measure(roots)
        if not after["superlink"]["cpu"] and mid:
            after = mid
        out["wall_seconds"] = t1 - t0
        out["superlink_serverapp_cpu_seconds"] = (
            after["superlink"]["cpu"] - before["superlink"]["cpu"]
        )
        out["supernodes_clientapps_cpu_seconds"] = (
            after["supernodes"]["cpu"] - before["supernodes"]["cpu"]
        )
        out["idle_cpu_seconds_at_submit"] = {k: v["cpu"] for k, v in before.items()}
        if result_path.exists():
            res = json.loads(result_path.read_text())
            out["serverapp"] = res
            out["serverapp_wall_seconds"] = res["finished"] - res["started"]
            out["correct"] = bool(res["rounds"]) and all(r["correct"] for r in res["rounds"])
        else:
            out["correct"] = False
    except Exception as exc:  # recorded, not raised: the caller wants one JSON line
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["correct"] = False
    finally:
        stop.set()
        out["peak_rss_mib"] = {k: v / 2**20 for k, v in peak.items() if k != "min_mem_available"}
        out["min_mem_available_mib"] = peak.get("min_mem_available", 0) / 2**20
        _kill_all(started, marker)
        if abort:
            out["error"] = abort["reason"]
            out["correct"] = False
        for p in started:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        out["log_errors"] = _log_errors(logs)
        out["total_seconds"] = time.monotonic() - t_start
        out["flower_version"] = _version()
        out["logs"] = str(logs)
    return out


LOG_PATTERNS = {
    "clientapp_exceptions": "ClientApp raised an exception",
    "heartbeat_disconnects": "send-node-heartbeat][UnexpectedError:ClientDisconnect]",
    "task_token_failures": "Runtime task-token authentication failed",
    "connection_retries": "Connection attempt failed",
}


def _log_errors(logs: Path) -> dict[str, int]:
    """Counts of known failure lines in the SuperLink's and SuperNodes' logs (overload symptoms)."""
    counts = dict.fromkeys(LOG_PATTERNS, 0)
    for path in logs.glob("*.log"):
        text = path.read_text(errors="replace")
        for key, pattern in LOG_PATTERNS.items():
            counts[key] += text.count(pattern)
    return counts


def _version() -> str | None:
    try:
        from importlib.metadata import version

        return version("flwr")
    except Exception:
        return None


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(f"signal {signum}")  # runs run()'s cleanup


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    cfg = json.loads(sys.argv[1])
    print(json.dumps(run(cfg)), flush=True)


if __name__ == "__main__":
    main()
