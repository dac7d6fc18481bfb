"""Chain rules: a valid chain applies; forged, non-member, below-quorum, reordered and missing blocks fail."""

import dataclasses

import pytest

from ledger import (
    Block,
    ChainContext,
    ChainError,
    Evidence,
    KeyPair,
    LedgerError,
    Payload,
    SignatureError,
    apply_block,
    audit_chain,
    genesis_committee,
    genesis_state,
    make_certificate,
    make_header,
    primary,
    quorum_size,
    sha256,
    sign_commit,
    sign_message,
    sign_update,
)
from ledger.testing import LedgerDemo


@pytest.mark.parametrize(
    "n, bft, majority", [(1, 1, 1), (3, 3, 2), (4, 3, 3), (5, 4, 3), (6, 5, 4), (7, 5, 4), (10, 7, 6), (16, 11, 9)]
)
def test_quorum_sizes(n, bft, majority):
    assert quorum_size(n, "bft") == bft
    assert quorum_size(n, "majority") == majority
    f = (n - 1) // 3
    # BFT quorums intersect in at least f+1 members, so in at least one honest member
    assert 2 * quorum_size(n, "bft") - n >= f + 1


class Chain:
    """A hand-driven chain over the demo network, for building deliberately bad blocks."""

    def __init__(self, members=7, committee=4, quorum="bft"):
        self.demo = LedgerDemo(members=members, committee_size=committee, updates_per_block=0, quorum=quorum)
        self.genesis = self.demo.genesis
        self.ctx = ChainContext(self.genesis)
        self.keys = self.demo.by_id
        self.state = genesis_state(self.ctx)

    def block(self, *, state=None, updates=None, signers=None, proposer=None, view=0, time_ms=None,
              next_committee=None, evidence=(), height=None, chain_id=None, attestations=()):
        st = state or self.state
        h = height or st.height + 1
        chain = chain_id or self.genesis.chain_id
        ids = sorted(self.keys)
        if updates is None:
            updates = [sign_update(self.keys[p], chain, h, sha256(p.encode() + bytes([h])), 10) for p in ids[:3]]
        payload = Payload(
            updates=tuple(sorted(updates, key=lambda u: u.peer)),
            model_digest=sha256(b"model%d" % h),
            next_committee=tuple(next_committee or st.committee),
            evidence=tuple(evidence),
            attestations=tuple(attestations),
        )
        header = make_header(
            chain_id=chain, height=h, prev_hash=st.head_hash, view=view,
            proposer=proposer or primary(st.committee, self.ctx.genesis_hash, h, view),
            time_ms=st.time_ms + 1 if time_ms is None else time_ms, payload=payload,
        )
        if signers is None:
            signers = sorted(st.committee)[: quorum_size(len(st.committee), self.genesis.protocol.quorum)]
        sigs = [sign_commit(s if isinstance(s, KeyPair) else self.keys[s], chain, h, view, header.hash()) for s in signers]
        return Block(header=header, payload=payload, certificate=make_certificate(header, sigs))

    def apply(self, block):
        self.state = apply_block(self.ctx, self.state, block)
        return self.state


def test_valid_chain_applies_and_committee_moves():
    c = Chain()
    assert c.state.committee == genesis_committee(c.genesis)
    ids = sorted(c.keys)
    c.apply(c.block(next_committee=ids[-4:]))
    assert c.state.committee == tuple(ids[-4:])
    c.apply(c.block())  # certified by the new committee
    assert c.state.height == 2


def test_certificate_below_quorum_is_rejected():
    c = Chain()
    q = quorum_size(4)
    with pytest.raises(ChainError, match="quorum is 3 of 4"):
        c.apply(c.block(signers=sorted(c.state.committee)[: q - 1]))


def test_majority_rule_needs_fewer_signatures():
    c = Chain(quorum="majority")
    c.apply(c.block(signers=sorted(c.state.committee)[:3]))
    c5 = Chain(members=7, committee=5, quorum="majority")
    c5.apply(c5.block(signers=sorted(c5.state.committee)[:3]))  # ⌊5/2⌋+1 = 3; bft would need 4
    with pytest.raises(ChainError, match="quorum"):
        Chain(members=7, committee=5).apply(Chain(members=7, committee=5).block(signers=sorted(c5.state.committee)[:3]))


def test_signature_from_member_outside_committee_is_rejected():
    c = Chain()
    outsider = next(p for p in sorted(c.keys) if p not in c.state.committee)
    signers = sorted(c.state.committee)[:2] + [outsider]
    with pytest.raises(SignatureError, match="not in the committee"):
        c.apply(c.block(signers=signers))


def test_non_member_signatures_are_rejected():
    c = Chain()
    stranger = KeyPair.derive("stranger")
    with pytest.raises(SignatureError):
        c.apply(c.block(signers=sorted(c.state.committee)[:2] + [stranger]))
    h = c.state.height + 1
    bad_update = sign_update(stranger, c.genesis.chain_id, h, sha256(b"x"), 5)
    with pytest.raises(ChainError, match="non-member"):
        c.apply(c.block(updates=[bad_update]))


