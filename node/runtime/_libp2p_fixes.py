"""Throughput fixes for py-libp2p 0.8.1, installed by :func:`apply` at import of the transport.

A 50 MB blob crossed Noise + Yamux at a quarter of raw TCP on loopback, CPU-bound in Python on both sides.
A profile of one 50 MB push (``benchmarks/net_bench.py``) counted 763 Yamux data frames (64 KiB, the
library's cap), 1,526 Noise messages (every 65,536-byte frame split into 65,519 + 17 bytes), about 3,100
``recv`` calls and 770 window updates on the receiver, and about 11 copies of every byte on the receiver
(``read_exactly`` alone copies twice). Each fix below replaces one function or method (the fifth also makes
``YamuxStream.send_window`` a property, to wake a waiting writer); none changes the wire format
(every frame is valid Yamux and every message valid Noise, so stock 0.8.1 peers interoperate both ways),
none touches a limit on untrusted input (Yamux still refuses a DATA frame longer than its 16 MiB cap, Noise
still authenticates every message), and Noise stays the only channel security.

1. ``NoiseTransportReadWriter.read_msg``: reads the socket in pieces of up to :data:`NOISE_READ_BYTES` and
   cuts Noise messages out of that buffer (it was two ``read_exactly`` calls, i.e. two or more ``recv``
   syscalls and two copies, per message). Only the transport reader buffers: the handshake reader must not
   read past its last message, and the transport reader owns every byte after it.
2. ``NoiseTransportReadWriter.write_msg``: a write longer than one Noise message is encrypted message by
   message and handed to the socket as one write (it was one ``send_all`` per 64 KiB).
3. ``SecureSession.read``: keeps the rest of a decrypted message as ``bytes`` with an offset and joins the
   messages of a long read once (it copied every byte through a ``BytesIO``, a ``bytearray`` and ``bytes``).
4. ``Yamux._read_data_body``: one ``secured_conn.read(length)``, which already returns ``length`` bytes
   unless the connection ends (``read_exactly`` copied the body twice more); a short body falls back to
   ``read_exactly``, which raises as before.
5. ``YamuxStream.write``: a DATA frame carries up to :data:`FRAME_PAYLOAD_MAX` bytes, header and payload one
   full Noise message (it was 64 KiB of payload, which took two Noise messages, the second of 17 bytes), never
   more than the send window the peer granted; it is built with one copy; and a writer that ran
   out of window waits for the window update (an event, set when ``send_window`` grows) instead of
   re-checking every 10 ms. The 10 ms re-check stays as a fallback for closure, and so does the 5 s limit.
6. ``yamux._yamux_release_on_read``: false unless ``PY_YAMUX_RELEASE_ON_READ`` is set, so a reader grants the
   window back in batches of half the window, as go-yamux does (0.8.1's default granted the bytes of every read
   back at once: one WINDOW_UPDATE frame, one Noise message and one ``send`` per read, and on the writer one more
   message to decrypt and wake up for; the CPU of a 50 MB transfer, both ends in one process, fell by 8-20 %).
   Only the cadence of the updates changes: the window never shrinks, and a writer waits at most until its
   reader has consumed half of it.

Each replaced function keeps the original's signature; ``apply`` refuses (returns False, changes nothing)
on any other libp2p version, since the methods it replaces may differ there. The transport calls it when
imported, unless ``CONCILIUM_LIBP2P_FIXES=off``. The same changes as a patch against the library source, for
upstream, are in ``docs/patches/libp2p-0.8.1-throughput.diff``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import libp2p
import trio
from libp2p.io.exceptions import ConnectionClosedError, IncompleteReadError
from libp2p.io.utils import read_exactly
from libp2p.security import secure_session
from libp2p.security.noise import io as noise_io
from libp2p.stream_muxer.exceptions import MuxedStreamError
from libp2p.stream_muxer.yamux import yamux

__all__ = ["FRAME_PAYLOAD_MAX", "NOISE_READ_BYTES", "SUPPORTED_VERSION", "apply", "applied"]

SUPPORTED_VERSION = "0.8.1"
NOISE_READ_BYTES = 1 << 18
"""Bytes asked of the socket per read by the Noise transport reader (more when one message needs more)."""
FRAME_PAYLOAD_MAX = noise_io.MAX_PLAINTEXT_LENGTH - yamux.HEADER_SIZE
"""Payload bytes per Yamux DATA frame: header and payload fill exactly one Noise message (65,519 bytes). Not more:
with frames of four Noise messages (262,064 bytes) a 50 MB push took about a quarter less CPU, but on a link slowed to
0.5 Mbit/s a 290-byte vote waited over 10 s behind blob frames of the same connection (frames interleave whole),
and ``tests/node/runtime/test_links.py`` failed twice in two runs (it passes with one message a frame)."""
_WINDOW_POLL_S = 0.01  # the original re-check period, kept for a stream closed while a writer waits
_WINDOW_WAIT_S = 5.0  # the original limit on one wait for window

_original: dict[str, Callable[..., Awaitable[Any]]] = {}


def applied() -> bool:
    """True once :func:`apply` has installed the fixes in this process."""
    return bool(_original)


def apply(version: str | None = None) -> bool:
    """Install the fixes (idempotent). ``version``: the libp2p version to check, default the installed one.

    Returns False and changes nothing when the version is not :data:`SUPPORTED_VERSION`."""
    if (getattr(libp2p, "__version__", None) if version is None else version) != SUPPORTED_VERSION:
        return False
    if _original:
        return True
    noise = noise_io.NoiseTransportReadWriter
    _original["noise_read_msg"] = noise.read_msg
    _original["noise_write_msg"] = noise.write_msg
    _original["secure_read"] = secure_session.SecureSession.read
    _original["read_data_body"] = yamux.Yamux._read_data_body
    _original["yamux_write"] = yamux.YamuxStream.write
    _original["release_on_read"] = yamux._yamux_release_on_read
    noise._fixes_buf = b""  # unread bytes from the socket, from _fixes_pos on
    noise._fixes_pos = 0
    noise.read_msg = _noise_read_msg  # type: ignore[method-assign]
    noise.write_msg = _noise_write_msg  # type: ignore[method-assign]
    session = secure_session.SecureSession
    session._fixes_rest = b""  # the rest of the last message, from _fixes_pos on
    session._fixes_pos = 0
    session.read = _secure_read  # type: ignore[method-assign]
    yamux.Yamux._read_data_body = _read_data_body  # type: ignore[method-assign]
    stream = yamux.YamuxStream
    stream._fixes_window_event = None
    stream.send_window = property(_get_send_window, _set_send_window)  # type: ignore[assignment]
    stream.write = _yamux_write  # type: ignore[method-assign]
    yamux._yamux_release_on_read = _release_on_read
    return True


# ------------------------------------------------------------------------------------------ Noise (1, 2)


async def _noise_read_msg(self: noise_io.NoiseTransportReadWriter, prefix_encoded: bool = False) -> bytes:
    if prefix_encoded:  # never on the transport path; the original handles it
        return await _original["noise_read_msg"](self, prefix_encoded)
    buf, pos = self._fixes_buf, self._fixes_pos
    if len(buf) - pos < noise_io.SIZE_NOISE_MESSAGE_LEN:
        buf, pos = await _noise_fill(self, buf, pos, noise_io.SIZE_NOISE_MESSAGE_LEN), 0
    start = pos + noise_io.SIZE_NOISE_MESSAGE_LEN
    end = start + int.from_bytes(buf[pos:start], noise_io.BYTE_ORDER)
    if len(buf) < end:
        buf = await _noise_fill(self, buf, pos, end - pos)
        start, end = start - pos, end - pos
    self._fixes_buf, self._fixes_pos = buf, end
    return self.decrypt(buf[start:end])


async def _noise_fill(self: noise_io.NoiseTransportReadWriter, buf: bytes, pos: int, need: int) -> bytes:
    """The unread bytes ``buf[pos:]`` and more from the socket, ``need`` bytes at least."""
    parts = [buf[pos:]]
    have = len(buf) - pos
    conn = self.read_writer.read_write_closer
    while have < need:
        chunk = await conn.read(max(need - have, NOISE_READ_BYTES))
        if not chunk:  # as read_exactly raises it (received 0 at a message boundary: a clean close)
            raise IncompleteReadError(
                f"Connection closed during read operation: expected {need} bytes but received {have} bytes",
                expected_bytes=need, received_bytes=have,
            )  # fmt: skip
        parts.append(chunk)
        have += len(chunk)
    return b"".join(parts)


async def _noise_write_msg(self: noise_io.NoiseTransportReadWriter, msg: bytes, prefix_encoded: bool = False) -> None:
    limit = noise_io.MAX_PLAINTEXT_LENGTH
    if prefix_encoded or len(msg) <= limit:
        return await _original["noise_write_msg"](self, msg, prefix_encoded)
    parts: list[bytes] = []
    for start in range(0, len(msg), limit):
        ciphertext = self.encrypt(msg[start : start + limit])
        parts += (len(ciphertext).to_bytes(noise_io.SIZE_NOISE_MESSAGE_LEN, noise_io.BYTE_ORDER), ciphertext)
    await self.read_writer.read_write_closer.write(b"".join(parts))


# ------------------------------------------------------------------------------------------ SecureSession (3)


async def _secure_read(self: secure_session.SecureSession, n: int | None = None) -> bytes:
    if n == 0:
        return b""
    rest, pos = self._fixes_rest, self._fixes_pos
    if pos < len(rest):  # what is left of the last message comes first
        if n is None or n >= len(rest) - pos:
            first = rest[pos:]
            self._fixes_rest, self._fixes_pos = b"", 0
        else:
            first = rest[pos : pos + n]
            self._fixes_pos = pos + n
        if n is None or len(first) == n:
            return first
        parts, got = [first], len(first)
    else:
        parts, got = [], 0
    while n is None or got < n:
        msg = await self.conn.read_msg()
        if msg == b"":  # the connection ended: what was assembled, else an error
            if got:
                return b"".join(parts)
            raise ConnectionClosedError("Connection closed")
        if n is None:
            return msg
        need = n - got
        if len(msg) > need:
            self._fixes_rest, self._fixes_pos = msg, need
            msg = msg[:need]
        parts.append(msg)
        got += len(msg)
    return parts[0] if len(parts) == 1 else b"".join(parts)


# ------------------------------------------------------------------------------------------ Yamux (4, 5)


async def _read_data_body(self: yamux.Yamux, length: int) -> bytes:
    with trio.fail_after(yamux._yamux_data_read_timeout()):
        data = await self.secured_conn.read(length)
        if len(data) < length:  # the connection ended mid-frame: read_exactly raises as it did
            data += await read_exactly(self.secured_conn, length - len(data))
        return data


def _get_send_window(self: yamux.YamuxStream) -> int:
    return self._fixes_send_window


def _set_send_window(self: yamux.YamuxStream, value: int) -> None:
    self._fixes_send_window = value
    if value > 0 and self._fixes_window_event is not None:
        self._fixes_window_event.set()


def _release_on_read() -> bool:
    if "PY_YAMUX_RELEASE_ON_READ" in os.environ:  # the library's own switch, read as it reads it
        return bool(_original["release_on_read"]())
    return False


async def _yamux_write(self: yamux.YamuxStream, data: bytes) -> None:
    if self.send_closed:
        raise MuxedStreamError("Stream is closed for sending")
    view = memoryview(data)
    total_len = len(view)
    sent = 0
    while sent < total_len:
        frame: bytes | None = None
        while frame is None:
            async with self.rw_lock.write_lock():
                if self.send_closed:
                    raise MuxedStreamError("Stream is closed for sending")
                async with self.window_lock:
                    if self.closed:
                        raise MuxedStreamError("Stream is closed")
                    if self.send_window > 0:
                        to_send = min(self.send_window, FRAME_PAYLOAD_MAX, total_len - sent)
                        self.send_window -= to_send
                        header = struct.pack(yamux.YAMUX_HEADER_FORMAT, 0, yamux.TYPE_DATA, 0, self.stream_id, to_send)
                        frame = b"".join((header, view[sent : sent + to_send]))
            if frame is not None:
                break
            self._zero_window_waits += 1
            with trio.move_on_after(_WINDOW_WAIT_S) as cancel_scope:
                while True:
                    async with self.window_lock:
                        if self.send_window > 0 or self.closed:
                            break
                        self._fixes_window_event = event = trio.Event()
                    with trio.move_on_after(_WINDOW_POLL_S):
                        await event.wait()
                    self._fixes_window_event = None
            if cancel_scope.cancelled_caught:
                raise MuxedStreamError("Timed out waiting for window update after 5 seconds.")
        await self.conn._write_frame(frame)
        sent += len(frame) - yamux.HEADER_SIZE
