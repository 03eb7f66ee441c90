"""Benchmark: fedstats secure aggregation vs Flower's SecAgg+, same n, k, t, length and dropout.

Usage::

    python benchmarks/secagg.py [--quick] [--no-flower] [--flower-budget SECONDS]
        [--clients 100 1000] [--lengths 1000 10000 1000000] [--dropouts 0 0.1]
    python benchmarks/secagg.py --scaling 50 100 200 500 1000 2000 [--lengths 1000] [--reps 2]

Runs, in the same process run:

1. the full fedstats protocol (:func:`fedstats.secagg.run_secure_aggregation`: X25519, HKDF, AEAD, Shamir,
   AES-CTR masks, all messages serialized) in two threat models, ``"malicious"`` (Ed25519 identities, a
   signed roster, signed messages, the consistency check: five stages) and ``"semi-honest"`` (four
   stages), for n in {100, 1000}, lengths in {1e3, 1e4, 1e6} and dropout in {0, 10%} (clients dropping
   before their masked input, the costliest case for the server), with ``k``/``t`` from
   :func:`fedstats.secagg.find_parameters` (5% corrupt, tolerance max(dropout, 10%), sigma 40, eta 30;
   each model its own) and modulus 2^32; bytes per client are reported per stage;
2. Flower's SecAgg+ (``flwr`` in a separate virtualenv ``benchmarks/.venv-peers``, created here if missing):
   its real ``SecAggPlusWorkflow`` and ``secaggplus_mod`` driven in-process through a stub grid that
   delivers each message to the client's ``secaggplus_mod`` (no network, no serialization: this favours
   Flower), with ``num_shares = k + 1`` (Flower counts the client itself) and
   ``reconstruction_threshold = t``, ``modulus_range = 2^32``, and the same clients dropping before the
   masked-vector stage. Configurations whose Flower run would exceed the memory or time budget are
   skipped with the reason recorded;
3. mask-expansion throughput: the raw AES-256-CTR keystream of ``cryptography`` vs fedstats' mask
   expansion (keystream viewed as uint32/uint64) and mask accumulation, and Flower's ``pseudo_rand_gen``.

Compute is wall-clock time inside each party's code (single process, one party at a time). Results go to
``benchmarks/results/secagg.json`` (written atomically).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = HERE / ".venv-peers"
PEER_PY = PEERS / "bin" / "python"
RESULTS = HERE / "results" / "secagg.json"
SCALING = HERE / "results" / "secagg_scaling.json"
FLOWER_MEMORY_LIMIT = 4e9  # bytes of masked vectors Flower's server would hold at once


# ---------------------------------------------------------------------------------------------------
# Flower side (runs inside benchmarks/.venv-peers; imports only flwr and numpy)
# ---------------------------------------------------------------------------------------------------


def flower_peer(cfg: dict[str, Any]) -> dict[str, Any]:
    """Run Flower's SecAgg+ workflow + mod in-process through a stub grid; return timings."""
    import logging
    import random

    import numpy as np
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.client.mod.secure_aggregation.secaggplus_mod import secaggplus_mod
    from flwr.common import (
        Code,
        FitIns,
        FitRes,
        Status,
        ndarrays_to_parameters,
        parameters_to_ndarrays,
    )
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
    from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
    from flwr.compat.common import recorddict_compat as compat
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.secure_aggregation.secaggplus_workflow import SecAggPlusWorkflow

    logging.getLogger("flwr").setLevel(logging.ERROR)
    try:  # newer flwr builds message metadata from the identity of the running task
        from flwr.supercore.task_identity import TaskIdentity

        TaskIdentity.run_id = 1
        TaskIdentity.task_id = 1
        TaskIdentity.node_id = 0
    except ImportError:
        pass
    if cfg.get("throughput"):
        length = int(cfg["length"])
        seed = os.urandom(32)
        pseudo_rand_gen(seed, 2**32, [(1000,)])
        reps = int(cfg.get("reps", 5))
        t0 = time.perf_counter()
        for _ in range(reps):
            pseudo_rand_gen(seed, 2**32, [(length,)])
        dt = (time.perf_counter() - t0) / reps
        return {"pseudo_rand_gen_seconds": dt, "pseudo_rand_gen_MBps": length * 8 / dt / 1e6}

    n, length, k, t = int(cfg["n"]), int(cfg["length"]), int(cfg["k"]), int(cfg["t"])
    drop = set(int(i) + 1 for i in cfg["drop"])  # node ids are 1..n
    random.seed(int(cfg.get("seed", 0)))
    rng = np.random.default_rng(int(cfg.get("seed", 0)))
    inputs = {nid: rng.uniform(-1, 1, size=length) for nid in range(1, n + 1)}

    class Proxy:
        def __init__(self, node_id: int) -> None:
            self.node_id = node_id

    captured: dict[str, Any] = {}

    class Strategy:
        def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> Any:
            return [(Proxy(nid), FitIns(parameters, {})) for nid in range(1, n + 1)]

        def aggregate_fit(self, server_round: int, results: Any, failures: Any) -> Any:
            captured["parameters"] = results[0][1].parameters if results else None
            captured["n_results"] = len(results)
            return results[0][1].parameters if results else None, {}

    class Manager:
        def num_available(self) -> int:
            return n

    contexts = {nid: Context(0, nid, {}, RecordDict(), {}) for nid in range(1, n + 1)}
    timing = {"client": 0.0}

    def fit(msg: Message, ctxt: Context) -> Message:
        params = ndarrays_to_parameters([inputs[ctxt.node_id]])
        res = FitRes(Status(Code.OK, ""), params, 1, {})
        return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)

    from flwr.common.serde import message_from_proto, message_to_proto
    from flwr.proto.message_pb2 import Message as ProtoMessage

    sizes = {"bytes": 0}

    class StubGrid:
        """Delivers each message, serialized as Flower's protobuf, to the node's secaggplus_mod."""

        def send_and_receive(self, messages: Any, *, timeout: Any = None) -> list[Message]:
            replies = []
            for msg in messages:
                nid = msg.metadata.dst_node_id
                stage = msg.content.config_records[RECORD_KEY_CONFIGS][Key.STAGE]
                data = message_to_proto(msg).SerializeToString()  # server: encode
                if nid in drop and stage in (Stage.COLLECT_MASKED_VECTORS, Stage.UNMASK):
                    continue  # dropped before sending its masked vector
                t0 = time.perf_counter()
                incoming = message_from_proto(ProtoMessage.FromString(data))
                reply = secaggplus_mod(incoming, contexts[nid], fit)
                out = message_to_proto(reply).SerializeToString()
                timing["client"] += time.perf_counter() - t0
                sizes["bytes"] += len(data) + len(out)
                replies.append(message_from_proto(ProtoMessage.FromString(out)))  # server: decode
            return replies

    state = RecordDict()
    state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({"current_round": 1})
    state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
        ndarrays_to_parameters([np.zeros(length)]), True
    )
    ctx = LegacyContext(Context(0, 0, {}, state, {}), strategy=Strategy(), client_manager=Manager())  # type: ignore[arg-type]
    workflow = SecAggPlusWorkflow(num_shares=k + 1, reconstruction_threshold=t, max_weight=1.0)
    c0 = time.process_time()
    t0 = time.perf_counter()
    workflow(StubGrid(), ctx)  # type: ignore[arg-type]
    total = time.perf_counter() - t0
    cpu = time.process_time() - c0
    ok = False
    err = None
    if captured.get("parameters") is not None:
        agg = parameters_to_ndarrays(captured["parameters"])[0]
        alive = [nid for nid in range(1, n + 1) if nid not in drop]
        want = np.mean([inputs[nid] for nid in alive], axis=0)
        err = float(np.max(np.abs(agg - want)))
        ok = err < 1e-3
    return {
        "correct": ok,
        "max_abs_error": err,
        "client_seconds": timing["client"],
        "server_seconds": total - timing["client"],
        "total_seconds": total,
        "total_cpu_seconds": cpu,
        "bytes_per_client": sizes["bytes"] / n,
        "num_shares": k + 1,
        "reconstruction_threshold": t,
    }


