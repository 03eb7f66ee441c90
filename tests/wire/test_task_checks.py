"""Tasks checked at signing (issue 42, items 1 and 3): what can never run is refused, naming the field.

Invalid content is a :class:`ParameterError` (HTTP 422) naming the field, whether the task is being
normalized, signed or verified; a :class:`SecurityError` (HTTP 403) is kept for signature, certificate,
population and expiry failures. Tasks expire (``not_after``) and never outlive the short-lived analyst
certificate they are signed under; a revoked analyst's certificate is never renewed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedstats.errors import ParameterError, SecurityError
from fedstats.wire import auth
from fedstats.wire.encoding import DuplicateKeyError, canonical_bytes, unique_keys
from fedstats.wire.enrollment import (
    ANALYST_VALID_DAYS,
    init_authority,
    issue_analyst,
    renew_analyst,
    revoke_analyst,
)
from fedstats.wire.tasks import (
    TASK_DOMAIN,
    TASK_KEYS,
    check_task_current,
    normalize_task,
    sign_task,
    verify_task,
)

TASK: dict[str, Any] = {
    "analysis": "bitpushing-mean",
    "params": {"column": "value", "low": 0.0, "high": 1.0, "method": "weighted"},
    "privacy": {"epsilon": 1.0, "population": "clinic"},
    "cohort_size": 20,
}
CHI2: dict[str, Any] = {
    "analysis": "fed-chi2",
    "params": {"x": "a", "y": "b", "shape": [2, 2]},
    "privacy": {"epsilon": None, "population": "clinic"},
    "cohort_size": 20,
}
PRIO3 = {"leader": "https://leader.example", "helper": "https://helper.example"}

INTEGER_FIELDS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    # field name in the error -> (base task, path of the field)
    "cohort_size": (TASK, ("cohort_size",)),
    "min_clients": (TASK, ("min_clients",)),
    "max_records_per_client": (TASK, ("max_records_per_client",)),
    "version": (TASK, ("version",)),
    "not_after": (TASK, ("not_after",)),
    "secure_aggregation.min_session_size": (
        {**CHI2, "secure_aggregation": {"max_session": 20}},
        ("secure_aggregation", "min_session_size"),
    ),
    "prio3.min_batch_size": ({**TASK, "prio3": dict(PRIO3)}, ("prio3", "min_batch_size")),
}


def _with(base: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(base))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def _refused(config: Any, field: str) -> str:
    with pytest.raises(ParameterError) as info:
        normalize_task(config)
    assert str(info.value).startswith(f"{field}="), str(info.value)
    return str(info.value)


@settings(max_examples=60, deadline=None)
@given(
    field=st.sampled_from(sorted(INTEGER_FIELDS)),
    value=st.floats(min_value=1.0, max_value=1e6).filter(lambda v: not v.is_integer()),
)
def test_a_non_integer_where_an_integer_is_required_is_refused_not_truncated(
    field: str, value: float
) -> None:
    base, path = INTEGER_FIELDS[field]
    _refused(_with(base, path, value), field)


@settings(max_examples=20, deadline=None)
@given(field=st.sampled_from(sorted(INTEGER_FIELDS)), value=st.sampled_from(["4", True, None]))
def test_text_booleans_and_null_are_not_integers(field: str, value: Any) -> None:
    base, path = INTEGER_FIELDS[field]
    if value is None and field in ("min_clients", "max_records_per_client", "version"):
        return  # null means "the default" for these
    if value is None and path[0] in ("prio3", "not_after"):
        return
    if value is None and path[-1] == "min_session_size":
        return
    _refused(_with(base, path, value), field)


def test_a_cohort_of_4_5_is_refused_and_4_0_is_the_integer_4() -> None:
    assert "cohort_size=4.5" in _refused({**TASK, "cohort_size": 4.5}, "cohort_size")
    four = normalize_task({**TASK, "cohort_size": 4.0, "min_clients": 4})
    assert four == normalize_task({**TASK, "cohort_size": 4, "min_clients": 4})
    assert type(four["cohort_size"]) is int


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.text(max_size=10).filter(lambda t: t.isprintable()),
    bad=st.sampled_from(
        ["\x00", "\n", "\r", "\t", "\x1b", "\x7f", "\x85", "\u202e", "\u200b", "\u2028"]
    ),
    after=st.text(max_size=10).filter(lambda t: t.isprintable()),
)
def test_control_and_format_characters_in_a_label_are_refused(
    before: str, bad: str, after: str
) -> None:
    label = before + bad + after
    message = _refused({**TASK, "label": label}, "label")
    assert f"U+{ord(bad):04X}" in message
    assert bad not in message  # the offending character is named, not echoed
    _refused({**TASK, "privacy": {**TASK["privacy"], "population": label}}, "privacy.population")


@settings(max_examples=30, deadline=None)
@given(label=st.text(max_size=40).filter(lambda t: t.isprintable()))
def test_printable_labels_are_kept(label: str) -> None:
    assert normalize_task({**TASK, "label": label})["label"] == label


@settings(max_examples=40, deadline=None)
@given(key=st.text(min_size=1, max_size=20).filter(lambda k: k not in TASK_KEYS))
def test_a_key_that_is_not_a_task_field_is_refused_naming_it(key: str) -> None:
    with pytest.raises(ParameterError) as info:
        normalize_task({**TASK, key: 1})
    assert repr(key)[1:-1] in str(info.value) or key in str(info.value)


def test_unknown_keys_in_privacy_and_deadlines_are_refused() -> None:
    # a misplaced epsilon is not silently dropped
    _refused({**TASK, "epsilon": 1.0}, "epsilon")
    _refused({**TASK, "privacy": {**TASK["privacy"], "epsilom": 2}}, "privacy.epsilom")
    _refused({**TASK, "deadlines": {"checkin": 60, "rounds": 60}}, "deadlines.rounds")


def test_floors_the_cohort_can_never_reach_are_refused() -> None:
    _refused({**TASK, "min_clients": 21}, "min_clients")
    # min_batch_size 1000 with a cohort of 20: no batch is ever collected
    _refused({**TASK, "prio3": {**PRIO3, "min_batch_size": 1000}}, "prio3.min_batch_size")
    # the default floor (10) is refused too when the cohort is smaller, naming the default
    msg = _refused({**TASK, "cohort_size": 5, "prio3": PRIO3}, "prio3.min_batch_size")
    assert "default is 10" in msg
    secure = {"max_session": 5000, "min_session_size": 4000}
    _refused({**CHI2, "secure_aggregation": secure}, "secure_aggregation.min_session_size")
    _refused(
        {**CHI2, "cohort_size": 5, "secure_aggregation": True},
        "secure_aggregation.min_session_size",
    )
    # at the cohort is fine
    ok = normalize_task({**TASK, "prio3": {**PRIO3, "min_batch_size": 20}})
    assert ok["prio3"]["min_batch_size"] == 20


@pytest.mark.parametrize(
    ("url", "accepted"),
    [
        ("https://leader.example", True),
        ("https://10.0.0.1:8443/dap", True),
        ("http://127.0.0.1:8080", True),  # development on loopback, as devices allow
        ("http://localhost:8080", True),
        ("http://[::1]:8080", True),
        ("http://leader.example", False),
        ("http://10.0.0.1:8080", False),
        ("http://127.0.0.1.example.org", False),
        ("ftp://leader.example", False),
        ("https://:8443", False),
        ("https://[::1", False),
    ],
)
def test_aggregator_urls_are_https_except_loopback(url: str, accepted: bool) -> None:
    config = {**TASK, "prio3": {**PRIO3, "leader": url}}
    if accepted:
        assert normalize_task(config)["prio3"]["leader"] == url.rstrip("/")
    else:
        _refused(config, "prio3.leader")


@settings(max_examples=40, deadline=None)
@given(
    obj=st.dictionaries(st.text(max_size=8), st.integers(), min_size=1, max_size=5),
    data=st.data(),
)
def test_a_key_given_twice_is_refused_whichever_it_is(obj: dict[str, int], data: Any) -> None:
    assert json.loads(json.dumps(obj), object_pairs_hook=unique_keys) == obj
    key = data.draw(st.sampled_from(sorted(obj)))
    text = json.dumps(obj)[:-1] + f", {json.dumps(key)}: 7}}"
    assert json.loads(text)[key] == 7  # what the plain parser does: the last wins, silently
    with pytest.raises(DuplicateKeyError, match="duplicate key"):
        json.loads(text, object_pairs_hook=unique_keys)


# -- signing, verifying, expiry, revocation -------------------------------------------------------


@pytest.fixture()
def analyst(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    pub = init_authority(tmp_path / "authority")
    ident = issue_analyst(tmp_path / "authority", "ana", ["clinic"], tmp_path / "ana.json")
    return tmp_path / "authority", pub, ident


def _signed_raw(ident: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    """``task`` signed as is (no normalization): what a careless or hostile signer would send."""
    key = auth.private_key_from_hex(ident["private_key"])
    return {
        "task": task,
        "certificate": ident["certificate"],
        "signature": key.sign(TASK_DOMAIN + canonical_bytes(task)).hex(),
    }


def test_signed_content_that_can_never_run_is_a_parameter_error_naming_the_field(
    analyst: tuple[Path, str, dict[str, Any]],
) -> None:
    _, pub, ident = analyst
    good = sign_task(TASK, ident)["task"]
    cases = {
        "cohort_size": {**good, "cohort_size": 4.5},
        "label": {**good, "label": "a\x00b"},
        "prio3.min_batch_size": {
            **good,
            "prio3": {**PRIO3, "noise": None, "min_batch_size": 1000},
        },
        "prio3.leader": {
            **good,
            "prio3": {
                **PRIO3,
                "leader": "http://leader.example",
                "noise": None,
                "min_batch_size": 10,
            },
        },
        "extra": {**good, "extra": 1},
    }
    for field, task in cases.items():
        with pytest.raises(ParameterError) as info:
            verify_task(_signed_raw(ident, task), pub, "clinic")
        assert str(info.value).startswith(f"{field}="), (field, str(info.value))
    # an envelope field besides task, certificate and signature: named, never ignored
    with pytest.raises(ParameterError, match=r"^envelope\.note="):
        verify_task({**sign_task(TASK, ident), "note": "x"}, pub, "clinic")
    # signature failures stay SecurityError (403): an altered valid task
    altered = sign_task(TASK, ident)
    altered["task"] = {**altered["task"], "cohort_size": 21}
    with pytest.raises(SecurityError, match="does not verify"):
        verify_task(altered, pub, "clinic")


def test_a_task_carries_not_after_and_expires(analyst: tuple[Path, str, dict[str, Any]]) -> None:
    _, pub, ident = analyst
    cert_end = int(ident["certificate"]["body"]["not_after"])
    now = time.time()
    assert now + (ANALYST_VALID_DAYS - 0.01) * 86400 < cert_end  # short-lived by default
    env = sign_task(TASK, ident)
    assert env["task"]["not_after"] == cert_end  # a task never outlives its certificate
    soon = sign_task({**TASK, "not_after": int(now) + 3600}, ident)
    assert verify_task(soon, pub, "clinic", now=now)["not_after"] == int(now) + 3600
    # devices (verify_task) refuse it once expired, as does the server's run start
    with pytest.raises(SecurityError, match="task expired"):
        verify_task(soon, pub, "clinic", now=now + 3601)
    with pytest.raises(SecurityError, match="task expired"):
        check_task_current(soon["task"], soon["certificate"], now=now + 3601)
    check_task_current(soon["task"], soon["certificate"], now=now + 3599)
    # a not_after beyond the certificate's, or already past, is refused at signing
    with pytest.raises(ParameterError, match=r"^not_after=.*certificate"):
        sign_task({**TASK, "not_after": cert_end + 1}, ident)
    with pytest.raises(ParameterError, match=r"^not_after=.*after now"):
        sign_task({**TASK, "not_after": int(now) - 1}, ident)


def test_a_legacy_task_without_not_after_dies_with_its_certificate(
    analyst: tuple[Path, str, dict[str, Any]],
) -> None:
    _, pub, ident = analyst
    task = normalize_task(TASK)  # signed before tasks carried not_after
    assert "not_after" not in task
    env = _signed_raw(ident, task)
    cert_end = float(ident["certificate"]["body"]["not_after"])
    assert verify_task(env, pub, "clinic", now=cert_end - 1) == task
    with pytest.raises(SecurityError, match="certificate expired"):
        verify_task(env, pub, "clinic", now=cert_end + 1)
    with pytest.raises(SecurityError, match="certificate expired"):
        check_task_current(task, env["certificate"], now=cert_end + 1)


def test_renewal_extends_the_same_key_and_revocation_stops_it(
    analyst: tuple[Path, str, dict[str, Any]], tmp_path: Path
) -> None:
    folder, pub, ident = analyst
    path = tmp_path / "ana.json"
    old = sign_task(TASK, ident)
    renewed = renew_analyst(folder, path, valid_days=30)
    body, old_body = renewed["certificate"]["body"], ident["certificate"]["body"]
    assert body["public_key"] == old_body["public_key"]
    assert body["populations"] == old_body["populations"]
    assert body["not_after"] > old_body["not_after"] + 20 * 86400
    assert (path.stat().st_mode & 0o777) == 0o600
    # tasks signed under the old certificate still die with it; signed again, they live longer
    later = old_body["not_after"] + 60
    with pytest.raises(SecurityError, match="expired"):
        verify_task(old, pub, "clinic", now=later)
    assert verify_task(sign_task(TASK, path), pub, "clinic", now=later)
    # revoked: never renewed, never re-issued under that name
    assert revoke_analyst(folder, "ana") is True
    assert revoke_analyst(folder, "ana") is False
    with pytest.raises(ParameterError, match="revoked"):
        renew_analyst(folder, path)
    with pytest.raises(ParameterError, match="revoked"):
        issue_analyst(folder, "ana", ["clinic"], tmp_path / "again.json")
    # another authority cannot renew it
    init_authority(tmp_path / "other")
    with pytest.raises(ParameterError, match="this authority"):
        renew_analyst(tmp_path / "other", path)


def test_an_expired_certificate_cannot_sign(tmp_path: Path) -> None:
    init_authority(tmp_path / "a")
    ident = issue_analyst(tmp_path / "a", "ana", ["clinic"], tmp_path / "x.json", valid_days=1e-5)
    time.sleep(1.1)
    with pytest.raises(SecurityError, match="certificate expired"):
        sign_task(TASK, ident)
