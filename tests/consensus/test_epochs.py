"""Committees fixed per epoch (coordinator mode's ``committee_epoch``): a lazy member catching up skips to the last
header of each epoch (``ledger.apply_header(epoch=)``, ``apply_block(epoch=)``, ``Replica(committee_epoch=)``).

Blocks come from a real :class:`consensus.testing.Cluster` whose committee changes only at the end of each epoch of
4 heights (16 members, committees of 4); the lazy members are real :class:`consensus.Replica` objects.
"""

from __future__ import annotations

import dataclasses

import pytest

from consensus import KIND_HEADER_SYNC, Commit, CommitHeader, Replica, Send, SendBlocks, decided_header_message, decided_message
from consensus.testing import Cluster
from ledger import ChainContext, ChainError, SignatureError, apply_block, apply_header, genesis_state, make_certificate, same_epoch, sign_commit

E = 4


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    c = Cluster(size=4, members=16, seed=5, rotate=True, epoch=E)
    assert c.run_until(lambda: all(c.height(p) >= 12 for p in c.live_honest()), 12 * c.liveness_bound_ticks())
    return c


def _chain(c: Cluster) -> list:
    return c.chains[c.honest[0]][:12]


def _states(c: Cluster) -> list:
    """``states[k]``: the chain state after ``k`` blocks (walked block by block, no skip)."""
    out = [genesis_state(c.ctx)]
    for b in _chain(c):
        out.append(apply_block(c.ctx, out[-1], b))
    return out


def _followed(state):
    """What a header alone says of a state (``ledger.apply_header`` leaves the payload's fields unknown)."""
    return dataclasses.replace(state, model_digest=b"", state_digest=None)


