"""Wire records are strict: exact field sets and types; genesis validation names the problem."""

import dataclasses

import pytest

from ledger import (
    DecodeError,
    Genesis,
    KeyPair,
    Member,
    ModelSpec,
    ProtocolParams,
    Timeouts,
    UpdateCommitment,
    decode,
    encode,
    genesis_committee,
)
from ledger.testing import demo_genesis


def _keys(n):
    return [KeyPair.derive(f"t{i}") for i in range(n)]


def test_genesis_round_trip_and_hash_stability():
    g = demo_genesis(_keys(5))
    assert Genesis.decode(g.encode()) == g
    assert g.hash() == demo_genesis(_keys(5)).hash()
    assert g.hash() != demo_genesis(_keys(6)).hash()
    assert len(genesis_committee(g)) == 4 and set(genesis_committee(g)) <= set(g.member_ids)


def test_genesis_validation_errors():
    ks = _keys(4)
    ms = sorted((Member(peer_id=k.peer_id, public_key=k.public_key) for k in ks), key=lambda m: m.peer_id)
    proto = ProtocolParams(mode="committee", algorithm="cmfl", committee_size=3)
    model = ModelSpec(name="mlp", digest=bytes(32))
    with pytest.raises(ValueError, match="duplicate member"):
        Genesis(chain_id="c", genesis_time_ms=0, members=(ms[0], ms[0], ms[1]), protocol=proto, model=model)
    with pytest.raises(ValueError, match="does not match its public key"):
        Member(peer_id=ks[0].peer_id, public_key=ks[1].public_key)
    with pytest.raises(ValueError, match="32 bytes"):
        Member(peer_id=ks[0].peer_id, public_key=b"\x01" * 31)
    with pytest.raises(ValueError, match="exceeds the number of members"):
        Genesis(chain_id="c", genesis_time_ms=0, members=tuple(ms[:2]), protocol=proto, model=model)
    with pytest.raises(ValueError, match="chain_id"):
        Genesis(chain_id="bad id!", genesis_time_ms=0, members=tuple(ms), protocol=proto, model=model)
    with pytest.raises(ValueError, match="mode"):
        ProtocolParams(mode="server", algorithm="cmfl", committee_size=3)
    with pytest.raises(ValueError, match="quorum"):
        ProtocolParams(mode="committee", algorithm="cmfl", committee_size=3, quorum="two-thirds")
    with pytest.raises(ValueError, match="timeout_ticks_propose"):
        Timeouts(timeout_ticks_propose=0)
    with pytest.raises(ValueError, match="non-finite"):
        ProtocolParams(mode="committee", algorithm="cmfl", committee_size=3, params={"x": float("nan")})


def test_decoding_is_strict_about_fields_and_types():
    u = UpdateCommitment(peer="p", fl_round=1, digest=bytes(32), n_samples=3, signature=bytes(64))
    v = dict(decode(u.encode()))
    assert UpdateCommitment.from_value(v) == u
    with pytest.raises(DecodeError, match="unknown field"):
        UpdateCommitment.decode(encode({**v, "extra": 1}))
    with pytest.raises(DecodeError, match="missing field"):
        UpdateCommitment.decode(encode({k: x for k, x in v.items() if k != "digest"}))
    with pytest.raises(DecodeError, match="expected int"):
        UpdateCommitment.decode(encode({**v, "n_samples": True}))
    with pytest.raises(DecodeError, match="expected bytes"):
        UpdateCommitment.decode(encode({**v, "digest": "00" * 32}))
    with pytest.raises(DecodeError, match="32 bytes"):
        UpdateCommitment.decode(encode({**v, "digest": bytes(31)}))
    with pytest.raises(DecodeError, match=">= 0"):
        UpdateCommitment.decode(encode({**v, "fl_round": -1}))


def test_records_are_frozen():
    u = UpdateCommitment(peer="p", fl_round=1, digest=bytes(32), n_samples=3, signature=bytes(64))
    with pytest.raises(dataclasses.FrozenInstanceError):
        u.n_samples = 4  # type: ignore[misc]
    g = demo_genesis(_keys(4))
    with pytest.raises(TypeError):
        g.protocol.params["x"] = 1  # type: ignore[index]
