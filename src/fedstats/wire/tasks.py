"""Tasks as both sides see them: the normalized configuration, its id, and the analyst's signature over it.

A **task** is an immutable configuration (analysis, its options, privacy parameters, cohort and session
rules, deadlines), canonically encoded (:mod:`.encoding`); its id is the SHA-256 of that encoding with the
options in the analysis's canonical form (:func:`task_id`: defaults spelled out or not, one id). An
analyst (or a population policy) signs it with the key the enrollment authority certified for its
populations (:func:`fedstats.wire.enrollment.issue_analyst`); the signed **envelope**
``{"task", "certificate", "signature"}`` is what the server stores and relays unchanged. A device accepts a
task only through :func:`verify_task` (certificate chained to the authority key it pinned at enrollment,
role analyst, its population allowed, unexpired, signature valid over the task's canonical bytes), then
checks it against its own policy and budget. The server verifies envelopes too (so garbage is not stored),
but it never holds an analyst's private key: it can relay a task, not create or alter one.

Pure: no database, no HTTP.
"""

from __future__ import annotations

import ipaddress
import math
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedstats._validation import CONTROL_RULE, check_identifier, control_character
from fedstats.errors import FedstatsError, ParameterError, SecurityError
from fedstats.wire import auth
from fedstats.wire.encoding import canonical_bytes, decode, digest, encode
from fedstats.wire.registry import config_for, encoder_name, lookup, plan_for

__all__ = [
    "DEFAULT_MAX_SESSION",
    "DEFAULT_MIN_BATCH_SIZE",
    "DEFAULT_MIN_SESSION_SIZE",
    "TASK_DOMAIN",
    "TASK_KEYS",
    "check_task_current",
    "default_min_session_size",
    "min_session_size",
    "normalize_task",
    "sign_task",
    "task_id",
    "verify_task",
]

TASK_DOMAIN = b"fedstats-task-v1\n"
"""Prefix of the bytes an analyst signs (domain separation from request and certificate signatures)."""

DEFAULT_MIN_BATCH_SIZE = 10
"""A Prio3 route's ``min_batch_size`` when the task does not say: the devices' default floor
(:attr:`fedstats.client.policy.Policy.min_batch_size`). A leader that puts only a victim's report in a
batch needs ``min_batch_size - 1`` enrolled Sybils to pass collection (docs/vdaf.md, threat model)."""

TASK_KEYS = frozenset(
    {
        "analysis",
        "version",
        "params",
        "privacy",
        "cohort_size",
        "min_clients",
        "max_records_per_client",
        "deadlines",
        "label",
        "not_after",
        "secure_aggregation",
        "prio3",
    }
)
"""The fields of a task (:func:`normalize_task`); any other key is refused, naming it."""

MAX_UNIX_SECONDS = 2**53
"""Largest ``not_after`` accepted (Unix seconds; exact in a double)."""

_ENVELOPE_KEYS = frozenset({"task", "certificate", "signature"})

MAX_ENVELOPE_BYTES = 64 * 1024
"""Largest canonical task accepted in an envelope (a device checks this before verifying anything)."""

DEFAULT_MAX_SESSION = 1000
"""A secure task's ``max_session`` when it does not say: the largest secure-aggregation session."""

DEFAULT_MIN_SESSION_SIZE = 10
"""A secure task's ``min_session_size`` when it does not say, unless ``max_session`` is smaller."""


def default_min_session_size(max_session: int) -> int:
    """The smallest session of a secure task that does not say: ``min(10, max_session)``.

    Parameters
    ----------
    max_session : int
        The task's largest session, >= 2.

    Returns
    -------
    int
        ``min(DEFAULT_MIN_SESSION_SIZE, max_session)``.
    """
    return min(DEFAULT_MIN_SESSION_SIZE, int(max_session))


def min_session_size(secure: Mapping[str, Any]) -> int:
    """The smallest secure session a task's devices join (server and device read it the same way).

    Parameters
    ----------
    secure : Mapping
        A normalized task's ``secure_aggregation`` object (``max_session``, optional
        ``min_session_size``).

    Returns
    -------
    int
        Its ``min_session_size``, else :func:`default_min_session_size` of its ``max_session``.
    """
    return int(
        secure.get("min_session_size") or default_min_session_size(int(secure["max_session"]))
    )


