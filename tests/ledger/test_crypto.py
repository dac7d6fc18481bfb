"""Peer ids match py-libp2p; signatures are domain separated; verification never raises on junk."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import (
    DecodeError,
    KeyPair,
    PublicKeyCache,
    SignatureError,
    peer_id_from_public_key,
    public_key_from_peer_id,
    sign_bytes,
    verify_signature,
)
from ledger._crypto import sign_bytes_flat


def test_peer_id_equals_py_libp2p_peer_id():
    from libp2p.crypto.ed25519 import Ed25519PublicKey as P2PPub
    from libp2p.peer.id import ID

    for i in range(20):
        k = KeyPair.derive(f"k{i}")
        assert k.peer_id == ID.from_pubkey(P2PPub.from_bytes(k.public_key)).to_base58()
        assert k.peer_id.startswith("12D3KooW")
        assert public_key_from_peer_id(k.peer_id) == k.public_key


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=48) | st.binary(max_size=6).map(lambda b: b"\x00" * 3 + b))
def test_base58_equals_the_reference_encoder(data):
    """Our encoder (two digits per division) against the ``base58`` package py-libp2p depends on, leading zero
    bytes and top digits of zero included; and decoding inverts it."""
    import base58

    from ledger._crypto import _b58decode, _b58encode

    text = _b58encode(data)
    assert text == base58.b58encode(data).decode()
    assert _b58decode(text) == data


@pytest.mark.parametrize("bad", ["", "12D3KooW", "0OIl" * 12, "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N", 5])
def test_bad_peer_ids(bad):
    with pytest.raises(DecodeError):
        public_key_from_peer_id(bad)


def test_signature_covers_chain_kind_height_view_and_body():
    k = KeyPair.derive("signer")
    base = ("chain-a", "commit", 5, 0, {"block_hash": b"\x01" * 32})
    sig = k.sign(sign_bytes(*base))
    assert verify_signature(k.public_key, sig, sign_bytes(*base))
    variants = [
        ("chain-b", "commit", 5, 0, {"block_hash": b"\x01" * 32}),
        ("chain-a", "prepare", 5, 0, {"block_hash": b"\x01" * 32}),
        ("chain-a", "commit", 6, 0, {"block_hash": b"\x01" * 32}),
        ("chain-a", "commit", 5, 1, {"block_hash": b"\x01" * 32}),
        ("chain-a", "commit", 5, 0, {"block_hash": b"\x02" * 32}),
    ]
    for v in variants:
        assert not verify_signature(k.public_key, sig, sign_bytes(*v)), v


@given(
    st.text(max_size=10),
    st.text(min_size=1, max_size=10),
    st.integers(0, 2**40),
    st.integers(0, 100),
    st.binary(max_size=40),
    st.integers(0, 2**53),
)
@settings(max_examples=100, deadline=None)
def test_flat_sign_bytes_equal_canonical_sign_bytes(chain, kind, height, view, blob, n):
    body = {"digest": blob, "n_samples": n, "peer": kind}
    assert sign_bytes_flat(chain, kind, height, view, body) == sign_bytes(chain, kind, height, view, body)


@given(st.binary(max_size=80), st.binary(max_size=80), st.binary(max_size=100))
@settings(max_examples=100, deadline=None)
def test_verify_signature_never_raises(pk, sig, msg):
    assert verify_signature(pk, sig, msg) in (True, False)


def test_key_cache_rejects_unknown_signers_and_bad_signatures():
    a, b = KeyPair.derive("a"), KeyPair.derive("b")
    cache = PublicKeyCache()
    cache.add(a.peer_id, a.public_key)
    msg = b"hello"
    cache.verify(a.peer_id, a.sign(msg), msg, what="t")
    with pytest.raises(SignatureError, match="not a member"):
        cache.verify(b.peer_id, b.sign(msg), msg, what="t")
    with pytest.raises(SignatureError, match="invalid signature"):
        cache.verify(a.peer_id, b.sign(msg), msg, what="t")
    with pytest.raises(SignatureError, match="64 bytes"):
        cache.verify(a.peer_id, b"x", msg, what="t")


def test_keys_are_deterministic_and_repr_hides_seed():
    assert KeyPair.derive("x") == KeyPair.derive("x")
    assert KeyPair.derive("x").sign(b"m") == KeyPair.derive("x").sign(b"m")  # Ed25519 is deterministic
    assert KeyPair.derive("x").seed.hex() not in repr(KeyPair.derive("x"))
    assert peer_id_from_public_key(KeyPair.derive("x").public_key) == KeyPair.derive("x").peer_id


def test_signature_memo_remembers_successes_only():
    a = KeyPair.derive("memo")
    cache = PublicKeyCache(memo_max=2)
    cache.add(a.peer_id, a.public_key)
    msgs = [b"m1", b"m2", b"m3"]
    for m in msgs:
        cache.verify(a.peer_id, a.sign(m), m, what="t")
        cache.verify(a.peer_id, a.sign(m), m, what="t")  # a hit
    assert len(cache._memo) == 2  # bounded
    bad = a.sign(b"other")
    for _ in range(2):  # a failure is never remembered as a success
        with pytest.raises(SignatureError):
            cache.verify(a.peer_id, bad, b"m1", what="t")
    with pytest.raises(SignatureError):  # same signature and message, but another signer
        b = KeyPair.derive("memo-b")
        cache.add(b.peer_id, b.public_key)
        cache.verify(b.peer_id, a.sign(b"m3"), b"m3", what="t")


def test_rfc8032_test_vector_1():
    # RFC 8032 §7.1, TEST 1 (empty message): the same key and signature bytes as any Ed25519 implementation
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    k = KeyPair.from_seed(seed)
    assert k.public_key.hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    sig = k.sign(b"")
    assert sig.hex() == (
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert verify_signature(k.public_key, sig, b"")


def test_small_order_keys_and_points_are_refused():
    # A member registered with the identity point as its key would have "signatures" anyone can make:
    # R = identity, S = 0 passes a lax verifier (OpenSSL's) for every message. The strict one refuses it.
    identity = b"\x01" + bytes(31)
    forged = identity + bytes(32)
    for msg in (b"", b"anything", sign_bytes("c", "commit", 1, 0, {"block_hash": bytes(32)})):
        assert not verify_signature(identity, forged, msg)
    cache = PublicKeyCache()
    cache.add("mallory", identity)
    with pytest.raises(SignatureError, match="invalid signature"):
        cache.verify("mallory", forged, b"anything", what="t")
    # a non-canonical S (S + L) of a valid signature is refused too (no malleability)
    k = KeyPair.derive("s")
    sig = k.sign(b"m")
    order = 2**252 + 27742317777372353535851937790883648493
    s_plus_l = (int.from_bytes(sig[32:], "little") + order).to_bytes(32, "little")
    assert verify_signature(k.public_key, sig, b"m")
    assert not verify_signature(k.public_key, sig[:32] + s_plus_l, b"m")
