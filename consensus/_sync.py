"""Catching up: decided blocks and headers, sync requests, and serving members that lag.

A replica that is not in the height's committee observes. Decided blocks travel as ``Message(block=...)`` and are
accepted at the current height on their certificate alone (:meth:`CatchUp._on_decided`): the first ``f + 1``
committee members (by a hash of the block) send the block to next-committee newcomers; a replica that sees a member
stuck at a height it has decided (its VIEW-CHANGE, a retransmitted vote, a ``sync_request``) asks its node to send it
a batch of blocks from the block store (``SendBlocks``, rate limited: :meth:`CatchUp._serve`); a replica that sees a
member two heights ahead asks it; observers ask a committee member in turn every ``timeout_ticks_sync``
(:meth:`CatchUp._on_sync_timer`).

A replica given ``next_committee`` (coordinator mode, where the rules fix the next committee from the state) may
instead follow by ``decided_header``: the header and certificate, checked by ``ledger.apply_header``, emitted as
``CommitHeader`` with the payload's fields unknown, when its host needs no payload (``needs_payload``); otherwise it
asks the sender for the block (:meth:`CatchUp._on_decided_header`). A *lazy* replica catching up asks for batches of
headers (``header_sync_request``), and with ``committee_epoch`` skips to the last header of each epoch.
"""

from __future__ import annotations

from ledger import ChainState, LedgerError, SignedMessage, apply_header

from consensus._certify import verify_decided_block
from consensus._effects import CommitHeader, Effect, Send, SendBlocks
from consensus._errors import RemoteProtocolError
from consensus._messages import (
    Decided,
    DecidedHeader,
    Message,
    SyncRequest,
    header_sync_request_message,
    sync_request_message,
)
from consensus._replica_types import Phase
from consensus._state import NEVER, HeldDecided, ReplicaState

__all__ = ["CatchUp"]


