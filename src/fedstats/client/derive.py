"""How a device derives each round itself: the accepted task's plan replayed, and the proposed round checked.

:class:`Derivation` (mixed into :class:`fedstats.client.Device`) replays the accepted task's plan
(:func:`fedstats.wire.registry.plan_for`) with the round's stated cohort size, public seed and the public
sums of the earlier rounds, and refuses a round that differs from the one it derives (see
:mod:`fedstats.client`).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedstats import wire
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import FedstatsError, SecurityError
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.wire.registry import encoder_name, plan_for

__all__ = ["Derivation"]

# what a work list says of a round besides the fields Derivation._derive checks: not part of its cache key
_UNCHECKED_ROUND_FIELDS = frozenset({"secure", "deadline"})


@dataclass
class _Accepted:
    """A run whose signed task this device accepted: the task, its id and its privacy loss."""

    task_id: str
    task: dict[str, Any]
    loss: PrivacyLoss
    analyst: str = ""
    """The name in the task's signed certificate (``Policy.max_exact_runs_per_analyst``)."""


@dataclass
class _Replay:
    """The device's replay of a run's plan: the generator and the rounds derived so far (cached)."""

    key: tuple[int, str]  # (n_clients, public seed hex) it was built with
    gen: Generator[Round, RoundSum, Any]
    rounds: list[Round] = field(default_factory=list)
    sums: list[str] = field(default_factory=list)  # digests of the public sums sent into the plan
    params: list[str] = field(default_factory=list)  # digest of each derived round's params


# the canonical digest (wire.digest) of values the server sent, remembered by their JSON (sorted keys):
# every poll of a round lists the same ~20 kB of params and history, and every device of a process is
# sent the same ones; json.dumps in C is faithful to parsed JSON (1, 1.0 and true, -0.0 and 0.0, and
# every float's repr differ), so equal keys are equal values
_DIGESTS: dict[str, str] = {}
# the same for the device's own derived rounds' params (kept apart from what the server sent: a derived
# tuple and a sent list have one JSON): every device of a process derives the same rounds
_DERIVED_DIGESTS: dict[str, str] = {}


def _received_digest(value: Any, memo: dict[str, str] = _DIGESTS) -> str:
    """``wire.digest(value)`` of a parsed JSON value, remembered per process by its whole content."""
    try:
        key = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):  # not plain JSON (numpy values): digested each time
        return wire.digest(value)
    got = memo.get(key)
    if got is None:
        got = wire.digest(value)
        if len(memo) >= 256:
            memo.clear()
        memo[key] = got
    return got


