"""Signed tasks (fedstats.wire.tasks): what a device and the server accept, and what they refuse.

An analyst certificate chained to the pinned authority, for the task's population, unexpired, and a
signature over the task's canonical bytes: anything else is a :class:`SecurityError` naming the reason.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fedstats.cli.app import app
from fedstats.errors import ParameterError, SecurityError
from fedstats.wire import auth
from fedstats.wire.enrollment import init_authority, issue_analyst, issue_identity, load_analyst
from fedstats.wire.tasks import TASK_DOMAIN, normalize_task, sign_task, task_id, verify_task

TASK: dict[str, Any] = {
    "analysis": "bitpushing-mean",
    "params": {"column": "value", "low": 0.0, "high": 1.0, "method": "weighted"},
    "privacy": {"epsilon": 1.0, "population": "clinic"},
    "cohort_size": 100,
}


@pytest.fixture()
def authority(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    pub = init_authority(tmp_path / "authority")
    analyst = issue_analyst(tmp_path / "authority", "ana", ["clinic"], tmp_path / "ana.json")
    return tmp_path / "authority", pub, analyst


def test_a_signed_task_verifies_and_is_its_normalized_form(
    authority: tuple[Path, str, dict[str, Any]],
) -> None:
    _, pub, analyst = authority
    env = sign_task(TASK, analyst)
    assert set(env) == {"task", "certificate", "signature"}
    task = verify_task(env, pub, "clinic")
    # the task as normalized, carrying its certificate's not_after; normalizing is idempotent
    cert_end = env["certificate"]["body"]["not_after"]
    assert task == normalize_task({**TASK, "not_after": cert_end}) == normalize_task(task)
    assert task_id(task) == task_id(env["task"])
    # the signature is domain-separated: the same key's signature of the bare bytes does not verify
    key = auth.private_key_from_hex(analyst["private_key"])
    bare = dict(env, signature=key.sign(json.dumps(task).encode()).hex())
    with pytest.raises(SecurityError, match="does not verify"):
        verify_task(bare, pub)
    assert TASK_DOMAIN.startswith(b"fedstats-task")


def test_every_broken_link_of_the_chain_is_refused(
    authority: tuple[Path, str, dict[str, Any]], tmp_path: Path
) -> None:
    folder, pub, analyst = authority
    env = sign_task(TASK, analyst)
    cases: dict[str, tuple[Any, str]] = {}
    altered = copy.deepcopy(env)
    altered["task"]["cohort_size"] = 101
    cases["altered"] = (altered, "does not verify")
    cases["unsigned"] = ({"task": env["task"]}, "signed envelope")
    cases["not an object"] = ("garbage", "signed envelope")
    other = init_authority(tmp_path / "other")
    assert other != pub
    forged = sign_task(
        TASK, issue_analyst(tmp_path / "other", "eve", ["clinic"], tmp_path / "e.json")
    )
    cases["foreign authority"] = (forged, "untrusted authority")
    device = issue_identity(folder, "dev", "clinic", tmp_path / "dev.json")
    as_device = dict(env, certificate=device["certificate"])
    cases["device certificate"] = (as_device, "not a analyst certificate|malformed analyst")
    swapped = copy.deepcopy(env)  # the certificate's populations widened after signing
    swapped["certificate"]["body"]["populations"] = ["clinic", "everyone"]
    cases["edited certificate"] = (swapped, "bad signature")
    short = issue_analyst(folder, "old", ["clinic"], tmp_path / "old.json", valid_days=0.0001)
    expired = sign_task(TASK, short)
    for name, (envelope, why) in cases.items():
        with pytest.raises(SecurityError, match=why):
            verify_task(envelope, pub, "clinic")
        assert name
    with pytest.raises(SecurityError, match="expired"):
        verify_task(expired, pub, now=time.time() + 60)
    # the task must address the verifier's population, and the analyst must cover it
    with pytest.raises(SecurityError, match="not 'other'"):
        verify_task(env, pub, "other")
    elsewhere = dict(TASK, privacy={"epsilon": 1.0, "population": "elsewhere"})
    with pytest.raises(SecurityError, match="does not cover"):
        sign_task(elsewhere, analyst)
    # a task that is signed but not in normalized form (a default left out) is refused: its content,
    # not its signature (HTTP 422, not 403)
    key = auth.private_key_from_hex(analyst["private_key"])
    raw = dict(TASK)
    from fedstats.wire.encoding import canonical_bytes

    loose = {
        "task": raw,
        "certificate": analyst["certificate"],
        "signature": key.sign(TASK_DOMAIN + canonical_bytes(raw)).hex(),
    }
    with pytest.raises(ParameterError, match="normalized form"):
        verify_task(loose, pub)


def test_an_analyst_certificate_is_not_a_device_certificate(
    authority: tuple[Path, str, dict[str, Any]],
) -> None:
    _, _, analyst = authority
    with pytest.raises(SecurityError, match=r"malformed device certificate|not a device"):
        auth.Certificate.from_dict(analyst["certificate"])
    assert auth.Certificate.from_dict(analyst["certificate"], role="analyst").role == "analyst"


def test_distributed_noise_needs_secure_aggregation() -> None:
    het = {
        "analysis": "heterogeneity",
        "params": {"dim": 2},
        "privacy": {"epsilon": 1.0, "delta": 1e-6},
        "cohort_size": 50,
    }
    with pytest.raises(ParameterError, match="secure_aggregation"):
        normalize_task(het)
    ok = normalize_task({**het, "secure_aggregation": {"max_session": 50}})
    assert ok["secure_aggregation"] == {"max_session": 50, "min_session_size": 10}


def test_fedstats_enroll_analyst_writes_an_identity_that_signs(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["enroll", "init", "--authority", str(tmp_path / "a")])
    assert out.exit_code == 0, out.output
    pub = out.output.strip().splitlines()[-1]
    out = runner.invoke(
        app,
        [
            "enroll",
            "analyst",
            "ana",
            "--authority",
            str(tmp_path / "a"),
            "--population",
            "clinic",
            "--population",
            "lab",
            "--out",
            str(tmp_path / "ana.json"),
        ],
    )
    assert out.exit_code == 0, out.output
    ident = load_analyst(tmp_path / "ana.json")
    assert ident["certificate"]["body"]["populations"] == ["clinic", "lab"]
    assert (tmp_path / "ana.json").stat().st_mode & 0o077 == 0
    assert verify_task(sign_task(TASK, tmp_path / "ana.json"), pub, "clinic")["cohort_size"] == 100
