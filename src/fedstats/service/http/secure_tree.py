"""The answers of the secure-run routes for a tree-seeded run (:mod:`fedstats.service.domain.secure_tree`).

:mod:`.secure` and :mod:`.device` call in here where a run is a tree run (``runs.cohort_head`` set);
every answer's content is :mod:`fedstats.wire.tree_seeding`'s:

* held check-in: ``{"slot_start", "slot_count", "tree": leaf_answer}`` (:func:`checkin_leaf`); with
  ``Fedstats-Next-Work: 1``, a member off the committee's also ``"revealed"`` (the ``part=committee``
  answer) and ``"work"`` once the seed is fixed (:func:`checkin_committee`);
* ``GET .../seed``: ``{"status", "seed", "tree"}`` (+ ``"committee"`` once the seed is fixed);
  ``?part=committee[&wait=W]``: ``{"status", "seed", "committee"}`` once fixed (the same bytes for
  every member), before that ``{"status", "seed": null}`` (:func:`seed`); with
  ``Fedstats-Next-Work: 1`` the committee answer also carries the device's next work list (``"work"``);
* ``POST .../reveal?wait=``: the acknowledgement's ``"revealed"`` is the ``part=committee`` answer
  (:func:`held_committee`), with ``Fedstats-Next-Work: 1`` also ``"work"`` (:func:`next_work`);
* the stage-0 message's and ``GET .../certificates``' ``members=``/``also=``: the
  :func:`~fedstats.wire.tree_seeding.leaves_answer` object instead of the certificate list
  (:func:`checked`). A list run takes its usual (cached) path; a run this process has not seen yet
  costs one look at the store first.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from fastapi import HTTPException
from fastapi.responses import Response

from fedstats.service.domain import runs, secure_devices, secure_tree
from fedstats.wire.tree_seeding import CARRIED_WORK_BYTES

if TYPE_CHECKING:
    from fedstats.service.http.secure import SecureRoutes

__all__ = [
    "TREE_MARK",
    "checked",
    "checkin_committee",
    "checkin_leaf",
    "held_committee",
    "next_work",
    "seed",
    "with_work",
]

TREE_MARK = b"\x00tree"
"""What :meth:`~.secure.SecureRoutes.held_commitments` answers for a tree run (its devices get their leaf)."""


def _leaf(ctx: SecureRoutes, run_id: str, cid: str) -> bytes:
    with ctx.store.transaction(read_only=True) as tx:
        run = runs.load_run(tx, run_id)
        return json.dumps(secure_tree.leaf_json(tx, run, cid)).encode()


async def checkin_leaf(ctx: SecureRoutes, run_id: str, cid: str) -> bytes:
    """The JSON of the member's ``"tree"`` object (head and leaf proof) for its held check-in's answer.

    From this process's memory once it holds the run's tree (every member's held check-in is answered
    at once when check-in closes): one transaction per process, not per device.
    """
    # the held check-ins wake together as check-in closes: one read of the tree for all of them
    fast = await _warmed(
        ctx,
        ("tree", run_id),
        functools.partial(_tree, ctx, run_id),
        functools.partial(secure_tree.cached_leaf_json, run_id, cid),
    )
    if fast is not None:
        return fast
    return await ctx.offload(functools.partial(_leaf, ctx, run_id, cid))


async def _warmed(
    ctx: SecureRoutes,
    key: tuple[str, ...],
    prime: Callable[[], None],
    from_memory: Callable[[], bytes | None],
) -> bytes | None:
    """``from_memory()``, after one shared store read (``prime``, keyed by ``key``) if it was cold.

    The requests that arrive together wait for the same read (:meth:`SecureRoutes.shared`); its error
    is its own: None then, and each caller asks the store alone.
    """
    got = from_memory()
    if got is None:
        with contextlib.suppress(Exception):
            await ctx.shared(key, prime)
        got = from_memory()
    return got


def _tree(ctx: SecureRoutes, run_id: str) -> None:
    """Load the run's tree into this process's memory (:func:`~.domain.secure_tree.tree_of`)."""
    with ctx.store.transaction(read_only=True) as tx:
        secure_tree.tree_of(tx, runs.load_run(tx, run_id))


def _committee(ctx: SecureRoutes, run_id: str, cid: str | None) -> bytes | None:
    """The ``part=committee`` answer once the seed is fixed (cached), else None; 422 on a list run."""
    got = ctx.cache.get(("committee", run_id))
    if got is not None and (cid is None or secure_tree.cached_member(run_id, cid)):
        return got
    with ctx.store.transaction(read_only=True) as tx:
        run = runs.load_run(tx, run_id)
        if run.cohort_head is None:
            raise HTTPException(422, "part=committee is for a run seeded by its cohort tree")
        if cid is not None:
            secure_tree.position_of(tx, run, cid)  # members only (SecurityError: 403)
        if run.public_seed is None:
            return None
        return ctx.cached(
            ("committee", run_id),
            lambda: secure_tree.seed_json(tx, run, "", secure_tree.COMMITTEE, member=False),
        )


async def held_committee(
    ctx: SecureRoutes, run_id: str, population: str, wait: float, since: tuple[int, int] | None
) -> bytes | None:
    """The ``part=committee`` answer once the run's seed is fixed, held up to ``wait`` seconds."""

    async def attempt() -> bytes | None:
        got = ctx.cache.get(("committee", run_id))
        if got is not None:
            return got
        generation = ctx.changes.generation(population)  # one look per change for all held
        look = functools.partial(_committee, ctx, run_id, None)
        return await ctx.shared(("committee", run_id, *map(str, generation)), look)

    return await ctx.changes.hold(population, min(wait, ctx.max_wait), attempt, since=since)


