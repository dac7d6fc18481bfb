"""Training workers: local training runs in forked processes while this process runs the protocol.

A job is a pure function of its ``_JobSpec`` and the scenario (``Simulation._run_job``), so where and when
it runs does not change a bit of the result: the same seeds, the same single-threaded PyTorch kernels, the
same inputs. (So it may also run on another machine: ``sim/_ray.py`` is a pool with the interface the
simulator uses - ``submit``, ``speculate``, ``discard``, ``close``, ``active``, ``completed`` - whose jobs run on
a Ray cluster; ``Simulation(executor=...)`` picks it.) That gives three freedoms the event loop uses:

* **Worker processes.** With ``workers = n``, a job is handed to one of ``n`` forked processes when the
  node asks for it; while this process waits for a result it *steals* the worker's last job not yet
  started (it tells the worker to skip it) and trains it itself, so both cores train a round's jobs at
  the same time (Flower's simulation hands clients to Ray workers for the same reason, at the price of
  Ray's start-up). With no worker, a job runs here when its result is first needed - at its *virtual*
  finish time - and a job nobody needs never runs.
* **Speculative jobs.** The next round's jobs are known, up to the model, once a round's uploads are in:
  the simulator previews the model the coordinator will propose (``NodeCore.preview_model``, the node's
  own aggregation) - and at the proposal, the model proposed - and *speculates* the next round's jobs
  (this round's trainers and purposes, from that model). Workers train them at a lower priority than
  wanted jobs while this process runs the round's protocol work (the updates' receipt, the proposal,
  re-execution, pBFT, the commit fan-out), which otherwise could not overlap any training. When the node
  really asks for a job, its spec is compared field by field (the model bit for bit) with the speculated
  one: equal, the speculated result is the job's result (a pure function of the same spec); different (a
  view change, another sample, a new client state), it is discarded. So a speculation can only cost a
  worker's time; it never changes a result, and this process never trains a speculative job.
* **No polling.** Each worker orders its own queue (wanted jobs first, then speculations, skipping what it
  is told to drop; a reader thread takes messages as they come) and sends each result as it is done into
  a wide socket buffer, so this process only talks to a worker when it hands out jobs, drops or steals
  them, or needs a result.

Workers are forked when ``run()`` starts, before the ledger writer, so they share the client data
copy-on-write; only the job (seeds, states; the model once per round) and its result cross a pipe. PyTorch
refuses autograd in a child forked after the parent's autograd engine started device threads (any backward
pass on a machine with CUDA devices): a job that fails that way is re-run here and the workers are not used
again, so such a machine simply trains in-process.

No helper outlives the simulation's process, however it ends (SIGKILL, the OOM killer): Linux sends each
one a parent-death signal (``prctl(PR_SET_PDEATHSIG)``; a worker gets SIGKILL, the writer a signal it handles
so that it finishes the SQLite transaction in hand), and the pipe to the parent is a second watchdog that
works everywhere: each parent end is closed in every forked child (:func:`close_in_children`), so the
parent's death is EOF there. Both are set up once per process; nothing is added per message.
"""

from __future__ import annotations

import collections
import dataclasses
import multiprocessing
import os
import pickle
import queue
import signal
import socket
import sys
import threading
from collections.abc import Callable
from multiprocessing import util as mp_util
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

__all__ = [
    "Job",
    "TrainingPool",
    "child_inbox",
    "close_in_children",
    "default_workers",
    "guard_parent",
    "same_job",
    "widen_send_buffer",
]


class _JobSpec(Protocol):
    """What the pool reads of a job (``sim._jobs._JobSpec``; this module does not import the engine, which
    imports it)."""

    index: int
    fl_round: int
    purpose: str
    model: np.ndarray
    server_state: bytes | None
    client_state: bytes | None
    lr: float
    strategy_side: bool
    poisoned: bool


class _Host(Protocol):
    """The host of the pool (``sim.Simulation``): it runs a job in this process or in a forked worker."""

    def _run_job(self, spec: Any) -> Any: ...


_HOST: _Host | None = None
"""In a forked worker: the simulation it was forked from (its data, trainer and strategy)."""