def normalize_task(config: Mapping[str, Any]) -> dict[str, Any]:
    """Check a task configuration and fill in defaults; the result is what gets hashed and signed.

    Fields: ``analysis`` (str), ``version`` (int >= 1), ``params`` (object), ``privacy``
    (``{"epsilon", "delta", "population"}``; epsilon null for a non-private analysis), ``cohort_size``
    (**devices**, >= 2: the check-in closes when this many devices joined), ``min_clients`` (devices, in
    [1, cohort_size], default cohort_size: with fewer devices at the check-in deadline the run aborts),
    ``max_records_per_client`` (records each device contributes at most, in [1, 10**6], default **1**:
    a device holding more contributes its first ``max_records_per_client``), ``deadlines`` (``{"checkin", "round"}``, seconds in [0.05, 604800]),
    ``label`` (free text; two otherwise equal tasks with different labels are different tasks),
    ``secure_aggregation`` (optional: ``{"max_session": m, "min_session_size": k, "quiet_seconds": q}``,
    m in [2, 10000], default 1000, k in [2, m], default min(10, m), q null (the default) or seconds in
    [0.05, 604800], or ``true``; devices refuse a secure session smaller than k; with q a secure stage
    closes before its deadline once its quorum answered and no message came for q seconds, see
    :func:`fedstats.service.domain.secure.quiet_close`; every round's sum is then computed by secure aggregation among the devices; required by the
    analyses whose registry entry says so, and by every analysis whose privacy is ``"distributed"``: its
    noise shares are private only inside the secure sum), ``prio3`` (optional, instead of
    ``secure_aggregation``: the two-aggregator route, ``{"leader": url, "helper": url, "noise": null or
    {"mechanism": "discrete_gaussian" | "discrete_laplace", "parameter": p}, "min_batch_size": n}``,
    ``min_batch_size`` default :data:`DEFAULT_MIN_BATCH_SIZE`;
    every round is then a Prio3 task on the two named aggregators, each of which adds ``noise`` to its
    aggregate share; ``max_records_per_client`` must be 1; see :mod:`fedstats.analyses._prio3_tasks`).

    ``not_after`` (optional: Unix seconds, an integer; devices refuse the task after it, the server
    refuses to start a run of it; :func:`sign_task` sets it to the certificate's when absent).

    Every integer field (``version``, ``cohort_size``, ``min_clients``, ``max_records_per_client``,
    ``max_session``, ``min_session_size``, ``min_batch_size``, ``not_after``) takes an integer (a
    float with no fractional part is read as one; 4.5 is refused, never truncated); text fields
    (``analysis``, ``label``, ``privacy.population``) refuse control and format characters (NUL,
    newline, bidi overrides); a key that is not a task field (nor one of ``privacy``'s or
    ``deadlines``') is refused, naming it; a floor the cohort can never reach (``min_session_size`` or
    ``min_batch_size`` above ``cohort_size``) is refused; aggregator URLs are ``https://`` (``http://``
    only to loopback, for development).

    Normalizing a normalized task returns it unchanged. The analysis validates its own options: the task
    is checked by :func:`fedstats.wire.registry.config_for` and its plan must yield a first round with a
    registered encoder.

    Raises
    ------
    ParameterError
        If a field is missing, unknown, of the wrong type or outside its range (the message names
        it), or the analysis refuses its options.
    SecurityError
        If the analysis's plan yields an unregistered encoder.
    """
    if not isinstance(config, Mapping):
        raise ParameterError("task", type(config).__name__, "an object")
    unknown = sorted(str(k) for k in set(config) - TASK_KEYS)
    if unknown:
        raise ParameterError(unknown[0], "an unknown task field", f"one of {sorted(TASK_KEYS)}")
    if "analysis" not in config or "cohort_size" not in config:
        raise ParameterError("task", "without analysis or cohort_size", "analysis, cohort_size")
    analysis = _text("analysis", config["analysis"], 1, 128)
    version = _integer("version", config.get("version", 1), 1, 10**6)
    params = _section("params", config.get("params"), None)
    privacy = _section("privacy", config.get("privacy"), {"epsilon", "delta", "population"})
    deadlines = _section("deadlines", config.get("deadlines"), {"checkin", "round"})
    spec = lookup(analysis, version)
    cohort = _integer("cohort_size", config["cohort_size"], 2, 10**9)
    min_clients = config.get("min_clients", cohort)
    min_clients = _integer("min_clients", min_clients, 1, cohort, f"[1, cohort_size={cohort}]")
    max_rec = config.get("max_records_per_client")
    max_rec = _integer("max_records_per_client", 1 if max_rec is None else max_rec, 1, 10**6)
    eps, delta, population = _privacy(analysis, spec.privacy, privacy)
    d_checkin = _seconds("deadlines.checkin", deadlines.get("checkin", 60.0))
    d_round = _seconds("deadlines.round", deadlines.get("round", 60.0))
    secure = _secure_options(config.get("secure_aggregation"))
    prio3 = _prio3_options(config.get("prio3"))
    if prio3 is not None:
        if secure is not None:
            raise ParameterError(
                "prio3",
                "with secure_aggregation",
                "one aggregation route: prio3 or secure_aggregation",
            )
        if max_rec != 1:
            raise ParameterError(
                "max_records_per_client", max_rec, "1 (a Prio3 report proves one record's validity)"
            )
        if spec.privacy == "distributed" and prio3["noise"] is not None:
            raise ParameterError(
                "prio3.noise",
                prio3["noise"],
                f"null ({analysis} plans each aggregator's noise itself, round by round)",
            )
    if spec.secure == "required" and secure is None and prio3 is None:
        raise ParameterError(
            "secure_aggregation",
            None,
            f'{{"max_session": m}} ({analysis} needs secure aggregation)',
        )
    if spec.privacy == "distributed" and secure is None and prio3 is None:
        raise ParameterError(
            "secure_aggregation",
            None,
            f'{{"max_session": m, "min_session_size": k}} ({analysis} adds distributed noise '
            "shares: a report is private only inside the secure sum)",
        )
    label = _text("label", config.get("label", ""), 0, 256)
    _check_sizes(cohort, secure, prio3)
    out: dict[str, Any] = {
        "analysis": analysis,
        "version": version,
        "params": decode(encode(params)),
        "privacy": {"epsilon": eps, "delta": delta, "population": population},
        "cohort_size": cohort,
        "min_clients": min_clients,
        "max_records_per_client": max_rec,
        "deadlines": {"checkin": d_checkin, "round": d_round},
        "label": label,
    }
    if secure is not None:  # absent otherwise: the ids of tasks without it do not change
        out["secure_aggregation"] = secure
    if prio3 is not None:  # likewise
        out["prio3"] = prio3
    if config.get("not_after") is not None:  # likewise (sign_task always sets it)
        out["not_after"] = _integer("not_after", config["not_after"], 1, MAX_UNIX_SECONDS)
    # the analysis validates its own options, and its plan must start with a registered encoder
    try:
        config_for(out)
        gen = plan_for(out, n_clients=cohort, public_seed=bytes(32))
        first = next(gen)
        gen.close()
    except (ParameterError, SecurityError):
        raise  # the analysis's own error names the option
    except FedstatsError as exc:
        raise ParameterError(
            "params", " ".join(str(exc).split()), f"options {analysis} v{version} accepts"
        ) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ParameterError(
            "params", repr(exc), f"options {analysis} v{version} accepts"
        ) from None
    except StopIteration:
        raise ParameterError("params", "no rounds", "a plan with at least one round") from None
    if encoder_name(first.encode) not in spec.encoders:
        raise SecurityError(f"{analysis} v{version} yields an unregistered encoder")
    return out


