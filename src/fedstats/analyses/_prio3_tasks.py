"""Signed tasks on the two-aggregator route (Prio3): what every party derives from the task alone.

A task whose normalized form has a ``prio3`` section (:func:`fedstats.wire.tasks.normalize_task`: the two
aggregators' URLs, the noise each adds, the minimum batch size) is signed by an analyst like every task.
Its rounds are not chosen by an operator: the aggregators, the devices and the collector each replay the
task's plan (:func:`plan_on_route`) and derive every round from

* the **cohort size** ``task["cohort_size"]`` (one record per device: ``max_records_per_client`` is 1);
* the **public seed** :func:`public_seed`, ``SHA-256(PRIO3_DOMAIN || "seed" || task id)``: fixed by the
  analyst's signature (it shapes only public choices, such as which records report which bit, never a
  device's privacy), so no commit-reveal is needed;
* the **public sums** of the earlier rounds (``history``: ``[{"total": [int, ...], "n_clients": n}, ...]``,
  what the collector released; both aggregators must announce the same).

The plan is the task's analysis config on this route (:func:`route_config`): an analysis that plans its
own noise for the two aggregators (heterogeneity: :meth:`~fedstats.analyses.heterogeneity.config.
HeterogeneityConfig.on_aggregators`) runs with it, so devices send their reports without a noise share and
each aggregator adds the discrete Gaussian the round states (:func:`aggregator_noise`); its task's
``prio3.noise`` must then be null (:func:`fedstats.wire.tasks.normalize_task`).

From a derived round follow its Prio3 variant and parameters
(:func:`fedstats.analyses._prio3.validity_for`, :func:`vdaf_spec`), the id of the round's Prio3 task
(:func:`round_task_id`, ``SHA-256(PRIO3_DOMAIN || "round" || task id || index)``, 64 hex digits) and its
Prio3 application context (:func:`round_ctx`). A device compares what the aggregators announce with what it
derived (:func:`derive_round`) and refuses any difference; no party can shift a round to another variant,
length or range without every honest device refusing it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats.analyses._prio3 import (
    AggregatorNoise,
    AggregatorSum,
    Validity,
    planned_noise,
    validity_for,
)
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import ParameterError, SecurityError

__all__ = [
    "PRIO3_DOMAIN",
    "Prio3Round",
    "aggregator_noise",
    "derive_round",
    "history_entry",
    "plan_on_route",
    "public_seed",
    "released_sum",
    "round_ctx",
    "round_task_id",
    "route_config",
    "vdaf_spec",
]

PRIO3_DOMAIN = b"fedstats/prio3-task/v1/"
"""Domain separator of the values derived from a signed Prio3 task's id."""