def _seed(ctx: SecureRoutes, run_id: str, cid: str) -> bytes:
    with ctx.store.transaction(read_only=True) as tx:
        run = runs.load_run(tx, run_id)
        return json.dumps(secure_tree.seed_json(tx, run, cid, None)).encode()


def with_work(body: bytes, work: tuple[str, bytes] | None) -> Response:
    """A JSON answer: ``body`` (a JSON object) carrying the device's next work list, if any.

    Parameters
    ----------
    body : bytes
        The answer's JSON object, encoded.
    work : (str, bytes) or None
        ``(ETag, work list)`` (:func:`next_work`, or the app's ``next_work``), or None.

    Returns
    -------
    Response
        ``body`` with ``"work"`` added and the list's ``ETag`` in the header (the device handles the
        list as its next poll's answer); ``body`` alone without a list.
    """
    if work is None:
        return Response(body, media_type="application/json")
    carried = body[:-1] + b',"work":' + work[1] + b"}"
    return Response(carried, media_type="application/json", headers={"ETag": work[0]})


async def seed(
    ctx: SecureRoutes,
    run_id: str,
    cid: str,
    part: str | None,
    wait: float,
    carry_work: bool = False,
) -> Response:
    """``GET .../seed`` of a tree run (:func:`with_work`'s answer).

    Parameters
    ----------
    ctx : SecureRoutes
    run_id, cid : str
        The run and the asking device (verified by the caller).
    part : str or None
        None (the seed and the device's leaf) or ``"committee"``.
    wait : float
        Seconds, >= 0: how long the committee answer may be held until the seed is fixed.
    carry_work : bool
        The device asked for its next work list with the committee (``Fedstats-Next-Work: 1``): once
        the seed is fixed, the answer is held further, within the same ``wait``, until the device's
        work list gives it something to do (the first round opens in the driver pass that fixes the
        seed), and carries it as ``"work"``, as a held last stage does: one work poll fewer per device
        and run. Without it, when ``wait`` runs out first, or when the work list is longer than
        :data:`~fedstats.wire.tree_seeding.CARRIED_WORK_BYTES`, the answer is the committee alone.
    """
    if part != secure_tree.COMMITTEE:
        return with_work(await ctx.offload(functools.partial(_seed, ctx, run_id, cid)), None)
    end = time.monotonic() + min(wait, ctx.max_wait)
    got = await ctx.offload(functools.partial(_committee, ctx, run_id, cid))
    population = await ctx.population_of(cid) if wait > 0 else ""
    if got is None and wait > 0:
        got = await held_committee(ctx, run_id, population, wait, None)
    if got is None:
        return with_work(b'{"status":"seeding","seed":null}', None)
    work = await next_work(ctx, run_id, cid, population, end) if carry_work else None
    return with_work(got, work)


async def next_work(
    ctx: SecureRoutes,
    run_id: str,
    cid: str,
    population: str,
    end: float,
    *,
    bounded: bool = True,
) -> tuple[str, bytes] | None:
    """The device's next work list for an answer to carry, once it has something to do.

    Parameters
    ----------
    ctx : SecureRoutes
        The routes' context; its ``next_work`` gives the device's next work list that gives it
        something to do, held up to the time left (None there: no list is carried).
    run_id, cid, population : str
        The run the answer is about, the device and its population.
    end : float
        ``time.monotonic()`` deadline, seconds: the wait is held at most until then.
    bounded : bool, default True
        Carry at most :data:`~fedstats.wire.tree_seeding.CARRIED_WORK_BYTES` bytes of list (what the
        device's read limit allows for a committee answer, a reveal's or a check-in's); False: any
        length (a held last stage's answer, which the device reads like a poll's).

    Returns
    -------
    (str, bytes) or None
        ``(ETag, work list JSON)``; None if nothing came by ``end`` or, bounded, the list is longer
        than the bound (the device then polls for it).
    """
    left = end - time.monotonic()
    if ctx.next_work is None or left <= 0:
        return None
    got = await ctx.next_work(cid, population, run_id, left)
    return got if got is not None and (not bounded or len(got[1]) <= CARRIED_WORK_BYTES) else None


