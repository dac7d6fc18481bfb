"""The copy-saving pieces of the fetch protocol and the frame reader: ``chunk_frame``'s head and tail around a chunk's
data are exactly the bytes of ``BlobChunk.encode()``, ``read_frame_into`` reads such a frame's data piece by piece
and refuses any other frame, and a ``blank_buffer`` filled in order hands out exactly what was written."""

from __future__ import annotations

import hashlib
import os

import pytest
import trio

import msgpack

from ledger import DecodeError
from node.runtime._fetch import (CHUNK_BUDGET, CHUNK_BYTES, REQUEST_BUDGET, RESPONSE_FRAME_MAX, BlobChunk, BlobRequest,
                                 chunk_frame)  # fmt: skip
from node.runtime._frames import HEADER_BYTES, HUGE_PAGES_MIN, FrameError, blank_buffer, encode_header, read_frame_into


def encoded(*, digest: bytes, offset: int, total: int, data: bytes) -> bytes:
    """A chunk's frame as the server writes it: header and head, the data, tail (``chunk_frame``)."""
    head, tail = chunk_frame(digest=digest, offset=offset, total=total, size=len(data))
    return encode_header(len(head) + len(data) + len(tail)) + head + data + tail


@pytest.mark.parametrize("total", [1, 255, 256, 65_535, 65_536, 65_537, CHUNK_BYTES, CHUNK_BYTES + 1, 3 * CHUNK_BYTES])
def test_a_chunk_frame_is_the_record_encoding_with_its_frame_header(total: int) -> None:
    blob = os.urandom(total)
    digest = hashlib.sha256(blob).digest()
    for offset in sorted({0, total // 2, total - 1, min(CHUNK_BYTES, total - 1)}):
        end = min(total, offset + CHUNK_BYTES)
        record = BlobChunk(digest=digest, offset=offset, total=total, data=blob[offset:end])
        framed = encoded(digest=digest, offset=offset, total=total, data=blob[offset:end])
        assert framed == encode_header(len(record.encode())) + record.encode()
        assert len(framed) - HEADER_BYTES <= RESPONSE_FRAME_MAX
        assert BlobChunk.decode(framed[HEADER_BYTES:], bytes_max=RESPONSE_FRAME_MAX) == record


def test_chunk_frame_refuses_what_blob_chunk_refuses() -> None:
    digest = bytes(32)
    for bad in (dict(offset=0, total=CHUNK_BYTES + 10, size=CHUNK_BYTES + 1),  # above CHUNK_BYTES
                dict(offset=0, total=10, size=0),  # empty
                dict(offset=20, total=25, size=10)):  # ends past the blob  # fmt: skip
        with pytest.raises(ValueError):
            chunk_frame(digest=digest, **bad)
    with pytest.raises(ValueError):
        chunk_frame(digest=b"short", offset=0, total=10, size=10)
    forged = encoded(digest=digest, offset=0, total=10, data=bytes(10)).replace(b"\xa5total\x0a", b"\xa5total\x05")
    with pytest.raises(DecodeError):  # and the strict decoder still refuses a chunk past its blob
        BlobChunk.decode(forged[HEADER_BYTES:])


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


class PiecesStream:
    """The bytes of a stream, handed out in pieces of at most ``piece`` bytes (a libp2p stream's reads return what
    its buffer holds), then the end of the stream."""

    def __init__(self, data: bytes, piece: int) -> None:
        self.data, self.piece, self.at = data, piece, 0

    async def read(self, n: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        take = min(self.piece, len(self.data) - self.at, n if n is not None else len(self.data))
        out = self.data[self.at : self.at + take]
        self.at += take
        return out

    async def write(self, data: bytes) -> None:
        raise AssertionError("the reader never writes")


def _read_into(data: bytes, piece: int, *, digest: bytes, offset: int, total: int, size: int) -> list[bytes]:
    head, tail = chunk_frame(digest=digest, offset=offset, total=total, size=size)
    pieces: list[bytes] = []

    async def main() -> None:
        await read_frame_into(PiecesStream(data, piece), pieces.append, head=head, body_size=size, tail=tail,
                              header_timeout_s=5, read_base_s=5, read_bytes_per_s_min=1 << 20)  # fmt: skip

    trio.run(main)
    return pieces


@pytest.mark.parametrize("piece", [999, 65_536, CHUNK_BYTES + 64])
def test_a_known_chunk_frame_is_read_with_its_data_handed_out_piece_by_piece(piece: int) -> None:
    blob = os.urandom(CHUNK_BYTES + 300)
    digest = hashlib.sha256(blob).digest()
    for offset, size in ((0, CHUNK_BYTES), (CHUNK_BYTES, 300)):
        frame = encoded(digest=digest, offset=offset, total=len(blob), data=blob[offset : offset + size])
        pieces = _read_into(frame, piece, digest=digest, offset=offset, total=len(blob), size=size)
        assert b"".join(pieces) == blob[offset : offset + size]
        assert all(len(p) <= piece for p in pieces)
        head, tail = chunk_frame(digest=digest, offset=offset, total=len(blob), size=size)
        assert frame == encode_header(len(head) + size + len(tail)) + head + blob[offset : offset + size] + tail


def test_a_chunk_frame_other_than_expected_is_malformed_or_truncated() -> None:
    blob = os.urandom(5000)
    digest = hashlib.sha256(blob).digest()
    good = dict(digest=digest, offset=1000, total=len(blob), size=2000)

    def framed(**kw: object) -> bytes:
        args = {**good, **kw}
        size = int(args.pop("size"))  # type: ignore[call-overload]
        start = int(args["offset"])  # type: ignore[call-overload]
        record = BlobChunk(data=blob[start : start + size], **args).encode()  # type: ignore[arg-type]
        return encode_header(len(record)) + record

    assert b"".join(_read_into(framed(), 100, **good)) == blob[1000:3000]
    for bad in (framed(offset=1001), framed(total=4999), framed(digest=bytes(32)), framed(size=1999)):
        with pytest.raises(FrameError) as caught:
            _read_into(bad, 100, **good)
        assert caught.value.reason == "malformed"
    with pytest.raises(FrameError) as caught:  # the same length, other bytes where the head should be
        _read_into(framed()[:5] + b"\xff" + framed()[6:], 100, **good)
    assert caught.value.reason == "malformed"
    for cut in (0, 2, 30, len(framed()) - 1):
        with pytest.raises(FrameError) as caught:
            _read_into(framed()[:cut], 100, **good)
        assert caught.value.reason == "truncated"
