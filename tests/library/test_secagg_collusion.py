"""The colluder bound (``fedstats.secagg.collusion``) against the protocol and against the graph.

A server holding ``c`` colluding members of a malicious-model session plays the only attack the module's
analysis leaves it (``tests/secagg_harness.py``: unmodified clients, serialized messages): it declares every
honest neighbour of the victim dropped, signs that survivor set with the colluders, collects the unmasking
answers, and removes the victim's masks. With ``neighbours_to_isolate`` colluding neighbours it recovers the
victim's input exactly; with one fewer the clients refuse the survivor set or the answers hold fewer than
``t`` shares of every secret it would need. The number of colluders among a member's neighbours in the
public graph is hypergeometric (what :func:`isolation_probability` assumes), checked by Monte Carlo; and the
table in ``docs/secagg.md`` is the one the module generates.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import chisquare, hypergeom

from fedstats.errors import ParameterError, ProtocolAbortError
from fedstats.secagg import collusion
from fedstats.secagg.collusion import (
    COMPLETE_UP_TO,
    MIN_COLLUDER_FRACTION,
    colluder_table_markdown,
    colluders_to_isolate,
    isolation_probability,
    meets_colluder_fraction,
    neighbours_to_isolate,
    session_colluders,
    session_parameters,
)
from fedstats.secagg.crypto import LABEL_MASK, add_mask, mask_sign, pair_key, self_mask_seed
from fedstats.secagg.graph import public_harary_graph
from fedstats.secagg.messages import (
    ConsistencySignature,
    MaskedInput,
    SurvivorSet,
    UnmaskRequest,
    UnmaskResponse,
)
from fedstats.secagg.shamir import reconstruct_secret
from secagg_harness import Deployment, call_together, reveals

DOC = Path(__file__).resolve().parents[2] / "docs" / "secagg.md"


def _masked_inputs(
    dep: Deployment,
    colluders: frozenset[int] | set[int] = frozenset(),
) -> tuple[dict[int, MaskedInput], dict[int, bytes]]:
    """Run the honest protocol through the masked inputs: every member's masked input, and the mask keys
    of ``colluders`` (what the attacker holds: a member forgets its key once it has masked its input)."""
    out = dep.honest_until("masked_input")
    keys = {}
    for j in colluders:
        assert dep.clients[j]._mask_keys is not None
        keys[j] = dep.clients[j]._mask_keys.private_bytes()
    masked: dict[int, MaskedInput] = {}
    for i, m in out.items():
        reply = dep.send(i, m)
        assert isinstance(reply, MaskedInput), dep.errors.get(i)
        masked[i] = reply
        dep.server.receive_bytes(reply.to_bytes())
    dep.server.advance()
    return masked, keys


def _declare_dropped(
    dep: Deployment, dropped: set[int]
) -> tuple[list[UnmaskResponse], dict[int, Exception]]:
    """Tell every other member that ``dropped`` dropped, sign with the colluders, ask for the unmasking:
    the answers, and what the members refused at the survivor set (before they were asked to unmask)."""
    n = dep.params.n
    survivors = tuple(i for i in range(n) if i not in dropped)
    sigs: dict[int, bytes] = {}
    for i in survivors:
        reply = dep.send(i, SurvivorSet(dep.session, i, n, survivors))
        if isinstance(reply, ConsistencySignature):
            sigs[i] = reply.signature
    refused = dict(dep.errors)
    answers = [dep.send(i, UnmaskRequest(dep.session, i, signatures=sigs)) for i in survivors]
    return [a for a in answers if isinstance(a, UnmaskResponse)], refused


def _recover(
    dep: Deployment,
    victim: int,
    masked: MaskedInput,
    answers: list[UnmaskResponse],
    colluder_keys: dict[int, bytes],
    dropped: set[int],
) -> np.ndarray:
    """The victim's input from its masked input, its self-mask seed and every pairwise mask."""
    t = dep.params.t
    tr = dep.server._transcript
    seed_shares = [
        (a.sender + 1, a.seed_shares[victim]) for a in answers if victim in a.seed_shares
    ]
    y = masked.values.copy()
    b_v = reconstruct_secret(seed_shares, threshold=t)
    add_mask(y, self_mask_seed(tr, victim, b_v), sign=-1)
    pk_v = dep.server._keys[victim][0]
    for j in sorted(dep.nbrs[victim]):
        if j in colluder_keys:  # the attacker's own member: its mask key is the attacker's
            sk_j = colluder_keys[j]
        else:  # declared dropped: its survivors reveal its mask key
            assert j in dropped
            shares = [(a.sender + 1, a.key_shares[j]) for a in answers if j in a.key_shares]
            sk_j = reconstruct_secret(shares, threshold=t)
        seed = pair_key(sk_j, pk_v, session=tr, label=LABEL_MASK, me=j, peer=victim)
        add_mask(y, seed, sign=-mask_sign(victim, j))
    return y


