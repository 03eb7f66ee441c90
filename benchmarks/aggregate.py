"""The aggregate route against the per-client route, numpy's raw draws and the LDP peer packages.

In one run:

* ``aggregate``: time per run of the aggregate route (:class:`~fedstats.engine.aggregate.AggregateBackend`)
  at 10^7, 10^9 and 10^12 clients for the performance gap with M_R (Juarez & Korolova 2023, epsilon 1,
  ``measure_performance_gap`` over 74 rows resampled within each group, truth pass included) and adaptive
  bit pushing (Cormode & Markov 2021, Algorithm 2, randomized response, epsilon 1, 7-bit codes, values
  uniform in {0..127}, no truth pass). The protocol and the engine only: no CLI start-up, no data loading.
  Mean of ``--repeat`` runs after one warm-up run.
* ``per_client``: clients per CPU-second (``time.process_time``) of the serial per-client route for the
  same two analyses at 10^7 clients, against numpy drawing the same number of uniforms per client
  (``_util.numpy_raw_bernoulli_seconds``): M_R draws 4 per client (resampling index, GRR keep on the
  group, Harmony's sign, randomized response on it), bit pushing 3 (resampling index, bit choice,
  randomized response). Goal of issue 16: M_R <= 2.5x numpy, bit pushing <= 5x; the ratio is reported as
  measured. One untimed run at 10^5 clients first (imports, the allocation's first solve), then
  ``--per-client-runs`` timed runs, each after its numpy peer; the ratio is of the two minima (the
  machine may be shared; every run is kept).
* ``grr``: generalized randomized response over k = 16 categories at 10^6 clients (epsilon 1): pure-ldp's
  ``DEClient``/``DEServer`` and multi-freq-ldpy's ``GRR_Client``/``GRR_Aggregator_MI``, each called per client
  as their documentation shows (installed in ``benchmarks/.venv-peers-ldp``, created by this script when
  missing, never committed), beside fedstats' GRR as one engine round (one-hot reports) on the serial
  per-client route and on the aggregate route (one multinomial per distinct input).

Usage::

    python benchmarks/aggregate.py [--quick] [--repeat 20] [--no-peers] [--per-client-runs 3]
        [--parts aggregate,per_client,grr] [--name NAME]

``--quick``: per-client and numpy at 10^6 clients, the peers at 10^5. ``--parts``: run only some parts.
Results go to ``benchmarks/results/aggregate.json`` (``aggregate-quick.json`` with ``--quick``, or
``NAME.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import venv
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import numpy_raw_bernoulli_seconds, write_results
from fedstats.analyses.bitpushing import BitEncoding, estimate_mean
from fedstats.analyses.performance_gap import measure_performance_gap
from fedstats.engine import (
    ClientBatch,
    Engine,
    HistogramPopulation,
    ResampledPopulation,
    Round,
    SerialBackend,
)
from fedstats.engine.aggregate import AggregateBackend, multinomial
from fedstats.engine.rounds import InputHistogram
from fedstats.privacy.mechanisms import GeneralizedRandomizedResponse
from fedstats.randomness import RNG, RandomSource

EPSILON = 1.0
SEED = 1
BLOCK = 1 << 16
GRR_K = 16
PEER_VENV = Path(__file__).resolve().parent / ".venv-peers-ldp"
# pure-ldp imports scikit-learn and statsmodels (its RAPPOR server) without declaring them
PEER_REQUIREMENTS = ["pure-ldp", "multi-freq-ldpy", "scikit-learn", "statsmodels"]

PEER_SCRIPT = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np
values, k, eps = json.loads(sys.stdin.read())
out = {}

from pure_ldp.frequency_oracles.direct_encoding import DEClient, DEServer
client = DEClient(epsilon=eps, d=k, index_mapper=lambda x: x)
server = DEServer(epsilon=eps, d=k, index_mapper=lambda x: x)
c0, t0 = time.process_time(), time.perf_counter()
for v in values:
    server.aggregate(client.privatise(v))
est = [server.estimate(i) for i in range(k)]
out["pure-ldp"] = {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                   "estimate": [float(x) for x in est]}

from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Client, GRR_Aggregator_MI
c0, t0 = time.process_time(), time.perf_counter()
reports = [GRR_Client(v, k, eps) for v in values]
freq = GRR_Aggregator_MI(reports, k, eps)
out["multi-freq-ldpy"] = {"seconds": time.perf_counter() - t0,
                          "cpu_seconds": time.process_time() - c0,
                          "estimate": [float(x) * len(values) for x in freq]}
from importlib.metadata import version
out["versions"] = {p: version(p) for p in ("pure-ldp", "multi-freq-ldpy")}
print(json.dumps(out))
"""


