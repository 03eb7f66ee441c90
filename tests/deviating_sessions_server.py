"""A deviating aggregation server: ``fedstats server`` that chooses its secure sessions itself.

Run as ``python tests/deviating_server.py server --db ... --port ...`` (the arguments of ``fedstats
server``). It is the real server (the same HTTP API, store, journal, driver and session state machines),
except that for each task whose label is a key of the JSON file named by ``FEDSTATS_DEVIATE``, it does what
a malicious server operator would, with the attack named there:

* a *partition* attack replaces the round's sessions (:func:`fedstats.service.domain.secure.partition`): the
  server then builds, journals and serves real setup messages and rosters for the sessions it chose;
* a *certificates* attack rewrites the certificate list it serves for a session;
* a *cohort* attack publishes another commitment list than the check-ins gave (slots moved).

It holds no device's key and changes nothing else: the devices talking to it are unmodified.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Sessions = list[list[str]]


def _flat(d: Sessions) -> list[str]:
    return [m for s in d for m in s]


PARTITIONS: dict[str, Callable[[Sessions], Sessions]] = {
    # a session of the victim and one other device: n = 2 gives the victim's input exactly
    "two_members": lambda d: [_flat(d)[:2], _flat(d)[2:]],
    # {V, H1, H2} and {H1, H2} in the same round: V's input by subtraction
    "overlapping": lambda d: [d[0][:3], d[0][1:3]],
    # the derived sessions, and one more of the first derived session without its first member
    "overlapping_one_derived": lambda d: [*d, d[0][1:]],
    # the derived members, in another roster order (the first two swapped)
    "reordered": lambda d: [[s[1], s[0], *s[2:]] for s in d],
    # two devices swapped between the derived sessions
    "not_derived": lambda d: [[d[1][0], *d[0][1:]], [d[0][0], *d[1][1:]], *d[2:]],
    # one member more than derived (an oversized roster)
    "extra_member": lambda d: [[*d[0], d[1][0]], d[1][1:], *d[2:]],
    # sessions below the task's min_session_size (an honest server would abort the round)
    "below_minimum": lambda d: d,
}
CERTIFICATES: dict[str, Callable[[list[Any]], list[Any]]] = {
    # twenty times the session's certificates: far beyond what a device reads for its session
    "oversized_certificates": lambda certs: certs * 20,
    # one certificate more than the session has members
    "extra_certificate": lambda certs: [*certs, certs[0]],
}


def install(plan: Path) -> None:
    """Make this process's server deviate as ``plan`` (label -> attack) says."""
    from fedstats.service.domain import runs, secure, secure_devices
    from fedstats.service.domain.tasks import task_config
    from fedstats.wire import seeding

    honest_partition = secure.partition
    honest_certificates = secure_devices.certificates
    honest_list = secure_devices._commitment_list

    def attack_of(cfg: dict[str, Any]) -> str | None:
        got = json.loads(plan.read_text()).get(str(cfg.get("label")))
        return None if got is None else str(got)

    def partition(s: Any, run: Any, rec: Any, cfg: dict[str, Any]) -> Sessions:
        attack = attack_of(cfg)
        if attack not in PARTITIONS or rec.index != 0:
            return honest_partition(s, run, rec, cfg)
        derived = seeding.sessions_of(
            secure.cohort(s, run.id),
            bytes.fromhex(str(run.public_seed)),
            rec.index,
            (rec.lo, rec.hi),
            int(cfg["secure_aggregation"]["max_session"]),
            2,  # whatever the task's minimum
        )
        return PARTITIONS[attack](derived)

    def certificates(
        s: Any, run_id: str, index: int, number: int, client_id: str, indices: Any = None
    ) -> list[Any]:
        got = honest_certificates(s, run_id, index, number, client_id, indices)
        attack = attack_of(task_config(s, runs.load_run(s, run_id).task_id))
        return CERTIFICATES[attack](got) if attack in CERTIFICATES else got

    def commitment_list(s: Any, run: Any) -> tuple[list[list[Any]], str]:
        members, digest = honest_list(s, run)
        if attack_of(task_config(s, run.task_id)) != "moved_slots" or len(members) < 2:
            return members, digest
        # the first two members' slots exchanged, the list still a partition of [0, n)
        a, b = members[0], members[1]
        moved = [[b[0], b[1], b[2], 0, b[4], b[5]], [a[0], a[1], a[2], b[4], a[4], a[5]]]
        moved += members[2:]
        return moved, seeding.commitments_digest(
            run.id, [(c, m, start, n) for c, m, _, start, n, _ in moved], [r[5] for r in moved]
        )

    secure.partition = partition  # type: ignore[assignment]
    secure_devices._commitment_list = commitment_list  # type: ignore[assignment]
    secure_devices.certificates = certificates  # type: ignore[assignment]
    # the deviation is in what certificates() answers: no answer from the process's memory around it
    secure_devices.cached_certificates = lambda *a, **k: None  # type: ignore[assignment]


if __name__ == "__main__":
    install(Path(os.environ["FEDSTATS_DEVIATE"]))
    from fedstats.cli.app import main

    sys.argv = ["fedstats", *sys.argv[1:]]
    main()
