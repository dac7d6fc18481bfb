"""The pBFT replica, section by section (Castro & Liskov, OSDI '99; cmfl spec §2.8.2 and §7.8 items 5-6).

Each test drives a deterministic :class:`consensus.testing.Cluster`; invariants (agreement, validity,
certificates, contiguous heights, valid evidence against Byzantine members only) are checked after every
event by the cluster itself.
"""

from __future__ import annotations

import dataclasses

import pytest

from consensus import (
    KIND_COMMIT,
    KIND_PREPARE,
    LocalProtocolError,
    Message,
    Phase,
    Replica,
    ReplicaConfig,
    ReplicaStatus,
    verify_decided_block,
)
from consensus._messages import pre_prepare_message, sign_signed, vote_message
from consensus.testing import Cluster, Faults, agree
from ledger import (
    KeyPair,
    apply_block,
    check_evidence,
    genesis_committee,
    genesis_state,
    make_header,
    primary,
)


def primary_index(size: int, view: int = 0, members: int | None = None, **genesis: object) -> int:
    """Index (into Cluster.peers) of the primary of height 1, ``view``, in the cluster of ``Cluster(size=size,
    members=members, **genesis)`` (what it takes that shapes the genesis, e.g. ``quorum``: the primary is a hash of
    the genesis)."""
    c = Cluster(size=size, members=members, check=False, auto_propose=False, **genesis)  # type: ignore[arg-type]
    return c.peers.index(primary(genesis_committee(c.genesis), c.genesis.hash(), 1, view))


def decided_all(c: Cluster, height: int) -> bool:
    return all(c.height(p) >= height for p in c.live_honest())


def test_normal_case_messages_and_certificate():
    """§4.2-4.3: pre-prepare, prepare, commit; the decided block is a valid ledger block."""
    c = Cluster(size=4, seed=0, auto_propose=False, faults=Faults(reorder=False))
    assert len(c.proposal_requests) == 1
    c.propose_pending()
    c.deliver_all()
    assert decided_all(c, 1)
    assert (c.sent["pre_prepare"], c.sent["prepare"], c.sent["commit"]) == (3, 9, 12)  # (C-1), (C-1)², C(C-1)
    blocks = {c.chains[p][0].header.hash() for p in c.peers}
    assert len(blocks) == 1
    block = c.chains[c.peers[0]][0]
    cert = block.certificate
    assert (cert.height, cert.view, len(cert.signatures)) == (1, 0, 3)
    after = apply_block(c.ctx, genesis_state(c.ctx), block)  # every ledger check, the certificate included
    assert after.height == 1 and after.committee == block.payload.next_committee
    assert all(c.replicas[p].status().height == 2 for p in c.peers)


def test_refused_proposal_is_recorded_and_the_next_primary_commits():
    """CCP step 5 / docs/design.md coordinator step 4: a wrong aggregate is refused, with the reason and
    signed evidence; the view changes and the next primary's block is decided."""
    bad = primary_index(4)
    c = Cluster(size=4, seed=1, byzantine={bad: "wrong_proposal"})
    assert c.run_until(lambda: decided_all(c, 1), c.liveness_bound_ticks())
    block = c.chains[c.honest[0]][0]
    assert block.header.view >= 1 and block.header.proposer != c.peers[bad]
    for p in c.honest:
        (r,) = [x for x in c.replicas[p].status().refusals if x.height == 1]
        assert r.proposer == c.peers[bad] and "aggregate differs" in r.reason
    kinds = {ev.kind for _, ev in c.evidence}
    assert kinds == {"invalid_proposal"}
    for _, ev in c.evidence:
        check_evidence(c.ctx, 1, ev)


def test_equivocating_primary_yields_evidence_and_one_decision():
    """cmfl spec §7.8 item 6: an equivocating primary cannot get two certificates; its double
    pre-prepare and double votes become ledger evidence."""
    bad = primary_index(4)
    c = Cluster(size=4, seed=3, byzantine={bad: "equivocate"}, faults=Faults(delay_ticks_max=1))
    assert c.run_until(lambda: decided_all(c, 3), 3 * c.liveness_bound_ticks())
    assert c.evidence, "the member that got both pre-prepares reports them"
    for _, ev in c.evidence:
        assert ev.kind == "equivocation" and ev.offender == c.peers[bad]
        check_evidence(c.ctx, ev.height, ev)
        a, b = ev.exhibits
        assert (a.kind, a.height, a.view) == (b.kind, b.height, b.view) and a.body != b.body


