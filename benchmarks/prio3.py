"""Benchmark: fedstats.vdaf Prio3 vs the CFRG reference implementation (draft-irtf-cfrg-vdaf-20), same run.

Usage::

    python benchmarks/prio3.py [--n 10000] [--n-sumvec 1000] [--block 1000] [--ref-n 20]
        [--ref-src DIR] [--ref-python PATH] [--setup-ref GIT_DIR] [--no-ref]

Measures, per report, for two aggregators:

* **shard**: the client's work (encode, split, prove; ``shard_batch``);
* **prepare**: both aggregators' ``verify_init``, the combination into the verifier message
  (``verifier_shares_to_message``, which decides the proof) and both ``verify_next``; for fedstats also
  the aggregation of the accepted output shares.

for Prio3Count, Prio3Sum (max_measurement 255, i.e. 8 bits), Prio3SumVec (length 1000, max_measurement 1,
chunk_length 32) and Prio3Histogram (length 100, chunk_length 10). fedstats runs batches of ``--n``
reports (``--n-sumvec`` for SumVec), handed to the batch API in blocks of ``--block`` reports, with nonces
and random bytes drawn beforehand (as for the reference); the cost per report is the batch's total over its
size. The reference (``poc/vdaf_poc`` at tag ``draft-irtf-cfrg-vdaf-20``, in its own Python >= 3.12
virtualenv with ``pycryptodomex==3.23.0`` as its ``pyproject.toml`` pins) runs ``--ref-n`` reports one by
one (``--ref-n / 10`` for SumVec) in a subprocess started from this run just before fedstats' run of the
same variant (so both see the same machine load); its own output is what it verifies. Both sides report CPU seconds (``time.process_time``, the machine is shared) and wall seconds; the
speed-ups use CPU seconds.

``--setup-ref GIT_DIR`` creates the reference environment from a clone of
https://github.com/cfrg/draft-irtf-cfrg-vdaf (``git archive draft-irtf-cfrg-vdaf-20``) under
``/tmp/fedstats-vdaf-ref`` with ``python3.12``. Results: ``benchmarks/results/prio3.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import write_results
from fedstats.vdaf import Prio3, Prio3Count, Prio3Histogram, Prio3Sum, Prio3SumVec

REF_ROOT = Path("/tmp/fedstats-vdaf-ref")
REF_TAG = "draft-irtf-cfrg-vdaf-20"
CTX = b"fedstats benchmark"

REF_SCRIPT = r"""
import json, os, random, sys, time
sys.path.insert(0, sys.argv[1])
from vdaf_poc.vdaf_prio3 import Prio3Count, Prio3Histogram, Prio3Sum, Prio3SumVec

def run(vdaf, draw, n):
    ctx = b"fedstats benchmark"
    key = os.urandom(32)
    shard_cpu = prep_cpu = shard_wall = prep_wall = 0.0
    for _ in range(n):
        nonce, rand, m = os.urandom(16), os.urandom(vdaf.RAND_SIZE), draw()
        c0, w0 = time.process_time(), time.perf_counter()
        public, shares = vdaf.shard(ctx, m, nonce, rand)
        c1, w1 = time.process_time(), time.perf_counter()
        states, vshares = [], []
        for j in range(vdaf.SHARES):
            st, vs = vdaf.verify_init(key, ctx, j, None, nonce, public, shares[j])
            states.append(st)
            vshares.append(vs)
        msg = vdaf.verifier_shares_to_message(ctx, None, vshares)
        for j in range(vdaf.SHARES):
            vdaf.verify_next(ctx, states[j], msg)
        c2, w2 = time.process_time(), time.perf_counter()
        shard_cpu += c1 - c0; prep_cpu += c2 - c1; shard_wall += w1 - w0; prep_wall += w2 - w1
    return {"reports": n, "shard_cpu": shard_cpu / n, "prepare_cpu": prep_cpu / n,
            "shard_wall": shard_wall / n, "prepare_wall": prep_wall / n}