_BAD_FORK = "fork"
"""Substring of PyTorch's error for autograd in a badly forked child ("...combination with fork-based...")."""


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def guard_parent(parent: int, sig: int) -> bool:
    """In a forked helper: have Linux send ``sig`` when the process that forked it dies; False if ``parent``
    is already gone (it may have died before the request: the check comes after it).

    The kernel sends the signal when the forking *thread* exits, so a handler must check ``os.getppid()``
    (which changes only once the whole parent process is gone, the helper then belonging to a reaper).
    SIGKILL needs no handler: the training workers use it, since the thread that forks them (the one in
    ``Simulation.run``) closes the pool before it can exit. Where prctl does not exist, the callers' EOF
    watchdog on the pipe remains."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes  # noqa: PLC0415 - once per helper process

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no libc prctl: the EOF watchdog remains
            pass
    return os.getppid() == parent


def close_in_children(conn: Connection) -> None:
    """Close the parent's end ``conn`` of a helper's pipe in every process forked after this call (this
    helper and the ones forked later): otherwise a helper holding a copy would keep the pipe open and never
    see EOF when the parent dies."""
    mp_util.register_after_fork(conn, type(conn).close)


def child_inbox(conn: Connection, parent: int) -> tuple[queue.SimpleQueue[Any], threading.Event]:
    """In the forked ledger writer (a training worker orders its own queue, see ``_serve``): ignore Ctrl-C;
    return a queue that a daemon thread fills with every message from ``conn``, then ``None`` at the
    parent's ``None``, at EOF or when the parent process ``parent`` dies; and an event set in the last two
    cases (then the writer finishes what it is writing and stops). Its parent-death signal is SIGUSR1, one
    of its own with a handler that checks the parent: neither a SIGTERM meant for the writer nor the exit of
    the forking *thread* of a live parent is taken for the parent's death.

    Ctrl-C reaches the whole process group: the parent stops the workers and drains the writer itself (a
    decided block is never lost to an interrupt), so a helper must not die of it mid-write. Reading on a
    thread of its own keeps the pipe drained, so the parent's send never waits on the helper's send."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the simulation's clean stop, inherited at the fork
    death_signal = signal.SIGUSR1  # (a forked writer runs on Linux only)
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    orphaned = threading.Event()

    def gone() -> None:
        orphaned.set()
        inbox.put(None)  # wakes a writer waiting for blocks (SimpleQueue.put is safe in a signal handler)

    def on_death_signal(signum: int, frame: Any) -> None:
        if os.getppid() != parent:
            gone()

    signal.signal(death_signal, on_death_signal)  # before the request: its default action kills
    if not guard_parent(parent, death_signal):
        gone()

    def read() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {death_signal})  # for the main thread, which may wait on the inbox
        try:
            while (msg := conn.recv()) is not None:
                inbox.put(msg)
        except (EOFError, OSError):  # every end the parent held is closed: it is gone
            gone()
            return
        inbox.put(None)

    threading.Thread(target=read, daemon=True).start()
    return inbox, orphaned