def _tid(task_id: str) -> bytes:
    try:
        raw = bytes.fromhex(task_id)
    except (TypeError, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ParameterError("task_id", task_id, "64 hex digits (a task's SHA-256)")
    return raw


def public_seed(task_id: str) -> bytes:
    """The 32-byte public seed of a signed Prio3 task's plan (see the module)."""
    return hashlib.sha256(PRIO3_DOMAIN + b"seed" + _tid(task_id)).digest()


def round_task_id(task_id: str, index: int) -> str:
    """The id (64 hex digits) of round ``index`` (in [0, 2^31)) of a signed Prio3 task."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 2**31:
        raise ParameterError("round", index, "an integer in [0, 2^31)")
    raw = PRIO3_DOMAIN + b"round" + _tid(task_id) + index.to_bytes(4, "big")
    return hashlib.sha256(raw).hexdigest()


def round_ctx(round_id: str) -> bytes:
    """Prio3's application context of a round task: ``b"fedstats prio3 " + id`` (47 bytes)."""
    return b"fedstats prio3 " + _tid(round_id)


def vdaf_spec(vdaf: Any) -> dict[str, Any]:
    """A Prio3 instance's description ``{"type", parameters...}`` (the service's task form).

    Raises
    ------
    ParameterError
        If ``vdaf`` is not one of the five Prio3 variants.
    """
    kinds = {
        "Prio3Count": "count",
        "Prio3Sum": "sum",
        "Prio3SumVec": "sumvec",
        "Prio3Histogram": "histogram",
        "Prio3MultihotCountVec": "multihot",
    }
    kind = kinds.get(type(vdaf).__name__)
    if kind is None:
        raise ParameterError("vdaf", type(vdaf).__name__, f"one of {sorted(kinds)}")
    return {"type": kind, **{k: int(v) for k, v in vdaf.flp.valid.params().items()}}


def route_config(task: Mapping[str, Any]) -> Any:
    """The analysis config a signed Prio3 task runs with.

    The task's config (:func:`fedstats.wire.registry.config_for`), moved onto the two aggregators'
    noise where the analysis plans it (a config with ``on_aggregators``: heterogeneity, whose task config
    has devices add distributed shares); the same options and the same
    :meth:`~fedstats.analyses._config.AnalysisConfig.privacy_loss`.

    Raises
    ------
    ParameterError
        If the task's analysis or options are invalid.
    """
    from fedstats.wire.registry import config_for

    cfg = config_for(task)
    on_aggregators = getattr(cfg, "on_aggregators", None)
    return cfg if on_aggregators is None else on_aggregators()


def plan_on_route(task: Mapping[str, Any], task_id: str) -> Any:
    """The plan (protocol generator) of a signed Prio3 task: :func:`route_config`'s, from the task alone."""
    cfg = route_config(task)
    return cfg.plan(n_clients=int(task["cohort_size"]), public_seed=public_seed(task_id))


def aggregator_noise(task: Mapping[str, Any], rnd: Round) -> dict[str, Any] | None:
    """The noise each aggregator adds to round ``rnd`` of a signed Prio3 task (``{mechanism, parameter}``).

    The noise the round's plan states (:func:`fedstats.analyses._prio3.planned_noise`) if any, else the
    task's ``prio3.noise`` (None: the exact sum).
    """
    planned = planned_noise(rnd)
    if planned is not None:
        return {"mechanism": planned.mechanism, "parameter": float(planned.parameter)}
    noise = task["prio3"].get("noise")
    return None if noise is None else dict(noise)


def released_sum(
    total: Any, n_clients: int, noises: Sequence[Mapping[str, Any] | None] | None = None
) -> RoundSum:
    """A collected round's sum for the plan, marked with the noise the two aggregators say they added.

    Parameters
    ----------
    total : array_like of int
        The released (noised) sum.
    n_clients : int
        Reports summed.
    noises : sequence of two mappings or None, optional
        Each aggregator's stated noise (its collection answer's ``noise``). When both state the same
        noise the sum is an :class:`~fedstats.analyses._prio3.AggregatorSum` carrying it, which a plan
        that wants the aggregators' noise checks against its own (it refuses any other).

    Returns
    -------
    RoundSum
    """
    arr = np.asarray(total, dtype=object)
    wide = any(abs(int(v)) >= 2**62 for v in arr.ravel())
    arr = arr if wide else arr.astype(np.int64)
    if noises is None or len(noises) != 2 or noises[0] is None or noises[0] != noises[1]:
        return RoundSum(arr, int(n_clients))
    first = noises[0]
    added = AggregatorNoise(str(first["mechanism"]), float(first["parameter"]))
    return AggregatorSum(arr, int(n_clients), aggregator_noise=added, aggregators=2)


def history_entry(total: Any, n_clients: int) -> dict[str, Any]:
    """A round's public sum as announced to devices: ``{"total": [int, ...], "n_clients": n}``."""
    return {"total": [int(v) for v in np.asarray(total, dtype=object)], "n_clients": int(n_clients)}


def _round_sum(entry: Any, planned: AggregatorNoise | None = None) -> RoundSum:
    """A public sum of the history as the plan receives it (marked with the round's planned noise).

    The aggregators' noise in an announced sum cannot be checked by whoever replays the plan (the same
    trust a plain run places in the server's journal of public sums); a round that plans its own
    aggregators' noise receives the sum marked with it, as the collector handed it on.
    """
    if not isinstance(entry, Mapping) or set(entry) != {"total", "n_clients"}:
        raise SecurityError("a public sum must be {total, n_clients}")
    total = entry["total"]
    n = entry["n_clients"]
    if (
        not isinstance(total, list)
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in total)
        or isinstance(n, bool)
        or not isinstance(n, int)
        or n < 0
    ):
        raise SecurityError("a public sum must hold integers")
    if planned is None:
        return released_sum(total, n)
    stated = {"mechanism": planned.mechanism, "parameter": float(planned.parameter)}
    return released_sum(total, n, (stated, stated))


