"""A deterministic, synchronous cluster of replicas with a faulty network and Byzantine members.

etcd's ``rafttest`` network in the style of FoundationDB/TigerBeetle simulation: one seed drives every
choice (a SplitMix64 generator, no ``random`` module), so ``Cluster(seed=s, ...)`` replays bit for bit.
The harness plays the node's part around each :class:`~consensus.Replica`: it builds proposals on
``RequestProposal``, judges proposals deterministically (``RequestVerdict``), and executes effects.

Network faults (:class:`Faults`): seeded drop, duplicate, delay (whole ticks) and reorder, plus
``cut``/``isolate``/``partition``/``heal`` and ``crash``/``recover``; ``restart`` replaces a replica by a
new process built from its last decided state and the vote record it persisted (:meth:`Replica.durable`,
taken after every call into the replica and before that call's messages are sent, as a node fsyncs its
vote log before a vote leaves it). Byzantine behaviours
(:data:`BEHAVIOURS`) wrap an honest replica and rewrite what it sends:

* ``silent``: sends nothing (a crash that still listens);
* ``equivocate``: as primary, pre-prepares two valid blocks to two halves of the committee (and both
  to one member); always votes PREPARE and COMMIT for every block it sees (double votes); its view
  changes claim the latest pre-prepare it heard as prepared, with too few prepares (a forged proof);
* ``wrong_proposal``: as primary, proposes a block that re-execution refuses (a wrong aggregate);
* ``forge``: every signature it sends is corrupted, and it sends votes signed by a non-member key;
* ``replay``: honest, but keeps re-sending old messages (other heights and views) to random peers.

Invariants checked after every event (:meth:`Cluster.check_invariants`), over honest replicas:
agreement (one block hash per height), validity (a decided block passed its host's verdict at ``q - b``
honest committee members, ``b`` = Byzantine members of that committee), the certificate and the block
verify (``ledger.apply_block``; blocks decided in a later view than proposed with
:func:`consensus.verify_decided_block` until the ledger accepts them), heights contiguous, and every
evidence is valid (``ledger.check_evidence``) and names a Byzantine member (an ``invalid_proposal``
claim against an honest primary may come only from a ``disagree`` replica, or with ``late_inputs`` from one
whose inputs did not come within the view's timer), and no honest member ever
sends two different signed messages for one (kind, height, view), across restarts too (checked as they
are sent: the equivocation evidence of the replicas catches only the pairs that reach one of them within
the height). A violation raises :class:`InvariantViolation` whose message starts with the line that
replays it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ledger import (
    ATTEMPT_VIEWS,
    COMMITTEE_MODE,
    Block,
    ChainContext,
    ChainState,
    Evidence,
    Genesis,
    KeyPair,
    LedgerError,
    Member,
    ModelSpec,
    Payload,
    ProtocolParams,
    SignedMessage,
    Timeouts,
    check_evidence,
    genesis_state,
    hash_tagged,
    make_header,
    sha256,
)

from consensus._certify import verify_decided_block
from consensus._effects import Broadcast, Commit, Effect, ReportMisbehavior, RequestProposal, RequestVerdict, Send, SendBlocks
from consensus._replica import Pending
from consensus._messages import (
    KIND_COMMIT,
    KIND_NEW_VIEW,
    KIND_PRE_PREPARE,
    KIND_PREPARE,
    KIND_VIEW_CHANGE,
    PBFT_KINDS,
    Message,
    PrePrepare,
    PreparedProof,
    Proposal,
    Vote,
    decided_message,
    parse,
    pre_prepare_message,
    view_change_message,
    vote_message,
)
from consensus._errors import RemoteProtocolError
from consensus._replica import Replica, ReplicaConfig

__all__ = [
    "BEHAVIOURS",
    "Cluster",
    "Faults",
    "InvariantViolation",
    "SplitMix64",
    "agree",
]

BEHAVIOURS = ("silent", "equivocate", "wrong_proposal", "forge", "replay")
CHAIN_ID = "concilium-cluster"
TICK_MS = 100


class SplitMix64:
    """A tiny deterministic PRNG (Steele, Lea & Flood 2014); same seed, same stream, on any platform."""

    __slots__ = ("_s",)

    def __init__(self, seed: int) -> None:
        self._s = seed & 0xFFFFFFFFFFFFFFFF

    def next64(self) -> int:
        self._s = (self._s + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self._s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def random(self) -> float:
        """Uniform in [0, 1)."""
        return (self.next64() >> 11) / float(1 << 53)

    def randrange(self, n: int) -> int:
        """Uniform in [0, n) (n >= 1); the modulo bias is below 2**-40 for the n used here."""
        return self.next64() % n

    def chance(self, p: float) -> bool:
        return p > 0 and self.random() < p


@dataclass(frozen=True, slots=True, kw_only=True)
class Faults:
    """Seeded network faults, applied per message copy at send time."""

    drop: float = 0.0
    duplicate: float = 0.0
    delay_ticks_max: int = 0
    """Each copy is delivered 1 + U{0..delay_ticks_max} ticks after it is sent."""
    reorder: bool = True
    """Messages due at the same tick are delivered in a seeded random order (else in send order)."""
    drop_kind: tuple[tuple[str, float], ...] = ()
    """Extra loss for some kinds, e.g. ``(("commit", 0.6),)``: prepared replicas without commits change
    view with a prepared certificate, the path a wrong re-proposal rule breaks."""

    def __post_init__(self) -> None:
        if not (0 <= self.drop < 1 and 0 <= self.duplicate < 1 and self.delay_ticks_max >= 0):
            raise ValueError("drop and duplicate must be in [0, 1), delay_ticks_max >= 0")
        if not all(0 <= p < 1 for _, p in self.drop_kind):
            raise ValueError("drop_kind rates must be in [0, 1)")


class InvariantViolation(AssertionError):
    """A safety invariant broke; the message starts with ``replay: Cluster(...)``."""


@dataclass(slots=True)
class _InFlight:
    deliver_at: int
    seq: int
    src: str
    dst: str
    data: bytes


@dataclass(slots=True)
class _Byzantine:
    behaviour: str
    voted: set[tuple[int, int, bytes]] = field(default_factory=set)
    history: list[bytes] = field(default_factory=list)
    heard: dict[int, tuple[PrePrepare, list[SignedMessage]]] = field(default_factory=dict)  # height -> latest


def default_replica_config() -> ReplicaConfig:
    """Short timeouts for simulations: a few ticks of latency per message."""
    return ReplicaConfig(
        timeout_ticks_start=0,
        timeout_ticks_propose=10,
        timeout_ticks_prepare=10,
        timeout_ticks_commit=10,
        timeout_ticks_view_change=15,
        timeout_ticks_sync=20,
        timeout_ticks_retransmit=3,
        backoff_exponent_max=3,
    )


def _cluster_genesis(keys: Sequence[KeyPair], *, size: int, quorum: str, redraw_ticks: int | None) -> Genesis:
    """The genesis of a cluster: its members' keys, a committee of ``size``, the default timeouts."""
    return Genesis(
        chain_id=CHAIN_ID,
        genesis_time_ms=0,
        members=tuple(Member(peer_id=k.peer_id, public_key=k.public_key) for k in keys),
        protocol=ProtocolParams(
            mode=COMMITTEE_MODE, algorithm="cluster", committee_size=size, quorum=quorum, timeouts=Timeouts(tick_ms=TICK_MS),
            params={} if redraw_ticks is None else {"redraw_ticks": redraw_ticks},
        ),
        model=ModelSpec(name="cluster", digest=sha256(b"cluster-model-0")),
    )


