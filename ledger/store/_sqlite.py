"""SQLite block store: WAL, ``synchronous=FULL``, one transaction per block, schema version recorded.

Crash consistency: each append is a single SQLite transaction, durable when ``append`` returns
(WAL + ``synchronous=FULL`` fsyncs the log on commit). A ``kill -9`` at any instant therefore leaves
the blocks ``1..k`` of some committed prefix; reopening runs SQLite's WAL recovery and then re-checks
the chain invariants (contiguous heights, hash links) before accepting further appends.

Layout of a ledger directory (``open_ledger``)::

    LEDGER/chain.sqlite     blocks + genesis + schema version
    LEDGER/blobs/           content-addressed blobs (see ledger.store._blobs)
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

from ledger._blockstore import check_append
from ledger._errors import DecodeError, StoreError
from ledger._types import Block, Genesis

__all__ = ["SCHEMA_VERSION", "SqliteBlockStore"]

SCHEMA_VERSION = 1
_APP_ID = 0x436E636C  # "Cncl": PRAGMA application_id marks our files

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) STRICT;
CREATE TABLE blocks (
    height    INTEGER PRIMARY KEY CHECK (height >= 1),
    hash      BLOB NOT NULL CHECK (length(hash) = 32),
    prev_hash BLOB NOT NULL CHECK (length(prev_hash) = 32),
    data      BLOB NOT NULL
) STRICT;
"""


