"""Tasks on the server: a task is an immutable configuration, identified by the SHA-256 of its canonical JSON.

:func:`normalize_task` checks a configuration and fills in its defaults (the result is what gets hashed);
:func:`create_task` stores it once; :func:`task_config` reads it back (cached: tasks never change).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from fedstats import wire
from fedstats.errors import FedstatsError, ParameterError, SecurityError
from fedstats.randomness import RandomSource
from fedstats.service import ledger
from fedstats.service.models import Task
from fedstats.wire.registry import encoder_name, lookup, protocol_for

__all__ = ["ConflictError", "NotFoundError", "create_task", "normalize_task", "task_config"]


class ConflictError(FedstatsError):
    """A request that is valid but conflicts with the run's state (HTTP 409)."""


class NotFoundError(FedstatsError):
    """A named run, task or round does not exist (HTTP 404)."""


def normalize_task(config: Mapping[str, Any]) -> dict[str, Any]:
    """Check a task configuration and fill in defaults; the result is what gets hashed.

    Fields: ``analysis`` (str), ``version`` (int >= 1), ``params`` (object), ``privacy``
    (``{"epsilon", "delta", "population"}``; epsilon null for a non-private analysis), ``cohort_size``
    (records, >= 1), ``min_clients`` (records, in [1, cohort_size]), ``max_records_per_client`` (>= 1,
    default ``cohort_size``), ``deadlines`` (``{"checkin", "round"}``, seconds > 0), ``label`` (free text;
    two otherwise equal tasks with different labels are different tasks), ``secure_aggregation``
    (optional: ``{"max_session": m, "min_session_size": k}``, m in [2, 10000], default 1000, k in
    [2, m], default min(10, m), or ``true``; devices refuse a secure session smaller than k; every round's sum is
    then computed by secure aggregation among the devices, :mod:`fedstats.service.secure`; required by
    the analyses whose registry entry says so).

    Raises
    ------
    ParameterError
        If a field is missing or outside its range, or the analysis refuses its parameters.
    """
    try:
        analysis = str(config["analysis"])
        version = int(config.get("version", 1))
        params = dict(config.get("params") or {})
        privacy = dict(config.get("privacy") or {})
        cohort = int(config["cohort_size"])
        min_clients = int(config.get("min_clients", cohort))
        deadlines = dict(config.get("deadlines") or {})
    except (KeyError, TypeError, ValueError) as exc:
        raise ParameterError("task", str(exc), "analysis, cohort_size and valid fields") from None
    spec = lookup(analysis, version)
    if cohort < 2 or cohort > 10**9:
        raise ParameterError("cohort_size", cohort, "an integer in [2, 10**9]")
    if not 1 <= min_clients <= cohort:
        raise ParameterError("min_clients", min_clients, f"an integer in [1, cohort_size={cohort}]")
    max_rec = int(config.get("max_records_per_client", cohort))
    if not 1 <= max_rec <= cohort:
        raise ParameterError("max_records_per_client", max_rec, f"an integer in [1, {cohort}]")
    eps, delta = privacy.get("epsilon"), privacy.get("delta")
    population = str(privacy.get("population", "default"))
    if spec.privacy == "none":
        if eps is not None:
            raise ParameterError("privacy.epsilon", eps, f"null ({analysis} is not private)")
    else:
        if eps is None or not isinstance(eps, (int, float)) or not 0 < float(eps) < 1000:
            raise ParameterError("privacy.epsilon", eps, "a number in (0, 1000)")
        eps = float(eps)
        if spec.privacy == "distributed":
            if delta is None or not isinstance(delta, (int, float)) or not 0 < float(delta) < 1:
                raise ParameterError("privacy.delta", delta, "a number in (0, 1)")
            delta = float(delta)
        elif delta not in (None, 0, 0.0):
            raise ParameterError("privacy.delta", delta, "0 or null (pure local DP)")
        else:
            delta = 0.0
    d_checkin = float(deadlines.get("checkin", 60.0))
    d_round = float(deadlines.get("round", 60.0))
    for name, v in (("deadlines.checkin", d_checkin), ("deadlines.round", d_round)):
        if not (math.isfinite(v) and 0.05 <= v <= 7 * 86400):
            raise ParameterError(name, v, "seconds in [0.05, 604800]")
    secure = config.get("secure_aggregation")
    if secure is not None and secure is not False:
        opts = {} if secure is True else secure
        if not isinstance(opts, Mapping) or set(opts) - {"max_session", "min_session_size"}:
            raise ParameterError(
                "secure_aggregation", secure, 'true or {"max_session": m, "min_session_size": k}'
            )
        max_session = opts.get("max_session", 1000)
        if (
            isinstance(max_session, bool)
            or not isinstance(max_session, int)
            or not 2 <= max_session <= 10_000
        ):
            raise ParameterError(
                "secure_aggregation.max_session", max_session, "an integer in [2, 10000]"
            )
        min_session = opts.get("min_session_size")
        if min_session is None:
            min_session = min(10, max_session)
        if (
            isinstance(min_session, bool)
            or not isinstance(min_session, int)
            or not 2 <= min_session <= max_session
        ):
            raise ParameterError(
                "secure_aggregation.min_session_size",
                min_session,
                f"an integer in [2, max_session={max_session}]",
            )
        secure = {"max_session": int(max_session), "min_session_size": int(min_session)}
    else:
        secure = None
    if spec.secure == "required" and secure is None:
        raise ParameterError(
            "secure_aggregation",
            None,
            f'{{"max_session": m}} ({analysis} needs secure aggregation)',
        )
    out = {
        "analysis": analysis,
        "version": version,
        "params": wire.decode(wire.encode(params)),
        "privacy": {"epsilon": eps, "delta": delta, "population": population},
        "cohort_size": cohort,
        "min_clients": min_clients,
        "max_records_per_client": max_rec,
        "deadlines": {"checkin": d_checkin, "round": d_round},
        "label": str(config.get("label", "")),
    }
    if secure is not None:  # absent otherwise: the ids of tasks without it do not change
        out["secure_aggregation"] = secure
    # the analysis validates its own parameters: build the protocol and ask for its first round
    try:
        gen = protocol_for(
            analysis,
            version,
            out["params"],
            n_clients=cohort,
            epsilon=eps,
            delta=delta,
            randomness=RandomSource(),
            public_seed=bytes(32) if secure is not None else None,
        )
        first = next(gen)
        gen.close()
    except FedstatsError as exc:
        raise ParameterError(
            "params", str(exc), f"parameters {analysis} v{version} accepts"
        ) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ParameterError(
            "params", repr(exc), f"parameters {analysis} v{version} accepts"
        ) from None
    except StopIteration:
        raise ParameterError("params", "no rounds", "a protocol with at least one round") from None
    if encoder_name(first.encode) not in spec.encoders:
        raise SecurityError(f"{analysis} v{version} yields an unregistered encoder")
    return out


def create_task(session: Session, config: Mapping[str, Any], actor: str) -> tuple[str, bool]:
    """Store a task (idempotent); return its id and whether it was new."""
    norm = normalize_task(config)
    tid = wire.digest(norm)
    if session.get(Task, tid) is None:
        session.add(Task(id=tid, config=wire.dumps(norm), created_by=actor, created_at=time.time()))
        ledger.audit(session, actor, "create-task", None, task_id=tid)
        return tid, True
    return tid, False


def task_config(session: Session, task_id: str) -> dict[str, Any]:
    """The configuration of a stored task.

    Raises
    ------
    NotFoundError
        If there is no such task.
    """
    cached = _TASK_CACHE.get(task_id)
    if cached is not None:  # tasks are immutable: a parsed configuration stays valid
        return cached
    t = session.get(Task, task_id)
    if t is None:
        raise NotFoundError(f"no task {task_id!r}")
    cfg: dict[str, Any] = wire.loads(t.config)
    if len(_TASK_CACHE) > 10000:
        _TASK_CACHE.clear()
    _TASK_CACHE[task_id] = cfg
    return cfg


_TASK_CACHE: dict[str, dict[str, Any]] = {}