def _privacy(analysis: str, kind: str, privacy: Mapping[str, Any]) -> tuple[Any, Any, str]:
    """The task's (epsilon, delta, population), checked against the analysis's privacy ``kind``."""
    eps, delta = privacy.get("epsilon"), privacy.get("delta")
    population = check_identifier("privacy.population", privacy.get("population", "default"))
    if kind == "none":
        if eps is not None:
            raise ParameterError("privacy.epsilon", eps, f"null ({analysis} is not private)")
    else:
        if eps is None or isinstance(eps, bool) or not isinstance(eps, (int, float)):
            raise ParameterError("privacy.epsilon", eps, "a number in (0, 1000)")
        if not 0 < float(eps) < 1000:
            raise ParameterError("privacy.epsilon", eps, "a number in (0, 1000)")
        eps = float(eps)
        if kind == "distributed":
            if (
                delta is None
                or isinstance(delta, bool)
                or not isinstance(delta, (int, float))
                or not 0 < float(delta) < 1
            ):
                raise ParameterError("privacy.delta", delta, "a number in (0, 1)")
            delta = float(delta)
        elif delta not in (None, 0, 0.0) or isinstance(delta, bool):
            raise ParameterError("privacy.delta", delta, "0 or null (pure local DP)")
        else:
            delta = 0.0
    return eps, delta, population


