"""Canonical encoding: round trips, strictness, and hostile bytes only ever raising DecodeError."""

import math
import struct
from dataclasses import dataclass

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import (
    Block, DecodeError, Genesis, LedgerError, Payload, Record, UpdateCommitment, decode, encode, encode_large, record,
)
from ledger._encoding import _MARKER, LARGE_BYTES
from ledger.testing import LedgerDemo

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.binary(max_size=40)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5).map(tuple) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


def _norm(v):
    """Decoded form of a value: arrays are tuples, maps are dicts with sorted keys."""
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x) for x in v)
    if isinstance(v, dict):
        return {k: _norm(v[k]) for k in sorted(v)}
    return v


@given(values)
@settings(max_examples=300, deadline=None)
def test_round_trip(v):
    data = encode(v)
    back = decode(data)
    assert back == _norm(v)
    assert encode(back) == data  # canonical: the encoding is a function of the value


@given(st.dictionaries(st.text(max_size=6), st.integers(min_value=-(2**63), max_value=2**63), min_size=2, max_size=6))
def test_key_order_does_not_change_bytes(d):
    reversed_d = dict(reversed(list(d.items())))
    assert encode(d) == encode(reversed_d)


@given(st.binary(max_size=300))
@settings(max_examples=500, deadline=None)
def test_random_bytes_raise_only_decode_error(data):
    try:
        decode(data)
    except DecodeError:
        pass


@given(values, st.data())
@settings(max_examples=200, deadline=None)
def test_truncated_bytes_raise_decode_error(v, data):
    raw = encode(v)
    if len(raw) < 2:
        return
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    with pytest.raises(DecodeError):
        decode(raw[:cut])


def _block_bytes() -> bytes:
    block, _ = LedgerDemo(members=5, committee_size=4, updates_per_block=3, floats_per_update=8).next_block()
    return block.encode()


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_mutated_block_bytes_raise_only_ledger_errors(data):
    raw = bytearray(_BLOCK)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        i = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        raw[i] = data.draw(st.integers(min_value=0, max_value=255))
    try:
        Block.decode(bytes(raw))
    except LedgerError:
        pass


@given(st.binary(max_size=400))
@settings(max_examples=300, deadline=None)
def test_random_bytes_as_typed_records_raise_only_ledger_errors(data):
    for cls in (Block, Genesis, Payload):
        try:
            cls.decode(data)
        except LedgerError:
            pass


_BLOCK = _block_bytes()


@pytest.mark.parametrize(
    "raw, why",
    [
        (b"\x82\xa1b\x01\xa1a\x02", "unsorted keys"),
        (b"\x82\xa1a\x01\xa1a\x02", "duplicate keys"),
        (b"\xcc\x05", "non-minimal integer"),
        (b"\xca" + struct.pack(">f", 1.5), "float32"),
        (b"\x01\x02", "trailing bytes"),
        (b"\xd4\x05\x00", "ext type"),
        (b"\xd6\xff\x00\x00\x00\x00", "timestamp ext"),
        (b"\xa2\xff\xfe", "invalid UTF-8"),
        (b"\x81\x01\x02", "integer map key"),
        (b"\x81\xc4\x01a\x02", "bytes map key"),
        (b"\xcb" + struct.pack(">d", math.nan), "NaN"),
        (b"\xcb" + struct.pack(">d", math.inf), "infinity"),
        (b"\x91" * 40 + b"\x00", "too deep"),
        (b"", "empty"),
    ],
)
def test_non_canonical_rejected(raw, why):
    with pytest.raises(DecodeError):
        decode(raw)


def test_size_limit():
    with pytest.raises(DecodeError, match="exceeds"):
        decode(encode(b"x" * 100), bytes_max=50)


def test_encode_rejects_non_canonical_values():
    for bad in (math.nan, math.inf, {1: 2}, {"a": object()}, 2**64, -(2**63) - 1, {"a": set()}):
        with pytest.raises((TypeError, ValueError)):
            encode(bad)