# ---------------------------------------------------------------------------------------------------
# fedstats side
# ---------------------------------------------------------------------------------------------------


def ensure_peers() -> bool:
    """Create benchmarks/.venv-peers with flwr if missing; True when usable."""
    if PEER_PY.exists():
        ok = (
            subprocess.run([str(PEER_PY), "-c", "import flwr"], capture_output=True).returncode == 0
        )
        if ok:
            return True
    print("creating benchmarks/.venv-peers with flwr ...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(PEERS)], check=True)
    (PEERS / ".gitignore").write_text("*\n")
    res = subprocess.run([str(PEER_PY), "-m", "pip", "install", "-q", "flwr", "numpy"])
    return res.returncode == 0


def run_flower(cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run :func:`flower_peer` in the peers venv."""
    try:
        out = subprocess.run(
            [str(PEER_PY), str(Path(__file__).resolve()), "--flower-peer", json.dumps(cfg)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"skipped": f"timed out after {timeout:.0f} s"}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def flower_version() -> str | None:
    """The flwr version in the peers venv."""
    out = subprocess.run(
        [str(PEER_PY), "-c", "import flwr; print(flwr.__version__)"], capture_output=True, text=True
    )
    return out.stdout.strip() or None


def run_ours(
    n: int, length: int, dropout: float, bits: int, seed: int, threat_model: str = "malicious"
) -> dict[str, Any]:
    """Run the fedstats protocol in one threat model; returns timings, bytes and exactness."""
    import numpy as np

    from fedstats.randomness import RandomSource
    from fedstats.secagg import find_parameters, run_secure_aggregation

    params = find_parameters(n, dropout_rate=max(dropout, 0.1), threat_model=threat_model)
    n_drop = math.floor(dropout * n)
    drop_ids = list(range(0, n, max(1, n // max(n_drop, 1))))[:n_drop]
    half = 2 ** (bits - 2 - math.ceil(math.log2(n)))
    rs = RandomSource(seed)

    input_cpu = [0.0]

    def inputs(i: int) -> np.ndarray:
        c = time.process_time()
        x = np.asarray(rs.generator("in", i).integers(-half, half, size=length))
        input_cpu[0] += time.process_time() - c
        return x

    c0 = time.process_time()
    res = run_secure_aggregation(
        inputs,
        n=n,
        bits=bits,
        params=params,
        dropouts={"masked_input": drop_ids} if drop_ids else None,
        randomness=rs,
    )
    cpu = time.process_time() - c0 - input_cpu[0]  # generating the test inputs is not protocol work
    dtype = np.dtype(f"uint{bits}")
    want = np.zeros(length, dtype=dtype)
    for i in res.included:
        np.add(want, inputs(i).astype(dtype), out=want)
    return {
        "threat_model": threat_model,
        "k": params.k,
        "t": params.t,
        "drop": drop_ids,
        "correct": bool(np.array_equal(res.total, want)),
        "client_seconds": float(res.client_seconds.sum()),
        "client_seconds_per_client": float(res.client_seconds.sum() / n),
        "server_seconds": res.server_seconds,
        "total_seconds": float(res.client_seconds.sum()) + res.server_seconds,
        "total_cpu_seconds": cpu,
        "bytes_per_client": res.bytes_per_client,
        "bytes_per_client_by_stage": {st: float(v.mean()) for st, v in res.stage_bytes.items()},
        "signatures_verified": res.signatures_verified,
        "signature_cache_hits": res.signature_cache_hits,
    }


def throughput(length: int, reps: int) -> dict[str, Any]:
    """Raw AES-CTR keystream vs fedstats mask expansion and accumulation (MB/s of mask output)."""
    import numpy as np
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    from fedstats.secagg.crypto import add_mask, expand_mask

    out: dict[str, Any] = {"length": length}
    nbytes = 8 * length
    zeros = bytes(nbytes)
    buf = bytearray(nbytes + 15)

    def best(fn: Any) -> float:
        return timings[fn.__name__]

    def raw() -> None:
        Cipher(algorithms.AES(os.urandom(32)), modes.CTR(bytes(16))).encryptor().update_into(
            zeros, buf
        )

    def raw_alloc() -> None:
        Cipher(algorithms.AES(os.urandom(32)), modes.CTR(bytes(16))).encryptor().update(zeros)

    acc64 = np.zeros(length, dtype=np.uint64)
    acc32 = np.zeros(2 * length, dtype=np.uint32)
    out64 = np.empty(length, dtype=np.uint64)
    scratch = bytearray((1 << 18) + 15)

    def exp64_out() -> None:
        expand_mask(os.urandom(32), length, 64, out=out64)

    def exp64() -> None:
        expand_mask(os.urandom(32), length, 64)

    def exp32() -> None:
        expand_mask(os.urandom(32), 2 * length, 32)

    def add64() -> None:
        add_mask(acc64, os.urandom(32), sign=1, scratch=scratch)

    def add32() -> None:
        add_mask(acc32, os.urandom(32), sign=-1, scratch=scratch)

    fns = [raw, raw_alloc, exp64_out, exp64, exp32, add64, add32]
    # Interleaved repetitions, best of each: machine noise hits every variant alike.
    samples: dict[str, list[float]] = {f.__name__: [] for f in fns}
    for f in fns:
        f()
    for _ in range(reps):
        for f in fns:
            t0 = time.perf_counter()
            f()
            samples[f.__name__].append(time.perf_counter() - t0)
    timings = {name: min(v) for name, v in samples.items()}
    t_raw, t_raw_alloc = best(raw), best(raw_alloc)
    t_exp64_out, t_exp64, t_exp32 = best(exp64_out), best(exp64), best(exp32)
    t_add64, t_add32 = best(add64), best(add32)
    mb = nbytes / 1e6
    out.update(
        raw_aes_ctr_MBps=mb / t_raw,
        raw_aes_ctr_alloc_MBps=mb / t_raw_alloc,
        expand_mask_uint64_into_MBps=mb / t_exp64_out,
        expand_mask_uint64_MBps=mb / t_exp64,
        expand_mask_uint32_MBps=mb / t_exp32,
        add_mask_uint64_MBps=mb / t_add64,
        add_mask_uint32_MBps=mb / t_add32,
    )
    # Like for like: into an existing buffer vs the raw keystream into an existing buffer, and a fresh
    # array vs the raw keystream into fresh memory; add_mask (expand + accumulate) vs the raw keystream.
    out["expand_mask_into_slowdown_vs_raw"] = t_exp64_out / t_raw
    out["expand_mask_fresh_slowdown_vs_raw_alloc"] = t_exp64 / t_raw_alloc
    out["add_mask_slowdown_vs_raw"] = t_add64 / t_raw
    return out


def scaling(ns: list[int], length: int, dropout: float, reps: int) -> dict[str, Any]:
    """CPU of the malicious model as n grows (k and t from find_parameters at each n).

    Bell et al. 2020 give each client O(log n) neighbours; per client the work is k key agreements and
    key derivations, two Shamir splits into k shares of degree t - 1 (O(k t) field operations), O(k)
    signature checks and k + 1 masks of length L; the server reconstructs O(n) secrets from t shares
    (O(t^2) each) and removes O(n) masks. So the total is O(n (k t + k L)), and with k, t = O(log n)
    it is O(n log^2 n) at short vectors and O(n log n L) at long ones. ``exponent`` is the local slope
    of log CPU against log n; ``cpu_per_client_per_k`` and ``cpu_per_client_per_kt`` show which term
    dominates.
    """
    rows = []
    for n in ns:
        runs = [run_ours(n, length, dropout, 32, seed=n) for _ in range(reps)]
        best = min(runs, key=lambda r: r["total_cpu_seconds"])
        cpu = best["total_cpu_seconds"]
        k, t = best["k"], best["t"]
        rows.append(
            {
                "n": n,
                "k": k,
                "t": t,
                "correct": all(r["correct"] for r in runs),
                "total_cpu_seconds": cpu,
                "all_cpu_seconds": [r["total_cpu_seconds"] for r in runs],
                "client_seconds": best["client_seconds"],
                "server_seconds": best["server_seconds"],
                "cpu_per_client_ms": 1e3 * cpu / n,
                "cpu_per_client_per_k_us": 1e6 * cpu / n / k,
                "cpu_per_client_per_kt_us": 1e6 * cpu / n / (k * t),
                "signatures_verified": best["signatures_verified"],
                "signature_cache_hits": best["signature_cache_hits"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    for a, b in itertools.pairwise(rows):
        b["exponent"] = math.log(b["total_cpu_seconds"] / a["total_cpu_seconds"]) / math.log(
            b["n"] / a["n"]
        )
    first, last = rows[0], rows[-1]
    return {
        "benchmark": "secagg_scaling",
        "threat_model": "malicious",
        "length": length,
        "dropout": dropout,
        "bits": 32,
        "repetitions": reps,
        "rows": rows,
        "exponent_overall": math.log(last["total_cpu_seconds"] / first["total_cpu_seconds"])
        / math.log(last["n"] / first["n"]),
        "cpu_count": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def save(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    tp: dict[str, Any],
    flwr_version: str | None,
    *,
    complete: bool,
) -> None:
    """Write benchmarks/results/secagg.json atomically (also after every row, marked incomplete)."""
    import cryptography
    import numpy

    ratios = [r["speedup_total"] for r in rows if "speedup_total" in r]
    out = {
        "benchmark": "secagg",
        "complete": complete,
        "quick": bool(args.quick),
        "peer": "flwr SecAggPlusWorkflow + secaggplus_mod (stub grid, in-process, protobuf-serialized)",
        "flwr_version": flwr_version,
        "cryptography_version": cryptography.__version__,
        "numpy_version": numpy.__version__,
        "cpu_count": os.cpu_count(),
        "min_speedup_total": min(ratios) if ratios else None,
        "speedup_total_cpu": [r["speedup_total_cpu"] for r in rows if "speedup_total_cpu" in r],
        "rows": sorted(rows, key=lambda r: (r["n"], r["length"], r["dropout"], r.get("repeat", 0))),
        "mask_throughput": tp,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=1))
    os.replace(tmp, RESULTS)


def _arguments() -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small grid (n=100; n=1000 at length 1e3)")
    ap.add_argument("--no-flower", action="store_true", help="skip the Flower comparison")
    ap.add_argument(
        "--flower-budget",
        type=float,
        default=900.0,
        help="skip Flower runs projected to take longer",
    )
    ap.add_argument(
        "--flower-timeout", type=float, default=2400.0, help="kill a Flower run after this"
    )
    ap.add_argument(
        "--flower-max-n", type=int, default=None, help="skip Flower for more clients than this"
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows of an existing results file and run only the missing configurations",
    )
    ap.add_argument(
        "--throughput-only",
        action="store_true",
        help="re-measure only the mask throughput and update it in the existing results file",
    )
    ap.add_argument("--clients", type=int, nargs="+", help="n values (default 100 1000)")
    ap.add_argument("--lengths", type=int, nargs="+", help="L values (default 1e3 1e4 1e6)")
    ap.add_argument("--dropouts", type=float, nargs="+", help="dropout fractions (default 0 0.1)")
    ap.add_argument(
        "--output", type=Path, default=None, help="results file (default results/secagg.json)"
    )
    ap.add_argument(
        "--scaling",
        type=int,
        nargs="+",
        metavar="N",
        help="only measure the malicious model's CPU at these n (length from --lengths, default "
        "1000; dropout from --dropouts, default 0.1) into results/secagg_scaling.json",
    )
    ap.add_argument(
        "--reps", type=int, default=2, help="--scaling: runs per n (the least CPU kept)"
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run the whole grid this many times (rows carry 'repeat'; ratios stay within a repeat)",
    )
    ap.add_argument("--flower-peer", help=argparse.SUPPRESS)
    return ap.parse_args()


def _scaling_only(args: argparse.Namespace) -> None:
    """``--scaling``: the malicious model's CPU at the given n, into ``results/secagg_scaling.json``."""
    out = scaling(
        args.scaling,
        length=(args.lengths or [1000])[0],
        dropout=(args.dropouts or [0.1])[0],
        reps=args.reps,
    )
    target = args.output if args.output is not None else SCALING
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=1))
    os.replace(tmp, target)
    print(f"wrote {target}: exponent {out['exponent_overall']:.2f}")


