"""What a peer sends unasked is bounded in bytes, per sender and in all, and freed when its round ends: blobs nobody
wanted (``NodeCore._hold_unsolicited``) and updates for a round this node has not reached (``_early``). Also: a node
decodes a peer's envelope within the budget its field allows, and every envelope of an honest run takes under half of
it."""

from __future__ import annotations

import dataclasses
import os

import msgpack
import numpy as np
import pytest

import node.core as core_mod
from learning import vector_to_blob
from ledger import DecodeError, sha256, sign_update
from ledger._encoding import Budget, scan
from node._wire import (
    MSG_ENVELOPE_BYTES_MAX, Envelope, UpdatePacket, decode_envelope, envelope_budget, envelope_kind,
)
from sim import Simulation, load_scenario, resolve_scenario


def _sim(rounds: int = 3) -> Simulation:
    return Simulation(load_scenario(resolve_scenario("quickstart"), rounds=rounds), workers=0)


def _blobs(*blobs: bytes) -> bytes:
    return Envelope(blobs=blobs).encode()


@pytest.fixture
def small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core_mod, "UNSOLICITED_PEER_BYTES_MIN", 0)  # the bound is then 4 x the model's blob


def test_unasked_blobs_are_bounded_per_sender_and_in_all(small_bounds: None) -> None:
    s = _sim()
    target, *others = s.peers
    node = s.nodes[target]
    per_peer, total = node.unsolicited_bounds()
    assert per_peer == 4 * len(vector_to_blob(np.asarray(s.theta0, dtype=np.float32))) and total == 4 * per_peer
    size = per_peer // 3 + 1
    for sender in others[:6]:
        for _ in range(4):  # 4 blobs of a third of the bound: the sender's oldest goes
            node.on_message(sender, _blobs(os.urandom(size)))
            st = node.status()
            assert st.unsolicited_bytes <= total
            assert node._unsolicited_by[sender] <= per_peer  # noqa: SLF001
        assert node._unsolicited_by[sender] == 2 * size  # noqa: SLF001
    st = node.status()
    assert st.unsolicited_peak <= total and len(node._unsolicited) <= core_mod.UNSOLICITED_BLOBS_MAX  # noqa: SLF001
    assert st.dropped["unsolicited blob evicted"] >= 6 * 2
    node.on_message(others[0], _blobs(os.urandom(per_peer + 1)))  # one blob over the bound is not held at all
    assert node.status().dropped["unsolicited blob over the bound"] == 1


def test_unasked_blobs_are_freed_when_the_round_after_theirs_ends_and_a_pushed_model_is_still_used() -> None:
    s = _sim(rounds=3)
    target, sender = s.peers[0], s.peers[1]
    node = s.nodes[target]
    node.on_message(sender, _blobs(os.urandom(50_000), os.urandom(60_000)))
    assert node.status().unsolicited_bytes == 110_000
    res = s.run()
    st = node.status()
    assert st.unsolicited_bytes == 0 and st.dropped["unsolicited blob expired"] == 2, st.dropped
    assert len(res.rounds) == 3
    # the models the proposers pushed (unasked, ahead of or behind their blocks) were all used, none expired
    expired = {p: n.status().dropped.get("unsolicited blob expired", 0) for p, n in s.nodes.items() if p != target}
    assert not any(expired.values()), expired


def test_an_early_update_is_held_only_at_an_updates_size() -> None:
    s = _sim()
    target, sender = s.peers[0], s.peers[1]
    node = s.nodes[target]
    key = s.keys[sender]
    blob = os.urandom(1 << 20)
    c = sign_update(key, s.genesis.chain_id, 2, sha256(blob), 10)  # for the next round: held until it begins
    node.on_message(sender, Envelope(update=UpdatePacket(commitment=c, blob=blob)).encode())
    assert node.status().dropped["early update of the wrong size"] == 1 and not node._early  # noqa: SLF001


def test_envelope_kind_reads_the_field_from_the_canonical_prefix() -> None:
    digest = bytes(32)
    for kind, env in [("blobs", Envelope(blobs=(b"x",))), ("want", Envelope(want=(digest,)))]:
        assert envelope_kind(env.encode()) == kind
    for bad in (b"", b"\x85", b"\x84\xa5blobs\xc0", b"\x85\xa5blobs\xc0\xa4pbft\xc0\xa6scores\xc0\xa6update\xc0\xa4want\xc0",
                msgpack.packb({"want": [digest]}), b"\xdd\x00\x00\x00\x01\x80"):
        with pytest.raises(DecodeError):
            envelope_kind(bad)
        with pytest.raises(DecodeError):
            decode_envelope(bad)


def test_a_pbft_or_scores_envelope_over_the_msg_cap_is_refused_before_decoding() -> None:
    with pytest.raises(DecodeError, match="exceeds"):
        envelope_budget("pbft", MSG_ENVELOPE_BYTES_MAX + 1)
    assert envelope_budget("blobs", 200 << 20).items == 256


def test_every_envelope_of_an_honest_run_takes_under_half_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Committee mode (score rows, attestations in blocks) and coordinator mode with 100 sampled clients (blocks of
    100 commitments): the frames that carry the most objects per byte."""
    seen: dict[str, int] = {}
    real = decode_envelope

    def watched(data: bytes) -> Envelope:
        kind = envelope_kind(data)
        full = envelope_budget(kind, len(data))
        half = Budget(items=full.items // 2, cost=full.cost // 2)
        scan(data, half)  # raises past half the budget
        seen[kind] = max(seen.get(kind, 0), len(data))
        return real(data)

    monkeypatch.setattr("node._wire.decode_envelope", watched)
    _sim(rounds=2).run()
    sc = load_scenario(resolve_scenario("scale_10k"), members=300, rounds=2)
    sc = dataclasses.replace(sc, protocol=dataclasses.replace(sc.protocol, params={"clients": 100}),
                             training=dataclasses.replace(sc.training, steps=1))
    Simulation(sc, workers=0).run()
    assert set(seen) >= {"update", "scores", "pbft"}, seen
    assert seen["pbft"] > 16_000, seen  # a block of 100 commitments