@dataclass(frozen=True)
class Prio3Round:
    """One round of a signed Prio3 task, as derived from the task, its id and the earlier public sums.

    Attributes
    ----------
    index : int
    round : Round
        The analysis's round (encoder, public parameters, dim, bound, client range).
    validity : Validity
        How a report becomes a Prio3 measurement, and the aggregate the round's sum.
    spec : dict
        The Prio3 variant and its parameters (:func:`vdaf_spec`).
    task_id : str
        The round's Prio3 task id (:func:`round_task_id`).
    ctx : bytes
        Prio3's application context (:func:`round_ctx`).
    client_range : (int, int)
        The slots ``[lo, hi)`` that take part.
    n_clients : int
        The cohort size the plan was built with.
    """

    index: int
    round: Round
    validity: Validity
    spec: dict[str, Any]
    task_id: str
    ctx: bytes
    client_range: tuple[int, int]
    n_clients: int

    def announcement(self, history: Sequence[Any]) -> dict[str, Any]:
        """What an aggregator shows devices of this round (compared field by field by devices)."""
        from fedstats.wire.registry import encoder_name

        return {
            "round": self.index,
            "task_id": self.task_id,
            "vdaf": dict(self.spec),
            "name": self.round.name,
            "encode": encoder_name(self.round.encode),
            "client_range": [int(self.client_range[0]), int(self.client_range[1])],
            "n_clients": int(self.n_clients),
            "history": list(history),
        }


def derive_round(
    task: Mapping[str, Any], task_id: str, index: int, history: Sequence[Any]
) -> Prio3Round:
    """Derive round ``index`` of a signed Prio3 task from the task and the earlier rounds' public sums.

    Parameters
    ----------
    task : mapping
        The normalized (verified) task, with a ``prio3`` section.
    task_id : str
        Its id (SHA-256 of the normalized task).
    index : int
        The round, >= 0.
    history : sequence
        The public sums of rounds ``0 .. index - 1`` (:func:`history_entry`).

    Returns
    -------
    Prio3Round

    Raises
    ------
    SecurityError
        If the task is not a Prio3 task, ``history`` does not hold exactly ``index`` well-formed sums,
        or the round is beyond the task's plan.
    """
    if not isinstance(task, Mapping) or not isinstance(task.get("prio3"), Mapping):
        raise SecurityError("the task is not a Prio3 task (no prio3 section)")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise SecurityError(f"round {index!r} is not a round index")
    if not isinstance(history, Sequence) or len(history) != index:
        raise SecurityError(f"round {index} must come with the {index} earlier public sums")
    n = int(task["cohort_size"])
    gen = plan_on_route(task, task_id)
    try:
        rnd = next(gen)
        for entry in history:
            rnd = gen.send(_round_sum(entry, planned_noise(rnd)))
    except StopIteration:
        raise SecurityError(f"round {index} is beyond the task's plan") from None
    finally:
        gen.close()
    validity = validity_for(rnd)
    lo, hi = rnd.client_range if rnd.client_range is not None else (0, n)
    rid = round_task_id(task_id, index)
    return Prio3Round(
        index,
        rnd,
        validity,
        vdaf_spec(validity.vdaf),
        rid,
        round_ctx(rid),
        (int(lo), int(hi)),
        n,
    )
