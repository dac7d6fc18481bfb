"""Every "malformed encoding" error names a reason: msgpack raises a few errors with an empty message."""

import random

import pytest

from ledger import DecodeError
from ledger._encoding import DEPTH_MAX, decode, encode


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\xc1", "a reserved type byte (0xc1)"),  # msgpack's FormatError, no message
        (b"\x92\x01\xc1", "a reserved type byte (0xc1)"),
        (b"\x91" * 5000 + b"\x01", f"nesting deeper than {DEPTH_MAX}"),  # msgpack's StackError, no message
        (b"\x92\x01", "incomplete input"),
        (b"\xd4\x05\x00", "msgpack ext type 5 is not allowed"),
    ],
)
def test_malformed_encoding_names_the_reason(data, reason):
    with pytest.raises(DecodeError) as caught:
        decode(data)
    assert str(caught.value).startswith("malformed encoding: ") and reason in str(caught.value)


def test_no_decode_error_message_is_empty_or_ends_without_a_reason():
    """Seeded fuzz: random bytes and mutations of a real encoding; every message ends in words."""
    rng = random.Random(13)
    base = encode({"a": [1, 2, b"x" * 40, "s" * 40, {"k": -5}], "b": 2**40, "c": 1.5, "d": [[[[1]]]]})
    seen = set()
    for i in range(20000):
        if i % 2:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 10)))
        else:
            b = bytearray(base)
            b[rng.randrange(len(b))] = rng.randrange(256)
            data = bytes(b[: rng.randrange(1, len(b) + 1)])
        try:
            decode(data)
        except DecodeError as e:
            text = str(e)
            assert text.strip() and not text.rstrip().endswith(":"), repr(text)
            if text.startswith("malformed encoding"):
                seen.add(text.removeprefix("malformed encoding: ")[:12])
                assert text.removeprefix("malformed encoding: ").strip(), repr(text)
    assert {"a reserved t", "Unpack faile"} <= seen  # the silent msgpack errors were met, and named
