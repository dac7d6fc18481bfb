"""Bounded block time: what the header type, the genesis and the audit check of ``time_ms``.

A block time is at least the previous block's (a chain rule, ``test_chain.py``), at most ``2^63 - 1`` (the header
type), and, audited with a clock, at most that clock plus a tick plus the genesis' ``time_drift_ms``. The drift is
a reserved ``protocol.params`` key, absent by default, so a genesis that does not set it keeps its bytes.
"""

import dataclasses

import pytest

from ledger import (
    TIME_DRIFT_MS_DEFAULT,
    TIME_MS_MAX,
    Block,
    BlockHeader,
    DecodeError,
    Genesis,
    Payload,
    ProtocolParams,
    audit_chain,
    block_time_window,
    encode,
    genesis_state,
    make_certificate,
    make_header,
    primary,
    quorum_size,
    sha256,
    sign_commit,
)
from ledger import ChainContext, apply_block
from ledger.testing import LedgerDemo


def _header(time_ms: int) -> dict:
    return dict(chain_id="c", height=1, prev_hash=bytes(32), fl_round=1, view=0, proposer="p", time_ms=time_ms,
                payload_hash=bytes(32), updates_root=bytes(32))


def test_a_header_takes_a_time_up_to_2_63_minus_1_and_no_later():
    assert BlockHeader(**_header(TIME_MS_MAX)).time_ms == 2**63 - 1
    for bad in (2**63, 2**64 - 1, -1):
        with pytest.raises(ValueError, match="time_ms must be in"):
            BlockHeader(**_header(bad))
    # the encoding holds 2^64 - 1; decoding such a header is refused (a peer's, or a stored one)
    value = BlockHeader(**_header(0)).to_value()
    with pytest.raises(DecodeError, match="time_ms"):
        BlockHeader.decode(encode({**value, "time_ms": 2**64 - 1}))


def test_a_genesis_time_beyond_2_63_minus_1_is_refused():
    g = LedgerDemo(members=4, committee_size=4, updates_per_block=0).genesis
    assert dataclasses.replace(g, genesis_time_ms=TIME_MS_MAX).genesis_time_ms == TIME_MS_MAX
    with pytest.raises(ValueError, match="genesis_time_ms"):
        dataclasses.replace(g, genesis_time_ms=2**63)


def test_time_drift_is_a_reserved_protocol_param_with_a_default_and_bounds():
    base = dict(mode="coordinator", algorithm="fedavg", committee_size=1)
    assert ProtocolParams(**base).time_drift_ms == TIME_DRIFT_MS_DEFAULT == 10_000
    assert "time_drift_ms" not in ProtocolParams(**base).to_value()["params"]  # absent: the genesis bytes stay
    assert ProtocolParams(**base, params={"time_drift_ms": 1}).time_drift_ms == 1
    assert ProtocolParams(**base, params={"time_drift_ms": 10**9}).time_drift_ms == 10**9
    for bad in (0, -5, 10**9 + 1, 1.5, "10", True, None):
        with pytest.raises(ValueError, match="time_drift_ms must be an int in"):
            ProtocolParams(**base, params={"time_drift_ms": bad})


def test_the_window_is_the_clock_plus_or_minus_a_tick_and_the_drift():
    demo = LedgerDemo(members=4, committee_size=4, updates_per_block=0)
    g = demo.genesis
    tick = g.protocol.timeouts.tick_ms
    assert block_time_window(g, 50_000) == (50_000 - tick - 10_000, 50_000 + tick + 10_000)
    g2 = dataclasses.replace(g, protocol=dataclasses.replace(g.protocol, params={"time_drift_ms": 500}))
    assert block_time_window(g2, 50_000) == (50_000 - tick - 500, 50_000 + tick + 500)


class _Chain:
    """Blocks with chosen times over the demo network (certified by the committee, every rule but time kept)."""

    def __init__(self) -> None:
        self.demo = LedgerDemo(members=4, committee_size=4, updates_per_block=0)
        self.genesis = self.demo.genesis
        self.ctx = ChainContext(self.genesis)
        self.state = genesis_state(self.ctx)
        self.rows: list[tuple[int, bytes]] = []

    def add(self, time_ms: int) -> Block:
        st, h = self.state, self.state.height + 1
        payload = Payload(updates=(), model_digest=sha256(b"m%d" % h), next_committee=st.committee)
        header = make_header(chain_id=self.genesis.chain_id, height=h, prev_hash=st.head_hash, view=0,
                             proposer=primary(st.committee, self.ctx.genesis_hash, h, 0), time_ms=time_ms, payload=payload)
        signers = sorted(st.committee)[: quorum_size(len(st.committee))]
        sigs = [sign_commit(self.demo.by_id[s], self.genesis.chain_id, h, 0, header.hash()) for s in signers]
        block = Block(header=header, payload=payload, certificate=make_certificate(header, sigs))
        self.state = apply_block(self.ctx, st, block)
        self.rows.append((h, block.encode()))
        return block


def test_the_audit_fails_a_block_time_beyond_its_clock_plus_the_drift():
    c = _Chain()
    now = 1_700_000_000_000
    for t in (now - 3_000, now - 2_000, now + 10_000 + 100, now + 10_000 + 101, TIME_MS_MAX):
        c.add(t)
    assert audit_chain(c.genesis, c.rows).ok  # without a clock: only the chain's own rules
    assert audit_chain(c.genesis, c.rows, now_ms=TIME_MS_MAX).ok
    report = audit_chain(c.genesis, c.rows, now_ms=now)
    assert not report.ok and report.first_bad_height == 4 and report.height == 3, report
    assert f"block time {now + 10_101} is beyond the auditor's clock {now}" in report.reason
    # a clock one ms later: block 4 is in bounds; block 5's quorum signed 2^63 - 1, 292 million years ahead
    report = audit_chain(c.genesis, c.rows, now_ms=now + 1)
    assert report.first_bad_height == 5 and "block time 9223372036854775807" in report.reason
