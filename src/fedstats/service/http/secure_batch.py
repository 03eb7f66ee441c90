"""Group commit of secure stage messages: the messages that arrive together are written in one statement.

A secure stage of ``n`` devices brings ``n`` signed requests at once (each device answers the stage message
it was just sent). Alone, each costs a transaction of its own (its nonce, the session row share-locked, the
message, the commit: four round trips to the database). :class:`StageBatcher` writes the messages that
arrived while the previous batch was written together: one transaction, one statement on PostgreSQL
(:meth:`~fedstats.service.store.secure.SecureQueries.put_up_messages`), one hand-off to a store thread.
Each request is acknowledged only once its transaction committed, and gets the answer (or the error) it
would get alone (:func:`fedstats.service.domain.secure_devices.submit_up_at`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

from fastapi import HTTPException

from fedstats.service.domain import secure_devices
from fedstats.service.http.batching import Batcher
from fedstats.service.http.deps import NonceUse, use_nonce
from fedstats.service.store import State
from fedstats.service.store.rows import PutUp

__all__ = ["StageBatcher", "StageUp"]


@dataclass(frozen=True)
class StageUp:
    """One verified stage request: its nonce and the message it carries."""

    nonce: NonceUse
    run_id: str
    index: int
    number: int
    stage: int
    client_id: str
    data: bytes


class StageBatcher(Batcher[StageUp, tuple[bool, bool]]):
    """Writes the stage messages that arrive together in one transaction (:class:`.batching.Batcher`).

    Awaiting it with a :class:`StageUp` returns :func:`~fedstats.service.domain.secure_devices.submit_up_at`'s
    ``(new, at_stage)`` or raises its error (HTTP 401 for a replayed nonce).

    A message this process cannot screen from memory
    (:func:`~fedstats.service.domain.secure_devices.screen_up`: the first of its stage, a sender not
    addressed, an oversized one), a second one of the same sender and stage in the batch, and one the
    bulk write did not store (its session no longer open at the stage, or a message already stored)
    take the exact path in a transaction of its own, after the batch was written without them (the
    batch is rolled back and written again if one was not stored: its nonce must not stay used).
    """

    def prime(self, items: list[StageUp]) -> None:
        """Load the stages of ``items`` that this process cannot screen yet, in one read-only transaction.

        Without it every message of a stage's first batch (often most of the stage: the devices answer
        together) would take the exact path, one transaction each.
        """
        stages = {
            (u.run_id, u.index, u.number, u.stage)
            for u in items
            if not secure_devices.stage_known(u.run_id, u.index, u.number, u.stage)
        }
        if not stages:
            return
        try:
            with self.store.transaction(read_only=True) as tx:
                for key in sorted(stages):
                    secure_devices.prime_stage(tx, *key)
        except Exception:  # only a shortcut: the exact path answers each message
            return

    def write(self, items: list[StageUp]) -> list[tuple[bool, bool] | BaseException]:
        """Write ``items`` (blocking, on a store thread); per item its answer or its error."""
        self.prime(items)
        screened = [
            secure_devices.screen_up(u.run_id, u.index, u.number, u.stage, u.client_id, u.data)
            for u in items
        ]
        exact: set[int] = set()
        seen: set[tuple[object, ...]] = set()
        for i, (u, vouched) in enumerate(zip(items, screened, strict=True)):
            keys: list[tuple[object, ...]] = [("n", u.nonce.client_id, u.nonce.nonce)]
            if vouched is not None:
                keys.append(("m", u.run_id, u.index, u.number, u.stage, vouched[0]))
            if vouched is None or any(k in seen for k in keys):
                exact.add(i)
            seen.update(keys)

        def bulk(tx: State, todo: list[int]) -> dict[int, tuple[bool, bool] | BaseException]:
            puts = []
            for i in todo:
                u, (ci, digest) = items[i], cast(tuple[int, str], screened[i])
                puts.append(
                    PutUp(
                        u.nonce.client_id,
                        u.nonce.nonce,
                        u.nonce.ts,
                        u.run_id,
                        u.index,
                        u.number,
                        u.stage,
                        ci,
                        u.data,
                        digest,
                    )
                )
            got = tx.put_up_messages(puts, time.time())
            answers: dict[int, tuple[bool, bool] | BaseException] = {}
            for i, (fresh, put) in zip(todo, got, strict=True):
                if fresh and not put:  # not stored (its session moved on, or one is there): alone
                    continue
                answers[i] = (
                    (True, True)
                    if fresh
                    else HTTPException(401, "replayed request (nonce already used)")
                )
            return answers

        def alone(tx: State, i: int) -> tuple[bool, bool]:
            u = items[i]
            use_nonce(tx, u.nonce)
            return secure_devices.submit_up_at(
                tx, u.run_id, u.index, u.number, u.stage, u.client_id, u.data
            )

        out = self.write_bulk(len(items), exact, bulk, alone)
        return [o if o is not None else RuntimeError("not written") for o in out]
