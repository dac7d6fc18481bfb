"""One peer node on a real network: :class:`node.core.NodeCore` driven by trio, py-libp2p and the wall clock.

The core decides; this module only executes its effects (docs/design.md, "The network runtime"):

* **Messages.** ``Transmit`` effects go to :class:`node.runtime._transport.Transport`, whose frames come back
  into :meth:`NodeCore.on_envelope` (the transport authenticates the sender's peer id through Noise). Frames
  are decoded here (``node._wire.decode_envelope``: bounded by a budget), those over
  :data:`DECODE_INLINE_BYTES` in a worker thread (:data:`DECODES_MAX` at once), so that no frame holds the
  event loop; one that does not decode is counted by the core (``malformed``) and charged to its sender as a
  bad frame (its ban budget).
* **Time.** One task maps the wall clock onto the core's ticks (``genesis.protocol.timeouts.tick_ms``):
  it calls :meth:`NodeCore.tick` once per elapsed tick, catching up at most :data:`CATCH_UP_TICKS_MAX`
  after a stall (the rest it only counts: :meth:`NodeCore.lose_ticks`). The core starts at the tick of the
  current wall time, so its clock, the block time a proposer injects and what a validator judges a block time
  against (the genesis' ``time_drift_ms``), stays wall time.
* **Training** runs in a worker thread (``trio.to_thread``), one job at a time, so a slow job never stalls
  consensus; a job that fails or diverges is logged and sends nothing.
* **Durability** in the data directory: the ledger (``ledger/``: the SQLite block store and the blob files
  of ``ledger.store``; every blob the core stores goes straight to disk) and the replica's vote log
  (``votes.bin``). Each batch of effects is executed in this order: decided blocks to the store, then the
  vote log (written and fsynced), then the messages, so a restarted node never signs two different things
  for one (height, view), and its vote record is never ahead of its chain.
* **Restart.** The node replays its stored chain (the chain rules of ``ledger verify`` without
  re-execution: these blocks were checked when they were decided) to its head state and model (fetched from
  peers if its blob had not arrived), restores its replica from the vote log, and rejoins;
  blocks decided meanwhile arrive through the replica's sync (``SendBlocks``, served from peers' stores).
* **A failed start** (a listen address in use, a vote log missing or corrupt, a ledger of another chain, ...)
  leaves the data dir as it found it: the checks that only read come first
  (:func:`check_data_dir`, :func:`node.config.check_listen`), an existing ledger is opened read-only (its journal
  mode and ``-wal``/``-shm`` untouched) until the transport listens, and what the start created before ``started``
  (a new ledger, the data dir itself) is removed again if it fails (:class:`_StartUndo`).

Logs: one line per event, human-readable or JSON lines (``log_format="json"``: ``{"ts", "level", "event",
...}``), and a status line every ``status_every_s`` seconds (height, view, role, peers, last block, dropped
inputs). With ``NodeOptions.http`` it also serves the ledger explorer over its live ledger, with ``/status`` and
``/metrics`` (:mod:`node.explorer`, Hypercorn on trio in the node's nursery). :func:`run_node` returns on cancellation (SIGINT/SIGTERM in ``concilium node start``) with the
store closed cleanly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import trio

from ledger import (
    BlobError, Block, Caches, ChainContext, ChainState, Genesis, KeyPair, LedgerError, apply_block, genesis_state, sha256,
)
from ledger.store import (
    BLOB_BYTES_MAX,
    BLOBS_DIR,
    CHAIN_FILE,
    FileBlobStore,
    SqliteBlockStore,
    StoreError,
    create_ledger,
)
from consensus import DurableStateError
from learning import LearningError, PublicEval, blob_to_vector, vector_to_blob
from node._deadlines import read_rate_floor
from node._errors import ConfigFileError, NodeError, PersistError
from node.config import STATUS_FILE, check_listen, tcp_endpoint, write_file_atomic
from node.adversary import NodeAdversary
from node._rounds import RoundHistory, RoundRules
from node._wire import Envelope, decode_envelope
from node.core import Check, Decided, Misbehavior, NodeCore, Train, TrainJob, TrainResult, Transmit, referenced_blobs
from node.runtime._frames import FrameError
from node.runtime._stalls import LoopStalls
from node.runtime._transport import Transport, TransportLimits
from node.runtime._votelog import VoteLog

__all__ = ["NodeOptions", "NodeRuntime", "Trainer", "check_data_dir", "run_node"]

CATCH_UP_TICKS_MAX = 50
DECODE_INLINE_BYTES = 256 << 10
"""Frames up to this size are decoded on the event loop (a bounded decode refuses the worst of them in about a
millisecond); larger ones in a worker thread."""
DECODES_MAX = 2
"""Large frames decoded at once (each holds its frame and what its decode builds: a few times its size at most)."""
BLOBS_HASHED_AHEAD = DECODES_MAX + 2
"""Model-sized blobs whose digests the hash memo keeps (``ledger.Caches(blob_bytes=)``): those hashed in a worker
thread before the loop reads them (the large frames decoded at once, a trained update, and one more), so that a
45 MB update is not hashed again on the loop because another one pushed it out of a memo of one (seen in a
profile of the loop's longest steps: 96 ms). The cost: up to that many blobs kept alive after the round that
used them."""
FETCHES_MAX = 4
"""Blob fetches in flight at once (each holds at most one blob of ``data_frame_max`` bytes)."""
ARCHIVE_RETRY_TICKS = 5
SCRUB_EVERY_S = 600.0
"""Between two background scrubs of a node's archive (:meth:`NodeRuntime._scrub`); the first runs at start."""
WAITING_LOG_S = 5.0
"""While a stopping node still lacks blobs: how often it logs what it waits for."""
LEDGER_DIR = "ledger"
VOTE_LOG = "votes.bin"
VOTES_CHECKED = 64
"""Stored blocks whose commit certificates a start reads for this key's signature when ``votes.bin`` is missing."""

Trainer = Callable[[TrainJob], TrainResult | None]
"""A local training job (runs in a worker thread): the update, or None if it failed (nothing is sent)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeOptions:
    listen: tuple[str, ...] = ("/ip4/0.0.0.0/tcp/4001",)
    peers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Known addresses by peer id (the genesis ``addr=`` entries and ``--peer`` flags)."""
    status_every_s: float = 5.0
    log_format: str = "human"
    stop_at_height: int | None = None
    """Return once this height is stored (``linger_s`` later); None: once the genesis' last round
    (``protocol.fl_rounds``) is stored, stop training and ticking but keep serving peers until cancelled."""
    wait_peers_s: float = 30.0
    """Before the first round: wait this long at most for a connection to every peer with a known address
    (a network whose nodes start together then begins its first round together)."""
    linger_s: float = 3.0
    """After ``stop_at_height``: keep serving peers this long (they may still need the last block or blobs)."""
    limits: TransportLimits = field(default_factory=TransportLimits)
    archive_wait_s: float = 60.0
    """After ``stop_at_height``: how long to wait for the blobs the archive still lacks (``--archive-wait``)."""
    reset_votes: bool = False
    """Start although ``votes.bin`` is missing and the ledger holds blocks (``--reset-votes``): the operator says
    no vote of this key can be in flight (see :func:`check_data_dir`)."""
    http: str | None = None
    """``HOST:PORT`` to serve the ledger explorer, ``/status`` and ``/metrics`` on (``node.explorer``; needs the
    ``web`` extra), or None for no HTTP endpoint."""


class EventLog:
    """Structured events to a text stream: ``human`` (one readable line) or ``json`` (one object per line)."""

    def __init__(self, stream: Any = None, *, fmt: str = "human", name: str = "") -> None:
        if fmt not in ("human", "json"):
            raise ValueError(f"log format must be 'human' or 'json', got {fmt!r}")
        self._stream = stream if stream is not None else sys.stderr
        self._fmt = fmt
        self._name = name

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._fmt == "json":
            line = json.dumps({"ts": round(time.time(), 3), "level": level, "event": event, **fields}, default=str)
        else:
            stamp = time.strftime("%H:%M:%S")
            parts = " ".join(f"{k}={_human(v)}" for k, v in fields.items())
            line = f"{stamp} {level.upper():5} {self._name} {event} {parts}".rstrip()
        try:
            print(line, file=self._stream, flush=True)
        except (BrokenPipeError, ValueError):  # nobody reads our log any more: keep running
            pass


def _human(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ",".join(_human(x) for x in v) or "-"
    if isinstance(v, dict):
        return ",".join(f"{k}:{x}" for k, x in v.items()) or "-"
    return str(v)


class _LogBridge(logging.Handler):
    """py-libp2p's and our transport's warnings through our event log (one line each, never a multi-line dump)."""

    def __init__(self, log: EventLog) -> None:
        super().__init__(level=logging.WARNING)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("libp2p.transport") and "Failed to open TCP stream" in str(record.msg):
            return  # a dial to a peer not up yet: the transport retries and counts it (stats.dials_failed)
        try:
            msg = record.getMessage().splitlines()[0][:300] if record.getMessage() else ""
        except Exception:  # noqa: BLE001 - a log record must never take the node down
            msg = record.msg if isinstance(record.msg, str) else "?"
        event = "transport" if record.name.startswith("node.") else "libp2p"
        self._log(event, level="warning", source=record.name, message=msg)


@dataclass(frozen=True, slots=True)
class StoredChain:
    """A node's ledger opened and replayed (:func:`load_chain`)."""

    store: SqliteBlockStore
    blobs: FileBlobStore
    state: ChainState
    model: np.ndarray | None
    """The head model; None when its blob is missing (the node then fetches it from its peers)."""
    history: RoundHistory | None
    """The staleness window of a semi-synchronous strategy, as the live node had it (None: none is kept)."""
    ctx: ChainContext
    """The chain context the replay used, holding the node's memos (:class:`ledger.Caches`), which its blob store
    shares: the core is given it."""


def load_chain(
    genesis: Genesis, data_dir: Path, initial_model: np.ndarray, *, public: PublicEval | None = None,
    write_later: bool = False, caches: Caches | None = None,
) -> StoredChain:
    """Open (or create) the node's ledger in ``data_dir`` and replay it to its head.

    ``write_later``: open an existing ledger read-only (its file stays as it is, journal mode included, until the
    caller reopens it for writing: :meth:`NodeRuntime._open_for_writing`, once its start can no longer fail); a
    missing one is created all the same.

    For a semi-synchronous strategy (FedAsync, Sself: ``max_staleness`` > 0) the replay also rebuilds the
    round history the core keeps (who trained at each recent height, the models those rounds started from,
    which updates are in), as the auditor's re-execution does, so a restarted node plans the next round
    like its peers. The plans depend on the whole chain, so every block is planned; model blobs are read
    for the last ``max_staleness`` heights only.

    ``caches``: the memos the node's blob store and chain context share (a new :class:`ledger.Caches` if None)."""
    g_blob = vector_to_blob(np.ascontiguousarray(initial_model, dtype=np.float32))
    if caches is None:  # (worker threads hash too: Check, a trained update, a large frame's blobs)
        caches = Caches(lock=threading.Lock(), blob_bytes=max(64 << 20, BLOBS_HASHED_AHEAD * len(g_blob)))
    ldir = data_dir / LEDGER_DIR
    if sha256(g_blob) != genesis.model.digest:
        raise ValueError("the initial model does not match the genesis model digest")
    if (ldir / CHAIN_FILE).exists():
        store = SqliteBlockStore.open(ldir / CHAIN_FILE, readonly=write_later, copy_wal=write_later)
        blobs = FileBlobStore(ldir / BLOBS_DIR, caches=caches)
        try:
            _check_chain(store, genesis)
        except StoreError:
            store.close()
            raise
    else:
        store, blobs = create_ledger(ldir, genesis, caches=caches)
    blobs.put(g_blob)
    ctx = ChainContext(genesis, caches=caches)
    state = genesis_state(ctx)
    try:
        rules: RoundRules | None = RoundRules(genesis, ctx=ctx, public=public)
    except LearningError:  # a strategy this host cannot run (the core says why when it is built)
        rules = None
    history = rules.new_history() if rules is not None and rules.staleness > 0 else None
    height = store.height()
    try:
        for h in range(1, height + 1):
            block = store.get(h)
            if history is not None and rules is not None:
                before = None
                if h > height - history.window and blobs.has(state.model_digest):
                    before = np.array(blob_to_vector(blobs.get(state.model_digest)), dtype=np.float32)
                history.record(rules.plan(state, history), before, block.payload)
            state = apply_block(ctx, state, block)
    except LedgerError as e:
        store.close()
        raise StoreError(f"{ldir}: stored chain does not verify: {e}") from None
    model: np.ndarray | None = None
    if blobs.has(state.model_digest):
        model = np.array(blob_to_vector(blobs.get(state.model_digest)), dtype=np.float32)
        if model.shape != (initial_model.shape[0],):
            model = None
    return StoredChain(store, blobs, state, model, history, ctx)


def check_data_dir(data_dir: Path, genesis: Genesis, peer: str, *, reset_votes: bool = False) -> bytes | None:
    """The checks of a node's data dir that only read it, before its start creates or opens anything for writing;
    returns the vote log's record (None: no vote log). ``node start`` runs them before its heavy imports too.

    * The vote log reads (:class:`VoteLogError` if torn or corrupt).
    * The ledger, if there is one, is this chain's (:class:`StoreError`; :func:`load_chain` checks the rest).
    * Refuse (:class:`DurableStateError`) when the vote log is gone but the ledger holds blocks ``peer`` signed (in
      the last ``VOTES_CHECKED`` commit certificates: a voter, whose log existed): the log is what keeps a restarted
      node from signing two different votes for one (height, view), so a node that lost it could equivocate without
      knowing; ``reset_votes`` (``--reset-votes``) starts it anyway. A member that never voted (an observer) has no
      log to lose."""
    record = VoteLog(data_dir / VOTE_LOG).load()
    chain = data_dir / LEDGER_DIR / CHAIN_FILE
    if not chain.exists():
        return record  # a new node
    with SqliteBlockStore.open(chain, readonly=True, check_index=False, copy_wal=True) as store:
        _check_chain(store, genesis)
        if record is not None or reset_votes:
            return record
        height = store.height()
        try:
            signed = any(s.signer == peer for h in range(max(1, height - VOTES_CHECKED + 1), height + 1)
                         for s in store.get(h).certificate.signatures)
        except (StoreError, LedgerError):
            return record  # (load_chain says what is wrong with the ledger)
    if signed:
        raise DurableStateError(
            f"{data_dir / VOTE_LOG}: missing, but the ledger holds {height} blocks: the vote log keeps this node from "
            "signing two different votes for one height and view; start with --reset-votes only if no vote of this "
            "key can be in flight (no other process runs this key)")
    return record


def _check_chain(store: SqliteBlockStore, genesis: Genesis) -> None:
    if store.genesis().hash() != genesis.hash():
        raise StoreError(f"{store.path.parent}: holds the ledger of another chain ({store.genesis().chain_id}); use "
                         "another data dir")


class NodeRuntime:
    """One node (see the module docstring). Build it, then ``await runtime.run()`` inside trio."""

    def __init__(
        self,
        *,
        genesis: Genesis,
        key: KeyPair,
        data_dir: str | os.PathLike[str],
        initial_model: np.ndarray,
        trainer: Trainer,
        options: NodeOptions = NodeOptions(),
        log: EventLog | None = None,
        core_factory: Callable[..., NodeCore] = NodeCore,
        adversary: NodeAdversary | None = None,
        public: PublicEval | None = None,
    ) -> None:
        """``adversary``: the scenario's faults as they apply to this node (``node.adversary``), or None.
        ``public``: the public-split evaluator of a strategy that scores models on one (Sself), or None."""
        if key.peer_id not in genesis.member_ids:
            raise ValueError(f"key {key.peer_id} is not a member of chain {genesis.chain_id}")
        self.genesis = genesis
        self.key = key
        self.me = key.peer_id
        self.data_dir = Path(data_dir)
        self.options = options
        self.log = log if log is not None else EventLog(fmt=options.log_format)
        self._trainer = trainer
        self._tick_ms = genesis.protocol.timeouts.tick_ms
        # A failed start leaves the data dir as it was: first what can fail and only reads (the
        # listen addresses, the vote log), then the ledger, an existing one opened read-only until run() listens;
        # whatever the start creates before `started` is removed again if it fails (_StartUndo).
        check_listen(options.listen)
        restore = check_data_dir(self.data_dir, genesis, self.me, reset_votes=options.reset_votes)
        self._votes = VoteLog(self.data_dir / VOTE_LOG)
        self._undo = _StartUndo(self.data_dir, genesis.model.digest)
        try:
            self._open(initial_model, restore, core_factory=core_factory, adversary=adversary, public=public)
        except BaseException:
            self._abandon()
            raise

    def _open(
        self, initial_model: np.ndarray, restore: bytes | None, *, core_factory: Callable[..., NodeCore],
        adversary: NodeAdversary | None, public: PublicEval | None,
    ) -> None:
        """The rest of ``__init__``: the ledger replayed, the core and the transport built."""
        genesis, key, options = self.genesis, self.key, self.options
        self.data_dir.mkdir(parents=True, exist_ok=True)
        chain = load_chain(genesis, self.data_dir, initial_model, public=public, write_later=True)
        self.store, state, model = chain.store, chain.state, chain.model
        self._fatal: NodeError | None = None  # the error that stops the node (_stop_fatal)
        self._status_lock = trio.Lock()  # (status.json: one write at a time, _write_status)
        self.blobs = _Blobs(chain.blobs, chain.ctx.caches.sha256, self._stop_fatal)
        self._start_tick = self._wall_tick()
        awaiting = model is None
        self.core = core_factory(
            genesis=genesis,
            key=key,
            initial_model=model if model is not None else initial_model,
            blobs=self.blobs,
            state=state,
            block_source=self._stored_block,
            archive=True,
            start_tick=self._start_tick,
            replica_restore=restore,
            model_missing=awaiting,
            behavior=adversary,
            public=public,
            offload_checks=True,
            history=chain.history,
            ctx=chain.ctx,
        )
        self.adversary = adversary
        if adversary is not None:
            adversary.core = self.core
        self._public = public
        self._nursery: trio.Nursery | None = None
        self._votes_version = self.core.replica.durable_version
        self._batches: deque[tuple[Sequence[Any], bytes | None]] = deque()  # effects to execute, in order (_executing)
        self._batch_ready = trio.Event()
        self._checks = trio.CapacityLimiter(1)  # one round re-executed at a time, beside the training thread
        self.checks_run = 0  # proposals' rounds re-executed in the worker thread (Check), and the longest
        self.check_longest_s = 0.0
        self._jobs: list[TrainJob] = []
        self._job_ready = trio.Event()
        self._tick = self._start_tick
        self._decided_at: float | None = None
        self._last_block: Block | None = None
        self.view_changes = 0
        self.sent = Counter[str]()
        self.evidence = 0
        self.trained = 0
        self.train_failures = 0
        self.train_seconds = 0.0
        self.rounds = 0  # blocks this process stored (decided or synced): /metrics
        self.blobs_missing = 0
        """Referenced blobs still missing when the node stopped at its height (> 0: ``node start`` exits 1)."""
        self.scrubs = {"checked": 0, "missing": 0, "corrupt": 0}
        """What the archive scrubs found (the last scrub's counts)."""
        self._eval_height = 0  # the newest stored height whose model this member has not yet evaluated locally
        self.local_eval: dict[str, Any] | None = None
        """The last committed model's accuracy and loss on this member's own validation split."""
        self.stored_height = self.store.height()
        self.last_height = min(options.stop_at_height or genesis.protocol.fl_rounds, genesis.protocol.fl_rounds)
        self._height_event = trio.Event()
        self.transport = Transport(
            key=key,
            chain_id=genesis.chain_id,
            members=genesis.member_ids,
            addresses=options.peers,
            listen=options.listen,
            on_frame=self._on_frame,
            serve_blob=self._serve_blob,
            limits=_paced(options.limits, genesis),
        )
        self._fetching: set[bytes] = set()  # digests being fetched now
        self._fetch_slots = trio.CapacityLimiter(FETCHES_MAX)
        self._decode_slots = trio.CapacityLimiter(DECODES_MAX)
        self.fetched = 0
        self._stalls = LoopStalls()  # the event loop's longest steps (status: loop)
        for name in ("libp2p", "node.runtime._transport"):  # their records go to our log only, one line each
            lg = logging.getLogger(name)
            lg.handlers = [h for h in lg.handlers if not isinstance(h, _LogBridge)] + [_LogBridge(self.log)]
            lg.propagate = False

    def _abandon(self) -> None:
        """A start failed before ``started``: close the store, then remove what the start created."""
        store = getattr(self, "store", None)
        if store is not None:
            store.close()
        self._undo.run()

    def _open_for_writing(self) -> None:
        """Reopen a ledger opened read-only (``load_chain(write_later=True)``) for writing: once the start can no
        longer fail (run(), listening), or before a block is stored, whichever comes first."""
        if not self.store.readonly:
            return
        ro = self.store
        rw = SqliteBlockStore.open(ro.path)
        if (rw.height(), rw.head_hash()) != (ro.height(), ro.head_hash()):
            rw.close()
            raise StoreError(f"{ro.path}: changed under this node (height {rw.height()}, it read {ro.height()}): "
                             "is another process running on this data dir?")
        ro.close()
        self.store = rw

    def _check_listening(self) -> None:
        """Every listen address is bound: py-libp2p only logs a listener that fails, and the node would run deaf."""
        got = {ep[1:] for a in self.transport.listen_addrs() if (ep := tcp_endpoint(a)) is not None}
        failed = [a for a in self.options.listen if (ep := tcp_endpoint(a)) is not None and ep[2] and ep[1:] not in got]
        if failed or not got:
            raise ConfigFileError(f"listen {(failed or list(self.options.listen) or ['-'])[0]}: cannot listen "
                                  "(address in use or not on this host)")

    # --- wall clock -------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """The last round is stored: no more training or ticks (the node still answers its peers)."""
        return self.stored_height >= self.last_height

    def _wall_tick(self) -> int:
        return max(0, (int(time.time() * 1000) - self.genesis.genesis_time_ms) // self._tick_ms)

    # --- effects -------------------------------------------------------------------------------------

    def _execute(self, effects: Sequence[Any]) -> None:
        """Run the core's effects: decided blocks to the store first, then the vote log, then the rest in order.

        The order is what a restart relies on: the replica's record for height h+1 never reaches the disk
        before block h (a restored replica refuses a record from beyond its store, as it must), and whatever
        the replica signed in this batch is on disk before any of it is sent.

        Once the node runs, the batch goes to :meth:`_executing`, which writes the model blobs and fsyncs the vote
        log in a worker thread, so that no write holds the event loop; batches run one at a time, in the order the
        core made them. The replica's record is taken here, with the batch: a later batch's record (of a later
        height) must not reach the disk before this batch's blocks."""
        record = None
        v = self.core.replica.durable_version
        if v != self._votes_version:
            record = self.core.replica.durable()
            self._votes_version = v
        if self._nursery is None:  # (before the node runs: at once)
            for fx in effects:
                if isinstance(fx, Decided):
                    self._model_blob(fx)
                    self._store_decided(fx)
            if record is not None:
                self._votes.save(record)
            self._dispatch(effects)
            return
        self._batches.append((effects, record))
        self._batch_ready.set()

    async def _executing(self) -> None:
        """Execute the batches :meth:`_execute` queued, one at a time, in order. A block or vote that cannot be
        written stops the node (:meth:`_stop_fatal`): it must not vote beyond what its disk holds."""
        try:
            await self._execute_batches()
        except (OSError, LedgerError, NodeError) as e:
            self._stop_fatal(e)

    async def _execute_batches(self) -> None:
        while True:
            await self._batch_ready.wait()
            self._batch_ready = trio.Event()
            while self._batches:
                effects, record = self._batches.popleft()
                decided = False
                for fx in effects:
                    if isinstance(fx, Decided):
                        await trio.to_thread.run_sync(self._model_blob, fx)
                        self._store_decided(fx)
                        decided = True
                if decided and self.core.staleness == 0:
                    # this node's round moved on: its updates still queued are for a decided round, which counts no
                    # late update; they would only delay the next round's behind them on a slow link
                    self.transport.discard_queued("update")
                if record is not None:
                    await trio.to_thread.run_sync(self._votes.save, record)
                self._dispatch(effects)

    def _stop_fatal(self, error: BaseException) -> NodeError:
        """The node cannot persist (``error``): log one line, cancel every task, and make :meth:`run` raise a
        :class:`node.PersistError` (the first such error; what the cancelled tasks meet after it is not reported)."""
        if isinstance(error, NodeError):
            fatal = error
        else:
            why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            fatal = PersistError(f"{getattr(error, 'filename', None) or self.data_dir}: cannot write: {why}")
        if not _on_trio_thread():  # a worker thread (a decided model's write): the task awaiting it stops the node
            return fatal
        if self._fatal is None:
            self._fatal = fatal
            self.log("fatal", level="error", error=str(fatal))
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()
        return self._fatal

    def _dispatch(self, effects: Sequence[Any]) -> None:
        """The batch's effects after its blocks and votes are on disk: messages, training jobs, checks, evidence."""
        for fx in effects:
            if isinstance(fx, Transmit):
                self.sent[fx.kind] += 1
                if fx.kind == "want" and self._nursery is not None:
                    self._fetch_wanted(fx)
                else:
                    self._send(fx.to, fx.data, fx.kind)
            elif isinstance(fx, Train):
                if fx.job.fl_round <= self.last_height and not self.finished:
                    self._jobs.append(fx.job)
                    self._job_ready.set()
            elif isinstance(fx, Check):
                if self._nursery is not None:
                    self._nursery.start_soon(self._check, fx)
                else:
                    self._execute(self.core.on_checked(fx, fx.run()))
            elif isinstance(fx, Misbehavior):
                self.evidence += 1
                ev = fx.evidence
                self.log("evidence", level="warning", kind=ev.kind, offender=ev.offender, height=ev.height, view=ev.view, reason=ev.reason)

    async def _check(self, fx: Check) -> None:
        """Re-execute a proposal's round in a worker thread (``NodeCore(offload_checks=True)``): a 45 MB model's
        aggregation then never holds the event loop, where the votes, the frames and the clock run."""
        try:
            began = time.perf_counter()
            outcome = await trio.to_thread.run_sync(fx.run, limiter=self._checks)
            self.checks_run += 1
            self.check_longest_s = max(self.check_longest_s, time.perf_counter() - began)
        except Exception as e:  # (a bug, not the proposer's fault: no verdict; the view's timer refuses unprovably)
            self.log("check_failed", level="error", height=fx.height, block=fx.block_hash.hex()[:16], error=repr(e))
            self._execute(self.core.on_checked(fx, None))
            return
        self._execute(self.core.on_checked(fx, outcome))

    def _send(self, to: str, data: bytes, kind: str) -> None:
        if self.adversary is None:
            self.transport.send(to, data, kind)
            return
        out = self.adversary.outgoing(to, data)  # a faulty node drops, delays or equivocates what it sends
        if out is None:
            return
        delay, data = out
        if delay <= 0 or self._nursery is None:
            self.transport.send(to, data, kind)
        else:
            self._nursery.start_soon(self._send_later, delay, to, data, kind)

    async def _send_later(self, delay: float, to: str, data: bytes, kind: str) -> None:
        await trio.sleep(delay)
        self.transport.send(to, data, kind)

    def _serve_blob(self, digest: bytes) -> bytes | None:
        if self.adversary is not None and self.adversary.silent:
            self.adversary.counts["dropped"] += 1
            return None
        return self.core.servable(digest)

    def _fetch_wanted(self, fx: Transmit) -> None:
        """The core asks ``fx.to`` for blobs (a ``want`` envelope, its digests ``fx.want``): fetch them by digest, in
        chunks, over the fetch protocol instead (the core retries what does not arrive, asking the next peer in
        turn)."""
        peer = fx.to
        if self.adversary is not None and self.adversary.outgoing(peer, fx.data) is None:
            return  # a node that the scenario cuts off asks nobody
        digests = [d for d in fx.want if d not in self._fetching]
        if digests:
            assert self._nursery is not None  # the caller checked
            self._fetching.update(digests)
            self._nursery.start_soon(self._fetch, peer, digests)

    async def _fetch(self, peer: str, digests: list[bytes]) -> None:
        try:
            async with self._fetch_slots:
                for digest in digests:
                    blob = await self.transport.fetch(peer, digest)
                    self._fetching.discard(digest)
                    if blob is not None:
                        self.fetched += 1
                        self._execute(self.core.on_fetched(blob, peer))
        finally:
            self._fetching.difference_update(digests)

    def _model_blob(self, fx: Decided) -> None:
        """Store a decided block's model blob, when this node holds the model as a vector (otherwise the core
        fetches the blob into the blob store, and a restart before it arrives resumes without the model). Safe in
        a worker thread: the blob store is content-addressed, each file written whole and renamed."""
        if fx.model is not None and not self.blobs.has(fx.block.payload.model_digest):
            self.blobs.put(vector_to_blob(np.ascontiguousarray(fx.model, dtype=np.float32)))

    def _store_decided(self, fx: Decided) -> None:
        """Append a decided block, after its model blob (:meth:`_model_blob`)."""
        block = fx.block
        if block.header.height <= self.store.height():
            return
        self._open_for_writing()
        self.store.append(block)  # a store that cannot append is fatal: the node stops (votes must not outrun it)
        self.stored_height = block.header.height
        self.rounds += 1
        self._last_block = block
        self._on_stored(block)

    def _on_stored(self, block: Block) -> None:
        p = block.payload
        view = block.header.view
        if view:
            self.view_changes += view
        self.log(
            "decided",
            height=block.header.height,
            view=view,
            hash=block.hash().hex()[:16],
            model=p.model_digest.hex(),
            accepted=sorted(f"{u.peer}:{u.fl_round}" for u in p.updates),
            committee=list(p.next_committee),
            proposer=block.header.proposer,
            evidence=len(p.evidence),
            time_ms=block.header.time_ms,
        )
        on_decided = getattr(self._trainer, "on_decided", None)
        if on_decided is not None:
            on_decided(block)
        if getattr(self._trainer, "evaluate", None) is not None:  # (in the training thread, after its jobs)
            self._eval_height = block.header.height
            self._job_ready.set()
        self._height_event.set()
        self._height_event = trio.Event()

    def _check_blobs(self, digests: Sequence[bytes]) -> tuple[list[bytes], list[bytes]]:
        """``(missing, corrupt)`` among ``digests`` (a worker thread: file reads and hashes only)."""
        missing, corrupt = [], []
        for d in digests:
            if not self.blobs.has(d):
                missing.append(d)
                continue
            try:
                self.blobs.get(d)  # (re-hashes: a file whose bytes changed does not match its name)
            except (StoreError, LedgerError, OSError):
                corrupt.append(d)
        return missing, corrupt

    async def _scrub(self) -> None:
        """Check that every blob the stored blocks reference is here and matches its digest; remove a corrupt one
        and want every missing one from the peers (the core asks them in turn), saying so. The blocks are read here
        (the store's connection belongs to this thread), the blobs hashed in a worker thread."""
        seen: dict[bytes, None] = {}
        for h in range(1, self.store.height() + 1):
            for d in referenced_blobs(self.store.get(h).payload):
                seen.setdefault(d, None)
        digests = list(seen)
        missing, corrupt = await trio.to_thread.run_sync(self._check_blobs, digests)
        for d in corrupt:
            self.blobs.discard(d)
        self.scrubs = {"checked": len(digests), "missing": len(missing), "corrupt": len(corrupt)}
        if missing or corrupt:
            self.log("scrub", level="warning", **self.scrubs, refetching=len(missing) + len(corrupt),
                     first=(missing + corrupt)[0].hex()[:16])
            self._execute(self.core.want_blobs(missing + corrupt))
        else:
            self.log("scrub", level="debug", **self.scrubs)

    async def _scrubbing(self) -> None:
        while True:
            await self._scrub()
            await trio.sleep(SCRUB_EVERY_S)

    def _stored_block(self, height: int) -> Block | None:
        if 1 <= height <= self.store.height():
            try:
                return self.store.get(height)
            except (StoreError, LedgerError):
                return None
        return None

    # --- inputs ----------------------------------------------------------------------------------

    def _on_frame(self, sender: str, data: bytes) -> Any:
        """A frame from ``sender`` (the transport's ``on_frame``): decoded now, or, over :data:`DECODE_INLINE_BYTES`,
        in a worker thread (then this returns the coroutine that does it, which the transport awaits)."""
        if len(data) > DECODE_INLINE_BYTES:
            return self._on_large_frame(sender, data)
        self._deliver(sender, *_decode(data))
        return None

    async def _on_large_frame(self, sender: str, data: bytes) -> None:
        async with self._decode_slots:
            decoded = await trio.to_thread.run_sync(self._decode_and_hash, data)
        del data  # the frame goes (a blob's bytes live on in the envelope) before the core handles it
        self._deliver(sender, *decoded)

    def _decode_and_hash(self, data: bytes) -> tuple[Envelope | None, str]:
        """In a worker thread: :func:`_decode`, then the digests of the blobs it carries, remembered by the hash memo
        (:meth:`_Blobs.digest`), so that the core's check of a 45 MB update against its digest, and its store, are a
        lookup on the event loop."""
        env, error = _decode(data)
        if env is not None:
            for blob in (env.update.blob,) if env.update is not None else env.blobs or ():
                self.blobs.digest(blob)
        return env, error

    def _deliver(self, sender: str, env: Envelope | None, error: str) -> None:
        self._execute(self.core.on_envelope(sender, env))
        if env is None:
            raise FrameError("malformed", error)  # the transport charges the sender a bad frame

    async def _clock(self) -> None:
        """One ``core.tick()`` per elapsed tick of wall time; after a stall at most ``CATCH_UP_TICKS_MAX`` at once
        (the skipped ones are lost, as a sleeping machine loses them: no timer fires for them, but the core's clock
        counts them, ``NodeCore.lose_ticks``, so it stays the wall clock)."""
        while True:
            target = self._wall_tick()
            lost = target - CATCH_UP_TICKS_MAX - self._tick
            if lost > 0:
                self._tick += lost
                self.core.lose_ticks(lost)
            while self._tick < target:
                self._tick += 1
                if not self.finished:
                    self._execute(self.core.tick())
                elif self._tick % ARCHIVE_RETRY_TICKS == 0 and self.core.wanted():
                    self._execute(self.core.ask_wanted())  # no more rounds, but the archive is completed
            await trio.sleep(self._tick_ms / 1000)

    async def _evaluate_latest(self) -> None:
        """This member's validation accuracy of the newest stored block's model (the trainer's ``evaluate``), run
        in the training thread between jobs (they share the model object); an older height not yet evaluated is
        skipped. Logged as ``evaluated`` and kept for ``status.json`` and ``/metrics``."""
        h, self._eval_height = self._eval_height, 0
        block = self._stored_block(h)
        if block is None or not self.blobs.has(block.payload.model_digest):
            return  # (a synced block whose model this node has not fetched: nothing to evaluate)
        digest = block.payload.model_digest

        def evaluate() -> dict[str, Any] | None:  # (the model read and decoded in the thread too: 45 MB off the loop)
            return self._trainer.evaluate(np.array(blob_to_vector(self.blobs.get(digest)), dtype=np.float32))

        try:
            res = await trio.to_thread.run_sync(evaluate)
        except Exception as e:  # noqa: BLE001 - a failed evaluation is logged; the node goes on
            self.log("evaluated", level="warning", height=h, error=f"{type(e).__name__}: {e}")
            return
        if res is None:
            return
        self.local_eval = {"height": h, "fl_round": block.header.fl_round, **res}
        self.log("evaluated", **self.local_eval)
        await self._write_status()  # (a health check or a supervisor sees it now, not at the next status tick)

    def _train_and_encode(self, job: TrainJob) -> TrainResult | None:
        """In a worker thread: the trainer's job, then the update's blob and its digest (remembered by the blob
        store's hash memo), so that the core takes a large update from the event loop without encoding or hashing
        it (``TrainResult.blob``). None: the job failed; no blob: its update is not finite (sent nowhere)."""
        result = self._trainer(job)
        if result is None or not np.isfinite(result.delta).all():
            return result
        blob = vector_to_blob(np.ascontiguousarray(result.delta, dtype=np.float32))
        self.blobs.digest(blob)
        return dataclasses.replace(result, blob=blob)

    async def _training(self) -> None:
        while True:
            await self._job_ready.wait()
            self._job_ready = trio.Event()
            while self._jobs:
                job = self._jobs.pop(0)
                t0 = time.perf_counter()
                try:
                    result = await trio.to_thread.run_sync(self._train_and_encode, job)
                except Exception as e:  # noqa: BLE001 - a failed local job sends nothing; the node goes on
                    self.train_seconds += time.perf_counter() - t0
                    self.train_failures += 1
                    self.log("train", level="error", round=job.fl_round, purpose=job.purpose, error=f"{type(e).__name__}: {e}")
                    continue
                self.train_seconds += time.perf_counter() - t0
                if result is None or result.blob is None:  # (diverged: not finite)
                    self.train_failures += 1
                    self.log("train", level="warning", round=job.fl_round, purpose=job.purpose, error="diverged or failed")
                    continue
                self.trained += 1
                if self.adversary is not None and job.purpose == "update":
                    self.adversary.last_upload = result.delta
                self.log("trained", level="debug", round=job.fl_round, purpose=job.purpose, n=result.n_samples,
                         seconds=round(time.perf_counter() - t0, 3))
                try:
                    self._execute(self.core.on_training_done(job, result))
                except ValueError as e:
                    self.train_failures += 1
                    self.log("train", level="error", round=job.fl_round, error=str(e))
            if self._eval_height:
                await self._evaluate_latest()

    def status(self) -> dict[str, Any]:
        st = self.core.status()
        rs = self.core.replica.status()
        ts = self.transport.stats
        role = "committee" if self.me in st.committee else ("trainer" if self.me in st.trainers else "observer")
        return {
            "height": st.height,
            "stored": self.stored_height,
            "view": rs.view,
            "attempt": rs.attempt,  # > 0: this height's committee was re-drawn (ledger.ATTEMPT_VIEWS)
            "role": role,
            "peers": len(self.transport.connected()),
            "last_block": self._last_block.hash().hex()[:16] if self._last_block is not None else "-",
            "dropped": dict(st.dropped),
            "unsolicited": {"bytes": st.unsolicited_bytes, "peak": st.unsolicited_peak,
                            "bound": list(self.core.unsolicited_bounds())},
            "consensus_dropped": dict(rs.dropped),
            "view_changes": self.view_changes,
            "evidence": self.evidence,
            "fetched": self.fetched,
            "scrub": dict(self.scrubs),
            "loop": self._stalls.figures(),
            "checks": {"run": self.checks_run, "longest_ms": round(self.check_longest_s * 1000, 1)},
            "blobs_pending": self.blobs.pending,  # held in memory until the writer thread has them on disk
            **({"local_eval": dict(self.local_eval)} if self.local_eval is not None else {}),
            **({"adversary": dict(self.adversary.counts)} if self.adversary is not None else {}),
            "net": {
                "messages_out": dict(ts.messages_out), "bytes_out": dict(ts.bytes_out),
                "messages_in": dict(ts.messages_in), "bytes_in": dict(ts.bytes_in),
                "dropped": dict(ts.dropped), "banned": list(ts.banned),
            },
        }

    def metrics(self) -> dict[str, Any]:
        """``status()`` plus the counters ``/metrics`` exports (``node.explorer._metrics``)."""
        last = self._last_block
        return {
            **self.status(),
            "chain": self.genesis.chain_id,
            "peer": self.me,
            "fl_round": last.header.fl_round if last is not None else 0,
            "rounds": self.rounds,
            "trained": self.trained,
            "train_failures": self.train_failures,
            "train_seconds": self.train_seconds,
        }

    async def _serve_http(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The explorer over this node's live ledger, with ``/status`` and ``/metrics``, on ``options.http``
        (Hypercorn on trio, in this node's nursery: the endpoints read the runtime on its own event loop)."""
        assert self.options.http is not None
        from node.explorer import bind, create_app, host_names, parse_listen  # noqa: PLC0415 - the web extra
        from node.explorer._serve import serve_trio  # noqa: PLC0415

        host, port = parse_listen(self.options.http)
        public = self._public
        app = create_app(self.data_dir / LEDGER_DIR, node=self, public_for=lambda _path: public,
                         allowed_hosts=host_names(host))
        await serve_trio(app, bind(host, port), task_status=task_status)

    async def _status(self) -> None:
        while True:
            await self._write_status()
            await trio.sleep(self.options.status_every_s)
            self.log("status", **self.status())

    async def _write_status(self) -> None:
        """``status.json`` in the data dir, replaced atomically (``concilium node status`` and health checks): read
        on the loop, written in a worker thread (its fsyncs wait behind the disk's queue of 45 MB blob writes: 0.1 s
        and more on the loop), one write at a time."""
        try:
            async with self._status_lock:  # (read under the lock: a write never replaces a newer status)
                st = {"ts": round(time.time(), 3), "peer": self.me, "chain": self.genesis.chain_id, "pid": os.getpid(),
                      **self.status()}
                data = (json.dumps(st) + "\n").encode()
                await trio.to_thread.run_sync(
                    functools.partial(write_file_atomic, self.data_dir / STATUS_FILE, data, overwrite=True))
        except (OSError, NodeError) as e:
            self.log("status", level="warning", error=f"cannot write {STATUS_FILE}: {e}")

    async def _wait_peers(self) -> None:
        want = set(self.options.peers)
        with trio.move_on_after(self.options.wait_peers_s):
            while not want <= set(self.transport.connected()):
                await trio.sleep(0.05)
        self.log("peers", connected=len(self.transport.connected()), known=len(want))

    async def wait_height(self, height: int) -> None:
        while self.stored_height < height:
            await self._height_event.wait()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled (or until ``options.stop_at_height`` is stored, then ``linger_s`` more).

        A start that fails before ``started`` (an address it cannot listen on) raises its one error (not an
        exception group) once the nursery is closed, and leaves the data dir as it found it. A node that cannot
        write its data dir once running (a full disk) stops and raises one :class:`node.PersistError`, whichever
        task met it."""
        trio.lowlevel.add_instrument(self._stalls)
        try:
            await self._run(task_status)
        except BaseException as e:
            if self._fatal is None or isinstance(e, KeyboardInterrupt):
                raise
            # what the cancelled tasks met after the node could not persist (a write that failed in a frame's handler
            # raised there too): the one error is the first (below)
        finally:
            with contextlib.suppress(KeyError):  # (another run of this runtime's loop may have removed it)
                trio.lowlevel.remove_instrument(self._stalls)
        if self._fatal is not None:
            raise self._fatal

    async def _run(self, task_status: Any) -> None:
        started = False
        refused: Exception | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._executing)
                nursery.start_soon(self.blobs.writing)
                if self.options.http is not None:
                    self.log("http", url=await nursery.start(self._serve_http))
                await nursery.start(self.transport.run)
                refused = self._refusal()
                if refused is not None:
                    nursery.cancel_scope.cancel()
                else:
                    self.log("started", peer=self.me, height=self.store.height(), addrs=self.transport.listen_addrs(),
                             chain=self.genesis.chain_id, limits=_changed_limits(self.options.limits))
                    started = True
                    task_status.started()
                    await self._serve(nursery)
        finally:
            self.log("stopped", height=self.store.height(), status=self.status() if hasattr(self, "core") else {})
            if started:
                if self._fatal is None:
                    self.blobs.write_rest()
                self.store.close()
            else:
                self._abandon()  # (e.g. an address in use, or stopped before it listened)
        if refused is not None:
            raise refused

    def _refusal(self) -> Exception | None:
        """The last steps of a start, once the transport runs: every listen address bound, the ledger reopened for
        writing; the error that refuses the start, or None (nothing after this can fail)."""
        try:
            self._check_listening()
            self._open_for_writing()
        except (ConfigFileError, StoreError) as e:
            return e
        return None

    async def _serve(self, nursery: trio.Nursery) -> None:
        """A started node: rounds until the last one is stored (see :meth:`run`)."""
        await self._wait_peers()
        self._execute(self.core.start())
        nursery.start_soon(self._clock)
        nursery.start_soon(self._training)
        nursery.start_soon(self._status)
        await self._scrub()  # the archive as the disk holds it: what is missing or corrupt is fetched again
        nursery.start_soon(self._scrubbing)
        await self.wait_height(self.last_height)
        with trio.move_on_after(self.options.archive_wait_s if self.options.stop_at_height is not None else 0):
            waited = 0.0
            while self.core.wanted():  # every referenced blob on disk: the ledger re-executes
                await trio.sleep(0.1)
                waited += 0.1
                if waited >= WAITING_LOG_S:
                    waited = 0.0
                    self.log("waiting", level="warning", blobs_missing=self.core.wanted(),
                             peers=len(self.transport.connected()),
                             why="no peer connected" if not self.transport.connected() else "asking peers")
        self.blobs_missing = self.core.wanted()
        self.log("done", height=self.stored_height, blobs_missing=self.blobs_missing,
                 level="error" if self.blobs_missing else "info")
        if self.options.stop_at_height is not None:
            await trio.sleep(self.options.linger_s)
            nursery.cancel_scope.cancel()


class _StartUndo:
    """What a failed start removes again, so that it leaves the data dir as it found it: every
    path under ``root`` that was not there when the start began (a new directory with all it holds), ``root`` with
    its parents if the start created them, and the genesis model's blob if the start stored it. Never the vote log: a
    vote it records may have left the node.

    The blob files of the fan-out directories that were there are not listed (an archive may hold many): a start
    stores no blob into them but the genesis model's (``load_chain``; the core's ``put`` of the head model finds it
    there), which :meth:`run` removes by its digest."""

    def __init__(self, root: Path, genesis_model: bytes) -> None:
        self.root = root
        self._created: list[Path] = []  # the data dir and its missing parents, deepest first
        p = root.absolute()
        while not p.exists() and p != p.parent:
            self._created.append(p)
            p = p.parent
        self._before = _tree(root)
        blobs = root / LEDGER_DIR / BLOBS_DIR
        self._genesis_model = None if blobs.is_dir() and FileBlobStore(blobs, readonly=True).has(genesis_model) \
            else genesis_model

    def run(self) -> None:
        if self._genesis_model is not None and (self.root / LEDGER_DIR / BLOBS_DIR).is_dir():
            FileBlobStore(self.root / LEDGER_DIR / BLOBS_DIR).discard(self._genesis_model)
        for name in sorted(_tree(self.root) - self._before, key=lambda n: n.count(os.sep), reverse=True):
            p = Path(name)
            if p == self.root / VOTE_LOG:
                continue
            try:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)  # (a directory this start created holds nothing else)
                else:
                    p.unlink()
            except OSError:
                pass
        for d in self._created:
            try:
                d.rmdir()
            except OSError:
                break  # (it holds the vote log)


def _tree(root: Path) -> set[str]:
    """The paths under ``root`` (links not followed), but not the files in the blob store's fan-out directories;
    empty if ``root`` is no directory."""
    out: set[str] = set()
    blobs = os.path.join(root, LEDGER_DIR, BLOBS_DIR)
    for top, dirs, files in os.walk(root):
        out.update(os.path.join(top, n) for n in (*dirs, *files))
        if top == blobs:
            dirs.clear()
    return out


def _decode(data: bytes) -> tuple[Envelope | None, str]:
    """``(envelope, "")``, or ``(None, why)`` for bytes that do not decode (thread-safe: no memo)."""
    try:
        return decode_envelope(data), ""
    except LedgerError as e:
        return None, str(e)


def _paced(limits: TransportLimits, genesis: Genesis) -> TransportLimits:
    """``limits`` with the read pace no faster than the genesis' planned link allows each stream
    (``node._deadlines.read_rate_floor``), unless the node's config set a pace of its own."""
    default = TransportLimits().read_bytes_per_s_min
    if limits.read_bytes_per_s_min != default:
        return limits
    floor = read_rate_floor(genesis.protocol.params, len(genesis.member_ids))
    return dataclasses.replace(limits, read_bytes_per_s_min=min(default, floor))


def _changed_limits(limits: TransportLimits) -> dict[str, Any]:
    """The transport limits that differ from the defaults (a node config's ``[transport]`` table)."""
    default = TransportLimits()
    return {f: getattr(limits, f) for f in TransportLimits.__dataclass_fields__ if getattr(limits, f) != getattr(default, f)}


async def run_node(runtime: NodeRuntime) -> int:
    """Run ``runtime`` until SIGINT/SIGTERM (0 if it stopped at its stop height, else the signal number); the
    store is closed cleanly either way."""
    import signal  # noqa: PLC0415

    stopped: list[int] = []
    refused: Exception | None = None
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for signum in signals:
                    stopped.append(signum)
                    runtime.log("signal", level="warning", signal=signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(watch)
            try:
                await runtime.run()
            except (NodeError, LedgerError) as e:  # a refused start (NodeRuntime.run): one error, not a group
                refused = e
            nursery.cancel_scope.cancel()
    if refused is not None:
        raise refused
    return stopped[0] if stopped else 0


class _Blobs:
    """The node's blob store as the core and the runtime use it.

    * **Written behind.** A blob put on the event loop (an update received or trained, a model validated, a strategy
      state) is held in memory and written by a worker thread (:meth:`writing`: file, fsync, rename, as
      :meth:`ledger.store.FileBlobStore.put`), so that no 45 MB write holds the loop; :meth:`has` and :meth:`get` see
      it at once. A put from a worker thread writes through. On a clean stop the rest is written (:meth:`write_rest`);
      a crash may lose the last ones, as it may lose a blob that was on its way: the scrub at the next start fetches
      them from peers (nothing the ledger or the vote log holds depends on them being on disk first).
    * **Guarded.** A write that fails for want of room or rights (``OSError``) stops the node (``on_error``,
      :meth:`NodeRuntime._stop_fatal`) and raises the node's one error, in whatever task met it.
    """

    def __init__(self, store: FileBlobStore, sha256: Callable[[bytes], bytes],
                 on_error: Callable[[BaseException], NodeError]) -> None:
        self._store = store
        self._sha256 = sha256
        self._on_error = on_error
        self._pending: dict[bytes, bytes] = {}  # digest -> blob not on disk yet (in put order)
        self._ready: trio.Event | None = None  # while writing() runs

    def digest(self, data: bytes) -> bytes:
        """``data``'s digest, remembered by the hash memo (``ledger.Caches.sha256``): a :meth:`put` of these bytes
        later looks it up. Any thread (a worker thread hashes a trained update before the loop stores it)."""
        return self._sha256(data)

    def put(self, data: bytes) -> bytes:
        if self._ready is None or not _on_trio_thread():
            try:
                return self._store.put(data)
            except OSError as e:
                raise self._on_error(e) from None
        if len(data) > BLOB_BYTES_MAX:
            raise BlobError(f"blob of {len(data)} bytes exceeds {BLOB_BYTES_MAX}")
        digest = self._sha256(data)
        if digest not in self._pending and not self._store.has(digest):
            self._pending[digest] = data
            self._ready.set()
        return digest

    def has(self, digest: bytes) -> bool:
        return digest in self._pending or self._store.has(digest)

    def get(self, digest: bytes) -> bytes:
        data = self._pending.get(digest)
        return data if data is not None else self._store.get(digest)

    def discard(self, digest: bytes) -> None:
        self._pending.pop(digest, None)
        self._store.discard(digest)

    @property
    def pending(self) -> int:
        """Blobs held in memory, not on disk yet."""
        return len(self._pending)

    async def writing(self) -> None:
        """Write the blobs put on the loop, oldest first, in a worker thread (a task of the node's nursery)."""
        self._ready = trio.Event()
        try:
            while True:
                await self._ready.wait()
                self._ready = trio.Event()
                while self._pending:
                    digest, data = next(iter(self._pending.items()))
                    try:
                        await trio.to_thread.run_sync(self._store.put, data)
                    except OSError as e:
                        raise self._on_error(e) from None
                    if self._pending.get(digest) is data:
                        del self._pending[digest]
        finally:
            self._ready = None

    def write_rest(self) -> None:
        """Write what is still held (a clean stop: the loop is done, so it may wait on the disk)."""
        while self._pending:
            digest, data = next(iter(self._pending.items()))
            self._store.put(data)
            self._pending.pop(digest, None)

    def __getattr__(self, name: str) -> Any:  # root, put_many, ...: as the store's
        return getattr(self._store, name)


def _on_trio_thread() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True
