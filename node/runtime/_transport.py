"""The member-to-member transport: opaque envelopes over py-libp2p 0.8.1 direct streams.

Design
------
* One libp2p host per node, TCP + **Noise only** + **Yamux only**, its identity built from the node's
  ``ledger.KeyPair`` seed (the libp2p peer id must equal ``key.peer_id``).
* Two protocols per chain: ``/concilium/<chain-id>/msg/1`` carries kinds ``pbft``/``scores``/``want``
  (capped at ``msg_frame_max``) and ``/concilium/<chain-id>/blob/1`` carries ``update``/``blobs``/``model``
  (capped at ``data_frame_max``). A 20 MB blob in flight therefore never delays a vote. Frames are a
  4-byte big-endian length and the payload (``_frames.py``); a stream carries many frames.
* A third protocol, ``/concilium/<chain-id>/fetch/1``, fetches a blob by digest in chunks
  (:meth:`Transport.fetch`, records in ``_fetch.py``): the asker pipelines range requests on one stream, the
  server answers each from ``serve_blob`` with one chunk frame of at most 4 MiB, and the asker checks each
  chunk against its request and the whole blob against its digest before returning it (a chunk's data is read
  straight into the blob, which is assembled in place, and the digest is computed once, in a worker thread).
  (docs/design.md names a ``/sync/1`` protocol: block sync here is the replica's own sync messages, which are
  consensus messages and ride ``msg/1`` with them; what sync needs beyond blocks, the blobs, is ``fetch/1``.)
* Outbound: :meth:`Transport.send` is synchronous and never blocks. It appends to a per-peer queue bounded
  in bytes (the oldest frames are dropped past ``queue_bytes_max``); one sender task per (member,
  protocol) keeps one stream open, writes under a deadline, reopens a failed stream and retries the frame
  once. A sender closes its stream after ``header_timeout_s / 2`` idle, so an honest peer never hits the
  receiver's idle timeout.
* Inbound: each stream runs in :meth:`Transport._serve`, which refuses non-members and banned peers,
  bounds the streams per peer, reads frames under deadlines, and hands each payload to ``on_frame`` (whose
  exceptions are logged and counted). A bad frame (oversized, empty, truncated, header or payload timeout)
  resets the stream and counts against the peer: more than ``bad_frames_max`` within
  ``bad_frames_window_s`` bans the peer for ``ban_s`` (disconnected, refused, not dialled). ``on_frame`` may be
  a coroutine function (the node decodes a large frame in a worker thread): the stream waits for it, with the
  frame's bytes still counted in the peer's inbound budget, and the transport drops its own reference to the
  frame first, so the handler can free it as soon as it is decoded. A handler that raises :class:`FrameError`
  (the payload does not decode) charges the peer a bad frame too; the stream reads on.
* Delivery is at most once and in order per (peer, protocol): a frame written into a connection that died
  unnoticed is lost (the core retransmits); frames queued while a peer is away go out when it is back.
  ``on_frame`` runs in the task that read the frame. Inbound counters are by protocol, not kind: the kind
  lives inside the envelope, which the transport never decodes.
* A supervisor task per member keeps a connection to every member with a known address (exponential
  backoff 0.5 s -> 30 s with deterministic jitter); members without an address are reached when they dial
  in. Every long-lived task runs under :meth:`Transport._supervised`, which restarts it with backoff if
  it crashes instead of taking the node down.

py-libp2p 0.8.1 defects worked around (measured on 0.8.1; the list is the reference)
----------------------------------------------------------------------------
1. An exception escaping a stream handler propagates into the swarm's nursery and kills the process:
   ``_serve`` catches ``Exception`` (never ``trio.Cancelled``), logs it and resets the stream.
2. The default security options also accept ``/plaintext/2.0.0`` (and TLS, SECIO): ``sec_opt`` is Noise
   only; ``muxer_opt`` is Yamux only (Mplex is the default fallback and ~5x slower).
3. The host accepts connections from any peer id (the connection gate knows IPs, not peer ids): a network
   notifee closes every connection from a non-member or banned peer, and ``_serve`` resets their streams
   (a stream can arrive before the close lands).
4. ``read_exactly`` gives up after 100 partial reads (~7 MB), so the library's varint framing breaks large
   messages: own 4-byte framing with an explicit ``stream.read(remaining)`` loop.
5. The library puts no deadline on stream reads and writes (a silent peer holds a stream, and a task,
   forever): every read, write, dial and stream open here runs under ``trio.move_on_after``.
6. Negative dial cache: a failed dial blocks the peer for 60 s ("recently failed all addresses"): the
   supervisor calls ``network.unblock_peer`` before every dial.
7. Addresses learned by ``connect`` expire from the peerstore after 120 s: the transport keeps its own
   address book (:meth:`Transport.add_address`) and passes it to every dial.
8. ``import libp2p`` clears the ``libp2p`` logger's handlers and sets ``propagate=False`` (its warnings
   reach stderr bare through ``logging.lastResort``): when this module is imported, unless ``LIBP2P_DEBUG``
   gave libp2p handlers of its own, the logger propagates again at level WARNING (global state, as is 11).
9. The swarm's auto-connector dials every peerstore peer with an address (non-members included, and on
   loopback/LAN too) toward (low + high watermark) / 2 connections, and the pruner closes connections
   above the high watermark: the auto-connector is stopped once the host runs, ``ConnectionConfig`` has
   ``min_connections=low_watermark=0`` and ``max_connections=high_watermark=connections_max``, and the
   members are ``protect``-ed from pruning. The auto-connector also forces its logger to INFO; the
   logging fix (8) resets it to NOTSET.
10. Identify would add addresses that peers observed for us to ``get_addrs``, which backs
    :meth:`Transport.listen_addrs`: ``disable_identify_address_discovery=True``.
11. Large transfers are CPU-bound in py-libp2p's Noise and Yamux layers (64 KiB Yamux frames split into two
    Noise messages, two or more ``recv`` calls and about eleven copies of each byte on the receiver, a writer
    out of window re-checking every 10 ms, a window update for every read): ``_libp2p_fixes.apply()`` replaces
    five methods and one switch when this module is imported (on libp2p 0.8.1 only; the wire format is unchanged).
    See that module; the same changes as a patch against the library are in
    ``docs/patches/libp2p-0.8.1-throughput.diff``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
import re
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import libp2p
import multiaddr
import trio
from libp2p.abc import INetConn, INetStream, INetwork, INotifee
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.exceptions import BaseLibp2pError
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux

from ledger import DecodeError, KeyPair
from node.runtime import _libp2p_fixes
from node.runtime._fetch import (CHUNK_BUDGET, CHUNK_BYTES, REQUEST_BUDGET, REQUEST_FRAME_MAX, RESPONSE_FRAME_MAX,
                                 WINDOW, BlobChunk, BlobRequest, chunk_frame)  # fmt: skip
from node.runtime._frames import HEADER_BYTES, FrameError, blank_buffer, encode_header, read_frame, read_frame_into

# Global state (defect 8; 11 below): `import libp2p` (above) cleared the "libp2p" logger's handlers
# and stopped propagation. Unless LIBP2P_DEBUG gave it handlers of its own, send its records to ours.
_libp2p_logger = logging.getLogger("libp2p")
if not _libp2p_logger.handlers:
    _libp2p_logger.propagate = True
    _libp2p_logger.setLevel(logging.WARNING)
    logging.getLogger("libp2p.network.auto_connector").setLevel(logging.NOTSET)  # it forces INFO on itself
# Defect 11, global too (the same for every host in the process); CONCILIUM_LIBP2P_FIXES=off leaves py-libp2p as
# released (an escape hatch, and the baseline of benchmarks/net_bench.py --stock).
if os.environ.get("CONCILIUM_LIBP2P_FIXES", "on") == "off":
    logging.getLogger(__name__).info("CONCILIUM_LIBP2P_FIXES=off: py-libp2p's throughput fixes are not installed")
elif not _libp2p_fixes.apply():
    logging.getLogger(__name__).warning("libp2p %s is not %s: its throughput fixes are not installed",
                                        getattr(libp2p, "__version__", "?"), _libp2p_fixes.SUPPORTED_VERSION)

__all__ = ["DATA_KINDS", "MSG_KINDS", "Transport", "TransportLimits", "TransportStats", "protocol_ids"]

MSG_KINDS = frozenset({"pbft", "scores", "want", "have", "refused"})
DATA_KINDS = frozenset({"update", "blobs", "model"})
_CHAIN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_NET_ERRORS = (BaseLibp2pError, OSError, trio.BrokenResourceError, trio.ClosedResourceError)
_POLL_S = 2.0  # supervisors re-check state at least this often, even if a notification was missed
_CLOSE_TIMEOUT_S = 2.0
_ONE_WRITE_MAX = 60 << 10
"""Frames up to this size go out in one write (header and payload): one Noise frame instead of two."""


def protocol_ids(chain_id: str) -> tuple[TProtocol, TProtocol, TProtocol]:
    """``(msg, blob, fetch)`` protocol ids of a chain."""
    if not _CHAIN_ID.fullmatch(chain_id):
        raise ValueError(f"chain id {chain_id!r} is not 1-64 characters of [A-Za-z0-9._-]")
    return (TProtocol(f"/concilium/{chain_id}/msg/1"), TProtocol(f"/concilium/{chain_id}/blob/1"),
            TProtocol(f"/concilium/{chain_id}/fetch/1"))  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportLimits:
    msg_frame_max: int = 16 << 20  # frames of kinds pbft/scores/want/have/refused
    data_frame_max: int = 256 << 20  # frames of kinds update/blobs/model (= node._wire.ENVELOPE_BYTES_MAX)
    header_timeout_s: float = 120.0  # an inbound stream idle this long between frames is reset (bad frame)
    read_base_s: float = 10.0  # payload deadline = read_base_s + size / read_bytes_per_s_min
    read_bytes_per_s_min: int = 1 << 20  # also paces the write deadline
    write_timeout_s: float = 30.0  # write deadline = write_timeout_s + size / read_bytes_per_s_min
    dial_timeout_s: float = 10.0  # one dial, or one stream open
    queue_bytes_max: int = 512 << 20  # per peer, both protocols; beyond it the oldest frames are dropped
    bad_frames_max: int = 8  # more bad frames than this within the window: banned
    bad_frames_window_s: float = 600.0
    ban_s: float = 60.0
    inbound_streams_per_peer_max: int = 8
    inbound_bytes_per_peer_max: int = (16 << 20) + (256 << 20)
    """Bytes of the frames being read from one peer at once (announced lengths): a frame that would pass it
    is a bad frame (its stream is reset before the payload is read). An honest peer sends one frame per
    protocol at a time, so the default is ``msg_frame_max + data_frame_max``; memory for inbound frames is
    bounded by this times the members."""
    connections_max: int = 256
    backoff_min_s: float = 0.5
    backoff_max_s: float = 30.0

    def __post_init__(self) -> None:
        if not 0 < self.msg_frame_max <= self.data_frame_max < 1 << 32:
            raise ValueError("need 0 < msg_frame_max <= data_frame_max < 2**32")
        positive = ("header_timeout_s", "read_bytes_per_s_min", "write_timeout_s", "dial_timeout_s",
                    "queue_bytes_max", "bad_frames_window_s", "inbound_streams_per_peer_max",
                    "inbound_bytes_per_peer_max",
                    "connections_max", "backoff_min_s")  # fmt: skip
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if self.read_base_s < 0 or self.bad_frames_max < 0 or self.ban_s < 0:
            raise ValueError("read_base_s, bad_frames_max and ban_s must be >= 0")
        if self.inbound_bytes_per_peer_max < self.data_frame_max:
            raise ValueError("inbound_bytes_per_peer_max < data_frame_max: the largest frame could never arrive")
        if self.backoff_max_s < self.backoff_min_s:
            raise ValueError("backoff_max_s < backoff_min_s")


@dataclass(frozen=True, slots=True)
class TransportStats:
    """A snapshot. Outbound counters are by kind; inbound by protocol (``msg``/``blob``), since the kind
    travels inside the (still undecoded) envelope. ``dropped`` counts frames and streams not delivered
    or not sent, by reason."""

    messages_out: Counter[str]
    bytes_out: Counter[str]
    messages_in: Counter[str]
    bytes_in: Counter[str]
    dropped: Counter[str]
    bans: int  # bans imposed so far
    banned: tuple[str, ...]  # peers banned now
    dials_failed: int
    restarts: int  # crashed tasks restarted by the supervisor


@dataclass(frozen=True, slots=True)
class _Channel:
    name: str  # "msg" | "blob"
    protocol: TProtocol
    frame_max: int


@dataclass(slots=True)
class _Queued:
    seq: int
    data: bytes
    kind: str
    retried: bool = False


@dataclass(slots=True, eq=False)
class _Peer:
    id: str
    pid: ID
    queues: dict[str, deque[_Queued]]
    queued: dict[str, trio.Event]  # set when a frame is appended to that queue
    addrs: list[multiaddr.Multiaddr] = field(default_factory=list)
    changed: trio.Event = field(default_factory=trio.Event)  # connection, ban or address book changed
    queued_bytes: int = 0
    inbound_streams: int = 0
    inbound_bytes: int = 0  # announced lengths of the frames being read from this peer now
    bad_at: deque[float] = field(default_factory=deque)
    banned_until: float = -math.inf


class _Gate(INotifee):
    """Network notifee: closes connections from non-members and banned peers (defect 3), wakes loops."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        self._transport._on_connection(conn, opened=True)

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        self._transport._on_connection(conn, opened=False)

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def listen(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None

    async def listen_close(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None


def _short(peer: str) -> str:
    return peer[-8:]


def _sha256(data: memoryview) -> bytes:
    return hashlib.sha256(data).digest()


class Transport:
    """Moves opaque frames between member peers; see the module docstring."""

    def __init__(
        self,
        *,
        key: KeyPair,
        chain_id: str,
        members: Collection[str],
        addresses: Mapping[str, Sequence[str]],
        listen: Sequence[str],
        on_frame: Callable[[str, bytes], Awaitable[None] | None],
        serve_blob: Callable[[bytes], bytes | None] | None = None,
        limits: TransportLimits = TransportLimits(),
        log: logging.Logger | None = None,
    ) -> None:
        """``serve_blob(digest)``: the blob this node hands out to a peer's :meth:`fetch`, or None if it does
        not hold it (None for ``serve_blob`` itself: every fetch is answered "not held")."""
        key_pair = create_new_key_pair(key.seed)
        if ID.from_pubkey(key_pair.public_key).to_base58() != key.peer_id:
            raise ValueError("the libp2p peer id of the key's seed differs from key.peer_id")
        msg, blob, fetch = protocol_ids(chain_id)
        self.peer_id = key.peer_id
        self.limits = limits
        self._log = log or logging.getLogger(__name__)
        self._on_frame = on_frame
        self._serve_blob = serve_blob
        self._channels = {"msg": _Channel("msg", msg, limits.msg_frame_max),
                          "blob": _Channel("blob", blob, limits.data_frame_max)}  # fmt: skip
        self._fetch_channel = _Channel("fetch", fetch, REQUEST_FRAME_MAX)  # inbound: requests; no send queue
        self._serving: OrderedDict[bytes, bytes] = OrderedDict()  # blobs being served, by digest (bounded)
        self._serving_bytes = 0
        self._listen = [multiaddr.Multiaddr(a) for a in listen]
        self._peers = {
            m: _Peer(m, ID.from_base58(m), {c: deque() for c in self._channels},
                     {c: trio.Event() for c in self._channels})  # fmt: skip
            for m in sorted(set(members))
            if m != self.peer_id
        }
        for peer, addrs in addresses.items():
            if peer != self.peer_id:
                for addr in addrs:
                    self.add_address(peer, addr)
        self._host = libp2p.new_host(
            key_pair=key_pair,
            sec_opt={NOISE_PROTOCOL_ID: NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)},
            muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
            listen_addrs=self._listen,
            connection_config=ConnectionConfig(
                max_connections=limits.connections_max, high_watermark=limits.connections_max,
                min_connections=0, low_watermark=0, dial_timeout=limits.dial_timeout_s),  # fmt: skip
            disable_identify_address_discovery=True,
        )
        self._nursery: trio.Nursery | None = None
        self._started = False
        self._seq = 0
        self._messages_out: Counter[str] = Counter()
        self._bytes_out: Counter[str] = Counter()
        self._messages_in: Counter[str] = Counter()
        self._bytes_in: Counter[str] = Counter()
        self._dropped: Counter[str] = Counter()
        self._bans = 0
        self._dials_failed = 0
        self._restarts = 0

    # ---------------------------------------------------------------- public API

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, then keep members connected and queues drained until cancelled. Runs once."""
        if self._nursery is not None:
            raise RuntimeError("Transport.run() runs once")
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._host.get_network().register_notifee(_Gate(self))
            for channel in (*self._channels.values(), self._fetch_channel):
                self._host.set_stream_handler(channel.protocol, functools.partial(self._serve, channel))
            async with self._host.run(listen_addrs=self._listen):
                network = self._host.get_network()
                await network.auto_connector.stop()  # defect 9: it would dial any peer in the peerstore
                for peer in self._peers.values():
                    network.protect(peer.pid, "concilium-member")  # never pruned in a connection flood
                for peer in self._peers.values():
                    nursery.start_soon(self._supervised, f"dialer {_short(peer.id)}", self._dial_loop, peer)
                    for channel in self._channels.values():
                        name = f"sender {channel.name} {_short(peer.id)}"
                        nursery.start_soon(self._supervised, name, self._send_loop, peer, channel)
                self._started = True
                self._log.info("transport %s listening on %s", _short(self.peer_id), self.listen_addrs())
                task_status.started()
                await trio.sleep_forever()

    def send(self, to: str, data: bytes, kind: str) -> None:
        """Queue ``data`` for ``to``; never blocks, never raises for peer reasons (drops are counted).

        Raises ``ValueError`` for an unknown ``kind`` or empty ``data`` (local bugs)."""
        channel = self._channel_of(kind)
        peer = self._peers.get(to)
        size = len(data)
        if size == 0:
            raise ValueError("an empty frame (the receiver would count it as a bad frame)")
        if peer is None:
            self._dropped["to_self" if to == self.peer_id else "unknown_peer"] += 1
            return
        if size > channel.frame_max or size > self.limits.queue_bytes_max:
            self._log.warning("not sending a %d-byte %s frame to %s: above the cap", size, kind, _short(to))
            self._dropped["too_large"] += 1
            return
        if self._is_banned(peer):
            self._dropped["to_banned"] += 1
            return
        self._seq += 1
        peer.queues[channel.name].append(_Queued(self._seq, bytes(data), kind))
        peer.queued_bytes += size
        while peer.queued_bytes > self.limits.queue_bytes_max:  # drop the oldest frame of either queue
            oldest = min((q for q in peer.queues.values() if q), key=lambda q: q[0].seq)
            peer.queued_bytes -= len(oldest.popleft().data)
            self._dropped["queue_full"] += 1
        peer.queued[channel.name].set()

    def discard_queued(self, kind: str) -> int:
        """Drop every frame of ``kind`` still queued for any peer (not the one being written); how many. A node
        calls it for its updates when its round moves on: an update for a round the network has
        decided would reach no one in time, and on a slow link it would delay the next round's update behind it,
        so a member that missed one round would miss every later one too."""
        channel = self._channel_of(kind)
        dropped = 0
        for peer in self._peers.values():
            queue = peer.queues[channel.name]
            keep = [q for q in queue if q.kind != kind]
            if len(keep) == len(queue):
                continue
            for q in queue:
                if q.kind == kind:
                    peer.queued_bytes -= len(q.data)
                    dropped += 1
            queue.clear()
            queue.extend(keep)
        self._dropped["superseded"] += dropped
        return dropped

    def listen_addrs(self) -> list[str]:
        """The addresses this node listens on, with ``/p2p/<peer id>`` (port 0 resolved)."""
        if not self._started:
            raise RuntimeError("the transport is not listening yet")
        return [str(a) for a in self._host.get_addrs()]

    def connected(self) -> list[str]:
        """Member peer ids with an open connection, sorted."""
        return [p.id for p in self._peers.values() if self._is_connected(p)]

    def add_address(self, peer: str, addr: str) -> None:
        """Remember a dial address of a member (``/ip4/.../tcp/...``, optionally ending ``/p2p/<peer>``)."""
        state = self._peers.get(peer)
        if state is None:
            raise ValueError(f"{peer} is not a member (or is this node)")
        try:
            maddr = multiaddr.Multiaddr(addr)
        except Exception as exc:  # py-multiaddr raises several unrelated types for bad text
            raise ValueError(f"bad multiaddr {addr!r}: {exc}") from exc
        if "/p2p/" in addr:
            head, _, tail = addr.partition("/p2p/")
            if tail != peer:
                raise ValueError(f"address {addr!r} names another peer than {peer}")
            maddr = multiaddr.Multiaddr(head)
        if str(maddr) not in {str(a) for a in state.addrs}:
            state.addrs.append(maddr)
            self._changed(state)

    @property
    def stats(self) -> TransportStats:
        return TransportStats(
            messages_out=Counter(self._messages_out), bytes_out=Counter(self._bytes_out),
            messages_in=Counter(self._messages_in), bytes_in=Counter(self._bytes_in),
            dropped=Counter(self._dropped), bans=self._bans,
            banned=tuple(p.id for p in self._peers.values() if self._is_banned(p)),
            dials_failed=self._dials_failed, restarts=self._restarts,
        )  # fmt: skip

    # ---------------------------------------------------------------- inbound

    async def _serve(self, channel: _Channel, stream: INetStream) -> None:
        """The stream handler. Nothing may escape it: libp2p would crash the process (defect 1)."""
        peer_id = "?"
        try:
            peer_id = str(stream.muxed_conn.peer_id)
            peer = self._peers.get(peer_id)
            if peer is None:
                refusal: str | None = "non_member"
            elif self._is_banned(peer):
                refusal = "banned"
            elif peer.inbound_streams >= self.limits.inbound_streams_per_peer_max:
                refusal = "too_many_streams"
            else:
                refusal = None
            if peer is None or refusal is not None:
                self._dropped[f"stream_{refusal}"] += 1
                self._log.info("refusing a %s stream from %s: %s", channel.name, _short(peer_id), refusal)
                await self._reset(stream)
                return
            peer.inbound_streams += 1
            try:
                if channel is self._fetch_channel:
                    await self._serve_fetch(peer, stream)
                else:
                    await self._read_frames(channel, peer, stream)
            finally:
                peer.inbound_streams -= 1
        except Exception:
            self._dropped["handler_error"] += 1
            self._log.exception("%s stream from %s failed; resetting it", channel.name, _short(peer_id))
            await self._reset(stream)

    async def _read_frames(self, channel: _Channel, peer: _Peer, stream: INetStream) -> None:
        limits = self.limits
        reserved = 0

        def admit(size: int) -> bool:  # the peer's inbound byte budget, held until the frame is handled
            nonlocal reserved
            if peer.inbound_bytes + size > limits.inbound_bytes_per_peer_max:
                return False
            peer.inbound_bytes += size
            reserved = size
            return True

        while True:
            try:
                try:
                    data = await self._read(stream, channel.frame_max, admit=admit)
                except FrameError as bad:
                    self._log.warning("bad %s frame from %s: %s", channel.name, _short(peer.id), bad)
                    self._bad_frame(peer, bad.reason)
                    await self._reset(stream)
                    return
                if data is None:  # clean end at a frame boundary
                    await self._close(stream)
                    return
                if self._is_banned(peer):
                    self._dropped["from_banned"] += 1
                    await self._reset(stream)
                    return
                self._messages_in[channel.name] += 1
                self._bytes_in[channel.name] += len(data)
                try:
                    pending = self._on_frame(peer.id, data)
                    data = None  # not kept alive (up to a 256 MiB blob) while the handler decodes it or waits
                    if pending is not None:
                        await pending
                except FrameError as bad:  # the payload did not decode: as bad as a broken frame
                    self._log.warning("bad %s frame from %s: %s", channel.name, _short(peer.id), bad)
                    self._bad_frame(peer, bad.reason)
                except Exception:
                    self._dropped["on_frame_error"] += 1
                    self._log.exception("on_frame raised for a %s frame from %s", channel.name, _short(peer.id))
                finally:
                    data = pending = None
            finally:
                peer.inbound_bytes -= reserved
                reserved = 0

    async def _serve_fetch(self, peer: _Peer, stream: INetStream) -> None:
        """Answer the :class:`BlobRequest` frames of one fetch stream, in order, until the asker closes it."""
        while True:
            try:
                data = await self._read(stream, REQUEST_FRAME_MAX)
                if data is None:
                    await self._close(stream)
                    return
                try:
                    request = BlobRequest.decode(data, bytes_max=REQUEST_FRAME_MAX,
                                                 budget=REQUEST_BUDGET)  # fmt: skip
                except DecodeError as exc:
                    raise FrameError("malformed", str(exc)) from None
            except FrameError as bad:
                self._log.warning("bad fetch request from %s: %s", _short(peer.id), bad)
                self._bad_frame(peer, bad.reason)
                await self._reset(stream)
                return
            if self._is_banned(peer):
                self._dropped["from_banned"] += 1
                await self._reset(stream)
                return
            blob = self._servable(request.digest)
            if blob is None or request.offset >= len(blob):  # (a served blob is never empty)
                empty = BlobChunk(digest=request.digest, offset=request.offset, total=0, data=b"").encode()
                parts: tuple[bytes | memoryview, ...] = (encode_header(len(empty)) + empty,)
            else:  # the frame in three writes: header and head, the piece of the blob (not copied here), tail
                end = min(len(blob), request.offset + request.length)
                head, tail = chunk_frame(digest=request.digest, offset=request.offset, total=len(blob),
                                         size=end - request.offset)  # fmt: skip
                parts = (encode_header(len(head) + end - request.offset + len(tail)) + head,
                         memoryview(blob)[request.offset : end], tail)  # fmt: skip
            del blob
            if not await self._write_parts(stream, parts):
                await self._reset(stream)
                return
            self._messages_out["chunk"] += 1
            self._bytes_out["chunk"] += sum(map(len, parts)) - HEADER_BYTES

    def _servable(self, digest: bytes) -> bytes | None:
        """``serve_blob(digest)``, memoized while a fetch runs: one lookup per blob, not one per chunk. The memo
        holds the blobs served last, ``data_frame_max`` bytes in all at most (always the newest one)."""
        blob = self._serving.get(digest)
        if blob is not None:
            self._serving.move_to_end(digest)
            return blob
        if self._serve_blob is None:
            return None
        try:
            blob = self._serve_blob(digest)
        except Exception:
            self._dropped["serve_blob_error"] += 1
            self._log.exception("serve_blob raised")
            return None
        if not blob:
            return None
        self._serving[digest] = blob
        self._serving_bytes += len(blob)
        while self._serving_bytes > self.limits.data_frame_max and len(self._serving) > 1:
            _, old = self._serving.popitem(last=False)
            self._serving_bytes -= len(old)
        return blob

    async def fetch(self, to: str, digest: bytes, *, size_max: int | None = None) -> bytes | None:
        """The blob ``digest`` from member ``to``, fetched in chunks over one fetch stream and digest-checked;
        None if ``to`` does not hold it, is not connected, or fails (counted in ``stats.dropped``). Never
        raises for peer reasons. A peer that sends chunks that contradict its requests, a total above
        ``size_max`` (default ``limits.data_frame_max``), or bytes of another digest is charged a bad frame."""
        if len(digest) != 32:
            raise ValueError("a digest is 32 bytes")
        cap = min(size_max or self.limits.data_frame_max, self.limits.data_frame_max)
        peer = self._peers.get(to)
        if peer is None or self._is_banned(peer) or not self._is_connected(peer):
            self._dropped["fetch_unreachable"] += 1
            return None
        stream = await self._open(peer, self._fetch_channel)
        if stream is None:
            self._dropped["fetch_failed"] += 1
            return None
        try:
            blob = await self._fetch_chunks(peer, stream, digest, cap)
        except FrameError as bad:
            self._log.warning("bad fetch answer from %s: %s", _short(peer.id), bad)
            self._bad_frame(peer, bad.reason)
            await self._reset(stream)
            return None
        except _NET_ERRORS as exc:
            self._log.info("fetch from %s failed: %r", _short(peer.id), exc)
            self._dropped["fetch_failed"] += 1
            await self._reset(stream)
            return None
        await self._close(stream)
        return blob

    async def _fetch_chunks(self, peer: _Peer, stream: INetStream, digest: bytes, cap: int) -> bytes | None:
        """The blob, asked for in chunks of :data:`CHUNK_BYTES`, :data:`WINDOW` requests in flight. The first answer
        is decoded (it tells the total); every later one is known but for its data (``chunk_frame``), so its data
        is read straight into the blob's buffer and the rest checked by comparison (``read_frame_into``)."""
        limits = self.limits
        sent: deque[tuple[int, int]] = deque()  # (offset, length) of the requests in flight, in order
        header_timeout_s = limits.read_base_s + RESPONSE_FRAME_MAX / limits.read_bytes_per_s_min  # due at once

        async def ask(offset: int, length: int) -> None:
            frame = BlobRequest(digest=digest, offset=offset, length=length).encode()
            if not await self._write(stream, frame):
                raise trio.BrokenResourceError("fetch request not written")
            self._messages_out["fetch"] += 1
            self._bytes_out["fetch"] += len(frame)
            sent.append((offset, length))

        await ask(0, CHUNK_BYTES)  # the first answer tells the total
        data = await self._read(stream, RESPONSE_FRAME_MAX, header_timeout_s=header_timeout_s)
        if data is None:
            raise FrameError("truncated", "the server closed the fetch stream early")
        try:
            first = BlobChunk.decode(data, bytes_max=RESPONSE_FRAME_MAX, budget=CHUNK_BUDGET)
        except DecodeError as exc:
            raise FrameError("malformed", str(exc)) from None
        self._count_chunk(len(data))
        del data
        sent.popleft()
        if first.digest != digest or first.offset != 0:
            raise FrameError("malformed", "a chunk that answers another request")
        if first.total == 0:
            self._dropped["fetch_not_held"] += 1
            return None
        total = first.total
        if total > cap:
            raise FrameError("oversized", f"a blob of {total} bytes announced, cap {cap}")
        if len(first.data) != min(CHUNK_BYTES, total):
            raise FrameError("malformed", "a chunk whose size contradicts its total")
        buf = blank_buffer(total)  # the blob, chunk after chunk (each chunk is read as the next one)
        buf.write(first.data)
        del first
        next_offset = CHUNK_BYTES
        while next_offset < total or sent:
            while next_offset < total and len(sent) < WINDOW:
                await ask(next_offset, min(CHUNK_BYTES, total - next_offset))
                next_offset += CHUNK_BYTES
            offset, length = sent.popleft()
            assert buf.tell() == offset, "requests are sent in order and each is answered in full"
            head, tail = chunk_frame(digest=digest, offset=offset, total=total, size=length)
            await read_frame_into(stream, buf.write, head=head, body_size=length, tail=tail,
                                  header_timeout_s=header_timeout_s, read_base_s=limits.read_base_s,
                                  read_bytes_per_s_min=limits.read_bytes_per_s_min)  # fmt: skip
            self._count_chunk(len(head) + length + len(tail))
        with buf.getbuffer() as blob:  # a view of the buffer's own bytes, not a copy (nothing else refers to them)
            actual = await trio.to_thread.run_sync(_sha256, blob)
        if actual != digest:
            raise FrameError("malformed", "the fetched blob does not match its digest")
        return buf.getvalue()

    def _count_chunk(self, size: int) -> None:
        self._messages_in["fetch"] += 1
        self._bytes_in["fetch"] += size

    async def _read(self, stream: INetStream, frame_max: int, *, header_timeout_s: float | None = None,
                    admit: Callable[[int], bool] | None = None) -> bytes | None:
        """:func:`read_frame` under this transport's deadlines (the idle timeout unless ``header_timeout_s``)."""
        limits = self.limits
        return await read_frame(
            stream,
            frame_max=frame_max,
            header_timeout_s=limits.header_timeout_s if header_timeout_s is None else header_timeout_s,
            read_base_s=limits.read_base_s,
            read_bytes_per_s_min=limits.read_bytes_per_s_min,
            admit=admit,
        )

    def _bad_frame(self, peer: _Peer, reason: str) -> None:
        self._dropped[reason] += 1
        now = trio.current_time()
        peer.bad_at.append(now)
        while peer.bad_at and peer.bad_at[0] < now - self.limits.bad_frames_window_s:
            peer.bad_at.popleft()
        if len(peer.bad_at) > self.limits.bad_frames_max and not self._is_banned(peer):
            peer.bad_at.clear()
            peer.banned_until = now + self.limits.ban_s
            self._bans += 1
            self._log.warning("banning %s for %g s: too many bad frames", _short(peer.id), self.limits.ban_s)
            for queue in peer.queues.values():
                self._dropped["to_banned"] += len(queue)
                queue.clear()
            peer.queued_bytes = 0
            self._changed(peer)
            if self._nursery is not None:
                self._nursery.start_soon(self._disconnect, peer.pid)

    def _on_connection(self, conn: INetConn, *, opened: bool) -> None:
        peer_id = str(conn.muxed_conn.peer_id)
        peer = self._peers.get(peer_id)
        if peer is not None:
            self._changed(peer)
        if opened and (peer is None or self._is_banned(peer)):
            reason = "non_member" if peer is None else "banned"
            self._dropped[f"connection_{reason}"] += 1
            self._log.info("closing the connection from %s: %s", _short(peer_id), reason)
            if self._nursery is not None:
                self._nursery.start_soon(self._close_connection, conn)

    # ---------------------------------------------------------------- outbound

    async def _send_loop(self, peer: _Peer, channel: _Channel) -> None:
        queue = peer.queues[channel.name]
        stream: INetStream | None = None
        backoff = self.limits.backoff_min_s
        while True:
            if not queue:
                # close an idle stream before the receiver's header timeout would count it as a bad frame
                idle_s = self.limits.header_timeout_s / 2 if stream is not None else math.inf
                peer.queued[channel.name] = event = trio.Event()
                with trio.move_on_after(idle_s):
                    await event.wait()
                if not queue and stream is not None:
                    await self._close(stream)
                    stream = None
                continue
            if stream is None:
                if self._is_banned(peer) or not self._is_connected(peer):
                    await self._wait_changed(peer)
                    continue
                stream = await self._open(peer, channel)
                if stream is None:
                    await trio.sleep(backoff)
                    backoff = min(2 * backoff, self.limits.backoff_max_s)
                    continue
                backoff = self.limits.backoff_min_s
            item = queue.popleft()
            peer.queued_bytes -= len(item.data)
            if await self._write(stream, item.data):
                self._messages_out[item.kind] += 1
                self._bytes_out[item.kind] += len(item.data)
                continue
            self._log.info("%s stream to %s failed; reopening", channel.name, _short(peer.id))
            await self._reset(stream)
            stream = None
            if item.retried:
                self._dropped["write_failed"] += 1
            else:  # a stale stream (the peer restarted, or closed it): one more try on a fresh one
                item.retried = True
                queue.appendleft(item)
                peer.queued_bytes += len(item.data)

    async def _open(self, peer: _Peer, channel: _Channel) -> INetStream | None:
        with trio.move_on_after(self.limits.dial_timeout_s):
            try:
                return await self._host.new_stream(peer.pid, [channel.protocol])
            except _NET_ERRORS as exc:
                self._log.info("cannot open %s to %s: %r", channel.protocol, _short(peer.id), exc)
                return None
        self._log.info("opening %s to %s timed out", channel.protocol, _short(peer.id))
        return None

    async def _write(self, stream: INetStream, data: bytes, *, framed: bool = False) -> bool:
        """Write one frame: its header and ``data``, or ``data`` alone if it starts with its header (``framed``)."""
        if framed:
            return await self._write_parts(stream, (data,))
        if len(data) <= _ONE_WRITE_MAX:  # one write, one encrypted frame: a small message is one packet
            return await self._write_parts(stream, (encode_header(len(data)) + data,))
        return await self._write_parts(stream, (encode_header(len(data)), data))  # split by the muxer anyway: no copy

    async def _write_parts(self, stream: INetStream, parts: Sequence[bytes | memoryview]) -> bool:
        """Write one frame given as consecutive parts, its header included, each as it is (not joined), under one
        deadline; False if it failed or timed out."""
        deadline_s = self.limits.write_timeout_s + sum(map(len, parts)) / self.limits.read_bytes_per_s_min
        with trio.move_on_after(deadline_s):
            try:
                for part in parts:
                    await stream.write(part)  # type: ignore[arg-type]  # (a memoryview: the muxer slices it)
                return True
            except _NET_ERRORS as exc:
                self._log.debug("write failed: %r", exc)
                return False
        return False

    # ---------------------------------------------------------------- connection supervisor

    async def _dial_loop(self, peer: _Peer) -> None:
        backoff = self.limits.backoff_min_s
        attempt = 0
        while True:
            if self._is_banned(peer):
                await trio.sleep_until(peer.banned_until)
                continue
            if self._is_connected(peer) or not peer.addrs:
                await self._wait_changed(peer)
                continue
            if await self._dial(peer):
                # a connection the peer drops at once (it refuses us) must not become a dial storm:
                # only one that lasts backoff_max_s resets the backoff
                with trio.move_on_after(self.limits.backoff_max_s) as lasted:
                    while self._is_connected(peer):
                        await self._wait_changed(peer)
                if lasted.cancelled_caught:
                    backoff, attempt = self.limits.backoff_min_s, 0
                    continue
            else:
                self._dials_failed += 1
            attempt += 1
            digest = hashlib.sha256(f"{self.peer_id}|{peer.id}|{attempt}".encode()).digest()
            jitter = 0.5 + 0.5 * int.from_bytes(digest[:2], "big") / 0xFFFF  # deterministic, in [0.5, 1]
            with trio.move_on_after(backoff * jitter):
                await self._addresses_changed(peer)  # a new address cuts the wait short
            backoff = min(2 * backoff, self.limits.backoff_max_s)

    async def _resolved(self, addrs: Sequence[multiaddr.Multiaddr]) -> list[multiaddr.Multiaddr]:
        """``addrs`` with every ``/dns``, ``/dns4`` or ``/dns6`` host resolved to ``/ip4`` or ``/ip6`` addresses
        (py-libp2p's TCP transport dials IP addresses only); a name that does not resolve is logged and left out."""
        import socket  # noqa: PLC0415

        out: list[multiaddr.Multiaddr] = []
        for a in addrs:
            parts = str(a).split("/")
            if len(parts) < 5 or parts[1] not in ("dns", "dns4", "dns6"):
                out.append(a)
                continue
            family = {"dns4": socket.AF_INET, "dns6": socket.AF_INET6}.get(parts[1], 0)
            try:
                infos = await trio.socket.getaddrinfo(parts[2], int(parts[4]), family=family, type=socket.SOCK_STREAM)
            except (OSError, ValueError) as exc:
                self._log.info("resolving %s failed: %r", a, exc)
                continue
            for fam, _, _, _, sockaddr in infos:
                ip = "ip4" if fam == socket.AF_INET else "ip6"
                m = multiaddr.Multiaddr("/".join(["", ip, str(sockaddr[0]), *parts[3:]]))
                if str(m) not in {str(x) for x in out}:
                    out.append(m)
        return out

    async def _dial(self, peer: _Peer) -> bool:
        self._host.get_network().unblock_peer(peer.pid)  # defect 6: the negative dial cache
        with trio.move_on_after(self.limits.dial_timeout_s):
            try:
                addrs = await self._resolved(peer.addrs)
                if not addrs:
                    return False
                await self._host.connect(PeerInfo(peer.pid, addrs))
                self._log.info("connected to %s", _short(peer.id))
                return True
            except _NET_ERRORS as exc:
                self._log.info("dialing %s failed: %r", _short(peer.id), exc)
                return False
        self._log.info("dialing %s timed out", _short(peer.id))
        return False

    async def _addresses_changed(self, peer: _Peer) -> None:
        known = len(peer.addrs)
        while len(peer.addrs) == known:
            await peer.changed.wait()

    # ---------------------------------------------------------------- helpers

    async def _supervised(self, name: str, loop: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run ``loop`` forever, restarting it with backoff when it crashes (``Cancelled`` passes)."""
        backoff = self.limits.backoff_min_s
        while True:
            try:
                await loop(*args)
                return
            except Exception:
                self._restarts += 1
                self._log.exception("%s crashed; restarting in %.1f s", name, backoff)
            await trio.sleep(backoff)
            backoff = min(2 * backoff, self.limits.backoff_max_s)

    def _channel_of(self, kind: str) -> _Channel:
        if kind in MSG_KINDS:
            return self._channels["msg"]
        if kind in DATA_KINDS:
            return self._channels["blob"]
        raise ValueError(f"unknown frame kind {kind!r}")

    def _is_banned(self, peer: _Peer) -> bool:
        return trio.current_time() < peer.banned_until

    def _is_connected(self, peer: _Peer) -> bool:
        if not self._started:
            return False
        return any(not c.is_closed for c in self._host.get_network().get_connections(peer.pid))

    @staticmethod
    def _changed(peer: _Peer) -> None:
        peer.changed.set()
        peer.changed = trio.Event()

    async def _wait_changed(self, peer: _Peer) -> None:
        with trio.move_on_after(_POLL_S):
            await peer.changed.wait()

    async def _disconnect(self, pid: ID) -> None:
        with trio.move_on_after(_CLOSE_TIMEOUT_S):
            try:
                await self._host.get_network().close_peer(pid)
            except _NET_ERRORS as exc:
                self._log.info("closing %s: %r", _short(str(pid)), exc)

    async def _close_connection(self, conn: INetConn) -> None:
        with trio.move_on_after(_CLOSE_TIMEOUT_S):
            try:
                await conn.close()
            except _NET_ERRORS as exc:
                self._log.info("closing a connection: %r", exc)

    @staticmethod
    async def _reset(stream: INetStream) -> None:
        with trio.move_on_after(_CLOSE_TIMEOUT_S):
            try:
                await stream.reset()
            except _NET_ERRORS:
                pass

    @staticmethod
    async def _close(stream: INetStream) -> None:
        with trio.move_on_after(_CLOSE_TIMEOUT_S):
            try:
                await stream.close()
            except _NET_ERRORS:
                pass