# (n, k, t, min_survivors): the devices' default floor (both terms 3), a session where the dropout
# allowance decides (k - (n - min_survivors) = 5 > t), the service's 20-member session, and one where t
# decides (5 > k - (n - min_survivors) = 3)
SESSIONS = [(10, 4, 3, 9), (12, 6, 4, 11), (20, 6, 4, 18), (20, 6, 5, 17), (10, 9, 5, 9)]
# the last: the complete graph the service now uses for a session of 10 (session_parameters), where
# isolating a member takes 8 colluders, not 3


@pytest.mark.parametrize(("n", "k", "t", "m"), SESSIONS)
def test_the_bound_s_colluding_neighbours_recover_the_victim_s_input_exactly(
    n: int, k: int, t: int, m: int
) -> None:
    need = neighbours_to_isolate(n, k, t, m)
    victim = 0
    dep = Deployment(n, k, t, min_survivors=m, seed=n)
    colluders = set(
        sorted(dep.nbrs[victim])[:need]
    )  # members following the protocol for the attacker
    masked, colluder_keys = _masked_inputs(dep, colluders)
    dropped = set(dep.nbrs[victim]) - colluders
    answers, errors = _declare_dropped(dep, dropped)
    assert not errors, errors
    recovered = _recover(dep, victim, masked[victim], answers, colluder_keys, dropped)
    assert np.array_equal(recovered, dep.x[victim].astype(recovered.dtype))


@pytest.mark.parametrize(("n", "k", "t", "m"), SESSIONS)
def test_one_colluding_neighbour_fewer_is_refused_or_reveals_too_little(
    n: int, k: int, t: int, m: int
) -> None:
    need = neighbours_to_isolate(n, k, t, m)
    victim = 0
    dep = Deployment(n, k, t, min_survivors=m, seed=n)
    colluders = set(sorted(dep.nbrs[victim])[: need - 1])
    honest = sorted(set(dep.nbrs[victim]) - colluders)
    allowance = n - m
    # every honest neighbour dropped: more than the session may lose, so the clients abort
    if len(honest) > allowance:
        _masked_inputs(dep)
        answers, errors = _declare_dropped(dep, set(honest))
        assert not answers
        assert errors and all(isinstance(e, ProtocolAbortError) for e in errors.values())
    # as many dropped as allowed (none, if the allowance is 0): some honest neighbour survives, and
    # neither its mask key nor the victim's is revealed; or all are dropped and b_v lacks shares
    dep = Deployment(n, k, t, min_survivors=m, seed=n)
    colluders = set(sorted(dep.nbrs[victim])[: need - 1])  # the new session's graph
    honest = sorted(set(dep.nbrs[victim]) - colluders)
    dropped = set(honest[:allowance])
    _masked_inputs(dep)
    answers, errors = _declare_dropped(dep, dropped)
    assert not errors, errors
    seeds, keys = reveals(answers)
    alive = set(honest) - dropped
    if (
        alive
    ):  # the pairwise mask with a surviving honest neighbour stays: its key and v's are secret
        assert keys.get(victim, 0) == 0
        assert all(keys.get(j, 0) == 0 for j in alive)
    else:  # every honest neighbour dropped: the victim's self-mask seed has only the colluders' shares
        assert seeds.get(victim, 0) < t


def test_a_member_s_colluding_neighbours_are_hypergeometric_in_the_public_graph() -> None:
    n, k, colluders, draws = 10, 4, 3, 4000
    counts = np.zeros(k + 1, dtype=np.int64)
    seeds = np.random.default_rng(7)  # run seeds (the commit-reveal seed is uniform)
    for _ in range(draws):
        graph = public_harary_graph(n, k, seeds.bytes(32))
        counts[int(np.isin(graph[0], np.arange(1, colluders + 1)).sum())] += 1
    expected = hypergeom.pmf(np.arange(k + 1), n - 1, colluders, k) * draws
    assert counts[expected == 0].sum() == 0  # more colluding neighbours than colluders: never
    obs, exp = counts[expected > 0], expected[expected > 0]  # every expected count here is >= 190
    assert chisquare(obs, exp).pvalue > 1e-6
    # and the module's chance (3 of 4 neighbours) is the empirical frequency, within 5 standard errors
    p = isolation_probability(n, k, 3, 9, colluders)
    assert abs(counts[3:].sum() / draws - p) < 5 * np.sqrt(p * (1 - p) / draws)


