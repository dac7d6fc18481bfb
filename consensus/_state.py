"""The state every part of the replica reads, and the checks every handler runs on a peer's message.

:class:`ReplicaState` owns the replica's identity, the last decided chain state, the height, view, phase and
committee it is at, its timers, its votes (a :class:`~consensus._votes.VoteKeeper`), the log of the height
(:class:`HeightLog`), the messages it holds for later (:meth:`ReplicaState._hold`) and its counters. Each concern of
the replica is a mixin on it, in a module of its own:

* ``_normal.py``: the normal case (pre-prepare, PREPARE, COMMIT, decide, retransmit) [pBFT §4.2-4.3];
* ``_view_change.py``: view changes (VIEW-CHANGE, NEW-VIEW) [pBFT §4.5.2];
* ``_heights.py``: entering a height, and handing a height to a re-drawn committee (committee attempts);
* ``_sync.py``: catching up (decided blocks and headers, sync requests, serving laggards);
* ``_durable.py``: the durable record of what the replica signed, and restoring from it [pBFT §4.4-4.5];
* ``_replica.py``: :class:`~consensus.Replica`, the public API: it routes each input to one handler.

A concern calls another's entry points only through the methods declared at the end of :class:`ReplicaState`
(implemented in the mixin named there), so no module imports another concern's.
"""

from __future__ import annotations

import enum
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ledger import (
    ATTEMPT_VIEWS,
    Block,
    BlockHeader,
    ChainContext,
    ChainState,
    KeyPair,
    Payload,
    SignatureError,
    SignedMessage,
    merkle_root,
    primary,
    same_epoch,
    sha256,
    sign_bytes,
    update_leaves,
)

from consensus._effects import Effect, ReportMisbehavior
from consensus._errors import EquivocationError, RemoteProtocolError
from consensus._messages import (
    KIND_COMMIT,
    KIND_NEW_VIEW,
    KIND_PRE_PREPARE,
    KIND_PREPARE,
    KIND_VIEW_CHANGE,
    Message,
    PrePrepare,
    PreparedProof,
    Proposal,
)
from consensus._replica_types import Pending, Phase, Refusal, ReplicaConfig
from consensus._votes import Quorum, VoteKeeper

__all__ = ["NEVER", "SIGNING_ORDER", "HeightLog", "HeldDecided", "HeldMessage", "ReplicaState"]

NEVER = 1 << 62
"""A deadline that is not armed."""
SIGNING_ORDER = MappingProxyType(
    {KIND_VIEW_CHANGE: 0, KIND_NEW_VIEW: 1, KIND_PRE_PREPARE: 2, KIND_PREPARE: 3, KIND_COMMIT: 4}
)
"""The order in which a replica signs its messages of one view (entering it, then the normal case)."""


class HeightLog:
    """What a replica remembers about the current height besides its votes (reset when it advances). A plain class,
    not a dataclass with default factories: every member of a simulation makes one per height."""

    __slots__ = ("accepted", "proposals", "verdicts", "prepared", "new_view_sent", "sent", "waiting")

    def __init__(self) -> None:
        self.accepted: dict[int, PrePrepare] = {}  # view -> accepted pre-prepare
        self.proposals: dict[bytes, Proposal] = {}  # block hash -> proposal
        self.verdicts: dict[bytes, str | None] = {}  # block hash -> the host's verdict (Replica.verdict)
        self.prepared: tuple[PreparedProof, Payload] | None = None  # highest prepared certificate
        self.new_view_sent: set[int] = set()
        self.sent: dict[tuple[str, int], Message] = {}  # own (kind, view) -> message
        self.waiting: tuple[PrePrepare, Pending] | None = None  # a pre-prepare of the view awaiting its verdict


class HeldDecided(enum.Enum):
    """Under what a decided block or header of a later height is held (a signed message is held under its signer):
    all senders' together, apart from any member's."""

    BLOCK = "decided block"
    HEADER = "decided header"  # (a lazy replica's, catching up by headers)


@dataclass(slots=True)
class HeldMessage:
    height: int
    view: int
    owner: str | HeldDecided  # the signer, or what decided block or header it is
    message: Message
    sender: str | None
    size: int = 0  # encoded bytes


