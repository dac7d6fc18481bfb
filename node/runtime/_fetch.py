"""Blobs fetched by digest, in chunks: the records of the ``/concilium/<chain-id>/fetch/1`` protocol.

A node that misses a blob (the previous model after a restart, the update blobs of a round it did not
validate, a strategy state) asks a peer for it by its SHA-256 digest. The asker opens a fetch stream and
writes :class:`BlobRequest` frames (digest, offset, length ≤ :data:`CHUNK_BYTES`), keeping up to
:data:`WINDOW` requests in flight; the server answers each with one :class:`BlobChunk` frame in order: the
blob's total size and the bytes ``[offset, offset + length)`` (clipped at the end), or ``total = 0`` and no
bytes when it does not hold the blob. The asker checks every chunk against its request and the first
chunk's total, refuses a total above its cap before it allocates anything, and checks the whole blob's
digest before anyone uses it (:meth:`node.runtime._transport.Transport.fetch`). Frames use the transport's
4-byte length prefix; both records are canonical msgpack with a strict decoder (``ledger.record``).

Why chunks rather than one frame per blob: a request names a range, so a fetch that fails half-way (the
server restarted, the connection dropped) can continue from another peer, no frame holds more than
``CHUNK_BYTES`` (the reader's cap is small, a slow or silent server is caught by the deadline of one chunk,
not of the whole blob), and a server never encodes a whole large blob into one message.

A server builds a chunk's frame with :func:`encode_chunk`, the bytes of ``BlobChunk.encode()`` with the piece
of the blob copied once, straight into the frame (``BlobChunk`` would need that piece as ``bytes`` of its own,
and msgpack copies it again).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ledger import Budget, record
from node.runtime._frames import encode_header

__all__ = ["CHUNK_BUDGET", "CHUNK_BYTES", "REQUEST_BUDGET", "REQUEST_FRAME_MAX", "RESPONSE_FRAME_MAX", "WINDOW",
           "BlobChunk", "BlobRequest", "encode_chunk"]  # fmt: skip

CHUNK_BYTES = 1 << 20
"""Bytes per chunk (and the most a request may ask for)."""
WINDOW = 4
"""Requests in flight per fetch stream: the server always has the next chunk to send."""
REQUEST_FRAME_MAX = 128
RESPONSE_FRAME_MAX = CHUNK_BYTES + 128
"""Frame caps of the fetch protocol: a request (a digest and two integers) and one chunk with its fields."""
REQUEST_BUDGET = Budget(items=7, cost=1024)
CHUNK_BUDGET = Budget(items=9, cost=CHUNK_BYTES + 1024)
"""What decoding a request or a chunk from a peer may build (``decode(..., budget=)``: a map of 3 or 4 fields;
``ledger.scan``'s estimate of the objects is 522 bytes for a request, the data + 645 for a chunk at most). A
bounded decode also checks the canonical form by a scan of the bytes rather than by encoding the value again,
which for a 1 MiB chunk took 1.2 ms (a third of a copy of its bytes) against 0.03 ms."""
_TOTAL_MAX = (1 << 32) - 1


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class BlobRequest:
    """Asks for ``length`` bytes of the blob ``digest`` from ``offset`` on."""

    digest: bytes
    offset: int
    length: int

    def __post_init__(self) -> None:
        if len(self.digest) != 32:
            raise ValueError("a digest is 32 bytes")
        if not 0 <= self.offset <= _TOTAL_MAX:
            raise ValueError(f"offset {self.offset} out of range")
        if not 1 <= self.length <= CHUNK_BYTES:
            raise ValueError(f"length must be 1 to {CHUNK_BYTES}, got {self.length}")


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class BlobChunk:
    """The answer to a :class:`BlobRequest`: ``total = 0`` and no data when the server does not hold the blob."""

    digest: bytes
    offset: int
    total: int
    data: bytes

    def __post_init__(self) -> None:
        if len(self.digest) != 32:
            raise ValueError("a digest is 32 bytes")
        if not 0 <= self.total <= _TOTAL_MAX or not 0 <= self.offset:
            raise ValueError("total or offset out of range")
        if len(self.data) > CHUNK_BYTES:
            raise ValueError(f"a chunk holds at most {CHUNK_BYTES} bytes")
        if self.total == 0 and self.data:
            raise ValueError("a 'not held' answer carries no data")
        if self.total and self.offset + len(self.data) > self.total:
            raise ValueError("the chunk ends past the blob")


_EMPTY_DATA = b"\x84\xa4data\xc4\x00"
"""How ``BlobChunk.encode()`` begins when ``data`` is empty: a map of 4 fields, keys sorted, ``data`` first."""


def encode_chunk(*, digest: bytes, offset: int, total: int, data: memoryview, framed: bool = False) -> bytes:
    """``BlobChunk(digest=digest, offset=offset, total=total, data=bytes(data)).encode()``, with ``data`` (a view
    of the blob, not empty) copied once, straight into the result; ``framed``: after its 4-byte frame header.
    The same checks as ``BlobChunk`` apply, and the bytes are its encoding (tested)."""
    template = BlobChunk(digest=digest, offset=offset, total=total, data=b"").encode()  # type: ignore[attr-defined]
    if not template.startswith(_EMPTY_DATA):
        raise AssertionError("BlobChunk's encoding changed; encode_chunk must follow it")
    n = len(data)
    if not 0 < n <= CHUNK_BYTES or offset + n > total:
        raise ValueError(f"a chunk holds 1 to {CHUNK_BYTES} bytes and ends within the blob")
    bin_header = struct.pack(">BB", 0xC4, n) if n <= 0xFF else struct.pack(">BH", 0xC5, n) if n <= 0xFFFF else None
    head = _EMPTY_DATA[:-2] + (bin_header or struct.pack(">BI", 0xC6, n))  # msgpack bin 8, 16 or 32
    tail = template[len(_EMPTY_DATA) :]
    header = encode_header(len(head) + n + len(tail)) if framed else b""
    return b"".join((header, head, data, tail))