def test_the_bound_grows_with_the_colluders_and_meets_the_probability() -> None:
    for n, k, t, m in [*SESSIONS, (100, 26, 16, 90), (1000, 90, 58, 900)]:
        c = colluders_to_isolate(n, k, t, m)
        assert isolation_probability(n, k, t, m, c) >= 1e-3
        assert (
            c == neighbours_to_isolate(n, k, t, m)
            or isolation_probability(n, k, t, m, c - 1) < 1e-3
        )
    # the numbers the issue measured (3 of 10, 4 of 20, 14 of 50, 35 of 100, 484 of 1,000)
    assert [colluders_to_isolate(*s) for s in [(10, 4, 3, 9), (20, 6, 4, 18)]] == [3, 4]
    assert colluders_to_isolate(100, 26, 16, 90) == 35
    assert colluders_to_isolate(1000, 90, 58, 900) == 484


def test_the_docs_table_is_the_generated_one() -> None:
    page = DOC.read_text()
    found = re.search(r"<!-- colluders:begin -->\n(.*?)<!-- colluders:end -->", page, re.S)
    assert found, "docs/secagg.md lacks the generated colluder table"
    assert found.group(1) == colluder_table_markdown(), (
        "regenerate it: python -c 'from fedstats.secagg.collusion import colluder_table_markdown as f; "
        'print(f(), end="")\''
    )


@given(n=st.integers(-5, 40), k=st.integers(-2, 45), t=st.integers(-2, 45), m=st.integers(-2, 45))
def test_out_of_range_parameters_name_themselves(n: int, k: int, t: int, m: int) -> None:
    ok = n >= 2 and 1 <= k <= n - 1 and 1 <= t <= k and 1 <= m <= n
    if ok:
        assert 1 <= neighbours_to_isolate(n, k, t, m) <= k
    else:
        with pytest.raises(ParameterError) as err:
            neighbours_to_isolate(n, k, t, m)
        assert err.value.args and any(
            name in str(err.value) for name in ("n", "k", "t", "min_survivors")
        )


def test_the_exact_hypergeometric_tail_is_scipy_s() -> None:
    for n, k, t, m in [*SESSIONS, (100, 26, 16, 90), (1000, 90, 58, 900)]:
        need = neighbours_to_isolate(n, k, t, m)
        for c in (need, (need + n) // 2, n - 1):
            want = float(hypergeom.sf(need - 1, n - 1, c, k))
            assert isolation_probability(n, k, t, m, c) == pytest.approx(want, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize(
    "n", [4, 5, 9, 10, 11, 20, 33, 63, 64, 65, 66, 71, 79, 80, 99, 150, 257, 1000]
)
def test_every_session_the_service_forms_needs_a_third_of_it_to_isolate_a_member(n: int) -> None:
    p = session_parameters(n)
    assert (p.k == n - 1) == (n <= COMPLETE_UP_TO) or p.k == n - 1
    assert p.threat_model == "malicious" and p.security_bound <= -40 and p.correctness_bound <= -30
    assert session_colluders(p) >= MIN_COLLUDER_FRACTION * n - 1e-9
    assert meets_colluder_fraction(p, MIN_COLLUDER_FRACTION)
    # the one-evaluation check is the bisection's answer
    c = session_colluders(p)
    assert meets_colluder_fraction(p, c / n) and not meets_colluder_fraction(p, (c + 1) / n)


def test_small_sessions_need_all_but_the_allowed_dropouts_as_colluders() -> None:
    # the attack: 3 colluders in a session of 10, 4 in 20; with the complete graph the server
    # needs min_survivors - 1 (8 and 17), whatever seed it grinds to
    for n, attackers in ((10, 3), (20, 4)):
        p = session_parameters(n)
        assert (
            p.k == n - 1
            and neighbours_to_isolate(p.n, p.k, p.t, p.min_survivors) == p.min_survivors - 1
        )
        assert isolation_probability(p.n, p.k, p.t, p.min_survivors, attackers) == 0.0
        assert session_colluders(p) == p.min_survivors - 1
    assert session_parameters(COMPLETE_UP_TO + 1).k < COMPLETE_UP_TO


def test_threads_asking_for_the_same_session_size_search_once() -> None:
    """Devices of one process reaching a session's setup together share one parameter search."""
    n = 777  # a size no other test asks for
    before = collusion._session_parameters.cache_info().misses
    got = call_together(session_parameters, n)
    assert len(got) == 8 and all(p is got[0] for p in got)
    assert collusion._session_parameters.cache_info().misses == before + 1