class Derivation:
    """The device's derivation of rounds (see the module); its state is declared here for type checking."""

    accepted: dict[str, _Accepted]
    joined: dict[str, dict[str, int]]
    secure: dict[str, Any]
    client_id: str
    _replays: dict[str, _Replay]
    _derived: dict[tuple[str, Any], tuple[Any, dict[str, Any], Round]]

    def _derive(self, rnd: Mapping[str, Any]) -> Round:
        """Derive the round ``rnd`` proposes from the accepted task; refuse (raise) if they differ.

        Replays the accepted task's plan (cached per run) with the round's stated cohort size, public seed
        and the public sums of the earlier rounds, and compares the derived round with the proposed one.

        Raises
        ------
        SecurityError
            If the run's task was not accepted or changed, the round is beyond the plan, any field differs
            from the derived round, or the records asked of the device are not its own slots in the
            derived client range.
        """
        rid = str(rnd["run_id"])
        acc = self.accepted.get(rid)
        if acc is None or rid not in self.joined:
            raise SecurityError(f"a round of run {rid}, whose task this device did not accept")
        # a round listed again (every poll and stage lists it) is checked once: the same fields (equal
        # as parsed JSON, compared in C) and the same verified seed and cohort give the same answer
        state = self.secure.get(rid)
        context = (
            acc.task_id,
            getattr(state, "seed", None),
            getattr(
                state, "verified", False
            ),  # the cohort verified (built on access: not read here)
        )
        fields = {k: v for k, v in rnd.items() if k not in _UNCHECKED_ROUND_FIELDS}
        key = (rid, fields.get("round"))
        hit = self._derived.get(key)
        if hit is not None and hit[0] == context and hit[1] == fields:
            return hit[2]
        try:
            derived = self._derive_checked(rnd, rid, acc)
        except SecurityError:
            raise
        except (FedstatsError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise SecurityError(f"malformed round: {type(exc).__name__}: {exc}") from None
        if len(self._derived) > 64:
            self._derived.clear()
        self._derived[key] = (context, fields, derived)
        return derived

    def _derive_checked(self, rnd: Mapping[str, Any], rid: str, acc: _Accepted) -> Round:
        task = acc.task
        if str(rnd["task_id"]) != acc.task_id:
            raise SecurityError("the run's task changed after this device accepted it")
        if (str(rnd["analysis"]), int(rnd["version"])) != (task["analysis"], task["version"]):
            raise SecurityError("the round names another analysis than the accepted task")
        if _received_digest(rnd["privacy"]) != wire.digest(task["privacy"]):
            raise SecurityError("the round's privacy parameters are not the accepted task's")
        index = int(rnd["round"])
        n = int(rnd["n_clients"])
        seed = str(rnd["public_seed"])
        if len(seed) != 64 or len(bytes.fromhex(seed)) != 32:
            raise SecurityError("the run's public seed is not 32 bytes")
        mine = self.joined[rid]
        start, count = int(mine["slot_start"]), int(mine["slot_count"])
        # n counts records: at least one per device, at most max_records_per_client per device
        most = int(task["cohort_size"]) * int(task.get("max_records_per_client", 1))
        if not (int(task["min_clients"]) <= n <= most and start + count <= n):
            raise SecurityError(
                f"cohort size {n} is impossible for this task and this device's slots"
            )
        state = self.secure.get(rid)
        if task.get("secure_aggregation") is not None:
            # the verified cohort, once the seed is verified (its packed list: no per-member rows)
            members = state.members if state is not None and state.verified else None
            if members is not None:
                if n != members.slot_total():
                    raise SecurityError("the cohort size is not the verified cohort's")
                if not members.holds(self.client_id, start, count):
                    raise SecurityError(
                        "this device's slots are not its slots in the verified cohort"
                    )
            head = getattr(state, "head", None)  # a tree run: its head's slot total, once checked
            if head is not None and n != head.total_slots:
                raise SecurityError("the cohort size is not the cohort tree's slot total")
            if state is not None and state.seed is not None and state.seed.hex() != seed:
                raise SecurityError("the round's public seed is not the run's verified seed")
        derived = self._replay(rid, acc, index, n, seed, rnd["history"])
        lo, hi = derived.client_range if derived.client_range is not None else (0, n)
        proposed = {
            "name": str(rnd["name"]),
            "encode": str(rnd["encode"]),
            "params": _received_digest(rnd["params"]),
            "dim": int(rnd["dim"]),
            "bound": int(rnd["bound"]),
            "client_range": [int(x) for x in rnd["client_range"]],
        }
        own = {
            "name": derived.name,
            "encode": encoder_name(derived.encode),
            "params": self._replays[rid].params[index],
            "dim": int(derived.dim),
            "bound": int(derived.bound),
            "client_range": [int(lo), int(hi)],
        }
        for k, v in own.items():
            if proposed[k] != v:
                raise SecurityError(
                    f"round {index} differs from the task's plan in its {k} "
                    f"(derived {str(v)[:80]}, proposed {str(proposed[k])[:80]})"
                )
        a, b = max(start, lo), max(max(start, lo), min(start + count, hi))
        if [int(x) for x in rnd["records"]] != [a, b] or int(rnd["slot_start"]) != start or b <= a:
            raise SecurityError(
                f"round {index} asks for records {rnd['records']}; this device's are [{a}, {b})"
            )
        return derived

    def _replay(
        self, rid: str, acc: _Accepted, index: int, n: int, seed: str, history: Any
    ) -> Round:
        """Round ``index`` of the run's plan, replayed with the stated public sums (cached per run)."""
        if not isinstance(history, list) or len(history) != index:
            raise SecurityError(f"round {index} must come with the {index} earlier public sums")
        rep = self._replays.get(rid)
        if rep is not None and rep.key != (n, seed):
            raise SecurityError("the run's cohort size or public seed changed between rounds")
        if rep is None:
            gen = plan_for(acc.task, n_clients=n, public_seed=bytes.fromhex(seed))
            rep = _Replay((n, seed), gen, [next(gen)])
            self._replays[rid] = rep
        sums = [_received_digest(h) for h in history]
        if sums[: len(rep.sums)] != rep.sums[: len(sums)]:
            raise SecurityError("the public sums of earlier rounds changed")
        while len(rep.rounds) <= index:
            h = history[len(rep.rounds) - 1]
            total = np.asarray(wire.decode(h["total"]))
            try:
                nxt = rep.gen.send(RoundSum(total, int(h["n_clients"])))
            except StopIteration:
                raise SecurityError(
                    f"round {index} is beyond the task's plan ({len(rep.rounds)} round(s))"
                ) from None
            rep.sums.append(sums[len(rep.rounds) - 1])
            rep.rounds.append(nxt)
        while len(rep.params) < len(rep.rounds):  # each derived round's params digested once
            derived = dict(rep.rounds[len(rep.params)].params)
            rep.params.append(_received_digest(derived, _DERIVED_DIGESTS))
        return rep.rounds[index]
