"""The pBFT replica: a sans-I/O state machine running one pBFT instance per height.

Castro & Liskov's pBFT (OSDI '99, "[pBFT §n]" below) mapped onto a committee round as in seed_003
§2.8.2: replica set = the height's committee (named by the previous block), quorum ``q`` of ``C``
(``ledger.quorum_size``: ``2f+1`` of ``3f+1`` by default, the paper's ``⌊C/2⌋+1`` as the documented,
not Byzantine-safe option), view ``v`` restarting at 0 every height, primary of ``(height, view)`` =
``ledger.primary(committee, genesis_hash, height, view)``.

Normal case, at height ``h`` in view ``v``:

1. The primary pre-prepares a block (header + payload) [§4.2; CCP steps 3-4]. Its pre-prepare counts as
   its own vote.
2. A backup that accepts it - signed by the primary of ``(h, v)``, header of view ``v`` linking to the
   previous block, and the injected ``validate(proposal)`` (the node's re-execution of scoring,
   selection, election, aggregation) returns ``None`` - broadcasts PREPARE [§4.2; CCP step 5]. One that
   refuses records why, reports the signed proposal, and starts a view change at once (DESIGN.md,
   coordinator mode step 4). One whose host lacks an input to judge it (``validate`` returns
   :class:`Pending`: an update blob still on its way, the previous model) waits, as a pBFT backup waits
   for a request sent apart from its pre-prepare [Castro & Liskov, TOCS 2002: separate request
   transmission]: its host calls :meth:`Replica.judge_again` once the input is here, and the view's timer
   bounds the wait (at its expiry the proposal is refused as above).
3. With the pre-prepare and ``q`` matching votes a replica is *prepared* and broadcasts COMMIT [§4.3].
4. ``q`` COMMITs of one view for one block hash are a certificate: the block is decided and emitted as
   ``Commit(block)`` [§4.3; CCP step 6].

View change [§4.5.2]: when a phase's timer expires (``timeout_ticks_*``, doubled per view up to
``2**backoff_exponent_max``), or the proposal is refused, a replica broadcasts VIEW-CHANGE(h, v+1) with
its highest prepared certificate; it joins the smallest higher view for which it holds ``C - q + 1``
(``f+1``) view changes. The primary of ``v+1`` collects ``q`` and broadcasts NEW-VIEW with them and,
if any carries a prepared certificate, a pre-prepare of the highest one's *unchanged* header
(``certificate.view >= header.view``, see :mod:`consensus._certify`); otherwise it asks its node for
a fresh proposal (``RequestProposal``).

Retransmission: while a view is stuck in a phase, every ``timeout_ticks_retransmit`` the replica
re-sends its own messages of the view to the members that have not shown they have them, and a stuck
VIEW-CHANGE to every member (nothing is re-sent while views make progress). A member that sends a
VIEW-CHANGE for a view this replica has left gets this replica's own VIEW-CHANGE for that view back, so
members split across two views cannot wait for each other for ever.

After a ``Commit`` the replica stops handling its input until the host has applied the block
(:meth:`Replica.resume`, or the next ``step``/``tick``/``propose``): the host's ``validate`` then judges the
next height's proposal against the next height's state.

Catch-up: a replica that is not in the height's committee observes. Decided blocks travel as
``Message(block=...)`` and are accepted at the current height on their certificate alone: the first
``C - q + 1`` committee members (by a hash of the block) send the block to next-committee newcomers
(CCP step 8); a replica that sees a member stuck at a height it has decided (its VIEW-CHANGE, a
retransmitted vote, a ``sync_request``) asks its node to send it a batch of blocks from the block store
(``SendBlocks``, rate limited); a replica that sees a member two heights ahead asks it; observers ask a
committee member in turn every ``timeout_ticks_sync``. A replica given ``next_committee`` (coordinator mode,
where the rules fix the next committee from the state) may instead follow by ``decided_header``: the header
and certificate, checked by ``ledger.apply_header``, emitted as ``CommitHeader`` with the payload's fields
unknown, when its host needs no payload (``needs_payload``); otherwise it asks the sender for the block.
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
message for a (height, view, kind) it signed before (see :meth:`Replica.__init__`). A host that does not
keep the record restarts as a fresh replica, which may vote again at that height, differently.

Pure: no clock, no randomness, no I/O. Peers are iterated in sorted order. Every buffer is bounded.
"""

from __future__ import annotations

import enum
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ledger import (
    ATTEMPT_VIEWS,
    Block,
    BlockHeader,
    Certificate,
    ChainContext,
    ChainState,
    CommitSignature,
    Evidence,
    KeyPair,
    LedgerError,
    Payload,
    SignatureError,
    SignedMessage,
    TIME_MS_MAX,
    Timeouts,
    apply_header,
    encode,
    hash_tagged,
    make_header,
    merkle_root,
    primary,
    record,
    same_epoch,
    sha256,
    sign_bytes,
    update_leaves,
)

from consensus._certify import advance_state, verify_decided_block
from consensus._effects import Broadcast, Commit, CommitHeader, Effect, ReportMisbehavior, RequestProposal, Send, SendBlocks
from consensus._errors import DurableStateError, EquivocationError, LocalProtocolError, RemoteProtocolError
from consensus._messages import (
    KIND_COMMIT,
    KIND_HEADER,
    KIND_NEW_VIEW,
    KIND_PRE_PREPARE,
    KIND_PREPARE,
    KIND_VIEW_CHANGE,
    PBFT_KINDS,
    Decided,
    DecidedHeader,
    Message,
    NewView,
    PrePrepare,
    PreparedProof,
    Proposal,
    SyncRequest,
    ViewChange,
    Vote,
    decided_message,
    header_sync_request_message,
    new_view_message,
    parse,
    pre_prepare_message,
    sync_request_message,
    view_change_message,
    vote_message,
)

__all__ = [
    "DURABLE_BYTES_MAX",
    "DurableStateError",
    "Pending",
    "Phase",
    "Refusal",
    "Replica",
    "ReplicaConfig",
    "ReplicaStatus",
    "Validator",
]


@dataclass(frozen=True, slots=True)
class Pending:
    """A verdict not reached yet: the host lacks an input to judge the proposal (``reason``: which). The replica
    neither votes nor refuses; it judges the proposal again when its host calls :meth:`Replica.judge_again`, and
    refuses it with ``reason`` if the view's timer expires first."""

    reason: str


Validator = Callable[[Proposal], "str | Pending | None"]
"""``validate(proposal) -> None`` if the replica agrees, the reason it refuses, or :class:`Pending` while the host
lacks an input to judge it. Must be deterministic (given the host's inputs)."""

REASON_BYTES_MAX = 1024
_NEVER = 1 << 62  # a deadline that is not armed

DURABLE_FORMAT = 1
"""Version of the :meth:`Replica.durable` record."""
DURABLE_BYTES_MAX = 256 << 20
"""Largest :meth:`Replica.durable` record a replica restores from (a local file: a bound on memory)."""
_HEADER_OWNER = "#header"
"""The owner under which a lazy replica holds decided headers of later heights (no member id starts with '#')."""
_DURABLE_VIEW_MAX = 1 << 62  # a view no replica reaches (each view waits longer, each attempt redraw_ticks)
_KIND_ORDER = {KIND_VIEW_CHANGE: 0, KIND_NEW_VIEW: 1, KIND_PRE_PREPARE: 2, KIND_PREPARE: 3, KIND_COMMIT: 4}
"""The order in which a replica signs its messages of one view (entering it, then the normal case)."""


