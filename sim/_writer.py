"""The simulator's results-ledger writer: blobs and blocks go to disk off the simulation's thread.

The simulation decides blocks in a fixed order; the writer appends them in that order, so the ledger is
byte-identical to writing inline. Every block's blobs are made durable before the block is appended
(``FileBlobStore.put_many``, then the SQLite transaction with ``synchronous=FULL``): a crash leaves a valid
prefix, exactly as the inline path.

On Linux the writer is a forked process (started with the training workers, before any thread): it decodes
each block from its canonical bytes, checks every blob against its digest and writes them, so none of the
disk work or its Python bookkeeping competes with the protocol for this interpreter's lock. Elsewhere it is
a daemon thread (file and SQLite I/O release the lock). A reader thread in the process keeps the pipe
drained, so a slow disk never blocks the simulation before ``backlog`` blocks are waiting.

Errors are not lost: the first one the writer meets is re-raised in the simulation at the next ``submit``
or at ``close``.

The writer process never outlives the simulation's: when the parent dies (SIGKILL, the OOM killer), it
learns it from its parent-death signal or from EOF on the pipe (``sim._workers.child_inbox``), finishes the
batch it is appending (one SQLite transaction: all of it or none), closes the store and exits, so what is
on disk is a valid prefix. The blocks still queued are dropped: nobody waits for them.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import threading
from pathlib import Path
from typing import Any

from ledger import Block, Genesis
from ledger.store import create_ledger
from sim._workers import child_inbox, close_in_children, widen_send_buffer

__all__ = ["LedgerWriter"]

_STOP = None  # the end of the blocks (also what sim._workers.child_inbox yields at EOF)
_BATCH = 8


def _write_all(
    path: Path, initial_blobs: list[bytes], items: Any, report: Any, orphaned: threading.Event | None = None
) -> None:
    """Append every ``(block, blobs, digests)`` from the queue ``items`` (None ends); ``report(error)`` once.
    Once ``orphaned`` is set (the parent died), the batch being appended is the last.

    Whatever is already waiting goes in one batch (up to ``_BATCH`` blocks): all their blobs made durable
    with two file-system barriers, then the blocks in one SQLite transaction - the same order of
    durability as block by block (no block before its blobs; a crash leaves a valid prefix), with fewer
    barriers when the writer is behind."""
    from ledger.store import open_ledger  # noqa: PLC0415

    try:
        store, blobs = open_ledger(path)
    except BaseException as e:  # noqa: BLE001 - handed to the simulation
        report(e)
        return
    failed = False
    try:
        blobs.put_many(initial_blobs)
        done = False
        while not done:
            batch = [items.get()]
            while len(batch) < _BATCH:
                try:
                    batch.append(items.get_nowait())
                except queue.Empty:
                    break
            if orphaned is not None and orphaned.is_set():
                break  # the parent is gone: it waits for none of these
            if _STOP in batch:
                batch, done = batch[: batch.index(_STOP)], True
            if failed or not batch:
                continue  # drain: the simulation learns of the error at its next call
            try:
                blocks = [Block.decode(b) if isinstance(b, bytes) else b for b, _, _ in batch]
                got = blobs.put_many([x for _, data, _ in batch for x in data])
                at = 0
                for block, (_, data, digests) in zip(blocks, batch):
                    if got[at : at + len(data)] != digests:
                        raise AssertionError(f"a blob of height {block.height} was reported under the wrong digest")
                    at += len(data)
                store.append_many(blocks)
            except BaseException as e:  # noqa: BLE001
                failed = True
                report(e)
    finally:
        store.close()


def _serve(path: Path, initial_blobs: list[bytes], conn: Any, parent: int) -> None:
    """The writer process: blocks from ``conn``, one ``("error", text)`` on failure, ``("done", None)`` at the end."""
    jobs, orphaned = child_inbox(conn, parent)  # Ctrl-C ignored: the parent drains every decided block itself
    try:
        os.nice(19)  # the simulation's processes come first; the writer takes the idle time (and drains at the end)
    except OSError:
        pass

    def report(e: BaseException) -> None:
        try:
            conn.send(("error", f"{type(e).__name__}: {e}"))
        except OSError:  # the parent is gone
            pass

    if orphaned.is_set():  # already before it started
        return
    _write_all(path, initial_blobs, jobs, report, orphaned)
    if orphaned.is_set():
        return
    try:
        conn.send(("done", None))
    except OSError:
        pass


class LedgerWriter:
    """Appends ``(block, blobs)`` pairs to a new ledger at ``path`` in a forked process (Linux) or a thread."""

    def __init__(self, path: Path, genesis: Genesis, initial_blobs: list[bytes], *, backlog: int = 16) -> None:
        store, blobs = create_ledger(path, genesis)  # here, so a bad path fails in the caller
        store.close()
        self._path = path
        self._initial = initial_blobs
        self._error: BaseException | None = None
        self._use_process = sys.platform == "linux" and not multiprocessing.current_process().daemon
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=backlog)
        self._thread: threading.Thread | None = None
        self._proc: Any = None
        self._conn: Any = None
        self._closed = False

    def start(self) -> None:
        """Start the writer (separate from construction: a simulation forks its training workers first)."""
        if self._proc is not None or self._thread is not None:
            return
        if self._use_process:
            ctx = multiprocessing.get_context("fork")
            parent, child = ctx.Pipe(duplex=True)
            close_in_children(parent)
            self._proc = ctx.Process(target=_serve, args=(self._path, self._initial, child, os.getpid()),
                                     daemon=True, name="concilium-ledger-writer")
            self._proc.start()
            child.close()
            widen_send_buffer(parent)  # a block's blobs in one write, not one wake-up of the writer per 208 KiB
            self._conn = parent
        else:
            self._thread = threading.Thread(target=self._run_thread, name="ledger-writer", daemon=True)
            self._thread.start()
        self._initial = []

    def submit(self, block: Block, blobs: list[bytes], digests: list[bytes]) -> None:
        """Queue ``block`` with its referenced ``blobs`` (whose SHA-256 must be ``digests``)."""
        if self._proc is None and self._thread is None:
            self.start()
        self._poll()
        self._raise()
        if self._conn is not None:
            try:
                self._conn.send((block.encode(), blobs, digests))
            except OSError as e:  # BrokenPipeError: the writer process is gone
                self._poll()  # its own error first, if it sent one before dying
                self._died(e)
                self._raise()
        else:
            self._queue.put((block, blobs, digests))

    def close(self) -> None:
        """Wait until everything queued is on disk; re-raise the writer's error, if any."""
        if self._closed:
            self._raise()
            return
        self._closed = True
        if self._proc is None and self._thread is None:
            self.start()  # never started: still write the initial blobs and close cleanly
        if self._conn is not None:
            try:
                self._conn.send(_STOP)
                while True:
                    kind, text = self._conn.recv()
                    if kind == "error":
                        self._error = self._error or RuntimeError(text)
                    else:
                        break
            except (EOFError, OSError) as e:
                self._error = self._error or RuntimeError(f"the writer process died: {e}")
            self._proc.join()
            self._conn.close()
            if self._proc.exitcode not in (0, None) and self._error is None:
                self._error = RuntimeError(f"the writer process exited with code {self._proc.exitcode}")
        elif self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
        self._raise()

    def _died(self, e: BaseException) -> None:
        if self._error is None:
            self._proc.join(timeout=5)
            self._error = RuntimeError(f"the writer process died (exit code {self._proc.exitcode}): {e!r}")

    def _poll(self) -> None:
        try:
            while self._conn is not None and self._error is None and self._conn.poll():
                kind, text = self._conn.recv()
                if kind == "error":
                    self._error = RuntimeError(text)
        except (EOFError, OSError) as e:
            self._died(e)

    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise RuntimeError(f"writing the results ledger {self._path} failed: {err}") from err

    def _run_thread(self) -> None:
        def report(e: BaseException) -> None:
            if self._error is None:
                self._error = e

        _write_all(self._path, self._initial, self._queue, report)