def test_forged_signatures_are_rejected():
    c = Chain()
    blk = c.block()
    # forge: a commit signature copied from another signer
    sigs = list(blk.certificate.signatures)
    sigs[0] = dataclasses.replace(sigs[0], signature=sigs[1].signature)
    forged = dataclasses.replace(blk, certificate=dataclasses.replace(blk.certificate, signatures=tuple(sigs)))
    with pytest.raises(SignatureError, match="invalid signature"):
        c.apply(forged)
    # forge: an update commitment whose n_samples was changed after signing
    u = blk.payload.updates[0]
    tampered = dataclasses.replace(u, n_samples=u.n_samples + 1)
    with pytest.raises(SignatureError, match="update commitment"):
        c.apply(c.block(updates=[tampered, *blk.payload.updates[1:]]))
    # replay: a commitment signed for another chain
    other = sign_update(c.keys[u.peer], "other-chain", 1, u.digest, u.n_samples)
    with pytest.raises(SignatureError):
        c.apply(c.block(updates=[other]))
    # replay: a commitment signed for another round
    old = sign_update(c.keys[u.peer], c.genesis.chain_id, 7, u.digest, u.n_samples)
    with pytest.raises(ChainError, match="round 7"):
        c.apply(c.block(updates=[old]))


def test_reordered_missing_and_foreign_blocks_are_rejected():
    c = Chain()
    b1 = c.block()
    s1 = apply_block(c.ctx, c.state, b1)
    b2 = c.block(state=s1)
    s2 = apply_block(c.ctx, s1, b2)
    b3 = c.block(state=s2)
    with pytest.raises(ChainError, match="expected height 1"):
        apply_block(c.ctx, c.state, b2)  # reordered
    with pytest.raises(ChainError, match="expected height 2"):
        apply_block(c.ctx, s1, b3)  # missing block 2
    rows = [(1, b1.encode()), (3, b3.encode())]
    rep = audit_chain(c.genesis, rows)
    assert not rep.ok and rep.first_bad_height == 2 and "missing" in rep.reason
    rep = audit_chain(c.genesis, [(1, b2.encode())])
    assert not rep.ok and rep.first_bad_height == 1
    with pytest.raises(ChainError, match="chain id"):
        apply_block(c.ctx, c.state, c.block(chain_id="another"))
    # same height, but linking to a different parent
    fake_parent = dataclasses.replace(s1, head_hash=sha256(b"fork"))
    with pytest.raises(ChainError, match="prev_hash"):
        apply_block(c.ctx, s1, c.block(state=fake_parent))
    assert audit_chain(c.genesis, [(1, b1.encode()), (2, b2.encode()), (3, b3.encode())]).ok
    assert not audit_chain(c.genesis, [(1, b1.encode()), (2, b2.encode())], expect_height=3).ok


def test_wrong_proposer_and_time_going_backwards():
    c = Chain()
    h = 1
    wrong = next(p for p in sorted(c.state.committee) if p != primary(c.state.committee, c.ctx.genesis_hash, h, 0))
    with pytest.raises(ChainError, match="is not the primary"):
        c.apply(c.block(proposer=wrong))
    # a view change moves the primary to the next member, and the certificate must be for that view
    c.apply(c.block(view=1))
    with pytest.raises(ChainError, match="time goes backwards"):
        c.apply(c.block(time_ms=0) if c.state.time_ms > 0 else c.block(time_ms=-1))


def test_primary_rotates_over_the_committee_with_the_view():
    com = tuple(sorted(KeyPair.derive(f"p{i}").peer_id for i in range(4)))
    seen = [primary(com, b"\x00" * 32, 3, v) for v in range(8)]
    assert set(seen) == set(com) and seen[:4] == seen[4:]


def test_equivocation_evidence_is_checked():
    c = Chain()
    bad = c.keys[sorted(c.state.committee)[0]]
    chain = c.genesis.chain_id
    a = sign_message(bad, chain, "prepare", 1, 0, {"digest": b"\x01" * 32})
    b = sign_message(bad, chain, "prepare", 1, 0, {"digest": b"\x02" * 32})
    ok = Evidence(kind="equivocation", offender=bad.peer_id, height=1, view=0, exhibits=(a, b))
    c.apply(c.block(evidence=[ok]))
    same = Evidence(kind="equivocation", offender=bad.peer_id, height=1, view=0, exhibits=(a, a))
    with pytest.raises(ChainError, match="identical"):
        c.apply(c.block(evidence=[same]))
    other = c.keys[sorted(c.state.committee)[1]]
    framed = Evidence(kind="equivocation", offender=other.peer_id, height=1, view=0, exhibits=(a, b))
    with pytest.raises(ChainError, match="not signed by the offender"):
        c.apply(c.block(evidence=[framed]))
    forged = dataclasses.replace(b, signature=a.signature)
    with pytest.raises(SignatureError):
        c.apply(c.block(evidence=[Evidence(kind="equivocation", offender=bad.peer_id, height=1, view=0, exhibits=(a, forged))]))


def test_attestations_must_be_signed_for_this_height():
    c = Chain()
    m = c.keys[sorted(c.keys)[0]]
    good = sign_message(m, c.genesis.chain_id, "scores", 1, 0, {"distances": (1.5, 2.0)})
    c.apply(c.block(attestations=[good]))
    stale = sign_message(m, c.genesis.chain_id, "scores", 1, 0, {"distances": (1.5, 2.0)})
    with pytest.raises(ChainError, match="for height 1"):
        c.apply(c.block(attestations=[stale]))


def test_next_committee_must_be_members():
    c = Chain()
    with pytest.raises(ChainError, match="non-member"):
        c.apply(c.block(next_committee=sorted([KeyPair.derive("zz").peer_id])))


def test_structural_validation_of_payloads():
    c = Chain()
    ups = list(c.block().payload.updates)
    with pytest.raises(ValueError, match="sorted and unique"):
        Payload(updates=(ups[1], ups[0]), model_digest=b"\x00" * 32, next_committee=c.state.committee)
    with pytest.raises(ValueError, match="32 bytes"):
        Payload(updates=(), model_digest=b"\x00", next_committee=c.state.committee)
    with pytest.raises(LedgerError):
        Block.decode(c.block().encode()[:-1])