def test_silent_primary_is_replaced_by_a_view_change():
    """§4.4-4.5: the view's timer expires, VIEW-CHANGE, NEW-VIEW, the next primary proposes."""
    bad = primary_index(4)
    c = Cluster(size=4, seed=2, byzantine={bad: "silent"})
    assert c.run_until(lambda: decided_all(c, 1), c.liveness_bound_ticks())
    block = c.chains[c.honest[0]][0]
    assert block.header.view == 1
    assert block.header.proposer == primary(genesis_committee(c.genesis), c.genesis.hash(), 1, 1)
    assert all(c.replicas[p].status().view_changes >= 1 for p in c.honest)
    assert c.sent["new_view"] >= 1


def _commit_only_at(c: Cluster, keep: str) -> None:
    """Deliver everything in send order, but lose every COMMIT not addressed to ``keep``."""
    while c.queue:
        c.drop_where(lambda src, dst, m: m.kind == KIND_COMMIT and dst != keep)
        if c.queue:
            c.deliver_in_flight(0)


def _carried_cluster() -> tuple[Cluster, str]:
    c = Cluster(size=4, seed=5, auto_propose=False, faults=Faults(reorder=False))
    # the one that decides in view 0 and then crashes: not view 1's primary, which carries the block over
    keep = next(p for p in c.peers if p != primary(genesis_committee(c.genesis), c.genesis.hash(), 1, 1))
    c.propose_pending()
    _commit_only_at(c, keep)
    assert c.height(keep) == 1 and all(c.height(p) == 0 for p in c.peers if p != keep)
    assert all(c.replicas[p].status().phase is Phase.COMMIT for p in c.peers if p != keep)
    c.crash(keep)  # it cannot hand its certificate on
    others = [p for p in c.peers if p != keep]
    while any(c.replicas[p].status().view == 0 for p in others):  # and their view-0 votes get lost
        c.drop_where(lambda src, dst, m: m.kind in (KIND_PREPARE, KIND_COMMIT) and m.signed.view == 0)
        c.step()
    c.auto_propose = True
    c.propose_pending()
    assert c.run_until(lambda: decided_all(c, 1), c.liveness_bound_ticks())
    c.recover(keep)
    assert c.run_until(lambda: decided_all(c, 3), 2 * c.liveness_bound_ticks())
    return c, keep


def test_prepared_block_is_carried_unchanged_across_a_view_change():
    """§4.5.2: one replica decides in view 0; the others, prepared but without commits, change view; the
    new primary re-proposes the same header, so every replica decides the same block hash. The
    certificate of the later view says view 1 while the header keeps view 0 and its proposer."""
    c, keep = _carried_cluster()
    first = c.chains[keep][0]
    assert first.certificate.view == 0
    for p in c.peers:
        b = c.chains[p][0]
        assert b.header.hash() == first.header.hash()
        verify_decided_block(c.ctx, genesis_state(c.ctx), b)
        if p != keep:
            assert (b.header.view, b.certificate.view) == (0, 1)
    assert c.later_view_commits >= 1


def test_ledger_accepts_a_block_decided_in_a_later_view():
    """The ledger accepts certificates whose votes are of a later view than the header (consensus/_certify.py)."""
    c, keep = _carried_cluster()
    later = next(c.chains[p][0] for p in c.peers if p != keep)
    apply_block(c.ctx, genesis_state(c.ctx), later)


@pytest.mark.parametrize(
    ("quorum", "refusing", "decides"),
    [("majority", 5, True), ("majority", 6, False), ("bft", 3, True), ("bft", 4, False)],
)
def test_quorum_with_disagreeing_replicas(quorum, refusing, decides):
    """cmfl spec §7.8 item 5, C = 12: majority needs ⌊12/2⌋+1 = 7 votes, bft ⌊24/3⌋+1 = 9 (the pre-prepare
    is the primary's vote). Replicas that cannot re-execute never vote; without a quorum the views keep
    changing and nothing is decided."""
    p0 = primary_index(12, quorum=quorum)
    others = [i for i in range(12) if i != p0]
    c = Cluster(size=12, seed=0, quorum=quorum, disagree=others[:refusing])
    assert c.replicas[c.peers[0]].status().quorum == (7 if quorum == "majority" else 9)
    ok = c.run_until(lambda: decided_all(c, 1), 200)
    assert ok is decides
    if not decides:
        assert all(c.replicas[p].status().view >= 1 for p in c.honest)


