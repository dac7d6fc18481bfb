"""SQLite block store: WAL, ``synchronous=FULL``, one transaction per batch, schema version recorded.

Crash consistency: each append is a single SQLite transaction, durable when ``append`` returns
(WAL + ``synchronous=FULL`` fsyncs the log on commit). A ``kill -9`` at any instant therefore leaves
the blocks ``1..k`` of some committed prefix; reopening runs SQLite's WAL recovery and then re-checks
the chain invariants (contiguous heights, hash links) before accepting further appends.

The WAL is a second file, ``chain.sqlite-wal``, that a copy of ``chain.sqlite`` alone leaves behind. So
the writer checkpoints it into ``chain.sqlite`` after every batch, and a clean :meth:`~SqliteBlockStore.close`
switches the file back to ``journal_mode=DELETE`` (a writer switches it to WAL again when it opens). A
file whose header still says WAL but that has no ``-wal`` beside it was copied from a live or crashed
writer: read-only opens say so in :attr:`SqliteBlockStore.warning`.

Read-only opens (audits) never create a file beside the ledger, and work in a read-only directory or
on a read-only mount: a file in rollback mode opens ``mode=ro``; a WAL file with its ``-wal`` and
``-shm`` opens ``mode=ro`` in place (SQLite >= 3.22 reads a read-only ``-shm``); a WAL file without its
``-wal`` opens ``immutable=1`` (which ignores a WAL, and there is none); and a ``-wal`` without ``-shm``,
or a rollback journal left by a crash, is read from a copy in a private temporary directory, where
SQLite may create the files it needs.

Which failures mean what: until a file is identified as a concilium ledger (the SQLite header and our
``application_id``) a failure is :class:`StoreError` (bad input); after that, anything inconsistent or
unreadable inside it is :class:`CorruptStoreError` (an invalid ledger), naming the first bad height when
there is one.

Layout of a ledger directory (``open_ledger``)::

    LEDGER/chain.sqlite     blocks + genesis + schema version
    LEDGER/blobs/           content-addressed blobs (see ledger.store._blobs)
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from ledger._blockstore import check_append
from ledger._errors import CorruptStoreError, LedgerError, StoreError
from ledger._types import Block, Genesis

__all__ = ["SCHEMA_VERSION", "SqliteBlockStore"]

SCHEMA_VERSION = 1
_APP_ID = 0x436E636C  # "Cncl": PRAGMA application_id marks our files
_MAGIC = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) STRICT;
CREATE TABLE blocks (
    height    INTEGER PRIMARY KEY CHECK (height >= 1),
    hash      BLOB NOT NULL CHECK (length(hash) = 32),
    prev_hash BLOB NOT NULL CHECK (length(prev_hash) = 32),
    data      BLOB NOT NULL
) STRICT;
"""


def _header(path: Path) -> bytes:
    """The first 100 bytes of the file (the SQLite database header)."""
    try:
        with open(path, "rb") as f:
            return f.read(100)
    except OSError as e:
        raise StoreError(f"{path}: cannot read ({e.strerror})") from None


def _is_ours(header: bytes) -> bool:
    return header[:16] == _MAGIC and header[68:72] == _APP_ID.to_bytes(4, "big")


def _wal_mode(header: bytes) -> bool:
    """Header bytes 18-19 (file format write/read versions) are 2 in WAL mode, 1 in rollback mode."""
    return header[:16] == _MAGIC and header[18:20] == b"\x02\x02"


_ENVIRONMENT_ERRORS = frozenset({3, 5, 6, 7, 8, 10, 13, 14, 15, 22, 23})
"""SQLite's primary result codes that say nothing about the file's contents (PERM, BUSY, LOCKED, NOMEM,
READONLY, IOERR, FULL, CANTOPEN, PROTOCOL, NOLFS, AUTH): the caller cannot read it, so bad input, not an
invalid ledger."""


