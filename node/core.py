"""The node core: a sans-I/O orchestrator composing consensus, learning and the ledger for one peer.

Inputs: :meth:`NodeCore.on_message` (bytes from a peer), :meth:`NodeCore.tick` (one tick of logical
time), :meth:`NodeCore.on_training_done` (a local training job finished). Outputs: effects
(:class:`Transmit` bytes to a peer, :class:`Train` a local job, :class:`Decided` a committed block,
:class:`Misbehavior` evidence). No clock, no sockets, no threads, no global RNG: the simulator
(``sim``) and the runtime (``node/runtime``) drive the very same object.

A height ``t`` (= FL round ``t``), both modes:

1. Everyone derives the plan from the last block (:class:`node._rounds.RoundRules`): the committee
   (validators), the trainers, and (committee mode) the members training references.
2. Trainers train from the global model, sign ``(chain, t, digest, n_samples)`` and send the update
   blob to every committee member. Receivers check membership, signature, digest, shape and finiteness.
3. Committee mode: each member scores the updates against its own reference (eq. 7) and broadcasts a
   signed score row. Coordinator mode: validators just hold the updates.
4. The pBFT primary of (t, view) - in coordinator mode *the coordinator* - builds the payload (CMFL
   decision from the rows, or the strategy's aggregate) and pre-prepares it; every validator re-executes
   it (:meth:`RoundRules.check_payload`) before voting, and also refuses a primary that left out a score row or an
   update the validator told it of in time (censorship; :meth:`NodeCore._tell_primary`: each validator sends the
   primary of its view the rows it receives and the commitments of the updates it holds).
5. On commit the block's proposer pushes the block and the new model to everyone outside the committee.

Every peer input is untrusted: bounded envelope size, strict decoding, signatures, membership, digests,
shapes and finite values are checked; a bad input is dropped and counted (``status().dropped``), and a
provable one becomes evidence. Nothing a peer sends raises out of this class.

Evidence names only a peer whose own signature proves the fault (``consensus._evidence``): two different
signed messages for one slot, a signed score row that misquotes a client's commitment (the member is blamed,
never the client), a proposal this validator refused on inputs it holds. A refusal for want of an input (the
previous model, a blob), a suspicion of censorship, evidence this validator cannot confirm, or a block time
further from its own clock than the genesis' ``time_drift_ms`` still votes for a view change but accuses nobody;
and a proposal is refused if it carries evidence whose claim does not hold, so a Byzantine proposer cannot put an
accusation of an honest peer on the ledger. ``tests/sim/test_byzantine_fuzz.py`` checks all of it against a
fuzzing Byzantine minority.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from consensus import (
    KIND_HEADER,
    KIND_INVALID_PROPOSAL,
    KIND_SCORES,
    Broadcast,
    Commit,
    CommitHeader,
    ForgedScoreRow,
    LocalProtocolError,
    Message,
    Pending,
    Proposal,
    RemoteProtocolError,
    Replica,
    ReplicaConfig,
    ReportMisbehavior,
    RequestProposal,
    RequestVerdict,
    Send,
    SendBlocks,
    cmfl_record,
    decided_header_message,
    decided_message,
    decide_round,
    parse_proposal,
    parse_score_row,
    score_row_blobs,
    sign_score_row,
    update_equivocation_evidence,
    verify_score_row,
)

from ledger import (
    ATTEMPT_VIEWS,
    Block,
    BlockHeader,
    Certificate,
    ChainContext,
    ChainState,
    Evidence,
    Genesis,
    KeyPair,
    LedgerError,
    Payload,
    SignedMessage,
    TIME_MS_MAX,
    UpdateCommitment,
    check_evidence,
    block_time_window,
    encode,
    encode_large,
    genesis_state,
    make_header,
    primary,
    sign_update,
    update_sign_bytes,
)
from ledger.store import MemoryBlobStore
from learning import AggregateResult, ClientUpdate, InvalidUpdateError, PublicEval, distance_row, vector_to_blob
from node._deadlines import RoundDeadlines
from node._outsiders import OutsiderPolicy
from node._rounds import (
    RoundHistory,
    RoundPlan,
    RoundRules,
    check_host_params,
    committee_epoch_of,
    evidence_key,
    n_samples_cap_of,
    proposal_evidence_key,
    sampling_rule_of,
    sampling_seed_of,
)
from node._wire import BLOBS_PER_MESSAGE_MAX, Envelope, EnvelopeDecoder, UpdatePacket

__all__ = [
    "Behavior",
    "Decided",
    "EnvelopeDecoder",
    "Misbehavior",
    "NodeCore",
    "NodeEffect",
    "Check",
    "NodeStatus",
    "OutsiderPolicy",
    "RoundRules",
    "Train",
    "TrainJob",
    "TrainResult",
    "Transmit",
    "referenced_blobs",
    "check_host_params",
    "committee_epoch_of",
    "n_samples_cap_of",
    "sampling_rule_of",
    "sampling_seed_of",
]

PURPOSE_UPDATE = "update"
PURPOSE_REFERENCE = "reference"
EVIDENCE_PER_BLOCK_MAX = 64
EVIDENCE_PENDING_MAX = 256
UNSOLICITED_BLOBS_MAX = 8
UNSOLICITED_PEER_BYTES_MIN = 16 << 20
UNSOLICITED_PEERS = 4
"""Blobs nobody asked for (a proposer pushes its block's model, and strategy state, right behind the block to the
members outside its committee, so they can arrive first) are held by sender, so that no sender can fill a node's memory: at most
``max(UNSOLICITED_PEER_BYTES_MIN, 4 × the model's blob)`` bytes from one sender (:meth:`NodeCore.unsolicited_bounds`),
``UNSOLICITED_PEERS`` times that from all, and ``UNSOLICITED_BLOBS_MAX`` blobs; past a bound the oldest go first
(the sender's own, then anyone's). One that is not used is dropped when the round after the one it came in ends
(while this node catches up on blocks it missed, at the end of the round it catches up to)."""
EARLY_UPDATES_MAX = 256
EARLY_UPDATE_BYTES_MAX = 64 << 20
"""Updates for the next round, received while this node lags: one per sender, of the size an update's blob has,
``EARLY_UPDATES_MAX`` and ``EARLY_UPDATE_BYTES_MAX`` in all; held until the next round begins."""
DECIDED_KEPT = 16
HEADERS_KEPT = 4096
"""Decided headers (with certificates) a node with ``lazy_outsiders`` keeps to serve a ``header_sync_request``
(beyond them, its block source's blocks, if any)."""
HEADER_MESSAGES_KEPT = 256
"""The ``decided_header`` messages a node keeps signed, by height, for the members that catch up from it: they ask
for the heights they slept through (about members / clients of them), so each is signed once, not once per asker.
Least recently sent first out."""
WANT_RETRY_TICKS = 10


# --- effects -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainJob:
    """Train locally from ``model`` for round ``fl_round``; ``purpose`` is "update" or "reference"."""

    fl_round: int
    model: np.ndarray
    purpose: str
    server_state: bytes | None = None
    """The algorithm state the previous block committed (coordinator mode; the strategy's client side may
    need it, e.g. SCAFFOLD's control variate)."""


@dataclass(frozen=True, slots=True)
class TrainResult:
    """A finished local job: ``delta = θ_local − θ_global`` (float32) and the samples it used.

    ``blob``: ``delta``'s blob (``learning.vector_to_blob(delta)``) if the host made it already, off its event loop
    (the network runtime does, in the training thread, and hashes it there into the blob store's digest memo, so
    that handing a 45 MB update to the core costs no encoding or hashing on the loop); None: the core encodes it.
    The core trusts it to be exactly that encoding: it is the host's own training, and a wrong blob only makes its
    update refused by the validators (its signed digest is the blob's)."""

    delta: np.ndarray
    n_samples: int
    blob: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Transmit:
    """Send ``data`` (an encoded :class:`Envelope`) to peer ``to``. ``kind`` is for accounting, and so is ``detail``:
    for ``kind="pbft"``, the consensus message's kind (``consensus.Message.kind``: ``pre_prepare``, ...,
    ``decided`` for a whole block, ``decided_header``, ``header_sync_request``)."""

    to: str
    data: bytes
    kind: str
    detail: str = ""
    want: tuple[bytes, ...] = ()
    """For ``kind="want"``: the digests the envelope asks for, so that a host that fetches them instead of sending
    the envelope (the network runtime) need not decode its own message."""


def _want_message(to: str, digests: tuple[bytes, ...]) -> Transmit:
    """A ``want`` envelope to ``to`` for ``digests``, the digests also in the effect (:attr:`Transmit.want`)."""
    return Transmit(to=to, data=Envelope(want=digests).encode(), kind="want", want=digests)


@dataclass(frozen=True, slots=True, kw_only=True)
class Train:
    job: TrainJob


@dataclass(frozen=True, slots=True, kw_only=True)
class Decided:
    """``block`` is committed here. ``model`` is the new global model (None until its blob arrived);
    ``blobs`` holds the referenced blobs this node has (digest → bytes; looked up when first read), for
    persisting."""

    block: Block
    model: np.ndarray | None
    blobs: Mapping[bytes, bytes]


@dataclass(frozen=True, slots=True, kw_only=True)
class Misbehavior:
    evidence: Evidence


Checked = tuple[str | None, np.ndarray | None, bytes | None, bytes | None]
"""What re-executing a round gives (:meth:`RoundRules.check_payload`): ``(reason, model, model_blob, state)``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """Re-execute a proposal's round (``NodeCore(offload_checks=True)``): call ``run()`` where it does not hold the
    host's loop (the network runtime: a worker thread) and hand what it returns to :meth:`NodeCore.on_checked`.

    ``run`` reads only what the core handed it when it made the effect (the chain state, the previous model, the
    updates it held, a copy of the round history) and the content-addressed blob store, so it may run while the
    core goes on; an outcome that comes back after the core left the proposal's height is dropped. This is the
    heavy part of judging a proposal (decoding the updates, aggregating them: about a second for a 45 MB model on
    2 cores); the checks before it (signatures, censorship, the clock) run in the core at once."""

    height: int
    block_hash: bytes
    purpose: str
    """``"verdict"`` (the replica asked: ``RequestVerdict``), ``"evidence"`` (a refused proposal judged again) or
    ``"proposal"`` (this node's own proposal: the round's aggregation; ``block_hash`` then names the view)."""
    run: Callable[[], Any]
    then: Callable[[Any], None]


NodeEffect = Transmit | Train | Decided | Misbehavior | Check


class Behavior:
    """Fault-injection hooks (the simulator's adversary module overrides them); honest by default.

    An attack lives here or in the network proxy, never in the protocol code: the core calls the hooks
    at fixed points and does not know which attack, if any, runs.
    """

    accepts_everything: bool = False
    """A colluding validator: its verdict never refuses (and its own corrupt proposal passes)."""

    def proposal(self, payload: Payload, model: np.ndarray, model_blob: bytes) -> tuple[Payload, np.ndarray, bytes]:
        """The payload this node proposes (a corrupt coordinator changes it)."""
        return payload, model, model_blob

    def distances(self, distances: dict[str, float]) -> dict[str, float]:
        """The score row this committee member signs (a lying member changes it)."""
        return distances

    def score_rows(self, rows: dict[str, SignedMessage]) -> dict[str, SignedMessage]:
        """The score rows, by member, this primary builds its CMFL proposal from (one that steers the election
        leaves some out)."""
        return rows

    def clock(self, now_ms: int) -> int:
        """What this node's clock reads when a right one reads ``now_ms`` (a node whose clock runs ahead or behind
        changes it): the time it stamps its proposals with, and judges others' block times against."""
        return now_ms

    def proposal_time(self, time_ms: int, latest_ms: int, header_at: Callable[[int], BlockHeader], payload: Payload) -> int:
        """The block time this primary proposes ``payload`` with: ``time_ms`` (its clock, or the previous block's
        time if later). A grinding primary tries others, up to ``latest_ms`` (what the validators' clocks accept),
        and looks at the header each would give (``header_at``)."""
        return time_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStatus:
    """Frozen snapshot of a node."""

    peer_id: str
    height: int
    committee: tuple[str, ...]
    trainers: tuple[str, ...]
    model_digest: bytes
    awaiting_model: bool
    updates_held: int
    rows_held: int
    dropped: Mapping[str, int]
    evidence_pending: int
    now_tick: int
    unsolicited_bytes: int = 0
    """Bytes of the unasked blobs held now (:data:`UNSOLICITED_PEER_BYTES_MIN`)."""
    unsolicited_peak: int = 0
    """The most this node ever held of them at once."""


def referenced_blobs(payload: Payload) -> list[bytes]:
    """The blobs a block references: its updates, the new model, the strategy state, and (committee mode) every
    blob its score rows name - each member's reference and every update it scored, accepted or not - so that the
    audit can recompute every row (``consensus.score_row_blobs``)."""
    out = [u.digest for u in payload.updates] + [payload.model_digest]
    if payload.state_digest is not None:
        out.append(payload.state_digest)
    if payload.attestations:
        have = set(out)
        out += [d for _, _, d in score_row_blobs(payload.attestations) if d not in have]
    return out


class _HeldBlobs(Mapping[bytes, bytes]):
    """``Decided.blobs``: the referenced blobs (digest → bytes) the node holds, looked up when the host first
    reads the mapping (in the same batch of effects), not for every member of a simulation that never reads it."""

    __slots__ = ("_held", "_payload", "_store")

    def __init__(self, store: Any, payload: Payload) -> None:
        self._store = store
        self._payload: Payload | None = payload
        self._held: dict[bytes, bytes] | None = None

    def materialize(self) -> None:
        """Look the blobs up now (before the store forgets them: :meth:`NodeCore._shed`)."""
        self._get()

    def _get(self) -> dict[bytes, bytes]:
        if self._held is None:
            store, payload = self._store, self._payload
            assert payload is not None
            self._held = {d: store.get(d) for d in referenced_blobs(payload) if store.has(d)}
            self._store = self._payload = None
        return self._held

    def __getitem__(self, digest: bytes) -> bytes:
        return self._get()[digest]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


class _Round:
    """What a node holds for its current height. A plain class, not a dataclass with default factories: every
    member of a simulation makes one per height."""

    __slots__ = ("plan", "start_tick", "trained", "reference", "reference_digest", "updates", "rows", "row_sent",
                 "proposal_request", "proposed_views", "nudged", "uploaded", "told", "told_view", "view_since",
                 "announced")

    def __init__(self, plan: RoundPlan, start_tick: int) -> None:
        self.plan = plan
        self.start_tick = start_tick
        self.trained = False
        self.reference: np.ndarray | None = None
        self.reference_digest = b""
        self.updates: dict[tuple[str, int], tuple[UpdateCommitment, np.ndarray]] = {}
        """Held updates by ``(peer, round)``: this round's, and stale ones within the strategy's window."""
        self.rows: dict[str, SignedMessage] = {}
        self.row_sent = False
        self.proposal_request: tuple[int, int] | None = None
        self.proposed_views: set[int] = set()
        self.nudged = False  # (lazy members: the block before this height sent again to the clients not heard from)
        self.uploaded = False  # this node's update of this height went to the committee
        self.told: dict[tuple[str, object, str], int] = {}
        """``("row", member, primary)`` / ``("update", (peer, round), primary)`` -> the tick this node sent that
        primary the row or the update's commitment (:meth:`NodeCore._tell_primary`): what it may judge a
        proposal's omission on."""
        self.told_view = -1
        """The view whose primary has been told everything this node held."""
        self.view_since = start_tick
        """The tick this node entered the view it is in at this height."""
        self.announced: dict[bytes, UpdateCommitment] = {}
        """A primary's side: update commitments validators said they hold, by digest, whose blobs it is fetching."""


class NodeCore:
    """One peer's protocol logic (see the module docstring).

    Parameters
    ----------
    genesis, key:
        The chain and this member's identity.
    initial_model:
        The global model at ``state`` (genesis: the initial model; its blob digest must match).
    blobs:
        Content-addressed blob store (``has/get/put``); a ``MemoryBlobStore`` by default.
    behavior:
        Fault-injection hooks (honest by default).
    state:
        Chain state to resume from (default: the genesis).
    replica_config:
        pBFT timeouts/bounds (default: ``node._deadlines.RoundDeadlines``: the genesis timeouts plus the wire time
        of the round's blobs at the genesis' ``link_mbit``).
    ctx:
        A chain context to share (e.g. one with a signature memo shared by the nodes of a simulation,
        so a signature is checked once per process); default: a private one.
    collect_ticks:
        Ticks after a round starts at which committee members score the updates they have and the
        primary proposes with the rows/updates it has (default: ``timeout_ticks_train`` plus the wire time of the
        round's blobs, ``node._deadlines.RoundDeadlines.collect_ticks``).
    public:
        The host's public-split evaluator, for strategies that score models on one (Sself).
    decoder:
        An envelope decoder to share (its memo decodes identical bytes once per process); default: private.
    block_source:
        ``height -> Block | None``: the host's block store, to serve a peer that syncs heights older than
        the few this node keeps in memory (a node restarted from its data directory, or one that joins late).
    archive:
        Fetch every blob a decided block references (the updates, the strategy state), not only the model, so
        this node's own ledger can be re-executed (``concilium ledger verify``) even for the rounds it did not
        validate. A runtime node archives; the simulator writes one ledger from the validators' reports.
    offload_checks:
        Re-execute a proposal's round in the host, where it does not hold the host's loop: the core emits a
        :class:`Check` and judges on in :meth:`on_checked` (the network runtime: a worker thread). False (default):
        at once, inside the call that met the replica's ``RequestVerdict`` (the simulator).
    model_missing:
        The model of ``state`` is not at hand (a node restarted before its blob was stored): ``initial_model``
        is then the genesis model, for its dimension only, and the state's model is fetched from peers.
    replica_restore:
        The replica's durable record (:meth:`consensus.Replica.durable`) from before a restart, so it never
        signs two different messages for one (height, view).
    start_tick:
        The tick this node starts at. The node's clock reads ``genesis_time_ms + tick × tick_ms`` (a runtime maps
        the wall clock to ticks, so it is then wall time; :meth:`lose_ticks` keeps it so after a stall). A proposer
        stamps its block with its clock, or the previous block's time if that is later; a validator refuses a
        fresh proposal whose time is further from its clock than the genesis' ``protocol.time_drift_ms`` (and a
        tick: ``ledger.block_time_window``), without accusing the proposer: clocks differ, so it proves nothing.
    history:
        The recent rounds of ``state``'s chain (a semi-synchronous strategy's staleness window), rebuilt by
        a host that resumes a stored chain (``node.runtime._node.load_chain``); default: empty, right at the
        genesis.
    rules:
        The round rules to share (:class:`node._rounds.RoundRules` of this ``genesis``, ``ctx`` and ``public``):
        the nodes of a simulation share one, so a height's plan (the client sample, a hash of every member) is
        drawn once per process, as ``ctx`` checks a signature once; default: private ones.
    outsiders:
        What this node sends the members outside a round and how it follows the chain as one of them
        (:class:`OutsiderPolicy`); default: the network runtime's (every member gets every model and whole block).
        The simulator injects a leaner one from its scenario. The ledger is the same.
    """

    def __init__(
        self,
        *,
        genesis: Genesis,
        key: KeyPair,
        initial_model: np.ndarray,
        blobs: Any = None,
        behavior: Behavior | None = None,
        state: ChainState | None = None,
        replica_config: ReplicaConfig | None = None,
        collect_ticks: int | None = None,
        ctx: ChainContext | None = None,
        public: PublicEval | None = None,
        decoder: EnvelopeDecoder | None = None,
        block_source: Callable[[int], Block | None] | None = None,
        archive: bool = False,
        start_tick: int = 0,
        model_missing: bool = False,
        replica_restore: bytes | None = None,
        history: RoundHistory | None = None,
        rules: RoundRules | None = None,
        outsiders: OutsiderPolicy = OutsiderPolicy(),  # (frozen: one shared default is safe)
        offload_checks: bool = False,
    ) -> None:
        self._offload_checks = offload_checks
        self._checking: set[tuple[str, bytes]] = set()  # (purpose, block hash) of the Check effects out
        self._rules = self._own_rules(rules, genesis, ctx, public)
        self._models_for_all = outsiders.models_for_all or archive
        self._block_source = block_source
        self._archive = archive
        self._decoder = decoder if decoder is not None else EnvelopeDecoder(memo_bytes=1 << 20)
        self._ctx = self._rules.ctx
        self._genesis = genesis
        self._key = key
        self._me = key.peer_id
        self._blobs = blobs if blobs is not None else MemoryBlobStore()
        self._behavior = behavior or Behavior()
        self._state = state if state is not None else genesis_state(self._ctx)
        model_blob = self._init_model(initial_model, model_missing=model_missing, history=history)
        self._init_deadlines(model_blob, collect_ticks=collect_ticks, start_tick=start_tick)
        self._init_peer_inputs(model_blob)
        self._init_chain_tail(model_missing=model_missing)
        self._init_replica(replica_config, replica_restore, outsiders)
        self._round = _Round(self._rules.plan(self._state, self._history), self._now)
        if self._lazy and not self._needs_model(self._round.plan):
            self._model = None  # asleep from the start: the block that wakes it brings the model (see _on_commit)

    # --- construction (the steps of __init__, in order: each reads only what the ones before it set) -------------

    @staticmethod
    def _own_rules(
        rules: RoundRules | None, genesis: Genesis, ctx: ChainContext | None, public: PublicEval | None
    ) -> RoundRules:
        """The round rules this node follows: ``rules`` if they are for this genesis, chain context and public
        evaluator, private ones if None."""
        if rules is None:
            return RoundRules(genesis, ctx=ctx, public=public)
        if rules.genesis is not genesis or (ctx is not None and rules.ctx is not ctx) or rules.public is not public:
            raise ValueError("rules are for another genesis, chain context or public evaluator")
        return rules

    def _init_model(self, initial_model: np.ndarray, *, model_missing: bool, history: RoundHistory | None) -> bytes:
        """Check ``initial_model`` against the chain (the genesis' model if ``model_missing``, else the state's, which
        is then stored) and set the model, its dimensions and the round history; returns the model's blob."""
        model = np.ascontiguousarray(initial_model, dtype=np.float32)
        model_blob = vector_to_blob(model)
        if model_missing:  # ``initial_model`` only gives the dimension; the state's model is fetched from peers
            if self._ctx.caches.sha256(model_blob) != self._genesis.model.digest:
                raise ValueError("initial_model does not match the genesis model digest")
        elif self._ctx.caches.sha256(model_blob) != self._state.model_digest:
            raise ValueError("initial_model does not match the chain state's model digest")
        else:
            self._blobs.put(model_blob)
        self._dim = model.shape[0]
        self._upload_dim = self._rules.upload_dim(self._dim)
        self._model: np.ndarray | None = None if model_missing else model
        self._history = history if history is not None else self._rules.new_history()
        self._timeouts = self._genesis.protocol.timeouts
        upload_dim = self._rules.upload_dim(model.shape[0])  # an update's blob is as long as a vector of it is
        self._update_blob_len = len(model_blob) if upload_dim == model.shape[0] else len(
            vector_to_blob(np.zeros(upload_dim, dtype=np.float32)))
        return model_blob

    def _init_deadlines(self, model_blob: bytes, *, collect_ticks: int | None, start_tick: int) -> None:
        """The round's deadlines (from the genesis and the size of the round's blobs) and this node's clock."""
        self._deadlines = RoundDeadlines.for_round(
            self._genesis, self._rules.plan(self._state, self._history),
            blob_bytes=max(len(model_blob), self._update_blob_len))
        self._collect = collect_ticks if collect_ticks is not None else self._deadlines.collect_ticks
        self._grace = max(1, self._timeouts.timeout_ticks_propose // 4)
        """Ticks a row or an update commitment sent to a primary is given to reach it (and the blob to be fetched)
        before this validator may refuse a proposal for leaving it out (:meth:`_omission_counts`)."""
        self._now = int(start_tick)
        self._lost = 0  # ticks of the host's clock this node did not run (lose_ticks): its clock reads them

    def _init_peer_inputs(self, model_blob: bytes) -> None:
        """What this node keeps of its peers' inputs: drops, evidence, refused proposals, checked updates, blobs
        nobody asked for (bounded by the model's size), the blobs it wants and the updates that came early."""
        self._dropped: Counter[str] = Counter()
        self._evidence: OrderedDict[bytes, Evidence] = OrderedDict()
        self._refused: dict[tuple[int, int, str], Proposal] = {}
        """(height, view, proposer) -> this height's proposals this node refused: relayed to the committee with the
        evidence when the refusal proves a fault (:meth:`_relay_refused`)."""
        self._rejudge: dict[tuple[int, int, str], Evidence] = {}
        """Evidence of this height's proposals refused for want of a blob: judged again when blobs arrive
        (:meth:`_rejudge_refused`); a proposal that proves wrong then becomes this node's evidence."""
        self._unprovable: set[tuple[int, int, str]] = set()
        """(height, view, proposer) of this height's proposals this node refused without proof of a fault (it
        lacked the previous model or a blob, suspected censorship, could not confirm an evidence item): refused,
        but never reported as evidence against the proposer."""
        self._confirmed: set[bytes] = set()
        """Keys of the invalid_proposal evidence this node reported itself at this height: the only such
        evidence it accepts in others' proposals (:meth:`_judge`)."""
        self._validated: OrderedDict[bytes, tuple[np.ndarray, bytes, bytes | None]] = OrderedDict()
        self._unsolicited: OrderedDict[bytes, tuple[str, int, bytes]] = OrderedDict()  # digest -> (sender, height, blob)
        self._unsolicited_by: Counter[str] = Counter()  # bytes held by sender
        self._unsolicited_bytes = 0
        self._unsolicited_peak = 0
        self._unsolicited_peer_max = max(UNSOLICITED_PEER_BYTES_MIN, 4 * len(model_blob))
        self._want: dict[bytes, int] = {}  # digest -> tick last asked
        self._want_skew = 0  # extra turns of the asking rotation (ask_wanted without ticks)
        self._early: list[tuple[str, UpdatePacket]] = []  # updates for the next round, received while lagging
        self._early_bytes = 0

    def _init_chain_tail(self, *, model_missing: bool) -> None:
        """The last decided blocks, the effects to hand out, and the strategy state of the chain state; wants the
        blobs of that state (its strategy state, and its model if ``model_missing``) it lacks."""
        self._decided: OrderedDict[int, Block] = OrderedDict()
        self._last_cert: Certificate | None = None  # of the last block: its signers hold its model
        self._pending_decided: Block | None = None  # committed, model blob not here yet
        self._out: list[NodeEffect] = []
        self._algo_state: bytes | None = None
        """The strategy state the last block committed (coordinator mode), once its blob is here."""
        self._algo_state_missing = False
        self._proposed_state: bytes | None = None
        if self._state.state_digest is not None:
            self._algo_state = self._blob(self._state.state_digest)
            self._algo_state_missing = self._algo_state is None
            if self._algo_state_missing:
                self._want[self._state.state_digest] = self._now
        if model_missing:
            self._want[self._state.model_digest] = self._now

    def _init_replica(
        self, replica_config: ReplicaConfig | None, replica_restore: bytes | None, outsiders: OutsiderPolicy
    ) -> None:
        """How this node follows the chain outside its rounds (whole blocks, headers, or asleep: ``outsiders``'
        ``headers_for_outsiders`` and ``lazy_outsiders``), and its pBFT replica."""
        restore = {} if replica_restore is None else {"restore": replica_restore}
        self._headers = (
            (outsiders.headers_for_outsiders or outsiders.lazy_outsiders) and not self._models_for_all
            and not self._rules.committee_mode and self._rules.staleness == 0
        )
        self._lazy = outsiders.lazy_outsiders and self._headers
        self._shed_asleep = outsiders.shed_asleep and self._lazy
        self._certified: OrderedDict[int, tuple[BlockHeader, Certificate]] = OrderedDict()
        """With ``lazy_outsiders``: the decided headers and certificates, to serve a ``header_sync_request``."""
        self._header_sent: OrderedDict[int, bytes] = OrderedDict()  # the decided_header messages signed last, by height
        self._held_out: deque[_HeldBlobs] = deque(maxlen=DECIDED_KEPT)  # the Decided.blobs handed out last (shed)
        follow: dict[str, Any] = {}
        if self._headers:
            follow = {"next_committee": self._rules.next_committee_coordinator, "needs_payload": self._needs_payload,
                      "lazy": self._lazy, "committee_epoch": self._rules.committee_epoch}
        self._replica = Replica(
            ctx=self._ctx, key=self._key, state=self._state,
            config=replica_config if replica_config is not None else self._deadlines.replica_config(), **restore,
            **follow,
        )

    # --- public API ------------------------------------------------------------------------------

    @property
    def peer_id(self) -> str:
        return self._me

    @property
    def rows_min(self) -> int:
        """Committee mode: the fewest score rows a proposal may carry (0 in coordinator mode)."""
        return 0 if self._rules.cmfl is None else self._rules.cmfl.rows_min

    @property
    def genesis_hash(self) -> bytes:
        """The chain's seed for who does what at each height (``ledger.primary``, :class:`RoundRules`)."""
        return self._ctx.genesis_hash

    @property
    def chain_state(self) -> ChainState:
        return self._state

    @property
    def model(self) -> np.ndarray | None:
        return self._model

    def preview_model(self, uploads: Sequence[tuple[str, int, np.ndarray]]) -> np.ndarray | None:
        """The model this node would propose for its current round if it held exactly ``uploads``
        (``(peer, n_samples, vector)``, all trained from this round's model), changing nothing; None in
        committee mode (the committee's scores decide there), or without the model, or with a strategy
        state. Nothing in the protocol uses it: a host may precompute on it (the simulator trains the
        likely next round's jobs ahead, sim/_workers.py) and must check whatever it precomputed."""
        if self._rules.committee_mode or self._model is None or self._algo_state is not None or self._algo_state_missing:
            return None
        h = self._round.plan.height
        ups = [ClientUpdate(p, np.asarray(v, dtype=np.float32), int(n), h) for p, n, v in uploads]
        try:
            result = self._rules.aggregate_uploads(self._state, self._round.plan, self._model, ups, history=self._history)
        except (ValueError, ArithmeticError):
            return None
        return result.model if result.state is None else None

    def start(self) -> list[NodeEffect]:
        """Effects of joining at the current height (train if this node is a trainer)."""
        self._begin_round()
        self._apply_replica(self._replica.start())
        return self._flush()

    def tick(self) -> list[NodeEffect]:
        self._now += 1
        self._apply_replica(self._replica.tick())
        self._progress()
        if self._want and self._now % WANT_RETRY_TICKS == 0:
            self._ask_wanted()
        return self._settle(self._flush())

    def idle_ticks(self) -> int:
        """How many of the next ticks certainly do nothing but count (0: the next may act). A member outside the
        round's committee, with no blob wanted and nothing to propose, only waits for the decided block: its
        replica's sync deadline bounds the wait (``Replica.idle_ticks``; with ``lazy_outsiders`` a member without
        a role has no such deadline: it sleeps until a message wakes it). The simulator skips such members'
        ticks (:meth:`skip_ticks`), so that a member outside the round costs nothing between its messages."""
        return 0 if self._may_act_on_tick() else self._replica.idle_ticks()

    def _settle(self, fx: list[NodeEffect]) -> list[NodeEffect]:
        """The end of an input (a tick, a message, a finished training job), its effects ``fx`` already taken out:
        with ``OutsiderPolicy.shed_asleep``, a member whose next ticks do nothing (:meth:`idle_ticks`) and that is
        :meth:`_dormant` drops what it holds for past rounds (:meth:`_shed`). Returns ``fx``."""
        if self._shed_asleep and self.idle_ticks() > 0:
            self._shed()
        return fx

    def _dormant(self) -> bool:
        """With ``lazy_outsiders``: has this member nothing to do until a message wakes it? No role left at its
        height (:meth:`_role_left`: a client that sent its update has none), no evidence held, nothing wanted,
        nothing to propose, and a strategy without stale updates (whose later validators need old base models),
        and not catching up (the block that woke it, and its model, are held
        until the headers before them arrive). Such a member rests its replica (a client done with its round) and,
        under ``OutsiderPolicy.shed_asleep``, sheds what it holds (:meth:`_shed`)."""
        return (
            self._lazy
            and not self._archive
            and not self._models_for_all
            and self._rules.staleness == 0
            and not self._evidence
            and not self._may_act_on_tick()
            and not self._role_left()
            and not self._replica.behind  # catching up: the block (and model) that woke it is held
        )

    def _role_left(self) -> bool:
        """Has this member a part left in its height's round: a seat in its committee, a reference to train, or an
        update still to send? A client that sent its update has none (it is not asked again: the validators
        hold the update, and the block is pushed to it only if it has a role at the next height)."""
        plan = self._round.plan
        if self._me not in plan.participants:
            return False
        return self._me in plan.committee or self._me in plan.references or not self._round.uploaded

    def _shed(self) -> int:
        """Drop what a :meth:`_dormant` member holds for rounds it took part in: the blobs in its store (updates,
        older models and strategy states: a store with ``retain()``, the simulator's in-memory one) and the models
        it validated, all but its head's model and strategy state (which the members of the next round may still
        ask it for). The block that wakes it for a later round brings the model it needs then, so a member asleep
        holds one model at most (shared in a simulation), however many rounds it once took part in. The
        ``Decided.blobs`` it handed out are read first, so a host that reads them later still finds them. Returns
        the blobs dropped; 0 (and nothing done) unless dormant."""
        retain = getattr(self._blobs, "retain", None)
        if retain is None or not self._dormant():
            return 0
        for held in self._held_out:
            held.materialize()
        self._held_out.clear()
        keep = {self._state.model_digest}
        if self._state.state_digest is not None:
            keep.add(self._state.state_digest)
        for d in [d for d in self._validated if d not in keep]:
            del self._validated[d]
        # (its unsolicited blobs stay: the model pushed to wake it may come before the block that shows the height)
        return int(retain(keep))

    def skip_ticks(self, n: int) -> None:
        """Advance the clock by ``n`` ticks that :meth:`idle_ticks` said do nothing: exactly what ``n`` calls of
        :meth:`tick` would have done (their effects are empty). Raises ``consensus.LocalProtocolError`` if one
        of them might act."""
        if n and self._may_act_on_tick():
            raise LocalProtocolError(f"cannot skip {n} ticks: the next may act")
        self._replica.skip_ticks(n)  # checks the replica's side (idle_ticks)
        self._now += n

    def lose_ticks(self, n: int) -> None:
        """``n`` ticks of the host's clock passed that this node did not run: a runtime that stalled longer than it
        catches up, or the simulator's member under a ``drop`` fault (not ticked). The node's clock reads them
        (block times, and the drift a validator allows a proposal's time: :meth:`clock_ms`), its timers do not
        (nothing else changes)."""
        if n < 0:
            raise ValueError(f"cannot lose {n} ticks")
        self._lost += n

    def clock_ms(self) -> int:
        """This node's clock, in ms since 1970: ``genesis_time_ms + (ticks run + ticks lost) × tick_ms``, as its
        behaviour reads it (honest: unchanged), within ``[0, 2^63 - 1]``."""
        now = self._genesis.genesis_time_ms + (self._now + self._lost) * self._timeouts.tick_ms
        return min(TIME_MS_MAX, max(0, self._behavior.clock(now)))

    def _may_act_on_tick(self) -> bool:
        """The node's own side of a tick: retrying wanted blobs, a validator's collect deadline, a proposal."""
        r = self._round
        return bool(self._want or self._out) or r.proposal_request is not None or self._me in r.plan.committee

    def on_training_done(self, job: TrainJob, result: TrainResult) -> list[NodeEffect]:
        r = self._round
        h = r.plan.height
        if job.fl_round != h and not (
            job.purpose == PURPOSE_UPDATE and self._stale_ok(self._me, job.fl_round, h)
        ):
            return self._settle(self._flush())  # stale: the chain moved on while we trained
        dim = self._upload_dim if job.purpose == PURPOSE_UPDATE else self._dim
        delta = np.ascontiguousarray(result.delta, dtype=np.float32)
        if delta.shape != (dim,) or not np.isfinite(delta).all():
            raise ValueError(f"local training produced a bad upload (shape {delta.shape}, want ({dim},), "
                             f"finite={np.isfinite(delta).all()})")
        blob = result.blob if result.blob is not None else vector_to_blob(delta)
        digest = self._blobs.put(blob)
        if job.purpose == PURPOSE_REFERENCE:
            r.reference, r.reference_digest = delta, digest
        else:
            c = sign_update(self._key, self._ctx.chain_id, job.fl_round, digest, int(result.n_samples))
            data = encode_large(Envelope(update=UpdatePacket(commitment=c, blob=blob)))  # (the blob copied once)
            for p in r.plan.committee:
                if p == self._me:
                    r.updates[(p, job.fl_round)] = (c, delta)  # a validator that also trains holds its own update
                else:
                    self._out.append(Transmit(to=p, data=data, kind="update"))
                    r.told[("update", (self._me, job.fl_round), p)] = self._now
            if job.fl_round == h:
                r.uploaded = True
        self._progress()
        fx = self._flush()
        if self._round.uploaded and self._dormant():
            self._replica.rest()  # a lazy client done with its round sleeps now, not at the block that ends it
        return self._settle(fx)

    def _stale_ok(self, peer: str, fl_round: int, height: int) -> bool:
        """May ``peer``'s update of the earlier round ``fl_round`` still go into height ``height``?"""
        if not height - self._rules.staleness <= fl_round < height:
            return False
        past = self._history.plans.get(fl_round)
        return past is not None and peer in past.trainers and peer not in self._history.included.get(fl_round, ())

    def on_message(self, sender: str, data: bytes) -> list[NodeEffect]:
        """Bytes from ``sender`` (the transport-authenticated peer id). Never raises on bad input."""
        if sender not in self._ctx.members or sender == self._me:
            self._dropped["non-member"] += 1
            return self._settle(self._flush())
        try:
            env = self._decoder.decode(data)
        except LedgerError:
            env = None
        return self.on_envelope(sender, env)

    def on_envelope(self, sender: str, env: Envelope | None) -> list[NodeEffect]:
        """:meth:`on_message` for a host that decoded the bytes itself (``node._wire.decode_envelope``, e.g. off its
        event loop: the runtime does for large frames); ``env`` None: they did not decode (counted as malformed)."""
        if sender not in self._ctx.members or sender == self._me:
            self._dropped["non-member"] += 1
            return self._settle(self._flush())
        if env is None:
            self._dropped["malformed"] += 1
            return self._settle(self._flush())
        try:
            if env.update is not None:
                self._on_update(sender, env.update)
            elif env.scores is not None:
                self._on_scores(sender, env.scores)
            elif env.pbft is not None:
                self._apply_replica(self._replica.step(env.pbft, sender=sender))
            elif env.want is not None:
                self._on_want(sender, env.want)
            elif env.blobs is not None:
                self._on_blobs(sender, env.blobs)
            elif env.have is not None:
                self._on_have(sender, env.have)
            elif env.refused is not None:
                self._on_refused(sender, env.refused)
        except (RemoteProtocolError, LedgerError, InvalidUpdateError) as e:
            self._dropped[type(e).__name__] += 1
        self._progress()
        return self._settle(self._flush())

    def status(self) -> NodeStatus:
        r = self._round
        return NodeStatus(
            peer_id=self._me,
            height=r.plan.height,
            committee=r.plan.committee,
            trainers=r.plan.trainers,
            model_digest=self._state.model_digest,
            awaiting_model=self._model is None,
            updates_held=len(r.updates),
            rows_held=len(r.rows),
            dropped=MappingProxyType(dict(sorted(self._dropped.items()))),
            evidence_pending=len(self._evidence),
            now_tick=self._now,
            unsolicited_bytes=self._unsolicited_bytes,
            unsolicited_peak=self._unsolicited_peak,
        )

    def unsolicited_bounds(self) -> tuple[int, int]:
        """``(per sender, in all)``: the most bytes of unasked blobs this node holds (:data:`UNSOLICITED_PEERS`)."""
        return self._unsolicited_peer_max, UNSOLICITED_PEERS * self._unsolicited_peer_max

    @property
    def replica(self) -> Replica:
        return self._replica

    @property
    def staleness(self) -> int:
        """Rounds an update may lag and still count (a semi-synchronous strategy's window; 0: this round's only)."""
        return self._rules.staleness

    @property
    def lazy(self) -> bool:
        """Does ``lazy_outsiders`` apply to this node (it was asked for, and the genesis allows it: coordinator mode,
        no staleness window, not ``models_for_all``)? The same for every node of one configuration."""
        return self._lazy

    def servable(self, digest: bytes) -> bytes | None:
        """A blob this node hands out to a peer that asks for it by digest (a host's own fetch protocol; the
        simulator's nodes answer ``want`` messages from the same source), or None."""
        return self._servable(digest)

    def on_fetched(self, blob: bytes, sender: str = "") -> list[NodeEffect]:
        """A blob the host fetched by digest on the core's behalf (it turned a ``want`` into a fetch) from ``sender``:
        the same as a ``blobs`` message carrying it (kept only if its digest is wanted or it may be used soon)."""
        try:
            self._on_blobs(sender, (blob,))
        except (LedgerError, InvalidUpdateError) as e:
            self._dropped[type(e).__name__] += 1
        self._progress()
        return self._flush()

    def wanted(self) -> int:
        """Blobs this node is still fetching (the model, a strategy state, an archived round's updates)."""
        return len(self._want)

    def want_blobs(self, digests: Sequence[bytes]) -> list[NodeEffect]:
        """Want ``digests`` (blobs the host found missing or corrupt in its archive, and removed): asked of the
        peers in turn, as every wanted blob is, until they are here (:meth:`wanted` counts them)."""
        for d in digests:
            if self._blob(d) is None:
                self._want.setdefault(d, self._now)
        return self.ask_wanted()

    def ask_wanted(self) -> list[NodeEffect]:
        """Ask the next peer in turn for the blobs still wanted, now (a host that stopped ticking, e.g. after the
        last round, still completes its archive); each call asks the next peer."""
        for d in [d for d in self._want if self._blobs.has(d)]:
            del self._want[d]  # arrived by another way (the host stored it)
        if self._want:
            self._want_skew += 1
            self._ask_wanted()
        return self._flush()

    # --- rounds ---------------------------------------------------------------------------------

    def _flush(self) -> list[NodeEffect]:
        out, self._out = self._out, []
        return out

    def _begin_round(self) -> None:
        r = self._round
        if r.trained or self._model is None or self._algo_state_missing:
            return
        plan = r.plan
        if self._me not in plan.participants:
            return
        purpose = None
        if self._me in plan.trainers:
            purpose = PURPOSE_UPDATE
        elif self._me in plan.references:
            purpose = PURPOSE_REFERENCE
        if purpose is not None:
            r.trained = True
            job = TrainJob(fl_round=plan.height, model=self._model, purpose=purpose, server_state=self._algo_state)
            self._out.append(Train(job=job))

    def _progress(self) -> None:
        if self._rejudge:
            self._rejudge_refused()
        waiting = self._replica.waiting
        if waiting is not None and ("verdict", waiting.block_hash) not in self._checking and self._inputs_here(waiting):
            self._verdict(waiting.block_hash, waiting)  # (the verdict was Pending: _judge; judged again)
        self._tell_new_primary()
        self._maybe_score()
        self._maybe_nudge()
        self._maybe_propose()

    def _collect_due(self) -> bool:
        return self._now >= self._round.start_tick + self._collect

    def _maybe_score(self) -> None:
        r = self._round
        if not self._rules.committee_mode or r.row_sent or r.reference is None or self._me not in r.plan.committee:
            return
        h = r.plan.height
        if len(r.updates) < len(r.plan.trainers) and not self._collect_due():
            return
        peers = sorted(p for p, _ in r.updates)
        distances: dict[str, float] = {}
        if peers:
            stack = np.stack([r.updates[(p, h)][1] for p in peers])
            row = distance_row(r.reference, stack)
            distances = {p: float(d) for p, d in zip(peers, row)}
        distances = self._behavior.distances(distances)
        signed = sign_score_row(
            self._key,
            self._ctx.chain_id,
            r.plan.height,
            distances=distances,
            updates={p: r.updates[(p, h)][0] for p in distances if (p, h) in r.updates},
            reference=r.reference_digest,
        )
        r.rows[self._me] = signed
        r.row_sent = True
        data = Envelope(scores=signed).encode()
        for p in r.plan.committee:
            if p != self._me:
                self._out.append(Transmit(to=p, data=data, kind="scores"))
                r.told[("row", self._me, p)] = self._now

    def _maybe_propose(self) -> None:
        r = self._round
        req = r.proposal_request
        if req is None or req[0] != r.plan.height or req[1] in r.proposed_views or self._model is None:
            return
        if self._algo_state_missing:
            return
        view = req[1]
        # after a view change, the validators tell the new primary what they hold (_tell_new_primary): it waits a
        # grace for that (judged on it: _omission_counts), unless it has every row or update already
        ready_early = (view > 0 and self._now >= r.view_since + self._grace) or self._collect_due()
        if view >= ATTEMPT_VIEWS:  # a re-drawn committee's primary: the height is skipped (RoundRules.skip_payload)
            if not self._state.model_digest:
                return  # (followed by header: it cannot build it; the view times out to the next primary)
            self._proposed_state = self._algo_state
            built = (self._rules.skip_payload(self._state, view), self._model, vector_to_blob(self._model))
        elif self._rules.committee_mode:
            assert self._rules.cmfl is not None
            if len(r.rows) < self._rules.cmfl.rows_min:
                return
            if len(r.rows) < len(r.plan.committee) and not ready_early:
                return
            self._build_committee_payload(view)
            return
        else:
            fresh = sum(1 for _, rnd in r.updates if rnd == r.plan.height)
            if fresh < len(r.plan.trainers) and not ready_early:
                return
            self._build_coordinator_payload(view)
            return
        self._propose_built(view, built)

    def _propose_built(self, view: int, built: tuple[Payload, np.ndarray, bytes]) -> None:
        """Propose the payload built for ``view`` of this round (as the node's behaviour has it)."""
        r = self._round
        payload, model, model_blob = self._behavior.proposal(*built)
        self._blobs.put(model_blob)
        self._remember_validated(payload.model_digest, model, model_blob, self._proposed_state)
        r.proposed_views.add(view)
        clock = self.clock_ms()
        time_ms = max(self._state.time_ms, clock)
        # a validator a tick behind this clock accepts up to its own clock + tick + drift: this clock + drift
        latest = block_time_window(self._genesis, clock)[1] - self._timeouts.tick_ms
        time_ms = self._behavior.proposal_time(time_ms, latest, lambda t: make_header(
            chain_id=self._genesis.chain_id, height=r.plan.height, prev_hash=self._state.head_hash, view=view,
            proposer=self.peer_id, time_ms=t, payload=payload), payload)
        header = make_header(chain_id=self._genesis.chain_id, height=r.plan.height, prev_hash=self._state.head_hash,
                             view=view, proposer=self.peer_id, time_ms=time_ms, payload=payload)
        if not self._behavior.accepts_everything and self._judge_at_once(Proposal(header, payload)) is not None:
            # its own checks refuse it (its block time beyond its own clock's drift: a clock fault): no proposal,
            # as the validators would refuse it; the re-execution is left out (the node built the payload itself)
            self._dropped["own proposal refused"] += 1
            return
        try:
            effects = self._replica.propose(payload, height=r.plan.height, view=view, time_ms=time_ms)
        except LocalProtocolError:
            # The payload is built from peer inputs that were all checked on receipt, so our own validation
            # refusing it means a check is missing somewhere: no proposal (the view times out and moves on),
            # counted in status().dropped, where tests look for it. A peer must never crash the node this way.
            self._dropped["own proposal refused"] += 1
            return
        self._apply_replica(effects)

    def _pending_evidence(self, height: int) -> tuple[Evidence, ...]:
        return tuple(e for e in self._evidence.values() if e.height <= height)[:EVIDENCE_PER_BLOCK_MAX]

    def _build_committee_payload(self, view: int) -> None:
        r = self._round
        assert self._rules.cmfl is not None and self._model is not None
        chosen = self._behavior.score_rows(dict(r.rows))
        rows = [chosen[m] for m in sorted(chosen)]
        parsed = [parse_score_row(x) for x in rows]
        decision = decide_round(parsed, training=r.plan.trainers, committee=r.plan.committee, params=self._rules.cmfl)
        included = []
        for k in decision.accepted:
            c = next(row.updates[k] for row in parsed if k in row.updates)
            held = r.updates.get((k, r.plan.height))
            if held is None or held[0].digest != c.digest:
                self._want_blob(c.digest)
                return  # fetch the accepted update first
            included.append((c, held[1]))
        for a, b in decision.equivocations:
            self._add_evidence(update_equivocation_evidence(a, b))
        state, plan, model, rules, cmfl = self._state, r.plan, self._model, self._rules, self._rules.cmfl

        def finish(result: AggregateResult, blob: bytes, digest: bytes) -> tuple[Payload, np.ndarray, bytes]:
            self._proposed_state = None
            payload = Payload(
                updates=tuple(c for c, _ in sorted(included, key=lambda cu: cu[0].peer)),
                model_digest=digest,
                next_committee=decision.next_committee,
                record=cmfl_record(decision, training=r.plan.trainers, params=cmfl),
                attestations=tuple(rows),
                evidence=self._pending_evidence(r.plan.height),
            )
            return payload, result.model, blob

        self._build(view, lambda: rules.aggregate(state, plan, model, included), finish)

    def _build_coordinator_payload(self, view: int) -> None:
        r = self._round
        assert self._model is not None
        included = [r.updates[k] for k in sorted(r.updates)]
        state, plan, model, algo_state = self._state, r.plan, self._model, self._algo_state
        history = self._history.snapshot() if self._offload_checks else self._history
        rules = self._rules

        def finish(result: AggregateResult, blob: bytes, digest: bytes) -> tuple[Payload, np.ndarray, bytes]:
            state_digest = None
            self._proposed_state = result.state
            if result.state is not None:
                state_digest = self._blobs.put(result.state)
            payload = Payload(
                updates=tuple(c for c, _ in included),
                model_digest=digest,
                next_committee=self._rules.next_committee_coordinator(self._state),
                record=self._rules.coordinator_record(r.plan, result),
                state_digest=state_digest,
                evidence=self._pending_evidence(r.plan.height),
            )
            return payload, result.model, blob

        self._build(view, lambda: rules.aggregate(state, plan, model, included, algo_state=algo_state, history=history),
                    finish)

    def _build(self, view: int, aggregate: Callable[[], AggregateResult],
               finish: Callable[[AggregateResult, bytes, bytes], tuple[Payload, np.ndarray, bytes]]) -> None:
        """Aggregate this round's updates for the proposal of ``view`` (with ``offload_checks``, in the host: a
        :class:`Check`, as a validator's re-execution), then propose what ``finish`` builds from the new model."""
        r = self._round
        caches = self._ctx.caches

        def run() -> tuple[AggregateResult, bytes, bytes]:
            result = aggregate()
            blob = vector_to_blob(result.model)
            return result, blob, caches.sha256(blob)

        def then(out: tuple[AggregateResult, bytes, bytes]) -> None:
            if self._round is r and view not in r.proposed_views:
                self._propose_built(view, finish(*out))

        if not self._offload_checks:
            then(run())
            return
        key = ("proposal", bytes(8) + view.to_bytes(8, "big"))
        if key not in self._checking:
            self._checking.add(key)
            self._out.append(Check(height=r.plan.height, block_hash=key[1], purpose=key[0], run=run, then=then))

    # --- validation: the replica's RequestVerdict --------------------------------------------------

    def _verdict(self, block_hash: bytes, proposal: Proposal) -> None:
        """Judge ``proposal`` for the replica (``RequestVerdict``) and answer it (``Replica.verdict``), now or once
        the round's re-execution comes back (:class:`Check`)."""
        if self._behavior.accepts_everything:
            self._apply_replica(self._replica.verdict(block_hash, None))
            return

        def answer(reason: str | Pending | None, provable: bool) -> None:
            hd = proposal.header
            if reason is not None:
                self._refused[(hd.height, hd.view, hd.proposer)] = proposal  # relayed with its evidence, or judged again
                if not provable:
                    self._unprovable.add((hd.height, hd.view, hd.proposer))
            self._apply_replica(self._replica.verdict(block_hash, reason))

        self._judge(proposal, ("verdict", block_hash), answer)

    def on_checked(self, check: Check, outcome: Checked | None) -> list[NodeEffect]:
        """A :class:`Check` ran (``offload_checks``): judge on from its outcome, unless this node left its height.
        None: the check failed (the host logged why); no verdict then, and the replica's timer refuses the proposal
        without accusing its proposer."""
        self._checking.discard((check.purpose, check.block_hash))
        if outcome is None:
            self._dropped["check failed"] += 1
        elif check.height == self._round.plan.height:
            check.then(outcome)
        else:
            self._dropped["check of a height left"] += 1
        self._progress()
        return self._flush()

    def _judge(self, proposal: Proposal, key: tuple[str, bytes], then: Callable[[str | Pending | None, bool], None]) -> None:
        """Call ``then(why the proposal is refused or None, whether that proves the proposer faulty)``; the reason is
        ``Pending`` (not provable) while this validator lacks an input, the previous model or a blob, which it
        fetches: the replica waits for it within the view's timer (:meth:`_progress` judges again once it is here),
        as an update on its way from its trainer may arrive after the proposal that includes it.

        Provable: the proposal is wrong whatever this validator holds (a forged row, a wrong aggregate of
        updates it has, an evidence claim that does not hold). Not provable: this validator lacks an input
        (the previous model, a blob), suspects censorship of an update the proposer may not have, cannot
        confirm an ``invalid_proposal`` evidence item, or finds the block time beyond its own clock's drift (either
        way); such a refusal (for a missing input: when the view's timer expires) still votes for a view change, but
        it never becomes evidence, so an honest proposer is never accused.

        The re-execution of the round (:meth:`RoundRules.check_payload`) runs here, or with ``offload_checks`` in the
        host (:class:`Check`); ``key`` names it while it runs there.
        """
        early = self._judge_at_once(proposal)
        if early is not None:
            then(*early)
            return
        payload = proposal.payload
        skip = proposal.header.view >= ATTEMPT_VIEWS  # a re-drawn committee's block: the skip (RoundRules.skip_payload)
        assert self._model is not None
        state, model, blobs, algo_state = self._state, self._model, self._blobs, self._algo_state
        history = self._history.snapshot() if self._offload_checks else self._history
        held = None if skip else {k: (c.digest, v) for k, (c, v) in self._round.updates.items()}
        rules = self._rules

        def run() -> Checked:
            if skip:
                return rules.check_payload(state, payload, model, blobs, algo_state=algo_state, history=history,
                                           view=proposal.header.view)
            return rules.check_payload(state, payload, model, blobs, algo_state=algo_state, history=history, held=held)

        def done(outcome: Checked) -> None:
            reason, new_model, blob, new_state = outcome
            if reason is not None:
                if skip:
                    then(reason, True)  # (the skip is a pure function of the state: any other payload is wrong)
                    return
                missing = [u.digest for u in payload.updates if not self._blobs.has(u.digest)]
                for d in missing:
                    self._want_blob(d, ask=proposal.header.proposer)
                if missing or self._algo_state_missing:
                    then(Pending(reason), False)
                else:
                    then(reason, True)
                return
            assert new_model is not None and blob is not None
            self._remember_validated(payload.model_digest, new_model, blob, new_state)
            then(None, True)

        if not self._offload_checks:
            done(run())
            return
        self._checking.add(key)
        self._out.append(Check(height=proposal.header.height, block_hash=key[1], purpose=key[0], run=run, then=done))

    def _judge_at_once(self, proposal: Proposal) -> tuple[str | Pending | None, bool] | None:
        """What judging ``proposal`` finds before re-executing its round (see :meth:`_judge`), or None to go on."""
        payload = proposal.payload
        if proposal.header.height != self._round.plan.height:  # (the replica waits for the commit: not expected)
            return f"this validator is at height {self._round.plan.height}, not {proposal.header.height}", False
        clock = self.clock_ms()
        earliest, latest = block_time_window(self._genesis, clock)
        if not earliest <= proposal.header.time_ms <= latest:  # bounded: a proposer may not pick any time it likes
            # (clocks differ: a time beyond this validator's drift proves nothing against the proposer)
            return (f"block time {proposal.header.time_ms} is more than tick_ms + time_drift_ms "
                    f"({latest - clock} ms) from this validator's clock {clock}"), False
        if self._model is None:
            return Pending("this validator does not have the previous model yet"), False
        if proposal.header.view >= ATTEMPT_VIEWS:
            if not self._state.model_digest:
                return "this validator followed the previous block by its header: it cannot build the skip", False
            return None
        for ev in payload.evidence:
            if ev.kind == KIND_INVALID_PROPOSAL and proposal_evidence_key(ev) not in self._confirmed:
                return f"cannot confirm the evidence against {ev.offender}: this validator did not refuse that proposal", False
        if not self._rules.committee_mode:
            # Censorship is judged only on what this validator told the proposer in time (_tell_primary): a trainer
            # that skipped the primary cannot force a view change. What it was not told of, it may
            # lack (lost messages, a crashed trainer's partial send, a healed partition); the next primary is told.
            included = {(u.peer, u.fl_round) for u in payload.updates}
            left_out = sorted(k for k in self._round.updates if k not in included and self._omission_counts("update", k, proposal))
            if left_out:
                names = [p if t == self._round.plan.height else f"{p}@{t}" for p, t in left_out]
                return f"the proposal leaves out the valid update(s) of {', '.join(names)}", False
        else:
            # Every score row told to the proposer in time must be in: the primary cannot steer the election by the
            # rows it picks (the bound on what it may still choose: docs/sampling.md).
            used = {a.signer for a in payload.attestations if a.kind == KIND_SCORES}
            omitted = sorted(m for m in self._round.rows if m not in used and self._omission_counts("row", m, proposal))
            if omitted:
                return f"the proposal leaves out the score row(s) of {', '.join(omitted)}", False
        return None

    def _remember_validated(self, digest: bytes, model: np.ndarray, blob: bytes, state: bytes | None) -> None:
        if state is not None:
            self._blobs.put(state)
        self._validated[digest] = (model, blob, state)
        while len(self._validated) > 8:
            self._validated.popitem(last=False)

    # --- consensus effects ------------------------------------------------------------------------

    def _apply_replica(self, effects: Sequence[Any]) -> None:
        # a batch may decide several heights (a replica catching up): while a later one follows in it, this node
        # is still catching up, whatever the replica (already at the end of the batch) says now
        decided = sum(1 for fx in effects if isinstance(fx, (Commit, CommitHeader)))
        for fx in effects:
            match fx:
                case Send(to=to, message=msg):
                    self._out.append(Transmit(to=to, data=self._pbft_bytes(msg), kind="pbft", detail=msg.kind))
                case Broadcast(to=to, message=msg):
                    data = self._pbft_bytes(msg)
                    self._out.extend(Transmit(to=p, data=data, kind="pbft", detail=msg.kind) for p in to)
                case SendBlocks(to=to, headers=True):
                    for h in fx.heights():
                        data = self._header_bytes(h)
                        if data is not None:
                            self._out.append(Transmit(to=to, data=data, kind="pbft", detail=KIND_HEADER))
                case SendBlocks(to=to, start=start, stop=stop):
                    for h in range(start, stop):
                        b = self._decided_block(h)
                        if b is not None:
                            self._out.append(Transmit(to=to, data=self._pbft_bytes(decided_message(b)), kind="pbft",
                                                      detail="decided"))
                case RequestProposal(height=h, view=v):
                    self._round.proposal_request = (h, v)
                case RequestVerdict(block_hash=block_hash, proposal=proposal):
                    if ("verdict", block_hash) not in self._checking:  # (a retransmitted pre-prepare: asked again)
                        self._verdict(block_hash, proposal)
                case ReportMisbehavior(evidence=ev):
                    if ev.kind == KIND_INVALID_PROPOSAL:
                        if (ev.height, ev.view, ev.offender) in self._unprovable:
                            self._rejudge[(ev.height, ev.view, ev.offender)] = ev
                            continue  # refused for want of an input, not for a proven fault (yet)
                        self._confirmed.add(proposal_evidence_key(ev))
                        self._relay_refused(ev)
                    self._add_evidence(ev)
                case Commit(block=block, state=state):
                    decided -= 1
                    self._on_commit(block, state, more=decided > 0)
                case CommitHeader(header=header, certificate=cert, state=state):
                    decided -= 1
                    self._on_commit_header(header, cert, state, more=decided > 0)
                case _:
                    raise AssertionError(f"unknown consensus effect {fx!r}")

    @staticmethod
    def _pbft_bytes(msg: Message) -> bytes:
        return Envelope(pbft=msg).encode()

    def _add_evidence(self, ev: Evidence) -> None:
        """Hold ``ev`` for this node's next proposal, once per (kind, offender, height, view): a faulty peer
        that keeps sending bad messages does not grow the list (bounded, oldest dropped first)."""
        key = evidence_key(ev)
        slot = (ev.kind, ev.offender, ev.height, ev.view)
        if key in self._evidence or any((e.kind, e.offender, e.height, e.view) == slot for e in self._evidence.values()):
            return
        self._evidence[key] = ev
        while len(self._evidence) > EVIDENCE_PENDING_MAX:
            self._evidence.popitem(last=False)
        self._out.append(Misbehavior(evidence=ev))

    def _header_bytes(self, height: int) -> bytes | None:
        """The ``decided_header`` message of ``height`` signed by this node, or None if it knows no such header. The
        last :data:`HEADER_MESSAGES_KEPT` signed are kept: the members that catch up from this node ask for the
        same heights."""
        sent = self._header_sent.get(height)
        if sent is not None:
            self._header_sent.move_to_end(height)
            return sent
        known = self._certified.get(height)
        if known is None:
            b = self._decided_block(height)
            if b is None:
                return None
            known = (b.header, b.certificate)
        data = self._pbft_bytes(decided_header_message(self._key, self._ctx.chain_id, header=known[0],
                                                       certificate=known[1]))
        self._header_sent[height] = data
        while len(self._header_sent) > HEADER_MESSAGES_KEPT:
            self._header_sent.popitem(last=False)
        return data

    def _decided_block(self, height: int) -> Block | None:
        """A decided block this node holds: one of the last :data:`DECIDED_KEPT`, else from its block source."""
        b = self._decided.get(height)
        if b is None and self._block_source is not None:
            b = self._block_source(height)
        return b

    def _certify(self, header: BlockHeader, cert: Certificate) -> None:
        if self._lazy:
            self._certified[header.height] = (header, cert)
            while len(self._certified) > HEADERS_KEPT:
                self._certified.popitem(last=False)

    def _on_commit(self, block: Block, state: ChainState, *, more: bool = False) -> None:
        """Apply a decided block (``more``: a later height follows in the same batch)."""
        self._decided[block.height] = block
        self._certify(block.header, block.certificate)
        self._last_cert = block.certificate
        while len(self._decided) > DECIDED_KEPT:
            self._decided.popitem(last=False)
        for ev in block.payload.evidence:
            self._evidence.pop(evidence_key(ev), None)
        # invalid_proposal evidence is confirmable only by the validators of its own height (see _judge)
        for key in [k for k, e in self._evidence.items() if e.kind == KIND_INVALID_PROPOSAL and e.height <= block.height]:
            del self._evidence[key]
        self._unprovable.clear()
        self._refused.clear()
        self._rejudge.clear()
        self._confirmed.clear()
        old_round = self._round
        self._history.record(old_round.plan, self._model, block.payload)
        self._state = state  # (the replica may be further on: a batch can decide several heights)
        digest = block.payload.model_digest
        sd = block.payload.state_digest
        self._algo_state = None if sd is None else self._blob(sd)
        self._algo_state_missing = sd is not None and self._algo_state is None
        model = None
        cached = self._validated.get(digest)
        if cached is not None:
            model = cached[0]
        else:
            blob = self._blob(digest)
            if blob is not None:
                try:
                    model = self._decoder.vector(blob, dim=self._dim, what="model")  # read-only, shared (see _on_blobs)
                except InvalidUpdateError:
                    model = None
        self._model = model
        plan = self._rules.plan(self._state, self._history)
        if self._lazy and not self._needs_model(plan):
            self._model = None  # it sleeps until a role wakes it: the block that wakes it brings the model it needs
        if block.header.proposer == self._me:
            self._push_decided(block, old_round.plan.committee, plan)
        held = _HeldBlobs(self._blobs, block.payload)
        if self._lazy:
            self._held_out.append(held)  # read before a shed (only a lazy member sheds)
        self._out.append(Decided(block=block, model=model, blobs=held))
        if self._needs_model(plan):
            if model is None and self._blob(digest) is None:
                # the proposer pushes the model right behind the block: wait for it, ask only on the retry timer
                self._want.setdefault(digest, self._now)
            if self._algo_state_missing:
                assert sd is not None
                self._want.setdefault(sd, self._now)
        for d in old_round.announced:  # the blobs of announced updates the round no longer needs (an archive's below)
            self._want.pop(d, None)
        if self._archive:  # this node's ledger re-executes: it needs the blobs of the rounds it did not validate
            for d in referenced_blobs(block.payload):
                if d == digest and model is not None:
                    continue  # the model is in hand: the host stores it from the Decided effect
                if not self._blobs.has(d):
                    self._want.setdefault(d, self._now)
            self._ask_row_members(block.payload)
        self._expire_unsolicited(block.height, catching_up=more)
        self._round = _Round(plan, self._now)
        h = plan.height
        for (p, t), held_update in old_round.updates.items():  # stale updates not yet included carry over
            if t < h and self._stale_ok(p, t, h):
                self._round.updates[(p, t)] = held_update
        early, self._early, self._early_bytes = self._early, [], 0
        for sender, packet in early:
            if packet.commitment.fl_round == h or (self._lazy and packet.commitment.fl_round > h):  # (later: kept)
                try:
                    self._on_update(sender, packet)
                except (LedgerError, InvalidUpdateError) as e:
                    self._dropped[type(e).__name__] += 1
        self._begin_round()

    def _needs_payload(self, state: ChainState) -> bool:
        """Does this node need the payload of the block that led to ``state`` (with ``headers_for_outsiders``)?
        Yes if it has a role at the next height (it needs the model, the included updates), or holds evidence
        (to see which of it the block included)."""
        return bool(self._evidence) or self._me in self._rules.plan(state, self._history).participants

    def _on_commit_header(self, header: BlockHeader, cert: Certificate, state: ChainState, *, more: bool = False) -> None:
        """A block decided and known by its header and certificate only (``consensus.CommitHeader``): this node
        has no role at the next height and holds no evidence (:meth:`_needs_payload`), so it only follows the
        chain. What the payload says (model, algorithm state, the included updates) stays unknown here."""
        self._certify(header, cert)
        self._last_cert = cert
        self._unprovable.clear()
        self._confirmed.clear()
        self._state = state
        self._algo_state, self._algo_state_missing = None, False
        self._model = None
        self._expire_unsolicited(header.height, catching_up=more)
        self._round = _Round(self._rules.plan(state, self._history), self._now)
        early, self._early, self._early_bytes = self._early, [], 0  # (nothing for a member outside the round)
        for sender, packet in early:
            if packet.commitment.fl_round > self._round.plan.height:  # still catching up (lazy_outsiders): kept
                self._on_update(sender, packet)
            else:
                self._dropped["early update for a round without a role"] += 1

    def _needs_model(self, plan: RoundPlan) -> bool:
        """Does this node need the global model (and strategy state) of ``plan``'s height? With
        ``models_for_all`` every node does (it serves the model to peers, and a runtime node keeps a full
        archive); otherwise only the height's trainers, reference trainers and validators, and every node when
        the strategy aggregates stale updates (a later validator needs their base models)."""
        return self._models_for_all or self._rules.staleness > 0 or self._me in plan.participants

    def _push_data(self, block: Block) -> tuple[bytes, bytes | None]:
        """What a push of ``block`` sends: the decided block's message, and the envelope of its model (and strategy
        state) if this node holds them."""
        cached = self._validated.get(block.payload.model_digest)
        model_blob = cached[1] if cached is not None else self._blob(block.payload.model_digest)
        block_data = self._pbft_bytes(decided_message(block))
        pushed = [] if model_blob is None else [model_blob]
        sd = block.payload.state_digest
        state_blob = None if sd is None else self._blob(sd)
        if state_blob is not None:
            pushed.append(state_blob)
        model_data = encode_large(Envelope(blobs=tuple(pushed))) if pushed else None
        return block_data, model_data

    def _maybe_nudge(self) -> None:
        """With ``lazy_outsiders``: once per height, half way to the collect deadline, the primary of view 0 sends the
        block before this height (and its model) again to the sampled clients outside the committee it holds no
        update from. A lazy trainer learns of its role only from that block's push (it sleeps until a message wakes
        it), so without this a lost push costs the round that client's update; a client that has the block
        already counts it as a duplicate. No retry in a round where every update came in time."""
        r = self._round
        if not self._lazy or r.nudged or r.proposal_request != (r.plan.height, 0):
            return
        if self._now < r.start_tick + max(1, self._collect // 2):
            return
        r.nudged = True
        h = r.plan.height
        committee = set(r.plan.committee)
        missing = [t for t in r.plan.trainers if t not in committee and (t, h) not in r.updates]
        block = self._decided.get(h - 1) if missing else None
        if block is None:
            return
        block_data, model_data = self._push_data(block)
        for p in missing:
            self._out.append(Transmit(to=p, data=block_data, kind="pbft", detail="decided"))
            if model_data is not None:
                self._out.append(Transmit(to=p, data=model_data, kind="model"))

    def _push_decided(self, block: Block, committee: Sequence[str], plan: RoundPlan) -> None:
        """The proposer sends the decided block to every member outside the committee, and the new model (and
        strategy state) to those of them that need it at the next height (``plan``; every one of them with
        ``models_for_all``)."""
        block_data, model_data = self._push_data(block)
        inside = set(committee)
        needy = None if self._models_for_all or self._rules.staleness > 0 else plan.participants
        header_data = None
        if self._headers and not self._lazy:  # those outside the next round get the header and certificate alone
            header_data = self._pbft_bytes(decided_header_message(self._key, self._ctx.chain_id, block))
        # with lazy_outsiders the members outside the next round are sent nothing (a role wakes them): only the
        # next round's members are visited, in member order (the genesis lists members sorted by id)
        targets = sorted(needy) if self._lazy and needy is not None else self._genesis.member_ids
        for p in targets:
            if p == self._me or p in inside:
                continue
            if header_data is not None and needy is not None and p not in needy:
                self._out.append(Transmit(to=p, data=header_data, kind="pbft", detail=KIND_HEADER))
            else:
                self._out.append(Transmit(to=p, data=block_data, kind="pbft", detail="decided"))
            if model_data is not None and (needy is None or p in needy):
                self._out.append(Transmit(to=p, data=model_data, kind="model"))
        # validators of the next committee that sat outside this one get the block above; the others
        # decided it themselves and have the model from validation.

    # --- peer inputs ------------------------------------------------------------------------------

    def _on_update(self, sender: str, packet: UpdatePacket) -> None:
        r = self._round
        c = packet.commitment
        peer = c.peer  # the trainer's signature authenticates it; a fellow validator may relay it
        if peer != sender and (sender not in r.plan.committee or peer == self._me):
            self._dropped["relayed update"] += 1
            return
        h = r.plan.height
        if c.fl_round == h + 1 or (self._lazy and h + 1 < c.fl_round <= h + HEADERS_KEPT):
            # this node lags (the previous block or its model has not reached it yet; with lazy_outsiders, it
            # may still be catching up over the heights it slept through): keep the update for the round it is for
            # instead of losing it; it is checked in full when that round begins. Bounded in count and bytes, one
            # per sender and of an update's size: an unchecked peer cannot make this buffer grow.
            size = len(packet.blob)
            if size != self._update_blob_len:
                self._dropped["early update of the wrong size"] += 1
            elif (
                len(self._early) < EARLY_UPDATES_MAX
                and self._early_bytes + size <= EARLY_UPDATE_BYTES_MAX
                and all(snd != sender for snd, _ in self._early)
            ):
                self._early.append((sender, packet))
                self._early_bytes += size
            else:
                self._dropped["early update over the buffer bound"] += 1
            return
        if c.fl_round != h and not self._stale_ok(peer, c.fl_round, h):
            if c.fl_round < h and c.digest in self._want:
                # an update of a decided block that this node decided by its certificate, pushed by its trainer
                # before the block: a blob it wants (its archive, or to rebuild the model), so no fetch is needed
                self._on_blobs(sender, (packet.blob,))  # (kept only if its hash is the wanted digest)
                return
            self._dropped["update for another round"] += 1
            return
        if (c.fl_round == h and peer not in r.plan.trainers) or self._me not in r.plan.committee:
            self._dropped["update from a non-trainer or to a non-validator"] += 1
            return
        self._ctx.keys.verify(
            c.peer,
            c.signature,
            update_sign_bytes(self._ctx.chain_id, c.peer, c.fl_round, c.digest, c.n_samples),
            what="update commitment",
        )
        if len(packet.blob) != self._update_blob_len:  # (before hashing it: a peer's blob may be 256 MiB)
            self._dropped["update blob of the wrong size"] += 1
            return
        if self._ctx.caches.sha256(packet.blob) != c.digest:
            self._dropped["update blob does not match its digest"] += 1
            return
        vec = self._decoder.vector(packet.blob, dim=self._upload_dim, what=f"update of {peer}")
        held = r.updates.get((peer, c.fl_round))
        if held is not None:
            if held[0].signed_body() != c.signed_body():
                self._add_evidence(update_equivocation_evidence(held[0], c))
            self._dropped["duplicate update"] += 1
            return
        self._blobs.put(packet.blob)
        r.updates[(peer, c.fl_round)] = (c, vec)
        self._tell_primary(updates=((peer, c.fl_round),))

    def _on_scores(self, sender: str, signed: SignedMessage) -> None:
        r = self._round
        if signed.kind != KIND_SCORES or signed.height != r.plan.height:
            self._dropped["score row for another round"] += 1
            return
        # a member's own row, or one a fellow member relays to its primary (_tell_primary): the row's signature is
        # the member's, whoever carries it
        if sender not in r.plan.committee or signed.signer not in r.plan.committee or self._me not in r.plan.committee:
            self._dropped["score row outside the committee"] += 1
            return
        try:
            verify_score_row(self._ctx, signed)  # the member's signature, then every client commitment's
        except ForgedScoreRow as e:
            # signed by the member, so provable: the member is the offender, never the client it misquotes
            self._add_evidence(e.evidence)
            raise
        held = r.rows.get(signed.signer)
        if held is not None:
            if encode(held.body) != encode(signed.body):
                pair = sorted((held, signed), key=lambda m: m.encode())
                self._add_evidence(
                    Evidence(kind="equivocation", offender=signed.signer, height=signed.height, view=signed.view,
                             exhibits=tuple(pair), reason="two different score rows for one round")
                )
            return
        r.rows[signed.signer] = signed
        self._tell_primary(rows=(signed.signer,))

    def _on_have(self, sender: str, commitments: Sequence[UpdateCommitment]) -> None:
        """A fellow validator holds these signed updates (:meth:`_tell_primary`): fetch the blobs of those this
        node lacks from it, and take each as if its trainer had sent it. At most one announced digest per
        ``(peer, round)`` of this round's plan (or the strategy's staleness window) is fetched at a time."""
        r = self._round
        h = r.plan.height
        if sender not in r.plan.committee or self._me not in r.plan.committee:
            self._dropped["have outside the committee"] += 1
            return
        fetching = {(c.peer, c.fl_round) for c in r.announced.values()}
        for c in commitments:
            key = (c.peer, c.fl_round)
            if key in r.updates or key in fetching:
                continue
            if (c.fl_round == h and c.peer not in r.plan.trainers) or (c.fl_round != h and not self._stale_ok(*key, h)):
                self._dropped["have of an update not expected"] += 1
                continue
            self._ctx.keys.verify(c.peer, c.signature,
                                  update_sign_bytes(self._ctx.chain_id, c.peer, c.fl_round, c.digest, c.n_samples),
                                  what="update commitment")
            blob = self._blob(c.digest)
            if blob is not None:
                self._on_update(c.peer, UpdatePacket(commitment=c, blob=blob))
                continue
            r.announced[c.digest] = c
            fetching.add(key)
            self._want_blob(c.digest, ask=sender)

    def _relay_refused(self, ev: Evidence) -> None:
        """Send the proposal this node refused with proof, signed pre-prepare and payload, to the rest of the
        committee: each judges it itself (:meth:`_on_refused`), so the evidence reaches the next
        block whoever proposes it, also when a primary sent each validator a different invalid proposal."""
        proposal = self._refused.get((ev.height, ev.view, ev.offender))
        if proposal is None or ev.height != self._round.plan.height:
            return
        data = Envelope(refused=Message(signed=ev.exhibits[0], payload=proposal.payload)).encode()
        for p in self._round.plan.committee:
            if p != self._me and p != ev.offender:
                self._out.append(Transmit(to=p, data=data, kind="refused"))

    def _on_refused(self, sender: str, msg: Message) -> None:
        """A fellow validator refused this proposal with proof (:meth:`_relay_refused`). Judge it as if it had come
        from its primary: if it is provably wrong here too, the evidence is this node's own (confirmed, in its next
        proposal, accepted in others'). Nothing is inferred from the relay itself: a proposal this node finds
        valid, or cannot judge, accuses nobody."""
        r = self._round
        s = msg.signed
        if sender not in r.plan.committee or self._me not in r.plan.committee or s.height != r.plan.height:
            self._dropped["refused proposal outside this height's committee"] += 1
            return
        ev = Evidence(kind=KIND_INVALID_PROPOSAL, offender=s.signer, height=s.height, view=s.view, exhibits=(s,),
                      reason="")
        if proposal_evidence_key(ev) in self._confirmed:
            return
        proposal = parse_proposal(msg)  # a pre_prepare whose payload matches its header (RemoteProtocolError otherwise)
        if proposal.header.proposer != s.signer or s.signer != primary(r.plan.committee, self._ctx.genesis_hash,
                                                                       s.height, s.view):
            self._dropped["refused proposal not by the primary of its view"] += 1
            return
        check_evidence(self._ctx, s.height, ev)  # the primary's signature (LedgerError otherwise)
        key = ("evidence", proposal.block_hash)
        if key in self._checking:
            return

        def then(reason: str | Pending | None, provable: bool) -> None:
            if isinstance(reason, str) and provable:
                found = Evidence(kind=KIND_INVALID_PROPOSAL, offender=s.signer, height=s.height, view=s.view,
                                 exhibits=(s,), reason=reason)
                self._confirmed.add(proposal_evidence_key(found))
                self._add_evidence(found)

        self._judge(proposal, key, then)

    def _rejudge_refused(self) -> None:
        """Judge again, once, each proposal of this height refused for want of a blob (:attr:`_rejudge`) when its
        blobs and the previous model are here: one that proves wrong becomes evidence (confirmed, relayed)."""
        for key, ev in list(self._rejudge.items()):
            proposal = self._refused.get(key)
            if proposal is None or key[0] != self._round.plan.height:
                del self._rejudge[key]
                continue
            if not self._inputs_here(proposal):
                continue
            if ("evidence", proposal.block_hash) in self._checking:
                continue
            del self._rejudge[key]  # judged once more, whatever it says
            self._judge(proposal, ("evidence", proposal.block_hash), self._confirm_refused(key, ev))

    def _confirm_refused(self, key: tuple[int, int, str], ev: Evidence) -> Callable[[str | Pending | None, bool], None]:
        """What :meth:`_rejudge_refused` does with its verdict: a proposal that proves wrong becomes evidence."""

        def then(reason: str | Pending | None, provable: bool) -> None:
            if isinstance(reason, str) and provable:
                self._unprovable.discard(key)
                found = Evidence(kind=KIND_INVALID_PROPOSAL, offender=ev.offender, height=ev.height, view=ev.view,
                                 exhibits=ev.exhibits, reason=reason)
                self._confirmed.add(proposal_evidence_key(found))
                self._add_evidence(found)
                self._relay_refused(found)

        return then

    def _inputs_here(self, proposal: Proposal) -> bool:
        """Does this node hold what judging ``proposal`` reads: the previous model, the strategy state, the update
        blobs?"""
        return (self._model is not None and not self._algo_state_missing
                and all(self._blobs.has(u.digest) for u in proposal.payload.updates))

    def _primary_now(self) -> tuple[int, str] | None:
        """``(view, primary)`` of the view this validator's replica is in at this height, or None (not a validator
        of this height, or the replica is not at it)."""
        r = self._round
        if self._me not in r.plan.committee:
            return None
        h, view, p = self._replica.view_primary
        return (view, p) if h == r.plan.height else None

    def _tell_primary(self, *, rows: Sequence[str] = (), updates: Sequence[tuple[str, int]] = (), to: str | None = None,
                      again: bool = False) -> None:
        """Send the primary of this validator's view (or ``to``) the score rows and the signed commitments of the
        updates it holds and has not told that primary of.

        A validator judges a proposal's omissions only on what it told the proposer in time (:meth:`_judge`), so
        a trainer or a committee member that skips the primary cannot make an honest primary look like a censor
        (the primary fetches an announced update's blob from the validator, :meth:`_on_have`), and a primary that
        leaves out a row or an update honest validators told it of is refused. Rows are small and go whole; an
        update goes as its commitment alone, and only in coordinator mode (a CMFL proposal carries the updates its
        rows select, which the primary fetches by digest). ``again``: also what that primary was told before (a view
        change back to it: the message may have been lost, and the judgement's clock starts again)."""
        r = self._round
        if to is None:
            now = self._primary_now()
            if now is None:
                return
            to = now[1]
        if to == self._me:
            return
        for m in rows:
            key = ("row", m, to)
            if (again or key not in r.told) and m != to:
                r.told[key] = self._now
                self._out.append(Transmit(to=to, data=Envelope(scores=r.rows[m]).encode(), kind="scores"))
        fresh = []
        for k in () if self._rules.committee_mode else updates:  # (committee mode judges rows, not updates)
            key = ("update", k, to)
            if (again or key not in r.told) and k[0] != to:
                r.told[key] = self._now
                fresh.append(r.updates[k][0])
        for i in range(0, len(fresh), BLOBS_PER_MESSAGE_MAX):
            data = Envelope(have=tuple(fresh[i : i + BLOBS_PER_MESSAGE_MAX])).encode()
            self._out.append(Transmit(to=to, data=data, kind="have"))

    def _tell_new_primary(self) -> None:
        """After a view change, tell the new primary of everything held (:meth:`_tell_primary`), again if it was told
        before: under loss a ``have`` that never arrived would otherwise make every later proposal of that member
        look like censorship, for the rest of the height."""
        r = self._round
        now = self._primary_now()
        if now is None or now[0] == r.told_view:
            return
        r.told_view = now[0]
        r.view_since = self._now
        if r.rows or r.updates:
            self._tell_primary(rows=sorted(r.rows), updates=sorted(r.updates), to=now[1], again=True)

    def _omission_counts(self, what: str, item: object, proposal: Proposal) -> bool:
        """May this validator refuse ``proposal`` for leaving out the row or update ``item`` it holds?

        Yes if it sent the proposer that item at least :attr:`_grace` ticks ago (time to reach it, and to fetch an
        update's blob), or if a view-0 proposal came before this validator's collect deadline less the grace: an
        honest primary proposes early only with every row or update of the round, so one that leaves something
        out before the deadline did not wait for it."""
        t = self._round.told.get((what, item, proposal.header.proposer))
        if t is not None and t <= self._now - self._grace:
            return True
        return proposal.header.view == 0 and self._now < self._round.start_tick + self._collect - self._grace

    def _on_want(self, sender: str, digests: Sequence[bytes]) -> None:
        have = [b for b in (self._servable(d) for d in digests[:BLOBS_PER_MESSAGE_MAX]) if b is not None]
        if have:
            self._out.append(Transmit(to=sender, data=encode_large(Envelope(blobs=tuple(have))), kind="blobs"))

    def _on_blobs(self, sender: str, blobs: Sequence[bytes]) -> None:
        for blob in blobs:
            d = self._ctx.caches.sha256(blob)
            if d in self._want:
                self._blobs.put(blob)
                del self._want[d]
                c = self._round.announced.pop(d, None)
                if c is not None:  # an update a validator told this primary of (_on_have)
                    try:
                        self._on_update(c.peer, UpdatePacket(commitment=c, blob=blob))
                    except (RemoteProtocolError, LedgerError, InvalidUpdateError) as e:
                        self._dropped[type(e).__name__] += 1
            else:
                self._hold_unsolicited(sender, d, blob)
        sd = self._state.state_digest
        if self._algo_state_missing and sd is not None:
            self._algo_state = self._blob(sd)
            self._algo_state_missing = self._algo_state is None
            if not self._algo_state_missing:
                self._begin_round()
        if self._model is None:
            blob = self._blob(self._state.model_digest)
            if blob is not None:
                try:
                    # a read-only view, shared by every node that decodes the same blob through a shared decoder
                    # (a simulation's members): the global model is one object until a member trains from it
                    self._model = self._decoder.vector(blob, dim=self._dim, what="model")
                except InvalidUpdateError:
                    self._dropped["bad model blob"] += 1
                    return
                self._begin_round()

    def _servable(self, digest: bytes) -> bytes | None:
        """A blob this node can hand out: stored, or a model/state it validated, or the current global model
        (a validator keeps the model it re-executed as a vector, not as a stored blob)."""
        if self._blobs.has(digest):
            return self._blobs.get(digest)  # type: ignore[no-any-return]
        cached = self._validated.get(digest)
        if cached is not None:
            return cached[1]
        if digest == self._state.model_digest and self._model is not None:
            return vector_to_blob(self._model)
        return None

    def _blob(self, digest: bytes) -> bytes | None:
        if self._blobs.has(digest):
            return self._blobs.get(digest)
        held = self._unsolicited.get(digest)
        if held is None:
            return None
        self._drop_unsolicited(digest)
        self._blobs.put(held[2])
        return held[2]

    def _hold_unsolicited(self, sender: str, digest: bytes, blob: bytes) -> None:
        """Keep a blob nobody asked for, within the bounds of :data:`UNSOLICITED_PEER_BYTES_MIN`."""
        if digest in self._unsolicited:
            return
        size = len(blob)
        if size > self._unsolicited_peer_max:
            self._dropped["unsolicited blob over the bound"] += 1
            return
        self._unsolicited[digest] = (sender, self._round.plan.height, blob)
        self._unsolicited_by[sender] += size
        self._unsolicited_bytes += size
        while self._unsolicited_by[sender] > self._unsolicited_peer_max:  # the sender's oldest first
            self._drop_unsolicited(next(d for d, held in self._unsolicited.items() if held[0] == sender), evicted=True)
        total_max = UNSOLICITED_PEERS * self._unsolicited_peer_max
        while self._unsolicited_bytes > total_max or len(self._unsolicited) > UNSOLICITED_BLOBS_MAX:
            self._drop_unsolicited(next(iter(self._unsolicited)), evicted=True)
        self._unsolicited_peak = max(self._unsolicited_peak, self._unsolicited_bytes)

    def _drop_unsolicited(self, digest: bytes, *, evicted: bool = False) -> None:
        sender, _, blob = self._unsolicited.pop(digest)
        self._unsolicited_by[sender] -= len(blob)
        if not self._unsolicited_by[sender]:
            del self._unsolicited_by[sender]
        self._unsolicited_bytes -= len(blob)
        if evicted:
            self._dropped["unsolicited blob evicted"] += 1

    def _expire_unsolicited(self, height: int, *, catching_up: bool) -> None:
        """Round ``height`` ended: drop the unasked blobs that came before it began and were not used (kept while
        this node catches up: a pushed model may be for the height it catches up to)."""
        if self._unsolicited and not catching_up and not self._replica.behind:
            for d in [d for d, held in self._unsolicited.items() if held[1] < height]:
                self._drop_unsolicited(d)
                self._dropped["unsolicited blob expired"] += 1

    def _want_blob(self, digest: bytes, *, ask: str | None = None) -> None:
        """Want ``digest``: ask ``ask`` (or a fellow validator) for it now, then the retry timer asks others in
        turn. A blob already wanted is asked of ``ask`` again: a proposer that included it holds it, and under loss
        the retry rotation (every member in turn) may take thousands of ticks to reach a holder."""
        if self._blob(digest) is not None or (digest in self._want and (ask is None or ask == self._me)):
            return
        self._want.setdefault(digest, self._now)
        target = ask if ask is not None and ask != self._me else None
        peers = [target] if target else [p for p in self._round.plan.committee if p != self._me][:1]
        for p in peers:
            self._out.append(_want_message(p, (digest,)))

    def _ask_row_members(self, payload: Payload) -> None:
        """An archive asks each score row's member at once for the blobs of its row it still wants: its reference
        (which only that member holds) and the updates it scored (the retry timer asks others in turn later)."""
        asks: dict[str, list[bytes]] = {}
        for member, _, d in score_row_blobs(payload.attestations):
            if member != self._me and d in self._want:
                asks.setdefault(member, []).append(d)
        for member, ds in sorted(asks.items()):
            for i in range(0, len(ds), BLOBS_PER_MESSAGE_MAX):
                want = tuple(ds[i : i + BLOBS_PER_MESSAGE_MAX])
                self._out.append(_want_message(member, want))

    def _ask_wanted(self) -> None:
        """Retry missing blobs, asking peers in turn: first those likely to hold them (the signers of the last
        block's certificate validated its model; the committees), then every other member. A proposer that
        withheld the new model from the next committee, which then holds no copy, cannot stall the chain."""
        signers = () if self._last_cert is None else (s.signer for s in self._last_cert.signatures)
        likely = set(self._round.plan.committee) | set(self._state.committee) | set(signers)
        others = [p for p in sorted(likely) if p != self._me]
        others += [p for p in self._genesis.member_ids if p not in likely and p != self._me]
        if not others:
            return
        digests = tuple(sorted(self._want))[:BLOBS_PER_MESSAGE_MAX]
        target = others[(self._now // WANT_RETRY_TICKS + self._want_skew) % len(others)]
        self._out.append(_want_message(target, digests))
