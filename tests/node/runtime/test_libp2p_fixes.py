"""The py-libp2p 0.8.1 throughput fixes (``node/runtime/_libp2p_fixes.py``).

Each replaced method is checked against the library's own one where the two can run side by side (the Noise
reader and writer, ``SecureSession.read``: same inputs, same outputs, same errors), and the whole stack between
real hosts on 127.0.0.1 (TCP + Noise + Yamux): payloads around every frame and message boundary arrive
bit-exact through reads of random sizes, concurrent streams stay apart, a slow reader holds the sender to the
window it grants (memory bounded) and a stalled writer is woken by the window update itself, oversized Yamux
frames and forged Noise messages still close the connection, and a stock py-libp2p 0.8.1 peer in another
process (the transport imported with ``CONCILIUM_LIBP2P_FIXES=off``) interoperates both ways.
"""

from __future__ import annotations

import hashlib
import os
import random
import struct
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import multiaddr
import pytest
import trio
from libp2p import new_host
from libp2p.abc import IHost, INetStream
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.io.exceptions import ConnectionClosedError, IncompleteReadError
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.security.noise import io as noise_io
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.security.secure_session import SecureSession
from libp2p.stream_muxer.yamux import yamux
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux

import node.runtime._transport  # noqa: F401  (importing the transport installs the fixes)
from node.runtime import _libp2p_fixes as fixes

PROTO = TProtocol("/concilium-test/fixes/1")
M = noise_io.MAX_PLAINTEXT_LENGTH  # 65,519
F = fixes.FRAME_PAYLOAD_MAX
BOUNDARY_SIZES = [1, 12, M - 12, M - 11, M, M + 1, 2 * M, F - 1, F, F + 1, 3 * F + 7, 2_000_003]
ROOT = Path(__file__).resolve().parents[3]


def payload(size: int, seed: int = 0) -> bytes:
    return random.Random(size * 1000 + seed).randbytes(size)


# ------------------------------------------------------------------------------------------ installation


def test_the_fixes_are_installed_on_0_8_1_and_refused_on_another_version() -> None:
    assert fixes.applied()
    assert noise_io.NoiseTransportReadWriter.read_msg is fixes._noise_read_msg
    assert noise_io.NoiseTransportReadWriter.write_msg is fixes._noise_write_msg
    assert SecureSession.read is fixes._secure_read
    assert yamux.Yamux._read_data_body is fixes._read_data_body
    assert yamux.YamuxStream.write is fixes._yamux_write
    assert yamux._yamux_release_on_read is fixes._release_on_read
    assert fixes.apply() is True  # idempotent
    assert fixes.apply(version="0.8.2") is False and fixes.apply(version="0.9.0") is False
    assert fixes.FRAME_PAYLOAD_MAX + yamux.HEADER_SIZE == M  # a frame: one full Noise message


# ------------------------------------------------------------------------------------------ side by side


class _Chunked:
    """A raw connection (the library's ``ReadWriteCloser`` role) over fixed bytes, handing out reads of random
    sizes (at most what was asked), then EOF; it records what is written to it."""

    def __init__(self, data: bytes, rng: random.Random) -> None:
        self._data, self._pos, self._rng = data, 0, rng
        self.writes: list[bytes] = []

    async def read(self, n: int | None = None) -> bytes:
        size = self._rng.randint(1, 70_000) if n is None else self._rng.randint(min(n, 1), n)
        out = self._data[self._pos : self._pos + size]
        self._pos += len(out)
        return out

    async def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    async def close(self) -> None:
        return None


class _Identity:
    """The library's ``NoiseState`` role with an identity cipher, so that a test can frame messages by hand."""

    def encrypt(self, data: bytes) -> bytes:
        return data

    def decrypt(self, data: bytes) -> bytes:
        return data


def _noise_reader(data: bytes, seed: int) -> noise_io.NoiseTransportReadWriter:
    return noise_io.NoiseTransportReadWriter(_Chunked(data, random.Random(seed)), _Identity())  # type: ignore[arg-type]


async def _read_all(reader: noise_io.NoiseTransportReadWriter, read: Any) -> tuple[list[bytes], IncompleteReadError]:
    out = []
    while True:
        try:
            out.append(await read(reader))
        except IncompleteReadError as end:
            return out, end


