"""Wire messages: canonical round trips, the COMMIT vote is the certificate signature, strict stateless checks."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consensus import KIND_COMMIT, KIND_PREPARE, Message, RemoteProtocolError, parse
from consensus._messages import (
    Decided,
    NewView,
    PrePrepare,
    PreparedProof,
    ViewChange,
    Vote,
    new_view_message,
    pre_prepare_message,
    sign_signed,
    sync_request_message,
    view_change_message,
    vote_message,
)
from ledger import (
    Block,
    ChainContext,
    DecodeError,
    Genesis,
    KeyPair,
    Member,
    ModelSpec,
    Payload,
    ProtocolParams,
    check_certificate,
    commit_sign_bytes,
    make_certificate,
    make_header,
    sha256,
    sign_commit,
)

CHAIN = "msg-test"
KEYS = sorted((KeyPair.derive(f"msg-{i}") for i in range(4)), key=lambda k: k.peer_id)
GENESIS = Genesis(
    chain_id=CHAIN,
    genesis_time_ms=0,
    members=tuple(Member(peer_id=k.peer_id, public_key=k.public_key) for k in KEYS),
    protocol=ProtocolParams(mode="committee", algorithm="test", committee_size=4),
    model=ModelSpec(name="m", digest=sha256(b"m")),
)
PAYLOAD = Payload(updates=(), model_digest=sha256(b"w1"), next_committee=tuple(k.peer_id for k in KEYS), record={"x": 1})
HEADER = make_header(chain_id=CHAIN, height=1, prev_hash=GENESIS.hash(), view=0, proposer=KEYS[0].peer_id, time_ms=5, payload=PAYLOAD)
BH = HEADER.hash()


def _roundtrip(m: Message) -> Message:
    data = m.encode()
    back = Message.decode(data)
    assert back.encode() == data
    return back


def _proof(view: int = 0) -> PreparedProof:
    pp = pre_prepare_message(KEYS[0], CHAIN, 1, view, HEADER, PAYLOAD)
    prepares = tuple(
        vote_message(k, CHAIN, KIND_PREPARE, 1, view, BH).signed for k in sorted(KEYS[1:3], key=lambda k: k.peer_id)
    )
    parsed = parse(pp)
    assert isinstance(parsed, PrePrepare)
    return PreparedProof(dataclasses.replace(parsed, payload=None), prepares)  # type: ignore[arg-type]


def test_every_kind_round_trips_and_parses():
    pp = _roundtrip(pre_prepare_message(KEYS[0], CHAIN, 1, 0, HEADER, PAYLOAD))
    p = parse(pp)
    assert isinstance(p, PrePrepare) and p.header == HEADER and p.block_hash == BH
    v = parse(_roundtrip(vote_message(KEYS[1], CHAIN, KIND_PREPARE, 1, 0, BH)))
    assert isinstance(v, Vote) and v.block_hash == BH
    vc = parse(_roundtrip(view_change_message(KEYS[2], CHAIN, 1, 1, _proof(), PAYLOAD)))
    assert isinstance(vc, ViewChange) and vc.prepared is not None and vc.prepared.view == 0
    empty_vc = view_change_message(KEYS[3], CHAIN, 1, 1, None, None)
    assert isinstance(parse(_roundtrip(empty_vc)), ViewChange)
    vcs = [view_change_message(k, CHAIN, 1, 1, None, None).signed for k in KEYS[1:]]
    nv = parse(_roundtrip(new_view_message(KEYS[1], CHAIN, 1, 1, vcs, None, None)))
    assert isinstance(nv, NewView) and len(nv.view_changes) == 3 and nv.pre_prepare is None
    assert parse(_roundtrip(sync_request_message(KEYS[0], CHAIN, 1))).signed.kind == "sync_request"
    cert = make_certificate(HEADER, [sign_commit(k, CHAIN, 1, 0, BH) for k in KEYS[:3]])
    d = parse(_roundtrip(Message(block=Block(header=HEADER, payload=PAYLOAD, certificate=cert))))
    assert isinstance(d, Decided) and d.block.header == HEADER


def test_commit_vote_is_the_certificate_signature():
    """A COMMIT signs exactly ledger.commit_sign_bytes, so a quorum of them is a ledger Certificate."""
    ctx = ChainContext(GENESIS)
    votes = [vote_message(k, CHAIN, KIND_COMMIT, 1, 0, BH).signed for k in KEYS[:3]]
    for k, s in zip(KEYS, votes):
        assert s is not None
        assert s.signature == sign_commit(k, CHAIN, 1, 0, BH).signature
        ctx.keys.verify(k.peer_id, s.signature, commit_sign_bytes(CHAIN, 1, 0, BH), what="commit")
    cert = make_certificate(HEADER, [sign_commit(k, CHAIN, 1, 0, BH) for k in KEYS[:3]])
    check_certificate(ctx, GENESIS.member_ids, HEADER, cert)


def _malformed(m: Message) -> None:
    with pytest.raises(RemoteProtocolError) as e:
        parse(m)
    assert e.value.reason == "malformed"


def test_stateless_checks_reject_malformed_messages():
    k = KEYS[0]
    _malformed(Message())
    _malformed(Message(signed=sign_signed(k, CHAIN, "prepare", 1, 0, {"block_hash": BH, "extra": 1})))
    _malformed(Message(signed=sign_signed(k, CHAIN, "prepare", 1, 0, {"block_hash": b"short"})))
    _malformed(Message(signed=sign_signed(k, CHAIN, "teleport", 1, 0, {})))
    _malformed(Message(signed=sign_signed(k, CHAIN, "prepare", 0, 0, {"block_hash": BH})))
    other = Payload(updates=(), model_digest=sha256(b"w2"), next_committee=PAYLOAD.next_committee)
    _malformed(pre_prepare_message(k, CHAIN, 1, 0, HEADER, other))  # payload not bound to the header
    _malformed(dataclasses.replace(pre_prepare_message(k, CHAIN, 1, 0, HEADER, PAYLOAD), payload=None))
    _malformed(pre_prepare_message(k, CHAIN, 2, 0, HEADER, PAYLOAD))  # header of another height
    _malformed(dataclasses.replace(vote_message(k, CHAIN, KIND_PREPARE, 1, 0, BH), payload=PAYLOAD))
    _malformed(view_change_message(k, CHAIN, 1, 0, None, None))  # a view change to view 0
    _malformed(view_change_message(k, CHAIN, 1, 1, _proof(), None))  # prepared proof without its payload
    _malformed(view_change_message(k, CHAIN, 1, 1, _proof(view=1), PAYLOAD))  # proof of a view >= the new one
    good = _proof()
    wrong = PreparedProof(good.pre_prepare, (vote_message(KEYS[1], CHAIN, KIND_PREPARE, 1, 0, sha256(b"x")).signed,))
    _malformed(view_change_message(k, CHAIN, 1, 1, wrong, PAYLOAD))  # a prepare for another block
    unsorted = PreparedProof(good.pre_prepare, tuple(reversed(good.prepares)))
    _malformed(view_change_message(k, CHAIN, 1, 1, unsorted, PAYLOAD))
    vcs = [view_change_message(x, CHAIN, 1, 1, None, None).signed for x in KEYS[1:]]
    foreign_pp = pre_prepare_message(KEYS[2], CHAIN, 1, 1, HEADER, PAYLOAD).signed
    _malformed(new_view_message(KEYS[1], CHAIN, 1, 1, vcs, foreign_pp, PAYLOAD))  # re-proposal by another signer
    cert = make_certificate(HEADER, [sign_commit(x, CHAIN, 1, 0, BH) for x in KEYS[:3]])
    block = Block(header=HEADER, payload=PAYLOAD, certificate=cert)
    _malformed(Message(signed=vote_message(k, CHAIN, KIND_PREPARE, 1, 0, BH).signed, block=block))


_SAMPLE = [
    pre_prepare_message(KEYS[0], CHAIN, 1, 0, HEADER, PAYLOAD).encode(),
    view_change_message(KEYS[2], CHAIN, 1, 1, _proof(), PAYLOAD).encode(),
]


@settings(max_examples=200, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 1), pos=st.integers(0, 10_000), byte=st.integers(0, 255), cut=st.booleans())
def test_mutated_bytes_fail_cleanly(which, pos, byte, cut):
    """Hostile bytes: decoding raises DecodeError only, parsing RemoteProtocolError only, never anything else."""
    data = bytearray(_SAMPLE[which])
    i = pos % len(data)
    if cut:
        del data[i:]
    else:
        data[i] = byte
    try:
        m = Message.decode(bytes(data))
    except DecodeError:
        return
    try:
        parse(m)
    except RemoteProtocolError:
        pass
