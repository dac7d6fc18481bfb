"""Following the chain by headers (``decided_header``): a member outside the committee takes a decided block by its
header and commit certificate where the next committee follows from the header, and the whole block otherwise.

Blocks come from a real :class:`consensus.testing.Cluster` (4 validators among 10 members, rotating committees);
the observer is a real :class:`consensus.Replica` of one of the members outside the committee.
"""

from __future__ import annotations

import dataclasses

import pytest

from consensus import (
    KIND_HEADER,
    CommitHeader,
    Message,
    Phase,
    RemoteProtocolError,
    Replica,
    Send,
    decided_header_message,
    decided_message,
    parse,
)
from consensus._messages import DecidedHeader, sign_signed
from consensus.testing import Cluster
from ledger import ChainError, apply_block, apply_header, genesis_state, make_certificate


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    c = Cluster(size=4, members=10, seed=3, rotate=True)
    assert c.run_until(lambda: all(c.height(p) >= 4 for p in c.live_honest()), 4 * c.liveness_bound_ticks())
    return c


def _chain(c: Cluster) -> list:
    return c.chains[c.honest[0]][:4]


def _outsider(c: Cluster, height: int) -> str:
    """A member outside the committee of ``height`` (named by the block before it)."""
    state = genesis_state(c.ctx)
    for b in _chain(c)[: height - 1]:
        state = apply_block(c.ctx, state, b)
    return next(p for p in c.peers if p not in state.committee)


def _observer(c: Cluster, me: str, *, needs: bool = False, follow: bool = True) -> Replica:
    return Replica(
        ctx=c.ctx, key=c.keys[me], state=genesis_state(c.ctx), validate=lambda p: None, config=c.config,
        **({"next_committee": c.expected_committee, "needs_payload": lambda st: needs} if follow else {}),
    )


def test_parse_round_trip_and_strictness(cluster: Cluster) -> None:
    c = cluster
    block = _chain(c)[0]
    sender = c.keys[c.peers[0]]
    msg = decided_header_message(sender, c.ctx.chain_id, block)
    again = Message.decode(msg.encode())  # type: ignore[attr-defined]
    d = parse(again)
    assert isinstance(d, DecidedHeader) and d.signed.kind == KIND_HEADER
    assert d.header == block.header and d.certificate == block.certificate and d.block_hash == block.header.hash()
    assert len(msg.encode()) < len(decided_message(block).encode())  # type: ignore[attr-defined]

    other = _chain(c)[1]

    def forged(body: dict, *, height: int = block.height, view: int = block.certificate.view, **extra: object) -> Message:
        return Message(signed=sign_signed(sender, c.ctx.chain_id, KIND_HEADER, height, view, body), **extra)  # type: ignore[arg-type]

    good = {"header": block.header.to_value(), "certificate": block.certificate.to_value()}  # type: ignore[attr-defined]
    cases = {
        "another block's certificate": forged({**good, "certificate": other.certificate.to_value()}),  # type: ignore[attr-defined]
        "wrong height": forged(good, height=block.height + 1),
        "wrong view": forged(good, view=block.certificate.view + 1),
        "missing key": forged({"header": good["header"]}),
        "extra key": forged({**good, "payload": 1}),
        "a payload beside it": forged(good, payload=block.payload),
        "not a header": forged({**good, "header": {"height": 1}}),
    }
    for what, m in cases.items():
        with pytest.raises(RemoteProtocolError) as e:
            parse(m)
        assert e.value.reason == "malformed", what