def _failure(path: Path, e: sqlite3.Error, ours: bool) -> StoreError:
    """The error for ``e`` met while reading ``path``; ``ours``: the file is identified as a concilium ledger."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _ENVIRONMENT_ERRORS:
        return StoreError(f"{path}: cannot read ({e})")
    if ours:
        return CorruptStoreError(path, f"unreadable: {e}")
    return StoreError(f"{path}: not a concilium ledger ({e})")


def _uri(path: Path, query: str) -> str:
    return f"{path.resolve().as_uri()}?{query}"


def _row_fault(height: int, data: bytes, h: bytes, prev: bytes) -> tuple[Block | None, str | None]:
    """``(block, None)`` if the stored bytes decode to a block of ``height`` that its index columns describe,
    else ``(block or None, why)``."""
    try:
        block = Block.decode(data)
    except LedgerError as e:
        return None, f"the stored block does not decode: {e}"
    if block.header.height != height:
        return block, f"the stored block is height {block.header.height}"
    if block.hash() != h:
        return block, "the store's hash index differs from the block's hash"
    if block.header.prev_hash != prev:
        return block, "the store's prev_hash index differs from the block's prev_hash"
    return block, None


class SqliteBlockStore:
    """A :class:`ledger.BlockStore` in one SQLite file.

    Use :meth:`create` for a new chain and :meth:`open` for an existing one (``readonly=True`` for
    audits: never creates or modifies any file beside the ledger). :attr:`warning` is a one-line note
    for the reader (a WAL-mode file without its ``-wal``), or None.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        genesis: Genesis,
        readonly: bool,
        check_index: bool = True,
        *,
        scratch: tempfile.TemporaryDirectory[str] | None = None,
        warning: str | None = None,
    ) -> None:
        self._conn: sqlite3.Connection | None = conn
        self.path = path
        self._genesis = genesis
        self._readonly = readonly
        self._scratch = scratch  # the private copy a read-only open works on, if any
        self.warning = warning
        self._height, self._head = self._load_head(check_index)

    # --- opening ------------------------------------------------------------------------------

    @staticmethod
    def _connect(
        path: Path, readonly: bool, ours: bool = False, copy_wal: bool = False
    ) -> tuple[sqlite3.Connection, tempfile.TemporaryDirectory[str] | None, str | None]:
        """``(connection, private copy or None, warning or None)``; see the module docstring for the read-only
        cases. ``ours``: the header already identifies a concilium ledger (for the error on failure); ``copy_wal``:
        read a file with a ``-wal`` beside it from a private copy, even when its ``-shm`` is there too."""
        scratch: tempfile.TemporaryDirectory[str] | None = None
        warning = None
        try:
            if not readonly:
                conn = sqlite3.connect(path, isolation_level=None)
            else:
                wal, shm, journal = (Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal"))
                conn = None
                if wal.exists() and shm.exists() and not journal.exists() and not copy_wal:
                    conn = sqlite3.connect(_uri(path, "mode=ro"), uri=True, isolation_level=None)
                    try:
                        conn.execute("PRAGMA schema_version").fetchone()  # opens the WAL now, not at the first read
                    except sqlite3.Error:
                        conn.close()  # e.g. an unreadable -shm: read a copy instead
                        conn = None
                elif not wal.exists() and not journal.exists():
                    if _wal_mode(_header(path)):
                        # mode=ro would create -wal and -shm (or fail in a read-only directory)
                        conn = sqlite3.connect(_uri(path, "mode=ro&immutable=1"), uri=True, isolation_level=None)
                        warning = (
                            f"{path.name} is in WAL mode with no {wal.name} beside it: "
                            "blocks after the last checkpoint may be missing"
                        )
                    else:
                        conn = sqlite3.connect(_uri(path, "mode=ro"), uri=True, isolation_level=None)
                if conn is None:
                    scratch, conn = SqliteBlockStore._private_copy(path)
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            return conn, scratch, warning
        except sqlite3.Error as e:
            if scratch is not None:
                scratch.cleanup()
            raise _failure(path, e, ours) from None

    @staticmethod
    def _private_copy(path: Path) -> tuple[tempfile.TemporaryDirectory[str], sqlite3.Connection]:
        """Copy the file with its ``-wal``/``-journal`` into a private directory and open the copy there.

        Opened read-write so that SQLite can replay the WAL or roll back the journal in the copy; the
        original is only read."""
        scratch = tempfile.TemporaryDirectory(prefix="concilium-ledger-")
        conn = None
        try:
            copy = Path(scratch.name) / path.name
            for suffix in ("", "-wal", "-journal"):
                src = Path(f"{path}{suffix}")
                if suffix == "" or src.exists():
                    shutil.copyfile(src, f"{copy}{suffix}")
            conn = sqlite3.connect(copy, isolation_level=None)
            conn.execute("PRAGMA schema_version").fetchone()  # replays the WAL, or rolls back the journal
            conn.execute("PRAGMA query_only=ON")
        except BaseException as e:
            if conn is not None:
                conn.close()
            scratch.cleanup()
            if isinstance(e, OSError):
                raise StoreError(f"{path}: cannot read ({e.strerror})") from None
            raise
        return scratch, conn

    @classmethod
    def create(cls, path: str | os.PathLike[str], genesis: Genesis) -> SqliteBlockStore:
        """Create a new store for ``genesis`` at ``path`` (which must not exist)."""
        p = Path(path)
        if p.exists():
            raise StoreError(f"{p}: already exists")
        conn, _, _ = cls._connect(p, readonly=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"PRAGMA application_id={_APP_ID}")  # in the transaction: a crash leaves no half-marked file
            for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                conn.execute(stmt)
            conn.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?)",
                [
                    ("schema_version", str(SCHEMA_VERSION).encode()),
                    ("chain_id", genesis.chain_id.encode()),
                    ("genesis", genesis.encode()),
                    ("genesis_hash", genesis.hash()),
                ],
            )
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as e:
            conn.close()
            raise StoreError(f"{p}: cannot create: {e}") from None
        return cls(conn, p, genesis, readonly=False)

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, readonly: bool = False, check_index: bool = True, copy_wal: bool = False
    ) -> SqliteBlockStore:
        """Open an existing store; checks the schema version, the genesis and the chain invariants.

        ``check_index=False`` (read-only audits only) skips the index link check so that the auditor,
        which re-derives everything from the block bytes and compares the index columns with them,
        can name the first bad height itself.

        ``copy_wal=True`` (read-only only): a file with a ``-wal`` beside it (a writer that crashed, or one still
        running) is read from a private copy, so that not even the ``-shm`` in place changes, which a read-only
        connection in place may rewrite (its WAL index): a node's start that may still fail reads its ledger so.
        """
        if not check_index and not readonly:
            raise ValueError("check_index=False is only for read-only audits")
        if copy_wal and not readonly:
            raise ValueError("copy_wal=True is only for read-only opens")
        p = Path(path)
        if not p.is_file():
            raise StoreError(f"{p}: no such ledger file")
        ours = _is_ours(_header(p))
        conn, scratch, warning = cls._connect(p, readonly=readonly, ours=ours, copy_wal=copy_wal)
        try:
            try:
                (app_id,) = conn.execute("PRAGMA application_id").fetchone()
            except sqlite3.Error as e:
                raise _failure(p, e, ours) from None
            if app_id != _APP_ID:
                if ours:
                    raise CorruptStoreError(p, f"unreadable: application_id {app_id:#x} in place of {_APP_ID:#x}")
                hint = f"; {warning}" if warning else ""
                raise StoreError(f"{p}: not a concilium ledger (application_id {app_id:#x}{hint})")
            # From here on the file is a concilium ledger: whatever is wrong in it makes the ledger invalid.
            try:
                meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            except sqlite3.Error as e:
                raise _failure(p, e, ours=True) from None
            version = meta.get("schema_version")
            if version != str(SCHEMA_VERSION).encode():
                if isinstance(version, bytes) and version.isdigit() and int(version) > SCHEMA_VERSION:
                    raise StoreError(f"{p}: unsupported schema version {version!r}, this concilium reads {SCHEMA_VERSION}")
                raise CorruptStoreError(p, f"the stored schema version {version!r:.40} is not one concilium writes")
            if "genesis" not in meta:
                raise CorruptStoreError(p, "the stored genesis is missing", 0)
            try:
                genesis = Genesis.decode(meta["genesis"])
            except LedgerError as e:
                raise CorruptStoreError(p, f"the stored genesis is corrupt: {e}", 0) from None
            if meta.get("genesis_hash") != genesis.hash():
                raise CorruptStoreError(p, "the stored genesis hash does not match the stored genesis", 0)
            if meta.get("chain_id") != genesis.chain_id.encode():
                raise CorruptStoreError(p, "the stored chain id differs from the stored genesis's", 0)
            if not readonly:
                try:
                    conn.execute("PRAGMA journal_mode=WAL")  # a clean close left it in rollback mode
                except sqlite3.Error as e:
                    raise StoreError(f"{p}: cannot open for writing: {e}") from None
            return cls(conn, p, genesis, readonly=readonly, check_index=check_index, scratch=scratch, warning=warning)
        except BaseException:
            conn.close()
            if scratch is not None:
                scratch.cleanup()
            raise

    # --- invariants on read -------------------------------------------------------------------

    def _corrupt(self, reason: str, height: int | None = None) -> CorruptStoreError:
        return CorruptStoreError(self.path, reason, height)

    def _unreadable(self, e: sqlite3.Error) -> StoreError:
        return _failure(self.path, e, ours=True)

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"{self.path}: closed")
        return self._conn

    def _load_head(self, check: bool) -> tuple[int, bytes]:
        """Read side of the append invariants: heights 1..n contiguous, every prev_hash links, and the
        head's hash index matches the head block (``check=False``: the head only, audits check the rest)."""
        try:
            if not check:
                row = self._db().execute("SELECT height, hash FROM blocks ORDER BY height DESC LIMIT 1").fetchone()
                return (0, self._genesis.hash()) if row is None else (int(row[0]), bytes(row[1]))
            rows = self._db().execute("SELECT height, hash, prev_hash FROM blocks ORDER BY height").fetchall()
        except sqlite3.Error as e:
            raise self._unreadable(e) from None
        head = self._genesis.hash()
        for expected, (height, h, prev) in enumerate(rows, start=1):
            if height != expected:
                raise self._corrupt(f"missing (the next stored block is height {height})", expected)
            if prev != head:
                raise self._link_fault(height)
            head = h
        if rows:
            fault = self._block_fault(len(rows))
            if fault is not None:
                raise self._corrupt(fault, len(rows))
        return len(rows), bytes(head)

    def _link_fault(self, height: int) -> CorruptStoreError:
        """The index says ``height`` does not link to ``height - 1``: name the first row at fault."""
        for h in (height - 1, height):
            fault = self._block_fault(h) if h >= 1 else None
            if fault is not None:
                return self._corrupt(fault, h)
        return self._corrupt(f"prev_hash does not link to height {height - 1}", height)

    def _block_fault(self, height: int) -> str | None:
        try:
            row = self._db().execute("SELECT data, hash, prev_hash FROM blocks WHERE height = ?", (height,)).fetchone()
        except sqlite3.Error as e:
            failure = self._unreadable(e)
            if not isinstance(failure, CorruptStoreError):
                raise failure from None
            return failure.reason
        return _row_fault(height, bytes(row[0]), bytes(row[1]), bytes(row[2]))[1]

    # --- BlockStore ---------------------------------------------------------------------------

    @property
    def readonly(self) -> bool:
        """Opened with ``readonly=True``: :meth:`append` refuses, and nothing beside the ledger is created."""
        return self._readonly

    def genesis(self) -> Genesis:
        return self._genesis

    def height(self) -> int:
        return self._height

    def head_hash(self) -> bytes:
        return self._head

    def append(self, block: Block) -> None:
        self.append_many([block])

    def append_many(self, blocks: Sequence[Block]) -> None:
        """Append consecutive blocks in one transaction (one fsync): all of them or, on any error, none.

        Then checkpoints the WAL into the main file, so that a copy of ``chain.sqlite`` alone holds
        every batch but a torn last one."""
        if self._readonly:
            raise StoreError(f"{self.path}: opened read-only")
        rows = []
        height, head = self._height, self._head
        for block in blocks:
            check_append(height, head, block)
            height, head = block.header.height, block.hash()
            rows.append((height, head, block.header.prev_hash, block.encode()))
        if not rows:
            return
        conn = self._db()
        try:
            conn.execute("BEGIN IMMEDIATE")
            # Re-check inside the write transaction: another writer (a second process) must not race us.
            (top,) = conn.execute("SELECT coalesce(max(height), 0) FROM blocks").fetchone()
            if top != self._height:
                conn.execute("ROLLBACK")
                raise StoreError(f"{self.path}: store changed under us (height {top}, expected {self._height})")
            conn.executemany("INSERT INTO blocks(height, hash, prev_hash, data) VALUES (?, ?, ?, ?)", rows)
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"{self.path}: append failed: {e}") from None
        self._height, self._head = height, head
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()  # never waits for readers
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: checkpoint failed (the blocks are committed): {e}") from None

    def get_raw(self, height: int) -> bytes:
        try:
            row = self._db().execute("SELECT data FROM blocks WHERE height = ?", (height,)).fetchone()
        except sqlite3.Error as e:
            raise self._unreadable(e) from None
        if row is None:
            raise StoreError(f"{self.path}: no block at height {height} (store height {self._height})")
        return bytes(row[0])

    def get(self, height: int) -> Block:
        return Block.decode(self.get_raw(height))

    def get_checked(self, height: int) -> Block:
        """Block ``height``, its bytes checked against the index columns (a view's read; audits use
        :meth:`iter_rows`). Raises :class:`CorruptStoreError` naming ``height`` on a mismatch."""
        try:
            row = self._db().execute("SELECT data, hash, prev_hash FROM blocks WHERE height = ?", (height,)).fetchone()
        except sqlite3.Error as e:
            raise self._unreadable(e) from None
        if row is None:
            raise StoreError(f"{self.path}: no block at height {height} (store height {self._height})")
        block, fault = _row_fault(height, bytes(row[0]), bytes(row[1]), bytes(row[2]))
        if fault is not None or block is None:
            raise self._corrupt(fault or "unreadable", height)
        return block

    def stored_hash(self, height: int) -> bytes:
        """The hash column of ``height`` (an index; audits recompute it from the block bytes)."""
        row = self._db().execute("SELECT hash FROM blocks WHERE height = ?", (height,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no block at height {height}")
        return bytes(row[0])

    def iter_raw(self, start: int = 1) -> Iterator[tuple[int, bytes]]:
        try:
            cur = self._db().execute("SELECT height, data FROM blocks WHERE height >= ? ORDER BY height", (start,))
            for height, data in cur:
                yield height, bytes(data)
        except sqlite3.Error as e:
            raise self._unreadable(e) from None

    def iter_rows(self, start: int = 1) -> Iterator[tuple[int, bytes, bytes, bytes]]:
        """``(height, block bytes, hash index, prev_hash index)`` from ``start`` upward (for audits, which
        compare both index columns with the block bytes)."""
        try:
            cur = self._db().execute(
                "SELECT height, data, hash, prev_hash FROM blocks WHERE height >= ? ORDER BY height", (start,)
            )
            for height, data, h, prev in cur:
                yield height, bytes(data), bytes(h), bytes(prev)
        except sqlite3.Error as e:
            raise self._unreadable(e) from None

    def iter_checked(self) -> Iterator[tuple[int, bytes, Block]]:
        """``(height, block bytes, block)`` for every block, for views (``show``, ``export``).

        Raises :class:`CorruptStoreError` at the first height that is missing, whose bytes do not decode,
        whose index columns disagree with its bytes, or that does not link to the block before: the
        same heights :func:`ledger.audit_chain` names for these faults (it also checks signatures,
        certificates and the rest of the chain rules, which views do not)."""
        head = self._genesis.hash()
        for expected, (height, data, h, prev) in enumerate(self.iter_rows(), start=1):
            if height != expected:
                raise self._corrupt(f"missing (the next stored block is height {height})", expected)
            block, fault = _row_fault(height, data, h, prev)
            if fault is None and prev != head:
                fault = f"prev_hash does not link to height {height - 1}"
            if fault is not None or block is None:
                raise self._corrupt(fault or "unreadable", height)
            head = h
            yield height, data, block

    def close(self) -> None:
        """Close; a writer first checkpoints the WAL and switches the file back to rollback mode, so that
        the file alone is the whole ledger (left in WAL mode when another connection still has it open)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if not self._readonly:
                try:
                    conn.execute("PRAGMA busy_timeout=0")
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    conn.execute("PRAGMA journal_mode=DELETE").fetchone()
                except sqlite3.Error:
                    pass  # every block is already durable in the WAL; a later writer or reader replays it
        finally:
            conn.close()
            if self._scratch is not None:
                self._scratch.cleanup()

    def __enter__(self) -> SqliteBlockStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