async def checkin_committee(
    ctx: SecureRoutes, run_id: str, cid: str, population: str, end: float
) -> tuple[bytes, tuple[str, bytes] | None] | None:
    """What the held check-in of a member off the committee carries besides its leaf, if it asked.

    A member off the seed committee reveals nothing: once it has its leaf it only waits for the
    committee (``GET .../seed?part=committee``) and then its first round (a work poll). Its
    check-in's answer, held until ``end`` (monotonic seconds), carries both instead.

    Parameters
    ----------
    ctx : SecureRoutes
        The routes' context.
    run_id, cid, population : str
        The tree run, the checking-in device and its population.
    end : float
        ``time.monotonic()`` deadline, seconds (the check-in's ``wait``, capped by ``max_wait``).

    Returns
    -------
    (bytes, (str, bytes) or None) or None
        The ``part=committee`` answer and, if it came in time, ``(ETag, work list)``. None for a
        committee member (it needs its leaf at once, to reveal), a run whose tree this process does
        not hold, or a seed not fixed by ``end``: the device then asks as before.
    """
    left = end - time.monotonic()
    if left <= 0 or not secure_tree.cached_member(run_id, cid, off_committee=True):
        return None
    got = await held_committee(ctx, run_id, population, left, None)
    if got is None:
        return None
    return got, await next_work(ctx, run_id, cid, population, end)


def _neighbourhood(
    ctx: SecureRoutes,
    run_id: str,
    index: int,
    number: int,
    cid: str,
    members: list[int],
    also: list[int],
) -> bytes | None:
    with ctx.store.transaction(read_only=True) as tx:
        if secure_tree.tree_or_none(tx, run_id) is None:
            return None
        run = runs.load_run(tx, run_id)
        certs = secure_devices.certificates(tx, run_id, index, number, cid, members)
        answer = secure_tree.neighbourhood(tx, run, index, number, members, also, certs)
        return json.dumps(answer).encode()


def _from_memory(
    run_id: str, index: int, number: int, cid: str, members: list[int], also: list[int]
) -> bytes | None:
    """The neighbourhood answer from this process's memory (None: a cache is cold, or not a member)."""
    certs = secure_devices.cached_certificates_json(run_id, index, number, cid, members)
    if certs is None:
        return None
    return secure_tree.cached_neighbourhood(run_id, index, number, members, also, certs)


def _prime(ctx: SecureRoutes, run_id: str, index: int, number: int, cid: str) -> None:
    """Fill the caches a session's neighbourhood answers come from (one read for its devices)."""
    with ctx.store.transaction(read_only=True) as tx:
        run = runs.load_run(tx, run_id)
        secure_devices.certificates(tx, run_id, index, number, cid, [])
        secure_tree.session_positions(tx, run, index, number)


async def checked(
    ctx: SecureRoutes,
    run_id: str,
    index: int,
    number: int,
    cid: str,
    members: list[int],
    also: list[int] | None,
) -> bytes:
    """What a device's ``members=`` (and ``also=``) ask: a tree run's leaves answer, else the certificates.

    Raises
    ------
    NotFoundError, SecurityError, ParameterError
        As :func:`fedstats.service.domain.secure_devices.certificates`.
    """
    if secure_tree.known_tree(run_id):  # from memory once the session's answers were made once
        # a session's devices all ask as its stage 1 opens (their held advertisements wake
        # together): they wait for one read to fill the caches, as member_certificates does
        fast = await _warmed(
            ctx,
            ("neighbourhood", run_id, str(index), str(number)),
            functools.partial(_prime, ctx, run_id, index, number, cid),
            functools.partial(_from_memory, run_id, index, number, cid, members, also or []),
        )
        if fast is not None:
            return fast
    if secure_tree.known_tree(run_id) is not False:
        look = functools.partial(_neighbourhood, ctx, run_id, index, number, cid, members)
        got = await ctx.offload(functools.partial(look, also or []))
        if got is not None:
            return got
    return await ctx.member_certificates(run_id, index, number, cid, members)