class Phase(enum.StrEnum):
    PROPOSE = "propose"  # waiting for the view's pre-prepare (the primary: for its node's proposal)
    PREPARE = "prepare"  # accepted a pre-prepare, collecting PREPAREs
    COMMIT = "commit"  # prepared, sent COMMIT, collecting COMMITs
    VIEW_CHANGE = "view_change"  # sent VIEW-CHANGE(view), waiting for NEW-VIEW(view)
    OBSERVE = "observe"  # not in this height's committee: waiting for the decided block


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaConfig:
    """Timeouts (in ticks) and bounds of a replica.

    Each phase's timer is ``timeout_ticks_<phase> * 2**min(view, backoff_exponent_max)`` [pBFT §4.5.2:
    "wait 2T"]. View 0 of every height also waits ``timeout_ticks_start`` first (local training,
    collecting updates and score rows).
    """

    timeout_ticks_start: int = 0
    timeout_ticks_propose: int = 50
    timeout_ticks_prepare: int = 50
    timeout_ticks_commit: int = 50
    timeout_ticks_view_change: int = 100
    timeout_ticks_sync: int = 100
    timeout_ticks_retransmit: int = 25
    """While stuck in a phase, re-send this view's own messages to the members that have not answered."""
    redraw_extra_ticks: int = 0
    """Added to the genesis' ``redraw_ticks`` (when it has any): the wire time a host adds to the default re-draw
    delay, which it derives from timeouts that leave the wire out (``node._deadlines``)."""
    backoff_exponent_max: int = 4
    view_window: int = 32
    """Messages for views beyond ``view + view_window`` are dropped."""
    height_window: int = 8
    """Messages for heights beyond ``height + height_window`` are dropped."""
    buffered_messages_max: int = 1024
    """Messages kept for a later view or height (all senders together)."""
    buffered_bytes_max: int = 128 << 20
    """Their encoded bytes, all senders together; one sender's (its signed messages, or the decided blocks of
    all) at most ``max(buffered_owner_bytes_min, buffered_bytes_max / members)`` (issue 31 item 4: a member's
    16 MiB messages for later heights, 256 of them each in a network of 4, could hold 4 GiB)."""
    buffered_owner_bytes_min: int = 32 << 20
    sync_batch_max: int = 8
    """Decided blocks sent to a laggard per request (at most ``height_window``)."""
    header_batch_max: int = 64
    """Decided headers sent per ``header_sync_request`` (small: about 1.3 kB each); a lazy replica holds those of
    a batch that arrive out of order. With ``Replica(committee_epoch=E)`` a batch covers ``E`` times as many
    heights, one header (the last) per epoch."""
    header_retry_ticks: int = 2
    """A lazy replica catching up asks again (the next member in turn) when this many ticks bring it no new height;
    a member serves one requester's header batch from one height at most this often."""
    refusals_kept: int = 32
    verify_cache_max: int = 8192

    def __post_init__(self) -> None:
        if self.timeout_ticks_start < 0:
            raise ValueError("timeout_ticks_start must be >= 0")
        for name in ("timeout_ticks_propose", "timeout_ticks_prepare", "timeout_ticks_commit"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.redraw_extra_ticks < 0:
            raise ValueError("redraw_extra_ticks must be >= 0")
        for name in ("timeout_ticks_view_change", "timeout_ticks_sync", "timeout_ticks_retransmit"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("view_window", "height_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0 <= self.backoff_exponent_max <= 30:
            raise ValueError("backoff_exponent_max must be in [0, 30]")
        for name in ("buffered_messages_max", "sync_batch_max", "header_batch_max", "header_retry_ticks", "refusals_kept",
                     "verify_cache_max", "buffered_bytes_max", "buffered_owner_bytes_min"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.sync_batch_max > self.height_window:
            raise ValueError("sync_batch_max must be <= height_window (the receiver holds them)")

    @classmethod
    def from_timeouts(cls, timeouts: Timeouts, **overrides: int) -> ReplicaConfig:
        """The genesis' timeouts (``ProtocolParams.timeouts``); ``timeout_ticks_train`` starts each height."""
        values = {
            "timeout_ticks_start": timeouts.timeout_ticks_train,
            "timeout_ticks_propose": timeouts.timeout_ticks_propose,
            "timeout_ticks_prepare": timeouts.timeout_ticks_prepare,
            "timeout_ticks_commit": timeouts.timeout_ticks_commit,
            "timeout_ticks_view_change": timeouts.timeout_ticks_view_change,
            "timeout_ticks_sync": timeouts.timeout_ticks_view_change,
            "timeout_ticks_retransmit": max(1, timeouts.timeout_ticks_prepare // 2),
        }
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """A proposal this replica refused, and why."""

    height: int
    view: int
    proposer: str
    block_hash: bytes
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaStatus:
    """A frozen snapshot of a replica (trio's ``statistics()``)."""

    peer_id: str
    height: int
    """The height being decided (last decided + 1)."""
    view: int
    phase: Phase
    primary: str
    """Primary of (height, view): the proposer, the coordinator in coordinator mode."""
    in_committee: bool
    committee: tuple[str, ...]
    quorum: int
    head_hash: bytes
    now_tick: int
    deadline_tick: int
    decided: int
    """Blocks decided since start."""
    view_changes: int
    """VIEW-CHANGE messages sent since start."""
    buffered: int
    dropped: Mapping[str, int]
    """Dropped peer messages by reason (``RemoteProtocolError.reason``)."""
    duplicates: int
    refusals: tuple[Refusal, ...]
    """The last ``refusals_kept`` refused proposals."""
    attempt: int = 0
    """The committee attempt at this height (``ledger.ATTEMPT_VIEWS``): 0 until the height outlasts the genesis'
    ``redraw_ticks``, then the re-drawn committee's number."""
    evidence_reported: int
    stale_proposals: int
    """``propose`` calls that came after the view or height had moved on (ignored)."""


class _HeightLog:
    """Everything a replica remembers about the current height (reset when it advances). A plain class, not a
    dataclass with default factories: every member of a simulation makes one per height."""

    __slots__ = ("accepted", "proposals", "verdicts", "prepares", "commits", "prepared", "view_changes",
                 "new_view_sent", "sent", "bodies", "evidence", "waiting")

    def __init__(self) -> None:
        self.accepted: dict[int, PrePrepare] = {}  # view -> accepted pre-prepare
        self.proposals: dict[bytes, Proposal] = {}  # block hash -> proposal
        self.verdicts: dict[bytes, str | None] = {}  # block hash -> validate()
        self.prepares: dict[tuple[int, bytes], dict[str, SignedMessage]] = {}
        self.commits: dict[tuple[int, bytes], dict[str, SignedMessage]] = {}
        self.prepared: tuple[PreparedProof, Payload] | None = None  # highest prepared certificate
        self.view_changes: dict[int, dict[str, ViewChange]] = {}
        self.new_view_sent: set[int] = set()
        self.sent: dict[tuple[str, int], Message] = {}  # own (kind, view) -> message
        self.bodies: dict[tuple[str, str, int], SignedMessage] = {}  # equivocation registry
        self.evidence: set[tuple[str, str, int]] = set()
        self.waiting: tuple[PrePrepare, Pending] | None = None  # a pre-prepare of the view awaiting its verdict


@dataclass(slots=True)
class _Buffered:
    height: int
    view: int
    owner: str  # signer, or "" for a decided block
    message: Message
    sender: str | None
    size: int = 0  # encoded bytes


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class _PreparedRecord:
    """A prepared certificate with its payload, as stored in the durable record."""

    pre_prepare: SignedMessage
    prepares: tuple[SignedMessage, ...]
    payload: Payload


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class _DurableRecord:
    """What a restarted replica must not forget about its current height (:meth:`Replica.durable`)."""

    format: int
    chain_id: str
    signer: str
    height: int
    view: int
    sent: tuple[Message, ...]
    """Every message it signed and sent at ``height``, sorted by (view, signing order)."""
    prepared: _PreparedRecord | None


class Replica:
    """One member's pBFT replica. Drive it with :meth:`step` (a peer's message), :meth:`tick` (one tick of
    logical time) and :meth:`propose` (the node's proposal, after ``RequestProposal``); execute the
    returned effects in order.

    Parameters
    ----------
    ctx:
        The chain context (genesis: members' keys, quorum rule).
    key:
        This member's key; it signs every vote.
    state:
        The last decided chain state (``ledger.genesis_state(ctx)`` at start).
    validate:
        ``validate(proposal) -> None | reason``: deterministic re-execution of the proposal by the node.
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
        says no, and otherwise asks the sender for the whole block.
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
        validate: Validator,
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
        self._ctx = ctx
        self._key = key
        self._me = key.peer_id
        self._validate = validate
        self._next_committee = next_committee
        self._needs_payload = needs_payload
        self._lazy = lazy
        self._epoch = committee_epoch
        self._headers_asked = (0, 0)  # a header batch in flight: (the height after it, the tick it was asked at)
        self._cfg = config if config is not None else ReplicaConfig.from_timeouts(ctx.genesis.protocol.timeouts)
        self._now = 0
        self._deadline = 0
        self._dropped: Counter[str] = Counter()
        self._duplicates = 0
        self._decided = 0
        self._view_changes_sent = 0
        self._evidence_reported = 0
        self._stale_proposals = 0
        self._refusals: deque[Refusal] = deque(maxlen=self._cfg.refusals_kept)
        self._verified: dict[bytes, None] = {}
        self._ahead: tuple[int, str] | None = None  # the highest height a member showed us, and who
        self._shown: tuple[int, str] | None = None  # the highest height a member showed it has decided, and who
        self._served: dict[tuple[str, int, bool], int] = {}  # (peer, height, headers) -> tick we last served it
        self._sync_asked: dict[tuple[str, int, bool], int] = {}  # (peer, height, headers) -> tick we last asked it
        self._sync_attempt = 0
        self._buffer: list[_Buffered] = []
        self._inbox: deque[tuple[Message, str | None]] = deque()
        self._paused = False  # a Commit left in this batch: the host applies it before more input is judged
        self._pending: list[Effect] = []
        self._durable_key: tuple[int, int, int] | None = None
        self._durable_version = 0
        self._view_change_on_start = False  # restored: sign the VIEW-CHANGE in start(), not in __init__
        # ticks per committee attempt at one height (0: never re-draw)
        self._redraw = ctx.redraw_ticks + self._cfg.redraw_extra_ticks if ctx.redraw_ticks else 0
        self._attempt = 0
        self._height_since = 0  # the tick this replica entered its height
        self._later: dict[int, set[str]] = {}  # attempt -> members of its committee heard from in it (this height)
        self._next_role: tuple[tuple[int, int], bool] = ((0, 0), False)  # (height, attempt) -> on its committee?
        self._enter_height(state, self._pending)
        if restore is not None:
            self._restore(restore)

    # --- public API --------------------------------------------------------------------------

    def start(self) -> list[Effect]:
        """Effects produced by the constructor (``RequestProposal`` if this replica proposes first; after a
        restore, the VIEW-CHANGE it signs here, not in the constructor: see :meth:`durable`)."""
        if self._view_change_on_start:
            self._view_change_on_start = False
            self._start_view_change(self._view + 1, self._pending)
        fx, self._pending = self._pending, []
        return fx

    def step(self, message: Message, *, sender: str | None = None) -> list[Effect]:
        """A peer's message arrived (``sender``: the transport-authenticated peer, if known)."""
        fx = self.start()
        self._paused = False
        self._inbox.append((message, sender))
        self._drain(fx)
        return fx

    def resume(self) -> list[Effect]:
        """Handle the input held back behind a ``Commit`` (see :meth:`_drain`), once the host applied the block.

        A host whose ``validate`` reads its own per-height state (the node core: the round's updates, the
        model) calls it right after applying a ``Commit``; otherwise the next ``step``/``tick`` goes on.
        """
        fx = self.start()
        self._paused = False
        self._drain(fx)
        return fx

    def tick(self) -> list[Effect]:
        """One tick of logical time passed."""
        fx = self.start()
        self._paused = False
        self._now += 1
        if self._now >= self._redraw_at():
            self._enter_attempt(self._attempt + 1, fx)  # this height outlasted its committee: the next one takes it
        if self._now >= self._retransmit_at and self._phase in (Phase.PREPARE, Phase.COMMIT, Phase.VIEW_CHANGE):
            self._retransmit(fx)
        if self._now >= self._deadline:
            match self._phase:
                case Phase.OBSERVE:
                    self._ask_sync(fx)
                case Phase.VIEW_CHANGE:  # pBFT §4.5.2: a quorum moved, no NEW-VIEW in time: next view, 2T
                    self._start_view_change(self._view + 1, fx)
                case Phase.PROPOSE if self._log.waiting is not None:  # the input never came: refuse (step 2 above)
                    pp, pending = self._log.waiting
                    self._log.waiting = None
                    self._refuse(pp, pending.reason, fx)
                case _:  # pBFT §4.4: the view's timer expired before the block was decided
                    self._start_view_change(self._view + 1, fx)
        self._drain(fx)
        return fx

    def judge_again(self) -> list[Effect]:
        """The host now holds the input a :class:`Pending` verdict lacked: validate the waiting pre-prepare of this
        view again (PREPARE, a refusal, or still waiting). Nothing happens without one (:attr:`waiting`)."""
        fx = self.start()
        self._paused = False
        waiting = self._log.waiting
        if waiting is not None:
            self._log.waiting = None
            assert (waiting[0].signed.view, self._phase) == (self._view, Phase.PROPOSE), (waiting[0].signed.view,
                                                                                          self._view, self._phase)
            self._accept(waiting[0], fx, validate=True)
        self._drain(fx)
        return fx

    @property
    def waiting(self) -> Proposal | None:
        """The proposal of this view whose verdict is :class:`Pending` (see :meth:`judge_again`), or None."""
        waiting = self._log.waiting
        if waiting is None:
            return None
        pp = waiting[0]
        assert pp.payload is not None
        return Proposal(pp.header, pp.payload)

    def idle_ticks(self) -> int:
        """How many of the next ticks certainly do nothing but count: an observer (outside the height's
        committee) with no input held waits for the decided block until its sync deadline, and every tick
        before that deadline only advances the clock. 0 whenever the next tick may act (a committee member's
        timers, retransmission, held input). A host with many idle replicas skips those ticks
        (:meth:`skip_ticks`) instead of calling :meth:`tick` on each of them; the outcome is the same."""
        if (
            self._phase is not Phase.OBSERVE
            or self._pending
            or self._inbox
            or self._paused
            or self._view_change_on_start
        ):
            return 0
        return max(0, min(self._deadline, self._redraw_at()) - self._now - 1)

    def rest(self) -> None:
        """The host's part in this height is over (a lazy member's: a client that sent its update, with no seat in
        the committee). A lazy observer outside the committee that knows no later height then drops its sync
        timer, as one without a role at its height does: it sleeps until a message wakes it, and follows the
        chain from this height then. Nothing changes otherwise (not lazy, in the committee, or catching up)."""
        if self._lazy and not self._in_committee and self._phase is Phase.OBSERVE and not self._behind():
            self._deadline = _NEVER

    def skip_ticks(self, n: int) -> None:
        """Advance the clock by ``n`` ticks that :meth:`idle_ticks` said do nothing: exactly what ``n`` calls of
        :meth:`tick` would have done. Raises :class:`LocalProtocolError` if one of them might act."""
        idle = self.idle_ticks()
        if not 0 <= n <= idle:
            raise LocalProtocolError(f"cannot skip {n} ticks: only {idle} are idle")
        self._now += n

    def propose(self, payload: Payload, *, height: int, view: int, time_ms: int) -> list[Effect]:
        """Pre-prepare ``payload`` as the primary of (``height``, ``view``), after ``RequestProposal``.

        Returns ``[]`` (counted in ``status().stale_proposals``) if the replica has moved on since the
        request. Raises :class:`LocalProtocolError` if this replica is not the primary, already
        proposed, or its own ``validate`` refuses the proposal.
        """
        fx = self.start()
        self._paused = False  # the host handled the RequestProposal, so also the Commit that came before it
        if (height, view) != (self._h, self._view) or self._phase is not Phase.PROPOSE:
            self._stale_proposals += 1
            return fx
        v = self._view
        if self._primary(v) != self._me:
            raise LocalProtocolError(f"{self._me} is not the primary of height {height} view {view}")
        if v in self._log.accepted or (v > 0 and v not in self._log.new_view_sent):
            raise LocalProtocolError(f"height {height} view {view} has a proposal already")
        if time_ms < self._state.time_ms:
            raise LocalProtocolError(f"time_ms {time_ms} < the previous block's {self._state.time_ms}")
        if time_ms > TIME_MS_MAX:
            raise LocalProtocolError(f"time_ms {time_ms} > 2^63 - 1, the latest a header takes")
        header = make_header(
            chain_id=self._ctx.chain_id,
            height=self._h,
            prev_hash=self._state.head_hash,
            view=v,
            proposer=self._me,
            time_ms=time_ms,
            payload=payload,
        )
        bh = header.hash()
        reason = self._check_header(header, payload) or self._verdict(bh, Proposal(header, payload))
        if reason is not None:
            raise LocalProtocolError(f"own proposal for height {height} view {view} refused: {reason}")
        msg = pre_prepare_message(self._key, self._ctx.chain_id, self._h, v, header, payload)
        assert msg.signed is not None
        pp = PrePrepare(msg.signed, header, bh, payload)
        self._register(msg.signed, fx)
        self._log.sent[(KIND_PRE_PREPARE, v)] = msg
        fx.append(Broadcast(to=self._others, message=msg))
        self._accept(pp, fx, validate=False)
        self._drain(fx)
        return fx

    def status(self) -> ReplicaStatus:
        return ReplicaStatus(
            peer_id=self._me,
            height=self._h,
            view=self._view,
            phase=self._phase,
            primary=self._primary(self._view),
            in_committee=self._in_committee,
            committee=self._committee,
            quorum=self._q,
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
        before it is on disk (DESIGN.md, "Durability"). The replica signs only inside :meth:`start`,
        :meth:`step`, :meth:`tick`, :meth:`propose` and :meth:`resume`, never in its constructor (a
        restored replica signs its VIEW-CHANGE in :meth:`start`), so a host may note
        :attr:`durable_version` right after building it and compare after each call.
        """
        log = self._log
        keys = sorted(log.sent, key=lambda k: (k[1], _KIND_ORDER[k[0]]))
        prepared = None
        if log.prepared is not None:
            proof, payload = log.prepared
            prepared = _PreparedRecord(pre_prepare=proof.pre_prepare.signed, prepares=proof.prepares, payload=payload)
        rec = _DurableRecord(
            format=DURABLE_FORMAT,
            chain_id=self._ctx.chain_id,
            signer=self._me,
            height=self._h,
            view=self._view,
            sent=tuple(log.sent[k] for k in keys),
            prepared=prepared,
        )
        return rec.encode()  # type: ignore[attr-defined]

    @property
    def durable_version(self) -> int:
        """A counter that grows whenever :meth:`durable` would return different bytes (cheap to read).

        Within a height the record only grows: messages are added to it (never replaced), the view only
        rises and the prepared certificate changes only together with a new COMMIT; a new height starts
        a new record. So ``(height, view, messages signed)`` changes exactly when the record does.
        """
        key = (self._h, self._view, len(self._log.sent))
        if key != self._durable_key:
            self._durable_key = key
            self._durable_version += 1
        return self._durable_version

    @property
    def peer_id(self) -> str:
        return self._me

    @property
    def chain_state(self) -> ChainState:
        """The last decided chain state."""
        return self._state

    # --- heights and views ---------------------------------------------------------------------

    def _enter_height(self, state: ChainState, fx: list[Effect]) -> None:
        self._state = state
        self._h = state.height + 1
        self._attempt = 0
        self._height_since = self._now
        self._later = {}
        self._set_committee(state.committee)
        self._log = _HeightLog()
        self._view = 0
        self._sync_attempt = 0
        cfg = self._cfg
        self._retransmit_at = self._now + cfg.timeout_ticks_retransmit
        if self._in_committee:
            self._phase = Phase.PROPOSE
            self._deadline = self._now + cfg.timeout_ticks_start + cfg.timeout_ticks_propose
            if self._primary(0) == self._me:
                fx.append(RequestProposal(height=self._h, view=0))
        else:
            self._phase = Phase.OBSERVE
            self._deadline = self._now + cfg.timeout_ticks_start + cfg.timeout_ticks_sync
        self._replay()
        ahead = self._ahead
        if self._lazy and not self._in_committee:
            if self._behind():
                assert self._shown is not None
                self._deadline = self._now + self._cfg.header_retry_ticks  # catching up: retry soon if nothing comes
                if not any(m.block is not None or (m.signed is not None and m.signed.kind == KIND_HEADER)
                           for m, _ in self._inbox):
                    self._request_sync(self._shown[1], fx, headers=True)  # catching up: the next batch of headers
            elif self._needs_payload is not None and not self._needs_payload(state):
                self._deadline = _NEVER  # no role here and no later height known: sleep until a message wakes us
            return
        held = any(not b.owner for b in self._buffer) or any(m.block is not None for m, _ in self._inbox)
        if ahead is not None and ahead[0] > self._h and not held:
            self._request_sync(ahead[1], fx)  # catching up: the next batch at once

    def _set_committee(self, committee: Sequence[str]) -> None:
        self._committee, self._committee_set, self._q = self._ctx.committee_view(committee)
        self._weak = len(self._committee) - self._q + 1  # f+1: at least one honest among them
        self._in_committee = self._me in self._committee_set
        self._others = tuple(p for p in self._committee if p != self._me) if self._in_committee else self._committee

    # --- committee attempts [issue 31 item 2; ledger.ATTEMPT_VIEWS] -------------------------------

    def _redraw_at(self) -> int:
        """The tick this height moves to its next committee attempt (never without ``redraw_ticks``). A lazy
        observer outside the committee sleeps through it unless it sits on the next attempt's committee: the
        members that move on wake it (:meth:`_enter_attempt`), and a sleeper at a height long decided elsewhere
        does not wake every ``redraw_ticks`` for nothing."""
        if not self._redraw or self._behind():  # (catching up: the height is decided elsewhere)
            return _NEVER
        if self._lazy and not self._in_committee:
            key = (self._h, self._attempt + 1)
            if self._next_role[0] != key:
                nxt = self._ctx.view_committee(self._state, self._h, (self._attempt + 1) * ATTEMPT_VIEWS)
                self._next_role = (key, self._me in nxt)
            if not self._next_role[1]:
                return _NEVER
        return self._height_since + self._redraw * (self._attempt + 1)

    def _enter_attempt(self, attempt: int, fx: list[Effect]) -> None:
        """Hand this height to the committee of ``attempt`` (``ChainContext.view_committee``), at the first view of
        the attempt. A member of it starts there with a VIEW-CHANGE (pBFT §4.5.2) carrying its prepared certificate,
        if any, so the new primary re-proposes the highest one a quorum of the new committee holds; it sends that
        VIEW-CHANGE to the previous committee as well, whose members that decided the height answer with the block
        (a replica past a height serves a view change of it: :meth:`_on_message`). A replica outside the new
        committee observes (a lazy one without a role at the height sleeps, as at a height it has no role at) after
        it shows the new committee the height with the last message it signed there. Safety across attempts rests
        on that answer arriving (docs/sampling.md)."""
        assert attempt > self._attempt, (attempt, self._attempt)
        previous = self._committee
        self._attempt = attempt
        self._later = {a: got for a, got in self._later.items() if a > attempt}
        self._set_committee(self._ctx.view_committee(self._state, self._h, attempt * ATTEMPT_VIEWS))
        view = attempt * ATTEMPT_VIEWS
        self._buffer = [b for b in self._buffer if b.height != self._h or b.view >= view or not b.owner]
        if self._in_committee:
            self._start_view_change(view, fx, also=tuple(p for p in previous if p not in self._committee_set))
        else:
            self._view = view
            self._phase = Phase.OBSERVE
            self._log.waiting = None
            self._deadline = self._now + self._cfg.timeout_ticks_sync
            needs = self._needs_payload
            if self._lazy and not self._behind() and needs is not None and not needs(self._state):
                self._deadline = _NEVER  # a lazy observer without a role here sleeps, as at a height (_enter_height)
            # the new committee's members may sleep (lazy members without a role at their height): the last message
            # this replica signed at this height shows them the height, and they catch up to it (a later height wakes
            # a lazy replica), then enter the attempt on their own timer or on f + 1 of its members' messages
            last = max(self._log.sent.items(), key=lambda kv: (kv[0][1], _KIND_ORDER[kv[0][0]]), default=None)
            if last is not None:
                fx.append(Broadcast(to=self._committee, message=last[1]))

    def _on_later_attempt(self, s: SignedMessage, attempt: int, message: Message, sender: str | None,
                          fx: list[Effect]) -> None:
        """A message of this height from a later committee attempt than ours: its committee's members moved on
        (their clocks run ahead of ours). Once ``f + 1`` of them did (at least one honest), follow them."""
        due = (self._now - self._height_since) // self._redraw + 1 if self._redraw else 0
        if not self._redraw or attempt > due + 1:
            raise RemoteProtocolError("future_view", f"{s.kind} of committee attempt {attempt} (this replica: "
                                      f"{self._attempt})")
        committee, cset, q = self._ctx.committee_view(self._ctx.view_committee(self._state, self._h, s.view))
        if s.signer not in cset:
            raise RemoteProtocolError("not_in_committee", f"{s.signer} is not in committee attempt {attempt}")
        self._verify(s)
        got = self._later.setdefault(attempt, set())
        got.add(s.signer)
        if len(got) >= len(committee) - q + 1:
            self._enter_attempt(attempt, fx)
            self._on_message(message, sender, fx)

    def _enter_view(self, view: int, carried: PrePrepare | None, fx: list[Effect]) -> None:
        self._view = view
        self._phase = Phase.PROPOSE
        self._deadline = self._now + self._cfg.timeout_ticks_propose * self._backoff(view)
        if carried is not None:
            self._accept(carried, fx, validate=False)
        self._replay()

    def _backoff(self, view: int) -> int:
        return 1 << min(view % ATTEMPT_VIEWS, self._cfg.backoff_exponent_max)  # (each attempt starts over)

    def _committee_of(self, view: int) -> tuple[str, ...]:
        """The committee of ``view`` at this height: ours, or (a prepared certificate or a proposal carried from an
        earlier attempt) that attempt's."""
        if view // ATTEMPT_VIEWS == self._attempt:
            return self._committee
        return self._ctx.committee_view(self._ctx.view_committee(self._state, self._h, view))[0]

    def _primary(self, view: int) -> str:
        return primary(self._committee_of(view), self._ctx.genesis_hash, self._h, view)

    # --- durability [pBFT §4.4-4.5: the log in stable storage] ------------------------------------

    def _restore(self, data: bytes) -> None:
        """Resume from a :meth:`durable` record (rules and safety argument: :meth:`__init__`)."""
        rec = self._load_record(data)
        if rec is None:
            return
        h, log = self._h, self._log
        for m in rec.sent:
            s = m.signed
            assert s is not None
            log.sent[(s.kind, s.view)] = m
            log.bodies[(self._me, s.kind, s.view)] = s
            parsed = parse(m)
            match parsed:
                case PrePrepare():
                    assert parsed.payload is not None
                    log.proposals.setdefault(parsed.block_hash, Proposal(parsed.header, parsed.payload))
                case Vote() if s.kind == KIND_PREPARE:
                    log.prepares.setdefault((s.view, parsed.block_hash), {})[self._me] = s
                case Vote():
                    log.commits.setdefault((s.view, parsed.block_hash), {})[self._me] = s
                case ViewChange():
                    log.view_changes.setdefault(s.view, {})[self._me] = parsed
                case NewView():
                    log.new_view_sent.add(s.view)
                    if parsed.pre_prepare is not None:
                        pp = parsed.pre_prepare
                        assert pp.payload is not None
                        log.bodies[(self._me, KIND_PRE_PREPARE, s.view)] = pp.signed
                        log.proposals.setdefault(pp.block_hash, Proposal(pp.header, pp.payload))
        if rec.prepared is not None:
            proof, payload = self._load_prepared(rec)
            log.prepared = (proof, payload)
            log.proposals.setdefault(proof.pre_prepare.block_hash, Proposal(proof.pre_prepare.header, payload))
        v = rec.view
        if v // ATTEMPT_VIEWS > self._attempt:  # it had moved to a later committee attempt: back there
            self._attempt = v // ATTEMPT_VIEWS
            self._height_since = self._now - self._redraw * self._attempt  # the next attempt a whole period on
            self._set_committee(self._ctx.view_committee(self._state, self._h, v))
        at_v = {s.kind for m in rec.sent if (s := m.signed) is not None and s.view == v}
        if not rec.sent and (v == 0 or not self._in_committee):
            return  # signed nothing at this height: the fresh start of the constructor is the same
        fx: list[Effect] = []  # no RequestProposal for view 0: this replica is past it
        self._view = v
        if at_v == {KIND_VIEW_CHANGE}:  # re-enter the view change to v with the same VIEW-CHANGE
            self._phase = Phase.VIEW_CHANGE
            self._deadline = _NEVER
            self._retransmit_at = self._now + self._cfg.timeout_ticks_retransmit
            fx.append(Broadcast(to=self._others, message=log.sent[(KIND_VIEW_CHANGE, v)]))
            self._arm_view_change()
        else:  # it may have signed in v: only a higher view is safe (pBFT §4.5.2), from start() on
            self._phase = Phase.VIEW_CHANGE
            self._deadline = _NEVER
            self._view_change_on_start = True
        assert self._h == h
        self._pending = fx

    def _load_record(self, data: bytes) -> _DurableRecord | None:
        """Decode and check a durable record; None if it is for another height and can be ignored."""

        def bad(why: str) -> DurableStateError:
            return DurableStateError(f"vote record of {self._me}: {why}")

        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise bad(f"expected bytes, got {type(data).__name__}")
        try:
            rec: _DurableRecord = _DurableRecord.decode(bytes(data), bytes_max=DURABLE_BYTES_MAX)  # type: ignore[attr-defined]
        except (LedgerError, ValueError, TypeError) as e:
            raise bad(f"malformed: {e}") from None
        if rec.format != DURABLE_FORMAT:
            raise bad(f"unsupported format {rec.format} (this version reads {DURABLE_FORMAT})")
        if rec.chain_id != self._ctx.chain_id:
            raise bad(f"of chain {rec.chain_id!r:.60}, not {self._ctx.chain_id!r}")
        if rec.signer != self._me:
            raise bad(f"of member {rec.signer!r:.60}")
        if not 1 <= rec.height < 1 << 62 or not 0 <= rec.view <= _DURABLE_VIEW_MAX:
            raise bad(f"height {rec.height} or view {rec.view} out of range")
        if rec.height < self._h:
            return None  # stale: that height is decided
        if rec.height > self._h:
            raise bad(
                f"of height {rec.height} but the block store ends at height {self._h - 1}: decided blocks were "
                f"lost, and its votes at height {self._h} with them; refusing to start (it could sign twice)"
            )
        attempt = rec.view // ATTEMPT_VIEWS
        try:
            committee = self._ctx.view_committee(self._state, self._h, rec.view)
        except LedgerError as e:
            raise bad(str(e)) from None
        if self._me not in committee and (rec.sent or rec.prepared is not None):
            raise bad(f"it signed votes at height {rec.height} in committee attempt {attempt}, which does not include it")
        seen: set[tuple[str, int]] = set()
        for m in rec.sent:
            s = m.signed
            if s is None or m.block is not None:
                raise bad("a sent entry is not a signed message")
            if s.kind not in PBFT_KINDS or s.signer != self._me or s.height != rec.height or s.view > rec.view:
                raise bad(f"a sent {s.kind!r:.40} of ({s.height}, {s.view}) by {s.signer!r:.60} does not belong here")
            if (s.kind, s.view) in seen:
                raise bad(f"two {s.kind} messages for view {s.view}")
            seen.add((s.kind, s.view))
            try:
                parse(m)
                self._verify(s, "bad_vote_record")
            except RemoteProtocolError as e:
                raise bad(f"its {s.kind} of view {s.view}: {e}") from None
        return rec

    def _load_prepared(self, rec: _DurableRecord) -> tuple[PreparedProof, Payload]:
        """The record's prepared certificate, checked as a peer's, and consistent with its own COMMIT."""
        assert rec.prepared is not None
        p = rec.prepared
        try:
            pp = parse(Message(signed=p.pre_prepare, payload=p.payload))
            if not isinstance(pp, PrePrepare):
                raise RemoteProtocolError("malformed", "the prepared certificate needs a pre_prepare")
            w, bh = pp.signed.view, pp.block_hash
            if pp.signed.height != rec.height or w > rec.view:
                raise RemoteProtocolError("malformed", f"certificate of ({pp.signed.height}, {w})")
            last = ""
            for s in p.prepares:
                vote = parse(Message(signed=s))
                ok = isinstance(vote, Vote) and s.kind == KIND_PREPARE and (s.height, s.view) == (rec.height, w)
                if not ok or vote.block_hash != bh or not s.signer > last or s.signer == pp.signed.signer:  # type: ignore[union-attr]
                    raise RemoteProtocolError("malformed", "prepares must be sorted, unique PREPAREs of its block")
                last = s.signer
            proof = PreparedProof(PrePrepare(pp.signed, pp.header, bh, None), p.prepares)
            self._check_proof(proof, "bad_vote_record")
        except RemoteProtocolError as e:
            raise DurableStateError(f"vote record of {self._me}: prepared certificate: {e}") from None
        own = self._log.sent.get((KIND_COMMIT, w))
        if own is None or own.signed is None or own.signed.body.get("block_hash") != bh:
            raise DurableStateError(f"vote record of {self._me}: prepared in view {w} without its own COMMIT there")
        return proof, p.payload

    # --- input loop ----------------------------------------------------------------------------

    def _drain(self, fx: list[Effect]) -> None:
        """Handle the inbox in order; stop after a ``Commit``: the next height's held messages (a pre-prepare
        among them) must wait until the host applied the block, or ``validate`` would judge a proposal of
        height h + 1 against the host's state of height h (and a batch of synced blocks would reach the
        host several heights at a time)."""
        while self._inbox and not self._paused:
            message, sender = self._inbox.popleft()
            try:
                self._on_message(message, sender, fx)
            except RemoteProtocolError as e:  # a peer fault: drop, count, carry on (never fatal)
                self._dropped[e.reason] += 1

    def _on_message(self, message: Message, sender: str | None, fx: list[Effect]) -> None:
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
        if s.height < self._h:
            # The sender is stuck at a height we decided: a view change says so, and so does a vote we
            # have already verified once (it is being retransmitted). A first late vote says nothing.
            if s.kind in (KIND_VIEW_CHANGE, KIND_NEW_VIEW) or self._seen(s):
                self._serve(s, fx)
            raise RemoteProtocolError("stale_height", f"{s.kind} for height {s.height} < {self._h}")
        if s.height > self._h:
            self._verify(s)
            if s.kind in (KIND_VIEW_CHANGE, KIND_NEW_VIEW):  # the sender is stuck past our height
                self._request_sync(s.signer, fx, headers=self._by_headers)
            self._note_ahead(s.height, s.signer, fx, decided=s.height - 1)
            if s.height > self._h + self._cfg.height_window:
                raise RemoteProtocolError("future_height", f"{s.kind} for height {s.height}")
            self._hold(s.height, s.view, s.signer, message, sender)
            return
        attempt = s.view // ATTEMPT_VIEWS
        if attempt > self._attempt:
            self._on_later_attempt(s, attempt, message, sender, fx)
            return
        if attempt < self._attempt:  # (a block decided there reaches us whole: its deciders serve it)
            raise RemoteProtocolError("stale_view", f"{s.kind} of committee attempt {attempt}, replica in {self._attempt}")
        if s.signer not in self._committee_set:
            raise RemoteProtocolError("not_in_committee", f"{s.signer} is not in the committee of height {self._h}")
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
            ours = self._log.sent.get((KIND_VIEW_CHANGE, v)) if kind == KIND_VIEW_CHANGE else None
            if ours is not None and s.signer != self._me:
                # pBFT §4.5.2 liveness: a member still collecting view changes for v (ours was lost on the way)
                # cannot reach its quorum once everyone else moved on, nor join a higher view on f + 1 that
                # Byzantine members withhold; our own VIEW-CHANGE for v lets it, then its timer moves it up.
                self._verify(s)
                fx.append(Send(to=s.signer, message=ours))
            raise RemoteProtocolError("stale_view", f"{kind} for view {v}, replica in view {self._view}")
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

    # --- normal case [pBFT §4.2-4.3] ------------------------------------------------------------

    def _on_pre_prepare(self, pp: PrePrepare, fx: list[Effect]) -> None:
        expected = self._primary(self._view)
        if pp.signed.signer != expected:
            raise RemoteProtocolError("not_primary", f"pre_prepare by {pp.signed.signer}, primary is {expected}")
        if pp.header.view != self._view:  # a re-proposal is valid only inside a NEW-VIEW
            raise RemoteProtocolError("bad_pre_prepare", f"header of view {pp.header.view} outside a new_view")
        self._accept(pp, fx, validate=True)

    def _accept(self, pp: PrePrepare, fx: list[Effect], *, validate: bool) -> None:
        """Accept the pre-prepare of the current view: vote PREPARE (backups), or refuse it."""
        v, bh, h = self._view, pp.block_hash, self._h
        assert pp.payload is not None
        proposal = Proposal(pp.header, pp.payload)
        self._learn(bh, proposal, fx)
        if self._h != h:  # a certificate for it was already here: decided
            return
        if validate:
            self._log.waiting = None
            reason = self._check_header(pp.header, pp.payload) or self._verdict(bh, proposal)
            if isinstance(reason, Pending):  # the host lacks an input: wait for it, within the view's timer
                self._log.waiting = (pp, reason)
                return
            if reason is not None:
                self._refuse(pp, reason, fx)
                return
        self._log.accepted[v] = pp
        self._phase = Phase.PREPARE
        self._deadline = self._now + self._cfg.timeout_ticks_prepare * self._backoff(v)
        self._retransmit_at = self._now + self._cfg.timeout_ticks_retransmit
        votes = self._log.prepares.setdefault((v, bh), {})
        votes.setdefault(pp.signed.signer, pp.signed)  # the pre-prepare is the primary's vote
        if pp.signed.signer != self._me:
            msg = vote_message(self._key, self._ctx.chain_id, KIND_PREPARE, self._h, v, bh)
            assert msg.signed is not None
            self._register(msg.signed, fx)
            votes[self._me] = msg.signed
            self._log.sent[(KIND_PREPARE, v)] = msg
            fx.append(Broadcast(to=self._others, message=msg))
        self._check_prepared(fx)

    def _refuse(self, pp: PrePrepare, reason: str, fx: list[Effect]) -> None:
        """CCP step 5 / DESIGN.md: a replica that disagrees refuses, records why and asks for a new view."""
        reason = reason.encode()[:REASON_BYTES_MAX].decode(errors="ignore")
        s = pp.signed
        self._refusals.append(
            Refusal(height=s.height, view=s.view, proposer=s.signer, block_hash=pp.block_hash, reason=reason)
        )
        self._dropped["invalid_proposal"] += 1
        ev = Evidence(kind="invalid_proposal", offender=s.signer, height=s.height, view=s.view, exhibits=(s,), reason=reason)
        self._evidence_reported += 1
        fx.append(ReportMisbehavior(evidence=ev, payload=pp.payload))
        self._start_view_change(self._view + 1, fx)

    def _on_prepare(self, vote: Vote, fx: list[Effect]) -> None:
        s = vote.signed
        votes = self._log.prepares.setdefault((s.view, vote.block_hash), {})
        if s.signer in votes:
            self._duplicates += 1
            return
        votes[s.signer] = s
        self._check_prepared(fx)

    def _check_prepared(self, fx: list[Effect]) -> None:
        """pBFT §4.2 prepared(m, v, n, i): the pre-prepare and ``q`` matching votes -> broadcast COMMIT."""
        if self._phase is not Phase.PREPARE:
            return
        v = self._view
        pp = self._log.accepted[v]
        votes = self._log.prepares.get((v, pp.block_hash), {})
        if len(votes) < self._q:
            return
        proof = PreparedProof(
            PrePrepare(pp.signed, pp.header, pp.block_hash, None),
            tuple(votes[p] for p in sorted(votes) if p != pp.signed.signer),
        )
        assert pp.payload is not None
        self._log.prepared = (proof, pp.payload)
        self._phase = Phase.COMMIT
        self._deadline = self._now + self._cfg.timeout_ticks_commit * self._backoff(v)
        self._retransmit_at = self._now + self._cfg.timeout_ticks_retransmit
        msg = vote_message(self._key, self._ctx.chain_id, KIND_COMMIT, self._h, v, pp.block_hash)
        assert msg.signed is not None
        self._register(msg.signed, fx)
        self._log.commits.setdefault((v, pp.block_hash), {})[self._me] = msg.signed
        self._log.sent[(KIND_COMMIT, v)] = msg
        fx.append(Broadcast(to=self._others, message=msg))
        self._check_committed(v, pp.block_hash, fx)

    def _on_commit(self, vote: Vote, fx: list[Effect]) -> None:
        s = vote.signed
        votes = self._log.commits.setdefault((s.view, vote.block_hash), {})
        if s.signer in votes:
            self._duplicates += 1
            return
        votes[s.signer] = s
        self._check_committed(s.view, vote.block_hash, fx)

    def _check_committed(self, view: int, bh: bytes, fx: list[Effect]) -> None:
        """pBFT §4.3 committed-local: ``q`` COMMITs of one view for one block = its certificate."""
        votes = self._log.commits.get((view, bh), {})
        proposal = self._log.proposals.get(bh)
        if len(votes) < self._q or proposal is None:
            return  # without the proposal, the decided block comes from a peer (Message(block=...))
        signers = sorted(votes)[: self._q]
        cert = Certificate(
            height=self._h,
            view=view,
            block_hash=bh,
            signatures=tuple(CommitSignature(signer=p, signature=votes[p].signature) for p in signers),
        )
        self._decide(Block(header=proposal.header, payload=proposal.payload, certificate=cert), fx)

    def _learn(self, bh: bytes, proposal: Proposal, fx: list[Effect]) -> None:
        """Remember a proposal's data; decide at once if its certificate is already here."""
        if bh in self._log.proposals:
            return
        self._log.proposals[bh] = proposal
        for view in sorted(v for v, b in self._log.commits if b == bh):
            self._check_committed(view, bh, fx)
            if bh not in self._log.proposals:  # decided: the height moved on
                return

    def _decide(self, block: Block, fx: list[Effect], *, state: ChainState | None = None) -> None:
        """``block`` is decided (``state``: the chain state after it, if already at hand from its check)."""
        fx.append(Commit(block=block))
        self._paused = True
        self._decided += 1
        bh = block.header.hash()
        newcomers = sorted(set(block.payload.next_committee) - self._committee_set - {self._me})
        if newcomers and self._in_committee and self._me in self._announcers(bh):  # CCP step 8
            fx.append(Broadcast(to=tuple(newcomers), message=decided_message(block)))
        self._enter_height(advance_state(self._state, block) if state is None else state, fx)

    def _announcers(self, bh: bytes) -> list[str]:
        """The ``C - q + 1`` committee members (at least one honest) that send a decided block onwards."""
        ranked = sorted(self._committee, key=lambda p: (hash_tagged(b"concilium-announce/v1", bh + p.encode()), p))
        return ranked[: self._weak]

    def _retransmit(self, fx: list[Effect]) -> None:
        """Re-send this view's own messages to the members that have not shown they have them.

        pBFT assumes messages are retransmitted until received; this sends nothing while the view
        makes progress (each phase change re-arms the timer), so the fault-free cost is zero.
        """
        self._retransmit_at = self._now + self._cfg.timeout_ticks_retransmit
        v, sent = self._view, self._log.sent
        if self._phase is Phase.VIEW_CHANGE:
            # To every other member: a peer whose VIEW-CHANGE reached us may still lack ours, and without a
            # quorum of them nobody's view-change timer starts (members split across two views then wait for
            # each other for ever). Sent only while the view change is stuck, so the cost stays there.
            self._resend(sent.get((KIND_VIEW_CHANGE, v)), list(self._others), fx)
            return
        pp = self._log.accepted.get(v)
        if pp is None:
            return
        prepares = self._log.prepares.get((v, pp.block_hash), {})
        commits = self._log.commits.get((v, pp.block_hash), {})
        # Who has not shown it accepted the proposal may lack the (re-)proposal; who has not committed may
        # lack our PREPARE; anyone may lack our COMMIT (a replica that decided has left the height).
        behind = [p for p in self._others if p not in prepares and p not in commits]
        uncommitted = [p for p in self._others if p not in commits]
        self._resend(sent.get((KIND_NEW_VIEW, v)), behind, fx)  # a lost NEW-VIEW keeps them out of the view
        self._resend(sent.get((KIND_PRE_PREPARE, v)), behind, fx)
        self._resend(sent.get((KIND_PREPARE, v)), uncommitted, fx)
        self._resend(sent.get((KIND_COMMIT, v)), list(self._others), fx)

    def _resend(self, msg: Message | None, to: list[str], fx: list[Effect]) -> None:
        if msg is not None and to:
            fx.append(Broadcast(to=tuple(to), message=msg))

    # --- view change [pBFT §4.5.2] ---------------------------------------------------------------

    def _start_view_change(self, view: int, fx: list[Effect], *, also: tuple[str, ...] = ()) -> None:
        """Move to ``view`` with a VIEW-CHANGE to the committee (and to ``also``: the previous committee, when a new
        attempt starts)."""
        assert view > self._view, (view, self._view)
        self._view = view
        self._phase = Phase.VIEW_CHANGE
        self._log.waiting = None  # (a proposal of an earlier view)
        self._deadline = _NEVER  # armed once a quorum has left the earlier views (_arm_view_change)
        prepared = self._log.prepared
        proof, payload = prepared if prepared is not None else (None, None)
        msg = view_change_message(self._key, self._ctx.chain_id, self._h, view, proof, payload)
        assert msg.signed is not None
        self._register(msg.signed, fx)
        self._log.view_changes.setdefault(view, {})[self._me] = ViewChange(msg.signed, proof, payload)
        self._log.sent[(KIND_VIEW_CHANGE, view)] = msg
        self._retransmit_at = self._now + self._cfg.timeout_ticks_retransmit
        self._view_changes_sent += 1
        fx.append(Broadcast(to=self._others + also, message=msg))
        self._buffer = [b for b in self._buffer if b.height != self._h or b.view >= view or not b.owner]
        self._arm_view_change()
        self._maybe_join(fx)
        self._maybe_new_view(fx)

    def _on_view_change(self, vc: ViewChange, fx: list[Effect]) -> None:
        s = vc.signed
        if vc.prepared is not None:
            self._check_proof(vc.prepared, "bad_view_change")
            assert vc.payload is not None
            pp = vc.prepared.pre_prepare
            h = self._h
            self._learn(pp.block_hash, Proposal(pp.header, vc.payload), fx)
            if self._h != h:
                return
        got = self._log.view_changes.setdefault(s.view, {})
        if s.signer in got:
            self._duplicates += 1
            return
        got[s.signer] = vc
        self._arm_view_change()
        self._maybe_join(fx)
        self._maybe_new_view(fx)

    def _arm_view_change(self) -> None:
        """pBFT §4.5.2: the timer for moving past view ``v`` starts only once ``q`` members (us included)
        sent view changes for ``v`` or later. A replica alone (cut off) therefore stays at its view
        instead of running ahead of the others, who would then chase it at the same capped pace."""
        if self._phase is not Phase.VIEW_CHANGE or self._deadline != _NEVER:
            return
        v = self._view
        support = {p for view, got in self._log.view_changes.items() if view >= v for p in got}
        if len(support) >= self._q:
            self._deadline = self._now + self._cfg.timeout_ticks_view_change * self._backoff(v)

    def _maybe_join(self, fx: list[Effect]) -> None:
        """pBFT §4.5.2 liveness: ``f+1`` view changes for higher views -> join the smallest of them."""
        while True:
            lowest: dict[str, int] = {}
            for view, got in self._log.view_changes.items():
                if view > self._view:
                    for p in got:
                        if p != self._me:
                            lowest[p] = min(lowest.get(p, view), view)
            if len(lowest) < self._weak or not self._in_committee:
                return
            self._start_view_change(min(lowest.values()), fx)

    def _maybe_new_view(self, fx: list[Effect]) -> None:
        """As the primary of the new view with ``q`` view changes: NEW-VIEW, re-proposing if needed."""
        v = self._view
        if self._phase is not Phase.VIEW_CHANGE or v in self._log.new_view_sent or self._primary(v) != self._me:
            return
        got = self._log.view_changes.get(v, {})
        if len(got) < self._q:
            return
        chosen = [got[p] for p in sorted(got)][: self._q]
        best = _highest_prepared(chosen)
        carried = None
        payload = None
        if best is not None:
            payload = next(vc.payload for vc in chosen if vc.prepared is best)
            assert payload is not None
            pm = pre_prepare_message(self._key, self._ctx.chain_id, self._h, v, best.pre_prepare.header, payload)
            assert pm.signed is not None
            carried = PrePrepare(pm.signed, best.pre_prepare.header, best.pre_prepare.block_hash, payload)
            self._register(pm.signed, fx)
        msg = new_view_message(
            self._key,
            self._ctx.chain_id,
            self._h,
            v,
            [vc.signed for vc in chosen],
            carried.signed if carried is not None else None,
            payload,
        )
        assert msg.signed is not None
        self._register(msg.signed, fx)
        self._log.new_view_sent.add(v)
        self._log.sent[(KIND_NEW_VIEW, v)] = msg
        fx.append(Broadcast(to=self._others, message=msg))
        self._enter_view(v, carried, fx)
        if carried is None:
            fx.append(RequestProposal(height=self._h, view=v))

    def _on_new_view(self, nv: NewView, fx: list[Effect]) -> None:
        s = nv.signed
        v = s.view
        expected = self._primary(v)
        if s.signer != expected:
            raise RemoteProtocolError("not_primary", f"new_view by {s.signer}, primary of view {v} is {expected}")
        signers = {vc.signed.signer for vc in nv.view_changes}
        if len(signers) < self._q or not signers <= self._committee_set:
            raise RemoteProtocolError("bad_new_view", f"new_view needs {self._q} view changes of committee members")
        for vc in nv.view_changes:
            self._verify(vc.signed, "bad_new_view")
            if vc.prepared is not None:
                self._check_proof(vc.prepared, "bad_new_view")
        best = _highest_prepared(list(nv.view_changes))
        pp = nv.pre_prepare
        if best is None and pp is not None:
            raise RemoteProtocolError("bad_new_view", "re-proposal without a prepared certificate")
        if best is not None:
            if pp is None or pp.block_hash != best.pre_prepare.block_hash:
                raise RemoteProtocolError("bad_new_view", "new_view does not re-propose the highest prepared block")
            self._verify(pp.signed, "bad_new_view")
            self._register(pp.signed, fx, embedded=True)
        for vc in nv.view_changes:
            self._register(vc.signed, fx, embedded=True)
        self._enter_view(v, pp, fx)

    def _check_proof(self, proof: PreparedProof, reason: str) -> None:
        """A prepared certificate of view ``w``: the primary of ``w``'s pre-prepare and ``q`` votes in all."""
        pp = proof.pre_prepare
        w = proof.view
        expected = self._primary(w)
        if pp.signed.signer != expected:
            raise RemoteProtocolError(reason, f"prepared proof: pre_prepare of view {w} not by its primary")
        signers = {pp.signed.signer, *(p.signer for p in proof.prepares)}
        _, cset, q = self._ctx.committee_view(self._committee_of(w))
        if len(signers) < q or not signers <= cset:
            raise RemoteProtocolError(reason, f"prepared proof needs {q} votes of committee members")
        self._verify(pp.signed, reason)
        for p in proof.prepares:
            self._verify(p, reason)

    # --- catch-up ---------------------------------------------------------------------------------

    def _on_decided(self, d: Decided, sender: str | None, fx: list[Effect]) -> None:
        b = d.block
        if b.height < self._h:
            if self._lazy and self._epoch > 1:  # skipped past (a header of its epoch's end came first)
                self._duplicates += 1
                return
            raise RemoteProtocolError("stale_height", f"decided block {b.height} < {self._h}")
        if b.height > self._h and not self._skips_to(b.height):
            self._note_ahead(b.height, sender, fx, decided=b.height)
            if b.height > self._h + self._cfg.height_window and not self._by_headers:
                raise RemoteProtocolError("future_height", f"decided block {b.height}")
            # (a lazy observer holds the block that woke it however far ahead: it catches up to it by headers; the
            # buffer's bounds per sender still hold)
            if not any(x.owner == "" and x.height == b.height for x in self._buffer):
                self._hold(b.height, 0, "", Message(block=b), sender)
            self._ask_block(sender, fx, headers=self._by_headers)
            return
        try:  # the successor of this height, or (a skip) a later block of its committee epoch
            state = verify_decided_block(self._ctx, self._state, b, epoch=self._epoch)
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
        if h < self._h:
            if self._lazy:  # the rest of a batch of headers, overtaken by the block this replica needed whole
                self._duplicates += 1
                return
            raise RemoteProtocolError("stale_height", f"decided header {h} < {self._h}")
        if h > self._h and not self._skips_to(h):
            self._note_ahead(h, sender, fx, decided=h)
            window = self._header_span if self._by_headers else self._cfg.height_window
            if h > self._h + window:  # (a lazy observer holds a batch of headers that arrives out of order)
                raise RemoteProtocolError("future_height", f"decided header {h}")
            if self._by_headers and not any(x.owner == _HEADER_OWNER and x.height == h for x in self._buffer):
                self._hold(h, 0, _HEADER_OWNER, Message(signed=d.signed), sender)  # a batch overtaken on the way
            self._ask_block(sender, fx, headers=self._by_headers)  # the heights between are not at hand
            return
        if self._in_committee or self._next_committee is None:
            self._ask_block(sender, fx)
            return
        hd = d.header
        before = self._state
        if hd.height > self._h:  # a skip: what the next committee is drawn from is the state before the header,
            # known here by what the rules read of it (its hash, its height, the epoch's committee); the ledger
            # checks that the header is of this epoch
            before = ChainState(height=hd.height - 1, head_hash=hd.prev_hash, time_ms=self._state.time_ms,
                                committee=self._state.committee, model_digest=b"", state_digest=None)
        try:
            state = apply_header(self._ctx, self._state, hd, d.certificate,
                                 next_committee=self._next_committee(before), epoch=self._epoch)
        except LedgerError as e:
            raise RemoteProtocolError("bad_certificate", str(e)) from None
        if self._needs_payload is None or self._needs_payload(state):
            self._ask_block(sender, fx)
            return
        fx.append(CommitHeader(header=d.header, certificate=d.certificate, state=state))
        self._paused = True
        self._decided += 1
        self._enter_height(state, fx)

    def _on_sync_request(self, req: SyncRequest, fx: list[Effect]) -> None:
        if req.signed.height >= self._h:
            raise RemoteProtocolError("sync_unavailable", f"block {req.signed.height} is not decided here")
        self._serve(req.signed, fx, headers=req.headers)

    def _serve(self, s: SignedMessage, fx: list[Effect], *, headers: bool = False) -> None:
        """Have the node send ``s.signer`` our decided blocks (``headers``: their headers and certificates) from
        ``s.height`` on (one batch), at most once per sync timeout per (peer, height, headers). The blocks come
        from the node's block store."""
        key = (s.signer, s.height, headers)
        last = self._served.get(key)
        every = self._cfg.header_retry_ticks if headers else self._cfg.timeout_ticks_sync
        if s.height >= self._h or s.signer == self._me or (last is not None and self._now - last < every):
            return
        self._verify(s)
        if len(self._served) >= 4 * self._cfg.buffered_messages_max:
            self._served.clear()
        self._served[key] = self._now
        batch = self._header_span if headers else self._cfg.sync_batch_max
        fx.append(SendBlocks(to=s.signer, start=s.height, stop=min(self._h, s.height + batch), headers=headers,
                             epoch=self._epoch if headers else 1))

    @property
    def view_primary(self) -> tuple[int, int, str]:
        """``(height, view, primary)`` this replica is at now (cheaper than :meth:`status`)."""
        return self._h, self._view, self._primary(self._view)

    @property
    def ahead_height(self) -> int:
        """The highest height a member showed this replica (0 if none beyond its own yet): how far the network is,
        as far as this replica knows."""
        return self._ahead[0] if self._ahead is not None else 0

    @property
    def behind(self) -> bool:
        """A member showed this replica a later decided height: it is catching up (lazy: it does not sleep)."""
        return self._behind()

    def _behind(self) -> bool:
        """A member showed it has decided this height (a lazy replica then catches up, and does not sleep)."""
        return self._shown is not None and self._shown[0] >= self._h

    def _note_ahead(self, height: int, peer: str | None, fx: list[Effect], *, decided: int) -> None:
        """A member showed a height beyond ours: remember who, and ask it if we are 2+ heights behind."""
        if peer is None or peer not in self._ctx.members or peer == self._me:
            return
        if self._ahead is None or height > self._ahead[0]:
            self._ahead = (height, peer)
        if self._shown is None or decided > self._shown[0]:
            self._shown = (decided, peer)
        if self._phase is Phase.OBSERVE and self._deadline == _NEVER and self._behind():
            self._deadline = self._now + self._cfg.header_retry_ticks  # a sleeping lazy observer: catching up now
        if height > self._h + 1:
            self._request_sync(peer, fx, headers=self._by_headers)

    @property
    def _header_span(self) -> int:
        """Heights one batch of headers covers: ``header_batch_max``, times the epoch where only the last header
        of each epoch is sent (still at most ``header_batch_max`` + 1 headers per batch)."""
        return self._cfg.header_batch_max * self._epoch

    def _skips_to(self, height: int) -> bool:
        """May this replica take a decided block or header of ``height`` > its own without those between? Only a
        lazy one outside the committee, within the committee epoch of its height (``committee_epoch``)."""
        return self._epoch > 1 and self._by_headers and same_epoch(self._h, height, self._epoch)

    @property
    def _by_headers(self) -> bool:
        """A lazy replica outside the committee catches up by headers (it asks for a block only where its host
        needs the payload)."""
        return self._lazy and not self._in_committee

    def _ask_block(self, sender: str | None, fx: list[Effect], *, headers: bool = False) -> None:
        """Ask the member that sent a decided block or header for the whole block(s) (``headers``: their headers)
        from this height on."""
        if sender is not None and sender in self._ctx.members:
            self._request_sync(sender, fx, headers=headers)

    def _request_sync(self, peer: str, fx: list[Effect], *, headers: bool = False) -> None:
        key = (peer, self._h, headers)
        last = self._sync_asked.get(key)
        every = self._cfg.header_retry_ticks if headers else self._cfg.timeout_ticks_sync
        if peer == self._me or (last is not None and self._now - last < every):
            return
        if headers:
            until, at = self._headers_asked
            if self._h < until and self._now - at < every:
                return  # a batch that covers this height is on its way
            self._note_headers_asked()
        if len(self._sync_asked) >= 4 * self._cfg.buffered_messages_max:
            self._sync_asked.clear()
        self._sync_asked[key] = self._now
        fx.append(Send(to=peer, message=self._sync_message(headers)))

    def _note_headers_asked(self) -> None:
        """A batch of headers asked now covers the heights up to the one the sender showed (it can serve what it
        decided), at most :attr:`_header_span`: no second request for them while it is on its way."""
        shown = self._shown[0] if self._shown is not None else self._h
        self._headers_asked = (min(self._h + self._header_span, max(shown + 1, self._h + 1)), self._now)

    def _sync_message(self, headers: bool) -> Message:
        make = header_sync_request_message if headers else sync_request_message
        return make(self._key, self._ctx.chain_id, self._h)

    def _ask_sync(self, fx: list[Effect]) -> None:
        """Observer timer: ask the committee members in turn for the decided block (a lazy replica: for headers,
        first from the member that showed it a later height)."""
        others = self._others
        headers = self._by_headers
        if headers and self._behind():
            assert self._shown is not None
            others = (self._shown[1], *others)
            if self._sync_attempt >= len(others) and self._needs_payload is not None and not self._needs_payload(self._state):
                # every member asked in turn, no header came: the later height shown was not real (an unverified
                # block), or nobody serves it. Without a role here, sleep again until a message shows one.
                self._shown = None
                self._deadline = _NEVER
                return
        if others:
            peer = others[self._sync_attempt % len(others)]
            self._sync_attempt += 1
            fx.append(Send(to=peer, message=self._sync_message(headers)))
            if headers:
                self._note_headers_asked()
        catching_up = headers and self._behind()
        self._deadline = self._now + (self._cfg.header_retry_ticks if catching_up else self._cfg.timeout_ticks_sync)

    # --- buffers ------------------------------------------------------------------------------------

    def _hold(self, height: int, view: int, owner: str, message: Message, sender: str | None) -> None:
        """Keep a message for a later view or height; bounded overall and per sender, in count and in bytes (freed
        when the height or view it is for is reached, or passed: :meth:`_replay`)."""
        cap = self._cfg.buffered_messages_max
        members = max(1, len(self._ctx.members))
        per_owner = max(8, cap // members)
        if owner == _HEADER_OWNER:
            per_owner = max(per_owner, self._cfg.header_batch_max)
        size = len(message.encode())  # type: ignore[attr-defined]
        bytes_max = self._cfg.buffered_bytes_max
        owner_bytes_max = max(self._cfg.buffered_owner_bytes_min, bytes_max // members)
        mine = [b for b in self._buffer if b.owner == owner]
        if (len(self._buffer) >= cap or len(mine) >= per_owner or sum(b.size for b in mine) + size > owner_bytes_max
                or sum(b.size for b in self._buffer) + size > bytes_max):
            raise RemoteProtocolError("buffer_full", f"no room for a message of height {height} view {view}")
        self._buffer.append(_Buffered(height, view, owner, message, sender, size))

    def _replay(self) -> None:
        """Move the held messages that can be handled now to the inbox; forget the stale ones."""
        keep: list[_Buffered] = []
        skips: list[_Buffered] = []
        for b in self._buffer:
            if b.height < self._h:
                continue
            ready = b.height == self._h and (
                not b.owner or b.view < self._view or (b.view == self._view and self._phase is not Phase.VIEW_CHANGE)
            )
            if ready:
                self._inbox.append((b.message, b.sender))
            elif b.owner in ("", _HEADER_OWNER) and self._skips_to(b.height):
                skips.append(b)  # a decided block or header this replica may skip to now
            else:
                keep.append(b)
        # the nearest first, a block before a header of its height: a skip past a held block would leave it stale
        skips.sort(key=lambda b: (b.height, b.owner != ""))
        self._inbox.extend((b.message, b.sender) for b in skips)
        self._buffer = keep

    # --- checks ---------------------------------------------------------------------------------------

    def _seen(self, s: SignedMessage) -> bool:
        """Whether exactly this signed message was verified before (a retransmission or duplicate)."""
        msg = sign_bytes(self._ctx.chain_id, s.kind, s.height, s.view, s.body)
        return sha256(s.signature + s.signer.encode() + msg) in self._verified

    def _verify(self, s: SignedMessage, reason: str = "bad_signature") -> None:
        """Check the signature (membership was checked before); each exact message is verified once."""
        msg = sign_bytes(self._ctx.chain_id, s.kind, s.height, s.view, s.body)
        ck = sha256(s.signature + s.signer.encode() + msg)
        if ck in self._verified:
            return
        try:
            self._ctx.keys.verify(s.signer, s.signature, msg, what=f"{s.kind} ({s.height}, {s.view})")
        except SignatureError as e:
            raise RemoteProtocolError(reason, str(e)) from None
        if len(self._verified) >= self._cfg.verify_cache_max:
            del self._verified[next(iter(self._verified))]
        self._verified[ck] = None

    def _register(self, s: SignedMessage, fx: list[Effect], *, embedded: bool = False) -> None:
        """Equivocation check: one body per (signer, kind, view) at this height [seed_003 §2.8.4].

        A conflict yields ledger evidence (``check_evidence`` accepts the pair as is). A conflicting
        top-level message is dropped; one embedded in a proof is only reported (its carrier may be honest).
        """
        if s.kind not in PBFT_KINDS or s.height != self._h:
            return
        k = (s.signer, s.kind, s.view)
        first = self._log.bodies.setdefault(k, s)
        if first is s or encode(first.body) == encode(s.body):
            return
        a, b = sorted((first, s), key=lambda m: m.encode())  # type: ignore[attr-defined]
        ev = Evidence(
            kind="equivocation",
            offender=s.signer,
            height=s.height,
            view=s.view,
            exhibits=(a, b),
            reason=f"two different {s.kind} messages for height {s.height} view {s.view}",
        )
        if k not in self._log.evidence:
            self._log.evidence.add(k)
            self._evidence_reported += 1
            fx.append(ReportMisbehavior(evidence=ev))
        if not embedded:
            raise EquivocationError(ev)

    def _check_header(self, hd: BlockHeader, payload: Payload) -> str | None:
        """The ledger's structural rules for a proposal (everything but the certificate)."""
        st = self._state
        if hd.chain_id != self._ctx.chain_id:
            return f"chain id {hd.chain_id!r:.60} is not {self._ctx.chain_id!r}"
        if hd.height != self._h or hd.fl_round != self._h:
            return f"header for height {hd.height} (fl_round {hd.fl_round}), expected {self._h}"
        if hd.prev_hash != st.head_hash:
            return "prev_hash does not link to the previous block"
        if hd.time_ms < st.time_ms:
            return f"time goes backwards ({hd.time_ms} < {st.time_ms})"
        if hd.proposer != self._primary(hd.view):
            return f"proposer {hd.proposer} is not the primary of view {hd.view}"
        if hd.updates_root != merkle_root(update_leaves(payload.updates)):
            return "Merkle root of update commitments mismatch"
        for p in payload.next_committee:
            if p not in self._ctx.members:
                return f"next committee names non-member {p!r:.60}"
        return None

    def _verdict(self, bh: bytes, proposal: Proposal) -> str | Pending | None:
        if bh in self._log.verdicts:
            return self._log.verdicts[bh]
        verdict = self._validate(proposal)
        if not isinstance(verdict, Pending):  # (a pending one is asked again)
            self._log.verdicts[bh] = verdict
        return verdict


def _highest_prepared(vcs: Sequence[ViewChange]) -> PreparedProof | None:
    """The prepared certificate of the highest view among ``vcs`` (ties, impossible with f < C/3, by hash)."""
    best: PreparedProof | None = None
    for vc in vcs:
        p = vc.prepared
        if p is not None and (best is None or (p.view, p.pre_prepare.block_hash) > (best.view, best.pre_prepare.block_hash)):
            best = p
    return best