def _throughput_only(args: argparse.Namespace) -> None:
    """``--throughput-only``: the mask throughput (and Flower's), updated in the existing results file."""
    tp = throughput(4_000_000, reps=15)
    if not args.no_flower and ensure_peers():
        tp["flower"] = run_flower({"throughput": True, "length": tp["length"], "reps": 5}, 600)
        if "pseudo_rand_gen_MBps" in tp["flower"]:
            tp["expand_mask_speedup_vs_flower"] = (
                tp["expand_mask_uint64_MBps"] / tp["flower"]["pseudo_rand_gen_MBps"]
            )
    print(json.dumps(tp, indent=1))
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"rows": []}
    old["mask_throughput"] = tp
    tmp = RESULTS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(old, indent=1))
    os.replace(tmp, RESULTS)


def main() -> None:
    """Entry point."""
    args = _arguments()
    if args.output is not None:
        globals()["RESULTS"] = args.output
    if args.flower_peer is not None:
        print(json.dumps(flower_peer(json.loads(args.flower_peer))))
        return

    if args.scaling:
        _scaling_only(args)
        return
    if args.throughput_only:
        _throughput_only(args)
        return
    use_flower = not args.no_flower and ensure_peers()
    flwr_version = flower_version() if use_flower else None
    # Mask throughput first: Flower's per-element mask cost feeds the run-time projection below.
    tp = throughput(1_000_000 if args.quick else 4_000_000, reps=5 if args.quick else 10)
    c_mask = 0.0
    if use_flower:
        tp["flower"] = run_flower(
            {"throughput": True, "length": tp["length"], "reps": 3}, timeout=600
        )
        if "pseudo_rand_gen_MBps" in tp["flower"]:
            c_mask = tp["flower"]["pseudo_rand_gen_seconds"] / tp["length"]
            tp["expand_mask_speedup_vs_flower"] = (
                tp["expand_mask_uint64_MBps"] / tp["flower"]["pseudo_rand_gen_MBps"]
            )
    print(json.dumps(tp, indent=1), flush=True)

    lengths = (1000, 10_000) if args.quick else (1000, 10_000, 1_000_000)
    lengths = tuple(args.lengths) if args.lengths else lengths
    grid = [(n, ln) for n in (args.clients or (100, 1000)) for ln in lengths]
    if args.quick and not (args.clients or args.lengths):
        grid = [(100, 1000), (100, 10_000), (1000, 1000)]
    dropouts = tuple(args.dropouts) if args.dropouts else (0.0, 0.1)
    bits = 32
    rows: list[dict[str, Any]] = []
    done: set[tuple[int, int, int, float]] = set()
    if args.resume and RESULTS.exists():
        rows = json.loads(RESULTS.read_text())["rows"]
        done = {(r.get("repeat", 0), r["n"], r["length"], r["dropout"]) for r in rows}
    # (n, dropout) -> (length, seconds) of the last Flower run. Flower's cost is a per-client crypto part
    # that does not depend on the length plus masks: project T(L) = T(L0) + (L - L0) n (k + 2) c_mask.
    flower_seen: dict[tuple[int, float], tuple[int, float]] = {}
    for rep, n, length in [(r, n, ln) for r in range(args.repeats) for n, ln in grid]:
        for d in dropouts:
            if (rep, n, length, d) in done:
                continue
            t0 = time.perf_counter()
            ours = run_ours(n, length, d, bits, seed=n + length)
            ours_wall = time.perf_counter() - t0
            semi = run_ours(n, length, d, bits, seed=n + length, threat_model="semi-honest")
            row: dict[str, Any] = {
                "repeat": rep,
                "n": n,
                "length": length,
                "dropout": d,
                "bits": bits,
                "k": ours["k"],
                "t": ours["t"],
                "fedstats": ours,
                "fedstats_semi_honest": semi,
                "malicious_over_semi_honest_cpu": ours["total_cpu_seconds"]
                / max(semi["total_cpu_seconds"], 1e-9),
            }
            if use_flower:
                flower_mem = 8.0 * n * length * 2
                projected = 0.0
                if (n, d) in flower_seen:
                    l0, t_prev = flower_seen[(n, d)]
                    projected = t_prev + (length - l0) * n * (ours["k"] + 2) * c_mask
                if flower_mem > FLOWER_MEMORY_LIMIT:
                    row["flower"] = {
                        "skipped": f"server would hold {flower_mem / 1e9:.0f} GB of masked vectors"
                    }
                elif args.flower_max_n is not None and n > args.flower_max_n:
                    row["flower"] = {
                        "skipped": f"--flower-max-n {args.flower_max_n}: about 30 min per Flower run "
                        "at n=1000 on this machine"
                    }
                elif args.quick and n >= 1000:
                    row["flower"] = {
                        "skipped": "--quick: Flower takes about 20 min per run at n=1000"
                    }
                elif projected > args.flower_budget:
                    row["flower"] = {
                        "skipped": f"projected {projected:.0f} s > budget {args.flower_budget:.0f} s"
                    }
                else:
                    cfg = {
                        "n": n,
                        "length": length,
                        "k": ours["k"],
                        "t": ours["t"],
                        "drop": ours["drop"],
                        "seed": 1,
                    }
                    fl = run_flower(cfg, timeout=args.flower_timeout)
                    row["flower"] = fl
                    if "total_seconds" in fl:
                        flower_seen[(n, d)] = (length, fl["total_seconds"])
                        row["speedup_total"] = fl["total_seconds"] / ours["total_seconds"]
                        row["speedup_total_cpu"] = (
                            fl["total_cpu_seconds"] / ours["total_cpu_seconds"]
                        )
                        row["speedup_client"] = fl["client_seconds"] / ours["client_seconds"]
                        row["speedup_server"] = fl["server_seconds"] / max(
                            ours["server_seconds"], 1e-9
                        )
                        row["speedup_total_cpu_semi_honest"] = (
                            fl["total_cpu_seconds"] / semi["total_cpu_seconds"]
                        )
                    elif "skipped" in fl:  # timed out: a lower bound for longer runs
                        flower_seen[(n, d)] = (length, args.flower_timeout)
            rows.append(row)
            fl_txt = ""
            if "speedup_total" in row:
                fl_txt = (
                    f" | flower client {row['flower']['client_seconds']:.2f} s server "
                    f"{row['flower']['server_seconds']:.2f} s | speedup x{row['speedup_total']:.1f}"
                )
            elif "flower" in row:
                fl_txt = f" | flower: {row['flower']}"
            print(
                f"n={n:5d} L={length:8d} drop={d:.0%} k={ours['k']} t={ours['t']} "
                f"malicious client {ours['client_seconds']:.2f} s server {ours['server_seconds']:.2f} s "
                f"({ours_wall:.1f} s wall) exact={ours['correct']} | semi-honest (k={semi['k']}) "
                f"client {semi['client_seconds']:.2f} s server {semi['server_seconds']:.2f} s "
                f"exact={semi['correct']}{fl_txt}",
                flush=True,
            )
            print(
                "  bytes/client by stage (malicious): "
                + ", ".join(f"{k} {v:.0f}" for k, v in ours["bytes_per_client_by_stage"].items()),
                flush=True,
            )
            save(args, rows, tp, flwr_version, complete=False)

    save(args, rows, tp, flwr_version, complete=True)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
