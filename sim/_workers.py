"""Training workers: local training runs partly in forked processes while this process runs the protocol.

A job is a pure function of its ``_JobSpec`` and the scenario (``Simulation._run_job``), so where and when
it runs does not change a bit of the result: the same seeds, the same single-threaded PyTorch kernels, the
same inputs. That gives two freedoms the event loop uses:

* **Lazy jobs.** A job runs when a worker takes it or when its result is first needed - at its *virtual*
  finish time - not when the node asks for it. Jobs this process trains run back to back (warm caches)
  instead of interleaved with every node's commit handling, and a job whose result is never needed (a
  round the run stops before) never runs.
* **Worker processes.** With ``workers = n``, ``n`` forked processes take jobs from the front of one queue
  (a couple each at a time, so none idles while there is work) and this process trains from the back of
  it while it would otherwise wait for a result, so both cores train a round's jobs at the same time
  (Flower's simulation hands clients to Ray workers for the same reason, at the price of Ray's start-up).
  The protocol work after a round's training - the committee receiving the updates, re-execution, pBFT,
  the commit fan-out - cannot overlap it (the next round's jobs need the commit), so a run's wall time is
  about that protocol work plus the training divided among the processes.

Workers are forked when ``run()`` starts, before the ledger writer, so they share the client data
copy-on-write; only the job (model vector, seeds, states) and its result cross a pipe. Each worker reads
jobs on a thread of its own, so this process never blocks on a full pipe while the worker is blocked
sending a result. PyTorch refuses autograd in a child forked after the parent's autograd engine started
device threads (any backward pass on a machine with CUDA devices): a job that fails that way is re-run
here and the workers are not used again, so such a machine simply trains in-process.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from sim._engine import Simulation, _JobSpec

__all__ = ["Job", "TrainingPool", "child_inbox", "default_workers"]

_HOST: Simulation | None = None
"""In a forked worker: the simulation it was forked from (its data, trainer and strategy)."""

_BAD_FORK = "fork"
"""Substring of PyTorch's error for autograd in a badly forked child ("...combination with fork-based...")."""


def child_inbox(conn: Connection) -> queue.SimpleQueue[Any]:
    """In a forked helper process (training worker, ledger writer): ignore Ctrl-C and return a queue that a
    daemon thread fills with every message from ``conn``, then ``None`` at the parent's ``None`` or at EOF.

    Ctrl-C reaches the whole process group: the parent stops the workers and drains the writer itself (a
    decided block is never lost to an interrupt), so a helper must not die of it mid-write. Reading on a
    thread of its own keeps the pipe drained, so the parent's send never waits on the helper's send."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def read() -> None:
        try:
            while (msg := conn.recv()) is not None:
                inbox.put(msg)
        except (EOFError, OSError):
            pass
        inbox.put(None)

    threading.Thread(target=read, daemon=True).start()
    return inbox


def _serve(conn: Connection) -> None:
    """A worker: run ``_HOST._run_job`` on each ``(job id, spec)`` received; reply ``(job id, ok, value)``."""
    jobs = child_inbox(conn)
    while (msg := jobs.get()) is not None:
        jid, spec = msg
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
        except (BrokenPipeError, OSError):
            return


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


class Job:
    """A submitted job; ``get()`` returns ``(upload, n_samples, client_state)``, training it here if no
    worker has taken it yet (or if its worker could not train after a bad fork)."""

    __slots__ = ("_pool", "_spec", "_value", "_worker", "jid")

    def __init__(self, pool: TrainingPool, spec: _JobSpec, jid: int) -> None:
        self._pool = pool
        self._spec: _JobSpec | None = spec
        self._value: Any = None
        self._worker: int | None = None  # the worker it was handed to
        self.jid = jid

    @property
    def done(self) -> bool:
        return self._spec is None

    def get(self) -> Any:
        if self._spec is not None:
            self._pool._complete(self)
        return self._value


class TrainingPool:
    """``workers`` forked processes running ``host._run_job``, and this process, sharing one queue of jobs.

    A job waits in the queue until a worker has room for it (at most ``_AHEAD`` unfinished jobs each, fed
    whenever this process submits or collects) or until its result is wanted, whichever comes first. While
    it waits for a worker's result, this process trains the newest queued job itself. So the workers never
    sit idle while there is work, and this process trains whatever the workers have not taken by the time
    the results are due - all without a thread in this process."""

    _AHEAD = 2

    def __init__(self, host: Simulation, workers: int) -> None:
        global _HOST
        self.host = host
        self.broken = False
        """Set when a worker hit PyTorch's bad-fork error: from then on every job trains in-process."""
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._sent: list[dict[int, Job]] = []  # per worker: jobs handed over and not collected
        self._queue: collections.deque[Job] = collections.deque()
        self._next = 0
        if workers > 0 and not multiprocessing.current_process().daemon:
            ctx = multiprocessing.get_context("fork")
            _HOST = host
            try:
                for _ in range(workers):
                    parent, child = ctx.Pipe(duplex=True)
                    p = ctx.Process(target=_serve, args=(child,), daemon=True, name="concilium-train")
                    p.start()
                    child.close()
                    self._procs.append(p)
                    self._conns.append(parent)
                    self._sent.append({})
            finally:
                _HOST = None

    @property
    def active(self) -> bool:
        return bool(self._procs) and not self.broken

    def submit(self, spec: _JobSpec) -> Job:
        job = Job(self, spec, self._next)
        self._next += 1
        self._queue.append(job)
        if self.active:
            self._collect()
            self._feed()
        return job

    def _feed(self) -> None:
        for w, sent in enumerate(self._sent):
            while len(sent) < self._AHEAD and self._queue:
                job = self._queue.popleft()
                job._worker = w
                sent[job.jid] = job
                self._conns[w].send((job.jid, job._spec))

    def _collect(self, w: int | None = None, *, block: bool = False) -> None:
        """Take every result that has arrived (from worker ``w`` only, waiting for one, if ``block``)."""
        for i in (range(len(self._conns)) if w is None else (w,)):
            conn = self._conns[i]
            while self._sent[i] and (block or conn.poll()):
                block = False
                try:
                    jid, ok, value = conn.recv()
                except (EOFError, OSError) as e:
                    code = self._procs[i].exitcode if i < len(self._procs) else None
                    raise RuntimeError(f"training worker {i} died (exit code {code}): {e!r}") from None
                job = self._sent[i].pop(jid)
                if ok:
                    job._value, job._spec = value, None
                elif isinstance(value, RuntimeError) and _BAD_FORK in str(value):
                    self.broken = True  # trains here when wanted (its _spec stays)
                    job._worker = None
                else:
                    raise value  # the job's own error, as training in-process would have raised it

    def _train_here(self, job: Job) -> None:
        assert job._spec is not None
        job._value = self.host._run_job(job._spec)
        job._spec = None

    def _complete(self, job: Job) -> None:
        """Make ``job`` done: train it here if it is still queued, else wait for its worker (training queued
        jobs here meanwhile)."""
        if job._worker is None or not self._procs:
            try:
                self._queue.remove(job)
            except ValueError:
                pass
            if self.active:
                self._collect()
                self._feed()
            self._train_here(job)
            return
        w = job._worker
        while not job.done:
            if job._worker is None:  # its worker could not train it (bad fork)
                self._train_here(job)
                return
            self._collect(w)
            if job.done:
                break
            if self.active:
                self._feed()
            if self._queue:
                self._train_here(self._queue.pop())  # the newest: the workers take from the other end
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
        for sent in self._sent:
            for job in sent.values():
                job._worker = None
        self._procs, self._conns, self._sent = [], [], []
