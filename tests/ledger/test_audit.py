"""Audit reports and offline inclusion proofs."""

import dataclasses

import pytest

from ledger import (
    AuditFinding,
    ChainError,
    InclusionProof,
    LedgerError,
    SignatureError,
    audit_chain,
    make_proof,
    verify_proof,
)
from ledger.testing import LedgerDemo


def _chain(n=4):
    demo = LedgerDemo(members=8, committee_size=4, updates_per_block=5, floats_per_update=8, seed=2)
    return demo.genesis, [demo.next_block()[0] for _ in range(n)]


def test_report_line_and_counts():
    g, blocks = _chain()
    rep = audit_chain(g, [(b.height, b.encode()) for b in blocks])
    assert rep.ok and rep.height == 4 and rep.head_hash == blocks[-1].hash()
    assert rep.signatures_checked == 4 * (5 + 3)
    assert rep.line().startswith("OK: chain concilium-demo verified, 4 blocks")


def test_proofs_verify_offline_for_every_update_and_height():
    g, blocks = _chain()
    for i, b in enumerate(blocks):
        prev = blocks[i - 1] if i else None
        for u in b.payload.updates:
            proof = make_proof(g, b, prev, u.peer)
            again = InclusionProof.decode(proof.encode())  # travels as canonical bytes
            assert again == proof
            assert "OK: update" in verify_proof(g, again)


def test_tampered_proofs_fail():
    g, blocks = _chain()
    b, prev = blocks[2], blocks[1]
    p = make_proof(g, b, prev, b.payload.updates[2].peer)
    bad_commitment = dataclasses.replace(p.commitment, n_samples=p.commitment.n_samples + 1)
    with pytest.raises(SignatureError):
        verify_proof(g, dataclasses.replace(p, commitment=bad_commitment))
    other = b.payload.updates[3]
    with pytest.raises(ChainError, match="Merkle path"):
        verify_proof(g, dataclasses.replace(p, commitment=other))
    with pytest.raises(ChainError, match="Merkle path"):
        verify_proof(g, dataclasses.replace(p, index=p.index + 1))
    with pytest.raises(ChainError, match="does not link"):
        verify_proof(g, dataclasses.replace(p, prev_header=blocks[0].header))
    short = dataclasses.replace(p.certificate, signatures=p.certificate.signatures[:2])
    with pytest.raises(ChainError, match="quorum"):
        verify_proof(g, dataclasses.replace(p, certificate=short))
    other_genesis = LedgerDemo(members=8, committee_size=4, seed=99).genesis
    with pytest.raises(LedgerError):
        verify_proof(other_genesis, p)
    with pytest.raises(ChainError, match="no update from"):
        make_proof(g, b, prev, "12D3KooWnobody")


class RejectHeight:
    """A re-execution plug-in that disagrees with one height (stands in for the learning layer's)."""

    def __init__(self, bad_height):
        self.bad_height = bad_height
        self.seen = []

    def reexecute(self, ctx, before, block, blobs):
        from ledger import ReexecutionError

        self.seen.append((before.height, block.height))
        if block.height == self.bad_height:
            raise ReexecutionError(f"height {block.height}: aggregate digest differs from re-execution")


def test_reexecution_plugs_into_the_audit():
    g, blocks = _chain()
    rows = [(b.height, b.encode()) for b in blocks]
    ok = RejectHeight(bad_height=None)
    rep = audit_chain(g, rows, reexecutor=ok)
    assert rep.ok and rep.reexecuted and ok.seen == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert "rounds re-executed" in rep.line()
    rep = audit_chain(g, rows, reexecutor=RejectHeight(bad_height=3))
    assert not rep.ok and rep.first_bad_height == 3 and rep.height == 2
    assert rep.reason == "aggregate digest differs from re-execution"


class FindAt:
    """A re-executor that finds something wrong with a signed input at some heights (``ledger.AuditFinding``)."""

    def __init__(self, found: dict[int, list[str]]) -> None:
        self.found = found

    def reexecute(self, ctx, before, block, blobs):  # noqa: ANN001, ANN201
        return [AuditFinding(block.height, who, f"the row of {who} lies") for who in self.found.get(block.height, [])]


def test_findings_fail_the_audit_which_checks_the_chain_on_past_them():
    g, blocks = _chain()
    rows = [(b.height, b.encode()) for b in blocks]
    rep = audit_chain(g, rows, reexecutor=FindAt({2: ["m1", "m2"], 4: ["m3"]}))
    assert not rep.ok and rep.chain_valid and rep.first_bad_height == 2
    assert [(f.height, f.offender) for f in rep.findings] == [(2, "m1"), (2, "m2"), (4, "m3")]
    assert (rep.height, rep.head_hash) == (1, blocks[0].hash())  # the valid prefix ends before the first finding
    assert rep.line() == ("FAIL at height 2: the row of m1 lies (3 signed inputs fail their recheck in all; every other "
                          "check passed through height 4) (valid prefix: 1 blocks)")
    one = audit_chain(g, rows, reexecutor=FindAt({4: ["m3"]}))
    assert one.line() == "FAIL at height 4: the row of m3 lies (every other check passed through height 4) (valid prefix: 3 blocks)"
    # an invalid block after a finding: the finding comes first, and the verdict says where the chain fails
    bad = rows[:3] + [(4, rows[3][1][:-1] + bytes([rows[3][1][-1] ^ 1]))]
    rep = audit_chain(g, bad, reexecutor=FindAt({2: ["m1"]}))
    assert not rep.ok and not rep.chain_valid and rep.first_bad_height == 2 and rep.height == 1
    assert rep.reason.startswith("the row of m1 lies (the chain itself fails at height 4: ")
    # a block that fails is reported as such, not by what re-execution found in it (here: after re-execution, the
    # store's hash index differs), and no later block is looked at
    wrong_index = rows[:2] + [(3, rows[2][1], bytes(32)), rows[3]]
    rep = audit_chain(g, wrong_index, reexecutor=FindAt({3: ["m2"], 4: ["m3"]}))
    assert not rep.chain_valid and rep.first_bad_height == 3 and rep.findings == () and "lies" not in rep.reason
    rep = audit_chain(g, bad, reexecutor=FindAt({4: ["m3"]}))
    assert not rep.chain_valid and rep.first_bad_height == 4 and rep.findings == () and "lies" not in rep.reason
    assert audit_chain(g, rows, reexecutor=FindAt({})).ok
