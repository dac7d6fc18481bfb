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

A server writes a chunk's frame in three parts around the piece of the blob, :func:`chunk_frame`'s head and tail,
without copying the piece into a frame (``BlobChunk`` would need that piece as ``bytes`` of its own, and msgpack
would copy it again; the muxer slices the piece into its frames in any case). An asker decodes only the first answer (it tells the total); it knows every byte of a
later answer but the data (:func:`chunk_frame`), so it reads the data straight into the blob's buffer and compares
the rest, and it hashes the whole blob once, in a worker thread, at the end.

Why 4 MiB chunks: each chunk costs a request, a response header and a wake-up on both sides, about 0.7 ms of CPU
on this 2-core machine (a 50 MB fetch, both ends in one process: 400 ms of CPU with 256 KiB chunks, 290 with
1 MiB, 260 with 4 MiB, no less with 8 or 16 MiB), and the asker never holds a chunk apart from the blob, so a
larger chunk costs no memory; at 4 requests in flight, 16 MiB are on their way, more than a 1 Gbit link with
100 ms of round trip holds.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ledger import Budget, Record, record

__all__ = ["CHUNK_BUDGET", "CHUNK_BYTES", "REQUEST_BUDGET", "REQUEST_FRAME_MAX", "RESPONSE_FRAME_MAX", "WINDOW",
           "BlobChunk", "BlobRequest", "chunk_frame"]  # fmt: skip

CHUNK_BYTES = 4 << 20
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
class BlobRequest(Record):
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
class BlobChunk(Record):
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


def chunk_frame(*, digest: bytes, offset: int, total: int, size: int) -> tuple[bytes, bytes]:
    """``(head, tail)``: ``BlobChunk(digest=digest, offset=offset, total=total, data=d).encode()`` is
    ``head + d + tail`` for every ``d`` of ``size`` bytes (1 to :data:`CHUNK_BYTES`, ending within the blob). A
    canonical encoding is unique, so an asker that knows what it asked for knows every byte of the answer but the
    data, and checks them by comparison instead of decoding (:meth:`node.runtime._transport.Transport.fetch`)."""
    template = BlobChunk(digest=digest, offset=offset, total=total, data=b"").encode()
    if not template.startswith(_EMPTY_DATA):
        raise AssertionError("BlobChunk's encoding changed; chunk_frame must follow it")
    if not 0 < size <= CHUNK_BYTES or offset + size > total:
        raise ValueError(f"a chunk holds 1 to {CHUNK_BYTES} bytes and ends within the blob")
    bin_header = (struct.pack(">BB", 0xC4, size) if size <= 0xFF else struct.pack(">BH", 0xC5, size)
                  if size <= 0xFFFF else struct.pack(">BI", 0xC6, size))  # msgpack bin 8, 16 or 32  # fmt: skip
    return _EMPTY_DATA[:-2] + bin_header, template[len(_EMPTY_DATA) :]