class Cluster:
    """``members`` replicas (committee of ``size``), a seeded faulty network and Byzantine members.

    Parameters
    ----------
    size:
        Committee size ``C``; ``members`` defaults to ``C`` (every member in every committee).
    seed:
        Drives the network's faults and the Byzantine choices; the same arguments replay exactly.
    byzantine:
        ``{index: behaviour}``, index into the sorted peer ids (:attr:`peers`).
    disagree:
        Indices of honest members whose host refuses every proposal (a replica that cannot
        re-execute, e.g. missing data): they are not Byzantine, they only never vote.
    rotate:
        Each block elects the next committee by a hash of the previous block, keeping at most ``f``
        Byzantine members in it (exercises catch-up and committee changes); else the committee is fixed.
    epoch:
        With ``rotate``: elect a new committee only at the end of each epoch of this many heights (the block at
        height ``kE``), as coordinator mode's ``committee_epoch`` does; 1 (the default): at every height.
    auto_propose:
        Answer ``RequestProposal`` at once (the default); else keep the requests in
        :attr:`proposal_requests` until :meth:`propose_pending`.
    check:
        Check the invariants after every event (the default).
    redraw_ticks:
        The genesis' ``protocol.params.redraw_ticks`` (``ledger.ATTEMPT_VIEWS``): a height not decided within that
        many ticks moves to a committee re-drawn from every member; a block of such an attempt names that committee
        as the next one (unless ``rotate``). 0: never; None (the default): the genesis default (7,500 ticks with
        the default timeouts: no sweep runs that long).
    late_inputs:
        Ticks after an honest member first judges a proposal before its host holds the proposal's inputs (a node's
        update blobs on their way from the trainers, which a pre-prepare may overtake): until then its verdict is
        :class:`consensus.Pending`, and after every tick the cluster judges again a proposal a replica still waits
        for, as a node does when a blob arrives. 0 (the default): inputs are always at hand.
    """

    def __init__(
        self,
        *,
        size: int = 4,
        members: int | None = None,
        seed: int = 0,
        quorum: str = "bft",
        faults: Faults = Faults(),
        byzantine: Mapping[int, str] | None = None,
        config: ReplicaConfig | None = None,
        disagree: Sequence[int] = (),
        rotate: bool = False,
        epoch: int = 1,
        auto_propose: bool = True,
        check: bool = True,
        redraw_ticks: int | None = None,
        late_inputs: int = 0,
    ) -> None:
        byzantine = dict(byzantine or {})
        n = size if members is None else members
        self.args = {
            "size": size,
            "members": n,
            "seed": seed,
            "quorum": quorum,
            "faults": faults,
            "byzantine": byzantine,
            "disagree": tuple(disagree),
            "rotate": rotate,
            "epoch": epoch,
            "redraw_ticks": redraw_ticks,
            "late_inputs": late_inputs,
        }
        self.seed = seed
        self.rng = SplitMix64(seed)
        keys = sorted((KeyPair.derive(f"cluster-member-{i}") for i in range(n)), key=lambda k: k.peer_id)
        self.keys = {k.peer_id: k for k in keys}
        self.peers = tuple(k.peer_id for k in keys)
        for i, b in byzantine.items():
            if b not in BEHAVIOURS or not 0 <= i < n:
                raise ValueError(f"bad Byzantine member {i}: {b!r}")
        self.byzantine = {self.peers[i]: _Byzantine(b) for i, b in sorted(byzantine.items())}
        self.honest = tuple(p for p in self.peers if p not in self.byzantine)
        self.disagree = frozenset(self.peers[i] for i in disagree)
        if late_inputs < 0:
            raise ValueError(f"late_inputs must be >= 0, got {late_inputs}")
        self.late_inputs = late_inputs
        self._judged: dict[tuple[str, int, bytes], int] = {}  # (member, height, block hash) -> tick first judged
        self._pending: dict[str, bytes] = {}  # member -> the block hash its host last answered Pending
        self.genesis = _cluster_genesis(keys, size=size, quorum=quorum, redraw_ticks=redraw_ticks)
        self.ctx = ChainContext(self.genesis)
        self.rotate = rotate
        if epoch < 1:
            raise ValueError(f"epoch must be >= 1, got {epoch}")
        self.epoch = epoch
        self.faults = faults
        self.check = check
        self.auto_propose = auto_propose
        self.proposal_requests: list[tuple[str, int, int]] = []
        self.config = config if config is not None else default_replica_config()
        self._init_network()
        self._init_invariants()
        self.replicas: dict[str, Replica] = {}
        for p in self.peers:
            self.replicas[p] = self._new_replica(p, genesis_state(self.ctx), None)
        for p in self.peers:
            self._apply(p, self.replicas[p].start())

    def _init_network(self) -> None:
        """The network's state (time, crashes, cuts, messages in flight) and its accounting."""
        self.now = 0
        self.events = 0
        self.crashed: set[str] = set()
        self.cut_links: set[frozenset[str]] = set()
        self.queue: list[_InFlight] = []
        self._seq = 0
        self._decoded: dict[bytes, Message] = {}
        self.sent: Counter[str] = Counter()
        self.sent_bytes: Counter[str] = Counter()
        self.delivered = 0
        self.lost = 0

    def _init_invariants(self) -> None:
        """What the invariant checks remember (:meth:`check_invariants`)."""
        self.chains: dict[str, list[Block]] = {p: [] for p in self.peers}
        self._checked: dict[str, int] = {p: 0 for p in self.peers}
        self._verified: dict[tuple[bytes, bytes], ChainState] = {}  # (prev hash, block hash + certificate)
        self.states: dict[str, ChainState] = {p: genesis_state(self.ctx) for p in self.peers}
        self.applied: dict[str, ChainState] = dict(self.states)
        """Each member's host state: after the last ``Commit`` it applied (what its verdicts judge against)."""
        self.decided: dict[int, bytes] = {}
        self.validations: dict[bytes, set[str]] = {}
        self.evidence: list[tuple[str, Evidence]] = []
        self._evidence_checked = 0
        self.refusals = 0
        self.later_view_commits = 0
        self.signed: dict[tuple[str, str, int, int], bytes] = {}
        """(signer, kind, height, view) -> signature of every pBFT message an honest member sent (or embedded),
        for the heights each member has not decided yet."""
        self._signed_cap = 16384
        self.persisted: dict[str, bytes] = {}
        """Each member's last :meth:`Replica.durable` record: its vote log on disk."""
        self._persisted_version: dict[str, int] = {}
        self.restarts = 0

    def _new_replica(self, peer: str, state: ChainState, restore: bytes | None) -> Replica:
        self.applied[peer] = state
        self._pending.pop(peer, None)
        return Replica(ctx=self.ctx, key=self.keys[peer], state=state, config=self.config, restore=restore)

    # --- description ----------------------------------------------------------------------------

    def replay_line(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"replay: Cluster({args}) then the same actions; failed after {self.events} events at tick {self.now}"

    def _fail(self, what: str) -> None:
        raise InvariantViolation(f"{self.replay_line()}\n{what}")

    # --- the node's part: proposals and validation -------------------------------------------------

    def expected_model(self, prev_hash: bytes, height: int) -> bytes:
        return hash_tagged(b"cluster-model", prev_hash + height.to_bytes(8, "big"))

    def expected_committee(self, state: ChainState, view: int = 0) -> tuple[str, ...]:
        """Next committee after ``state``'s successor decided in ``view``: fixed (the re-drawn one, decided in a
        later committee attempt), or re-sampled with at most ``f`` Byzantine."""
        if not self.rotate and view >= ATTEMPT_VIEWS:
            return self.ctx.view_committee(state, state.height + 1, view)
        if not self.rotate or (state.height + 1) % self.epoch:
            return state.committee
        c = self.genesis.protocol.committee_size
        f = (c - 1) // 3
        seed = state.head_hash + (state.height + 1).to_bytes(8, "big")
        rank = lambda ps: sorted(ps, key=lambda p: (hash_tagged(b"cluster-rotate", seed + p.encode()), p))  # noqa: E731
        byz = rank(self.byzantine)[: min(f, len(self.byzantine))]
        honest = rank(self.honest)[: c - len(byz)]
        return tuple(sorted(byz + honest))

    def honest_payload(self, state: ChainState, view: int, proposer: str) -> Payload:
        return Payload(
            updates=(),
            model_digest=self.expected_model(state.head_hash, state.height + 1),
            next_committee=self.expected_committee(state, view),
            record={"proposer": proposer, "view": view},
        )

    def _verdict(self, peer: str, p: Proposal) -> str | Pending | None:
        """``peer``'s host judges ``p`` (``RequestVerdict``) against the state it applied: a Byzantine host agrees to
        anything."""
        if peer not in self.honest:
            return None
        st = self.applied[peer]
        if p.header.height != st.height + 1:  # a host judges with its own state: it must have applied the block before
            self._fail(f"{peer} was asked to judge height {p.header.height} after it applied block {st.height}")
        if self.late_inputs:
            first = self._judged.setdefault((peer, p.header.height, p.block_hash), self.now)
            if self.now < first + self.late_inputs:
                self._pending[peer] = p.block_hash
                return Pending("update blobs on their way")
        reason = None
        if peer in self.disagree:
            reason = "cannot re-execute (update blobs missing)"
        elif p.payload.model_digest != self.expected_model(st.head_hash, st.height + 1):
            reason = "aggregate differs from re-execution (model digest)"
        elif p.payload.next_committee != self.expected_committee(st, p.header.view):
            reason = "next committee differs from the election"
        if reason is None:
            self.validations.setdefault(p.block_hash, set()).add(peer)
        return reason

    def _time_ms(self, state: ChainState) -> int:
        return max(state.time_ms, self.now * TICK_MS)

    # --- driving ----------------------------------------------------------------------------------

    def step(self) -> None:
        """One event: deliver one due message (seeded choice among those due), or else one tick."""
        due = [i for i, m in enumerate(self.queue) if m.deliver_at <= self.now]
        if due:
            i = due[self.rng.randrange(len(due))] if self.faults.reorder else min(due, key=lambda j: self.queue[j].seq)
            self._deliver(self.queue.pop(i))
        else:
            self.tick()
            return
        self.events += 1
        if self.check:
            self.check_invariants()

    def tick(self) -> None:
        """Advance logical time by one tick on every running replica."""
        self.now += 1
        for p in self.peers:
            if p not in self.crashed:
                self._apply(p, self.replicas[p].tick())
                waiting = self.replicas[p].waiting
                if waiting is not None and self._pending.get(p) == waiting.block_hash:  # (late_inputs) judge again
                    self._apply(p, self.replicas[p].verdict(waiting.block_hash, self._verdict(p, waiting)))
                b = self.byzantine.get(p)
                if b is not None and b.behaviour == "replay" and b.history and self.rng.chance(0.3):
                    data = b.history[self.rng.randrange(len(b.history))]
                    self._enqueue(p, self.peers[self.rng.randrange(len(self.peers))], data)
        self.events += 1
        if self.check:
            self.check_invariants()

    def run(self, ticks: int) -> None:
        """Process events until ``ticks`` more ticks have passed."""
        end = self.now + ticks
        while self.now < end:
            self.step()

    def run_until(self, predicate: Callable[[], bool], max_ticks: int) -> bool:
        end = self.now + max_ticks
        while not predicate():
            if self.now >= end:
                return False
            self.step()
        return True

    def height(self, peer: str) -> int:
        """Blocks decided by ``peer``."""
        return len(self.chains[peer])

    def live_honest(self) -> tuple[str, ...]:
        return tuple(p for p in self.honest if p not in self.crashed)

    def min_height(self) -> int:
        live = self.live_honest()
        return min(self.height(p) for p in live) if live else 0

    # --- faults -------------------------------------------------------------------------------------

    def cut(self, a: str, b: str) -> None:
        self.cut_links.add(frozenset((a, b)))

    def isolate(self, peer: str) -> None:
        for p in self.peers:
            if p != peer:
                self.cut(peer, p)

    def partition(self, *groups: Sequence[str]) -> None:
        """Cut every link between different groups (peers in no group are cut from everyone)."""
        where = {p: i for i, g in enumerate(groups) for p in g}
        for a in self.peers:
            for b in self.peers:
                if a < b and where.get(a, -1 - self.peers.index(a)) != where.get(b, -1 - self.peers.index(b)):
                    self.cut(a, b)

    def heal(self) -> None:
        """Restore every link and stop random drops (messages are eventually delivered from now on)."""
        self.cut_links.clear()
        self.faults = dataclasses.replace(self.faults, drop=0.0, drop_kind=())

    def crash(self, peer: str) -> None:
        self.crashed.add(peer)

    def recover(self, peer: str) -> None:
        self.crashed.discard(peer)

    def restart(self, peer: str, *, forget: bool = False) -> None:
        """``peer``'s process stops and starts again (it runs from now on, crashed before or not).

        The new :class:`Replica` starts from the last decided state (the block store) and the record it
        last persisted (the vote log, :attr:`persisted`); ``forget=True`` starts it without the record,
        as a node without a vote log would, which may sign again differently what it signed before.
        Messages still in flight to it reach the new process.
        """
        state = self.replicas[peer].chain_state
        record = None if forget else self.persisted.get(peer)
        self.replicas[peer] = self._new_replica(peer, state, record)
        self._persisted_version.pop(peer, None)
        self.crashed.discard(peer)
        self.restarts += 1
        self._apply(peer, self.replicas[peer].start())

    def drop_in_flight(self, index: int) -> None:
        if self.queue:
            self.queue.pop(index % len(self.queue))
            self.lost += 1

    def duplicate_in_flight(self, index: int) -> None:
        if self.queue:
            m = self.queue[index % len(self.queue)]
            self._seq += 1
            self.queue.append(_InFlight(m.deliver_at, self._seq, m.src, m.dst, m.data))

    def in_flight(self) -> list[tuple[str, str, str]]:
        """(src, dst, kind) of every message in flight, in queue order."""
        return [(m.src, m.dst, self._decode(m.data).kind) for m in self.queue]

    def drop_where(self, predicate: Callable[[str, str, Message], bool]) -> int:
        """Drop the in-flight messages for which ``predicate(src, dst, message)`` holds; returns how many."""
        keep = [m for m in self.queue if not predicate(m.src, m.dst, self._decode(m.data))]
        dropped = len(self.queue) - len(keep)
        self.queue = keep
        self.lost += dropped
        return dropped

    def deliver_all(self, max_events: int = 100_000) -> int:
        """Deliver every in-flight message now, in send order, and what they cause, until none is left
        (no tick passes). Returns the number of deliveries."""
        n = 0
        while self.queue and n < max_events:
            i = min(range(len(self.queue)), key=lambda j: self.queue[j].seq)
            self.deliver_in_flight(i)
            n += 1
        return n

    def liveness_bound_ticks(self) -> int:
        """Ticks within which every height decides once messages are delivered within
        ``1 + delay_ticks_max`` ticks and at most ``f`` committee members are faulty.

        Each of up to ``f`` faulty primaries in a row costs one view: its phase timers plus the view
        change, at most at the largest backoff; one more view decides; the first height after a fault
        may start that far behind too.
        """
        cfg = self.config
        c = self.genesis.protocol.committee_size
        f = c - self.ctx.quorum(c)
        per_view = (
            cfg.timeout_ticks_start
            + cfg.timeout_ticks_propose
            + cfg.timeout_ticks_prepare
            + cfg.timeout_ticks_commit
            + cfg.timeout_ticks_view_change
        ) << cfg.backoff_exponent_max
        return (f + 2) * per_view + cfg.timeout_ticks_sync * (1 + self.faults.delay_ticks_max)

    def deliver_in_flight(self, index: int) -> None:
        """Deliver one in-flight message now, whatever its delay (out-of-order delivery)."""
        if self.queue:
            self._deliver(self.queue.pop(index % len(self.queue)))
            self.events += 1
            if self.check:
                self.check_invariants()

    # --- effects and the network ------------------------------------------------------------------

    def _apply(self, peer: str, effects: list[Effect]) -> None:
        work = [(peer, effects)]
        while work:
            p, fx = work.pop(0)
            self._persist(p)  # each batch comes straight from a call into p: its votes go to disk first
            for e in fx:
                match e:
                    case Commit(block=block, state=state):
                        self._on_commit(p, block)
                        self.applied[p] = state
                    case RequestVerdict(block_hash=bh, proposal=proposal):  # judged here, in the batch's order
                        work.append((p, self.replicas[p].verdict(bh, self._verdict(p, proposal))))
                    case Send(to=to, message=m):
                        self._send(p, (to,), m)
                    case Broadcast(to=to, message=m):
                        self._send(p, to, m)
                    case SendBlocks(to=to, start=start, stop=stop):  # the node's block store
                        for block in self.chains[p][start - 1 : stop - 1]:
                            self._send(p, (to,), decided_message(block))
                    case RequestProposal(height=h, view=v):
                        more = self._on_request(p, h, v)
                        if more:
                            work.append((p, more))
                    case ReportMisbehavior(evidence=ev):
                        if p in self.honest:
                            self.evidence.append((p, ev))
                            if ev.kind == "invalid_proposal":
                                self.refusals += 1

    def propose_pending(self) -> None:
        """Answer the ``RequestProposal`` effects kept while ``auto_propose`` is off."""
        requests, self.proposal_requests = self.proposal_requests, []
        for peer, h, v in requests:
            if peer not in self.crashed:
                self._apply(peer, self._make_proposal(peer, h, v))

    def _on_request(self, peer: str, height: int, view: int) -> list[Effect]:
        if not self.auto_propose:
            self.proposal_requests.append((peer, height, view))
            return []
        return self._make_proposal(peer, height, view)

    def _make_proposal(self, peer: str, height: int, view: int) -> list[Effect]:
        r = self.replicas[peer]
        st = self.applied[peer]  # (the host builds its payload from the state it applied)
        b = self.byzantine.get(peer)
        if b is not None and b.behaviour in ("equivocate", "wrong_proposal"):
            self._byzantine_proposal(peer, b, st, view)
            return []
        if (b is not None and b.behaviour == "silent") or peer in self.disagree:
            return []  # a replica that cannot re-execute cannot build a proposal either
        fx = r.propose(self.honest_payload(st, view, peer), height=height, view=view, time_ms=self._time_ms(st))
        for e in fx:  # the host built this payload from its state: it agrees with it (no RequestVerdict for its own)
            if isinstance(e, Broadcast) and e.message.kind == KIND_PRE_PREPARE and peer in self.honest:
                own = parse(e.message)
                assert isinstance(own, PrePrepare)
                self.validations.setdefault(own.block_hash, set()).add(peer)
        return fx

    def _byzantine_proposal(self, peer: str, b: _Byzantine, st: ChainState, view: int) -> None:
        key, h = self.keys[peer], st.height + 1
        committee = tuple(sorted(st.committee))
        others = [p for p in committee if p != peer]

        def signed(payload: Payload, time_ms: int) -> tuple[Message, bytes]:
            hd = make_header(chain_id=CHAIN_ID, height=h, prev_hash=st.head_hash, view=view, proposer=peer, time_ms=time_ms, payload=payload)
            return pre_prepare_message(key, CHAIN_ID, h, view, hd, payload), hd.hash()

        t = self._time_ms(st)
        if b.behaviour == "wrong_proposal":
            bad = Payload(
                updates=(),
                model_digest=sha256(b"poisoned aggregate"),
                next_committee=self.expected_committee(st),
                record={"proposer": peer, "view": view},
            )
            m, _ = signed(bad, t)
            self._send(peer, tuple(others), m)
            return
        good = self.honest_payload(st, view, peer)
        (ma, da), (mb, db) = signed(good, t), signed(good, t + 1)
        own = parse(ma)
        assert isinstance(own, PrePrepare)
        b.heard[h] = (own, [])
        a_side = [p for p in others if self.rng.chance(0.5)]
        b_side = [p for p in others if p not in a_side]
        self._send(peer, tuple(a_side), ma)
        self._send(peer, tuple(b_side), mb)
        if others:
            self._send(peer, (others[self.rng.randrange(len(others))],), mb if a_side else ma)
        for d, side in ((da, a_side), (db, b_side)):
            b.voted.add((h, view, d))
            self._send(peer, tuple(side), vote_message(key, CHAIN_ID, KIND_COMMIT, h, view, d))

    def _persist(self, peer: str) -> None:
        """The node's vote log: save the replica's durable record when it changed."""
        r = self.replicas[peer]
        v = r.durable_version
        if self._persisted_version.get(peer) != v:
            self._persisted_version[peer] = v
            self.persisted[peer] = r.durable()

    def _check_signed(self, src: str, message: Message) -> None:
        """No honest member signs two different messages for one (kind, height, view), restarts included.

        Ed25519 signatures are deterministic, so the same message has the same signature."""
        s = message.signed
        if s is None or s.kind not in PBFT_KINDS or s.signer != src:
            return
        signed = [(s.signer, s.kind, s.height, s.view, s.signature)]
        if s.kind == KIND_NEW_VIEW and s.body.get("pre_prepare") is not None:  # the re-proposal inside
            pp = s.body["pre_prepare"]
            signed.append((pp["signer"], pp["kind"], pp["height"], pp["view"], pp["signature"]))
        if len(self.signed) >= self._signed_cap:  # a replica signs only at its current height, never below
            self.signed = {k: x for k, x in self.signed.items() if k[2] > self.replicas[k[0]].chain_state.height}
            self._signed_cap = max(16384, 2 * len(self.signed))
        for signer, kind, h, v, sig in signed:
            first = self.signed.setdefault((signer, kind, h, v), sig)
            if first != sig:
                self._fail(
                    f"equivocation: honest {signer} sent two different {kind} messages for height {h} view {v} "
                    f"({self.restarts} restarts so far)"
                )

    def _send(self, src: str, to: Sequence[str], message: Message) -> None:
        if self.check and src not in self.byzantine:
            self._check_signed(src, message)
        b = self.byzantine.get(src)
        if b is not None:
            if b.behaviour == "silent":
                return
            if b.behaviour == "forge":
                message = self._forge(src, message)
            if b.behaviour == "equivocate" and message.kind == KIND_VIEW_CHANGE:
                message = self._lie_in_view_change(src, b, message)
        data = message.encode()
        kind = message.kind
        drop = self.faults.drop
        for k, p in self.faults.drop_kind:
            if k == kind:
                drop = 1 - (1 - drop) * (1 - p)
        for dst in to:
            if dst == src:
                continue
            self.sent[kind] += 1
            self.sent_bytes[kind] += len(data)
            if self.rng.chance(drop):
                self.lost += 1
                continue
            self._enqueue(src, dst, data)
            if self.rng.chance(self.faults.duplicate):
                self._enqueue(src, dst, data)

    def _lie_in_view_change(self, src: str, b: _Byzantine, message: Message) -> Message:
        """Claim the latest pre-prepare heard at this height as prepared, with the prepares heard so far
        (fewer than a quorum, or from a view the pre-prepare does not justify): honest replicas must
        reject the proof."""
        s = message.signed
        assert s is not None
        heard = b.heard.get(s.height)
        if heard is None or heard[0].signed.view >= s.view or not self.rng.chance(0.5):
            return message
        pp, prepares = heard
        uniq = {p.signer: p for p in prepares if p.signer not in (src, pp.signed.signer)}
        if src != pp.signed.signer:
            own = vote_message(self.keys[src], CHAIN_ID, KIND_PREPARE, s.height, pp.signed.view, pp.block_hash).signed
            assert own is not None
            uniq[src] = own
        proof = PreparedProof(dataclasses.replace(pp, payload=None), tuple(uniq[p] for p in sorted(uniq))[:1])
        return view_change_message(self.keys[src], CHAIN_ID, s.height, s.view, proof, pp.payload)

    def _forge(self, src: str, message: Message) -> Message:
        """Corrupt the signature; now and then re-sign a vote with a non-member key instead."""
        s = message.signed
        if s is None:
            return message
        if s.kind in (KIND_PREPARE, KIND_COMMIT) and self.rng.chance(0.3):
            outsider = KeyPair.derive("cluster-outsider")
            return vote_message(outsider, CHAIN_ID, s.kind, s.height, s.view, s.body["block_hash"])
        sig = bytes(x ^ 0x5A for x in s.signature)
        return dataclasses.replace(message, signed=dataclasses.replace(s, signature=sig))

    def _enqueue(self, src: str, dst: str, data: bytes) -> None:
        self._seq += 1
        delay = 1 + (self.rng.randrange(self.faults.delay_ticks_max + 1) if self.faults.delay_ticks_max else 0)
        self.queue.append(_InFlight(self.now + delay, self._seq, src, dst, data))

    def _decode(self, data: bytes) -> Message:
        m = self._decoded.get(data)
        if m is None:
            if len(self._decoded) >= 4096:
                self._decoded.clear()
            m = self._decoded[data] = Message.decode(data)
        return m

    def _deliver(self, m: _InFlight) -> None:
        if m.dst in self.crashed or frozenset((m.src, m.dst)) in self.cut_links:
            self.lost += 1
            return
        self.delivered += 1
        message = self._decode(m.data)
        b = self.byzantine.get(m.dst)
        if b is not None:
            self._byzantine_hears(m.dst, b, message, m.data)
        self._apply(m.dst, self.replicas[m.dst].step(message, sender=m.src))

    def _byzantine_hears(self, peer: str, b: _Byzantine, message: Message, data: bytes) -> None:
        if b.behaviour == "replay":
            if len(b.history) >= 256:
                b.history.pop(self.rng.randrange(len(b.history)))
            b.history.append(data)
        if b.behaviour != "equivocate":
            return
        try:
            parsed = parse(message)
        except RemoteProtocolError:
            return
        if isinstance(parsed, PrePrepare) and parsed.payload is not None:
            s = parsed.signed
            last = b.heard.get(s.height)
            if last is None or last[0].signed.view < s.view:
                b.heard = {h: x for h, x in b.heard.items() if h >= s.height - 1}
                b.heard[s.height] = (parsed, [])
        if isinstance(parsed, Vote) and parsed.signed.kind == KIND_PREPARE:
            last = b.heard.get(parsed.signed.height)
            if last is not None and last[0].block_hash == parsed.block_hash and last[0].signed.view == parsed.signed.view:
                last[1].append(parsed.signed)
        if isinstance(parsed, PrePrepare) or (isinstance(parsed, Vote) and parsed.signed.kind == KIND_PREPARE):
            s = parsed.signed
            key = (s.height, s.view, parsed.block_hash)
            if key in b.voted:
                return
            b.voted.add(key)
            committee = tuple(p for p in self.replicas[peer].status().committee if p != peer)
            k = self.keys[peer]
            for kind in (KIND_PREPARE, KIND_COMMIT):  # vote for everything: double votes
                self._send(peer, committee, vote_message(k, CHAIN_ID, kind, s.height, s.view, parsed.block_hash))

    # --- invariants -----------------------------------------------------------------------------------

    def _on_commit(self, peer: str, block: Block) -> None:
        chain = self.chains[peer]
        if block.height != len(chain) + 1:
            self._fail(f"{peer} decided height {block.height} after {len(chain)} (heights not contiguous)")
        chain.append(block)
        if self._judged:
            self._judged = {k: t for k, t in self._judged.items() if k[0] != peer or k[1] > block.height}

    def check_invariants(self) -> None:
        """Agreement, validity, certificates, contiguity and evidence, over everything new since last time."""
        for p in self.honest:
            chain = self.chains[p]
            for i in range(self._checked[p], len(chain)):
                self._check_block(p, chain[i])
            self._checked[p] = len(chain)
        for p, ev in self.evidence[self._evidence_checked :]:
            # Equivocation is proof; an invalid-proposal report is a claim re-execution settles, and
            # only a replica that cannot re-execute (``disagree``) may make it against an honest primary.
            if ev.offender not in self.byzantine and not (ev.kind == "invalid_proposal"
                                                          and (p in self.disagree or self.late_inputs)):
                self._fail(f"{p} reported {ev.kind} evidence against honest {ev.offender}: {ev.reason}")
            try:
                check_evidence(self.ctx, ev.height, ev)
            except LedgerError as e:
                self._fail(f"{p} reported evidence the ledger rejects: {e}")
        self._evidence_checked = len(self.evidence)

    def _check_block(self, peer: str, block: Block) -> None:
        before = self.states[peer]
        bh = block.header.hash()
        h = block.height
        first = self.decided.setdefault(h, bh)
        if first != bh:
            self._fail(f"agreement: {peer} decided {bh.hex()[:16]} at height {h}, another honest replica {first.hex()[:16]}")
        key = (before.head_hash, bh + block.certificate.encode())
        after = self._verified.get(key)
        if after is None:
            try:
                after = verify_decided_block(self.ctx, before, block)
            except LedgerError as e:
                self._fail(f"{peer}'s block {h} does not verify: {e}")
            assert after is not None
            self._verified[key] = after
            if block.certificate.view != block.header.view:
                self.later_view_commits += 1
            # validated by the committee it was proposed in (a block carried into a later committee attempt by a view
            # change was validated there; the later committee only certified it)
            committee = set(self.ctx.view_committee(before, h, block.header.view))
            need = self.ctx.quorum(len(committee)) - len(committee & set(self.byzantine))
            ok = self.validations.get(bh, set()) & committee
            if len(ok) < need:
                self._fail(f"validity: block {h} passed validate at {len(ok)} honest committee members, need {need}")
        self.states[peer] = after

    # --- measurements -----------------------------------------------------------------------------------

    def pbft_messages(self) -> tuple[int, int]:
        """(messages, bytes) of pre-prepare/prepare/commit/view-change/new-view sent so far."""
        kinds = ("pre_prepare", "prepare", "commit", "view_change", "new_view")
        return sum(self.sent[k] for k in kinds), sum(self.sent_bytes[k] for k in kinds)


def agree(replica: Replica, effects: list[Effect], judge: Callable[[Proposal], str | Pending | None] | None = None) -> list[Effect]:
    """``effects`` with each ``RequestVerdict`` answered in place, as a host that judges at once would: by
    ``judge(proposal)`` (default: agree with everything). The answer's effects follow the request, answered too."""
    out: list[Effect] = []
    for e in effects:
        out.append(e)
        if isinstance(e, RequestVerdict):
            verdict = None if judge is None else judge(e.proposal)
            out += agree(replica, replica.verdict(e.block_hash, verdict), judge)
    return out
