"""The copy-saving pieces of the fetch protocol and the frame reader: ``encode_chunk`` writes exactly the bytes of
``BlobChunk.encode()``, and a ``blank_buffer`` filled in order hands out exactly what was written."""

from __future__ import annotations

import hashlib
import os

import pytest

import msgpack

from ledger import DecodeError
from node.runtime._fetch import (CHUNK_BUDGET, CHUNK_BYTES, REQUEST_BUDGET, RESPONSE_FRAME_MAX, BlobChunk, BlobRequest,
                                 encode_chunk)  # fmt: skip
from node.runtime._frames import HEADER_BYTES, HUGE_PAGES_MIN, blank_buffer, encode_header


@pytest.mark.parametrize("total", [1, 255, 256, 65_535, 65_536, 65_537, CHUNK_BYTES, CHUNK_BYTES + 1, 3 * CHUNK_BYTES])
def test_encode_chunk_is_the_record_encoding_with_its_frame_header(total: int) -> None:
    blob = os.urandom(total)
    digest = hashlib.sha256(blob).digest()
    view = memoryview(blob)
    for offset in sorted({0, total // 2, total - 1, min(CHUNK_BYTES, total - 1)}):
        end = min(total, offset + CHUNK_BYTES)
        record = BlobChunk(digest=digest, offset=offset, total=total, data=blob[offset:end])
        assert encode_chunk(digest=digest, offset=offset, total=total, data=view[offset:end]) == record.encode()
        framed = encode_chunk(digest=digest, offset=offset, total=total, data=view[offset:end], framed=True)
        assert framed == encode_header(len(record.encode())) + record.encode()
        assert len(framed) - HEADER_BYTES <= RESPONSE_FRAME_MAX
        assert BlobChunk.decode(framed[HEADER_BYTES:], bytes_max=RESPONSE_FRAME_MAX) == record


def test_encode_chunk_refuses_what_blob_chunk_refuses() -> None:
    blob = memoryview(os.urandom(CHUNK_BYTES + 10))
    digest = bytes(32)
    with pytest.raises(ValueError):
        encode_chunk(digest=digest, offset=0, total=len(blob), data=blob)  # above CHUNK_BYTES
    with pytest.raises(ValueError):
        encode_chunk(digest=digest, offset=0, total=len(blob), data=blob[:0])  # empty
    with pytest.raises(ValueError):
        encode_chunk(digest=digest, offset=20, total=25, data=blob[:10])  # ends past the blob
    with pytest.raises(ValueError):
        encode_chunk(digest=b"short", offset=0, total=10, data=blob[:10])
    forged = encode_chunk(digest=digest, offset=0, total=10, data=blob[:10]).replace(b"\xa5total\x0a", b"\xa5total\x05")
    with pytest.raises(DecodeError):  # and the strict decoder still refuses a chunk past its blob
        BlobChunk.decode(forged)


def test_the_largest_request_and_chunk_decode_within_their_budgets_and_a_larger_chunk_does_not() -> None:
    digest, top = bytes(range(32)), (1 << 32) - 1
    request = BlobRequest(digest=digest, offset=top, length=CHUNK_BYTES)
    assert BlobRequest.decode(request.encode(), budget=REQUEST_BUDGET) == request
    data = os.urandom(CHUNK_BYTES)
    chunk = BlobChunk(digest=digest, offset=top - CHUNK_BYTES, total=top, data=data)
    assert BlobChunk.decode(chunk.encode(), bytes_max=RESPONSE_FRAME_MAX, budget=CHUNK_BUDGET) == chunk
    oversized = msgpack.packb({"data": data + bytes(2048), "digest": digest, "offset": 0, "total": top})
    with pytest.raises(DecodeError, match="budget"):  # refused by the scan, before anything is built
        BlobChunk.decode(oversized, bytes_max=RESPONSE_FRAME_MAX + 4096, budget=CHUNK_BUDGET)
    extra = msgpack.packb({"data": b"x", "digest": digest, "more": 1, "offset": 0, "total": 1})
    with pytest.raises(DecodeError):
        BlobChunk.decode(extra, budget=CHUNK_BUDGET)


@pytest.mark.parametrize("size", [1, 4096, HUGE_PAGES_MIN - 1, HUGE_PAGES_MIN, HUGE_PAGES_MIN + (3 << 20) + 7])
def test_a_blank_buffer_filled_in_order_hands_out_what_was_written_without_a_copy(size: int) -> None:
    data = os.urandom(size)
    buf = blank_buffer(size)
    for start in range(0, size, 300_001):
        buf.write(data[start : start + 300_001])
    out = buf.getvalue()
    assert out == data
    assert buf.getvalue() is out  # the buffer's own object, handed out as is
