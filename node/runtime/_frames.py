"""Length-prefixed frames on a libp2p stream: a 4-byte big-endian length, then that many payload bytes.

The reader enforces the cap of its protocol *before* it reads (or allocates for) the payload, reads with an
explicit ``stream.read(remaining)`` loop (py-libp2p 0.8.1's ``read_exactly`` gives up after 100 partial
reads, i.e. around 7 MB), and runs every read under a deadline: the header under the idle timeout, the
payload under ``read_base_s + size / read_bytes_per_s_min``. Each way a frame can be bad has one
:class:`FrameError` reason; the transport turns reasons into counters and the peer's bad-frame budget.
"""

from __future__ import annotations

import ctypes
import io
import struct
import sys
from collections.abc import Callable
from typing import Protocol

import trio
from libp2p.exceptions import BaseLibp2pError

__all__ = ["HEADER_BYTES", "LENGTH_MAX", "FrameError", "FrameStream", "blank_buffer", "encode_header", "read_frame",
           "read_frame_into"]

HEADER_BYTES = 4
LENGTH_MAX = (1 << 32) - 1
JOIN_MAX = 8 << 20
"""Payloads up to this size are joined from their chunks; larger ones are assembled in place (:func:`_read_exactly`)."""
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


def blank_buffer(size: int) -> io.BytesIO:
    """A buffer of ``size`` zero bytes to fill with ``write`` (in order) and hand out with ``getvalue()``, no copy.

    ``bytes(size)`` is zero pages not yet touched (calloc), and the buffer holds the only reference, so CPython
    writes into that object in place, and ``getvalue()`` returns the same object once it is full: an object of
    ``size`` bytes is assembled with one copy of each piece and held once (a ``bytearray`` would be zero-filled
    first and copied into ``bytes`` at the end; joining a list of pieces would hold it twice at the end).
    From :data:`HUGE_PAGES_MIN` bytes on, its memory is advised to the kernel as huge pages (:func:`_advise_huge`)."""
    blank = bytes(size)
    if size >= HUGE_PAGES_MIN:
        _advise_huge(blank)
    return io.BytesIO(blank)


HUGE_PAGES_MIN = 8 << 20
_HUGE = 1 << 21
_madvise: Callable[[int, int, int], int] | None = None
_MADV_HUGEPAGE = 14


def _advise_huge(blank: bytes) -> None:
    """``madvise(MADV_HUGEPAGE)`` on the 2 MiB-aligned inside of ``blank``'s bytes, before they are touched: filling a
    50 MB frame then takes 25 page faults instead of 12,000 (measured: 3-5 ms instead of 21-29 ms). Advice only: the
    bytes are the same either way, and where it is unavailable (not Linux or not CPython, THP off) nothing happens."""
    global _madvise
    if _madvise is None:
        if sys.platform != "linux" or sys.implementation.name != "cpython":
            _madvise = lambda addr, length, advice: -1  # noqa: E731
        else:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _madvise = libc.madvise
    start = id(blank) + _BYTES_HEADER  # CPython: a bytes object's data follows its header, in the same allocation
    first, last = -(-start // _HUGE) * _HUGE, (start + len(blank)) // _HUGE * _HUGE
    if last > first:
        _madvise(first, last - first, _MADV_HUGEPAGE)


_BYTES_HEADER = sys.getsizeof(b"") - 1  # offset of a bytes object's data from its address (its trailing NUL aside)


async def _read_piece(stream: FrameStream, remaining: int, received: int) -> bytes:
    """The next 1 to ``remaining`` bytes of ``stream``; :class:`_EndOfStream` (after ``received`` bytes of the
    current read) when it ends instead."""
    try:
        piece = await stream.read(remaining)
    except _STREAM_ENDED as exc:  # StreamEOF, StreamReset, StreamError, connection closed: all "ended"
        raise _EndOfStream(received) from exc
    if not piece or len(piece) > remaining:  # (more than asked: never seen; it must not desynchronise the framing)
        raise _EndOfStream(received)
    return piece


async def _read_exactly(stream: FrameStream, n: int) -> bytes:
    """``n`` bytes. They come in many chunks: up to :data:`JOIN_MAX` the chunks are joined (one copy); above it each is
    copied into a :func:`blank_buffer` as it comes, so a large frame is held once, never twice (chunks and join)."""
    chunks: list[bytes] = []
    buf: io.BytesIO | None = None
    remaining = n
    while remaining:
        chunk = await _read_piece(stream, remaining, n - remaining)
        if len(chunk) == n:
            return chunk
        if n <= JOIN_MAX:
            chunks.append(chunk)
        else:
            if buf is None:
                buf = blank_buffer(n)
            buf.write(chunk)
        remaining -= len(chunk)
    return buf.getvalue() if buf is not None else b"".join(chunks)


async def _read_size(stream: FrameStream, header_timeout_s: float) -> int | None:
    """A frame's announced size, under the idle timeout; ``None`` when the stream ended cleanly before it."""
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
    return size


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
    size = await _read_size(stream, header_timeout_s)
    if size is None:
        return None
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


async def read_frame_into(
    stream: FrameStream,
    write: Callable[[bytes], object],
    *,
    head: bytes,
    body_size: int,
    tail: bytes,
    header_timeout_s: float,
    read_base_s: float,
    read_bytes_per_s_min: int,
) -> None:
    """Read one frame whose payload must be ``head``, then ``body_size`` bytes, then ``tail``: a frame the reader
    could write itself but for its body (a fetched chunk: :func:`node.runtime._fetch.chunk_frame`). The body goes to
    ``write`` piece by piece as it arrives, not copied into a frame first nor decoded; ``head``, ``tail`` and the
    announced size are checked by comparison. Raises :class:`FrameError` as :func:`read_frame` does, and
    ``"malformed"`` for a size, head or tail other than expected; the end of the stream before the frame is
    ``"truncated"`` too. ``write`` may have been given pieces of the body when the tail turns out wrong: the caller
    discards what it wrote when this raises."""
    size = len(head) + body_size + len(tail)
    announced = await _read_size(stream, header_timeout_s)
    if announced is None:
        raise FrameError("truncated", "the stream ended before the frame")
    if announced != size:
        raise FrameError("malformed", f"{announced} bytes announced, {size} expected")
    deadline_s = read_base_s + size / read_bytes_per_s_min
    with trio.move_on_after(deadline_s):
        try:
            if await _read_exactly(stream, len(head)) != head:
                raise FrameError("malformed", "a frame that begins other than expected")
            remaining = body_size
            while remaining:
                piece = await _read_piece(stream, remaining, size - len(tail) - remaining)
                write(piece)
                remaining -= len(piece)
            if await _read_exactly(stream, len(tail)) != tail:
                raise FrameError("malformed", "a frame that ends other than expected")
            return
        except _EndOfStream as end:
            raise FrameError("truncated", f"payload cut after about {end.received} of {size} bytes") from None
    raise FrameError("payload_timeout", f"{size} bytes not read within {deadline_s:.1f} s")
