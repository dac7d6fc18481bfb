"""Length-prefixed frames on a libp2p stream: a 4-byte big-endian length, then that many payload bytes.

The reader enforces the cap of its protocol *before* it reads (or allocates for) the payload, reads with an
explicit ``stream.read(remaining)`` loop (py-libp2p 0.8.1's ``read_exactly`` gives up after 100 partial
reads, i.e. around 7 MB), and runs every read under a deadline: the header under the idle timeout, the
payload under ``read_base_s + size / read_bytes_per_s_min``. Each way a frame can be bad has one
:class:`FrameError` reason; the transport turns reasons into counters and the peer's bad-frame budget.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Protocol

import trio
from libp2p.exceptions import BaseLibp2pError

__all__ = ["HEADER_BYTES", "LENGTH_MAX", "FrameError", "FrameStream", "encode_header", "read_frame"]

HEADER_BYTES = 4
LENGTH_MAX = (1 << 32) - 1
_HEADER = struct.Struct(">I")
# what a libp2p stream raises when it stops delivering bytes; anything else is a bug and propagates
_STREAM_ENDED = (BaseLibp2pError, OSError, trio.BrokenResourceError, trio.ClosedResourceError)


class FrameStream(Protocol):
    """The part of ``libp2p.network.stream.net_stream.NetStream`` that framing needs."""

    async def read(self, n: int | None = None) -> bytes: ...

    async def write(self, data: bytes) -> None: ...


class FrameError(Exception):
    """A frame the peer sent is bad. ``reason`` is one of :data:`REASONS`."""

    REASONS = ("oversized", "empty", "truncated", "header_timeout", "payload_timeout", "malformed", "over_budget")

    def __init__(self, reason: str, detail: str = "") -> None:
        assert reason in self.REASONS, reason
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class _EndOfStream(Exception):
    """The stream ended (EOF, reset or connection loss) before ``n`` bytes arrived."""

    def __init__(self, received: int) -> None:
        super().__init__(f"stream ended after {received} bytes")
        self.received = received


def encode_header(size: int) -> bytes:
    if not 0 <= size <= LENGTH_MAX:
        raise ValueError(f"a frame holds at most {LENGTH_MAX} bytes, not {size}")
    return _HEADER.pack(size)


async def _read_exactly(stream: FrameStream, n: int) -> bytes:
    """``n`` bytes; a large payload comes in many chunks, copied one by one into a buffer of its size, so reading a
    frame holds its size once (joining a list of chunks would hold it twice at the end: the chunks and the join)."""
    buf: io.BytesIO | None = None
    remaining = n
    while remaining:
        try:
            chunk = await stream.read(remaining)
        except _STREAM_ENDED as exc:  # StreamEOF, StreamReset, StreamError, connection closed: all "ended"
            raise _EndOfStream(n - remaining) from exc
        if not chunk:
            raise _EndOfStream(n - remaining)
        if len(chunk) > remaining:  # never seen; a library change must not desynchronise the framing
            raise _EndOfStream(n - remaining)
        if remaining == n and len(chunk) == n:
            return chunk
        if buf is None:
            # bytes(n) is zero pages not yet touched (calloc); the only reference is the buffer's, so CPython writes
            # the chunks in place and getvalue() hands the same object out, no copy
            buf = io.BytesIO(bytes(n))
        buf.write(chunk)
        remaining -= len(chunk)
    return buf.getvalue() if buf is not None else b""


async def read_frame(
    stream: FrameStream,
    *,
    frame_max: int,
    header_timeout_s: float,
    read_base_s: float,
    read_bytes_per_s_min: int,
    admit: Callable[[int], bool] | None = None,
) -> bytes | None:
    """Read one frame; ``None`` when the stream ended cleanly at a frame boundary.

    Raises :class:`FrameError` for a bad frame: a length above ``frame_max`` (rejected before any payload
    byte is read), a zero length, a length ``admit`` refuses (the sender's byte budget; called once per
    frame, before the payload is read), a stream that ends mid-frame, no header within
    ``header_timeout_s``, or a payload slower than its deadline.
    """
    with trio.move_on_after(header_timeout_s) as header_scope:
        try:
            header = await _read_exactly(stream, HEADER_BYTES)
        except _EndOfStream as end:
            if end.received == 0:
                return None
            raise FrameError("truncated", f"header cut after {end.received} bytes") from None
    if header_scope.cancelled_caught:
        raise FrameError("header_timeout", f"no frame header within {header_timeout_s:g} s")
    (size,) = _HEADER.unpack(header)
    if size > frame_max:
        raise FrameError("oversized", f"{size} bytes announced, cap {frame_max}")
    if size == 0:
        raise FrameError("empty")
    if admit is not None and not admit(size):
        raise FrameError("over_budget", f"{size} bytes announced beyond the sender's budget")
    deadline_s = read_base_s + size / read_bytes_per_s_min
    with trio.move_on_after(deadline_s):
        try:
            return await _read_exactly(stream, size)
        except _EndOfStream as end:
            raise FrameError("truncated", f"payload cut after {end.received} of {size} bytes") from None
    raise FrameError("payload_timeout", f"{size} bytes not read within {deadline_s:.1f} s")
