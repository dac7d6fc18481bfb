"""The memos a driver shares between the nodes and audits it runs in one process (:class:`Caches`).

Nothing in ``ledger`` or ``consensus`` keeps state in a module: a memo of a frozen record lives on the record
(:func:`ledger._encoding.remembered`), and a memo keyed by value lives in a :class:`Caches` that the driver creates
and passes in, as ``ChainContext(genesis, caches=...)`` (the simulator: one for all its nodes; a node: its own; an
audit: a private one unless given). A memo only saves work: every result is the one computed without it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Callable
from typing import Any, ContextManager, TypeVar

__all__ = ["Caches"]

F = TypeVar("F", bound=Callable[..., Any])

BLOB_MEMO_MIN = 4096
"""Smaller data is hashed every time: the lookup would cost about as much."""
BLOB_MEMO_ENTRIES = 512
BLOB_MEMO_BYTES = 64 << 20


class Caches:
    """Bounded memos of pure functions, shared by whatever the driver gives this object to.

    * :meth:`sha256`: digests of large ``bytes`` (blobs: updates, models) by value: in a simulation every node of
      the process hashes the same update object on receipt and again when storing it. At most
      :data:`BLOB_MEMO_ENTRIES` blobs and ``blob_bytes`` bytes (default :data:`BLOB_MEMO_BYTES`) held, oldest out
      first.
    * :meth:`memo`: a ``functools.lru_cache`` of a pure function, one per function and per :class:`Caches`
      (the committee ranking of ``consensus``: every node of a simulation ranks the same pool with the same seed).
    """

    __slots__ = ("_blob_bytes", "_blob_bytes_max", "_blob_digests", "_lock", "_memos")

    def __init__(self, *, lock: ContextManager[Any] | None = None, blob_bytes: int = BLOB_MEMO_BYTES) -> None:
        """``lock``: held while a memo changes, for a driver that hashes in several threads (the network runtime
        re-executes a proposal and writes blobs in worker threads: it passes a ``threading.Lock``); none by default
        (one thread: the simulator, an audit). ``blob_bytes``: the most blob bytes :meth:`sha256` remembers (the
        runtime holds a few of its model's size: the blobs hashed in a worker thread before the loop reads them)."""
        if isinstance(blob_bytes, bool) or not isinstance(blob_bytes, int) or blob_bytes < 0:
            raise ValueError(f"blob_bytes must be an int >= 0, got {blob_bytes!r}")
        self._lock = lock if lock is not None else contextlib.nullcontext()
        self._blob_digests: dict[bytes, bytes] = {}
        self._blob_bytes = 0
        self._blob_bytes_max = blob_bytes
        self._memos: dict[Callable[..., Any], Callable[..., Any]] = {}

    def sha256(self, data: bytes) -> bytes:
        """SHA-256 digest of ``data`` (:func:`ledger.sha256`), remembered by value for blobs.

        A hit costs a dict lookup (``bytes`` caches its own hash) and an identity or memcmp comparison of the
        bytes, so the memo returns the digest of exactly these bytes."""
        if len(data) < BLOB_MEMO_MIN or type(data) is not bytes:
            return hashlib.sha256(data).digest()
        memo = self._blob_digests
        d = memo.get(data)
        if d is not None:
            return d
        d = hashlib.sha256(data).digest()  # (outside the lock: threads hash at once)
        with self._lock:
            if data in memo:
                return d
            held = self._blob_bytes
            while memo and (len(memo) >= BLOB_MEMO_ENTRIES or held + len(data) > self._blob_bytes_max):
                old = next(iter(memo))
                held -= len(old)
                del memo[old]
            if len(data) <= self._blob_bytes_max:
                memo[data] = d
                held += len(data)
            self._blob_bytes = held
        return d

    def memo(self, fn: F, maxsize: int) -> F:
        """``fn`` remembered in this object by its (hashable) arguments, the last ``maxsize`` calls; ``fn`` must be
        pure and always passed with the same ``maxsize``."""
        got = self._memos.get(fn)
        if got is None:
            with self._lock:
                got = self._memos.setdefault(fn, functools.lru_cache(maxsize=maxsize)(fn))
        return got  # type: ignore[return-value]
