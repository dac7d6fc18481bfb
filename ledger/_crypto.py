"""Hashing, peer identities and domain-separated Ed25519 signatures.

* ``sha256`` everywhere; every hashed object is prefixed by a domain tag so a block header can never
  be mistaken for a genesis, a Merkle leaf or a signed message.
* A peer's name is its **libp2p peer id**: base58btc of the identity multihash of the protobuf
  ``PublicKey{Type: Ed25519, Data: key}`` (libp2p peer-id spec). Computed here without libp2p so the
  ledger stays pure; ``tests/ledger/test_crypto.py`` checks it equals py-libp2p's own ``ID``.
* Signatures cover :func:`sign_bytes`: a fixed prefix, then the canonical encoding of
  ``[chain_id, kind, height, view, body]``. Chain id, message kind and height are therefore always
  signed, as CometBFT's ``CanonicalizeVote`` does: no replay across chains, heights or message kinds.
  Ed25519 is deterministic, so simulation traces stay bit-stable.
* Ed25519 is libsodium's (PyNaCl): RFC 8032 signatures, byte-identical to any other implementation's for
  the same key and message, and a strict verifier (canonical ``S``, no small-order key or ``R``), about
  twice as fast as OpenSSL's on these machines (``benchmarks/ledger_bench.py`` measures both). OpenSSL
  accepts ``R`` = identity, ``S`` = 0 as a signature of *any* message under the identity point as key, so
  a member registered with that key could disown or be framed with anything; libsodium refuses it (tested).
  Every node and every audit verifies by the same rules, so no two of them disagree about a signature.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from types import MappingProxyType

import msgpack
from nacl.bindings import crypto_sign, crypto_sign_open, crypto_sign_seed_keypair
from nacl.exceptions import BadSignatureError, CryptoError

from ledger._encoding import Value, encode
from ledger._errors import DecodeError, SignatureError

__all__ = [
    "DIGEST_BYTES",
    "PUBLIC_KEY_BYTES",
    "SIGNATURE_BYTES",
    "KeyPair",
    "PublicKeyCache",
    "hash_tagged",
    "peer_id_from_public_key",
    "public_key_from_peer_id",
    "sha256",
    "sign_bytes",
    "sign_bytes_flat",
    "verify_signature",
]

DIGEST_BYTES = 32
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
SEED_BYTES = 32

_SIGN_PREFIX = b"concilium-sig/v1\x00"

# libp2p: PublicKey protobuf = field 1 (KeyType, varint) = 1 (Ed25519); field 2 (bytes) length 32.
_PB_ED25519_PUBLIC = b"\x08\x01\x12\x20"
# identity multihash: code 0x00, length 0x24 (= 4 + 32 bytes of protobuf)
_MH_IDENTITY = b"\x00\x24"
_B58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = MappingProxyType({c: i for i, c in enumerate(_B58_ALPHABET)})


def sha256(data: bytes) -> bytes:
    """SHA-256 digest of ``data`` (:meth:`ledger.Caches.sha256` remembers the digests of blobs)."""
    return hashlib.sha256(data).digest()


def hash_tagged(tag: bytes, data: bytes) -> bytes:
    """SHA-256 of ``tag ‖ 0x00 ‖ data``: domain-separated hashing."""
    h = hashlib.sha256(tag)
    h.update(b"\x00")
    h.update(data)
    return h.digest()


_B58_PAIRS = tuple(a + b for a in _B58_ALPHABET for b in _B58_ALPHABET)
"""Two base-58 digits for each value below 58²: one big-number division per two digits (a simulation derives
and checks the peer ids of 10,000 members)."""


def _b58encode(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = []
    pairs = _B58_PAIRS
    while n:
        n, r = divmod(n, 58 * 58)
        out.append(pairs[r])
    body = "".join(reversed(out)).lstrip("1")  # (a top pair below 58 begins with the digit zero)
    pad = len(data) - len(data.lstrip(b"\x00"))
    return "1" * pad + body


def _b58decode(text: str) -> bytes:
    n = 0
    index = _B58_INDEX
    for c in text:
        try:
            i = index[c]
        except KeyError:
            raise DecodeError(f"invalid base58 character {c!r}") from None
        n = n * 58 + i
    pad = len(text) - len(text.lstrip("1"))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\x00" * pad + body


def peer_id_from_public_key(public_key: bytes) -> str:
    """The libp2p peer id (``12D3KooW...``) of a raw 32-byte Ed25519 public key."""
    if type(public_key) is not bytes or len(public_key) != PUBLIC_KEY_BYTES:
        raise ValueError(f"an Ed25519 public key is {PUBLIC_KEY_BYTES} bytes")
    return _b58encode(_MH_IDENTITY + _PB_ED25519_PUBLIC + public_key)


def public_key_from_peer_id(peer_id: str) -> bytes:
    """Inverse of :func:`peer_id_from_public_key`; raises :class:`DecodeError` for other ids."""
    if type(peer_id) is not str or not 40 <= len(peer_id) <= 60:
        raise DecodeError(f"not an Ed25519 libp2p peer id: {peer_id!r:.80}")
    raw = _b58decode(peer_id)
    prefix = _MH_IDENTITY + _PB_ED25519_PUBLIC
    if len(raw) != len(prefix) + PUBLIC_KEY_BYTES or not raw.startswith(prefix):
        raise DecodeError(f"not an Ed25519 libp2p peer id: {peer_id!r:.80}")
    return raw[len(prefix) :]


def sign_bytes(chain_id: str, kind: str, height: int, view: int, body: Value) -> bytes:
    """The exact bytes a signature covers: ``prefix ‖ encode([chain_id, kind, height, view, body])``."""
    return _SIGN_PREFIX + encode([chain_id, kind, height, view, body])


def sign_bytes_flat(chain_id: str, kind: str, height: int, view: int, body: dict[str, Value]) -> bytes:
    """:func:`sign_bytes` for a flat body of validated scalars whose keys are given in sorted order.

    Skips the canonicalising walk (the hot path of verifying update commitments and commit votes);
    the result is byte-identical to :func:`sign_bytes` for such bodies (tested).
    """
    return _SIGN_PREFIX + msgpack.packb([chain_id, kind, height, view, body], use_bin_type=True)


def _verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """libsodium's ``crypto_sign_verify``: the signature, then the message, checked against the key."""
    try:
        crypto_sign_open(signature + message, public_key)
    except (BadSignatureError, CryptoError, ValueError, TypeError):
        return False
    return True


