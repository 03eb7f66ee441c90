"""``fedstats secagg``: run and size the secure-aggregation protocol (Bell et al. 2020).

* ``fedstats secagg simulate --clients N --length L [--dropout P] [--dropout-stage STAGE] [--bits B]``
  runs the whole protocol in-process on random vectors and reports whether the server's sum is exact, the
  graph degree ``k`` and threshold ``t``, client and server compute, and bytes per client.
* ``fedstats secagg params --clients N [--dropout P] [--corrupt-fraction G]`` prints the parameters the
  finder chooses and their failure bounds.
"""

from __future__ import annotations

import math
import time
from typing import Annotated, Any

import numpy as np
import typer

from fedstats._resources import check_memory
from fedstats.cli._common import (
    FedstatsGroup,
    JsonOption,
    SeedOption,
    check_applies,
    emit,
    progress_for,
    state_from,
)
from fedstats.errors import ParameterError
from fedstats.secagg import (
    DROPOUT_STAGES,
    find_parameters,
    run_secure_aggregation,
    validate_parameters,
)
from fedstats.secagg.crypto import DTYPES
from fedstats.secagg.params import THREAT_MODELS, SecAggParameters

secagg_app = typer.Typer(
    cls=FedstatsGroup,
    help="Secure aggregation (Bell et al. 2020): simulate the protocol, choose its parameters.",
    no_args_is_help=True,
)

ClientsOption = Annotated[int, typer.Option("--clients", min=2, help="Number of clients n.")]
DropoutOption = Annotated[
    float,
    typer.Option("--dropout", min=0.0, max=0.99, help="Fraction of clients that drop out."),
]
CorruptOption = Annotated[
    float,
    typer.Option(
        "--corrupt-fraction",
        min=0.0,
        max=0.99,
        help="Fraction of clients colluding with the server.",
    ),
]
ThreatOption = Annotated[
    str,
    typer.Option(
        "--threat-model",
        help="Server model: malicious (default; signed, consistency-checked protocol), "
        "semi-malicious or semi-honest. See docs/secagg.md for the attacks each stops.",
    ),
]
SigmaOption = Annotated[
    float, typer.Option("--sigma", help="Security parameter (failure 2^-sigma).")
]
EtaOption = Annotated[float, typer.Option("--eta", help="Correctness parameter (failure 2^-eta).")]


PARAMS_BYTES_PER_CLIENT = 24
"""Peak memory of the parameter search per client (measured: 10^8 clients peak at about 2.5 GB)."""


def _params(
    n: int,
    *,
    dropout: float,
    corrupt: float,
    threat: str,
    sigma: float,
    eta: float,
    k: int | None,
    t: int | None,
) -> SecAggParameters:
    if threat not in THREAT_MODELS:
        raise ParameterError("--threat-model", threat, "one of " + ", ".join(THREAT_MODELS))
    if (k is None) != (t is None):
        raise ParameterError("--k/--t", (k, t), "both or neither")
    if k is not None and t is not None:
        try:
            return validate_parameters(
                n,
                k,
                t,
                corrupt_fraction=corrupt,
                dropout_rate=dropout,
                sigma=sigma,
                eta=eta,
                threat_model=threat,
            )
        except ParameterError as exc:
            name = f"--{exc.name}" if exc.name in ("k", "t") else exc.name
            raise ParameterError(name, exc.value, exc.accepted) from exc
    check_memory(
        PARAMS_BYTES_PER_CLIENT * n,
        parameter="--clients",
        value=n,
        what="the search for the graph degree and threshold",
    )
    return find_parameters(
        n, corrupt_fraction=corrupt, dropout_rate=dropout, sigma=sigma, eta=eta, threat_model=threat
    )


def _param_payload(p: SecAggParameters) -> dict[str, Any]:
    return {
        "clients": p.n,
        "k": p.k,
        "t": p.t,
        "min_survivors": p.min_survivors,
        "corrupt_fraction": p.corrupt_fraction,
        "dropout_rate": p.dropout_rate,
        "threat_model": p.threat_model,
        "sigma": p.sigma,
        "eta": p.eta,
        "log2_security_failure": p.security_bound,
        "log2_correctness_failure": p.correctness_bound,
        "stops": list(p.stops),
    }


