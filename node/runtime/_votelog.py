"""The vote log: the replica's durable record (``Replica.durable()``), on disk before a vote leaves the node.

docs/design.md, "Durability": "a small vote log (height, view, what this replica signed) written and fsynced
*before* a vote leaves the node: a restarted replica never signs two different things for one (height,
view)". The runtime calls :meth:`VoteLog.save` whenever ``Replica.durable_version`` changed, after it
persisted the batch's ``Commit`` blocks and before it sends the batch's messages, and builds the replica
with ``Replica(..., restore=VoteLog(path).load())`` on start.

File format and why
-------------------
One file holding the latest record only, replaced atomically::

    b"concilium-votelog\\n" ‖ format (1 byte) ‖ length (8 bytes, big-endian) ‖ SHA-256(record) ‖ record

:meth:`VoteLog.save` writes ``<name>.tmp``, fsyncs it, renames it over ``<name>`` and fsyncs the
directory (the rename itself is durable only then). A crash at any instant leaves either the previous
file or the new one, never a mix: POSIX ``rename`` replaces atomically, and the data was on disk before
the name pointed at it. A leftover ``.tmp`` (a crash before the rename) is ignored by :meth:`load` and
overwritten by the next save.

An append-only log with a checksum per record and a torn tail tolerated would also be crash-safe, but
the record is a snapshot of one height (a few KiB: only the latest matters, the previous heights are
decided), so appending would only add a compaction step and a longer read on start. The header's length
and SHA-256 still matter with atomic replacement: they turn what the rename cannot rule out (a disk or
file system that loses or corrupts written blocks, a copy cut short, an edit by hand) into a clear
:class:`VoteLogError` instead of a record that decodes into something else. A torn or corrupt vote log is
never "repaired" by starting without it: the node refuses to start, as a replica without its votes could
sign twice; an operator who knows the node signed nothing since (or accepts the risk) removes the file.

Single writer: the node that owns the data directory. Not thread-safe.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from node._errors import VoteLogError
from node.config import write_file_atomic

__all__ = ["VOTE_LOG_BYTES_MAX", "VoteLog", "VoteLogError"]

_MAGIC = b"concilium-votelog\n"
_FORMAT = 1
_HEADER_BYTES = len(_MAGIC) + 1 + 8 + 32
VOTE_LOG_BYTES_MAX = 256 << 20
"""Largest record :meth:`VoteLog.load` reads (``consensus.DURABLE_BYTES_MAX``)."""


def _oneline(e: OSError) -> str:
    return (e.strerror or type(e).__name__).replace("\n", " ")


class VoteLog:
    """The vote log file at ``path`` (e.g. ``<data dir>/votes``): :meth:`load` and :meth:`save`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.temp_path = self.path.with_name(self.path.name + ".tmp")

    def __repr__(self) -> str:
        return f"VoteLog({str(self.path)!r})"

    def load(self) -> bytes | None:
        """The last saved record, or None if none was ever saved. Raises :class:`VoteLogError` if the
        file is torn, corrupt or not a vote log (a leftover temporary file is ignored)."""
        try:
            with open(self.path, "rb") as f:
                head = f.read(_HEADER_BYTES)
                if not head:
                    raise VoteLogError(self.path, "empty file (torn write)")
                if not head.startswith(_MAGIC) and not _MAGIC.startswith(head):
                    raise VoteLogError(self.path, "not a concilium vote log (bad magic)")
                if len(head) < _HEADER_BYTES:
                    raise VoteLogError(self.path, f"torn: {len(head)} bytes, shorter than the header")
                fmt = head[len(_MAGIC)]
                if fmt != _FORMAT:
                    raise VoteLogError(self.path, f"unsupported format {fmt} (this version reads {_FORMAT})")
                length = int.from_bytes(head[len(_MAGIC) + 1 : len(_MAGIC) + 9], "big")
                digest = head[len(_MAGIC) + 9 :]
                if length > VOTE_LOG_BYTES_MAX:
                    raise VoteLogError(self.path, f"record of {length} bytes exceeds {VOTE_LOG_BYTES_MAX} (corrupt)")
                record = f.read(length + 1)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise VoteLogError(self.path, "is a directory") from None
        except OSError as e:
            raise VoteLogError(self.path, f"cannot read: {_oneline(e)}") from None
        if len(record) < length:
            raise VoteLogError(self.path, f"torn: {len(record)} of {length} record bytes")
        if len(record) > length:
            raise VoteLogError(self.path, "trailing bytes after the record (corrupt)")
        if hashlib.sha256(record).digest() != digest:
            raise VoteLogError(self.path, "checksum mismatch (corrupt)")
        return record

    def save(self, record: bytes) -> None:
        """Replace the log by ``record`` atomically and durably (temp file, fsync, rename, fsync of the
        directory); returns once it is on disk. Raises :class:`VoteLogError` if it cannot: the votes in
        ``record`` must then not be sent."""
        if not isinstance(record, bytes):
            raise TypeError(f"record must be bytes, got {type(record).__name__}")
        if len(record) > VOTE_LOG_BYTES_MAX:
            raise VoteLogError(self.path, f"record of {len(record)} bytes exceeds {VOTE_LOG_BYTES_MAX}")
        data = _MAGIC + bytes([_FORMAT]) + len(record).to_bytes(8, "big") + hashlib.sha256(record).digest() + record
        write_file_atomic(self.path, data, overwrite=True, mode=0o600,
                          error=lambda msg: VoteLogError(self.path, f"cannot save: {msg}"))  # type: ignore[arg-type]
        try:
            self.temp_path.unlink(missing_ok=True)  # a leftover of a save torn before its rename: not the log
        except OSError:
            pass


