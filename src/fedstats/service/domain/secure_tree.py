"""Tree-seeded secure runs, the server's side: the tree, the seed committee, sessions and rosters.

A secure run whose check-in closed with more devices than the server's ``cohort_tree_above`` stores
its cohort tree's head (``runs.cohort_head``) and seeds by a committee of ``min(n, 40)`` members
(``docs/deploy.md``, "Secure aggregation over the network", *In a large cohort, the cohort tree*;
the messages are :mod:`fedstats.wire.tree_seeding`'s, both sides' one definition). Every function
here is for a *tree run* (``run.cohort_head is not None``); the list form of :mod:`.secure` and
:mod:`.secure_devices` is unchanged for the others, which call in here where a run is a tree run.

* The tree (:func:`tree_of`): the members in slot order, each leaf its client id, commitment,
  enrolled key and slot count; built once per process per run and checked against the stored head.
* The committee (:func:`record_reveal`, :func:`close_seeding`, :func:`committee_json`): only its
  members reveal, each signing over the head; a member that did not reveal by the deadline is a
  withholder and the run aborts (the committee picks the seed: no run goes on without one of it).
* Rounds (:func:`partition`, :func:`bound_roster`, :func:`range_proof`, :func:`neighbourhood`):
  sessions from positions (:func:`fedstats.wire.cohort_sessions.sessions_of_positions`), each
  roster bound by :func:`fedstats.wire.tree_seeding.session_binding`.

Parameters named alike mean alike: ``tx`` an open transaction (not read where this process's memory
answers), ``run`` a tree run's row, ``run_id``/``client_id`` the run and the device, ``index``/``number``
a round and its session. A function that reads the tree may raise :func:`tree_of`'s errors (listed there).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from typing import Any

from fedstats.errors import DataError, ParameterError, SecurityError
from fedstats.secagg.identity import SIGNATURE_BYTES, SessionRoster
from fedstats.service.domain.batched import batch_member, note_member, write_later
from fedstats.service.domain.changes import ArrivalGate
from fedstats.service.domain.tasks import ConflictError, NotFoundError, task_config
from fedstats.service.store import State
from fedstats.service.store.rows import RoundRow, RunRow
from fedstats.wire import seeding
from fedstats.wire.cohort_sessions import (
    committee_positions,
    committee_seed,
    sessions_of_positions,
)
from fedstats.wire.cohort_tree import CohortTree, Leaf
from fedstats.wire.tasks import min_session_size
from fedstats.wire.tree_seeding import (
    check_reveal,
    committee_answer,
    leaf_answer,
    leaves_answer,
    proof_text,
    range_answer,
    session_binding,
)

__all__ = [
    "COMMITTEE",
    "bound_roster",
    "build_tree",
    "cached_leaf_json",
    "cached_member",
    "cached_neighbourhood",
    "close_seeding",
    "committee",
    "committee_json",
    "forget",
    "known_tree",
    "leaf_json",
    "neighbourhood",
    "partition",
    "position_of",
    "range_proof",
    "record_reveal",
    "seed_json",
    "session_positions",
    "tree_of",
    "tree_or_none",
]

COMMITTEE = "committee"
"""``GET .../seed?part=committee``: the seed and the committee's answer (a tree run's)."""

_EMPTY_SIGNATURE = b"\x00" * SIGNATURE_BYTES

# run id -> (its tree, client id -> position): fixed once the run is seeding (its cohort is)
_TREES: dict[str, tuple[CohortTree, dict[str, int]]] = {}
_LISTS: set[str] = set()  # run ids known to be no tree run (check-in closed without a head)
_COMMITTEES: dict[str, dict[str, Any]] = {}  # run id -> the committee answer (fixed with the seed)
_RANGES: dict[tuple[str, int], tuple[int, int]] = {}  # (run id, round) -> (p_lo, p_hi)
# (run id, round, session) -> the session's positions in roster order
_SESSIONS: dict[tuple[str, int, int], list[int]] = {}


def build_tree(tx: State, run_id: str) -> CohortTree:
    """The cohort tree of a run's members as stored now (slot order; one leaf per member).

    The driver builds it as check-in closes, to store its head; :func:`tree_of` rebuilds, checks it.

    Parameters
    ----------
    tx : State
    run_id : str

    Returns
    -------
    CohortTree
        One leaf ``(client id, commitment, enrolled identity key, slot count)`` per member.

    Raises
    ------
    ParameterError
        If a member has no commitment (not a secure check-in) or the tree cannot be built (no
        member, or one without slots).
    KeyError
        If a member is not an enrolled device (:meth:`State.enrolled`).
    """
    rows = tx.members_in_order(run_id)
    keys = tx.enrolled([m.client_id for m in rows])
    leaves = []
    for m, key in zip(rows, keys, strict=True):
        if m.commitment is None:
            raise ParameterError("commitment", m.client_id, "a member of a secure check-in")
        leaves.append(
            Leaf(
                m.client_id,
                bytes.fromhex(m.commitment),
                bytes.fromhex(key.public_key),
                m.slot_count,
            )
        )
    return CohortTree(leaves)


def tree_of(tx: State, run: RunRow) -> CohortTree:
    """A tree run's cohort tree: built once per process, checked against the stored head.

    Parameters
    ----------
    tx : State
    run : RunRow
        The run's row.

    Returns
    -------
    CohortTree
        From memory after the first call (the cache is cleared past 16 runs; :func:`forget`).

    Raises
    ------
    SecurityError
        If the run is not a tree run, or its members no longer give the stored head.
    ParameterError, KeyError
        As :func:`build_tree`, when the tree is built.
    """
    got = _TREES.get(run.id)
    if got is None:
        if run.cohort_head is None:
            raise SecurityError(f"run {run.id} is not seeded by a cohort tree")
        tree = build_tree(tx, run.id)
        if tree.head.to_bytes().hex() != run.cohort_head:
            raise SecurityError(f"run {run.id}'s members no longer give its stored cohort head")
        got = (tree, {tree.leaf(p).client_id: p for p in range(tree.head.n)})
        if len(_TREES) > 16:
            _TREES.clear()
        _TREES[run.id] = got
    return got[0]


def cached_member(run_id: str, client_id: str, *, off_committee: bool = False) -> bool:
    """Whether this process's memory shows ``client_id`` to be a member of tree run ``run_id``.

    Parameters
    ----------
    run_id, client_id : str
    off_committee : bool
        Also that the member is off the seed committee (it reveals nothing).

    Returns
    -------
    bool
        True if this process holds the run's tree with a leaf of ``client_id`` (with
        ``off_committee``, not at a :func:`~fedstats.wire.cohort_sessions.committee_positions`).
        False is no answer: the tree may not be in memory; the caller asks the store.
    """
    got = _TREES.get(run_id)
    if got is None or client_id not in got[1]:
        return False
    return not off_committee or got[1][client_id] not in committee_positions(got[0].head)


def cached_leaf_json(run_id: str, client_id: str) -> bytes | None:
    """The JSON of a member's ``"tree"`` object from this process's memory alone, or None.

    Parameters
    ----------
    run_id, client_id : str

    Returns
    -------
    bytes or None
        ``json.dumps`` of :func:`leaf_json`'s answer, UTF-8. None if this process does not hold the
        run's tree or it has no leaf of ``client_id`` (the store's :func:`leaf_json` then decides).
    """
    got = _TREES.get(run_id)
    position = None if got is None else got[1].get(client_id)
    if got is None or position is None:
        return None
    return json.dumps(leaf_answer(got[0], position)).encode()


def known_tree(run_id: str) -> bool | None:
    """What this process knows of ``run_id``'s form, from memory alone (no transaction).

    Parameters
    ----------
    run_id : str

    Returns
    -------
    bool or None
        True: it holds the run's tree. False: :func:`tree_or_none` found a list run whose check-in
        had closed. None: neither (not looked at in this process yet, dropped when a cache was
        full, or released by :func:`forget`); the caller asks the store.
    """
    if run_id in _TREES:
        return True
    return False if run_id in _LISTS else None


def tree_or_none(tx: State, run_id: str) -> CohortTree | None:
    """The run's tree if it is a tree run, else None (remembered once its check-in closed).

    Parameters
    ----------
    tx : State
    run_id : str

    Returns
    -------
    CohortTree or None
        The tree (:func:`tree_of`); None for a run without a stored head: a list run, or one still
        in check-in. A list run past check-in is remembered (:func:`known_tree` is then False).

    Raises
    ------
    NotFoundError
        If there is no run ``run_id`` (looked up only when this process knows nothing of it).
    """
    if run_id in _LISTS:
        return None
    got = _TREES.get(run_id)
    if got is not None:
        return got[0]
    run = tx.run(run_id)
    if run is None:
        raise NotFoundError(f"no run {run_id!r}")
    if run.cohort_head is None:
        if run.status != "checkin":  # the form is fixed when check-in closes
            if len(_LISTS) > 4096:
                _LISTS.clear()
            _LISTS.add(run_id)
        return None
    return tree_of(tx, run)


def position_of(tx: State, run: RunRow, client_id: str) -> int:
    """A member's position in the run's tree.

    Parameters
    ----------
    tx : State
    run : RunRow
    client_id : str

    Returns
    -------
    int
        Its leaf's index in slot order, in ``[0, n)``.

    Raises
    ------
    SecurityError
        If ``client_id`` is not a member (the routes answer 403).
    """
    tree_of(tx, run)
    got = _TREES[run.id][1].get(client_id)
    if got is None:
        raise SecurityError("this client is not in the run's cohort")
    return got


def committee(tx: State, run: RunRow) -> list[int]:
    """The run's seed committee: ``min(n, 40)`` positions drawn from its head's digest.

    Parameters
    ----------
    tx : State
    run : RunRow

    Returns
    -------
    list of int
        Distinct positions in ``[0, n)``, increasing
        (:func:`~fedstats.wire.cohort_sessions.committee_positions`).
    """
    return committee_positions(tree_of(tx, run).head)


def leaf_json(tx: State, run: RunRow, client_id: str) -> dict[str, str]:
    """A member's ``"tree"`` object, which it checks at check-in: the head and its leaf proof.

    Parameters
    ----------
    tx : State
    run : RunRow
    client_id : str

    Returns
    -------
    dict of str to str
        :func:`fedstats.wire.tree_seeding.leaf_answer`: ``"head"``, 90 hex digits; ``"leaf"``, the
        base64 leaf proof.

    Raises
    ------
    SecurityError
        If ``client_id`` is not a member.
    """
    return leaf_answer(tree_of(tx, run), position_of(tx, run, client_id))


def _hex(data: dict[str, Any], name: str) -> bytes:
    v = data.get(name)
    if not isinstance(v, str):
        raise DataError(f"a committee reveal needs {name!r} (hex)")
    try:
        return bytes.fromhex(v)
    except ValueError:
        raise DataError(f"{name!r} must be hex") from None


def record_reveal(
    tx: State,
    run: RunRow,
    client_id: str,
    data: dict[str, Any],
    held: dict[Any, Any] | None = None,
) -> bool:
    """Store a committee member's signed reveal; return False for an identical repeat.

    Parameters
    ----------
    tx : State
    run : RunRow
    client_id : str
    data : dict
        The body ``{"value", "seen", "signature"}``, hex
        (:func:`fedstats.wire.tree_seeding.signed_reveal`).
    held : dict, optional
        Shared by one transaction's reveals (:mod:`.batched`; as in
        :func:`fedstats.service.domain.secure_devices.record_reveal`).

    Returns
    -------
    bool
        True if the reveal was checked and stored; False if the device had revealed this value
        already (a repeat: its ``seen`` and signature are not checked again).

    Raises
    ------
    ConflictError
        The run is not collecting reveals, the device is not on the committee, or it revealed
        another value.
    SecurityError
        Not a member, ``seen`` is not the head's digest, or the value or signature does not check
        against the leaf (:func:`fedstats.wire.tree_seeding.check_reveal`).
    DataError
        A field is missing or not hex.
    """
    m = batch_member(tx, run.id, client_id, held)
    if m is None:
        raise SecurityError("this client is not in the run's cohort")
    value, seen, signature = _hex(data, "value"), _hex(data, "seen"), _hex(data, "signature")
    if m.reveal is not None:
        if m.reveal == value.hex():
            return False
        raise ConflictError("a different value was already revealed")
    if run.status != "seeding":
        raise ConflictError(f"run {run.id} is not collecting reveals (status {run.status})")
    tree = tree_of(tx, run)
    position = position_of(tx, run, client_id)
    if position not in committee_positions(tree.head):
        raise ConflictError("not a committee member: this device does not reveal in this run")
    if seen != tree.head.digest():
        raise SecurityError("the cohort tree head this client saw is not the run's")
    check_reveal(run.id, tree.head, position, tree.leaf(position), value, signature)
    row = (run.id, client_id, value.hex(), signature.hex())
    if not write_later(held, "reveals", row, tx.set_reveals):
        tx.set_reveal(run.id, client_id, value.hex(), signature.hex())
    note_member(held, run.id, client_id, (m.slot_start, m.slot_count), m.commitment, value.hex())
    return True


def close_seeding(
    tx: State, run: RunRow, deadline: float, gate: ArrivalGate | None = None
) -> RunRow | str | None:
    """Fix a tree run's seed once its whole committee revealed; abort it at ``deadline`` otherwise.

    The committee's members that did not reveal by then are recorded as withholders
    (:meth:`~fedstats.service.store.secure.SecureQueries.add_withholders`) and the run aborts; the
    seed is :func:`~fedstats.wire.cohort_sessions.committee_seed` of the values in committee order.

    Parameters
    ----------
    tx : State
    run : RunRow
        The tree run's row, as loaded (and locked) in ``tx``.
    deadline : float
        Unix time, seconds: reveals are awaited until then.
    gate : ArrivalGate, optional
        The driver's gate, told how many reveals are missing while it waits.

    Returns
    -------
    RunRow or str or None
        As :func:`fedstats.service.domain.secure.close_seeding`: the run as now stored (its seed
        fixed, status ``running``); the reason to abort it; None while waiting for reveals.
    """
    tree = tree_of(tx, run)
    positions = committee_positions(tree.head)
    ids = [tree.leaf(p).client_id for p in positions]
    rows = tx.member_rows(run.id, ids)
    missing = [c for c in ids if c not in rows or rows[c].reveal is None]
    if missing:
        if time.time() <= deadline:
            if gate is not None:  # the reveal handlers wake a pass at the last one
                gate.looked(("reveal", run.id), len(missing))
            return None
        tx.add_withholders(run.task_id, run.id, missing, time.time())
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        return (
            f"{len(missing)} seed committee member(s) did not reveal their contribution before the "
            f"deadline ({shown}; excluded from the task's later runs): a tree-seeded run cannot go "
            "on without its committee"
        )
    values = [bytes.fromhex(str(rows[c].reveal)) for c in ids]
    seed = committee_seed(run.id, tree.head, values).hex()
    tx.start_secure_run(run.id, seed)
    return dataclasses.replace(run, public_seed=seed, status="running")


def committee_json(tx: State, run: RunRow) -> dict[str, Any]:
    """The ``"committee"`` object every member checks, built once per process per run.

    Parameters
    ----------
    tx : State
    run : RunRow

    Returns
    -------
    dict
        :func:`fedstats.wire.tree_seeding.committee_answer` of the stored reveals and
        certificates: the same dict at every call (the cache is cleared past 16 runs).

    Raises
    ------
    ParameterError
        If a committee member has no stored reveal or certificate (call it once the seed is fixed).
    """
    got = _COMMITTEES.get(run.id)
    if got is None:
        tree = tree_of(tx, run)
        positions = committee_positions(tree.head)
        ids = [tree.leaf(p).client_id for p in positions]
        rows = tx.member_rows(run.id, ids)
        reveals = {
            p: (bytes.fromhex(str(rows[c].reveal)), bytes.fromhex(str(rows[c].reveal_signature)))
            for p, c in zip(positions, ids, strict=True)
            if c in rows and rows[c].reveal is not None and rows[c].reveal_signature is not None
        }
        certificates = {
            p: json.loads(e.certificate)
            for p, e in zip(positions, tx.enrolled(ids), strict=True)
            if e.certificate is not None
        }
        got = committee_answer(tree, reveals, certificates)
        if len(_COMMITTEES) > 16:
            _COMMITTEES.clear()
        _COMMITTEES[run.id] = got
    return got


def seed_json(
    tx: State, run: RunRow, client_id: str, part: str | None, *, member: bool = True
) -> dict[str, Any]:
    """``GET .../seed`` of a tree run for a member (``part``: None or :data:`COMMITTEE`).

    Parameters
    ----------
    tx : State
    run : RunRow
    client_id : str
    part : str or None
    member : bool, default True
        Check that ``client_id`` is a member (False: the caller did, or shares the committee).

    Returns
    -------
    dict
        Without ``part``: ``{"status", "seed", "tree"}`` (:func:`leaf_json`) and, once the seed is
        fixed, ``"committee"`` (:func:`committee_json`). With ``part=committee``: ``{"status",
        "seed", "committee"}`` once the seed is fixed, else ``{"status", "seed": None}``.

    Raises
    ------
    SecurityError
        If ``client_id`` is not a member (without ``part`` always checked).
    ParameterError
        As :func:`committee_json`.
    """
    if member:
        position_of(tx, run, client_id)
    out: dict[str, Any] = {"status": run.status, "seed": run.public_seed}
    if part is None:
        out["tree"] = leaf_json(tx, run, client_id)
    if run.public_seed is not None:
        out["committee"] = committee_json(tx, run)
    return out


# -- rounds ---------------------------------------------------------------------------------------


def _range(
    tx: State, run: RunRow, index: int, lo: int | None = None, hi: int | None = None
) -> tuple[int, int]:
    key = (run.id, index)
    got = _RANGES.get(key)
    if got is None:
        if lo is None or hi is None:
            rec = tx.round_row(run.id, index)
            if rec is None:
                raise NotFoundError(f"no round {index} in run {run.id!r}")
            lo, hi = rec.lo, rec.hi
        got = tree_of(tx, run).positions_of(lo, hi)
        if len(_RANGES) > 1024:
            _RANGES.clear()
        _RANGES[key] = got
    return got


def _limits(cfg: dict[str, Any]) -> tuple[int, int]:
    opts = cfg["secure_aggregation"]
    return int(opts["max_session"]), min_session_size(opts)


def partition(tx: State, run: RunRow, rec: RoundRow, cfg: dict[str, Any]) -> list[list[str]]:
    """The members of each session of a tree run's secure round, in roster order.

    Positions ``[p_lo, p_hi)`` of the round's client range, cut by
    :func:`~fedstats.wire.cohort_sessions.sessions_of_positions` (each device derives its seat by
    :func:`~fedstats.wire.cohort_sessions.session_of`); no withholder is left out (there is none).

    Parameters
    ----------
    tx : State
    run : RunRow
    rec : RoundRow
        The secure round: its ``index`` and client range ``[lo, hi)``.
    cfg : dict
        The task's configuration (its ``secure_aggregation`` limits).

    Returns
    -------
    list of list of str
        ``[s][i]``: the client id at roster index ``i`` of session ``s``.

    Raises
    ------
    ProtocolAbortError
        If a session would be smaller than the task's ``min_session_size``.
    ParameterError
        If the round's client range is empty or beyond the cohort's slots.
    """
    tree = tree_of(tx, run)
    p_lo, p_hi = _range(tx, run, rec.index, rec.lo, rec.hi)
    max_session, least = _limits(cfg)
    seed = bytes.fromhex(str(run.public_seed))
    return [
        [tree.leaf(p).client_id for p in session]
        for session in sessions_of_positions(seed, p_lo, p_hi, max_session, least)
    ]


def bound_roster(
    tx: State, run: RunRow, index: int, number: int, members: Sequence[str]
) -> SessionRoster:
    """A tree run's session roster for the server: every member's key, bound by the session binding.

    Parameters
    ----------
    tx : State
    run : RunRow
    index, number : int
    members : sequence of str
        The session's client ids in roster order (:func:`partition`).

    Returns
    -------
    SessionRoster
        The run's task id, the session id, every member's key in roster order, a zero signature
        and the binding :func:`~fedstats.wire.tree_seeding.session_binding` (with the task's
        ``max_session``), as each device computes it.

    Raises
    ------
    NotFoundError
        If the run's task is not stored, or round ``index`` when its range is not in memory.
    SecurityError
        If a client id is not a member.
    ParameterError
        If ``members`` is not of a session's size, ``[2, max_session]``.
    """
    tree = tree_of(tx, run)
    max_session = _limits(task_config(tx, run.task_id))[0]
    p_lo, p_hi = _range(tx, run, index)
    positions = [position_of(tx, run, c) for c in members]
    seed = bytes.fromhex(str(run.public_seed))
    binding = session_binding(
        run.id, seed, tree.head, index, number, p_lo, p_hi, max_session, len(members)
    )
    sid = seeding.session_id(seed, index, number)
    keys = tuple(tree.leaf(p).key for p in positions)
    return SessionRoster(seeding.task_id_bytes(run.id), sid, keys, _EMPTY_SIGNATURE, binding)


def range_proof(tx: State, run_id: str, rec: RoundRow) -> str | None:
    """A tree run's stage-0 ``"range_proof"`` of round ``rec``, or None (whole cohort, or no tree).

    Parameters
    ----------
    tx : State
    run_id : str
    rec : RoundRow
        The round: its client range ``[lo, hi)``.

    Returns
    -------
    str or None
        The base64 range proof (:func:`fedstats.wire.tree_seeding.range_answer`); None for a run
        without a stored head (a list run) or a round over the whole cohort.

    Raises
    ------
    NotFoundError
        As :func:`tree_or_none`.
    ParameterError
        If the round's client range is empty or beyond the cohort's slots.
    """
    tree = tree_or_none(tx, run_id)
    if tree is None:
        return None
    return range_answer(tree, rec.lo, rec.hi)


def session_positions(tx: State, run: RunRow, index: int, number: int) -> list[int]:
    """The tree positions of session ``number`` of round ``index`` in roster order (cached).

    Parameters
    ----------
    tx : State
    run : RunRow
    index, number : int

    Returns
    -------
    list of int
        Each stored member's position in ``[0, n)``, in roster order (the cached list itself).

    Raises
    ------
    NotFoundError
        If the session does not exist.
    SecurityError
        If a stored member is not in the run's tree.
    """
    key = (run.id, index, number)
    got = _SESSIONS.get(key)
    if got is None:
        row = tx.secure_session(run.id, index, number)
        if row is None:
            raise NotFoundError(f"no secure session {number} in round {index} of run {run.id!r}")
        got = [position_of(tx, run, c) for c in json.loads(row.members)]
        if len(_SESSIONS) > 1024:
            _SESSIONS.clear()
        _SESSIONS[key] = got
    return got


def neighbourhood(
    tx: State,
    run: RunRow,
    index: int,
    number: int,
    checked: Sequence[int],
    also: Sequence[int],
    certificates: Sequence[Any],
) -> dict[str, Any]:
    """The answer to a device's neighbourhood (:func:`~fedstats.wire.tree_seeding.leaves_answer`).

    Parameters
    ----------
    tx : State
    run : RunRow
    index, number : int
    checked, also : sequence of int
        Roster indices of the session the device named: ``members=`` (certificates checked) and
        ``also=`` (keys only).
    certificates : sequence of dict
        Those of ``checked``, in that order (the caller checked the device is a member).

    Returns
    -------
    dict
        ``{"leaves", "certificates"}`` for the named indices' positions.

    Raises
    ------
    ParameterError
        An index outside the session's roster, or none named.
    NotFoundError, SecurityError
        As :func:`session_positions`.
    """
    positions = session_positions(tx, run, index, number)
    named = [*checked, *also]
    if not named or any(not 0 <= j < len(positions) for j in named):
        raise ParameterError("members", named, f"roster indices in [0, {len(positions)})")
    return leaves_answer(tree_of(tx, run), [positions[j] for j in named], certificates)


def cached_neighbourhood(
    run_id: str,
    index: int,
    number: int,
    checked: Sequence[int],
    also: Sequence[int],
    certificates: bytes,
) -> bytes | None:
    """:func:`neighbourhood`'s JSON from this process's memory alone, or None (ask the store).

    Every device of a session asks, every round: no transaction, no certificate encoding per device.

    Parameters
    ----------
    run_id : str
    index, number : int
    checked, also : sequence of int
        As in :func:`neighbourhood`.
    certificates : bytes
        The JSON list of ``checked``'s certificates, as
        :func:`fedstats.service.domain.secure_devices.cached_certificates_json` gives it (the
        caller's check that the device is a member of the session).

    Returns
    -------
    bytes or None
        ``json.dumps`` of :func:`neighbourhood`'s answer. None if this process does not hold the
        run's tree or the session's positions, nothing is named, or an index is outside the roster
        (the store's path then raises ParameterError).
    """
    got, positions = _TREES.get(run_id), _SESSIONS.get((run_id, index, number))
    named = [*checked, *also]
    if got is None or positions is None or not named:
        return None
    if min(named) < 0 or max(named) >= len(positions):  # parsed ints (secure_query)
        return None
    proof = proof_text(got[0].multiproof_bytes(map(positions.__getitem__, named))).encode()
    return b'{"leaves": "' + proof + b'", "certificates": ' + certificates + b"}"


def forget(run_id: str) -> None:
    """Release what this process keeps of a run (its tree, committee, ranges and sessions).

    :func:`fedstats.service.domain.secure_devices.forget_run` calls it for a run that is over or
    whose lease this process gave up; later calls read the store again (:func:`known_tree` is None).

    Parameters
    ----------
    run_id : str
    """
    _TREES.pop(run_id, None)
    _LISTS.discard(run_id)
    _COMMITTEES.pop(run_id, None)
    for key in [k for k in list(_RANGES) if k[0] == run_id]:
        _RANGES.pop(key, None)
    for skey in [k for k in list(_SESSIONS) if k[0] == run_id]:
        _SESSIONS.pop(skey, None)
