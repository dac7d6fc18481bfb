"""The deterministic discrete-event simulator: N real node cores, virtual time, an in-memory network.

One event queue ordered by ``(virtual time in µs, sequence number)``; three event kinds: a global
tick (every node's ``tick()`` in sorted peer order), a message delivery, and a finished training job.
Training runs for real (PyTorch, CPU by default) when a node asks for it; its *virtual* duration comes
from the member's compute profile. Every random draw comes from a :class:`sim.RngTree` child, so the
same scenario and seed give the same trace and the same ledger head hash, bit for bit. No trio, no
libp2p, no wall clock in the protocol path (wall time is only measured for the report).

Nodes exchange the exact bytes they would send over libp2p (strictly decoded on receipt), sign
everything, and run pBFT; the results ledger is the chain the honest nodes committed, stored in SQLite
with its blobs and verifiable with ``concilium ledger verify``.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import heapq
import math
import multiprocessing
import signal
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from consensus import LocalProtocolError, score_row_blobs
from ledger import (
    ATTEMPT_VIEWS,
    Block,
    BlockHeader,
    Caches,
    ChainContext,
    Genesis,
    Payload,
    genesis_committee,
    genesis_state,
    primary,
    sha256,
)
from ledger.store import MemoryBlobStore
from learning import (
    DROPPED,
    AvailabilityContext,
    Dataset,
    Strategy,
    parse_availability,
    parse_update_attack,
    vector_to_blob,
)
from node import Terminated
from node.adversary import (
    SKIPPED_KINDS, Fault, FaultPlan, corrupt_proposal, equivocate, grind_for_next_primary, lying_distances, omitted_rows,
)
from node.core import (
    PURPOSE_UPDATE,
    Behavior,
    Decided,
    EnvelopeDecoder,
    Misbehavior,
    NodeCore,
    OutsiderPolicy,
    RoundRules,
    Train,
    TrainJob,
    TrainResult,
    Transmit,
)
from sim._fuzz import ByzantineFuzzer, FuzzSpec
from learning import RngTree
from sim._jobs import JobHost, _JobSpec, limit_threads
from node.world import OMNISCIENT_ATTACKS, attack_update
from sim._world import byzantine_indices
from sim._workers import TrainingPool, default_workers
from sim._writer import LedgerWriter
from sim._scenario import FaultConfig, Scenario

__all__ = ["LivenessError", "RoundMetrics", "SimResult", "Simulation"]

_LATENCY_ROWS_KEPT = 256
"""Senders whose row of link latencies stays drawn (see ``Simulation._latency_ms``)."""
_GC_YOUNG_THRESHOLD = 100_000
_IDLE_FOREVER = 1 << 61
_DRAW_KEY = struct.Struct("<QIIQI")  # network seed, link (a, b), send time (µs), index on the link at that time
_DRAW_WORDS = struct.Struct("<8I")  # a message's draws: drop, duplicate, (jitter, reorder) per copy, two unused
_DRAW_UNIT = 2.0**-32
_NO_DRAWS = (0,) * 8  # a network without random faults or jitter draws nothing
"""Idle ticks of a replica with no timer armed (``consensus.Replica.idle_ticks``: about 2^62)."""


@contextlib.contextmanager
def _rare_collections() -> Iterator[None]:
    """Python's cyclic collector with a first-generation threshold of ``_GC_YOUNG_THRESHOLD`` allocations (default
    700) while the nodes are built and while the event loop runs. Every member's node is a few hundred long-lived objects, and each round
    replaces some of them: with the default thresholds the collector rescanned the whole heap several times per
    round (44% of the CPU of a 10,000-member round). The loop leaves no cyclic garbage (a collection after a
    4-round 10,000-member run finds none); reference counting frees everything it drops."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], _GC_YOUNG_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _since(now: Mapping[str, tuple[int, int]], mark: Mapping[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Kind → (messages, bytes) between two snapshots of running totals."""
    return {k: (m - mark.get(k, (0, 0))[0], b - mark.get(k, (0, 0))[1]) for k, (m, b) in now.items()}


class LivenessError(RuntimeError):
    """The simulated network stopped committing blocks (the message names the seed to replay)."""


@dataclass(frozen=True, slots=True)
class RoundMetrics:
    """One committed round, as written to ``metrics.csv``."""

    fl_round: int
    view: int
    accuracy: float
    loss: float
    accepted: int
    """Updates of this round's trainers in the block."""
    rejected: int
    """This round's trainers whose update is not in the block (late, unavailable, filtered, refused)."""
    stale_accepted: int
    """Updates of earlier rounds in the block (semi-synchronous strategies)."""
    unavailable: int
    """Trainers the availability model silenced this round."""
    delayed: int
    """Trainers the availability model delayed this round."""
    diverged: int
    """Local jobs of this round whose training produced non-finite values (nothing was sent)."""
    byzantine_accepted: int
    byzantine_trainers: int
    committee: str
    proposer: str
    evidence: int
    virtual_time_s: float
    wall_time_s: float
    bytes_sent: int
    messages: int
    asr: float = math.nan
    """Backdoor attack success rate (sself spec §3.4): the fraction of the triggered non-target test samples the
    model classifies as the target; NaN without a backdoor (and ``metrics.csv`` then has no such column)."""
    traffic: str = ""
    """This round's traffic by message kind (sent since the previous round was written): space-separated
    ``kind=messages/bytes`` entries sorted by kind (``scale_10k.toml``, round 6:
    ``model=107/2071413 pbft=10084/277674248 update=699/13681527``; kinds: ``pbft`` consensus messages and
    decided blocks, ``model`` the pushed new model, ``update``, ``scores``, ``want``, ``blobs``);
    ``SimResult.traffic_by_round`` has the numbers."""


@dataclass
class SimResult:
    scenario: Scenario
    genesis: Genesis
    rounds: list[RoundMetrics]
    head_hash: bytes
    final_accuracy: float
    bytes_by_kind: dict[str, int]
    messages_by_kind: dict[str, int]
    dropped_messages: int
    evidence: int
    view_changes: int
    wall_seconds: float
    acceptance: dict[str, tuple[int, int]] = field(default_factory=dict)
    """peer → (times accepted, times trained)."""
    byzantine: tuple[str, ...] = ()
    member_index: dict[str, int] = field(default_factory=dict)
    final_asr: float = math.nan
    """The last evaluated round's attack success rate (NaN without a backdoor)."""
    traffic_by_round: list[dict[str, tuple[int, int]]] = field(default_factory=list)
    """Per committed round: message kind → (messages, bytes) sent in it (``RoundMetrics.traffic``)."""
    consensus_by_round: list[dict[str, tuple[int, int]]] = field(default_factory=list)
    """Per committed round: the ``pbft`` kind's messages split by consensus message kind (``node.Transmit.detail``:
    ``pre_prepare``, ``prepare``, ``commit``, ``decided``, ``decided_header``, ``header_sync_request``, ...)."""
    ground: list[tuple[int, int, bool]] = field(default_factory=list)
    """A ``grind`` fault's proposals: ``(height, block times tried, won)``, where ``won`` means the chosen time's
    block hash would have made the grinder the next primary under the old rule that drew it from the previous
    block's hash."""