@secagg_app.command("simulate")
def simulate(
    ctx: typer.Context,
    clients: ClientsOption,
    length: Annotated[int, typer.Option("--length", min=1, help="Vector length L per client.")],
    dropout: DropoutOption = 0.0,
    dropout_stage: Annotated[
        str,
        typer.Option(
            "--dropout-stage",
            help="Stage before which the clients drop: advertise, share, masked_input, "
            "consistency, unmask, or random (each dropped client at a random stage).",
        ),
    ] = "random",
    bits: Annotated[int, typer.Option("--bits", help="Modulus width b: 16, 32 or 64.")] = 64,
    corrupt_fraction: CorruptOption = 0.05,
    threat_model: ThreatOption = "malicious",
    sigma: SigmaOption = 40.0,
    eta: EtaOption = 30.0,
    k: Annotated[int | None, typer.Option("--k", help="Override the graph degree.")] = None,
    t: Annotated[int | None, typer.Option("--t", help="Override the Shamir threshold.")] = None,
    json_flag: JsonOption = False,
    seed: SeedOption = None,
) -> None:
    """Run the protocol on random vectors; report exactness, k, t, compute time and bytes per client."""
    state = state_from(ctx, json_flag=json_flag, seed=seed)
    if bits not in DTYPES:
        raise ParameterError("--bits", bits, "one of 16, 32, 64")
    stages = (*DROPOUT_STAGES, "random")
    if dropout_stage not in stages:
        raise ParameterError("--dropout-stage", dropout_stage, "one of " + ", ".join(stages))
    check_applies(ctx, "dropout_stage", dropout > 0, "unset unless --dropout > 0 (nobody drops)")
    # every client's masked vector, its masks and the sums are held at once
    check_memory(
        DTYPES[bits]().itemsize * length * (clients + 4),
        parameter="--length",
        value=length,
        what=f"{clients} clients' vectors of length {length}",
    )
    n_drop = math.floor(dropout * clients)
    params = _params(
        clients,
        dropout=max(dropout, 0.1) if k is None else dropout,
        corrupt=corrupt_fraction,
        threat=threat_model,
        sigma=sigma,
        eta=eta,
        k=k,
        t=t,
    )
    rs = state.randomness
    rng = rs.generator("secagg", "simulate", "dropouts")
    who = np.asarray(rng.permutation(clients))[:n_drop]
    where = np.asarray(rng.integers(0, len(DROPOUT_STAGES), size=n_drop))
    drops: dict[str, set[int]] = {s: set() for s in DROPOUT_STAGES}
    for c, s in zip(who.tolist(), where.tolist(), strict=True):
        drops[dropout_stage if dropout_stage != "random" else DROPOUT_STAGES[s]].add(int(c))
    # Signed inputs whose sum over n clients cannot wrap modulo 2^bits.
    half = 2 ** (bits - 1 - math.ceil(math.log2(clients)) - 1)

    def inputs(i: int) -> np.ndarray:
        return np.asarray(
            rs.generator("secagg", "simulate", "input", i).integers(-half, half, size=length)
        )

    t0 = time.perf_counter()
    with progress_for(state) as bar:
        res = run_secure_aggregation(
            inputs, n=clients, bits=bits, params=params, dropouts=drops, randomness=rs, progress=bar
        )
    wall = time.perf_counter() - t0
    dtype = DTYPES[bits]
    want = np.zeros(length, dtype=dtype)
    for i in res.included:
        np.add(want, inputs(i).astype(dtype), out=want)
    active = res.client_seconds[res.client_seconds > 0]
    payload: dict[str, Any] = {
        "correct": bool(np.array_equal(res.total, want)),
        "clients": clients,
        "length": length,
        "bits": bits,
        "k": params.k,
        "t": params.t,
        "min_survivors": params.min_survivors,
        "included": len(res.included),
        "dropped": {s: len(v) for s, v in res.dropped.items()},
        "client_seconds": float(res.client_seconds.sum()),
        "client_seconds_per_client": float(active.mean()) if active.size else 0.0,
        "client_seconds_max": float(res.client_seconds.max()),
        "server_seconds": res.server_seconds,
        "bytes_per_client": res.bytes_per_client,
        "bytes_sent_per_client": float(res.bytes_sent.mean()),
        "wall_seconds": wall,
        "threat_model": params.threat_model,
        "stops": list(params.stops),
        "client_aborts": len(res.client_aborts),
        "rejected": len(res.rejected),
        "bytes_per_client_by_stage": {s: float(v.mean()) for s, v in res.stage_bytes.items()},
        "release_note": rs.release_note,
    }
    emit(state, payload)


@secagg_app.command("params")
def params_cmd(
    ctx: typer.Context,
    clients: ClientsOption,
    dropout: DropoutOption = 0.1,
    corrupt_fraction: CorruptOption = 0.05,
    threat_model: ThreatOption = "malicious",
    sigma: SigmaOption = 40.0,
    eta: EtaOption = 30.0,
    json_flag: JsonOption = False,
) -> None:
    """Graph degree k and threshold t for n clients (Bell et al. 2020), with their failure bounds."""
    state = state_from(ctx, json_flag=json_flag)
    p = _params(
        clients,
        dropout=dropout,
        corrupt=corrupt_fraction,
        threat=threat_model,
        sigma=sigma,
        eta=eta,
        k=None,
        t=None,
    )
    emit(state, _param_payload(p))


def register(app: typer.Typer) -> None:
    """Add the ``secagg`` group to the app."""
    app.add_typer(secagg_app, name="secagg")