def test_apply_header_checks_the_certificate_and_link(cluster: Cluster) -> None:
    c = cluster
    b1, b2 = _chain(c)[:2]
    g = genesis_state(c.ctx)
    light = apply_header(c.ctx, g, b1.header, b1.certificate, next_committee=c.expected_committee(g))
    full = apply_block(c.ctx, g, b1)
    assert (light.height, light.head_hash, light.time_ms, light.committee) == (
        full.height, full.head_hash, full.time_ms, full.committee)
    assert light.model_digest == b"" and light.state_digest is None
    assert apply_block(c.ctx, light, b2) == apply_block(c.ctx, full, b2)  # the next whole block checks against it
    short = dataclasses.replace(b1.certificate, signatures=b1.certificate.signatures[:1])
    with pytest.raises(ChainError):
        apply_header(c.ctx, g, b1.header, short, next_committee=c.expected_committee(g))
    with pytest.raises(ChainError):  # no link: block 2's header on the genesis state
        apply_header(c.ctx, g, b2.header, b2.certificate, next_committee=c.expected_committee(g))
    stranger = ("not-a-member",)
    with pytest.raises(ChainError):
        apply_header(c.ctx, g, b1.header, b1.certificate, next_committee=stranger)


def test_an_outsider_follows_headers_then_takes_a_whole_block(cluster: Cluster) -> None:
    c = cluster
    chain = _chain(c)
    me = next(p for p in c.peers if all(p not in s for s in _committees(c)[:3]))  # outside heights 1-3
    r = _observer(c, me)
    sender = next(p for p in c.peers if p != me)
    for b in chain[:3]:
        fx = r.step(decided_header_message(c.keys[sender], c.ctx.chain_id, b), sender=sender)
        (commit,) = [e for e in fx if isinstance(e, CommitHeader)]
        assert commit.header == b.header and commit.state.head_hash == b.header.hash()
        assert r.status().height == b.height + 1 and r.status().phase is Phase.OBSERVE
    fx = r.step(decided_message(chain[3]), sender=sender)  # a whole block on a state known by headers
    assert r.status().height == 5
    want = apply_block(c.ctx, apply_block(c.ctx, apply_block(c.ctx, apply_block(
        c.ctx, genesis_state(c.ctx), chain[0]), chain[1]), chain[2]), chain[3])
    assert r.chain_state == want  # the whole block brings back the payload's fields


def _committees(c: Cluster) -> list[tuple[str, ...]]:
    state, out = genesis_state(c.ctx), []
    for b in _chain(c):
        out.append(state.committee)
        state = apply_block(c.ctx, state, b)
    out.append(state.committee)
    return out


def test_a_member_that_needs_the_payload_asks_for_the_block(cluster: Cluster) -> None:
    c = cluster
    b1 = _chain(c)[0]
    me = _outsider(c, 1)
    sender = next(p for p in c.peers if p != me)
    for r in (_observer(c, me, needs=True), _observer(c, me, follow=False)):
        fx = r.step(decided_header_message(c.keys[sender], c.ctx.chain_id, b1), sender=sender)
        assert not [e for e in fx if isinstance(e, CommitHeader)] and r.status().height == 1
        (ask,) = [e for e in fx if isinstance(e, Send)]
        assert ask.to == sender and ask.message.signed.kind == "sync_request" and ask.message.signed.height == 1
        r.step(decided_message(b1), sender=sender)
        assert r.status().height == 2 and r.chain_state == apply_block(c.ctx, genesis_state(c.ctx), b1)


def test_a_forged_header_is_dropped(cluster: Cluster) -> None:
    c = cluster
    b1 = _chain(c)[0]
    me = _outsider(c, 1)
    sender = next(p for p in c.peers if p != me)
    r = _observer(c, me)
    fake_header = dataclasses.replace(b1.header, time_ms=b1.header.time_ms + 1)  # votes signed the real one
    fake = dataclasses.replace(b1, header=fake_header, certificate=make_certificate(
        fake_header, b1.certificate.signatures, view=b1.certificate.view))
    fx = r.step(decided_header_message(c.keys[sender], c.ctx.chain_id, fake), sender=sender)
    assert not fx and r.status().height == 1 and r.status().dropped["bad_certificate"] == 1
    assert r.chain_state == genesis_state(c.ctx)
    r.step(decided_header_message(c.keys[sender], c.ctx.chain_id, b1), sender=sender)  # the real one
    assert r.status().height == 2
    r.step(decided_header_message(c.keys[sender], c.ctx.chain_id, b1), sender=sender)  # again: stale
    assert r.status().height == 2 and r.status().dropped["stale_height"] == 1
