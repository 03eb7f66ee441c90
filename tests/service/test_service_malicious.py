"""Real device processes against a malicious server over HTTP: every attack is refused.

The devices are ``fedstats client run`` processes; the server they talk to is
:class:`malicious_proxy.MaliciousProxy` in front of a real ``fedstats server``: it forwards their signed
requests and rewrites the answers of the run it attacks (one attack per run). Each attack must be refused
by every device (its log says so for that run), the devices must send nothing at the attacked stage (the
journal holds no message of theirs there), and the run must abort without a result. The proxy rewrites
every answer that carries the attacked data (:data:`malicious_proxy.CARRIERS`); the test checks that each
attack was delivered before it checks the abort, and that no answer carried anything the proxy could not
read (a new carrier would otherwise let an attack pass undelivered and the run complete).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import func, select

from fedstats.service.store import open_store
from fedstats.service.store.tables import SecureMessage
from malicious_proxy import ATTACKS, CARRIERS, MaliciousProxy
from service_helpers import Deployment, wait_run

N_DEV = 5
N = 60
WHERE = {  # attack -> (round, stage) at which the devices must stop sending
    "parameter_tampering": (0, 0),
    "graph_choice": (0, 0),
    "key_substitution": (0, 0),
    # the certificates ride on the answer to the key advertisement (stage 0: public keys, nothing
    # secret); a device checks them before its shares (stage 1), the first secret it sends
    "sybil_certificate": (0, 1),
    "seed_grinding": (0, 0),
    "oversized_message": (0, 1),
    "replay_or_forgery": (1, 1),
    "inconsistent_dropout_claims": (0, 4),
}


def test_every_attack_of_a_malicious_server_is_refused_by_real_devices(
    production: Deployment, tmp_path: Path
) -> None:
    assert set(WHERE) == set(ATTACKS)
    rng = np.random.default_rng(4)
    x = rng.integers(0, 3, N)
    y = (x + rng.integers(0, 2, N)) % 2
    shards = []
    for i, part in enumerate(np.array_split(np.arange(N), N_DEV)):
        p = tmp_path / f"d{i}.csv"
        pd.DataFrame({"x": x[part], "y": y[part]}).to_csv(p, index=False)
        shards.append(p)
    with MaliciousProxy(production.url, production.certs["ca"]) as proxy:
        procs = [
            production.start_client(
                f"victim-{i}",
                p,
                "--allow-non-private",
                # every attack is a run of the same exact task, and most abort after the reveal: the
                # devices consent to that many (the defaults would stop them after one exact run of
                # the task and analyst, and after two aborted runs)
                "--max-exact-runs-per-task",
                str(len(ATTACKS)),
                "--max-exact-runs-per-analyst",
                str(len(ATTACKS)),
                "--max-aborted-runs",
                str(len(ATTACKS)),
                "--min-session-size",  # sessions of N_DEV = 5, below the default floor of 10
                str(N_DEV),
                "--runs",
                str(len(ATTACKS)),
                "--max-seconds",
                "400",
                url=proxy.url,
            )
            for i, p in enumerate(shards)
        ]
        runs: dict[str, str] = {}
        try:
            with production.admin() as a:
                for attack in ATTACKS:
                    task = {
                        "analysis": "fed-chi2",
                        "params": {"shape": [3, 2], "encoding_size": 20},
                        "privacy": {"epsilon": None, "population": "default"},
                        "cohort_size": N_DEV,  # devices
                        "min_clients": N_DEV // 2,
                        "max_records_per_client": N // N_DEV,
                        "deadlines": {"checkin": 60.0, "round": 4.0},
                        "secure_aggregation": {"max_session": N_DEV},
                        "label": f"attack {attack} {time.time()}",
                    }
                    r = a.post("/v1/admin/tasks", json=production.sign(task))
                    assert r.status_code == 201, r.text
                    r = a.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]})
                    run_id = r.json()["run_id"]
                    proxy.attacks[run_id] = attack
                    runs[attack] = run_id
                    view = wait_run(a, run_id, timeout=120)
                    # delivered (a run the attack never reached completes: that tests nothing)
                    assert proxy.tampered.get(attack, 0) > 0, (
                        attack,
                        view["status"],
                        proxy.unchecked,
                    )
                    assert view["status"] == "aborted", (attack, view)
                    assert view["result"] is None
        finally:
            for proc in procs:
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    assert set(proxy.tampered) == set(ATTACKS)  # every attack was actually delivered
    assert proxy.unchecked == set()  # and no answer carried data the proxy has no rewrite for
    assert {c for _, c in proxy.delivered} <= set(CARRIERS)
    logs = [(production.root / f"client-victim-{i}.log").read_text() for i in range(N_DEV)]
    store = open_store(production.db)
    try:
        with store.session() as s:
            for attack, run_id in runs.items():
                rnd, stage = WHERE[attack]
                for log in logs:  # every device refused this run's attack
                    assert any(
                        run_id in line and ("left secure session" in line or "refused run" in line)
                        for line in log.splitlines()
                    ), (attack, log[-2000:])
                sent = s.execute(
                    select(func.count())
                    .select_from(SecureMessage)
                    .where(
                        SecureMessage.run_id == run_id,
                        SecureMessage.round_index == rnd,
                        SecureMessage.stage == stage,
                        SecureMessage.direction == "up",
                    )
                ).scalar_one()
                assert sent == 0, attack
    finally:
        store.close()
