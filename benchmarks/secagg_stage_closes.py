"""CPU of the server's stage closes of one secure-aggregation session, stage by stage (issue 40).

Usage::

    python benchmarks/secagg_stage_closes.py [--clients 1000] [--length 1000] [--dropout 0.1]
        [--reps 3] [--output secagg_stage_closes]

One malicious-model session with the service's parameters
(:func:`fedstats.secagg.collusion.session_parameters`: ``n = 1,000`` gives ``k = 90``, ``t = 58``) is run
once in-process (:func:`fedstats.secagg.run_secure_aggregation`, a fixed session id, ``floor(dropout *
n)`` clients dropping before their masked input), and every client message it sends is recorded. Then a
fresh :class:`~fedstats.secagg.server.SecAggServer` (no verification cache: it checks every signature,
as the service's does) is fed the recorded messages stage by stage, as the run driver of the service
closes a stage (:func:`fedstats.service.domain.secure.advance_sessions`): ``receive_bytes`` of each
upload with its sender as the service journals it (parse, checks, the signatures other devices read), ``advance`` (the protocol's close), then the next stage's messages
serialized as journaled (``_sent(...).to_bytes()`` and its SHA-256 digest, as ``_store_down``). Each
part is timed with ``time.process_time``; the smallest of ``--reps`` replays is reported per stage, and
the replayed sum must equal the session's. The store (reading the uploads, inserting the messages) is
not in it.

Results go to ``benchmarks/results/<output>.json``. Run it with another tree's ``src`` first on
``PYTHONPATH`` to compare two versions of the server with the same command.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from typing import Any

import numpy as np

import fedstats
from _util import write_results
from fedstats.secagg import run_secure_aggregation
from fedstats.secagg.collusion import session_parameters
from fedstats.secagg.identity import SessionRoster
from fedstats.secagg.messages import AdvertiseKeys, SetupMessage, decode
from fedstats.secagg.server import SecAggServer
from fedstats.service.domain.secure import BITS, _sent, digest_of

CLOSES = ("advertise_keys", "share_keys", "masked_input", "consistency", "unmask")


def record(n: int, length: int, dropout: float) -> dict[str, Any]:
    """Run one session; return its roster, parameters, sum and every client message by stage tag."""
    params = session_parameters(n)
    ups: dict[int, list[bytes]] = {}
    roster: list[bytes] = []

    def channel(direction: str, _: int, data: bytes) -> bytes:
        if direction == "to_server":
            ups.setdefault(data[5], []).append(bytes(data))
        elif data[5] == SetupMessage.TAG and not roster:
            setup = decode(data)
            assert isinstance(setup, SetupMessage)
            roster.append(setup.roster)
        return data

    inputs = np.random.default_rng(1).integers(0, 2**20, size=(n, length)).astype(np.uint64)
    dropped = list(range(0, n, round(1 / dropout))) if dropout > 0 else []
    res = run_secure_aggregation(
        inputs,
        bits=BITS,
        params=params,
        dropouts={"masked_input": dropped},
        session=b"\x07" * 32,
        channel=channel,
    )
    return {
        "params": params,
        "roster": roster[0],
        "ups": ups,
        "total": res.total,
        "dropped": len(dropped),
    }


def _sender(message: Any) -> int:
    return int(message.client if isinstance(message, AdvertiseKeys) else message.sender)


def replay(session: dict[str, Any], length: int) -> dict[str, dict[str, float]]:
    """CPU seconds of each stage close: feeding the uploads, the protocol's close, serializing."""
    server = SecAggServer(
        session["params"],
        length=length,
        bits=BITS,
        roster=SessionRoster.from_bytes(session["roster"]),
    )
    out: dict[int, Any] = dict(server.setup())
    for i in list(out):
        digest_of(_sent(0, out.pop(i)).to_bytes())
    tags = sorted(session["ups"])
    # each upload's sender, as the service journals it with the device's authenticated index
    senders = {tag: [_sender(decode(data)) for data in session["ups"][tag]] for tag in tags}
    times: dict[str, dict[str, float]] = {}
    for stage, (name, tag) in enumerate(zip(CLOSES, tags, strict=True)):
        c0 = time.process_time()
        for data, sender in zip(session["ups"][tag], senders[tag], strict=True):
            server.receive_bytes(data, sender=sender)
        c1 = time.process_time()
        out = dict(server.advance())
        c2 = time.process_time()
        for i in list(out):
            digest_of(_sent(stage + 1, out.pop(i)).to_bytes())
        c3 = time.process_time()
        times[name] = {"feed": c1 - c0, "advance": c2 - c1, "serialize": c3 - c2}
    if not np.array_equal(server.result(), session["total"]):
        raise SystemExit("the replayed sum differs from the session's")
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--length", type=int, default=1000)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--output", default="secagg_stage_closes")
    args = ap.parse_args(argv)
    session = record(args.clients, args.length, args.dropout)
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.reps):
        gc.collect()
        for name, parts in replay(session, args.length).items():
            got = best.setdefault(name, dict(parts))
            for part, seconds in parts.items():
                got[part] = min(got[part], seconds)
    ms = {name: {k: round(v * 1e3, 1) for k, v in parts.items()} for name, parts in best.items()}
    total = round(sum(sum(p.values()) for p in ms.values()), 1)
    for name, parts in ms.items():
        print(f"{name:15s}" + "  ".join(f"{k} {v:7.1f} ms" for k, v in parts.items()))
    print(f"{'all closes':15s}{total:.1f} ms")
    p = session["params"]
    path = write_results(
        args.output,
        {
            "command": " ".join(["python", *sys.argv]),
            "fedstats_source": str(fedstats.__file__),
            "n": p.n,
            "k": p.k,
            "t": p.t,
            "length": args.length,
            "bits": BITS,
            "dropped_before_masked_input": session["dropped"],
            "reps": args.reps,
            "cpu_ms_by_close": ms,
            "cpu_ms_all_closes": total,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
