"""Entering a height, and handing a height over to a re-drawn committee (committee attempts).

Each height starts at view 0 with the committee the previous block named: its members in PROPOSE (the primary asks
its node for a proposal), the others observing (:meth:`Heights._enter_height`). A height that outlasts the genesis'
``redraw_ticks`` moves to the next committee *attempt* (``ledger.ATTEMPT_VIEWS``): a committee re-drawn from every
member by a hash of the genesis, the height and the attempt, so that no member picks it, starting at the attempt's
first view with a view change (:meth:`Heights._enter_attempt`). A replica whose clock runs behind follows ``f + 1``
members of a later attempt (:meth:`Heights._on_later_attempt`).
"""

from __future__ import annotations

from ledger import ATTEMPT_VIEWS, ChainState, SignedMessage

from consensus._effects import Broadcast, Effect, RequestProposal
from consensus._errors import RemoteProtocolError
from consensus._messages import KIND_HEADER, Message
from consensus._replica_types import Phase
from consensus._state import NEVER, SIGNING_ORDER, HeightLog, HeldDecided, ReplicaState
from consensus._votes import Quorum

__all__ = ["Heights"]


class Heights(ReplicaState):
    """Heights and committee attempts (a mixin of :class:`~consensus.Replica`)."""

    def _enter_height(self, state: ChainState, fx: list[Effect]) -> None:
        """Start the height after ``state``, the last decided chain state."""
        self._state = state
        self._height = state.height + 1
        self._attempt = 0
        self._height_entered_at = self._now
        self._later_attempt_senders = {}
        self._set_committee(state.committee)
        self._log = HeightLog()
        self._votes.start_height(self._height)
        self._view = 0
        self._sync_turn = 0
        cfg = self._cfg
        self._retransmit_at = self._now + cfg.timeout_ticks_retransmit
        if self._in_committee:
            self._phase = Phase.PROPOSE
            self._deadline = self._now + cfg.timeout_ticks_start + cfg.timeout_ticks_propose
            if self._primary(0) == self._peer_id:
                fx.append(RequestProposal(height=self._height, view=0))
        else:
            self._phase = Phase.OBSERVE
            self._deadline = self._now + cfg.timeout_ticks_start + cfg.timeout_ticks_sync
        self._release_held()
        if self._lazy and not self._in_committee:
            self._enter_height_lazily(state, fx)
            return
        seen = self._highest_seen
        held = any(b.owner is HeldDecided.BLOCK for b in self._buffer) or any(m.block is not None for m, _ in self._inbox)
        if seen is not None and seen[0] > self._height and not held:
            self._request_sync(seen[1], fx)  # catching up: the next batch at once

    def _enter_height_lazily(self, state: ChainState, fx: list[Effect]) -> None:
        """A lazy observer at its new height: catching up, it asks for the next batch of headers; without a role here
        and no later height known, it sleeps until a message wakes it."""
        if self._behind():
            assert self._decided_elsewhere is not None
            self._deadline = self._now + self._cfg.header_retry_ticks  # catching up: retry soon if nothing comes
            if not any(m.block is not None or (m.signed is not None and m.signed.kind == KIND_HEADER)
                       for m, _ in self._inbox):
                self._request_sync(self._decided_elsewhere[1], fx, headers=True)  # the next batch of headers
        elif self._needs_payload is not None and not self._needs_payload(state):
            self._deadline = NEVER

    def _next_attempt_at(self) -> int:
        """The tick this height moves to its next committee attempt (never without ``redraw_ticks``). A lazy
        observer outside the committee sleeps through it unless it sits on the next attempt's committee: the
        members that move on wake it (:meth:`_enter_attempt`), and a sleeper at a height long decided elsewhere
        does not wake every ``redraw_ticks`` for nothing."""
        if not self._attempt_ticks or self._behind():  # (catching up: the height is decided elsewhere)
            return NEVER
        if self._lazy and not self._in_committee:
            key = (self._height, self._attempt + 1)
            if self._next_attempt_role[0] != key:
                nxt = self._ctx.view_committee(self._state, self._height, (self._attempt + 1) * ATTEMPT_VIEWS)
                self._next_attempt_role = (key, self._peer_id in nxt)
            if not self._next_attempt_role[1]:
                return NEVER
        return self._height_entered_at + self._attempt_ticks * (self._attempt + 1)

    def _enter_attempt(self, attempt: int, fx: list[Effect]) -> None:
        """Hand this height to the committee of ``attempt`` (``ChainContext.view_committee``), at the first view of
        the attempt. A member of it starts there with a VIEW-CHANGE (pBFT §4.5.2) carrying its prepared certificate,
        if any, so the new primary re-proposes the highest one a quorum of the new committee holds; it sends that
        VIEW-CHANGE to the previous committee as well, whose members that decided the height answer with the block
        (a replica past a height serves a view change of it). A replica outside the new committee observes (a lazy
        one without a role at the height sleeps, as at a height it has no role at) after it shows the new committee
        the height with the last message it signed there. Safety across attempts rests on that answer arriving
        (docs/sampling.md)."""
        assert attempt > self._attempt, (attempt, self._attempt)
        previous = self._committee
        self._attempt = attempt
        self._later_attempt_senders = {a: got for a, got in self._later_attempt_senders.items() if a > attempt}
        self._set_committee(self._ctx.view_committee(self._state, self._height, attempt * ATTEMPT_VIEWS))
        view = attempt * ATTEMPT_VIEWS
        self._drop_held_before(view)
        if self._in_committee:
            self._start_view_change(view, fx, also=tuple(p for p in previous if p not in self._committee_set))
            return
        self._view = view
        self._phase = Phase.OBSERVE
        self._log.waiting = None
        self._deadline = self._now + self._cfg.timeout_ticks_sync
        needs = self._needs_payload
        if self._lazy and not self._behind() and needs is not None and not needs(self._state):
            self._deadline = NEVER  # a lazy observer without a role here sleeps, as at a height (_enter_height)
        # the new committee's members may sleep (lazy members without a role at their height): the last message
        # this replica signed at this height shows them the height, and they catch up to it (a later height wakes
        # a lazy replica), then enter the attempt on their own timer or on f + 1 of its members' messages
        last = max(self._log.sent.items(), key=lambda kv: (kv[0][1], SIGNING_ORDER[kv[0][0]]), default=None)
        if last is not None:
            fx.append(Broadcast(to=self._committee, message=last[1]))

    def _on_later_attempt(self, s: SignedMessage, attempt: int, message: Message, sender: str | None,
                          fx: list[Effect]) -> None:
        """A message of this height from a later committee attempt than ours: its committee's members moved on
        (their clocks run ahead of ours). Once ``f + 1`` of them did (at least one honest), follow them."""
        due = (self._now - self._height_entered_at) // self._attempt_ticks + 1 if self._attempt_ticks else 0
        if not self._attempt_ticks or attempt > due + 1:
            raise RemoteProtocolError("future_view", f"{s.kind} of committee attempt {attempt} (this replica: "
                                      f"{self._attempt})")
        quorum = Quorum(self._ctx.committee_view(self._ctx.view_committee(self._state, self._height, s.view)))
        if s.signer not in quorum.members:
            raise RemoteProtocolError("not_in_committee", f"{s.signer} is not in committee attempt {attempt}")
        self._verify(s)
        got = self._later_attempt_senders.setdefault(attempt, set())
        got.add(s.signer)
        if quorum.weakly_reached(len(got)):
            self._enter_attempt(attempt, fx)
            self._on_message(message, sender, fx)
