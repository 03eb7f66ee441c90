"""What a device tells the server when it refuses a run, and which runs it counts after a restart.

* :func:`refusal_code` maps the error a device refused a run for to a reason code of
  :data:`fedstats.wire.refusals.REASONS`; :func:`refusal_message` makes its text fit the server's rules
  (control characters replaced by spaces, at most :data:`~fedstats.wire.refusals.MAX_MESSAGE`
  characters). :meth:`Refusals.tell_refusal` sends both, signed as every device request
  (``POST /v1/client/runs/{run_id}/refuse``); a server that does not know the route (an older one) or a
  failed request only costs a log line: the refusal itself never depends on it.
* :class:`Rejoined` counts the runs a restarted device was in (``fedstats client run --runs N``): the
  device's memory of the runs it accepted is gone, but the server still lists it in their rounds or
  seed reveals, or, once they end, in its finished runs, and its budget file holds their charges (a
  run listed without a charge is not counted: a server cannot make a device stop early so).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx

from fedstats.client.policy import RefusedTask
from fedstats.errors import (
    BudgetExceededError,
    DataError,
    FedstatsError,
    ParameterError,
    SecurityError,
)
from fedstats.wire.refusals import MAX_MESSAGE, REASONS

__all__ = ["Refusals", "Rejoined", "refusal_code", "refusal_message"]

RESTARTED = (
    "the device restarted and no longer holds the run's accepted task (its budget file keeps the "
    "run's charge)"
)
_SPACES = re.compile(r"\s+")


def refusal_code(exc: BaseException, stage: str) -> str:
    """The reason code (:data:`fedstats.wire.refusals.REASONS`) of a refusal for ``exc``.

    Parameters
    ----------
    exc : BaseException
        Why the device refused.
    stage : str
        ``"offer"`` (the task was offered) or ``"round"`` (a round, a seed reveal or a stage).
    """
    if isinstance(exc, DataError):
        return "data_invalid"
    if isinstance(exc, BudgetExceededError):
        return "budget_exhausted"
    if isinstance(exc, RefusedTask):
        return "budget_exhausted" if str(exc).startswith("local budget") else "policy_refused"
    if isinstance(exc, (SecurityError, ParameterError)):
        if stage != "offer":
            return "round_mismatch"
        return "task_expired" if "expired" in str(exc) else "task_unverified"
    return "other"


def refusal_message(text: str) -> str:
    """``text`` as a refusal message: control characters and runs of spaces made one space, capped."""
    clean = "".join(" " if unicodedata.category(c).startswith("C") else c for c in str(text))
    clean = _SPACES.sub(" ", clean).strip() or "refused"
    return clean if len(clean) <= MAX_MESSAGE else clean[: MAX_MESSAGE - 3] + "..."


class Refusals:
    """Telling the server why a run was refused (mixed into :class:`fedstats.client.Device`).

    The device's transport (``_request``) and log are declared here for type checking.
    """

    _request: Callable[..., Any]
    log: Callable[[str], None]

    def tell_refusal(self, run_id: str, code: str, message: str) -> None:
        """Send the refusal of ``run_id`` (signed); log, never raise, if the server does not take it."""
        if code not in REASONS:
            code = "other"
        try:
            self._request(
                "POST",
                f"/v1/client/runs/{run_id}/refuse",
                {"reason": code, "message": refusal_message(message)},
                retries=2,
            )
        except (FedstatsError, httpx.HTTPError) as exc:
            self.log(f"could not tell the server why run {run_id} was refused: {exc}"[:300])


class Rejoined:
    """The runs a restarted device finds itself in (see the module); ``runs`` counts them.

    Attributes
    ----------
    runs : set of str
        Runs the device is (or was, since it started) a member of without having accepted them in this
        process.
    """

    def __init__(self) -> None:
        self.runs: set[str] = set()
        self._finished_before: set[str] | None = None  # finished before the first work list

    def note_finished(
        self,
        finished: Iterable[Mapping[str, Any]],
        joined: Mapping[str, Any],
        charged: Callable[[str], str | None],
    ) -> None:
        """Count the runs that finished since the device started and that it did not join itself.

        Only those whose charge its budget file holds (``charged(run_id)`` not None: it was in them).
        """
        ids = {str(f.get("run_id")) for f in finished}
        if self._finished_before is None:
            self._finished_before = ids
            return
        new = ids - self._finished_before - set(joined)
        self.runs |= {rid for rid in new if charged(rid) is not None}