def verify_signature(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """True iff ``signature`` is a valid Ed25519 signature of ``message``; never raises on bad input."""
    if type(signature) is not bytes or len(signature) != SIGNATURE_BYTES:
        return False
    if type(public_key) is not bytes or len(public_key) != PUBLIC_KEY_BYTES or type(message) is not bytes:
        return False
    return _verify(public_key, signature, message)


class PublicKeyCache:
    """Members' public keys by peer id.

    Only keys handed in by :meth:`add` are known: membership is decided by whoever fills the cache
    (the genesis), never by the peer id a message claims.

    ``memo_max > 0`` remembers that many *successful* verifications, keyed by
    ``(signer, signature, SHA-256(message))``: verification is a pure function, so a signature checked
    once need not be checked again (a block's update signatures are seen by every validator and again
    in the decided block). Failures are never remembered. Off by default.
    """

    __slots__ = ("_keys", "_memo", "_memo_max")

    def __init__(self, *, memo_max: int = 0) -> None:
        self._keys: dict[str, bytes] = {}
        self._memo: dict[tuple[str, bytes, bytes], None] = {}
        self._memo_max = memo_max

    def add(self, peer_id: str, public_key: bytes) -> None:
        if type(public_key) is not bytes or len(public_key) != PUBLIC_KEY_BYTES:
            raise ValueError(f"an Ed25519 public key is {PUBLIC_KEY_BYTES} bytes")
        self._keys[peer_id] = public_key

    def __contains__(self, peer_id: object) -> bool:
        return peer_id in self._keys

    def verify(self, signer: str, signature: bytes, message: bytes, *, what: str) -> None:
        """Raise :class:`SignatureError` unless ``signer`` is known and ``signature`` verifies."""
        key = self._keys.get(signer)
        if key is None:
            raise SignatureError(f"{what}: signer {signer!r:.60} is not a member")
        if type(signature) is not bytes or len(signature) != SIGNATURE_BYTES:
            raise SignatureError(f"{what}: signature of {signer} is not {SIGNATURE_BYTES} bytes")
        memo_key = None
        if self._memo_max:
            memo_key = (signer, signature, hashlib.sha256(message).digest())
            if memo_key in self._memo:
                return
        if not _verify(key, signature, message):
            raise SignatureError(f"{what}: invalid signature by {signer}")
        if memo_key is not None:
            if len(self._memo) >= self._memo_max:
                self._memo.pop(next(iter(self._memo)))  # oldest first (insertion order)
            self._memo[memo_key] = None


@dataclass(frozen=True, slots=True)
class KeyPair:
    """An Ed25519 identity. ``seed`` is the 32-byte private seed (keep it secret)."""

    seed: bytes
    public_key: bytes
    peer_id: str

    @classmethod
    def from_seed(cls, seed: bytes) -> KeyPair:
        if type(seed) is not bytes or len(seed) != SEED_BYTES:
            raise ValueError(f"an Ed25519 seed is {SEED_BYTES} bytes")
        pk, _ = crypto_sign_seed_keypair(seed)
        return cls(seed, pk, peer_id_from_public_key(pk))

    @classmethod
    def derive(cls, label: str) -> KeyPair:
        """A deterministic key for tests and simulations: seed = SHA-256("concilium-test-key" ‖ label).

        Never use derived keys outside simulations; ``concilium keygen`` draws from the OS.
        """
        return cls.from_seed(hash_tagged(b"concilium-test-key", label.encode()))

    def sign(self, message: bytes) -> bytes:
        # libsodium's secret key is seed ‖ public key; crypto_sign returns signature ‖ message
        return crypto_sign(message, self.seed + self.public_key)[:SIGNATURE_BYTES]

    def __repr__(self) -> str:  # never print the seed
        return f"KeyPair(peer_id={self.peer_id!r})"
