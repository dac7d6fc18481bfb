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
    KIND_HEADER_SYNC,
    Broadcast,
    CommitHeader,
    Message,
    Phase,
    RemoteProtocolError,
    Replica,
    Send,
    SendBlocks,
    decided_header_message,
    decided_message,
    header_sync_request_message,
    parse,
)
from consensus._messages import DecidedHeader, SyncRequest, sign_signed, sync_request_message
from consensus.testing import Cluster
from ledger import ATTEMPT_VIEWS, ChainError, apply_block, apply_header, genesis_state, make_certificate


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
        ctx=c.ctx, key=c.keys[me], state=genesis_state(c.ctx), config=c.config,
        **({"next_committee": c.expected_committee, "needs_payload": lambda st: needs} if follow else {}),
    )


def test_parse_round_trip_and_strictness(cluster: Cluster) -> None:
    c = cluster
    block = _chain(c)[0]
    sender = c.keys[c.peers[0]]
    msg = decided_header_message(sender, c.ctx.chain_id, block)
    again = Message.decode(msg.encode())
    d = parse(again)
    assert isinstance(d, DecidedHeader) and d.signed.kind == KIND_HEADER
    assert d.header == block.header and d.certificate == block.certificate and d.block_hash == block.header.hash()
    assert len(msg.encode()) < len(decided_message(block).encode())

    other = _chain(c)[1]

    def forged(body: dict, *, height: int = block.height, view: int = block.certificate.view, **extra: object) -> Message:
        return Message(signed=sign_signed(sender, c.ctx.chain_id, KIND_HEADER, height, view, body), **extra)  # type: ignore[arg-type]

    good = {"header": block.header.to_value(), "certificate": block.certificate.to_value()}
    cases = {
        "another block's certificate": forged({**good, "certificate": other.certificate.to_value()}),
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


# --- lazy replicas: sleep outside the round, catch up by headers when a later height shows up ----------------------


def _lazy(c: Cluster, me: str, *, state=None, needs=lambda st: False) -> Replica:
    return Replica(
        ctx=c.ctx, key=c.keys[me], state=state if state is not None else genesis_state(c.ctx),
        config=c.config, next_committee=c.expected_committee, needs_payload=needs, lazy=True,
    )


def _state_after(c: Cluster, n: int):
    state = genesis_state(c.ctx)
    for b in _chain(c)[:n]:
        state = apply_block(c.ctx, state, b)
    return state


def test_header_sync_request_parses_strictly(cluster: Cluster) -> None:
    c = cluster
    key = c.keys[c.peers[0]]
    d = parse(Message.decode(header_sync_request_message(key, c.ctx.chain_id, 3).encode()))
    assert isinstance(d, SyncRequest) and d.headers and d.signed.height == 3 and d.signed.kind == KIND_HEADER_SYNC
    plain = parse(sync_request_message(key, c.ctx.chain_id, 3))
    assert isinstance(plain, SyncRequest) and not plain.headers
    for what, m in {
        "a body": Message(signed=sign_signed(key, c.ctx.chain_id, KIND_HEADER_SYNC, 3, 0, {"from": 1})),
        "a view": Message(signed=sign_signed(key, c.ctx.chain_id, KIND_HEADER_SYNC, 3, 1, {})),
        "a payload": Message(signed=sign_signed(key, c.ctx.chain_id, KIND_HEADER_SYNC, 3, 0, {}), payload=_chain(c)[0].payload),
    }.items():
        with pytest.raises(RemoteProtocolError) as e:
            parse(m)
        assert e.value.reason == "malformed", what
    with pytest.raises(ValueError, match="lazy"):
        Replica(ctx=c.ctx, key=key, state=genesis_state(c.ctx), config=c.config, lazy=True)


def test_a_lazy_observer_sleeps_until_a_later_block_wakes_it_then_catches_up_by_headers(cluster: Cluster) -> None:
    c = cluster
    chain = _chain(c)
    # outside heights 1-4, and outside the committee re-drawn for height 1 (which would wake it: the next test)
    k1 = c.ctx.view_committee(genesis_state(c.ctx), 1, ATTEMPT_VIEWS)
    me = next(p for p in c.peers if all(p not in s for s in _committees(c)[:4]) and p not in k1)
    r = _lazy(c, me)
    plain = _observer(c, me)
    assert r.idle_ticks() > 10**12 and plain.idle_ticks() < c.config.timeout_ticks_sync * 2  # no sync timer
    r.skip_ticks(10**6)  # a million ticks: nothing to do, nothing asked
    assert r.tick() == [] and r.status().height == 1

    server_id = chain[3].header.proposer  # pushes block 4 to a member with a role at height 5
    fx = r.step(decided_message(chain[3]), sender=server_id)
    (ask,) = [e for e in fx if isinstance(e, Send)]
    assert ask.to == server_id and ask.message.signed.kind == KIND_HEADER_SYNC and ask.message.signed.height == 1
    assert r.status().height == 1 and r.status().buffered == 1  # block 4 is held
    assert r.idle_ticks() < c.config.timeout_ticks_sync  # catching up: its sync timer runs again

    # the sender serves the headers it decided, from its own record (SendBlocks(headers=True))
    server = _lazy(c, server_id, state=_state_after(c, 4))
    (serve,) = server.step(ask.message, sender=me)
    assert serve == SendBlocks(to=me, start=1, stop=min(5, 1 + c.config.header_batch_max), headers=True)
    assert server.step(ask.message, sender=me) == []  # served once per sync timeout

    # block 4 shown again while the batch is on its way: no second request
    assert not [e for e in r.step(decided_message(chain[3]), sender=server_id) if isinstance(e, Send)]
    commits = []
    for b in chain[:3]:
        fx = r.step(decided_header_message(c.keys[server_id], c.ctx.chain_id, b), sender=server_id)
        commits += [e for e in fx if isinstance(e, CommitHeader)]
        assert not [e for e in fx if isinstance(e, Send)], fx  # no request per header: the batch covers them
    assert [e.header.height for e in commits] == [1, 2, 3]
    # the held block 4 is taken in the same call as the third header, after it: one batch, in height order
    assert [type(e).__name__ for e in fx] == ["CommitHeader", "Commit"] and fx[1].block == chain[3]
    assert r.status().height == 5 and r.chain_state == _state_after(c, 4)  # block 4 whole: its payload's fields
    # the rest of the batch after the block it needed whole: ignored, not a peer fault
    r.step(decided_header_message(c.keys[server_id], c.ctx.chain_id, chain[3]), sender=server_id)
    assert "stale_height" not in r.status().dropped


def test_a_lazy_observer_with_a_role_keeps_its_sync_timer(cluster: Cluster) -> None:
    c = cluster
    me = _outsider(c, 1)
    r = _lazy(c, me, needs=lambda st: True)  # a trainer of height 1: it waits for the block as before
    assert 0 < r.idle_ticks() < c.config.timeout_ticks_start + c.config.timeout_ticks_sync
    r.skip_ticks(r.idle_ticks())
    fx = r.tick()
    (ask,) = [e for e in fx if isinstance(e, Send)]
    assert ask.message.signed.kind == KIND_HEADER_SYNC and ask.to in _committees(c)[0]


def test_a_lazy_observer_whose_part_is_over_rests_until_a_message_wakes_it(cluster: Cluster) -> None:
    """``Replica.rest``: the host's part at this height is over (a client that sent its update). A lazy observer
    drops its sync timer then and sleeps; a later block wakes it and it catches up by headers. A committee member,
    a plain observer and one catching up keep their timers."""
    c = cluster
    chain = _chain(c)
    k1 = c.ctx.view_committee(genesis_state(c.ctx), 1, ATTEMPT_VIEWS)  # (on it, it would wake to re-draw height 1)
    me = next(p for p in c.peers if all(p not in s for s in _committees(c)[:4]) and p not in k1)  # outside 1-4
    r = _lazy(c, me, needs=lambda st: True)  # a client of height 1: waits for block 1 on its timer
    timer = r.idle_ticks()
    assert 0 < timer < c.config.timeout_ticks_start + c.config.timeout_ticks_sync
    r.rest()
    assert r.idle_ticks() > 10**12
    r.skip_ticks(10**6)
    assert r.tick() == [] and r.status().height == 1
    server_id = chain[3].header.proposer
    (ask,) = [e for e in r.step(decided_message(chain[3]), sender=server_id) if isinstance(e, Send)]
    assert ask.to == server_id and ask.message.signed.kind == KIND_HEADER_SYNC and ask.message.signed.height == 1
    assert r.idle_ticks() < c.config.timeout_ticks_sync  # woken: catching up on its retry timer
    r.rest()  # catching up: no rest
    assert r.idle_ticks() < c.config.timeout_ticks_sync

    plain = _observer(c, me)
    before = plain.idle_ticks()
    plain.rest()
    assert plain.idle_ticks() == before  # not lazy: it follows every height
    member = _committees(c)[0][0]
    validator = _lazy(c, member, needs=lambda st: True)
    validator.rest()
    assert validator.idle_ticks() == 0  # in the committee: its timers run


def test_a_lazy_observer_holds_a_header_that_overtook_its_batch(cluster: Cluster) -> None:
    c = cluster
    chain = _chain(c)
    me = next(p for p in c.peers if all(p not in s for s in _committees(c)[:4]))
    r = _lazy(c, me)
    sender = chain[3].header.proposer
    msgs = [decided_header_message(c.keys[sender], c.ctx.chain_id, b) for b in chain[:3]]
    r.step(msgs[1], sender=sender)  # header 2 first: held, headers asked from height 1
    r.step(msgs[2], sender=sender)
    assert r.status().height == 1 and r.status().buffered == 2
    fx = r.step(msgs[0], sender=sender)  # the held headers follow in the same call, in height order
    assert [e.header.height for e in fx if isinstance(e, CommitHeader)] == [1, 2, 3]
    assert r.status().height == 4 and r.chain_state.head_hash == chain[2].header.hash()


@pytest.mark.parametrize("held", [True, False])
def test_a_lazy_observer_far_behind_catches_up_to_the_block_that_woke_it(cluster: Cluster, held: bool,
                                                                       answer_requests) -> None:  # noqa: ANN001
    """Woken by a block beyond its height window, a lazy observer holds it (it is the block its host needs) and
    catches up to it by headers, batch after batch. A member that could not hold it (here its buffer full, taken
    by a header that came first) catches up to the height its sender showed and then asks for that block whole."""
    c = cluster
    chain = _chain(c)
    me = next(p for p in c.peers if all(p not in s for s in _committees(c)[:4]))
    cfg = dataclasses.replace(c.config, height_window=2, sync_batch_max=1, header_batch_max=1)
    # (not held: a buffer of one message, taken by a header that came first)
    mine = cfg if held else dataclasses.replace(cfg, buffered_messages_max=1)
    r = Replica(ctx=c.ctx, key=c.keys[me], state=genesis_state(c.ctx), config=mine,
                next_committee=c.expected_committee, needs_payload=lambda st: st.height == 4, lazy=True)
    server_id = chain[3].header.proposer
    server = Replica(ctx=c.ctx, key=c.keys[server_id], state=_state_after(c, 4), config=cfg,
                     next_committee=c.expected_committee, needs_payload=lambda st: False, lazy=True)
    fx = []
    if not held:
        fx += r.step(decided_header_message(c.keys[server_id], c.ctx.chain_id, chain[1]), sender=server_id)
        assert r.status().buffered == 1
    fx += r.step(decided_message(chain[3]), sender=server_id)
    assert r.status().buffered == 1
    if not held:
        assert r.status().dropped == {"buffer_full": 1}  # the block: no room
    # the server answers each request as a node would (SendBlocks from its record)
    asked, _ = answer_requests(c, r, server, server_id, me, fx, chain)
    if held:
        assert asked == [(KIND_HEADER_SYNC, h) for h in (1, 2, 3)]
    else:
        # (header 2, held, follows header 1 at once: no request for it)
        assert asked == [(KIND_HEADER_SYNC, h) for h in (1, 3, 4)] + [("sync_request", 4)]
    assert r.status().height == 5 and r.chain_state == _state_after(c, 4)


def test_a_lazy_observer_shown_a_height_nobody_serves_goes_back_to_sleep(cluster: Cluster) -> None:
    """A later block that nobody serves headers for (forged, or its sender gone) costs a lazy observer without a
    role one request to each member in turn, then it sleeps again."""
    c = cluster
    chain = _chain(c)
    k1 = c.ctx.view_committee(genesis_state(c.ctx), 1, ATTEMPT_VIEWS)  # (on it, it would wake to re-draw height 1)
    me = next(p for p in c.peers if all(p not in s for s in _committees(c)[:4]) and p not in k1)
    r = _lazy(c, me)
    sender = chain[3].header.proposer
    fx = r.step(decided_message(chain[3]), sender=sender)
    asked = [e.to for e in fx if isinstance(e, Send)]
    for _ in range(50):
        idle = r.idle_ticks()
        if idle > 10**12:
            break
        r.skip_ticks(idle)
        asked += [e.to for e in r.tick() if isinstance(e, Send)]
    assert r.idle_ticks() > 10**12 and r.status().height == 1  # asleep again, nothing taken
    committee = set(_committees(c)[0])
    assert asked[0] == sender and set(asked[1:]) <= committee | {sender}
    assert len(asked) <= len(committee) + 2, asked
    fx = r.step(decided_message(chain[3]), sender=sender)  # shown again later: it asks again
    assert [e.to for e in fx if isinstance(e, Send)] == [sender]


def test_a_lazy_observer_on_the_re_drawn_committee_wakes_when_its_height_is_re_drawn(cluster: Cluster) -> None:
    """A lazy member outside its height's committee but on the committee re-drawn for it sleeps
    only until ``redraw_ticks``: then it enters the attempt with a VIEW-CHANGE to the new committee and the old one
    (whose members that decided the height answer with the block)."""
    c = cluster
    st = genesis_state(c.ctx)
    k1 = c.ctx.view_committee(st, 1, ATTEMPT_VIEWS)
    me = next(p for p in k1 if p not in st.committee)
    r = _lazy(c, me)
    assert r.idle_ticks() == c.ctx.redraw_ticks - 1
    r.skip_ticks(c.ctx.redraw_ticks - 1)
    fx = r.tick()
    assert r.status().attempt == 1 and r.status().view == ATTEMPT_VIEWS and r.status().in_committee
    (vc,) = [e for e in fx if isinstance(e, Broadcast)]
    assert vc.message.signed.kind == "view_change" and vc.message.signed.view == ATTEMPT_VIEWS
    assert set(vc.to) == (set(k1) | set(st.committee)) - {me}