def _integer(name: str, value: Any, lo: int, hi: int, bounds: str | None = None) -> int:
    """``value`` as an int in [lo, hi]: an integer, or a float with no fractional part (4.0, never 4.5)."""
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not integral or not lo <= value <= hi:
        raise ParameterError(name, value, f"an integer in {bounds or f'[{lo}, {hi}]'}")
    return int(value)


def _text(name: str, value: Any, lo: int, hi: int) -> str:
    """``value`` as text of lo to hi characters with no control character (:data:`CONTROL_RULE`)."""
    if not isinstance(value, str) or not lo <= len(value) <= hi:
        raise ParameterError(name, value, f"text of {lo} to {hi} characters")
    bad = control_character(value)
    if bad is not None:
        raise ParameterError(name, f"text holding U+{ord(bad):04X}", f"text with {CONTROL_RULE}")
    return value


def _seconds(name: str, value: Any) -> float:
    """``value`` as a number of seconds in [0.05, 604800]."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and 0.05 <= value <= 7 * 86400)
    ):
        raise ParameterError(name, value, "seconds in [0.05, 604800]")
    return float(value)


def _section(name: str, value: Any, keys: set[str] | None) -> dict[str, Any]:
    """An object field of the task (null is empty); with ``keys``, any other key is refused."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParameterError(name, type(value).__name__, "an object")
    if keys is not None:
        unknown = sorted(str(k) for k in set(value) - keys)
        if unknown:
            raise ParameterError(
                f"{name}.{unknown[0]}", "an unknown field", f"one of {sorted(keys)}"
            )
    return dict(value)


def _check_sizes(
    cohort: int, secure: Mapping[str, Any] | None, prio3: Mapping[str, Any] | None
) -> None:
    """Refuse a session or batch floor the cohort can never reach (the task could never run)."""
    if secure is not None and secure["min_session_size"] > cohort:
        raise ParameterError(
            "secure_aggregation.min_session_size",
            secure["min_session_size"],
            f"an integer in [2, cohort_size={cohort}] (devices refuse a smaller secure session; "
            "the default is min(10, max_session))",
        )
    if prio3 is not None and prio3["min_batch_size"] > cohort:
        raise ParameterError(
            "prio3.min_batch_size",
            prio3["min_batch_size"],
            f"an integer in [1, cohort_size={cohort}] (a batch of fewer reports is never collected; "
            f"the default is {DEFAULT_MIN_BATCH_SIZE})",
        )


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_NOISES = {"discrete_gaussian": 2.0**84, "discrete_laplace": 2.0**41}