@pytest.mark.trio
@pytest.mark.parametrize("seed", range(4))
async def test_the_noise_reader_cuts_the_same_messages_as_the_library_from_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    messages = [rng.randbytes(rng.choice([0, 1, 2, rng.randint(3, 65_535), 65_535])) for _ in range(60)]
    stream = b"".join(len(m).to_bytes(2, "big") + m for m in messages)
    for cut in (len(stream), len(stream) - 1, len(stream) - len(messages[-1]) - 1):  # whole, mid-message, mid-length
        ours, our_end = await _read_all(_noise_reader(stream[:cut], seed), fixes._noise_read_msg)
        theirs, their_end = await _read_all(_noise_reader(stream[:cut], seed + 100), fixes._original["noise_read_msg"])
        assert ours == theirs
        assert ours == messages[: len(ours)]
        # clean only at a message boundary (the library counts the body apart from its length: an end right after
        # a length reads "clean" there)
        assert our_end.is_clean_close == (cut == len(stream))
        assert their_end.is_clean_close or not our_end.is_clean_close


@pytest.mark.trio
async def test_the_noise_writer_sends_the_library_bytes_in_one_write() -> None:
    for size in (0, 1, M, M + 1, 4 * M, 4 * M + 5, 1_000_000):
        msg = payload(size)
        ours, theirs = _noise_reader(b"", 0), _noise_reader(b"", 0)
        await fixes._noise_write_msg(ours, msg)
        await fixes._original["noise_write_msg"](theirs, msg)
        conn_ours, conn_theirs = ours.read_writer.read_write_closer, theirs.read_writer.read_write_closer
        assert b"".join(conn_ours.writes) == b"".join(conn_theirs.writes)  # type: ignore[attr-defined]
        assert len(conn_ours.writes) == 1  # type: ignore[attr-defined]


class _Messages:
    """The library's ``EncryptedMsgReadWriter`` role: decrypted messages in order, then b"" (closed)."""

    def __init__(self, messages: list[bytes]) -> None:
        self._messages = list(messages)

    async def read_msg(self) -> bytes:
        return self._messages.pop(0) if self._messages else b""


def _session(messages: list[bytes]) -> SecureSession:
    kp = create_new_key_pair(b"\x01" * 32)
    pid = ID.from_pubkey(kp.public_key)
    return SecureSession(local_peer=pid, local_private_key=kp.private_key, remote_peer=pid,
                         remote_permanent_pubkey=kp.public_key, is_initiator=True,
                         conn=_Messages(messages))  # type: ignore[arg-type]  # fmt: skip


async def _outcomes(session: SecureSession, read: Any, sizes: list[int | None]) -> list[object]:
    out: list[object] = []
    for n in sizes:
        try:
            out.append(await read(session, n))
        except ConnectionClosedError:
            out.append("closed")
    return out


@pytest.mark.trio
@pytest.mark.parametrize("seed", range(4))
async def test_secure_session_reads_return_what_the_library_returns(seed: int) -> None:
    rng = random.Random(seed)
    messages = [rng.randbytes(rng.randint(1, 3000)) for _ in range(40)]
    sizes: list[int | None] = []
    for _ in range(90):
        sizes.append(rng.choice([None, 0, 1, 12, rng.randint(1, 5000), rng.randint(1, 20_000)]))
    ours = await _outcomes(_session(messages), fixes._secure_read, sizes)
    theirs = await _outcomes(_session(messages), fixes._original["secure_read"], sizes)
    assert ours == theirs
    assert "closed" in ours  # the script reads past the end: a partial read, then "closed"


# ------------------------------------------------------------------------------------------ real hosts


def _host(seed: bytes) -> IHost:
    kp = create_new_key_pair(seed)
    noise = NoiseTransport(kp, noise_privkey=create_x25519_key_pair().private_key)
    return new_host(key_pair=kp, sec_opt={NOISE_PROTOCOL_ID: noise}, muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux})


@asynccontextmanager
async def hosts(n: int) -> AsyncIterator[list[IHost]]:
    """``n`` hosts on 127.0.0.1 (TCP, Noise, Yamux), each of the first ``n - 1`` connected to the last one."""
    started = [_host(bytes([10 + i]) * 32) for i in range(n)]
    async with AsyncExitStack() as stack:
        for host in started:
            await stack.enter_async_context(host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]))
        for host in started[:-1]:
            await host.connect(info_from_p2p_addr(started[-1].get_addrs()[0]))
        yield started


async def read_exactly(stream: INetStream, n: int, rng: random.Random) -> bytes:
    """``n`` bytes, read in pieces of random size (the stream hands out at most what is asked)."""
    parts, got = [], 0
    while got < n:
        part = await stream.read(min(n - got, rng.choice([1, 7, 4096, 65_536, 300_000, n])))
        assert part, f"stream ended after {got} of {n} bytes"
        parts.append(part)
        got += len(part)
    return b"".join(parts)