# ---------------------------------------------------------------- the analyses


def _gap_rows() -> tuple[np.ndarray, np.ndarray]:
    """74 clients in two groups (as in benchmarks/performance_gap.py and scale.py)."""
    rng = np.random.default_rng(0)
    g = rng.choice(["F", "M"], 74, p=[49 / 74, 25 / 74])
    r = np.where(g == "M", rng.uniform(0.7, 1.0, 74), rng.uniform(0.5, 0.9, 74))
    return g, r


def run_gap(n: int, engine: Engine) -> float:
    """Performance gap with M_R over ``n`` resampled clients; the estimate."""
    g, r = _gap_rows()
    res = measure_performance_gap(g, r, mechanism="R", epsilon=EPSILON, n_clients=n, engine=engine)
    return float(res.gap)


def run_bitpushing(n: int, engine: Engine) -> float:
    """Adaptive bit pushing with randomized response over ``n`` clients uniform in {0..127}."""
    pop = ResampledPopulation({"value": np.arange(128, dtype=np.float64)}, n)
    res = estimate_mean(
        pop, BitEncoding(0, 127), method="adaptive", epsilon=EPSILON, engine=engine, truth=False
    )
    return float(res.estimate)


ANALYSES: dict[str, Callable[[int, Engine], float]] = {"gap": run_gap, "bitpushing": run_bitpushing}
UNIFORMS_PER_CLIENT = {"gap": 4, "bitpushing": 3}


# ---------------------------------------------------------------- fedstats' GRR as one round