def _serve(conn: Connection, parent: int) -> None:
    """A worker. Messages: ``("jobs", [(job id, spec, model, wanted)])`` (``model`` None: the last one sent;
    the spec's own model field is empty), ``("drop", [job ids])`` (skip them if not started), ``None``
    (stop). It trains wanted jobs first, oldest first, then speculations, and replies ``(job id, ok,
    value)`` after each job (see :func:`widen_send_buffer`). It dies with ``parent`` (SIGKILL from the
    kernel, or EOF on ``conn``): a job's result is worth nothing to anyone else."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # see child_inbox
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # TrainingPool.close terminates
    if not guard_parent(parent, signal.SIGKILL):
        return
    wanted: collections.OrderedDict[int, Any] = collections.OrderedDict()
    spec_q: collections.OrderedDict[int, Any] = collections.OrderedDict()
    cond = threading.Condition()
    stop = [False]

    def read() -> None:
        model = None
        try:
            while (msg := conn.recv()) is not None:
                kind, items = msg
                with cond:
                    if kind == "jobs":
                        for jid, spec, new_model, urgent in items:
                            if new_model is not None:
                                model = new_model
                            (wanted if urgent else spec_q)[jid] = (spec, model)
                    else:  # "drop"
                        for jid in items:
                            wanted.pop(jid, None)
                            spec_q.pop(jid, None)
                    cond.notify()
        except (EOFError, OSError):  # the parent is gone (it never closes a live worker's pipe)
            os._exit(0)
        with cond:
            stop[0] = True
            cond.notify()

    threading.Thread(target=read, daemon=True).start()
    widen_send_buffer(conn)
    while True:
        with cond:
            while not (wanted or spec_q or stop[0]):
                cond.wait()
            if stop[0]:
                break
            jid, (spec, model) = (wanted if wanted else spec_q).popitem(last=False)
        spec = dataclasses.replace(spec, model=model)
        try:
            assert _HOST is not None, "training worker without a host simulation"
            reply: tuple[int, bool, Any] = (jid, True, _HOST._run_job(spec))
        except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it there
            reply = (jid, False, e)
        try:
            try:
                conn.send(reply)
            except (pickle.PicklingError, TypeError, AttributeError):  # an exception that does not pickle
                conn.send((jid, False, RuntimeError(f"{type(reply[2]).__name__}: {reply[2]}")))
        except OSError:  # the parent is gone
            return


def widen_send_buffer(conn: Connection) -> None:
    """Let messages queue up in the socket, not in a sender thread of ours or in waits for the reader.

    A worker sends each result from its training loop; the parent reads results only when it needs one,
    so speculated results wait in the socket meanwhile (with Linux's default 208 KiB send buffer a W1
    worker would stall after ten of them). The ledger writer's parent end uses it too: a block's blobs
    go in one write instead of waking the writer for every 208 KiB. Up to 4 MiB is asked for (the kernel
    caps it at ``net.core.wmem_max``). A full buffer only pauses the sender until the other side reads:
    a worker waits for the parent's next collect, and the parent's own sends never wait on that worker
    (its reader thread keeps draining them), so no two processes wait on each other. (A sender thread
    did the same without a big buffer, but its hand-offs of the interpreter lock cost the training loop
    more than the copy saves: measured on W1, see benchmarks/README.md.)"""
    try:
        sock = socket.socket(fileno=conn.fileno())
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        finally:
            sock.detach()
    except (OSError, ValueError):  # not a socket (another platform's pipe): sends may wait, as before
        pass


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def default_workers(device: str) -> int:
    """Training workers by default: on Linux, CPU training, at least two usable cores, in a top-level
    process (a simulation inside a process pool - a reproduction sweep - trains in-process, since the sweep
    already uses the cores): one worker per usable core but one (this process trains too), at most 3."""
    if device != "cpu" or sys.platform != "linux" or multiprocessing.parent_process() is not None:
        return 0
    return max(0, min(3, _usable_cores() - 1))


def _key(spec: _JobSpec) -> tuple[int, int, str]:
    return (spec.index, spec.fl_round, spec.purpose)


def same_job(a: _JobSpec, b: _JobSpec) -> bool:
    """Do two specs describe the same job (so the same result)? Every field, the model bit for bit."""
    return (
        a.index == b.index
        and a.fl_round == b.fl_round
        and a.purpose == b.purpose
        and a.lr == b.lr
        and a.strategy_side == b.strategy_side
        and a.poisoned == b.poisoned
        and a.server_state == b.server_state
        and a.client_state == b.client_state
        and a.model.dtype == b.model.dtype
        and a.model.shape == b.model.shape
        and (a.model is b.model or a.model.tobytes() == b.model.tobytes())
    )


class Job:
    """A submitted job; ``get()`` returns ``(upload, n_samples, client_state)``, waiting for its worker or
    training it here (no worker, a worker that could not train after a bad fork, or stolen)."""

    __slots__ = ("_error", "_pool", "_spec", "_urgent", "_value", "_worker", "jid", "speculative", "spec")

    def __init__(self, pool: TrainingPool, spec: _JobSpec, jid: int, *, speculative: bool = False) -> None:
        self._pool = pool
        self._spec: _JobSpec | None = spec  # None once done
        self.spec = spec
        self._value: Any = None
        self._error: BaseException | None = None  # a speculative job's own error, raised if it is claimed
        self._worker: int | None = None  # the worker that has it (not yet answered)
        self._urgent = False  # handed out as wanted (the worker runs those before speculations)
        self.jid = jid
        self.speculative = speculative

    @property
    def done(self) -> bool:
        return self._spec is None

    def get(self) -> Any:
        if self._spec is not None:
            self._pool._complete(self)
        if self._error is not None:
            raise self._error
        return self._value


class TrainingPool:
    """``workers`` forked processes running ``host._run_job``, and this process (see the module)."""

    def __init__(self, host: _Host, workers: int) -> None:
        global _HOST
        self.host = host
        self.broken = False
        """Set when a worker hit PyTorch's bad-fork error: from then on every job trains in-process."""
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._out: list[dict[int, Job]] = []  # per worker: jobs it has and has not answered, in its order
        self._models: list[Any] = []  # per worker: the model last sent (the worker keeps it)
        self._speculated: dict[tuple[int, int, str], Job] = {}  # unclaimed speculations, by job key
        self.hits = 0
        """Jobs whose speculated result was used."""
        self.misses = 0
        """Speculations discarded (a different spec was asked for, or none)."""
        self.stolen = 0
        """Jobs this process took back from a worker's queue and trained itself."""
        self.completed = 0
        """Jobs done so far (a cheap "anything new?" for the simulator)."""
        self._next = 0
        if workers > 0 and not multiprocessing.current_process().daemon:
            ctx = multiprocessing.get_context("fork")
            _HOST = host
            try:
                for _ in range(workers):
                    parent, child = ctx.Pipe(duplex=True)
                    close_in_children(parent)
                    p = ctx.Process(target=_serve, args=(child, os.getpid()), daemon=True, name="concilium-train")
                    p.start()
                    child.close()
                    self._procs.append(p)
                    self._conns.append(parent)
                    self._out.append({})
                    self._models.append(None)
            finally:
                _HOST = None

    @property
    def active(self) -> bool:
        return bool(self._procs) and not self.broken

    # --- handing out -------------------------------------------------------------------------------

    def submit(self, spec: _JobSpec) -> Job:
        """The node asks for a job: the speculated one if it is the same job, else a new one."""
        guess = self._speculated.pop(_key(spec), None)
        if guess is not None:
            if same_job(guess.spec, spec):
                self.hits += 1
                guess.speculative = False
                return guess
            self._abandon([guess])
        job = Job(self, spec, self._next)
        self._next += 1
        if self.active:
            w = min(range(len(self._out)), key=lambda i: len(self._out[i]))
            self._send_jobs(w, [job], wanted=True)
        return job

    def speculate(self, specs: list[_JobSpec]) -> None:
        """Offer jobs the simulator expects to be asked for (see the module); round-robin over workers."""
        if not self.active:
            return
        fresh: list[Job] = []
        drop: list[Job] = []
        for spec in specs:
            old = self._speculated.get(_key(spec))
            if old is not None:
                if same_job(old.spec, spec):
                    continue
                drop.append(old)
            job = Job(self, spec, self._next, speculative=True)
            self._next += 1
            self._speculated[_key(spec)] = job
            fresh.append(job)
        self._abandon(drop)
        n = len(self._out)
        for w in range(n):
            self._send_jobs(w, fresh[w::n], wanted=False)

    def discard(self, keep: Callable[[_JobSpec], bool]) -> None:
        """Abandon the unclaimed speculations for which ``keep(spec)`` is false."""
        gone = [job for job in self._speculated.values() if not keep(job.spec)]
        for job in gone:
            del self._speculated[_key(job.spec)]
        self._abandon(gone)

    def _abandon(self, jobs: list[Job]) -> None:
        self.misses += len(jobs)
        by_worker: dict[int, list[int]] = {}
        for job in jobs:
            w = job._worker
            if w is not None and not job.done:
                by_worker.setdefault(w, []).append(job.jid)
                del self._out[w][job.jid]
                job._worker = None
            job._spec = None  # never wanted
        for w, jids in by_worker.items():
            self._send(w, ("drop", jids))

    def _send_jobs(self, w: int, jobs: list[Job], *, wanted: bool) -> None:
        if not jobs:
            return
        items = []
        for job in jobs:
            model = job.spec.model
            last = self._models[w]
            if last is not None and (model is last or np.array_equal(model, last)):
                model = None  # a round's jobs share one model: it crosses the pipe once
            else:
                self._models[w] = model
            items.append((job.jid, dataclasses.replace(job.spec, model=None), model, wanted))
            job._worker, job._urgent = w, wanted
            self._out[w][job.jid] = job
        self._send(w, ("jobs", items))

    def _send(self, w: int, msg: Any) -> None:
        try:
            self._conns[w].send(msg)
        except OSError as e:
            code = self._procs[w].exitcode
            raise RuntimeError(f"training worker {w} died (exit code {code}): {e!r}") from None

    # --- results -----------------------------------------------------------------------------------

    def _collect(self, w: int, *, block: bool = False) -> None:
        """Take every result that has arrived from worker ``w`` (waiting for one, if ``block``)."""
        conn = self._conns[w]
        while self._out[w] and (block or conn.poll()):
            block = False
            try:
                jid, ok, value = conn.recv()
            except (EOFError, OSError) as e:
                code = self._procs[w].exitcode
                raise RuntimeError(f"training worker {w} died (exit code {code}): {e!r}") from None
            job = self._out[w].pop(jid, None)
            if job is None:
                continue  # dropped or stolen after the worker had started it
            job._worker = None
            if ok:
                job._value, job._spec = value, None
                self.completed += 1
            elif isinstance(value, RuntimeError) and _BAD_FORK in str(value):
                self.broken = True  # trains here when wanted (its _spec stays)
            elif job.speculative:
                job._error, job._spec = value, None  # raised only if the job is claimed
            else:
                raise value  # the job's own error, as training in-process would have raised it

    def _train_here(self, job: Job) -> None:
        assert job._spec is not None
        job._value = self.host._run_job(job._spec)
        job._spec = None
        self.completed += 1

    def _steal(self, w: int, waiting: Job) -> Job | None:
        """A job to take back from worker ``w`` while waiting for ``waiting``: the wanted job it would run
        last (the worker likely has not started it), else ``waiting`` itself unless it is next in line."""
        out = self._out[w]
        # the worker's order: wanted jobs as handed out, then speculations (claimed or not) as handed out
        for urgent in (False, True):
            for job in reversed(out.values()):
                if job._urgent is urgent and job is not waiting and not job.speculative:
                    return job
        first = next((j for j in out.values() if j._urgent), None) or next(iter(out.values()), None)
        return None if first is waiting else waiting

    def _complete(self, job: Job) -> None:
        """Make ``job`` done: train it here if no worker has it, else wait for its worker, taking back and
        training here that worker's other wanted jobs meanwhile (and ``job`` itself if it is not next)."""
        while not job.done:
            w = job._worker
            if w is None or not self._procs or self.broken:
                if w is not None:
                    del self._out[w][job.jid]
                    job._worker = None
                self._train_here(job)
                return
            self._collect(w)
            if job.done or job._worker is None:
                continue  # done, or its worker could not train it (bad fork): here
            victim = self._steal(w, job)
            if victim is not None:
                del self._out[w][victim.jid]
                victim._worker = None
                self._send(w, ("drop", [victim.jid]))
                self.stolen += 1
                self._train_here(victim)
            else:
                self._collect(w, block=True)

    def close(self) -> None:
        """Stop the workers (a job still running - one the run never needed - is abandoned; a job handed to
        a worker and wanted later trains here)."""
        for p in self._procs:
            p.terminate()
        for p in self._procs:
            p.join()
        for c in self._conns:
            c.close()
        for out in self._out:
            for job in out.values():
                job._worker = None
        self._procs, self._conns, self._out, self._models = [], [], [], []
        self._speculated.clear()