def test_catch_up_after_isolation():
    """A replica cut off for many heights rejoins through decided blocks (sync on its view changes)."""
    c = Cluster(size=4, seed=6, faults=Faults(delay_ticks_max=1))
    lone = c.peers[2]
    c.isolate(lone)
    c.run(150)
    assert c.height(lone) == 0 and c.min_height() == 0
    behind = max(c.height(p) for p in c.peers)
    assert behind >= 5
    c.heal()
    assert c.run_until(lambda: c.height(lone) >= behind, c.liveness_bound_ticks())
    assert c.sent["decided"] >= behind


def test_rotating_committees_reach_newcomers():
    """CCP step 8: each block names the next committee; newcomers get the block and take part."""
    c = Cluster(size=4, members=10, rotate=True, seed=7)
    c.run(200)
    heights = [c.height(p) for p in c.peers]
    assert min(heights) >= 10 and max(heights) - min(heights) <= 6  # observers sync every 20 ticks
    c.auto_propose = False  # the chain pauses: every observer catches up
    c.run(3 * c.config.timeout_ticks_sync)
    assert len({c.height(p) for p in c.peers}) == 1
    committees = {c.chains[c.peers[0]][i].payload.next_committee for i in range(10)}
    assert len(committees) > 1


def test_same_seed_same_trace():
    """Determinism: the seed fixes everything, down to the block hashes and the byte counts."""

    def trace(seed: int) -> tuple:
        c = Cluster(size=4, seed=seed, byzantine={1: "replay"}, faults=Faults(drop=0.1, duplicate=0.1, delay_ticks_max=3))
        c.run(150)
        return tuple(b.header.hash() for b in c.chains[c.honest[0]]), tuple(sorted(c.sent_bytes.items())), c.events

    assert trace(11) == trace(11)
    assert trace(11) != trace(12)


# --- direct replica inputs ----------------------------------------------------------------------------


@pytest.fixture
def four() -> Cluster:
    c = Cluster(size=4, seed=0, auto_propose=False, check=False)
    return c


def _backup(c: Cluster) -> tuple[Replica, str]:
    prim = c.replicas[c.peers[0]].status().primary
    p = next(x for x in c.peers if x != prim)
    return c.replicas[p], prim


def test_bad_messages_are_dropped_and_counted_never_fatal(four):
    c = four
    r, prim = _backup(c)
    st = c.replicas[prim].chain_state
    payload = c.honest_payload(st, 0, prim)
    hd = make_header(chain_id=c.genesis.chain_id, height=1, prev_hash=st.head_hash, view=0, proposer=prim, time_ms=1, payload=payload)
    good = pre_prepare_message(c.keys[prim], c.genesis.chain_id, 1, 0, hd, payload)
    assert good.signed is not None
    not_primary = next(p for p in c.peers if p not in (prim, r.peer_id))
    outsider = KeyPair.derive("outsider")
    cases = {
        "bad_signature": dataclasses.replace(good, signed=dataclasses.replace(good.signed, signature=bytes(64))),
        "not_member": vote_message(outsider, c.genesis.chain_id, KIND_PREPARE, 1, 0, hd.hash()),
        "not_primary": pre_prepare_message(c.keys[not_primary], c.genesis.chain_id, 1, 0, hd, payload),
        "future_height": vote_message(c.keys[prim], c.genesis.chain_id, KIND_PREPARE, 50, 0, hd.hash()),
        "future_view": vote_message(c.keys[prim], c.genesis.chain_id, KIND_PREPARE, 1, 500, hd.hash()),
        "malformed": Message(signed=sign_signed(c.keys[prim], c.genesis.chain_id, "prepare", 1, 0, {"nope": 1})),
    }
    for reason, m in cases.items():
        fx = r.step(m, sender=prim)
        if reason == "future_height":  # the sender is far ahead: ask it for blocks
            assert [e.message.kind for e in fx] == ["sync_request"]
        elif reason != "not_primary":
            assert fx == []
        assert r.status().dropped.get(reason, 0) == 1, (reason, r.status().dropped)
    other_chain = pre_prepare_message(c.keys[prim], "another-chain", 1, 0, hd, payload)
    r.step(other_chain)
    assert r.status().dropped["bad_signature"] == 2  # the chain id is signed: no cross-chain replay
    fx = agree(r, r.step(good))  # still works
    assert any(getattr(e, "message", None) and e.message.kind == "prepare" for e in fx)
    r.step(good)
    assert r.status().duplicates >= 1