def encode_grr(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Each client's GRR report as a one-hot row, int64 ``(batch.n, k)``."""
    k = int(params["k"])
    y = GeneralizedRandomizedResponse(epsilon=float(params["epsilon"]), k=k).randomize(
        batch.column("value"), rng
    )
    out = np.zeros((batch.n, k), dtype=np.int64)
    out[np.arange(batch.n), y] = 1
    return out


def aggregate_grr(hist: InputHistogram, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """The sum of the one-hot GRR reports: one multinomial per distinct input."""
    mech = GeneralizedRandomizedResponse(epsilon=float(params["epsilon"]), k=int(params["k"]))
    rows = mech.probabilities()[np.asarray(hist.column("value"), dtype=np.int64)]
    return multinomial(rng, hist.counts, rows).sum(axis=0)


def grr_values(n: int) -> np.ndarray:
    """``n`` category indices in [0, 16) with geometric-like weights (fixed, public)."""
    w = 0.7 ** np.arange(GRR_K)
    return np.random.default_rng(0).choice(GRR_K, size=n, p=w / w.sum())


def run_grr(values: np.ndarray, engine: Engine) -> np.ndarray:
    """Frequency estimates (counts) of one GRR round over ``values`` on ``engine``."""
    counts = np.bincount(values, minlength=GRR_K)
    pop = HistogramPopulation({"value": np.arange(GRR_K, dtype=np.int64)}, counts)
    rnd = Round(
        "grr",
        encode_grr,
        {"k": GRR_K, "epsilon": EPSILON},
        dim=GRR_K,
        bound=1,
        aggregate=aggregate_grr,
    )
    total = engine.sum_round(rnd, pop, 0).total
    mech = GeneralizedRandomizedResponse(epsilon=EPSILON, k=GRR_K)
    return np.asarray(mech.estimate_frequencies(total, values.size)) * values.size


def ensure_peer_venv() -> Path:
    """Create ``benchmarks/.venv-peers-ldp`` with pure-ldp and multi-freq-ldpy when missing."""
    py = PEER_VENV / "bin" / "python"
    probe = "import pure_ldp.frequency_oracles, multi_freq_ldpy"
    if py.exists() and subprocess.run([str(py), "-c", probe], capture_output=True).returncode == 0:
        return py
    print(f"creating {PEER_VENV} with {' '.join(PEER_REQUIREMENTS)} ...", file=sys.stderr)
    venv.EnvBuilder(with_pip=True, clear=not py.exists()).create(PEER_VENV)
    (PEER_VENV / ".gitignore").write_text("*\n")  # never committed
    subprocess.run([str(py), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS], check=True)
    return py


# ---------------------------------------------------------------- the three parts


def aggregate_part(repeat: int) -> list[dict[str, Any]]:
    """Time per run of the aggregate route at 10^7, 10^9 and 10^12 clients."""
    rows = []
    for name, fn in ANALYSES.items():
        for n in (10**7, 10**9, 10**12):
            engine = Engine(AggregateBackend(), RandomSource(SEED))
            fn(n, engine)  # warm-up (imports, caches)
            c0, t0 = time.process_time(), time.perf_counter()
            estimates = [
                fn(n, Engine(AggregateBackend(), RandomSource(SEED + i))) for i in range(repeat)
            ]
            seconds = (time.perf_counter() - t0) / repeat
            rows.append(
                {
                    "analysis": name,
                    "clients": n,
                    "runs": repeat,
                    "seconds_per_run": seconds,
                    "cpu_seconds_per_run": (time.process_time() - c0) / repeat,
                    "estimate_mean": float(np.mean(estimates)),
                }
            )
            print(f"aggregate {name} n={n:.0e}: {seconds * 1e3:.2f} ms/run", file=sys.stderr)
    return rows


def per_client_part(n: int, runs: int = 3) -> list[dict[str, Any]]:
    """Clients per CPU-second of the serial per-client route against numpy's raw uniforms.

    One untimed run at 10^5 clients, then ``runs`` timed runs, each after numpy's; the ratio is of the
    minima.
    """
    rows = []
    for name, fn in ANALYSES.items():
        k = UNIFORMS_PER_CLIENT[name]
        fn(10**5, Engine(SerialBackend(), RandomSource(SEED), block_size=BLOCK))  # warm-up
        numpy_cpus, cpus, walls = [], [], []
        for _ in range(runs):
            c0 = time.process_time()
            numpy_raw_bernoulli_seconds(n, (0.5,) * k, BLOCK)
            numpy_cpus.append(time.process_time() - c0)
            engine = Engine(SerialBackend(), RandomSource(SEED), block_size=BLOCK)
            c0, t0 = time.process_time(), time.perf_counter()
            fn(n, engine)
            cpus.append(time.process_time() - c0)
            walls.append(time.perf_counter() - t0)
        cpu, numpy_cpu = min(cpus), min(numpy_cpus)
        rows.append(
            {
                "analysis": name,
                "clients": n,
                "uniforms_per_client": k,
                "runs": runs,
                "cpu_seconds": cpu,
                "cpu_seconds_runs": cpus,
                "wall_seconds": min(walls),
                "clients_per_cpu_second": n / cpu,
                "numpy_cpu_seconds": numpy_cpu,
                "numpy_cpu_seconds_runs": numpy_cpus,
                "numpy_clients_per_cpu_second": n / numpy_cpu,
                "ratio_to_numpy": cpu / numpy_cpu,
                "goal_ratio": 2.5 if name == "gap" else 5.0,
            }
        )
        print(
            f"per-client {name}: {n / cpu:.3g} clients/CPU-s, {cpu / numpy_cpu:.2f}x numpy",
            file=sys.stderr,
        )
    return rows


def grr_part(n: int, peers: bool) -> dict[str, Any]:
    """GRR at ``n`` clients: the peers (per client, their documented calls) and fedstats' two routes."""
    values = grr_values(n)
    truth = np.bincount(values, minlength=GRR_K)
    out: dict[str, Any] = {"clients": n, "k": GRR_K, "epsilon": EPSILON, "rows": []}

    def add(name: str, seconds: float, cpu: float, est: Any) -> None:
        est = np.asarray(est, dtype=float)
        out["rows"].append(
            {
                "implementation": name,
                "seconds": seconds,
                "cpu_seconds": cpu,
                "clients_per_second": n / seconds,
                "max_abs_error_over_n": float(np.max(np.abs(est - truth)) / n),
            }
        )
        print(f"grr {name}: {seconds:.3g} s", file=sys.stderr)

    for route, backend in (
        ("fedstats per-client", SerialBackend()),
        ("fedstats aggregate", AggregateBackend()),
    ):
        engine = Engine(backend, RandomSource(SEED), block_size=BLOCK)
        c0, t0 = time.process_time(), time.perf_counter()
        est = run_grr(values, engine)
        add(route, time.perf_counter() - t0, time.process_time() - c0, est)
    if peers:
        py = ensure_peer_venv()
        res = subprocess.run(
            [str(py), "-c", PEER_SCRIPT],
            input=json.dumps([values.tolist(), GRR_K, EPSILON]),
            capture_output=True,
            text=True,
            check=True,
            timeout=3600,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        peer = json.loads(res.stdout)
        out["peer_versions"] = peer.pop("versions")
        for name, r in peer.items():
            add(name, r["seconds"], r["cpu_seconds"], r["estimate"])
    base = {r["implementation"]: r["seconds"] for r in out["rows"]}
    for r in out["rows"]:
        r["seconds_vs_fedstats_aggregate"] = r["seconds"] / base["fedstats aggregate"]
    return out


PARTS = ("aggregate", "per_client", "grr")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="10^6 per-client clients, peers at 10^5")
    ap.add_argument("--repeat", type=int, default=20, help="aggregate-route runs per size")
    ap.add_argument("--no-peers", action="store_true", help="skip pure-ldp and multi-freq-ldpy")
    ap.add_argument("--per-client-runs", type=int, default=3, help="timed per-client runs")
    ap.add_argument("--parts", default=",".join(PARTS), help="comma list of parts to run")
    ap.add_argument("--name", default=None, help="results file name (benchmarks/results/NAME.json)")
    args = ap.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    for p in parts:
        if p not in PARTS:
            ap.error(f"unknown part {p!r}; choose from {', '.join(PARTS)}")
    n_client = 10**6 if args.quick else 10**7
    n_grr = 10**5 if args.quick else 10**6
    data: dict[str, Any] = {
        "command": "python benchmarks/aggregate.py " + " ".join(sys.argv[1:]),
        "quick": args.quick,
        "epsilon": EPSILON,
        "seed": SEED,
        "load_average": os.getloadavg(),
    }
    if "aggregate" in parts:
        data["aggregate"] = aggregate_part(args.repeat)
    if "per_client" in parts:
        data["per_client"] = per_client_part(n_client, args.per_client_runs)
    if "grr" in parts:
        data["grr"] = grr_part(n_grr, not args.no_peers)
    data["load_average_after"] = os.getloadavg()
    name = args.name or ("aggregate-quick" if args.quick else "aggregate")
    path = write_results(name, data)
    print(path)


if __name__ == "__main__":
    main()
