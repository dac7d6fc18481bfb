"""The ledger's one I/O module: the SQLite block store and the file blob store.

A *ledger directory* holds ``chain.sqlite`` and ``blobs/``; :func:`create_ledger` makes one and
:func:`open_ledger` opens one (``readonly=True`` for audits: nothing is created beside the ledger).
:class:`StoreError` means the path is not a ledger that can be read (bad input);
:class:`CorruptStoreError`, a subclass, means it is a concilium ledger and it is invalid.
"""

from __future__ import annotations

import os
from pathlib import Path

from ledger._caches import Caches
from ledger._errors import CorruptStoreError, StoreError
from ledger._types import Genesis
from ledger.store._blobs import BLOB_BYTES_MAX, FileBlobStore, MemoryBlobStore
from ledger.store._sqlite import SCHEMA_VERSION, SqliteBlockStore

__all__ = [
    "BLOB_BYTES_MAX",
    "CHAIN_FILE",
    "BLOBS_DIR",
    "CorruptStoreError",
    "SCHEMA_VERSION",
    "FileBlobStore",
    "MemoryBlobStore",
    "SqliteBlockStore",
    "create_ledger",
    "open_ledger",
    "resolve_ledger_path",
]

CHAIN_FILE = "chain.sqlite"
BLOBS_DIR = "blobs"


def resolve_ledger_path(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``(chain file, blobs dir)`` for a ledger directory, or for a path to its ``chain.sqlite``."""
    p = Path(path)
    if p.is_dir():
        return p / CHAIN_FILE, p / BLOBS_DIR
    if p.is_file():
        return p, p.parent / BLOBS_DIR
    raise StoreError(f"{p}: no such ledger (expected a directory with {CHAIN_FILE} or the file itself)")


def create_ledger(
    path: str | os.PathLike[str], genesis: Genesis, *, caches: Caches | None = None
) -> tuple[SqliteBlockStore, FileBlobStore]:
    """Create a new ledger directory ``path`` (it may exist but must not hold a chain); ``caches`` is the blob
    store's (see :class:`FileBlobStore`)."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    store = SqliteBlockStore.create(p / CHAIN_FILE, genesis)
    return store, FileBlobStore(p / BLOBS_DIR, caches=caches)


def open_ledger(
    path: str | os.PathLike[str], *, readonly: bool = False, check_index: bool = True, caches: Caches | None = None
) -> tuple[SqliteBlockStore, FileBlobStore]:
    """Open an existing ledger (directory or chain file); see :meth:`SqliteBlockStore.open`. ``caches`` is the
    blob store's (see :class:`FileBlobStore`)."""
    chain, blobs = resolve_ledger_path(path)
    store = SqliteBlockStore.open(chain, readonly=readonly, check_index=check_index)
    return store, FileBlobStore(blobs, readonly=readonly, caches=caches)