class _Adversary(Behavior):
    """The fault hooks of one node, decided by the scenario's adversary section."""

    def __init__(self, sim: Simulation, peer: str) -> None:
        self.sim = sim
        self.peer = peer

    @property
    def accepts_everything(self) -> bool:  # type: ignore[override]
        return self.sim._faulty(self.peer, "corrupt")

    def proposal(self, payload: Payload, model: np.ndarray, model_blob: bytes) -> tuple[Payload, np.ndarray, bytes]:
        if not self.sim._faulty(self.peer, "corrupt"):
            self.sim._speculate(self.peer, payload, model)
            return payload, model, model_blob
        # a corrupt coordinator/primary: a wrong aggregate (the model moved away from the honest one)
        self.sim.corruptions += 1
        return corrupt_proposal(payload, model, self.sim._rng.child("corrupt", self.peer, self.sim._height()).numpy())

    def distances(self, distances: dict[str, float]) -> dict[str, float]:
        if not self.sim._faulty(self.peer, "corrupt"):
            return distances
        return lying_distances(distances)

    def score_rows(self, rows: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        if not self.sim._faulty(self.peer, "omit_rows"):
            return rows
        return omitted_rows(rows, me=self.peer, rows_min=self.sim.nodes[self.peer].rows_min)

    def clock(self, now_ms: int) -> int:
        return now_ms + self.sim._clock_skew_ms(self.peer)

    def proposal_time(self, time_ms: int, latest_ms: int, header_at: Callable[[int], BlockHeader], payload: Payload) -> int:
        sim = self.sim
        tries = sim.fault_plan.tries(self.peer, sim._height(), sim._coordinator_now) if sim.fault_plan else 0
        if not tries:
            return time_ms
        t, tried, won = grind_for_next_primary(self.peer, time_ms, latest_ms, tries, header_at, payload)
        sim.ground.append((header_at(t).height, tried, won))
        return t



class _Members(Mapping[str, NodeCore]):
    """Every member's node core by peer id, each made when first asked for (``make(pid)``).

    A member in ``deferred`` is one whose node would do nothing from the genesis until a message wakes it: a
    lazy member (``NodeCore.lazy``) with no role at height 1, and not on the committee
    re-drawn for height 1 (whose re-draw timer it keeps: ``consensus.Replica``). Its node is made at its first
    input, in the very state it would have slept in since the start (the genesis; :meth:`_Sleepers.wake` then skips
    its clock to the ticks so far), so making it late changes no outcome; it is checked where it is made
    (``start()`` gives no effect and its next ticks are idle forever: no timer, nothing wanted) and refused otherwise. A member that never gets a role
    never costs a node, so a run's memory grows with the members that take part, not with the
    members. Iterating makes every node (tests that look at all of them); :meth:`made` does not."""

    __slots__ = ("_peers", "_known", "_made", "_make", "deferred")

    def __init__(self, peers: Sequence[str], make: Callable[[str], NodeCore]) -> None:
        self._peers = tuple(peers)
        self._known = frozenset(self._peers)
        self._made: dict[str, NodeCore] = {}
        self._make = make
        self.deferred: frozenset[str] = frozenset()

    def __getitem__(self, pid: str) -> NodeCore:
        node = self._made.get(pid)
        if node is None:
            if pid not in self._known:
                raise KeyError(pid)
            node = self._made[pid] = self._make(pid)
            if pid in self.deferred:
                fx = node.start()
                if fx or node.idle_ticks() < _IDLE_FOREVER:
                    raise LocalProtocolError(f"member {pid} was deferred but acts at the genesis or on a timer "
                                             f"({node.idle_ticks()} idle ticks): {fx!r:.200}")
        return node

    def __contains__(self, pid: object) -> bool:
        return pid in self._known

    def __iter__(self) -> Iterator[str]:
        return iter(self._peers)

    def __len__(self) -> int:
        return len(self._peers)

    def made(self) -> list[NodeCore]:
        """The nodes made so far (a deferred member not woken yet has none: it did nothing)."""
        return list(self._made.values())

    def made_node(self, pid: str) -> NodeCore | None:
        """``pid``'s node if it was made (never makes one)."""
        return self._made.get(pid)


class _Sleepers:
    """Which members the event loop ticks: the awake ones, in member order. A member whose next ticks do
    nothing (``NodeCore.idle_ticks``) sleeps from the tick count it has seen; :meth:`wake` skips the ticks it
    missed (``NodeCore.skip_ticks``) before it gets an input, and :meth:`tick` wakes it, caught up, at the tick
    where it may act. Sleeping changes no outcome: a skipped tick is one that would have only counted."""

    def __init__(
        self, peers: Sequence[str], nodes: Mapping[str, NodeCore], *, enabled: bool, asleep: frozenset[str] = frozenset()
    ) -> None:
        """``asleep``: members asleep from the start until an input wakes them (:class:`_Members`' deferred ones:
        their node is made when woken), with no alarm."""
        if asleep and not enabled:
            raise ValueError("members asleep from the start need sleeping enabled")
        self._nodes = nodes
        self._order = {p: i for i, p in enumerate(peers)}
        self._enabled = enabled
        self._ticks = 0  # tick events so far: the clock of every awake member
        self._awake: set[str] = set(peers) - asleep
        self._sorted: list[tuple[str, NodeCore]] | None = None
        # member -> (the tick count it has seen, the tick it may act at: -1 for none, until an input wakes it)
        self._asleep: dict[str, tuple[int, int]] = dict.fromkeys(asleep, (0, -1))
        self._alarms: list[tuple[int, int, str]] = []  # (tick it may act at, order, member); stale entries skipped

    def tick(self) -> list[tuple[str, NodeCore]]:
        """A tick event: wake the members that may act at it; the awake members, in member order, to tick."""
        self._ticks += 1
        alarms = self._alarms
        while alarms and alarms[0][0] <= self._ticks:
            due, _, pid = heapq.heappop(alarms)
            slept = self._asleep.get(pid)
            if slept is not None and slept[1] == due:  # (else woken since: a stale alarm)
                self._catch_up(pid, slept[0], self._ticks - 1)
        if self._sorted is None:
            self._sorted = [(p, self._nodes[p]) for p in sorted(self._awake, key=self._order.__getitem__)]
        return self._sorted

    def wake(self, pid: str) -> None:
        """``pid`` gets an input now: bring its clock up to the ticks so far."""
        slept = self._asleep.get(pid)
        if slept is not None:
            self._catch_up(pid, slept[0], self._ticks)

    def settle(self, pid: str) -> None:
        """``pid`` just handled a tick or an input: let it sleep if its next ticks do nothing."""
        if not self._enabled or pid in self._asleep:
            return
        node = self._nodes[pid]
        idle = node.idle_ticks()
        if idle > 0:  # (a lazy member asleep has shed its past rounds' blobs: OutsiderPolicy.shed_asleep)
            due = self._ticks + idle + 1
            self._asleep[pid] = (self._ticks, due)
            self._awake.discard(pid)
            self._sorted = None
            heapq.heappush(self._alarms, (due, self._order[pid], pid))

    def _catch_up(self, pid: str, seen: int, now: int) -> None:
        del self._asleep[pid]
        if now > seen:
            self._nodes[pid].skip_ticks(now - seen)
        self._awake.add(pid)
        self._sorted = None


class Simulation:
    """Runs one scenario. ``run()`` returns a :class:`SimResult`; ``ledger_dir`` keeps the chain."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        ledger_dir: Path | None = None,
        on_round: Callable[[RoundMetrics], None] | None = None,
        workers: int | None = None,
        fuzz: FuzzSpec | None = None,
        executor: Callable[[Simulation], Any] | None = None,
        models_for_all: bool | None = None,
        threads: int | None = 1,
        caches: Caches | None = None,
    ) -> None:
        """``workers``: forked processes that run local training while this process runs the protocol
        (None: :func:`sim._workers.default_workers`; 0: train in-process). The results are identical.
        ``fuzz``: members whose outgoing messages a :class:`sim._fuzz.ByzantineFuzzer` tampers with.
        ``executor``: builds the training pool at ``run()`` instead of the local workers (``sim._ray.RayExecutor``).
        ``models_for_all``: every member outside the committee receives every new model, as a node of the
        network runtime does (``OutsiderPolicy(models_for_all=True)``), or (False) only the members with a role in the
        next round; None: the scenario's ``network.model_push``.
        ``threads``: the threads PyTorch's and the BLAS libraries' kernels run on in this process, set here
        (:func:`sim._jobs.limit_threads`, a setting of the whole process: the simulator's small kernels are many
        times slower oversubscribed); None leaves the process's setting as it is.
        ``caches``: the memos all the run's nodes share (:class:`ledger.Caches`: blob digests, committee samples),
        through their chain context and blob stores; a new one if None. Results are the same whatever it holds."""
        if models_for_all is None:
            models_for_all = scenario.network.model_push == "all"
        self.sc = scenario
        self._rng = RngTree(scenario.seed)
        self._on_round = on_round
        self._wall0 = time.perf_counter()
        if threads is not None:
            limit_threads(threads)
        self.caches = caches if caches is not None else Caches()
        self._init_world(scenario)
        self._init_attacks(scenario)
        self._init_clients(scenario)
        self._init_nodes(scenario, models_for_all=models_for_all)
        self._init_traffic()
        self._init_bookkeeping()
        self._init_run(ledger_dir, workers=workers, fuzz=fuzz, executor=executor)

    # --- construction (the steps of __init__, in order: each reads only what the ones before it set) -------------

    def _init_world(self, scenario: Scenario) -> None:
        """Data, model, trainer, identities and genesis, shared with a testnet's node processes, and the data
        attacks: what the local jobs read, which a Ray trainer builds alone (sim._jobs)."""
        self.jobs = JobHost(scenario)
        world = self.world = self.jobs.world
        self.public_data = world.public_data
        self.test = world.test
        self.client_data = self.jobs.client_data
        self.trainer = world.trainer
        self.schedule = world.schedule
        self.theta0 = world.theta0
        keys = world.keys
        self.keys = {k.peer_id: k for k in keys}
        self.index = {k.peer_id: i for i, k in enumerate(keys)}
        self.peers = sorted(self.keys)
        self.genesis = world.genesis

    def _init_attacks(self, scenario: Scenario) -> None:
        """The adversary: the Byzantine members, the update and data attacks (and a backdoor's success-rate set),
        and the faults."""
        keys = self.world.keys
        first_committee = set(genesis_committee(self.genesis))
        self.byzantine = frozenset(keys[i].peer_id for i in byzantine_indices(scenario, self.genesis))
        self.update_attack = parse_update_attack(scenario.adversary.attack) if scenario.adversary.attack else None
        self.attack_name = scenario.adversary.attack.split("(")[0].strip()
        self.claimed_samples = scenario.adversary.n_samples
        """The sample count a Byzantine client signs instead of its own (0: its own)."""
        self.per_round = scenario.adversary.per_round
        self._byzantine_rounds: dict[int, frozenset[str]] = {}
        self.poisoned_data = self.jobs.poisoned_data
        """Member index → its data with the data attack applied (the fixed Byzantine set; every member for a
        per-round adversary, which poisons a client's data only in the rounds it controls that client)."""
        self.attack_from = scenario.adversary.from_round
        self.batch_attack: Any = self.jobs.batch_attack
        """A per-batch data attack (``Backdoor``): applied to every minibatch of an attacking job, its update
        boosted (``boost_update``) after training; None for whole-dataset attacks."""
        self.asr_data: Dataset | None = None
        """The backdoor's attack-success-rate set: non-target test samples, triggered, labelled the target."""
        if self.batch_attack is not None:
            x_asr, y_asr = self.batch_attack.trigger_test_set(self.test.x, self.test.y)
            self.asr_data = Dataset(x=x_asr, y=y_asr, num_classes=self.test.num_classes, name=f"{self.test.name}-asr")
        if self.trainer.device.type != "cpu":  # evaluated where the model trains (the job host moved the clients' data)
            self.test = self.test.to(self.trainer.device)
            self.asr_data = None if self.asr_data is None else self.asr_data.to(self.trainer.device)
        self._faults = self._resolve_faults(scenario.adversary.faults, sorted(first_committee))
        self.ground: list[tuple[int, int, bool]] = []  # a grind fault's proposals (SimResult.ground)
        self.fault_plan = FaultPlan([Fault(f.kind, target, f.from_round, f.delay_ms, f.until_round, f.skew_ms, f.tries) for target, f in self._faults])

    def _init_clients(self, scenario: Scenario) -> None:
        """The strategy's client side (coordinator mode), the availability model, the public split, and the
        members' compute profiles."""
        p = scenario.protocol
        self.strategy: Strategy | None = self.world.strategy
        self.public_eval = self.world.public_eval()
        self.availability = None
        if scenario.adversary.availability:
            actx = AvailabilityContext(
                members=scenario.members,
                sizes=tuple(self.client_data.size(i) for i in range(scenario.members)),
                labels=tuple(tuple(int(c) for c in np.unique(self.client_data.labels(i))) for i in range(scenario.members)),
                rounds=scenario.rounds,
            )
            self.availability = parse_availability(scenario.adversary.availability, actx)
        self._availability_rounds: dict[int, dict[int, int]] = {}
        self.availability_log: dict[int, tuple[int, int]] = {}
        """fl_round → (clients dropped, clients delayed) by the availability model."""
        self._client_state: dict[str, bytes | None] = {}
        self._pending_state: dict[tuple[str, int], bytes | None] = {}
        """A client's new private state becomes its state only once a block includes that upload."""
        self._busy_until: dict[str, int] = {}
        self._round_us = int(1000 * (scenario.compute.round_ms or p.timeout_ticks_train * p.tick_ms))
        # --- compute profiles
        crng = self._rng.child("compute").numpy()
        speeds = 1.0 + scenario.compute.speed_spread * crng.random(scenario.members)
        self.train_us = {
            pid: int(1000 * (scenario.compute.train_ms * speeds[self.index[pid]]
                             + (scenario.compute.straggler_ms if self.index[pid] >= scenario.members - scenario.compute.stragglers else 0.0)))
            for pid in self.peers
        }

    def _init_nodes(self, scenario: Scenario, *, models_for_all: bool) -> None:
        """Every member's node core (made when first asked for: :class:`_Members`), and the ones made now."""
        # One chain context (and signature memo) for all of them, as one process verifies a
        # signature once; every node still runs every check (a memo hit is a past successful check).
        # The round rules (a height's plan: the client sample) and the genesis state are pure functions of the
        # genesis and the chain state, shared the same way. The block memo covers the heights a lazy member
        # catches up over (about members / clients of them, each checked by every member woken that round).
        ctx = ChainContext(self.genesis, signature_memo=1 << 16, block_memo=1024, caches=self.caches)
        self._decoder = EnvelopeDecoder(memo_bytes=64 << 20)
        rules = RoundRules(self.genesis, ctx=ctx, public=self.public_eval)
        state0 = genesis_state(ctx)
        theta0_blob = vector_to_blob(self.theta0)  # one copy in every node's blob store (a store keeps the first)
        outsiders = OutsiderPolicy(  # (the scenario's network.model_push and network.outsiders)
            models_for_all=models_for_all,
            headers_for_outsiders=scenario.network.outsiders == "headers",
            lazy_outsiders=scenario.network.outsiders == "lazy",
            # a member asleep sheds its past rounds' blobs (not under a fault plan, where no member sleeps: _loop)
            shed_asleep=not self.fault_plan,
        )

        def blob_store() -> MemoryBlobStore:
            store = MemoryBlobStore(caches=self.caches)
            store.put(theta0_blob)
            return store

        def make(pid: str) -> NodeCore:
            return NodeCore(
                genesis=self.genesis,
                key=self.keys[pid],
                initial_model=self.theta0,
                blobs=blob_store(),
                behavior=_Adversary(self, pid),
                ctx=ctx,  # (the replica's timeouts: node._deadlines, from the genesis and the model size)
                public=self.public_eval,
                decoder=self._decoder,
                rules=rules,
                state=state0,
                outsiders=outsiders,
            )

        self.nodes = _Members(self.peers, make)
        # Lazy members without a role at height 1 sleep from the start until a message wakes them: their nodes are
        # made then (_Members). Not under a fault plan, where no member sleeps (see _loop).
        if self.nodes[self.peers[0]].lazy and not self.fault_plan:
            first = rules.plan(state0, rules.new_history()).participants
            redrawn = ctx.view_committee(state0, 1, ATTEMPT_VIEWS) if ctx.redraw_ticks else ()  # (a re-draw timer)
            self.nodes.deferred = frozenset(self.peers) - first - set(redrawn) - {self.peers[0]}
        with _rare_collections():
            for pid in self.peers:
                if pid not in self.nodes.deferred:
                    self.nodes[pid]

    def _init_traffic(self) -> None:
        """The network (links, event queue, virtual clock) and its traffic counters."""
        self._setup_links()
        net = self.sc.network
        self._net_random = bool(net.drop or net.duplicate or net.jitter_ms or net.reorder or self._link_drop)
        self._net_seed = self._rng.child("network").seed64()
        self._draw_instant = -1
        self._draw_index: dict[tuple[int, int], int] = {}  # link -> messages it drew for at ``_draw_instant``
        self._queue: list[tuple[int, int, str, Any]] = []
        self._seq = 0
        self._now_us = 0
        self._tick_us = self.sc.protocol.tick_ms * 1000
        self.bytes_by_kind: dict[str, int] = {}
        self.messages_by_kind: dict[str, int] = {}
        self._traffic_mark: dict[str, tuple[int, int]] = {}  # the totals when the last round was written
        self.traffic_by_round: list[dict[str, tuple[int, int]]] = []
        self._consensus_sent: dict[str, list[int]] = {}  # consensus message kind -> [messages, bytes] so far
        self._consensus_mark: dict[str, tuple[int, int]] = {}
        self.consensus_by_round: list[dict[str, tuple[int, int]]] = []

    def _init_bookkeeping(self) -> None:
        """The run's counters, and what it keeps of each round: jobs, uploads, speculation, decided blocks,
        metrics."""
        self.dropped = 0
        self.corruptions = 0
        self.equivocations = 0
        self.busy_skipped = 0
        self.diverged_jobs = 0
        self._diverged_by_round: dict[int, int] = {}
        self._last_upload: dict[str, np.ndarray] = {}
        """Each trainer's last upload, what an equivocating sender varies (:meth:`_equivocate`): kept only under
        an ``equivocate`` fault (one upload per member that ever trained: 19 kB each for the digits MLP, about 130 MB
        at 10,000 members over 120 rounds)."""
        self._equivocators = any(f.kind == "equivocate" for _, f in self._faults)
        self.evidence_seen: set[bytes] = set()
        self._round_jobs: dict[int, list[tuple[str, Any]]] = {}
        self._interrupted: int = 0  # the stop signal taken (SIGINT or SIGTERM), 0 while running
        self._speculated_for = 0  # the latest round whose jobs were speculated
        self._predict_round = 0  # the round whose likely next model is to be previewed once its jobs are done
        self._predict_seen = -1  # the pool's completion count at the last look
        self._speculated_model: tuple[int, np.ndarray] | None = None  # the round and model last speculated on
        self._speculated_included: list[tuple[str, int]] = []
        self._uploads: dict[int, dict[str, tuple[int, np.ndarray]]] = {}  # per round: what each trainer sent
        self._requested: dict[int, list[tuple[str, str]]] = {}
        """Per round: the ``(peer, purpose)`` of every training request (the guess for the next round's)."""
        self._stale_window = 1 + (int(self.strategy.max_staleness) if self.strategy is not None else 0)
        self._decided: dict[int, Decided] = {}
        self._written = 0
        self.metrics: list[RoundMetrics] = []
        self.acceptance: dict[str, list[int]] = {pid: [0, 0] for pid in self.peers}

    def _init_run(
        self, ledger_dir: Path | None, *, workers: int | None, fuzz: FuzzSpec | None,
        executor: Callable[[Simulation], Any] | None,
    ) -> None:
        """The training pool, the ledger writer, the chain's head and the fuzzer."""
        self._writer = None
        self.workers = default_workers(self.trainer.device.type) if workers is None else max(0, int(workers))
        self._executor = executor
        self._pool = TrainingPool(self, 0)
        if ledger_dir is not None:
            self._writer = LedgerWriter(Path(ledger_dir), self.genesis, [vector_to_blob(self.theta0)])
        self.head_hash = self.genesis.hash()
        self._genesis_hash = self.head_hash
        self._committee = genesis_committee(self.genesis)
        self.fuzzer: ByzantineFuzzer | None = None
        if fuzz is not None:
            self.fuzzer = ByzantineFuzzer(
                peers=frozenset(self.peers_by_index(i) for i in fuzz.members), keys=self.keys, genesis=self.genesis,
                seed=fuzz.seed, rate=fuzz.rate, dim=self.theta0.shape[0], only=fuzz.only,
                also_byzantine=self.scenario_faulty,
            )
        self._coordinators = {1: self._coordinator_now()}  # height -> its view-0 primary (the 'coordinator' target)

    # --- faults ------------------------------------------------------------------------------------

    def _resolve_faults(self, faults: tuple[FaultConfig, ...], committee: list[str]) -> list[tuple[str | None, FaultConfig]]:
        out = []
        for f in faults:
            if f.target == "coordinator":
                out.append((None, f))
            elif f.target == "committee":
                out.append((committee[0], f))
            else:
                i = int(f.target[7:])
                if i >= self.sc.members:
                    raise ValueError(f"fault target member:{i} does not exist ({self.sc.members} members)")
                out.append((self.peers_by_index(i), f))
        return out

    def is_byzantine(self, peer: str, fl_round: int) -> bool:
        """Does the adversary control ``peer``'s job of ``fl_round``?"""
        if not self.per_round:
            return peer in self.byzantine
        return peer in self._byzantine_rounds.get(fl_round, ())

    def _attacking(self, peer: str, fl_round: int) -> bool:
        """Does the adversary attack ``peer``'s job of ``fl_round`` (Byzantine, and ``adversary.from_round``
        reached; before it the adversary trains and sends honestly)?"""
        return fl_round >= self.attack_from and self.is_byzantine(peer, fl_round)

    def _corrupt_round(self, peer: str, fl_round: int) -> None:
        """Per-round adversary: on the round's first job, choose exactly ``per_round`` of its sampled clients."""
        if not self.per_round or fl_round in self._byzantine_rounds:
            return
        sampled = sorted(self.nodes[peer].status().trainers, key=lambda p: self.index[p])
        rng = self._rng.child("byzantine", fl_round).numpy()
        pick = rng.permutation(len(sampled))[: min(self.per_round, len(sampled))]
        self._byzantine_rounds[fl_round] = frozenset(sampled[int(j)] for j in pick)

    def peers_by_index(self, i: int) -> str:
        return next(p for p, j in self.index.items() if j == i)

    def _height(self) -> int:
        return self._written + 1

    def _coordinator_now(self) -> str:
        """The view-0 primary of the height being decided (the 'coordinator' fault target)."""
        return primary(self._committee, self._genesis_hash, self._written + 1, 0)

    def scenario_faulty(self, peer: str, height: int) -> bool:
        """Does a fault of the scenario's adversary section control ``peer`` at ``height`` (any kind)?"""
        for target, f in self._faults:
            if height >= f.from_round and (target == peer or (target is None and self._coordinators.get(height) == peer)):
                return True
        return False

    def _faulty(self, peer: str, kind: str) -> bool:
        return bool(self.fault_plan) and self.fault_plan.active(peer, kind, self._height(), self._coordinator_now)

    def _clock_skew_ms(self, peer: str) -> int:
        if not self.fault_plan:
            return 0
        return self.fault_plan.skew_ms(peer, self._height(), self._coordinator_now)

    def _delay_us(self, peer: str) -> int:
        if not self.fault_plan:
            return 0
        return int(self.fault_plan.delay_ms(peer, self._height(), self._coordinator_now) * 1000)

    # --- event queue -------------------------------------------------------------------------------

    def _push(self, at_us: int, kind: str, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at_us, self._seq, kind, data))

    def _setup_links(self) -> None:
        net, n = self.sc.network, self.sc.members
        lrng = self._rng.child("links").numpy()
        # Link (a, b)'s base latency is latency_ms × (1 + latency_spread × u[a, b]), u the first n × n draws of the
        # links stream (row by row), then each member's uplink from the next n draws. The n × n matrix is not
        # kept (800 MB at 10,000 members): a sender's row is drawn when it first sends (PCG64 jumps ahead to it),
        # the same values bit for bit.
        self._links_state = lrng.bit_generator.state
        lrng.bit_generator.advance(n * n)
        self._uplink_mbps = (net.bandwidth_mbps / (1.0 + net.bandwidth_spread * lrng.random(n))).tolist()
        self._latency_rows: OrderedDict[int, np.ndarray] = OrderedDict()
        self._link_latency: dict[tuple[int, int], float] = {}
        self._link_bw: dict[tuple[int, int], float] = {}
        self._link_drop: dict[tuple[int, int], float] = {}
        for link in net.links:
            for a, b in ((link.a, link.b), (link.b, link.a)):
                if max(a, b) >= n:
                    raise ValueError(f"network link {link.a}-{link.b}: no such member ({n} members)")
                if link.latency_ms >= 0:
                    self._link_latency[(a, b)] = link.latency_ms
                if link.bandwidth_mbps > 0:
                    self._link_bw[(a, b)] = link.bandwidth_mbps
                if link.drop >= 0:
                    self._link_drop[(a, b)] = link.drop
        self._partitions = []
        for part in net.partitions:
            group = np.full(n, len(part.groups), dtype=np.int64)
            for g, members in enumerate(part.groups):
                for i in members:
                    if i >= n:
                        raise ValueError(f"network partition names member {i} ({n} members)")
                    group[i] = g
            self._partitions.append([part, group, None])  # None: not started yet (then: start time µs)
        self.partitioned = 0

    def _latency_ms(self, a: int, b: int) -> float:
        """The base latency of link ``a → b`` in ms (see :meth:`_setup_links`)."""
        if self._link_latency:
            got = self._link_latency.get((a, b))
            if got is not None:
                return got
        net = self.sc.network
        if not net.latency_spread:
            return net.latency_ms  # = latency_ms × (1 + 0 × u), exactly
        row = self._latency_rows.get(a)
        if row is None:
            n = self.sc.members
            bits = np.random.PCG64()
            bits.state = self._links_state
            bits.advance(a * n)
            row = self._latency_rows[a] = net.latency_ms * (1.0 + net.latency_spread * np.random.Generator(bits).random(n))
            while len(self._latency_rows) > _LATENCY_ROWS_KEPT:
                self._latency_rows.popitem(last=False)
        else:
            self._latency_rows.move_to_end(a)
        return float(row[b])

    def _cut(self, a: int, b: int) -> bool:
        h = self._height()
        for entry in self._partitions:
            part, group, since = entry
            if h < part.from_round or (part.heal_round and h >= part.heal_round):
                continue
            if since is None:
                entry[2] = since = self._now_us
            if part.duration_ms and self._now_us >= since + part.duration_ms * 1000:
                continue
            if group[a] != group[b]:
                return True
        return False

    def _draws(self, a: int, b: int) -> tuple[int, ...]:
        """The network's random draws for the next message on link ``a → b``, 32-bit words (× ``_DRAW_UNIT``:
        uniform in [0, 1)): drop, duplicate, then jitter and reorder of each copy.

        They are a hash of (scenario seed, link, send time, the message's index among those the link carries at that
        time), not the next values of one stream every message shares: a message sent or left out on one link moves
        no other message's draws, and one left out at some time moves no later one on its own link. So a node may
        leave out a push nobody needs (the model for a member outside the next round) and every ledger stays as it
        was; nothing has to stand in for the message it did not send. Only the current time's indices are kept
        (nothing per link over the run: 10,000 members have 10⁸ links)."""
        if self._now_us != self._draw_instant:
            self._draw_instant = self._now_us
            self._draw_index.clear()
        link = (a, b)
        i = self._draw_index.get(link, 0)
        self._draw_index[link] = i + 1
        return _DRAW_WORDS.unpack(hashlib.sha256(_DRAW_KEY.pack(self._net_seed, a, b, self._now_us, i)).digest())

    def _send(self, frm: str, fx: Transmit, *, tampered: bool = False) -> None:
        """Put ``fx`` on the network: count it, apply the faults, draw its latency and queue its delivery (the
        network's random draws: :meth:`_draws`)."""
        if self.fuzzer is not None and not tampered and frm in self.fuzzer.peers:
            for to, data in self.fuzzer.outgoing(frm, fx.to, fx.data):
                if to != frm:
                    self._send(frm, Transmit(to=to, data=data, kind=fx.kind), tampered=True)
            return
        self._count(fx.kind, len(fx.data), fx.detail)
        if self._faults and (self._faulty(frm, "drop") or self._faulty(fx.to, "drop")):
            self.dropped += 1
            return
        if (self._faults and fx.kind in SKIPPED_KINDS and self._faulty(frm, "skip_primary")
                and fx.to == self._coordinator_now()):
            self.dropped += 1
            return
        a, b = self.index[frm], self.index[fx.to]
        if self._partitions and self._cut(a, b):
            self.partitioned += 1
            return
        net = self.sc.network
        u = self._draws(a, b) if self._net_random else _NO_DRAWS
        drop = self._link_drop.get((a, b), net.drop) if self._link_drop else net.drop
        if drop and u[0] * _DRAW_UNIT < drop:
            self.dropped += 1
            return
        data = fx.data
        if self._faults and self._faulty(frm, "equivocate") and b % 2 == 1:
            data = self._equivocate(frm, data)
        copies = 2 if net.duplicate and u[1] * _DRAW_UNIT < net.duplicate else 1
        bw = self._link_bw.get((a, b), self._uplink_mbps[a]) if self._link_bw else self._uplink_mbps[a]
        for c in range(copies):
            ms = self._latency_ms(a, b) + net.jitter_ms * u[2 + 2 * c] * _DRAW_UNIT + len(data) * 8 / (bw * 1000.0)
            if net.reorder and u[3 + 2 * c] * _DRAW_UNIT < net.reorder:
                ms += net.reorder_ms
            self._push(self._now_us + int(ms * 1000) + (self._delay_us(frm) if self._faults else 0), "deliver", (frm, fx.to, data))

    def _count(self, kind: str, nbytes: int, detail: str = "") -> None:
        self.bytes_by_kind[kind] = self.bytes_by_kind.get(kind, 0) + nbytes
        self.messages_by_kind[kind] = self.messages_by_kind.get(kind, 0) + 1
        if detail:  # (a consensus message's own kind: Transmit.detail)
            sent = self._consensus_sent.setdefault(detail, [0, 0])
            sent[0] += 1
            sent[1] += nbytes

    def _round_traffic(self) -> dict[str, tuple[int, int]]:
        """Kind → (messages, bytes) sent since the last call; the same by consensus kind goes to
        ``consensus_by_round``."""
        now = {k: (self.messages_by_kind[k], self.bytes_by_kind[k]) for k in sorted(self.bytes_by_kind)}
        mark, self._traffic_mark = self._traffic_mark, now
        consensus = {k: (m, b) for k, (m, b) in sorted(self._consensus_sent.items())}
        self.consensus_by_round.append(_since(consensus, self._consensus_mark))
        self._consensus_mark = consensus
        return _since(now, mark)

    def _equivocate(self, frm: str, data: bytes) -> bytes:
        """An equivocating peer tells odd-indexed peers something else (``node.adversary.equivocate``)."""
        out, changed = equivocate(data, key=self.keys[frm], chain_id=self.genesis.chain_id, decoder=self._decoder,
                                  last_upload=self._last_upload.get(frm, self.theta0))
        self.equivocations += changed
        return out

    def _apply(self, peer: str, effects: list[Any]) -> None:
        for fx in effects:
            if isinstance(fx, Transmit):
                self._send(peer, fx)
            elif isinstance(fx, Train):
                self._start_training(peer, fx.job)
            elif isinstance(fx, Decided):
                self._on_decided(peer, fx)
            elif isinstance(fx, Misbehavior):
                self.evidence_seen.add(sha256(fx.evidence.encode()))
                if self.fuzzer is not None:
                    self.fuzzer.on_evidence(peer, fx.evidence, where=f"node n{self.index[peer]} at {self._now_us} µs")

    # --- training ----------------------------------------------------------------------------------

    def _availability_outcome(self, peer: str, job: TrainJob) -> int:
        """0 (on time), a delay in rounds, or DROPPED, from the scenario's availability model."""
        if self.availability is None or job.purpose != PURPOSE_UPDATE:
            return 0
        out = self._availability_rounds.get(job.fl_round)
        if out is None:
            sampled = sorted(self.index[t] for t in self.nodes[peer].status().trainers)
            rng = self._rng.child("availability", job.fl_round).numpy()
            out = {int(k): int(v) for k, v in self.availability.outcome(job.fl_round, sampled, rng=rng).items()}
            self._availability_rounds[job.fl_round] = out
            self._availability_rounds.pop(job.fl_round - 8, None)
            self.availability_log[job.fl_round] = (
                sum(1 for v in out.values() if v == DROPPED), sum(1 for v in out.values() if v > 0)
            )
        return out.get(self.index[peer], 0)

    def _run_job(self, spec: _JobSpec) -> tuple[np.ndarray, int, bytes | None]:
        """One local job, a pure function of ``spec`` and the scenario: ``(upload, n_samples, client_state)``
        (the job host's; the training pool calls it here, in a forked worker, or replaced by a benchmark)."""
        return self.jobs.run_job(spec)

    def _job_spec(
        self, peer: str, fl_round: int, purpose: str, model: np.ndarray, server_state: bytes | None, client_state: bytes | None
    ) -> _JobSpec:
        return _JobSpec(
            index=self.index[peer],
            fl_round=fl_round,
            purpose=purpose,
            model=np.asarray(model),
            server_state=server_state,
            client_state=client_state,
            lr=float(self.schedule(fl_round - 1)),
            strategy_side=self.strategy is not None and purpose == PURPOSE_UPDATE,
            poisoned=purpose == PURPOSE_UPDATE and self._attacking(peer, fl_round)
            and (self.batch_attack is not None or self.index[peer] in self.poisoned_data),
        )

    def _speculate(self, proposer: str, payload: Payload, model: np.ndarray) -> None:
        """An honest proposal for height ``h`` was just built: offer the training workers round ``h + 1``'s
        likely jobs from the proposed model (see :meth:`_speculate_from`)."""
        if not self._pool.active or payload.state_digest is not None:
            return  # (a next-round server state is not at hand here: no speculation for such strategies)
        h = self.nodes[proposer].status().height
        last = self._speculated_model
        if last is not None and last[0] == h and np.array_equal(last[1], model):
            if set(self._speculated_included) == {(u.peer, u.fl_round) for u in payload.updates}:
                return  # the prediction was right: those jobs are already offered
        self._speculate_from(h, model, [(u.peer, u.fl_round) for u in payload.updates])

    def _speculate_from(self, h: int, model: np.ndarray, included: list[tuple[str, int]]) -> None:
        """Offer the training workers round ``h + 1``'s likely jobs: this round's trainers and purposes,
        from ``model``, with the client states a block including ``included`` would give them
        (sim/_workers.py: a wrong guess only wastes an idle worker's time, never changes a result)."""
        self._speculated_for = max(self._speculated_for, h + 1)
        self._speculated_model, self._speculated_included = (h, model), included
        specs = []
        for peer, purpose in self._requested.get(h, ()):
            client_state = self._client_state.get(peer)
            for p, t in included:  # as _write() will apply them
                if p == peer and (peer, t) in self._pending_state:
                    client_state = self._pending_state[(peer, t)]
            specs.append(self._job_spec(peer, h + 1, purpose, model, None, client_state))
        self._pool.speculate(specs)

    def _maybe_predict(self) -> None:
        """After every event while a round's jobs run: once every job of the round has its result, speculate
        on the model the coordinator will most likely propose (all of them, aggregated as a node would:
        ``NodeCore.preview_model``), so that the round's protocol work - the updates' receipt, the
        proposal, re-execution, pBFT, the commit - overlaps the next round's training. The proposal
        speculates again if it differs."""
        if self._pool.completed == self._predict_seen:
            return
        self._predict_seen = self._pool.completed
        h = self._predict_round
        jobs = self._round_jobs.get(h, ())
        if self._speculated_for > h or not self._pool.active:
            self._predict_round = 0
            return
        if not all(handle.done for _, handle in jobs):
            return
        self._predict_round = 0
        sent = self._uploads.get(h, {})
        uploads = []
        for peer, handle in jobs:
            if peer in sent:
                uploads.append((peer, *sent[peer]))
                continue
            if self._attacking(peer, h) and (self.update_attack is not None or self.batch_attack is not None
                                             or self.claimed_samples):
                return  # its upload is not the job's result: leave it to the proposal
            delta, n, _ = handle.get()
            if np.isfinite(delta).all():
                uploads.append((peer, n, delta))
        node = self.nodes[self._coordinator_now()]
        if not uploads or node.status().height != h:
            return
        model = node.preview_model(sorted(uploads, key=lambda u: u[0]))
        if model is not None:
            self._speculate_from(h, model, [(p, h) for p, _, _ in uploads])

    def _start_training(self, peer: str, job: TrainJob) -> None:
        r = job.fl_round
        if r not in self._requested:
            # the round's first job: drop the speculations its plan rules out
            self._requested.pop(r - 2, None)
            trainers = {self.index[t] for t in self.nodes[peer].status().trainers}
            self._pool.discard(lambda s: s.fl_round > r or (s.fl_round == r and (s.purpose != PURPOSE_UPDATE or s.index in trainers)))
        self._requested.setdefault(r, []).append((peer, job.purpose))
        if self._busy_until.get(peer, -1) > self._now_us:
            self.busy_skipped += 1
            return  # still computing an earlier job: the device ignores the request (sself spec §1.2)
        outcome = self._availability_outcome(peer, job)
        if outcome == DROPPED:
            return
        if job.purpose == PURPOSE_UPDATE:
            self._corrupt_round(peer, job.fl_round)
        spec = self._job_spec(peer, r, job.purpose, job.model, job.server_state, self._client_state.get(peer))
        handle = self._pool.submit(spec)
        self._uploads.pop(r - 4, None)
        if job.purpose == PURPOSE_UPDATE and self._pool.active and r >= self._predict_round:
            self._predict_round = r
        self._round_jobs.setdefault(job.fl_round, []).append((peer, handle))
        done = self._now_us + self.train_us[peer] + outcome * self._round_us
        self._busy_until[peer] = done
        self._push(done, "trained", (peer, job, handle))

    def _finish_training(self, peer: str, job: TrainJob, handle: Any) -> None:
        delta, n, client_state = handle.get()
        if not np.isfinite(delta).all():
            # local training diverged (e.g. a global model an attack blew up): the job fails, nothing is sent
            self.diverged_jobs += 1
            self._diverged_by_round[job.fl_round] = self._diverged_by_round.get(job.fl_round, 0) + 1
            return
        if job.purpose == PURPOSE_UPDATE and self.strategy is not None:
            self._pending_state[(peer, job.fl_round)] = client_state
        if self.batch_attack is not None and job.purpose == PURPOSE_UPDATE and self._attacking(peer, job.fl_round):
            delta = self.batch_attack.boost_update(delta)  # model replacement: s · Δ (s = 1: no-scale)
            if not np.isfinite(delta).all():
                self.diverged_jobs += 1
                self._diverged_by_round[job.fl_round] = self._diverged_by_round.get(job.fl_round, 0) + 1
                return
        if self.update_attack is not None and self._attacking(peer, job.fl_round):
            rng = self._rng.child("attack", self.index[peer], job.fl_round).numpy()
            honest_jobs = [h for p, h in self._round_jobs.get(job.fl_round, ()) if not self.is_byzantine(p, job.fl_round)]
            rows = [v for v in (h.get()[0] for h in honest_jobs) if np.isfinite(v).all()]
            if self.attack_name in OMNISCIENT_ATTACKS and rows:
                honest = np.stack(rows)
            else:
                honest = delta[None, :]
            delta = attack_update(self.update_attack, honest, rng=rng, global_model=job.model)
            if not np.isfinite(delta).all():  # the attack overflowed: this Byzantine client sends nothing
                self.diverged_jobs += 1
                self._diverged_by_round[job.fl_round] = self._diverged_by_round.get(job.fl_round, 0) + 1
                return
        if self.claimed_samples and job.purpose == PURPOSE_UPDATE and self._attacking(peer, job.fl_round):
            n = self.claimed_samples  # it signs a count of its choice (the round rules cap what it weighs)
        if self._equivocators:
            self._last_upload[peer] = delta
        if job.purpose == PURPOSE_UPDATE and self._pool.active:  # (kept for the preview: only with workers)
            self._uploads.setdefault(job.fl_round, {})[peer] = (n, delta)
        self._apply(peer, self.nodes[peer].on_training_done(job, TrainResult(delta, n)))

    # --- observing commits -------------------------------------------------------------------------

    def _on_decided(self, peer: str, fx: Decided) -> None:
        # Any node's report will do (a Byzantine client runs honest node code; even a corrupt node can only
        # report a certified block, and its blobs are checked against their digests when written).
        h = fx.block.height
        if h <= self._written:
            return
        have = self._decided.get(h)
        if have is None or (self._complete(fx) and not self._complete(have)) or (have.model is None and fx.model is not None):
            self._decided[h] = fx
        while self._written + 1 in self._decided and self._complete(self._decided[self._written + 1]):
            self._write(self._decided.pop(self._written + 1))

    @staticmethod
    def _complete(fx: Decided) -> bool:
        p = fx.block.payload
        need = [u.digest for u in p.updates] + [p.model_digest] + ([p.state_digest] if p.state_digest else [])
        return fx.model is not None and all(d in fx.blobs for d in need)

    def _with_scored_blobs(self, block: Block, held: Mapping[bytes, bytes]) -> Mapping[bytes, bytes]:
        """``held`` plus every blob the block's score rows name that the reporting node lacks (each member's reference,
        the updates a member scored that this node never received), taken from the stores of the members that hold
        them - the row's member, else the client - as a network node's archive fetches them from those peers
        (``NodeCore(archive=True)``). A blob no member holds (a Byzantine member signed a digest it never had) stays
        out: the audit then names that member's row."""
        rows = score_row_blobs(block.payload.attestations) if block.payload.attestations else ()
        missing = [(m, w, d) for m, w, d in rows if d not in held]
        if not missing:
            return held
        out = dict(held)
        for member, whose, d in missing:
            for holder in (member, whose):
                node = self.nodes.made_node(holder)
                data = None if node is None else node.servable(d)
                if data is not None:
                    out[d] = data
                    break
        return out

    def _write(self, fx: Decided) -> None:
        block = fx.block
        h = block.height
        assert fx.model is not None and self.caches.sha256(vector_to_blob(fx.model)) == block.payload.model_digest
        if self.fuzzer is not None:
            for ev in block.payload.evidence:
                self.fuzzer.on_evidence(block.header.proposer, ev, where=f"block {h}")
        if self._writer is not None:
            blobs = self._with_scored_blobs(block, fx.blobs)
            order = sorted(blobs)
            self._writer.submit(block, [blobs[d] for d in order], order)
        self._written = h
        self.head_hash = block.hash()
        self._committee = block.payload.next_committee
        self._coordinators[h + 1] = self._coordinator_now()
        self._coordinators.pop(h - 64, None)
        for u in block.payload.updates:
            if (u.peer, u.fl_round) in self._pending_state:
                self._client_state[u.peer] = self._pending_state.pop((u.peer, u.fl_round))
        for key in [k for k in self._pending_state if k[1] <= h - 16]:
            del self._pending_state[key]
        rec = block.payload.record
        trainers = list(rec.get("training", rec.get("clients", ())))
        accepted = [u.peer for u in block.payload.updates if u.fl_round == h]
        stale = sum(1 for u in block.payload.updates if u.fl_round != h)
        for t in trainers:
            if t in self.acceptance:
                self.acceptance[t][1] += 1
        for u in block.payload.updates:
            self.acceptance[u.peer][0] += 1
        acc = loss = asr = math.nan
        if h % self.sc.eval_every == 0 or h == self.sc.rounds:
            ev = self.trainer.evaluate(torch.from_numpy(np.array(fx.model)), self.test)
            acc, loss = float(ev.accuracy), float(ev.loss)
            if self.asr_data is not None:
                asr = float(self.trainer.evaluate(torch.from_numpy(np.array(fx.model)), self.asr_data).accuracy)
        traffic = self._round_traffic()
        m = RoundMetrics(
            fl_round=h,
            view=block.header.view,
            accuracy=acc,
            loss=loss,
            accepted=len(accepted),
            rejected=len(trainers) - len(accepted),
            stale_accepted=stale,
            unavailable=self.availability_log.get(h, (0, 0))[0],
            delayed=self.availability_log.get(h, (0, 0))[1],
            diverged=self._diverged_by_round.pop(h, 0),
            byzantine_accepted=sum(1 for u in block.payload.updates if self.is_byzantine(u.peer, u.fl_round)),
            byzantine_trainers=sum(1 for t in trainers if self.is_byzantine(t, h)),
            committee=" ".join(f"n{self.index[c]}" for c in block.payload.next_committee),
            proposer=f"n{self.index[block.header.proposer]}",
            evidence=len(block.payload.evidence),
            virtual_time_s=self._now_us / 1e6,
            wall_time_s=time.perf_counter() - self._wall0,
            bytes_sent=sum(self.bytes_by_kind.values()),
            messages=sum(self.messages_by_kind.values()),
            asr=asr,
            traffic=" ".join(f"{k}={n}/{b}" for k, (n, b) in traffic.items()),
        )
        self.metrics.append(m)
        self.traffic_by_round.append(traffic)
        for k in [k for k in self._round_jobs if k <= h - self._stale_window]:
            del self._round_jobs[k]
        if self._on_round is not None:
            self._on_round(m)

    # --- main loop ---------------------------------------------------------------------------------

    def run(self) -> SimResult:
        # fork the training workers before any thread of ours exists (the ledger writer starts below)
        self._pool = TrainingPool(self, self.workers) if self._executor is None else self._executor(self)
        restore = self._defer_ctrl_c()
        try:
            if self._writer is not None:
                self._writer.start()
            with _rare_collections():
                self._loop()
        except BaseException:
            if self._writer is not None:
                try:
                    self._writer.close()  # keep what was decided; the original error wins
                except RuntimeError:
                    pass
            raise
        finally:
            restore()
            self._pool.close()
        if self._writer is not None:
            self._writer.close()
        return self._result()

    def _defer_ctrl_c(self) -> Callable[[], None]:
        """Take Ctrl-C between events, not inside one: an interrupt in the middle of sending a block to the
        ledger writer would leave half a message in its pipe, and the drain that keeps every decided block
        would then wait forever. The first Ctrl-C stops the loop after the current event; a second one
        raises at once. SIGTERM (``kill``, a service manager) is the same clean stop and ends in
        ``node.Terminated`` (a KeyboardInterrupt), in a top-level process only (a pool's worker keeps SIGTERM as its pool's
        stop). Only in the main thread, and only where Python's default handler is installed (SIGTERM: none);
        the forked helpers reset both."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        top_level = multiprocessing.parent_process() is None

        def on_stop(signum: int, frame: Any) -> None:
            if self._interrupted:
                raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
            self._interrupted = signum

        restore: list[tuple[int, Any]] = []
        for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
            if signal.getsignal(sig) is default and (sig == signal.SIGINT or top_level):
                signal.signal(sig, on_stop)
                restore.append((sig, default))

        def undo() -> None:
            for sig, default in restore:
                signal.signal(sig, default)

        return undo

    def _loop(self) -> None:
        deferred = self.nodes.deferred  # (their start() is called where their node is made)
        for pid in self.peers:
            if pid not in deferred:
                self._apply(pid, self.nodes[pid].start())
        self._push(self._tick_us, "tick", None)
        p = self.sc.protocol
        # pBFT doubles its timers per view up to 2**4 (consensus.ReplicaConfig.backoff_exponent_max): a height that
        # needs several view changes legitimately takes many times a normal round; only far beyond is it stuck
        per_view = p.timeout_ticks_train + p.timeout_ticks_propose + p.timeout_ticks_prepare + p.timeout_ticks_commit
        round_budget_us = self._tick_us * (per_view + p.timeout_ticks_view_change) * 16 * 8
        last_progress_us, last_written = 0, 0
        faults = bool(self.fault_plan)
        # A member that has nothing to do until some later tick (NodeCore.idle_ticks: outside the committee,
        # waiting for the block) sleeps: it is not ticked, and its clock is caught up (NodeCore.skip_ticks)
        # before its next input, or at the tick where it may act. The awake ones tick in member order, as all
        # did before, so the trace is the same; a member outside the round costs nothing between its messages.
        # Not under a fault plan: a dropped member misses ticks there, which a catch-up would count.
        sleeper = _Sleepers(self.peers, self.nodes, enabled=not faults, asleep=deferred)
        while self._written < self.sc.rounds:
            if not self._queue:
                raise LivenessError(f"the event queue ran dry at height {self._written + 1}; reproduce: seed {self.sc.seed}")
            at, _, kind, data = heapq.heappop(self._queue)
            self._now_us = at
            if kind == "tick":
                for pid, node in sleeper.tick():
                    if not (faults and self._faulty(pid, "drop")):
                        fx = node.tick()
                        if fx:
                            self._apply(pid, fx)
                    else:  # a crashed member runs no timer, but its clock goes on (its block times stay right)
                        node.lose_ticks(1)
                    sleeper.settle(pid)
                self._push(at + self._tick_us, "tick", None)
            elif kind == "deliver":
                frm, to, payload = data
                if self.fuzzer is not None and to in self.fuzzer.peers:
                    self.fuzzer.observe(frm, payload)
                if not self._faulty(to, "drop"):
                    sleeper.wake(to)
                    self._apply(to, self.nodes[to].on_message(frm, payload))
                    sleeper.settle(to)
            elif kind == "trained":
                peer, job, handle = data
                sleeper.wake(peer)
                self._finish_training(peer, job, handle)
                sleeper.settle(peer)
            if self._predict_round:
                self._maybe_predict()
            if self._interrupted:
                raise Terminated if self._interrupted == signal.SIGTERM else KeyboardInterrupt
            if self._written != last_written:
                last_written, last_progress_us = self._written, at
            elif at - last_progress_us > round_budget_us:
                raise LivenessError(
                    f"no block committed for {(at - last_progress_us) / 1e6:.1f} virtual seconds at height "
                    f"{self._written + 1}; reproduce: concilium sim run <scenario> --seed {self.sc.seed}"
                )

    def partial_result(self) -> SimResult:
        """What :meth:`run` returns, for the rounds written so far: after an interrupted run (Ctrl-C, SIGTERM)."""
        return self._result()

    def _result(self) -> SimResult:
        views = sum(n.replica.status().view_changes for n in self.nodes.made())
        final = next((m.accuracy for m in reversed(self.metrics) if not math.isnan(m.accuracy)), math.nan)
        return SimResult(
            scenario=self.sc,
            genesis=self.genesis,
            rounds=self.metrics,
            head_hash=self.head_hash,
            final_accuracy=final,
            bytes_by_kind=dict(sorted(self.bytes_by_kind.items())),
            messages_by_kind=dict(sorted(self.messages_by_kind.items())),
            dropped_messages=self.dropped,
            evidence=sum(m.evidence for m in self.metrics),
            view_changes=views,
            wall_seconds=time.perf_counter() - self._wall0,
            acceptance={p: (a, t) for p, (a, t) in sorted(self.acceptance.items())},
            byzantine=tuple(sorted(self.byzantine)),
            member_index=dict(self.index),
            final_asr=next((m.asr for m in reversed(self.metrics) if not math.isnan(m.accuracy)), math.nan),
            traffic_by_round=list(self.traffic_by_round),
            consensus_by_round=list(self.consensus_by_round),
            ground=list(self.ground),
        )
