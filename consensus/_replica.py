"""The pBFT replica: a sans-I/O state machine running one pBFT instance per height.

Castro & Liskov's pBFT (OSDI '99, "[pBFT §n]" below) mapped onto a committee round (docs/design.md, "A round,
committee mode", step 5): replica set = the height's committee (named by the previous block), quorum ``q`` of ``C``
(``ledger.quorum_size``: ``2f+1`` of ``3f+1`` by default, ``⌊C/2⌋+1`` as the documented, not Byzantine-safe
option), view ``v`` restarting at 0 every height, primary of ``(height, view)`` =
``ledger.primary(committee, genesis_hash, height, view)``.

:class:`Replica` owns the state and routes each input to one handler. Each concern lives in a module of its own, as
a mixin on the shared state:

* ``_normal.py``: the normal case [pBFT §4.2-4.3]: pre-prepare, PREPARE, COMMIT, decide; a backup asks its host
  for a verdict on a proposal (``RequestVerdict``) and waits for it (:meth:`Replica.verdict`); one whose host lacks an
  input to judge it (the verdict is :class:`Pending`: an update blob still on its way) waits on, as a pBFT backup
  waits for a request sent apart from its pre-prepare [Castro & Liskov, TOCS 2002: separate request transmission],
  until the host's next verdict or the view's timer;
* ``_view_change.py``: view changes [pBFT §4.5.2];
* ``_heights.py``: entering a height, and handing it to a re-drawn committee (committee attempts);
* ``_sync.py``: catching up by decided blocks or headers, and serving members that lag;
* ``_durable.py``: the durable record of what the replica signed, and restoring from it [pBFT §4.4-4.5];
* ``_votes.py``: quorum arithmetic, vote tallies and equivocation: every quorum question goes there;
* ``_state.py``: the state they share, the messages held for later, the checks every handler runs;
* ``_replica_types.py``: :class:`ReplicaConfig`, :class:`Phase`, :class:`Pending`, :class:`ReplicaStatus`.

Retransmission: while a view is stuck in a phase, every ``timeout_ticks_retransmit`` the replica
re-sends its own messages of the view to the members that have not shown they have them, and a stuck
VIEW-CHANGE to every member (nothing is re-sent while views make progress). A member that sends a
VIEW-CHANGE for a view this replica has left gets this replica's own VIEW-CHANGE for that view back, so
members split across two views cannot wait for each other for ever.

Validity is an input, as in Malachite (``ProposedValue.validity``): the replica never calls into its host to
judge a proposal. It emits ``RequestVerdict`` and goes on; the host answers with :meth:`Replica.verdict` when it
has judged (at once, as the simulator does, or after re-executing the round in a worker thread, as the network
runtime does). So the replica need not stop after a ``Commit``: a batch of effects may decide several heights, and
the host, executing it in order, judges a proposal of height h + 1 after it applied block h.

A *lazy* replica (``lazy=True``, with ``next_committee``) outside the committee keeps no sync timer while its host
has no role at its height, or its part there is over (:meth:`Replica.rest`), and it knows no later height: it
sleeps through the heights it takes no part in (its host is sent nothing then). When a message shows it a later
height (the proposer pushes the block before a round in which it has a role), it asks the sender for headers
(``header_sync_request``: ``SendBlocks(headers=True)`` there), follows them to that height, and takes whole the
block its host needs.

Idle ticks: an observer with nothing held only counts ticks until its sync deadline; :meth:`Replica.idle_ticks`
says how many, and a host with thousands of observers skips them (:meth:`Replica.skip_ticks`).

Durability [pBFT §4.4-4.5: each replica keeps its log in stable storage]: :meth:`Replica.durable` is the
canonical record of what a restarted replica must not forget about the current height (its view, every
message it signed and sent, its highest prepared certificate with the payload); the host saves it
whenever :attr:`Replica.durable_version` changes, after storing the batch's decided blocks and *before*
it sends the batch's messages, and a replica
built with ``Replica(..., restore=record)`` resumes from it without ever signing a second, different
message for a (height, view, kind) it signed before (see :class:`Replica`). A host that does not
keep the record restarts as a fresh replica, which may vote again at that height, differently.

Pure: no clock, no randomness, no I/O. Peers are iterated in sorted order. Every buffer is bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import NoReturn

from ledger import ATTEMPT_VIEWS, ChainContext, ChainState, KeyPair, Payload, SignedMessage

from consensus._durable import DURABLE_BYTES_MAX, DurableLog
from consensus._effects import Effect, Send
from consensus._errors import DurableStateError, LocalProtocolError, RemoteProtocolError
from consensus._heights import Heights
from consensus._messages import (
    KIND_COMMIT,
    KIND_NEW_VIEW,
    KIND_PRE_PREPARE,
    KIND_PREPARE,
    KIND_VIEW_CHANGE,
    Decided,
    DecidedHeader,
    Message,
    NewView,
    PrePrepare,
    Proposal,
    SyncRequest,
    ViewChange,
    Vote,
    parse,
)
from consensus._normal import NormalCase
from consensus._replica_types import Pending, Phase, Refusal, ReplicaConfig, ReplicaStatus, Verdict
from consensus._state import NEVER
from consensus._sync import CatchUp
from consensus._view_change import ViewChanges

__all__ = [
    "DURABLE_BYTES_MAX",
    "DurableStateError",
    "Pending",
    "Phase",
    "Refusal",
    "Replica",
    "ReplicaConfig",
    "ReplicaStatus",
    "Verdict",
]


class Replica(NormalCase, ViewChanges, Heights, CatchUp, DurableLog):
    """One member's pBFT replica. Drive it with :meth:`step` (a peer's message), :meth:`tick` (one tick of
    logical time), :meth:`propose` (the node's proposal, after ``RequestProposal``) and :meth:`verdict` (the node's
    judgement of a proposal, after ``RequestVerdict``); execute the returned effects in order.

    Parameters
    ----------
    ctx:
        The chain context (genesis: members' keys, quorum rule).
    key:
        This member's key; it signs every vote.
    state:
        The last decided chain state (``ledger.genesis_state(ctx)`` at start).
    config:
        Timeouts and bounds; ``ReplicaConfig.from_timeouts(genesis.protocol.timeouts)`` by default.
    restore:
        The last :meth:`durable` record a previous incarnation of this replica saved (its vote log), or
        None for a replica that has signed nothing since ``state``.
    next_committee, needs_payload:
        Following the chain by headers (``decided_header``). ``next_committee(state)``: the committee the block
        after ``state`` must name, where the round rules fix it from the state alone (coordinator mode); None:
        this replica takes only whole blocks. ``needs_payload(state_after)``: whether the host needs the
        payload of the block that leads to ``state_after`` (it has a role in the next round, holds evidence,
        keeps an archive...); a replica outside the committee takes a header (``CommitHeader``) only where it
        says no, and otherwise asks the sender for the whole block. It is asked during the replica's call, so a
        host executing a batch that decided several heights may answer for a later state before it applied the
        earlier blocks: what it holds then only shrinks as it applies them (evidence a block included), so such an
        answer can take a whole block where a header would have done, never the reverse.
    lazy:
        With ``next_committee`` and ``needs_payload``: outside the committee, sleep (no sync timer) at a height where
        the host has no role (``needs_payload(state)`` is False) until a message shows a later height, and catch
        up by headers then (``header_sync_request``), not by whole blocks. A member with a role at a later
        height is woken by the block the proposer pushes it; one that is never woken stays behind, which costs
        it nothing and the chain nothing (it takes no part). Default False: every observer asks for the decided
        block every ``timeout_ticks_sync``.
    committee_epoch:
        With ``next_committee``: the round rules fix one committee for each epoch of this many heights (heights
        ``kE+1 .. (k+1)E``; coordinator mode's ``committee_epoch``). A lazy replica catching up then skips: it takes
        a decided header or block of a later height in the epoch of its current height without the ones between
        (``ledger.apply_header(epoch=)``, ``apply_block(epoch=)``), and it serves a ``header_sync_request`` with the
        last header of each epoch and its own last (``SendBlocks.epoch``), so a member that slept through ``n``
        heights checks about ``n / E`` headers, not ``n``. Default 1: no skipping, every header.

    The constructor's effects (``RequestProposal`` when this replica is the first primary; after a
    restore, the VIEW-CHANGE it signs in that first call) are returned by the first :meth:`tick` or
    :meth:`step`, or at once by :meth:`start`.

    Restoring [pBFT §4.4-4.5: a replica's log is in stable storage, so a crash-recovered replica is
    correct, not faulty]. A record of an earlier height than ``state.height + 1`` is ignored: that
    height is decided, nothing signed there binds any more. A record of a later height is refused: a
    host stores a decided block before it saves the next height's record, so the block store lost
    decided blocks, and with them the record of the height it would now decide again. Otherwise the
    replica reloads its own signed messages (checked: well formed, of this chain, height and member,
    signed by this replica's key), so that retransmissions re-send the very same bytes and its
    equivocation registry knows them, and its prepared certificate (checked as a peer's: the primary's
    pre-prepare and ``q`` votes, and its own COMMIT for that block). Let ``V`` be the view it was in.
    If it signed nothing at this height and ``V = 0`` it starts afresh (nothing to contradict); if the
    only message it signed in ``V`` is its VIEW-CHANGE(``V``), it re-enters the view change to ``V``
    and re-sends that same message; otherwise it moves to a view change to ``V + 1`` carrying its
    prepared certificate.

    Why this is safe: an honest replica signs PRE-PREPARE, PREPARE, COMMIT and NEW-VIEW only in its
    current view and VIEW-CHANGE(``v``) only for a view ``v`` above its current one, so after the
    restart it can sign nothing in a view below ``V``, and in ``V`` at most what it had not signed
    there (NEW-VIEW, PRE-PREPARE, PREPARE, COMMIT after its VIEW-CHANGE; the registry of new views
    sent is restored too): it never signs two different messages for one (height, view, kind). Its
    VIEW-CHANGE carries the highest certificate it prepared before the crash, so quorum intersection
    [pBFT §4.5.2] holds as if it had never stopped: a block committed by some replica is prepared at
    ``q`` members and re-proposed by the next NEW-VIEW. The cost is liveness only: a restart in the
    middle of a height costs this replica (at most) one view change there, and the others one view
    change if they needed its votes to reach ``q``.

    Raises :class:`DurableStateError` for a record that cannot be restored (torn or corrupt bytes,
    another chain or member, a signature that is not this replica's, inconsistent contents).
    """

    def __init__(
        self,
        *,
        ctx: ChainContext,
        key: KeyPair,
        state: ChainState,
        config: ReplicaConfig | None = None,
        restore: bytes | None = None,
        next_committee: Callable[[ChainState], tuple[str, ...]] | None = None,
        needs_payload: Callable[[ChainState], bool] | None = None,
        lazy: bool = False,
        committee_epoch: int = 1,
    ) -> None:
        if lazy and (next_committee is None or needs_payload is None):
            raise ValueError("a lazy replica follows by headers: it needs next_committee and needs_payload")
        if type(committee_epoch) is not int or committee_epoch < 1:
            raise ValueError(f"committee_epoch must be an int >= 1, got {committee_epoch!r}")
        if committee_epoch > 1 and next_committee is None:
            raise ValueError("committee_epoch > 1 fixes the committee from the state: it needs next_committee")
        if key.peer_id not in ctx.members:
            raise LocalProtocolError(f"{key.peer_id} is not a member of chain {ctx.chain_id}")
        super().__init__(
            ctx=ctx,
            key=key,
            config=config if config is not None else ReplicaConfig.from_timeouts(ctx.genesis.protocol.timeouts),
            next_committee=next_committee,
            needs_payload=needs_payload,
            lazy=lazy,
            committee_epoch=committee_epoch,
        )
        self._enter_height(state, self._queued_effects)
        if restore is not None:
            self._restore(restore)

    # --- public API: inputs ------------------------------------------------------------------------------------

    def start(self) -> list[Effect]:
        """Effects produced by the constructor (``RequestProposal`` if this replica proposes first; after a
        restore, the VIEW-CHANGE it signs here, not in the constructor: see :meth:`durable`)."""
        if self._view_change_on_start:
            self._view_change_on_start = False
            self._start_view_change(self._view + 1, self._queued_effects)
        fx, self._queued_effects = self._queued_effects, []
        return fx

    def step(self, message: Message, *, sender: str | None = None) -> list[Effect]:
        """A peer's message arrived (``sender``: the transport-authenticated peer, if known)."""
        fx = self.start()
        self._inbox.append((message, sender))
        self._drain(fx)
        return fx

    def tick(self) -> list[Effect]:
        """One tick of logical time passed: the timers (committee attempt, retransmission, the phase's deadline)."""
        fx = self.start()
        self._now += 1
        if self._now >= self._next_attempt_at():
            self._enter_attempt(self._attempt + 1, fx)  # this height outlasted its committee: the next one takes it
        if self._now >= self._retransmit_at and self._phase in (Phase.PREPARE, Phase.COMMIT, Phase.VIEW_CHANGE):
            self._retransmit(fx)
        if self._now >= self._deadline:
            match self._phase:
                case Phase.OBSERVE:
                    self._on_sync_timer(fx)
                case Phase.VIEW_CHANGE:  # pBFT §4.5.2: a quorum moved, no NEW-VIEW in time: next view, 2T
                    self._start_view_change(self._view + 1, fx)
                case Phase.PROPOSE if self._log.waiting is not None:  # the input never came: refuse the proposal
                    pp, pending = self._log.waiting
                    self._log.waiting = None
                    self._refuse(pp, pending.reason, fx)
                case _:  # pBFT §4.4: the view's timer expired before the block was decided
                    self._start_view_change(self._view + 1, fx)
        self._drain(fx)
        return fx

    def verdict(self, block_hash: bytes, verdict: Verdict) -> list[Effect]:
        """The host's judgement of the proposal it was asked about (``RequestVerdict``): None agrees (PREPARE), a
        reason refuses it (evidence and a view change), :class:`Pending` says an input is missing (the replica waits
        on, until a later verdict or the view's timer; the timer's refusal then gives this reason).

        A verdict on a proposal this replica no longer waits for (the view or height moved on, or it already had
        one) changes nothing: a host may answer late, and in a worker thread it cannot know."""
        fx = self.start()
        waiting = self._log.waiting
        if waiting is not None and waiting[0].block_hash == block_hash:
            pp = waiting[0]
            assert (pp.signed.view, self._phase) == (self._view, Phase.PROPOSE), (pp.signed.view, self._view, self._phase)
            if isinstance(verdict, Pending):
                self._log.waiting = (pp, verdict)
            else:
                self._log.verdicts[block_hash] = verdict
                self._accept(pp, fx, validate=True)
        self._drain(fx)
        return fx

    def propose(self, payload: Payload, *, height: int, view: int, time_ms: int) -> list[Effect]:
        """Pre-prepare ``payload`` as the primary of (``height``, ``view``), after ``RequestProposal``.

        Returns ``[]`` (counted in ``status().stale_proposals``) if the replica has moved on since the
        request. Raises :class:`LocalProtocolError` if this replica is not the primary, already
        proposed, or the header it would sign does not follow from its state (the host judges its own payload
        before proposing it: no ``RequestVerdict`` for it).
        """
        fx = self.start()
        if (height, view) != (self._height, self._view) or self._phase is not Phase.PROPOSE:
            self._stale_proposals += 1
            return fx
        self._propose(payload, time_ms=time_ms, fx=fx)
        self._drain(fx)
        return fx

    # --- public API: hosts with many replicas (the simulator) ---------------------------------------------------

    def idle_ticks(self) -> int:
        """How many of the next ticks certainly do nothing but count: an observer (outside the height's
        committee) with no input held waits for the decided block until its sync deadline, and every tick
        before that deadline only advances the clock. 0 whenever the next tick may act (a committee member's
        timers, retransmission, held input). A host with many idle replicas skips those ticks
        (:meth:`skip_ticks`) instead of calling :meth:`tick` on each of them; the outcome is the same."""
        if (
            self._phase is not Phase.OBSERVE
            or self._queued_effects
            or self._inbox
            or self._view_change_on_start
        ):
            return 0
        return max(0, min(self._deadline, self._next_attempt_at()) - self._now - 1)

    def rest(self) -> None:
        """The host's part in this height is over (a lazy member's: a client that sent its update, with no seat in
        the committee). A lazy observer outside the committee that knows no later height then drops its sync
        timer, as one without a role at its height does: it sleeps until a message wakes it, and follows the
        chain from this height then. Nothing changes otherwise (not lazy, in the committee, or catching up)."""
        if self._lazy and not self._in_committee and self._phase is Phase.OBSERVE and not self._behind():
            self._deadline = NEVER

    def skip_ticks(self, n: int) -> None:
        """Advance the clock by ``n`` ticks that :meth:`idle_ticks` said do nothing: exactly what ``n`` calls of
        :meth:`tick` would have done. Raises :class:`LocalProtocolError` if one of them might act."""
        idle = self.idle_ticks()
        if not 0 <= n <= idle:
            raise LocalProtocolError(f"cannot skip {n} ticks: only {idle} are idle")
        self._now += n

    # --- public API: state --------------------------------------------------------------------------------------

    @property
    def waiting(self) -> Proposal | None:
        """The proposal of this view that waits for the host's verdict (asked by ``RequestVerdict``, or answered
        :class:`Pending`), or None."""
        waiting = self._log.waiting
        if waiting is None:
            return None
        pp = waiting[0]
        assert pp.payload is not None
        return Proposal(pp.header, pp.payload)

    def status(self) -> ReplicaStatus:
        return ReplicaStatus(
            peer_id=self._peer_id,
            height=self._height,
            view=self._view,
            phase=self._phase,
            primary=self._primary(self._view),
            in_committee=self._in_committee,
            committee=self._committee,
            quorum=self._votes.quorum.threshold,
            head_hash=self._state.head_hash,
            now_tick=self._now,
            deadline_tick=self._deadline,
            decided=self._decided,
            view_changes=self._view_changes_sent,
            buffered=len(self._buffer),
            dropped=MappingProxyType(dict(sorted(self._dropped.items()))),
            duplicates=self._duplicates,
            refusals=tuple(self._refusals),
            evidence_reported=self._evidence_reported,
            stale_proposals=self._stale_proposals,
            attempt=self._attempt,
        )

    def durable(self) -> bytes:
        """The canonical record of what this replica must not forget after a restart, for ``Replica(...,
        restore=...)``: the height, the view, every message it signed and sent at this height, and its
        highest prepared certificate with the payload [pBFT §4.4-4.5, stable storage of the log].

        A host saves it durably (fsync) whenever :attr:`durable_version` changed, after persisting the
        batch's ``Commit`` blocks and *before* sending the batch's messages: a vote never leaves the node
        before it is on disk (docs/design.md, "Durability"). The replica signs only inside :meth:`start`,
        :meth:`step`, :meth:`tick`, :meth:`propose` and :meth:`verdict`, never in its constructor (a
        restored replica signs its VIEW-CHANGE in :meth:`start`), so a host may note
        :attr:`durable_version` right after building it and compare after each call.
        """
        return self._durable_record()

    @property
    def durable_version(self) -> int:
        """A counter that grows whenever :meth:`durable` would return different bytes (cheap to read).

        Within a height the record only grows: messages are added to it (never replaced), the view only
        rises and the prepared certificate changes only together with a new COMMIT; a new height starts
        a new record. So ``(height, view, messages signed)`` changes exactly when the record does.
        """
        key = (self._height, self._view, len(self._log.sent))
        if key != self._durable_key:
            self._durable_key = key
            self._durable_version += 1
        return self._durable_version

    @property
    def peer_id(self) -> str:
        return self._peer_id

    @property
    def chain_state(self) -> ChainState:
        """The last decided chain state."""
        return self._state

    @property
    def view_primary(self) -> tuple[int, int, str]:
        """``(height, view, primary)`` this replica is at now (cheaper than :meth:`status`)."""
        return self._height, self._view, self._primary(self._view)

    @property
    def ahead_height(self) -> int:
        """The highest height a member showed this replica (0 if none beyond its own yet): how far the network is,
        as far as this replica knows."""
        return self._highest_seen[0] if self._highest_seen is not None else 0

    @property
    def behind(self) -> bool:
        """A member showed this replica a later decided height: it is catching up (lazy: it does not sleep)."""
        return self._behind()

    # --- input loop: one handler per input ----------------------------------------------------------------------

    def _drain(self, fx: list[Effect]) -> None:
        """Handle the inbox in order, the held messages of each new height included (past a ``Commit``: the host
        judges a proposal of the next height only when it meets the ``RequestVerdict``, after the block)."""
        while self._inbox:
            message, sender = self._inbox.popleft()
            try:
                self._on_message(message, sender, fx)
            except RemoteProtocolError as e:  # a peer fault: drop, count, carry on (never fatal)
                self._dropped[e.reason] += 1

    def _on_message(self, message: Message, sender: str | None, fx: list[Effect]) -> None:
        """Route a peer's message to its handler: by kind (decided block or header, sync request), by height
        (:meth:`_on_other_height`), committee attempt and view, then by kind and phase (one arm per rule)."""
        parsed = parse(message)
        if isinstance(parsed, Decided):
            self._on_decided(parsed, sender, fx)
            return
        s = parsed.signed
        if s.signer not in self._ctx.members:
            raise RemoteProtocolError("not_member", f"{s.signer!r:.60} is not a member")
        if isinstance(parsed, DecidedHeader):
            self._on_decided_header(parsed, sender, fx)
            return
        if isinstance(parsed, SyncRequest):
            self._on_sync_request(parsed, fx)
            return
        if s.height != self._height:
            self._on_other_height(s, message, sender, fx)
            return
        attempt = s.view // ATTEMPT_VIEWS
        if attempt > self._attempt:
            self._on_later_attempt(s, attempt, message, sender, fx)
            return
        if attempt < self._attempt:  # (a block decided there reaches us whole: its deciders serve it)
            raise RemoteProtocolError("stale_view", f"{s.kind} of committee attempt {attempt}, replica in {self._attempt}")
        if s.signer not in self._committee_set:
            raise RemoteProtocolError("not_in_committee", f"{s.signer} is not in the committee of height {self._height}")
        if not self._in_committee:
            raise RemoteProtocolError("not_recipient", f"{s.kind} sent to a replica outside the committee")
        v, kind = s.view, s.kind
        if v > self._view + self._cfg.view_window:
            raise RemoteProtocolError("future_view", f"{kind} for view {v}")
        if kind in (KIND_PRE_PREPARE, KIND_PREPARE, KIND_COMMIT):
            if v > self._view or (v == self._view and self._phase is Phase.VIEW_CHANGE):
                self._verify(s)  # for a view we have not entered yet: keep it
                self._hold(s.height, v, s.signer, message, sender)
                return
            if v < self._view and kind != KIND_COMMIT:
                raise RemoteProtocolError("stale_view", f"{kind} for view {v} < {self._view}")
        elif v < self._view or (v == self._view and self._phase is not Phase.VIEW_CHANGE):
            self._on_left_view_change(s, fx)
        self._verify(s)
        self._register(s, fx)
        match (self._phase, parsed):
            case (Phase.PROPOSE, PrePrepare()):  # pBFT §4.2: the primary's pre-prepare of this view
                self._on_pre_prepare(parsed, fx)
            case (_, PrePrepare()):  # the same pre-prepare again (a conflicting one was equivocation)
                self._duplicates += 1
            case (_, Vote(signed=SignedMessage(kind="prepare"))):  # pBFT §4.2, also before the pre-prepare
                self._on_prepare(parsed, fx)
            case (_, Vote()):  # pBFT §4.3: COMMIT, of this view or an earlier one (a late certificate)
                self._on_commit(parsed, fx)
            case (_, ViewChange()):  # pBFT §4.5.2
                self._on_view_change(parsed, fx)
            case (_, NewView()):  # pBFT §4.5.2
                self._on_new_view(parsed, fx)
            case _:
                raise LocalProtocolError(f"unhandled {type(parsed).__name__} in phase {self._phase}")

    def _on_other_height(self, s: SignedMessage, message: Message, sender: str | None, fx: list[Effect]) -> None:
        """A member's pBFT message of another height than ours: dropped (an earlier one, after serving a member stuck
        there), or held (a later one, after noting how far the sender is)."""
        if s.height < self._height:
            # The sender is stuck at a height we decided: a view change says so, and so does a vote we
            # have already verified once (it is being retransmitted). A first late vote says nothing.
            if s.kind in (KIND_VIEW_CHANGE, KIND_NEW_VIEW) or self._verified_before(s):
                self._serve(s, fx)
            raise RemoteProtocolError("stale_height", f"{s.kind} for height {s.height} < {self._height}")
        self._verify(s)
        if s.kind in (KIND_VIEW_CHANGE, KIND_NEW_VIEW):  # the sender is stuck past our height
            self._request_sync(s.signer, fx, headers=self._by_headers)
        self._note_later_height(s.height, s.signer, fx, decided=s.height - 1)
        if s.height > self._height + self._cfg.height_window:
            raise RemoteProtocolError("future_height", f"{s.kind} for height {s.height}")
        self._hold(s.height, s.view, s.signer, message, sender)

    def _on_left_view_change(self, s: SignedMessage, fx: list[Effect]) -> NoReturn:
        """A VIEW-CHANGE or NEW-VIEW for a view this replica has left: dropped, after answering a VIEW-CHANGE with
        our own for that view.

        pBFT §4.5.2 liveness: a member still collecting view changes for that view (ours was lost on the way)
        cannot reach its quorum once everyone else moved on, nor join a higher view on f + 1 that Byzantine
        members withhold; our own VIEW-CHANGE for the view lets it, then its timer moves it up."""
        ours = self._log.sent.get((KIND_VIEW_CHANGE, s.view)) if s.kind == KIND_VIEW_CHANGE else None
        if ours is not None and s.signer != self._peer_id:
            self._verify(s)
            fx.append(Send(to=s.signer, message=ours))
        raise RemoteProtocolError("stale_view", f"{s.kind} for view {s.view}, replica in view {self._view}")