class CatchUp(ReplicaState):
    """Catching up and serving laggards (a mixin of :class:`~consensus.Replica`)."""

    # --- decided blocks and headers --------------------------------------------------------------------------------

    def _on_decided(self, d: Decided, sender: str | None, fx: list[Effect]) -> None:
        """A decided block: taken at this height (or, skipping, a later one of its committee epoch) on its
        certificate; held, and its sender asked for the blocks between, if it is of a later height."""
        b = d.block
        if b.height < self._height:
            if self._lazy and self._committee_epoch > 1:  # skipped past (a header of its epoch's end came first)
                self._duplicates += 1
                return
            raise RemoteProtocolError("stale_height", f"decided block {b.height} < {self._height}")
        if b.height > self._height and not self._skips_to(b.height):
            self._note_later_height(b.height, sender, fx, decided=b.height)
            if b.height > self._height + self._cfg.height_window and not self._by_headers:
                raise RemoteProtocolError("future_height", f"decided block {b.height}")
            # (a lazy observer holds the block that woke it however far ahead: it catches up to it by headers; the
            # buffer's bounds per sender still hold)
            if not self._holds_decided(HeldDecided.BLOCK, b.height):
                self._hold(b.height, 0, HeldDecided.BLOCK, Message(block=b), sender)
            self._ask_block(sender, fx, headers=self._by_headers)
            return
        try:  # the successor of this height, or (a skip) a later block of its committee epoch
            state = verify_decided_block(self._ctx, self._state, b, epoch=self._committee_epoch)
        except LedgerError as e:
            raise RemoteProtocolError("bad_certificate", str(e)) from None
        self._decide(b, fx, state=state)

    def _on_decided_header(self, d: DecidedHeader, sender: str | None, fx: list[Effect]) -> None:
        """A decided block announced by its header and certificate (``decided_header``). Taken as decided only by
        a replica outside the height's committee that can follow headers (``next_committee``) and whose host
        needs no payload; otherwise the sender is asked for the whole block. Checked as ``ledger.apply_header``
        checks it: the certificate of the current committee proves the header (of this height, or with
        ``committee_epoch`` a skip to a later height of this epoch)."""
        h = d.header.height
        if h < self._height:
            if self._lazy:  # the rest of a batch of headers, overtaken by the block this replica needed whole
                self._duplicates += 1
                return
            raise RemoteProtocolError("stale_height", f"decided header {h} < {self._height}")
        if h > self._height and not self._skips_to(h):
            self._note_later_height(h, sender, fx, decided=h)
            window = self._header_span if self._by_headers else self._cfg.height_window
            if h > self._height + window:  # (a lazy observer holds a batch of headers that arrives out of order)
                raise RemoteProtocolError("future_height", f"decided header {h}")
            if self._by_headers and not self._holds_decided(HeldDecided.HEADER, h):
                self._hold(h, 0, HeldDecided.HEADER, Message(signed=d.signed), sender)  # a batch overtaken on the way
            self._ask_block(sender, fx, headers=self._by_headers)  # the heights between are not at hand
            return
        if self._in_committee or self._next_committee is None:
            self._ask_block(sender, fx)
            return
        try:
            state = apply_header(self._ctx, self._state, d.header, d.certificate,
                                 next_committee=self._next_committee(self._state_before(d)), epoch=self._committee_epoch)
        except LedgerError as e:
            raise RemoteProtocolError("bad_certificate", str(e)) from None
        if self._needs_payload is None or self._needs_payload(state):
            self._ask_block(sender, fx)
            return
        fx.append(CommitHeader(header=d.header, certificate=d.certificate, state=state))
        self._decided += 1
        self._enter_height(state, fx)

    def _state_before(self, d: DecidedHeader) -> ChainState:
        """The chain state the next committee after ``d`` is drawn from: ours, or for a skip the state before the
        header, known here by what the rules read of it (its hash, its height, the epoch's committee); the ledger
        checks that the header is of this epoch."""
        header = d.header
        if header.height <= self._height:
            return self._state
        return ChainState(height=header.height - 1, head_hash=header.prev_hash, time_ms=self._state.time_ms,
                          committee=self._state.committee, model_digest=b"", state_digest=None)

    # --- serving members behind us ---------------------------------------------------------------------------------

    def _on_sync_request(self, req: SyncRequest, fx: list[Effect]) -> None:
        if req.signed.height >= self._height:
            raise RemoteProtocolError("sync_unavailable", f"block {req.signed.height} is not decided here")
        self._serve(req.signed, fx, headers=req.headers)

    def _serve(self, s: SignedMessage, fx: list[Effect], *, headers: bool = False) -> None:
        """Have the node send ``s.signer`` our decided blocks (``headers``: their headers and certificates) from
        ``s.height`` on (one batch), at most once per sync timeout per (peer, height, headers). The blocks come
        from the node's block store."""
        key = (s.signer, s.height, headers)
        last = self._served_at.get(key)
        every = self._cfg.header_retry_ticks if headers else self._cfg.timeout_ticks_sync
        if s.height >= self._height or s.signer == self._peer_id or (last is not None and self._now - last < every):
            return
        self._verify(s)
        if len(self._served_at) >= 4 * self._cfg.buffered_messages_max:
            self._served_at.clear()
        self._served_at[key] = self._now
        batch = self._header_span if headers else self._cfg.sync_batch_max
        fx.append(SendBlocks(to=s.signer, start=s.height, stop=min(self._height, s.height + batch), headers=headers,
                             epoch=self._committee_epoch if headers else 1))

    # --- asking members ahead of us --------------------------------------------------------------------------------

    def _note_later_height(self, height: int, peer: str | None, fx: list[Effect], *, decided: int) -> None:
        """A member showed a height beyond ours: remember who, and ask it if we are 2+ heights behind."""
        if peer is None or peer not in self._ctx.members or peer == self._peer_id:
            return
        if self._highest_seen is None or height > self._highest_seen[0]:
            self._highest_seen = (height, peer)
        if self._decided_elsewhere is None or decided > self._decided_elsewhere[0]:
            self._decided_elsewhere = (decided, peer)
        if self._phase is Phase.OBSERVE and self._deadline == NEVER and self._behind():
            self._deadline = self._now + self._cfg.header_retry_ticks  # a sleeping lazy observer: catching up now
        if height > self._height + 1:
            self._request_sync(peer, fx, headers=self._by_headers)

    def _ask_block(self, sender: str | None, fx: list[Effect], *, headers: bool = False) -> None:
        """Ask the member that sent a decided block or header for the whole block(s) (``headers``: their headers)
        from this height on."""
        if sender is not None and sender in self._ctx.members:
            self._request_sync(sender, fx, headers=headers)

    def _request_sync(self, peer: str, fx: list[Effect], *, headers: bool = False) -> None:
        """Ask ``peer`` for decided blocks (or headers) from this height on, at most once per sync timeout per
        (peer, height, headers)."""
        key = (peer, self._height, headers)
        last = self._asked_at.get(key)
        every = self._cfg.header_retry_ticks if headers else self._cfg.timeout_ticks_sync
        if peer == self._peer_id or (last is not None and self._now - last < every):
            return
        if headers:
            until, at = self._header_batch_asked
            if self._height < until and self._now - at < every:
                return  # a batch that covers this height is on its way
            self._note_headers_asked()
        if len(self._asked_at) >= 4 * self._cfg.buffered_messages_max:
            self._asked_at.clear()
        self._asked_at[key] = self._now
        fx.append(Send(to=peer, message=self._sync_message(headers)))

    def _note_headers_asked(self) -> None:
        """A batch of headers asked now covers the heights up to the one the sender showed (it can serve what it
        decided), at most :attr:`_header_span`: no second request for them while it is on its way."""
        shown = self._decided_elsewhere[0] if self._decided_elsewhere is not None else self._height
        self._header_batch_asked = (min(self._height + self._header_span, max(shown + 1, self._height + 1)), self._now)

    def _sync_message(self, headers: bool) -> Message:
        make = header_sync_request_message if headers else sync_request_message
        return make(self._key, self._ctx.chain_id, self._height)

    def _on_sync_timer(self, fx: list[Effect]) -> None:
        """Observer timer: ask the committee members in turn for the decided block (a lazy replica: for headers,
        first from the member that showed it a later height)."""
        peers = self._committee_peers
        headers = self._by_headers
        if headers and self._behind():
            assert self._decided_elsewhere is not None
            peers = (self._decided_elsewhere[1], *peers)
            if self._sync_turn >= len(peers) and self._needs_payload is not None and not self._needs_payload(self._state):
                # every member asked in turn, no header came: the later height shown was not real (an unverified
                # block), or nobody serves it. Without a role here, sleep again until a message shows one.
                self._decided_elsewhere = None
                self._deadline = NEVER
                return
        if peers:
            peer = peers[self._sync_turn % len(peers)]
            self._sync_turn += 1
            fx.append(Send(to=peer, message=self._sync_message(headers)))
            if headers:
                self._note_headers_asked()
        catching_up = headers and self._behind()
        self._deadline = self._now + (self._cfg.header_retry_ticks if catching_up else self._cfg.timeout_ticks_sync)