@pytest.mark.trio
async def test_payloads_around_every_boundary_arrive_bit_exact_both_ways_on_concurrent_streams() -> None:
    async with hosts(2) as (a, b):
        got: dict[tuple[str, int], bytes] = {}

        async def sink(stream: INetStream) -> None:  # each stream: a name, then its payloads, then an echo
            rng = random.Random(len(got))
            name = (await read_exactly(stream, 1, rng)).decode()
            for size in BOUNDARY_SIZES:
                got[(name, size)] = await read_exactly(stream, size, rng)
            await stream.write(payload(F + 1, seed=9))
            await stream.close()

        b.set_stream_handler(PROTO, sink)

        async def source(name: str) -> None:
            stream = await a.new_stream(b.get_id(), [PROTO])
            await stream.write(name.encode())
            for size in BOUNDARY_SIZES:
                await stream.write(payload(size, seed=ord(name)))
            assert await read_exactly(stream, F + 1, random.Random(1)) == payload(F + 1, seed=9)
            await stream.close()

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for name in "xyz":
                    nursery.start_soon(source, name)
        for name in "xyz":
            for size in BOUNDARY_SIZES:
                assert got[(name, size)] == payload(size, seed=ord(name)), (name, size)


@pytest.mark.trio
@pytest.mark.parametrize("switch", [None, "1"])
async def test_a_reader_grants_the_window_back_in_batches_unless_the_library_switch_asks_for_every_read(
    switch: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fix 6: 0.8.1 answered every read with a WINDOW_UPDATE of the bytes read (its counter
    ``_window_update_bytes_read_only``); with the fix that path is off, unless ``PY_YAMUX_RELEASE_ON_READ`` says
    otherwise, and the transfer is the same."""
    if switch is None:
        monkeypatch.delenv("PY_YAMUX_RELEASE_ON_READ", raising=False)
    else:
        monkeypatch.setenv("PY_YAMUX_RELEASE_ON_READ", switch)
    size = 6_000_000
    data = payload(size, seed=6)
    async with hosts(2) as (a, b):
        got: list[bytes] = []
        counters: dict[str, int] = {}
        done = trio.Event()

        async def sink(stream: INetStream) -> None:
            while (have := sum(map(len, got))) < size:
                got.append(await stream.read(min(size - have, 65_536)))
            muxed: Any = stream.muxed_stream
            counters.update(bytes_read=muxed._window_update_bytes_read_only, slack=muxed._window_update_partial_slack)
            done.set()

        b.set_stream_handler(PROTO, sink)
        stream = await a.new_stream(b.get_id(), [PROTO])
        with trio.fail_after(30):
            await stream.write(data)
            await done.wait()
    assert b"".join(got) == data
    reads = len(got)
    if switch is None:
        assert counters["bytes_read"] == 0, counters
    else:
        assert counters["bytes_read"] > reads // 2, (counters, reads)


@pytest.mark.trio
async def test_a_slow_reader_bounds_what_it_buffers_and_a_stalled_writer_wakes_on_the_window_update(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # without the wake-up, the writer would only re-check after 30 s and fail at the 5 s limit
    monkeypatch.setattr(fixes, "_WINDOW_POLL_S", 30.0)
    size = 40_000_000  # more than twice the largest window a receiver grants (16 MiB)
    data = payload(size)
    async with hosts(2) as (a, b):
        accepted: list[INetStream] = []
        b.set_stream_handler(PROTO, lambda stream: _park(stream, accepted))
        stream = await a.new_stream(b.get_id(), [PROTO])
        done = trio.Event()

        async def write() -> None:
            await stream.write(data)
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            with trio.fail_after(10):
                while not accepted:
                    await trio.sleep(0.01)
            inbound = accepted[0]
            muxed: Any = inbound.muxed_stream
            buffers = muxed.conn.stream_buffers
            await trio.sleep(1.0)  # the reader does not read: the writer stops at the window granted so far
            assert not done.is_set()
            assert len(buffers[muxed.stream_id]) <= yamux.MAX_WINDOW_SIZE
            rng, parts, got, most = random.Random(3), [], 0, 0
            with trio.fail_after(20):
                while got < size:
                    most = max(most, len(buffers.get(muxed.stream_id, b"")))
                    part = await inbound.read(min(size - got, rng.choice([4096, 65_536, 1 << 20])))
                    parts.append(part)
                    got += len(part)
                    if rng.random() < 0.05:
                        await trio.sleep(0.01)  # slow now and then
                await done.wait()
            assert b"".join(parts) == data
    # the writer never sent past the window granted (the receiver warns of that), and what waited to be read stayed
    # within about the largest window (the library's window accounting may grant a little more than its target)
    assert not [r for r in caplog.records if "exceeded receive window" in r.getMessage()]
    assert most <= yamux.MAX_WINDOW_SIZE + yamux.MAX_WINDOW_SIZE // 4, most


async def _park(stream: INetStream, accepted: list[INetStream]) -> None:
    accepted.append(stream)
    await trio.sleep_forever()


async def _echo_size(stream: INetStream) -> None:
    rng = random.Random(0)
    (size,) = struct.unpack(">I", await read_exactly(stream, 4, rng))
    data = await read_exactly(stream, size, rng)
    await stream.write(hashlib.sha256(data).digest())
    await stream.close()


@pytest.mark.trio
async def test_an_oversized_yamux_frame_or_a_forged_noise_message_closes_the_connection_and_the_host_goes_on() -> None:
    async with hosts(4) as (oversized, forged, honest, b):
        b.set_stream_handler(PROTO, _echo_size)
        for attacker in (oversized, forged):
            muxed: Any = attacker.get_network().get_connections(b.get_id())[0].muxed_conn
            if attacker is oversized:  # a DATA frame longer than Yamux's 16 MiB cap, on a stream of its own
                stream = await attacker.new_stream(b.get_id(), [PROTO])
                sid = stream.muxed_stream.stream_id  # type: ignore[attr-defined]
                await muxed._write_frame(struct.pack(yamux.YAMUX_HEADER_FORMAT, 0, yamux.TYPE_DATA, 0, sid,
                                                     yamux.MAX_WINDOW_SIZE + 1))  # fmt: skip
            else:  # a Noise message the session key did not seal, straight onto the TCP connection
                await muxed.secured_conn.conn.read_writer.read_write_closer.write(b"\x00\x40" + bytes(64))
            with trio.fail_after(10):
                while any(not c.is_closed for c in b.get_network().get_connections(attacker.get_id())):
                    await trio.sleep(0.02)
        # the host is fine: another peer's connection carries a 3 MB frame both ways
        stream = await honest.new_stream(b.get_id(), [PROTO])
        data = payload(3_000_000)
        await stream.write(struct.pack(">I", len(data)) + data)
        with trio.fail_after(20):
            assert await read_exactly(stream, 32, random.Random(0)) == hashlib.sha256(data).digest()


_STOCK_PEER = textwrap.dedent(
    """
    import hashlib, random, struct, sys
    import multiaddr, trio
    from libp2p import new_host
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.crypto.x25519 import create_new_key_pair as x25519
    from libp2p.custom_types import TProtocol
    from libp2p.security.noise.transport import PROTOCOL_ID as NOISE, Transport as Noise
    from libp2p.stream_muxer.yamux import yamux
    from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX, Yamux

    import node.runtime._transport  # with CONCILIUM_LIBP2P_FIXES=off: py-libp2p as released
    from node.runtime import _libp2p_fixes
    assert not _libp2p_fixes.applied() and yamux.YamuxStream.write.__module__ == yamux.__name__

    async def read_exactly(stream, n):
        parts, got = [], 0
        while got < n:
            part = await stream.read(n - got)
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    async def handler(stream):  # a frame in: its digest out, then a frame of our own
        (size,) = struct.unpack(">I", await read_exactly(stream, 4))
        data = await read_exactly(stream, size)
        reply = random.Random(5).randbytes(3_000_001)
        await stream.write(hashlib.sha256(data).digest() + struct.pack(">I", len(reply)) + reply)

    async def main():
        kp = create_new_key_pair(b"\\x0c" * 32)
        host = new_host(key_pair=kp, sec_opt={NOISE: Noise(kp, noise_privkey=x25519().private_key)},
                        muxer_opt={TProtocol(YAMUX): Yamux})
        listen = [multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]
        async with host.run(listen_addrs=listen):
            host.set_stream_handler(TProtocol("/concilium-test/fixes/1"), handler)
            print(host.get_addrs()[0], flush=True)
            await trio.to_thread.run_sync(sys.stdin.read)  # until the test closes our stdin

    trio.run(main)
    """
)


@pytest.mark.trio
async def test_a_stock_libp2p_peer_in_another_process_interoperates_both_ways() -> None:
    env = dict(os.environ, CONCILIUM_LIBP2P_FIXES="off", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", _STOCK_PEER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, text=True, env=env)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert line.startswith("/ip4/127.0.0.1/"), proc.stderr.read() if proc.stderr else line
        host = _host(b"\x0d" * 32)
        async with host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
            info = info_from_p2p_addr(multiaddr.Multiaddr(line.strip()))
            with trio.fail_after(60):
                await host.connect(info)
                stream = await host.new_stream(info.peer_id, [PROTO])
                data = payload(5_000_003)  # our frames: up to FRAME_PAYLOAD_MAX, within the window it grants
                await stream.write(struct.pack(">I", len(data)) + data)
                rng = random.Random(2)
                assert await read_exactly(stream, 32, rng) == hashlib.sha256(data).digest()
                (size,) = struct.unpack(">I", await read_exactly(stream, 4, rng))
                reply = await read_exactly(stream, size, rng)  # in its 64 KiB frames
                assert reply == random.Random(5).randbytes(3_000_001)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