def test_future_messages_are_held_in_a_bounded_buffer(four):
    c = four
    r, prim = _backup(c)
    cap = r.status()
    for i in range(3000):
        r.step(vote_message(c.keys[prim], c.genesis.chain_id, KIND_PREPARE, 2, 0, bytes([i % 256]) * 32))
    s = r.status()
    assert s.buffered <= ReplicaConfig().buffered_messages_max and s.buffered < 3000
    assert s.dropped["buffer_full"] > 0 and cap.buffered == 0


def test_future_messages_are_held_bounded_in_bytes_per_sender_and_in_all(four):
    """A member's messages for later heights (up to a 16 MiB frame each) are bounded in bytes, per
    sender and in all, not only in count; they go when their height is reached."""
    c = four
    r, prim = _backup(c)
    vote = vote_message(c.keys[prim], c.genesis.chain_id, KIND_PREPARE, 2, 0, bytes(32))
    size = len(vote.encode())
    r._cfg = dataclasses.replace(r._cfg, buffered_bytes_max=10 * size, buffered_owner_bytes_min=4 * size)  # noqa: SLF001
    others = [p for p in c.peers if p != r.peer_id]
    for signer in others:
        for i in range(20):
            r.step(vote_message(c.keys[signer], c.genesis.chain_id, KIND_PREPARE, 2, 0, bytes([i]) * 32))
    held = r._buffer  # noqa: SLF001
    for signer in others:
        assert sum(b.size for b in held if b.owner == signer) <= 4 * size
    assert sum(b.size for b in held) == 10 * size  # 4 from each of the first two senders, 2 from the third
    assert [sum(1 for b in held if b.owner == p) for p in others] == [4, 4, 2]
    assert r.status().dropped["buffer_full"] == 3 * 20 - 10


def test_propose_misuse_and_stale_proposals(four):
    c = four
    r, prim = _backup(c)
    st = r.chain_state
    with pytest.raises(LocalProtocolError, match="not the primary"):
        r.propose(c.honest_payload(st, 0, r.peer_id), height=1, view=0, time_ms=1)
    assert r.propose(c.honest_payload(st, 0, r.peer_id), height=1, view=3, time_ms=1) == []
    assert r.status().stale_proposals == 1
    p = c.replicas[prim]
    wrong = dataclasses.replace(c.honest_payload(st, 0, prim), next_committee=("not-a-member",))
    with pytest.raises(LocalProtocolError, match="refused: next committee names non-member"):
        p.propose(wrong, height=1, view=0, time_ms=1)  # (the payload itself is its host's to judge, not the replica's)
    with pytest.raises(LocalProtocolError, match="the latest a header takes"):  # bounded block time
        p.propose(c.honest_payload(st, 0, prim), height=1, view=0, time_ms=2**63)


def test_status_is_a_frozen_snapshot(four):
    s = four.replicas[four.peers[0]].status()
    assert isinstance(s, ReplicaStatus)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.view = 3
    with pytest.raises(TypeError):
        s.dropped["x"] = 1


def test_config_from_genesis_timeouts_and_validation(four):
    t = four.genesis.protocol.timeouts
    cfg = ReplicaConfig.from_timeouts(t)
    assert (cfg.timeout_ticks_start, cfg.timeout_ticks_propose, cfg.timeout_ticks_view_change) == (
        t.timeout_ticks_train,
        t.timeout_ticks_propose,
        t.timeout_ticks_view_change,
    )
    assert cfg.timeout_ticks_retransmit == t.timeout_ticks_prepare // 2
    with pytest.raises(ValueError):
        ReplicaConfig(timeout_ticks_prepare=0)
    with pytest.raises(ValueError):
        ReplicaConfig(sync_batch_max=20, height_window=8)
    r = Replica(ctx=four.ctx, key=four.keys[four.peers[0]], state=genesis_state(four.ctx))
    assert r.status().deadline_tick == t.timeout_ticks_train + t.timeout_ticks_propose
    with pytest.raises(LocalProtocolError, match="not a member"):
        Replica(ctx=four.ctx, key=KeyPair.derive("stranger"), state=genesis_state(four.ctx))