class SqliteBlockStore:
    """A :class:`ledger.BlockStore` in one SQLite file.

    Use :meth:`create` for a new chain and :meth:`open` for an existing one (``readonly=True`` for
    audits: never creates or modifies the database file).
    """

    def __init__(
        self, conn: sqlite3.Connection, path: Path, genesis: Genesis, readonly: bool, check_index: bool = True
    ) -> None:
        self._conn = conn
        self.path = path
        self._genesis = genesis
        self._readonly = readonly
        self._height, self._head = self._load_head(check_index)

    # --- opening ------------------------------------------------------------------------------

    @staticmethod
    def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
        try:
            if readonly:
                conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
            else:
                conn = sqlite3.connect(path, isolation_level=None)
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            return conn
        except sqlite3.Error as e:
            raise StoreError(f"{path}: not a concilium ledger ({e})") from None

    @classmethod
    def create(cls, path: str | os.PathLike[str], genesis: Genesis) -> SqliteBlockStore:
        """Create a new store for ``genesis`` at ``path`` (which must not exist)."""
        p = Path(path)
        if p.exists():
            raise StoreError(f"{p}: already exists")
        conn = cls._connect(p, readonly=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA application_id={_APP_ID}")
            conn.execute("BEGIN IMMEDIATE")
            for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                conn.execute(stmt)
            conn.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?)",
                [
                    ("schema_version", str(SCHEMA_VERSION).encode()),
                    ("chain_id", genesis.chain_id.encode()),
                    ("genesis", genesis.encode()),  # type: ignore[attr-defined]
                    ("genesis_hash", genesis.hash()),
                ],
            )
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            conn.close()
            raise StoreError(f"{p}: cannot create: {e}") from None
        return cls(conn, p, genesis, readonly=False)

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, readonly: bool = False, check_index: bool = True
    ) -> SqliteBlockStore:
        """Open an existing store; checks the schema version, the genesis and the chain invariants.

        ``check_index=False`` (read-only audits only) skips the index link check so that the auditor,
        which re-derives everything from the block bytes, can name the first bad height itself.
        """
        if not check_index and not readonly:
            raise ValueError("check_index=False is only for read-only audits")
        p = Path(path)
        if not p.is_file():
            raise StoreError(f"{p}: no such ledger file")
        conn = cls._connect(p, readonly=readonly)
        try:
            (app_id,) = conn.execute("PRAGMA application_id").fetchone()
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.Error as e:
            conn.close()
            raise StoreError(f"{p}: not a concilium ledger ({e})") from None
        try:
            if app_id != _APP_ID:
                raise StoreError(f"{p}: not a concilium ledger (application_id {app_id:#x})")
            version = meta.get("schema_version")
            if version != str(SCHEMA_VERSION).encode():
                raise StoreError(f"{p}: unsupported schema version {version!r}, this concilium reads {SCHEMA_VERSION}")
            if "genesis" not in meta:
                raise StoreError(f"{p}: genesis missing")
            try:
                genesis = Genesis.decode(meta["genesis"])  # type: ignore[attr-defined]
            except DecodeError as e:
                raise StoreError(f"{p}: stored genesis is corrupt: {e}") from None
            if meta.get("genesis_hash") != genesis.hash():
                raise StoreError(f"{p}: stored genesis hash does not match the stored genesis")
            return cls(conn, p, genesis, readonly=readonly, check_index=check_index)
        except BaseException:
            conn.close()
            raise

    # --- invariants on read -------------------------------------------------------------------

    def _load_head(self, check: bool) -> tuple[int, bytes]:
        """Read side of the append invariants: heights 1..n contiguous, every prev_hash links."""
        try:
            rows = self._conn.execute("SELECT height, hash, prev_hash FROM blocks ORDER BY height").fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: unreadable: {e}") from None
        head = self._genesis.hash()
        if not check:
            return len(rows), (bytes(rows[-1][1]) if rows else head)
        for expected, (height, h, prev) in enumerate(rows, start=1):
            if height != expected:
                raise StoreError(f"{self.path}: height {expected} is missing (next stored height is {height})")
            if prev != head:
                raise StoreError(f"{self.path}: height {height}: prev_hash does not link to height {height - 1}")
            head = h
        return len(rows), head

    # --- BlockStore ---------------------------------------------------------------------------

    def genesis(self) -> Genesis:
        return self._genesis

    def height(self) -> int:
        return self._height

    def head_hash(self) -> bytes:
        return self._head

    def append(self, block: Block) -> None:
        self.append_many([block])

    def append_many(self, blocks: Sequence[Block]) -> None:
        """Append consecutive blocks in one transaction (one fsync): all of them or, on any error, none."""
        if self._readonly:
            raise StoreError(f"{self.path}: opened read-only")
        rows = []
        height, head = self._height, self._head
        for block in blocks:
            check_append(height, head, block)
            height, head = block.header.height, block.hash()
            rows.append((height, head, block.header.prev_hash, block.encode()))  # type: ignore[attr-defined]
        if not rows:
            return
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            # Re-check inside the write transaction: another writer (a second process) must not race us.
            (top,) = self._conn.execute("SELECT coalesce(max(height), 0) FROM blocks").fetchone()
            if top != self._height:
                self._conn.execute("ROLLBACK")
                raise StoreError(f"{self.path}: store changed under us (height {top}, expected {self._height})")
            self._conn.executemany("INSERT INTO blocks(height, hash, prev_hash, data) VALUES (?, ?, ?, ?)", rows)
            self._conn.execute("COMMIT")
        except sqlite3.Error as e:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise StoreError(f"{self.path}: append failed: {e}") from None
        self._height, self._head = height, head

    def get_raw(self, height: int) -> bytes:
        try:
            row = self._conn.execute("SELECT data FROM blocks WHERE height = ?", (height,)).fetchone()
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: unreadable: {e}") from None
        if row is None:
            raise StoreError(f"{self.path}: no block at height {height} (store height {self._height})")
        return bytes(row[0])

    def get(self, height: int) -> Block:
        return Block.decode(self.get_raw(height))  # type: ignore[attr-defined]

    def stored_hash(self, height: int) -> bytes:
        """The hash column of ``height`` (an index; audits recompute it from the block bytes)."""
        row = self._conn.execute("SELECT hash FROM blocks WHERE height = ?", (height,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no block at height {height}")
        return bytes(row[0])

    def iter_raw(self, start: int = 1) -> Iterator[tuple[int, bytes]]:
        try:
            cur = self._conn.execute("SELECT height, data FROM blocks WHERE height >= ? ORDER BY height", (start,))
            for height, data in cur:
                yield height, bytes(data)
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: unreadable: {e}") from None

    def iter_rows(self, start: int = 1) -> Iterator[tuple[int, bytes, bytes]]:
        """``(height, block bytes, stored hash index)`` from ``start`` upward (for audits)."""
        try:
            cur = self._conn.execute(
                "SELECT height, data, hash FROM blocks WHERE height >= ? ORDER BY height", (start,)
            )
            for height, data, h in cur:
                yield height, bytes(data), bytes(h)
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: unreadable: {e}") from None

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> SqliteBlockStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