cfg = json.loads(sys.argv[2])
make = {
    "Prio3Count": (lambda: Prio3Count(2), lambda: random.randrange(2)),
    "Prio3Sum": (lambda: Prio3Sum(2, 255), lambda: random.randrange(256)),
    "Prio3SumVec": (lambda: Prio3SumVec(2, 1000, 1, 32), lambda: [random.randrange(2) for _ in range(1000)]),
    "Prio3Histogram": (lambda: Prio3Histogram(2, 100, 10), lambda: random.randrange(100)),
}
out = {name: run(make[name][0](), make[name][1], n) for name, n in cfg.items()}
print(json.dumps(out))
"""


def variants() -> dict[str, tuple[Prio3, Any, str]]:
    """name -> (vdaf, measurement sampler(rng, n), parameters in words)."""
    return {
        "Prio3Count": (Prio3Count(), lambda r, n: r.integers(0, 2, n), "measurements in {0, 1}"),
        "Prio3Sum": (
            Prio3Sum(max_measurement=255),
            lambda r, n: r.integers(0, 256, n),
            "max_measurement 255 (8 bits)",
        ),
        "Prio3SumVec": (
            Prio3SumVec(length=1000, max_measurement=1, chunk_length=32),
            lambda r, n: r.integers(0, 2, (n, 1000)),
            "length 1000, max_measurement 1, chunk_length 32",
        ),
        "Prio3Histogram": (
            Prio3Histogram(length=100, chunk_length=10),
            lambda r, n: r.integers(0, 100, n),
            "length 100, chunk_length 10",
        ),
    }


def bench_fedstats(vdaf: Prio3, sample: Any, n: int, block: int) -> dict[str, Any]:
    """Shard and prepare ``n`` reports in blocks; per-report CPU and wall seconds."""
    rng = np.random.default_rng(0)
    key = os.urandom(32)
    totals = {"shard_cpu": 0.0, "prepare_cpu": 0.0, "shard_wall": 0.0, "prepare_wall": 0.0}
    accepted = 0
    for start in range(0, n, block):
        m = min(block, n - start)
        meas = sample(rng, m)
        nonces = [os.urandom(16) for _ in range(m)]
        rands = [os.urandom(vdaf.RAND_SIZE) for _ in range(m)]
        c0, w0 = time.process_time(), time.perf_counter()
        batch = vdaf.shard_batch(CTX, meas, nonces, rands)
        c1, w1 = time.process_time(), time.perf_counter()
        inits = [
            vdaf.verify_init_batch(key, CTX, j, nonces, batch.public_shares, batch.input_shares[j])
            for j in range(vdaf.SHARES)
        ]
        msgs, ok = vdaf.verifier_shares_to_message_batch(CTX, [vs for _, vs in inits])
        aggs = []
        for st, _ in inits:
            out, ok_j = vdaf.verify_next_batch(st, msgs)
            aggs.append(vdaf.aggregate(out, ok_j))
        c2, w2 = time.process_time(), time.perf_counter()
        accepted += int(ok.sum())
        totals["shard_cpu"] += c1 - c0
        totals["prepare_cpu"] += c2 - c1
        totals["shard_wall"] += w1 - w0
        totals["prepare_wall"] += w2 - w1
    if accepted != n:
        raise RuntimeError(f"only {accepted} of {n} honest reports were accepted")
    return {"reports": n, "block": block, **{k: v / n for k, v in totals.items()}}


def find_python312() -> str:
    """A working ``python3.12`` (the pyenv shim fails unless 3.12 is selected, so try its versions too)."""
    candidates = [shutil.which("python3.12") or ""]
    candidates += sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.1[2-9]*/bin/python3"))
    for c in candidates:
        if (
            c
            and subprocess.run(
                [c, "-c", "import sys; assert sys.version_info >= (3, 12)"]
            ).returncode
            == 0
        ):
            return c
    raise SystemExit("no Python >= 3.12 found: the reference implementation needs one")


def setup_ref(git_dir: Path) -> None:
    """Extract the draft-20 reference code and create its Python 3.12 virtualenv under REF_ROOT."""
    if REF_ROOT.exists():
        shutil.rmtree(REF_ROOT)
    REF_ROOT.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(git_dir), "archive", REF_TAG], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "x", "-C", str(REF_ROOT)], input=archive, check=True)
    py312 = find_python312()
    subprocess.run([py312, "-m", "venv", str(REF_ROOT / ".venv")], check=True)
    pip = REF_ROOT / ".venv" / "bin" / "pip"
    subprocess.run([str(pip), "install", "-q", "pycryptodomex==3.23.0"], check=True)


def ref_commit(src: Path) -> str | None:
    """The commit the reference sources came from (git archive stores it in a pax header)."""
    marker = src.parent / ".commit"
    return marker.read_text().strip() if marker.exists() else None


def main() -> None:
    """Run both implementations and write benchmarks/results/prio3.json."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--n-sumvec", type=int, default=1_000)
    ap.add_argument("--block", type=int, default=1_000)
    ap.add_argument(
        "--ref-n", type=int, default=20, help="reference reports per variant (SumVec: n / 10)"
    )
    ap.add_argument("--ref-src", type=Path, default=REF_ROOT / "poc")
    ap.add_argument("--ref-python", type=Path, default=REF_ROOT / ".venv" / "bin" / "python")
    ap.add_argument("--setup-ref", type=Path, default=None, metavar="GIT_DIR")
    ap.add_argument("--no-ref", action="store_true")
    ap.add_argument("--no-write", dest="write", action="store_false", help="do not write the JSON")
    args = ap.parse_args()

    if args.setup_ref is not None:
        setup_ref(args.setup_ref)
    specs = variants()
    results: dict[str, Any] = {}
    ref: dict[str, Any] = {}
    if not args.no_ref and not (args.ref_python.exists() and args.ref_src.is_dir()):
        print(
            f"reference implementation not found ({args.ref_python}, {args.ref_src}): run with "
            "--setup-ref GIT_DIR (a clone of cfrg/draft-irtf-cfrg-vdaf) to compare; timing fedstats "
            "only and leaving benchmarks/results/prio3.json unchanged",
            flush=True,
        )
        args.no_ref = True
        args.write = False
    for name, (vdaf, sample, params) in specs.items():
        n = args.n_sumvec if name == "Prio3SumVec" else args.n
        if not args.no_ref:
            # the reference runs right before fedstats, variant by variant: both see the same load
            ref_n = max(args.ref_n // (10 if name == "Prio3SumVec" else 1), 2)
            proc = subprocess.run(
                [
                    str(args.ref_python),
                    "-c",
                    REF_SCRIPT,
                    str(args.ref_src),
                    json.dumps({name: ref_n}),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            ref.update(json.loads(proc.stdout.strip().splitlines()[-1]))
        ours = bench_fedstats(vdaf, sample, n, min(args.block, n))
        row: dict[str, Any] = {"parameters": params, "fedstats": ours}
        if name in ref:
            r = ref[name]
            row["reference"] = r
            row["speedup_cpu"] = {
                "shard": r["shard_cpu"] / ours["shard_cpu"],
                "prepare": r["prepare_cpu"] / ours["prepare_cpu"],
                "shard_plus_prepare": (r["shard_cpu"] + r["prepare_cpu"])
                / (ours["shard_cpu"] + ours["prepare_cpu"]),
            }
        results[name] = row
        line = f"{name:15s} fedstats shard {1e6 * ours['shard_cpu']:9.1f} us  prepare {1e6 * ours['prepare_cpu']:9.1f} us"
        if name in ref:
            s = row["speedup_cpu"]
            line += (
                f" | reference shard {1e6 * ref[name]['shard_cpu']:9.1f} us  prepare "
                f"{1e6 * ref[name]['prepare_cpu']:9.1f} us | x{s['shard']:.1f} / x{s['prepare']:.1f}"
                f" / x{s['shard_plus_prepare']:.1f}"
            )
        print(line, flush=True)
    meta = {
        "what": "seconds per report (CPU and wall), two aggregators; speed-ups on CPU seconds",
        "reference": None
        if args.no_ref
        else {
            "implementation": "cfrg/draft-irtf-cfrg-vdaf poc/vdaf_poc (Python reference)",
            "tag": REF_TAG,
            "commit": ref_commit(args.ref_src) or "5203892540a95e564dfa978345d16b40baf3c65d",
            "python": subprocess.run(
                [str(args.ref_python), "-c", "import platform; print(platform.python_version())"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip(),
            "reports_per_variant": {k: v["reports"] for k, v in ref.items()},
        },
        "load_average": os.getloadavg(),
        "command": "python " + " ".join(sys.argv),
    }
    if args.write:
        path = write_results("prio3", {"meta": meta, "results": results})
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