def _aggregator_url(name: str, url: Any) -> str:
    """An aggregator's URL: ``https://``, or ``http://`` to loopback (development, as devices allow)."""
    accepted = (
        "an https:// URL (http:// only to loopback, for development; printable, <= 2048 characters)"
    )
    if not isinstance(url, str) or not url.isprintable() or not 9 <= len(url) <= 2048:
        raise ParameterError(name, url, accepted)
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        raise ParameterError(name, url, accepted) from None
    if not host or not (parts.scheme == "https" or (parts.scheme == "http" and _loopback(host))):
        raise ParameterError(name, url, accepted)
    return url.rstrip("/")


def _prio3_options(prio3: Any) -> dict[str, Any] | None:
    """The ``prio3`` section of a task: the two-aggregator route (see :func:`normalize_task`)."""
    if prio3 is None:
        return None
    if (
        not isinstance(prio3, Mapping)
        or not {"leader", "helper"} <= set(prio3)
        or set(prio3)
        - {
            "leader",
            "helper",
            "noise",
            "min_batch_size",
        }
    ):
        raise ParameterError(
            "prio3", prio3, '{"leader": url, "helper": url, "noise": ..., "min_batch_size": n}'
        )
    leader = _aggregator_url("prio3.leader", prio3["leader"])
    helper = _aggregator_url("prio3.helper", prio3["helper"])
    if leader == helper:
        raise ParameterError("prio3.helper", helper, "a server other than the leader")
    noise = prio3.get("noise")
    if noise is not None:
        if not isinstance(noise, Mapping) or set(noise) != {"mechanism", "parameter"}:
            raise ParameterError("prio3.noise", noise, "null or {mechanism, parameter}")
        mech, par = noise["mechanism"], noise["parameter"]
        if mech not in _NOISES:
            raise ParameterError("prio3.noise.mechanism", mech, f"one of {sorted(_NOISES)}")
        if (
            isinstance(par, bool)
            or not isinstance(par, (int, float))
            or not 0 < par <= _NOISES[mech]
        ):
            raise ParameterError(
                "prio3.noise.parameter", par, f"a number in (0, {_NOISES[mech]:g}]"
            )
        noise = {"mechanism": str(mech), "parameter": float(par)}
    mbs = _integer(
        "prio3.min_batch_size", prio3.get("min_batch_size", DEFAULT_MIN_BATCH_SIZE), 1, 10**9
    )
    return {"leader": leader, "helper": helper, "noise": noise, "min_batch_size": mbs}


def _secure_options(secure: Any) -> dict[str, Any] | None:
    if secure is None or secure is False:
        return None
    opts = {} if secure is True else secure
    if not isinstance(opts, Mapping) or set(opts) - {
        "max_session",
        "min_session_size",
        "quiet_seconds",
    }:
        raise ParameterError(
            "secure_aggregation",
            secure,
            'true or {"max_session": m, "min_session_size": k, "quiet_seconds": q}',
        )
    max_session = _integer(
        "secure_aggregation.max_session", opts.get("max_session", DEFAULT_MAX_SESSION), 2, 10_000
    )
    min_session = opts.get("min_session_size")
    min_session = _integer(
        "secure_aggregation.min_session_size",
        default_min_session_size(max_session) if min_session is None else min_session,
        2,
        max_session,
        f"[2, max_session={max_session}]",
    )
    out: dict[str, Any] = {"max_session": int(max_session), "min_session_size": int(min_session)}
    quiet = opts.get("quiet_seconds")
    if quiet is not None:
        if (
            isinstance(quiet, bool)
            or not isinstance(quiet, (int, float))
            or not (math.isfinite(quiet) and 0.05 <= quiet <= 7 * 86400)
        ):
            raise ParameterError(
                "secure_aggregation.quiet_seconds", quiet, "null or seconds in [0.05, 604800]"
            )
        # absent when null: the ids of tasks without it do not change
        out["quiet_seconds"] = float(quiet)
    return out


