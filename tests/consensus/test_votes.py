"""The vote keeper (consensus/_votes.py): quorum arithmetic, tallies and equivocation [pBFT §4.2-4.5.2].

Every quorum question the replica asks goes there; these pin the arithmetic on small committees without a cluster.
"""

from __future__ import annotations

from consensus._messages import KIND_COMMIT, KIND_PREPARE, ViewChange, parse, view_change_message, vote_message
from consensus._votes import Quorum, VoteKeeper
from ledger import KeyPair, quorum_size

CHAIN = "votes-test"
KEYS = sorted((KeyPair.derive(f"votes-member-{i}") for i in range(4)), key=lambda k: k.peer_id)
PEERS = tuple(k.peer_id for k in KEYS)
BLOCK = bytes(32)
OTHER = bytes([1]) * 32


def _view(committee: tuple[str, ...], rule: str = "bft") -> tuple[tuple[str, ...], frozenset[str], int]:
    return committee, frozenset(committee), quorum_size(len(committee), rule)


def _keeper(height: int = 1) -> VoteKeeper:
    votes = VoteKeeper()
    votes.start_height(height)
    votes.set_committee(_view(PEERS))
    return votes


def _vote(i: int, kind: str, view: int = 0, block: bytes = BLOCK, height: int = 1):  # noqa: ANN202
    signed = vote_message(KEYS[i], CHAIN, kind, height, view, block).signed
    assert signed is not None
    return signed


def _view_change(i: int, view: int) -> ViewChange:
    vc = parse(view_change_message(KEYS[i], CHAIN, 1, view, None, None))
    assert isinstance(vc, ViewChange)
    return vc


def test_quorum_thresholds_of_bft_and_majority_committees():
    for size, q, weak in ((4, 3, 2), (7, 5, 3), (12, 9, 4)):  # 2f+1 and f+1 of 3f+1 (12: f = 3)
        quorum = Quorum(_view(tuple(f"m{i:02}" for i in range(size))))
        assert (quorum.threshold, quorum.weak_threshold) == (q, weak)
        assert quorum.reached(q) and not quorum.reached(q - 1)
        assert quorum.weakly_reached(weak) and not quorum.weakly_reached(weak - 1)
    majority = Quorum(_view(tuple(f"m{i:02}" for i in range(12)), "majority"))
    assert (majority.threshold, majority.weak_threshold) == (7, 6)


def test_a_certificate_needs_a_quorum_of_committee_members():
    quorum = Quorum(_view(PEERS))
    assert quorum.certified_by(set(PEERS[:3]))
    assert not quorum.certified_by(set(PEERS[:2]))
    assert not quorum.certified_by({*PEERS[:2], "outsider"})


def test_prepared_once_a_quorum_voted_without_the_primarys_pre_prepare_in_the_prepares():
    votes = _keeper()
    primary = PEERS[2]
    assert votes.add_prepare(0, BLOCK, _vote(2, KIND_PREPARE))  # (stands for the primary's pre-prepare)
    assert votes.add_prepare(0, BLOCK, _vote(3, KIND_PREPARE))
    assert not votes.add_prepare(0, BLOCK, _vote(3, KIND_PREPARE))  # a duplicate is not counted twice
    assert votes.add_prepare(0, OTHER, _vote(0, KIND_PREPARE, block=OTHER))  # another block's vote does not count
    assert votes.prepared(0, BLOCK, primary) is None
    assert votes.add_prepare(0, BLOCK, _vote(1, KIND_PREPARE))
    prepares = votes.prepared(0, BLOCK, primary)
    assert prepares is not None and [s.signer for s in prepares] == sorted([PEERS[1], PEERS[3]])
    assert set(votes.prepares(0, BLOCK)) == {PEERS[1], PEERS[2], PEERS[3]} and not votes.prepares(1, BLOCK)


def test_a_commit_certificate_holds_the_first_quorum_of_signers():
    votes = _keeper(height=5)
    for i in (3, 2):
        assert votes.add_commit(1, BLOCK, _vote(i, KIND_COMMIT, view=1, height=5))
    assert votes.commit_certificate(1, BLOCK) is None
    assert not votes.add_commit(1, BLOCK, _vote(2, KIND_COMMIT, view=1, height=5))
    assert votes.add_commit(1, BLOCK, _vote(1, KIND_COMMIT, view=1, height=5))
    cert = votes.commit_certificate(1, BLOCK)
    assert cert is not None and (cert.height, cert.view, cert.block_hash) == (5, 1, BLOCK)
    assert [s.signer for s in cert.signatures] == list(PEERS[1:])
    assert votes.add_commit(1, BLOCK, _vote(0, KIND_COMMIT, view=1, height=5))
    cert = votes.commit_certificate(1, BLOCK)
    assert cert is not None and [s.signer for s in cert.signatures] == list(PEERS[:3])  # q of 4, by id
    assert votes.commit_views(BLOCK) == [1] and votes.commit_views(OTHER) == []
    assert set(votes.commits(1, BLOCK)) == set(PEERS) and not votes.commits(0, BLOCK)


def test_view_change_quorums_arm_join_and_new_view():
    votes = _keeper()
    me = PEERS[0]
    assert votes.add_view_change(_view_change(0, 1)) and not votes.add_view_change(_view_change(0, 1))
    assert not votes.left_view(1) and votes.view_to_join(0, me) is None
    votes.add_view_change(_view_change(1, 3))
    assert votes.view_to_join(0, me) is None  # f + 1 = 2 other members needed
    votes.add_view_change(_view_change(2, 2))
    assert votes.view_to_join(0, me) == 2  # the smallest view the f + 1 asked for
    assert votes.view_to_join(2, me) is None
    assert votes.left_view(1) and not votes.left_view(2)  # members 1 and 2 left view 2, not a quorum
    assert votes.new_view_quorum(1) is None
    votes.add_view_change(_view_change(3, 1))
    votes.add_view_change(_view_change(2, 1))
    chosen = votes.new_view_quorum(1)
    assert chosen is not None and [vc.signed.signer for vc in chosen] == [PEERS[0], PEERS[2], PEERS[3]]


def test_equivocation_is_reported_once_and_only_at_the_height():
    votes = _keeper()
    first, second = _vote(1, KIND_PREPARE), _vote(1, KIND_PREPARE, block=OTHER)
    assert votes.equivocation(first) is None and votes.equivocation(first) is None
    found = votes.equivocation(second)
    assert found is not None
    evidence, first_report = found
    assert first_report and evidence.kind == "equivocation" and evidence.offender == PEERS[1]
    assert sorted(x.body["block_hash"] for x in evidence.exhibits) == [BLOCK, OTHER]
    again = votes.equivocation(second)
    assert again is not None and not again[1]
    assert votes.equivocation(_vote(1, KIND_PREPARE, block=OTHER, height=2)) is None  # another height
    votes.start_height(2)
    assert votes.equivocation(_vote(1, KIND_PREPARE, height=2)) is None  # a new height forgets the bodies
