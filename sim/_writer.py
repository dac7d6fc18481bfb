"""The simulator's results-ledger writer: blobs and blocks go to disk on a background thread.

The simulation decides blocks in a fixed order; the writer appends them in that order, so the ledger is
byte-identical to writing inline. File and SQLite I/O release the GIL, so on a machine with two cores the
disk work overlaps the simulation's protocol and training work instead of adding to it. Every block's
blobs are made durable before the block is appended (``FileBlobStore.put_many``, then the SQLite
transaction with ``synchronous=FULL``): a crash leaves a valid prefix, exactly as the inline path.

Errors are not lost: the first one the thread meets is re-raised in the simulation at the next
``submit`` or at ``close``.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

from ledger import Block, Genesis
from ledger.store import create_ledger

__all__ = ["LedgerWriter"]

_STOP = None


class LedgerWriter:
    """Appends ``(block, blobs)`` pairs to a new ledger at ``path`` on a daemon thread."""

    def __init__(self, path: Path, genesis: Genesis, initial_blobs: list[bytes], *, backlog: int = 16) -> None:
        store, blobs = create_ledger(path, genesis)  # here, so a bad path fails in the caller
        store.close()
        self._path = path
        self._queue: queue.Queue[tuple[Block, list[bytes], list[bytes]] | None] = queue.Queue(maxsize=backlog)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(initial_blobs,), name="ledger-writer", daemon=True)

    def start(self) -> None:
        """Start the thread (separate from construction: a simulation forks its training workers first)."""
        self._thread.start()

    def submit(self, block: Block, blobs: list[bytes], digests: list[bytes]) -> None:
        """Queue ``block`` with its referenced ``blobs`` (whose SHA-256 must be ``digests``)."""
        self._raise()
        self._queue.put((block, blobs, digests))

    def close(self) -> None:
        """Wait until everything queued is on disk; re-raise the writer's error, if any."""
        if self._thread.ident is None:
            self._thread.start()  # never started: still write what was queued (nothing) and close cleanly
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise RuntimeError(f"writing the results ledger {self._path} failed: {err}") from err

    def _run(self, initial_blobs: list[bytes]) -> None:
        from ledger.store import open_ledger  # noqa: PLC0415

        try:
            store, blobs = open_ledger(self._path)
        except BaseException as e:  # noqa: BLE001 - handed to the simulation thread
            self._error = e
            return
        try:
            blobs.put_many(initial_blobs)
            while True:
                item = self._queue.get()
                if item is _STOP:
                    break
                block, data, digests = item
                if self._error is not None:
                    continue  # drain: the simulation learns of the error at its next call
                try:
                    if blobs.put_many(data) != digests:
                        raise AssertionError(f"a blob of height {block.height} was reported under the wrong digest")
                    store.append(block)
                except BaseException as e:  # noqa: BLE001
                    self._error = e
        finally:
            store.close()