def task_id(task: Mapping[str, Any]) -> str:
    """The id of a normalized task: SHA-256 (hex) of its canonical bytes, its ``params`` made canonical.

    ``params`` is hashed as the analysis's canonical form (``config_for(task).to_params()``: every option,
    defaults included), so two tasks that differ only in a default spelled out or left out have one id.
    What an analyst signs, the server stores and a device verifies is still the task as normalized
    (:func:`normalize_task`, ``params`` as given): the id names the configuration the analysis runs. The
    server (storing a task) and the device (checking the offered id) both call this function.

    Raises
    ------
    ParameterError
        If the analysis refuses the task's options (not a normalized task).
    """
    canonical = dict(task)
    canonical["params"] = config_for(task).to_params()
    return digest(canonical)


def _signed_bytes(task: Mapping[str, Any]) -> bytes:
    return TASK_DOMAIN + canonical_bytes(dict(task))


def sign_task(config: Mapping[str, Any], analyst: Mapping[str, Any] | Path | str) -> dict[str, Any]:
    """Normalize ``config`` and sign it with an analyst identity; return the envelope to post.

    Parameters
    ----------
    config : mapping
        A task configuration (see :func:`normalize_task`).
    analyst : mapping or path
        An analyst identity (:func:`fedstats.wire.enrollment.issue_analyst`) or its file.

    Returns
    -------
    dict
        ``{"task": normalized task, "certificate": the analyst certificate, "signature": hex}``, the
        signature being Ed25519 over ``TASK_DOMAIN + canonical_bytes(task)``. The task carries
        ``not_after``: the one given, else the certificate's ``not_after`` (a task never outlives
        its certificate).

    Raises
    ------
    ParameterError
        If the task is invalid (naming the field), ``analyst`` is not an analyst identity, or the
        task's ``not_after`` is past or later than the certificate's.
    SecurityError
        If the task's population is not one the analyst's certificate allows, or the certificate
        expired.
    """
    from fedstats.wire.enrollment import load_analyst

    ident = dict(analyst) if isinstance(analyst, Mapping) else load_analyst(analyst)
    try:
        key = auth.private_key_from_hex(str(ident["private_key"]))
        cert = auth.Certificate.from_dict(ident["certificate"], role="analyst")
    except (KeyError, SecurityError) as exc:
        raise ParameterError("analyst", "identity", f"an analyst identity ({exc})") from None
    task = normalize_task(config)
    now = time.time()
    cert_end = int(cert.body["not_after"])
    if cert_end <= now:
        raise SecurityError(
            f"the analyst certificate expired (not_after {cert_end}): renew it "
            "(fedstats enroll renew-analyst)"
        )
    if "not_after" not in task:  # a task lives at most as long as its certificate
        task["not_after"] = cert_end
    elif task["not_after"] > cert_end:
        raise ParameterError(
            "not_after",
            task["not_after"],
            f"a Unix time at most the analyst certificate's not_after {cert_end} (a task cannot "
            "outlive the certificate it is signed under)",
        )
    if task["not_after"] <= now:
        raise ParameterError("not_after", task["not_after"], f"a Unix time after now ({int(now)})")
    population = task["privacy"]["population"]
    if population not in cert.body["populations"]:
        raise SecurityError(
            f"the analyst certificate does not cover population {population!r} "
            f"(it covers {cert.body['populations']})"
        )
    if auth.public_key_hex(key) != cert.body["public_key"]:
        raise ParameterError("analyst", "identity", "a key that matches its certificate")
    return {
        "task": task,
        "certificate": cert.as_dict(),
        "signature": key.sign(_signed_bytes(task)).hex(),
    }


