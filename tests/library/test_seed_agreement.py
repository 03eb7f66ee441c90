"""Commit-then-reveal agreement of the public projection seed."""

from __future__ import annotations

import numpy as np
import pytest

from fedstats.analyses.seed_agreement import (
    SeedAgreement,
    agree_projection_seed,
    client_contribution,
    commitment,
)
from fedstats.errors import ProtocolAbortError, SecurityError
from fedstats.randomness import RandomSource


def _values(n: int, seed: int = 1) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [client_contribution(rng) for _ in range(n)]


def _run(values: list[bytes]) -> int:
    ag = SeedAgreement(len(values))
    for i, v in enumerate(values):
        ag.commit(i, commitment(i, v))
    for i, v in enumerate(values):
        ag.reveal(i, v)
    return ag.seed()


def test_honest_agreement_is_deterministic_and_depends_on_every_client() -> None:
    vals = _values(5)
    s = _run(vals)
    assert s == _run(list(vals))
    assert 0 <= s < 2**256
    for i in range(5):
        changed = list(vals)
        changed[i] = bytes(32)
        assert _run(changed) != s
    assert agree_projection_seed(4, RandomSource(3)) == agree_projection_seed(4, RandomSource(3))
    assert agree_projection_seed(4, RandomSource(3)) != agree_projection_seed(4, RandomSource(4))


def test_last_mover_cannot_change_its_value_after_seeing_others() -> None:
    vals = _values(3)
    ag = SeedAgreement(3)
    for i, v in enumerate(vals):
        ag.commit(i, commitment(i, v))
    ag.reveal(0, vals[0])
    ag.reveal(1, vals[1])
    with pytest.raises(SecurityError, match="does not match"):
        ag.reveal(2, bytes(32))  # a value chosen after seeing the others is rejected
    ag.reveal(2, vals[2])
    assert ag.seed() == _run(vals)


def test_commitment_is_bound_to_its_client() -> None:
    vals = _values(2)
    ag = SeedAgreement(2)
    ag.commit(0, commitment(0, vals[0]))
    ag.commit(1, commitment(0, vals[0]))  # client 1 replays client 0's commitment
    ag.reveal(0, vals[0])
    with pytest.raises(SecurityError):
        ag.reveal(1, vals[0])


def test_phases_are_enforced() -> None:
    vals = _values(2)
    ag = SeedAgreement(2)
    ag.commit(0, commitment(0, vals[0]))
    with pytest.raises(SecurityError, match="before every commitment"):
        ag.reveal(0, vals[0])
    with pytest.raises(SecurityError, match="already committed"):
        ag.commit(0, commitment(0, vals[0]))
    ag.commit(1, commitment(1, vals[1]))
    ag.reveal(0, vals[0])
    with pytest.raises(SecurityError, match="closed"):
        ag.commit(1, commitment(1, vals[1]))
    with pytest.raises(ProtocolAbortError, match="did not reveal"):
        ag.seed()