def test_the_cluster_keeps_each_committee_for_an_epoch(cluster: Cluster) -> None:
    states = _states(cluster)
    committees = [s.committee for s in states[:12]]  # committees[k]: certifies height k + 1
    for k in range(12):
        assert committees[k] == committees[k // E * E], f"height {k + 1} is certified by its epoch's committee"
    assert len({committees[0], committees[4], committees[8]}) == 3, "a new committee at each epoch's end"
    assert same_epoch(1, 4, E) and not same_epoch(4, 5, E) and same_epoch(5, 8, E) and same_epoch(7, 7, 1)


def test_apply_header_skips_within_an_epoch_only(cluster: Cluster) -> None:
    c = cluster
    chain, states = _chain(c), _states(c)
    nxt = c.expected_committee
    # from the state after block 1 (height 2 next) to header 3, then to header 4 (the epoch's last: it names the next
    # committee, drawn from the state before it, which the header's prev_hash gives)
    got = apply_header(c.ctx, states[1], chain[2].header, chain[2].certificate, next_committee=nxt(states[2]), epoch=E)
    assert got == _followed(states[3])
    got = apply_header(c.ctx, states[1], chain[3].header, chain[3].certificate, next_committee=nxt(states[3]), epoch=E)
    assert got == _followed(states[4]) and got.committee != states[1].committee
    # a whole block: the payload's fields too
    assert apply_block(c.ctx, states[4], chain[7], epoch=E) == states[8]
    assert apply_block(c.ctx, states[4], chain[4], epoch=E) == states[5]  # the successor, as without epochs

    refused = {
        "across an epoch's end": lambda: apply_header(c.ctx, states[1], chain[4].header, chain[4].certificate,
                                                      next_committee=nxt(states[4]), epoch=E),
        "without epochs": lambda: apply_header(c.ctx, states[1], chain[2].header, chain[2].certificate,
                                               next_committee=nxt(states[2])),
        "a block across an epoch's end": lambda: apply_block(c.ctx, states[2], chain[5], epoch=E),
        "another block's certificate": lambda: apply_header(c.ctx, states[1], chain[2].header, chain[1].certificate,
                                                            next_committee=nxt(states[2]), epoch=E),
        "backwards": lambda: apply_header(c.ctx, states[3], chain[1].header, chain[1].certificate,
                                          next_committee=nxt(states[1]), epoch=E),
    }
    for what, call in refused.items():
        with pytest.raises(ChainError):
            call()
        assert what
    # signed by another committee than the epoch's (the next epoch's members re-sign header 3): refused
    hd, view = chain[2].header, chain[2].certificate.view
    forged = make_certificate(hd, [sign_commit(c.keys[p], c.ctx.chain_id, hd.height, view, hd.hash())
                                   for p in sorted(states[4].committee)], view=view)
    with pytest.raises(SignatureError, match="not in the committee"):
        apply_header(c.ctx, states[1], chain[2].header, forged, next_committee=nxt(states[2]), epoch=E)
    with pytest.raises(ValueError, match="re-executed"):
        apply_block(c.ctx, states[4], chain[7], epoch=E, reexecutor=object())  # type: ignore[arg-type]

    # a context that remembers checks (as a simulation's): a skip it remembered never answers a successor check
    memo = ChainContext(c.genesis, block_memo=64)
    assert apply_block(memo, states[4], chain[7], epoch=E) == states[8]
    assert apply_block(memo, states[4], chain[7], epoch=E) == states[8]  # (a hit)
    with pytest.raises(ChainError, match="expected height 5"):
        apply_block(memo, states[4], chain[7])
    got = apply_header(memo, states[1], chain[2].header, chain[2].certificate, next_committee=nxt(states[2]), epoch=E)
    assert got == _followed(states[3])
    with pytest.raises(ChainError, match="expected height 2"):
        apply_header(memo, states[1], chain[2].header, chain[2].certificate, next_committee=nxt(states[2]))


def _lazy(c: Cluster, me: str, state, *, needs=lambda st: False, epoch: int = E) -> Replica:
    return Replica(ctx=c.ctx, key=c.keys[me], state=state, config=c.config,
                   next_committee=c.expected_committee, needs_payload=needs, lazy=True, committee_epoch=epoch)


def _outsider(c: Cluster) -> str:
    """A member in no committee of heights 1-12."""
    states = _states(c)
    return next(p for p in c.peers if all(p not in s.committee for s in states[:12]))


def _catch_up(answer, c: Cluster, r: Replica, server: Replica, server_id: str, me: str,  # noqa: ANN001
              fx: list) -> tuple[list, list]:
    """Answer ``r``'s requests from ``server`` as a node does (``SendBlocks.heights()``, from its record; the server
    may also act as a committee member); the requests asked and the CommitHeader/Commit effects ``r`` gave."""
    asked, out = answer(c, r, server, server_id, me, fx, _chain(c), only_serves=False)
    return asked, [e for e in out if isinstance(e, (CommitHeader, Commit))]


def test_a_lazy_member_woken_two_epochs_later_checks_one_header_per_epoch(
    cluster: Cluster, answer_requests  # noqa: ANN001
) -> None:
    c = cluster
    chain, states = _chain(c), _states(c)
    me = _outsider(c)
    r = _lazy(c, me, genesis_state(c.ctx), needs=lambda st: st.height == 10)  # a role at height 11
    server_id = chain[9].header.proposer  # pushes block 10 to the members of round 11
    server = _lazy(c, server_id, states[10])
    fx = r.step(decided_message(chain[9]), sender=server_id)
    assert r.status().height == 1 and r.status().buffered == 1  # block 10 is two epochs on: held
    (ask,) = [e for e in fx if isinstance(e, Send)]
    (serve,) = [e for e in server.step(ask.message, sender=me) if isinstance(e, SendBlocks)]
    assert serve == SendBlocks(to=me, start=1, stop=11, headers=True, epoch=E)
    assert serve.heights() == [4, 8, 10], "the last header of each epoch, and the server's last"
    assert SendBlocks(to=me, start=1, stop=11, headers=True).heights() == list(range(1, 11))
    server2 = _lazy(c, server_id, states[10])
    asked, commits = _catch_up(answer_requests, c, r, server2, server_id, me, fx)
    assert [(type(e).__name__, (e.header if isinstance(e, CommitHeader) else e.block).height) for e in commits] == [
        ("CommitHeader", 4), ("CommitHeader", 8), ("Commit", 10)], "two headers, then the block it needs whole"
    assert r.chain_state == states[10] and r.status().height == 11
    assert "stale_height" not in r.status().dropped and "bad_certificate" not in r.status().dropped


def test_without_epochs_the_same_member_checks_every_header(cluster: Cluster) -> None:
    """The baseline of the test above: ``committee_epoch=1`` on the same chain would refuse it (the committee did
    not change at every height), so the comparison is the count of headers served, not a run."""
    c = cluster
    chain = _chain(c)
    me, server_id = _outsider(c), chain[9].header.proposer
    ask = _lazy(c, me, genesis_state(c.ctx), epoch=1).step(decided_message(chain[9]), sender=server_id)
    (send,) = [e for e in ask if isinstance(e, Send)]
    (serve,) = [e for e in _lazy(c, server_id, _states(c)[10], epoch=1).step(send.message, sender=me)
                if isinstance(e, SendBlocks)]
    assert serve.heights() == list(range(1, 11))


def test_a_block_of_the_same_epoch_is_taken_at_once(cluster: Cluster) -> None:
    c = cluster
    chain, states = _chain(c), _states(c)
    me = _outsider(c)
    r = _lazy(c, me, states[8], needs=lambda st: st.height == 11)
    fx = r.step(decided_message(chain[10]), sender=chain[10].header.proposer)  # block 11, epoch of height 9
    assert [type(e).__name__ for e in fx] == ["Commit"], "no request: nothing between is needed"
    assert r.chain_state == states[11] == fx[0].state
    # a header of the same epoch: taken too (no role after it); one of the next epoch: held, headers asked
    r2 = _lazy(c, me, states[4])
    fx = r2.step(decided_header_message(c.keys[chain[6].header.proposer], c.ctx.chain_id, chain[6]),
                 sender=chain[6].header.proposer)
    assert [type(e).__name__ for e in fx] == ["CommitHeader"] and r2.status().height == 8
    assert r2.chain_state == _followed(states[7])
    fx = r2.step(decided_header_message(c.keys[chain[9].header.proposer], c.ctx.chain_id, chain[9]),
                 sender=chain[9].header.proposer)
    assert not [e for e in fx if isinstance(e, CommitHeader)] and r2.status().height == 8 and r2.status().buffered == 1


def test_a_lazy_member_in_the_committee_or_not_lazy_never_skips(cluster: Cluster) -> None:
    c = cluster
    chain, states = _chain(c), _states(c)
    member = sorted(states[8].committee)[0]  # validates heights 9-12: it follows every block whole
    r = _lazy(c, member, states[8])
    fx = r.step(decided_message(chain[10]), sender=chain[10].header.proposer)
    assert not [e for e in fx if isinstance(e, Commit)] and r.status().height == 9
    plain = Replica(ctx=c.ctx, key=c.keys[_outsider(c)], state=states[8], config=c.config,
                    next_committee=c.expected_committee, needs_payload=lambda st: False, committee_epoch=E)
    fx = plain.step(decided_message(chain[10]), sender=chain[10].header.proposer)
    assert not [e for e in fx if isinstance(e, Commit)] and plain.status().height == 9
    with pytest.raises(ValueError, match="committee_epoch"):
        Replica(ctx=c.ctx, key=c.keys[member], state=states[0], config=c.config,
                committee_epoch=2)
    with pytest.raises(ValueError, match="committee_epoch"):
        _lazy(c, member, states[0], epoch=0)


def test_one_batch_of_headers_covers_header_batch_max_epochs(cluster: Cluster, answer_requests) -> None:  # noqa: ANN001
    """Two headers per batch (``header_batch_max=2``) with epochs of 4: one request covers 8 heights, and a member
    woken at height 10 needs one request (headers 4 and 8), then takes block 10 whole."""
    c = cluster
    chain, states = _chain(c), _states(c)
    cfg = dataclasses.replace(c.config, header_batch_max=2)
    me, server_id = _outsider(c), chain[9].header.proposer

    def lazy(who: str, state, needs) -> Replica:
        return Replica(ctx=c.ctx, key=c.keys[who], state=state, config=cfg,
                       next_committee=c.expected_committee, needs_payload=needs, lazy=True, committee_epoch=E)

    r = lazy(me, genesis_state(c.ctx), lambda st: st.height == 10)
    fx = r.step(decided_message(chain[9]), sender=server_id)
    asked, commits = _catch_up(answer_requests, c, r, lazy(server_id, states[10], lambda st: False), server_id, me, fx)
    assert asked == [(KIND_HEADER_SYNC, 1)], "one request"
    assert [(e.header if isinstance(e, CommitHeader) else e.block).height for e in commits] == [4, 8, 10]
    assert r.chain_state == states[10]