def verify_task(
    envelope: Any,
    authority_public_key: str | Mapping[str, str],
    population: str | None = None,
    *,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a signed task envelope; return the normalized task it carries.

    Parameters
    ----------
    envelope : object
        ``{"task", "certificate", "signature"}`` as :func:`sign_task` makes it.
    authority_public_key : str or mapping
        The pinned authority key (hex), or the trusted authorities (fingerprint -> key hex).
    population : str, optional
        The population the verifier belongs to (a device's own): the task must address it.
    now : float, optional
        Unix time to check expiry against (default the clock).

    Raises
    ------
    ParameterError
        If the envelope has a field besides ``task``, ``certificate`` and ``signature``, or the task is
        not an object, too large, not valid (:func:`normalize_task`, naming the field) or not in
        normalized form: content that can never run (HTTP 422).
    SecurityError
        If the envelope is not an object or lacks a field, the certificate is not an analyst
        certificate of a trusted authority, has expired or does not cover the task's population, the
        task is not for ``population``, the signature does not verify over the task, or the task
        expired (its ``not_after``; HTTP 403).
    """
    if isinstance(envelope, Mapping):
        extra = sorted(str(k) for k in set(envelope) - _ENVELOPE_KEYS)
        if extra:
            raise ParameterError(
                f"envelope.{extra[0]}", "an unknown envelope field", "task, certificate, signature"
            )
    if not isinstance(envelope, Mapping) or set(envelope) != _ENVELOPE_KEYS:
        raise SecurityError("a task must come as a signed envelope {task, certificate, signature}")
    task = envelope["task"]
    if not isinstance(task, Mapping):
        raise ParameterError("task", type(task).__name__, "an object")
    try:
        body = canonical_bytes(dict(task))
    except FedstatsError:
        raise ParameterError("task", "no canonical form", "finite JSON values") from None
    if len(body) > MAX_ENVELOPE_BYTES:
        raise ParameterError("task", f"{len(body)} bytes", f"at most {MAX_ENVELOPE_BYTES} bytes")
    cert = auth.Certificate.from_dict(envelope["certificate"], role="analyst")
    if isinstance(authority_public_key, Mapping):
        trusted = {str(k): str(v) for k, v in authority_public_key.items()}
    else:
        trusted = {auth.fingerprint(authority_public_key): authority_public_key}
    auth.verify_certificate(cert, trusted, now=now if now is not None else time.time())
    signature = envelope["signature"]
    if not isinstance(signature, str) or len(signature) != 128:
        raise SecurityError("the task signature must be 64 bytes in hex")
    try:
        auth.verify_signature(str(cert.body["public_key"]), TASK_DOMAIN + body, signature)
    except SecurityError:
        raise SecurityError(
            "the task's signature does not verify (unsigned or altered task)"
        ) from None
    try:
        target = str(task["privacy"]["population"])
    except (KeyError, TypeError):
        raise SecurityError("the task names no population") from None
    if target not in cert.body["populations"]:
        raise SecurityError(f"the analyst certificate does not cover population {target!r}")
    if population is not None and target != population:
        raise SecurityError(f"the task is for population {target!r}, not {population!r}")
    norm = normalize_task(task)  # a signed task whose content is invalid: ParameterError, naming it
    if canonical_bytes(norm) != body:
        raise ParameterError(
            "task", "not in normalized form", "the task as normalize_task returns it (sign_task)"
        )
    check_task_current(norm, now=now)
    return norm


def check_task_current(
    task: Mapping[str, Any],
    certificate: Mapping[str, Any] | None = None,
    *,
    now: float | None = None,
) -> None:
    """Refuse a task past its ``not_after``, or signed under a certificate past its own.

    A task without ``not_after`` (signed before tasks carried one) is bounded by its certificate. The
    server calls it before starting a run of a stored task (so a stored task is not run again after it
    expired, nor after its analyst's certificate was not renewed), a device (through
    :func:`verify_task`) before accepting one.

    Parameters
    ----------
    task : mapping
        A normalized task.
    certificate : mapping, optional
        The analyst certificate of its envelope (``{"body", "signature"}``).
    now : float, optional
        Unix time (default the clock).

    Raises
    ------
    SecurityError
        If ``now`` is past the task's or the certificate's ``not_after``.
    """
    t = time.time() if now is None else now
    end = task.get("not_after")
    if end is not None and float(end) < t:
        raise SecurityError(
            f"the task expired (not_after {int(end)}, now {int(t)}): the analyst signs a new one"
        )
    if certificate is not None:
        cert_end = float(dict(certificate.get("body") or {}).get("not_after", math.inf))
        if cert_end < t:
            raise SecurityError(
                f"the task's analyst certificate expired (not_after {int(cert_end)}): it was not "
                "renewed (or was revoked); the analyst signs the task again under a current one"
            )