class ReplicaState:
    """The state of one member's replica, and the checks and bookkeeping every concern shares (see the module)."""

    # Set when the replica enters a height (``_heights.py``), or its committee changes within one.
    _state: ChainState  # the last decided chain state
    _height: int  # the height being decided: _state.height + 1
    _view: int
    _phase: Phase
    _log: HeightLog
    _committee: tuple[str, ...]  # of the current committee attempt, sorted
    _committee_set: frozenset[str]
    _in_committee: bool
    _committee_peers: tuple[str, ...]  # the committee without this replica (all of it, for an observer)
    _retransmit_at: int

    def __init__(
        self,
        *,
        ctx: ChainContext,
        key: KeyPair,
        config: ReplicaConfig,
        next_committee: Callable[[ChainState], tuple[str, ...]] | None,
        needs_payload: Callable[[ChainState], bool] | None,
        lazy: bool,
        committee_epoch: int,
    ) -> None:
        self._ctx = ctx
        self._key = key
        self._peer_id = key.peer_id
        self._next_committee = next_committee
        self._needs_payload = needs_payload
        self._lazy = lazy
        self._committee_epoch = committee_epoch
        self._cfg = config
        self._now = 0
        self._deadline = 0
        self._votes = VoteKeeper()
        # counters (status())
        self._dropped: Counter[str] = Counter()
        self._duplicates = 0
        self._decided = 0
        self._view_changes_sent = 0
        self._evidence_reported = 0
        self._stale_proposals = 0
        self._refusals: deque[Refusal] = deque(maxlen=config.refusals_kept)
        self._verified: dict[bytes, None] = {}  # digests of the signed messages verified (a bounded cache)
        # catching up (_sync.py)
        self._highest_seen: tuple[int, str] | None = None  # the highest height a member showed us, and who
        self._decided_elsewhere: tuple[int, str] | None = None  # the highest height a member showed it decided, and who
        self._header_batch_asked = (0, 0)  # a header batch in flight: (the height after it, the tick it was asked at)
        self._served_at: dict[tuple[str, int, bool], int] = {}  # (peer, height, headers) -> tick we last served it
        self._asked_at: dict[tuple[str, int, bool], int] = {}  # (peer, height, headers) -> tick we last asked it
        self._sync_turn = 0  # the observer timer asks the committee members in turn
        # input held back
        self._buffer: list[HeldMessage] = []  # for a later view or height
        self._inbox: deque[tuple[Message, str | None]] = deque()
        self._queued_effects: list[Effect] = []  # produced outside a call (constructor, restore): start() returns them
        # durability (_durable.py)
        self._durable_key: tuple[int, int, int] | None = None
        self._durable_version = 0
        self._view_change_on_start = False  # restored: sign the VIEW-CHANGE in start(), not in __init__
        # committee attempts (_heights.py): ticks per attempt at one height (0: never re-draw)
        self._attempt_ticks = ctx.redraw_ticks + config.redraw_extra_ticks if ctx.redraw_ticks else 0
        self._attempt = 0
        self._height_entered_at = 0  # the tick this replica entered its height
        self._later_attempt_senders: dict[int, set[str]] = {}  # attempt -> its committee's members heard in it
        self._next_attempt_role: tuple[tuple[int, int], bool] = ((0, 0), False)  # (height, attempt) -> on it?

    # --- committee, primary, timers --------------------------------------------------------------------------------

    def _set_committee(self, committee: Sequence[str]) -> None:
        committee_view = self._ctx.committee_view(committee)
        self._committee, self._committee_set, _ = committee_view
        self._votes.set_committee(committee_view)
        self._in_committee = self._peer_id in self._committee_set
        me = self._peer_id
        self._committee_peers = tuple(p for p in self._committee if p != me) if self._in_committee else self._committee

    def _backoff(self, view: int) -> int:
        return 1 << min(view % ATTEMPT_VIEWS, self._cfg.backoff_exponent_max)  # (each attempt starts over)

    def _committee_of(self, view: int) -> tuple[str, ...]:
        """The committee of ``view`` at this height: ours, or (a prepared certificate or a proposal carried from an
        earlier attempt) that attempt's."""
        if view // ATTEMPT_VIEWS == self._attempt:
            return self._committee
        return self._ctx.committee_view(self._ctx.view_committee(self._state, self._height, view))[0]

    def _primary(self, view: int) -> str:
        return primary(self._committee_of(view), self._ctx.genesis_hash, self._height, view)

    # --- catching up: what every concern asks ----------------------------------------------------------------------

    def _behind(self) -> bool:
        """A member showed it has decided this height (a lazy replica then catches up, and does not sleep)."""
        return self._decided_elsewhere is not None and self._decided_elsewhere[0] >= self._height

    @property
    def _by_headers(self) -> bool:
        """A lazy replica outside the committee catches up by headers (it asks for a block only where its host
        needs the payload)."""
        return self._lazy and not self._in_committee

    @property
    def _header_span(self) -> int:
        """Heights one batch of headers covers: ``header_batch_max``, times the epoch where only the last header
        of each epoch is sent (still at most ``header_batch_max`` + 1 headers per batch)."""
        return self._cfg.header_batch_max * self._committee_epoch

    def _skips_to(self, height: int) -> bool:
        """May this replica take a decided block or header of ``height`` > its own without those between? Only a
        lazy one outside the committee, within the committee epoch of its height (``committee_epoch``)."""
        return self._committee_epoch > 1 and self._by_headers and same_epoch(self._height, height, self._committee_epoch)

    # --- messages held for later -----------------------------------------------------------------------------------

    def _hold(self, height: int, view: int, owner: str | HeldDecided, message: Message, sender: str | None) -> None:
        """Keep a message for a later view or height; bounded overall and per sender, in count and in bytes (freed
        when the height or view it is for is reached, or passed: :meth:`_release_held`)."""
        cap = self._cfg.buffered_messages_max
        members = max(1, len(self._ctx.members))
        per_owner = max(8, cap // members)
        if owner is HeldDecided.HEADER:
            per_owner = max(per_owner, self._cfg.header_batch_max)
        size = len(message.encode())
        bytes_max = self._cfg.buffered_bytes_max
        owner_bytes_max = max(self._cfg.buffered_owner_bytes_min, bytes_max // members)
        mine = [b for b in self._buffer if b.owner == owner]
        if (len(self._buffer) >= cap or len(mine) >= per_owner or sum(b.size for b in mine) + size > owner_bytes_max
                or sum(b.size for b in self._buffer) + size > bytes_max):
            raise RemoteProtocolError("buffer_full", f"no room for a message of height {height} view {view}")
        self._buffer.append(HeldMessage(height, view, owner, message, sender, size))

    def _holds_decided(self, what: HeldDecided, height: int) -> bool:
        return any(b.owner is what and b.height == height for b in self._buffer)

    def _drop_held_before(self, view: int) -> None:
        """Forget the signed messages held for views of this height below ``view`` (it has moved past them)."""
        height = self._height
        self._buffer = [b for b in self._buffer if b.height != height or b.view >= view or b.owner is HeldDecided.BLOCK]

    def _release_held(self) -> None:
        """Move the held messages that can be handled now to the inbox; forget the stale ones."""
        keep: list[HeldMessage] = []
        skips: list[HeldMessage] = []
        for b in self._buffer:
            if b.height < self._height:
                continue
            ready = b.height == self._height and (
                b.owner is HeldDecided.BLOCK
                or b.view < self._view
                or (b.view == self._view and self._phase is not Phase.VIEW_CHANGE)
            )
            if ready:
                self._inbox.append((b.message, b.sender))
            elif isinstance(b.owner, HeldDecided) and self._skips_to(b.height):
                skips.append(b)  # a decided block or header this replica may skip to now
            else:
                keep.append(b)
        # the nearest first, a block before a header of its height: a skip past a held block would leave it stale
        skips.sort(key=lambda b: (b.height, b.owner is not HeldDecided.BLOCK))
        self._inbox.extend((b.message, b.sender) for b in skips)
        self._buffer = keep

    # --- checks on a peer's message --------------------------------------------------------------------------------

    def _verified_before(self, s: SignedMessage) -> bool:
        """Whether exactly this signed message was verified before (a retransmission or duplicate)."""
        msg = sign_bytes(self._ctx.chain_id, s.kind, s.height, s.view, s.body)
        return sha256(s.signature + s.signer.encode() + msg) in self._verified

    def _verify(self, s: SignedMessage, reason: str = "bad_signature") -> None:
        """Check the signature (membership was checked before); each exact message is verified once."""
        msg = sign_bytes(self._ctx.chain_id, s.kind, s.height, s.view, s.body)
        digest = sha256(s.signature + s.signer.encode() + msg)
        if digest in self._verified:
            return
        try:
            self._ctx.keys.verify(s.signer, s.signature, msg, what=f"{s.kind} ({s.height}, {s.view})")
        except SignatureError as e:
            raise RemoteProtocolError(reason, str(e)) from None
        if len(self._verified) >= self._cfg.verify_cache_max:
            del self._verified[next(iter(self._verified))]
        self._verified[digest] = None

    def _register(self, s: SignedMessage, fx: list[Effect], *, embedded: bool = False) -> None:
        """Equivocation check: one body per (signer, kind, view) at this height (:meth:`VoteKeeper.equivocation`).

        A conflict yields ledger evidence (``check_evidence`` accepts the pair as is), reported once. A conflicting
        top-level message is dropped; one embedded in a proof is only reported (its carrier may be honest).
        """
        found = self._votes.equivocation(s)
        if found is None:
            return
        evidence, first_report = found
        if first_report:
            self._evidence_reported += 1
            fx.append(ReportMisbehavior(evidence=evidence))
        if not embedded:
            raise EquivocationError(evidence)

    def _check_proof(self, proof: PreparedProof, reason: str) -> None:
        """A prepared certificate of view ``w``: the primary of ``w``'s pre-prepare and ``q`` votes in all, of the
        committee of ``w`` [pBFT §4.5.2]."""
        pp = proof.pre_prepare
        w = proof.view
        expected = self._primary(w)
        if pp.signed.signer != expected:
            raise RemoteProtocolError(reason, f"prepared proof: pre_prepare of view {w} not by its primary")
        signers = {pp.signed.signer, *(p.signer for p in proof.prepares)}
        quorum = Quorum(self._ctx.committee_view(self._committee_of(w)))
        if not quorum.certified_by(signers):
            raise RemoteProtocolError(reason, f"prepared proof needs {quorum.threshold} votes of committee members")
        self._verify(pp.signed, reason)
        for p in proof.prepares:
            self._verify(p, reason)

    def _check_header(self, header: BlockHeader, payload: Payload) -> str | None:
        """The ledger's structural rules for a proposal (everything but the certificate)."""
        st = self._state
        if header.chain_id != self._ctx.chain_id:
            return f"chain id {header.chain_id!r:.60} is not {self._ctx.chain_id!r}"
        if header.height != self._height or header.fl_round != self._height:
            return f"header for height {header.height} (fl_round {header.fl_round}), expected {self._height}"
        if header.prev_hash != st.head_hash:
            return "prev_hash does not link to the previous block"
        if header.time_ms < st.time_ms:
            return f"time goes backwards ({header.time_ms} < {st.time_ms})"
        if header.proposer != self._primary(header.view):
            return f"proposer {header.proposer} is not the primary of view {header.view}"
        if header.updates_root != merkle_root(update_leaves(payload.updates)):
            return "Merkle root of update commitments mismatch"
        for p in payload.next_committee:
            if p not in self._ctx.members:
                return f"next committee names non-member {p!r:.60}"
        return None

    # --- what one concern asks of another (implemented by the mixin named; declared here for the others) ----------

    def _on_message(self, message: Message, sender: str | None, fx: list[Effect]) -> None:
        """Route a peer's message to its handler (``Replica``)."""
        raise NotImplementedError

    def _accept(self, pp: PrePrepare, fx: list[Effect], *, validate: bool) -> None:
        """Accept the pre-prepare of the current view (``NormalCase``)."""
        raise NotImplementedError

    def _learn(self, block_hash: bytes, proposal: Proposal, fx: list[Effect]) -> None:
        """Remember a proposal; decide it if its certificate is here (``NormalCase``)."""
        raise NotImplementedError

    def _decide(self, block: Block, fx: list[Effect], *, state: ChainState | None = None) -> None:
        """Emit a decided block and move to the next height (``NormalCase``)."""
        raise NotImplementedError

    def _start_view_change(self, view: int, fx: list[Effect], *, also: tuple[str, ...] = ()) -> None:
        """Move to ``view`` with a VIEW-CHANGE (``ViewChanges``)."""
        raise NotImplementedError

    def _arm_view_change(self) -> None:
        """Start the view-change timer once a quorum left the view (``ViewChanges``)."""
        raise NotImplementedError

    def _enter_height(self, state: ChainState, fx: list[Effect]) -> None:
        """Move to the height after ``state`` (``Heights``)."""
        raise NotImplementedError

    def _request_sync(self, peer: str, fx: list[Effect], *, headers: bool = False) -> None:
        """Ask ``peer`` for decided blocks or headers from this height on (``CatchUp``)."""
        raise NotImplementedError