def test_floats_always_float64_and_lists_equal_tuples():
    assert encode(1.5) == msgpack.packb(1.5, use_single_float=False)
    assert encode([1, 2]) == encode((1, 2))


# Any msgpack a peer could send: unsorted and non-str keys, NaN/Inf, float32, wide integer encodings, deep nests.
_wire_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=6)
    | st.binary(max_size=8)
)
_wire_values = st.recursive(
    _wire_scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=3) | st.integers(-3, 3) | st.binary(max_size=2), inner, max_size=4),
    max_leaves=25,
)


def _reference_accepts(data: bytes) -> bool:
    """The definition ``decode`` implements: the bytes are exactly ``encode`` of what they unpack to."""
    try:
        value = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False, ext_hook=lambda c, d: None)
        return encode(value) == data
    except (TypeError, ValueError, OverflowError):
        return False


@given(_wire_values, st.booleans(), st.booleans())
@settings(max_examples=400, deadline=None)
def test_decode_accepts_exactly_the_canonical_encodings(v, single_float, sort_keys):
    # decode checks the unpacked tree instead of re-encoding a rebuilt copy: same verdict as the definition
    if sort_keys and isinstance(v, dict) and all(type(k) is str for k in v):
        v = {k: v[k] for k in sorted(v)}
    try:
        data = msgpack.packb(v, use_bin_type=True, use_single_float=single_float)
    except (TypeError, ValueError, OverflowError):
        return
    try:
        back = decode(data)
    except DecodeError:
        assert not _reference_accepts(data), data
    else:
        assert _reference_accepts(data), data
        assert encode(back) == data


def test_decode_nesting_limit_matches_encode():
    ok, deep = 0, 0
    for _ in range(32):
        ok = [ok]
    for _ in range(33):
        deep = [deep]
    assert decode(encode(ok)) == _norm(ok)
    with pytest.raises(ValueError):
        encode(deep)
    with pytest.raises(DecodeError, match="nesting"):
        decode(msgpack.packb(deep))


@given(values, st.lists(st.sampled_from([LARGE_BYTES - 1, LARGE_BYTES, LARGE_BYTES + 1, 3 << 20]), max_size=3),
       st.data())
@settings(max_examples=40, deadline=None)
def test_encode_large_gives_the_same_bytes_as_encode(v, sizes, data):
    """Large byte strings spliced into the packed value (``encode_large``): the bytes of ``encode``, wherever the
    large strings sit, at the size boundary too, whatever else the value holds."""
    bigs = [data.draw(st.binary(min_size=16, max_size=16)) * (n // 16) + b"z" * (n % 16) for n in sizes]
    value = {"v": v, "big": tuple(bigs), "first": bigs[0] if bigs else b""}
    assert encode_large(value) == encode(value)


def test_encode_large_falls_back_when_its_marker_occurs_in_the_value():
    """A value that holds the very marker bytes (a collision by chance, or a peer's choice) packs whole: the same
    bytes as ``encode``, not a splice at the wrong place."""
    big = b"\x01" * LARGE_BYTES
    marker_field = _MARKER + (0).to_bytes(4, "big")
    for value in ({"a": marker_field, "b": big}, {"a": big, "b": marker_field}, (big, marker_field, big)):
        assert encode_large(value) == encode(value)


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class _Packet(Record):  # (as a node's update packet: a signed commitment and its blob)
    commitment: UpdateCommitment
    blob: bytes
    more: tuple[bytes, ...] = ()


def test_encode_large_of_a_record_is_its_encoding():
    sig = b"\x07" * 64
    packet = _Packet(commitment=UpdateCommitment(peer="p", fl_round=1, digest=b"\x02" * 32, n_samples=3, signature=sig),
                     blob=b"\x03" * (2 * LARGE_BYTES + 5), more=(b"\x04" * LARGE_BYTES, b"small"))
    assert encode_large(packet) == packet.encode()
    assert _Packet.decode(encode_large(packet), bytes_max=8 * LARGE_BYTES) == packet
