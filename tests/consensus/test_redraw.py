"""A committee that cannot reach quorum: what happens, with and without ``redraw_ticks``.

Two of a 4-member committee crash for good (``q = 3``): the height cannot decide in that committee.

* Without ``redraw_ticks`` (plain pBFT) nothing decides, however long it runs, and nothing unsafe happens: the chain
  waits for the crashed members, and goes on when they come back.
* With ``redraw_ticks = R``, a height not decided within ``R`` ticks moves to a committee re-drawn from every member
  by the genesis hash, the height and the attempt (``ChainContext.view_committee``), at views ``a·2^32`` on; the
  chain goes on, each such block certified by the re-drawn committee (which it names as the next one, in this
  harness), and the cluster's invariants (agreement, validity, certificates, evidence) hold after every event.
* Seeded sweeps with lossy links, crashes and Byzantine members keep those invariants with re-draws on.
"""

from __future__ import annotations

import pytest

from consensus import verify_decided_block
from consensus.testing import Cluster, Faults
from ledger import ATTEMPT_VIEWS, LedgerError, genesis_state

R = 120  # redraw_ticks: several view-change timeouts of default_replica_config()


def _crash_two_of_the_committee(c: Cluster) -> list[str]:
    committee = sorted(c.states[c.peers[0]].committee)
    down = committee[:2]
    for p in down:
        c.crash(p)
    return down


def test_without_redraw_a_committee_short_of_quorum_stalls_safely_until_its_members_return():
    c = Cluster(size=4, members=10, seed=3, redraw_ticks=0)
    down = _crash_two_of_the_committee(c)
    c.run(1500)
    assert c.min_height() == 0, "a committee of 4 with 2 members down has no quorum of 3: nothing decides"
    assert not c.evidence
    for p in down:
        c.recover(p)
    assert c.run_until(lambda: c.min_height() >= 3, max_ticks=3000), [c.height(p) for p in c.peers]


def test_with_redraw_a_re_drawn_committee_decides_the_height():
    c = Cluster(size=4, members=10, seed=3, redraw_ticks=R)
    down = set(_crash_two_of_the_committee(c))
    assert c.run_until(lambda: c.min_height() >= 4, max_ticks=40 * R), [c.height(p) for p in c.peers]
    chain = c.chains[c.live_honest()[0]]
    assert chain[0].certificate.view >= ATTEMPT_VIEWS, "height 1 was decided by a re-drawn committee"
    state = genesis_state(c.ctx)
    for b in chain:
        committee = c.ctx.view_committee(state, b.header.height, b.certificate.view)
        signers = {s.signer for s in b.certificate.signatures}
        assert signers <= set(committee) and not signers & down
        if b.certificate.view >= ATTEMPT_VIEWS:
            assert committee != state.committee
        state = verify_decided_block(c.ctx, state, b)
    assert not c.evidence


def test_the_re_drawn_committee_is_the_genesis_hash_height_and_attempt_alone():
    c = Cluster(size=4, members=10, seed=3, redraw_ticks=R)
    st = c.states[c.peers[0]]
    k1 = c.ctx.view_committee(st, 1, ATTEMPT_VIEWS)
    assert c.ctx.view_committee(st, 1, ATTEMPT_VIEWS + 7) == k1  # every view of an attempt
    assert c.ctx.view_committee(st, 1, 0) == st.committee
    assert c.ctx.view_committee(st, 1, 2 * ATTEMPT_VIEWS) != k1 or c.ctx.view_committee(st, 2, ATTEMPT_VIEWS) != k1
    other = Cluster(size=4, members=10, seed=99, redraw_ticks=R)  # same members and genesis: same draw
    assert other.ctx.view_committee(other.states[other.peers[0]], 1, ATTEMPT_VIEWS) == k1
    plain = Cluster(size=4, members=10, seed=3, redraw_ticks=0)
    with pytest.raises(LedgerError, match="never re-draws"):
        plain.ctx.view_committee(st, 1, ATTEMPT_VIEWS)


FAULTS = Faults(drop=0.1, duplicate=0.05, delay_ticks_max=3)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["crash", "equivocate", "silent", "wrong_proposal"])
def test_sweeps_with_redraw_keep_the_invariants_and_go_on(seed, kind):
    """Lossy links; one faulty member of a 4-member committee drawn from 10, and (crash) a second member of the
    genesis committee down, so that heights need re-drawn committees; the invariants hold after every event, and
    once the links heal the chain goes on."""
    byz = {} if kind == "crash" else {seed % 10: kind}
    c = Cluster(size=4, members=10, seed=1000 + seed, byzantine=byz, faults=FAULTS, redraw_ticks=R)
    if kind == "crash":
        _crash_two_of_the_committee(c)
    c.run(6 * R)
    c.heal()
    start = c.min_height()
    assert c.run_until(lambda: c.min_height() >= start + 2, max_ticks=40 * R), [c.height(p) for p in c.peers]
    if kind == "crash":  # (the others re-draw only where losses held a height past R ticks)
        assert any(b.certificate.view >= ATTEMPT_VIEWS for b in c.chains[c.live_honest()[0]])
