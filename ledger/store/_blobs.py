"""Content-addressed blob store on the file system.

``BLOBS/ab/cdef…`` holds the blob whose SHA-256 is ``abcdef…``. Writes are atomic: a temporary file
in the same directory is written, fsync'd, renamed over the final name, and the directory is fsync'd,
so a crash leaves either no file or the complete blob (never a torn one under the final name). Reads
re-hash the bytes and raise :class:`BlobError` on any mismatch, so a flipped byte is always named.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Collection
from pathlib import Path

from ledger._caches import Caches
from ledger._crypto import sha256
from ledger._errors import BlobError

__all__ = ["BLOB_BYTES_MAX", "FileBlobStore", "MemoryBlobStore"]

BLOB_BYTES_MAX = 2 << 30
"""Largest blob read or written (2 GiB)."""


_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _check_digest(digest: bytes) -> str:
    if type(digest) is not bytes or len(digest) != 32:
        raise BlobError(f"a blob digest is 32 bytes, got {digest!r:.40}")
    return digest.hex()


class FileBlobStore:
    """Blobs as files under ``root`` (created if missing unless ``readonly``); ``caches`` remembers the digests of
    the blobs it hashes (:meth:`ledger.Caches.sha256`: a node hashes an update on receipt, then stores it)."""

    def __init__(
        self, root: str | os.PathLike[str], *, readonly: bool = False, caches: Caches | None = None
    ) -> None:
        self._sha256 = sha256 if caches is None else caches.sha256
        self.root = Path(root)
        self._root_str = str(self.root)
        self._readonly = readonly
        self._dirs: set[str] = set()  # fan-out directories known to exist
        if not readonly:
            self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, digest: bytes) -> Path:
        hx = _check_digest(digest)
        return self.root / hx[:2] / hx[2:]

    def has(self, digest: bytes) -> bool:
        return self._path(digest).is_file()

    def put(self, data: bytes) -> bytes:
        """Store ``data``; return its digest. Idempotent."""
        if self._readonly:
            raise BlobError(f"{self.root}: opened read-only")
        if len(data) > BLOB_BYTES_MAX:
            raise BlobError(f"blob of {len(data)} bytes exceeds {BLOB_BYTES_MAX}")
        digest = self._sha256(data)
        final = self._path(digest)
        if final.is_file():
            return digest
        final.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dfd = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return digest

    def discard(self, digest: bytes) -> None:
        """Remove the file of ``digest`` if there is one (a corrupted blob, so that ``put`` can store it again:
        ``put`` keeps an existing file)."""
        if self._readonly:
            raise BlobError(f"{self.root}: opened read-only")
        self._path(digest).unlink(missing_ok=True)

    def put_many(self, blobs: list[bytes]) -> list[bytes]:
        """Store several blobs with two file-system barriers instead of two fsyncs per blob.

        Same guarantee as :meth:`put` for each: every temporary file is written, then ``os.sync()`` makes
        their contents durable, then they are renamed to their final names, then a second ``os.sync()``
        makes the renames durable. A crash leaves complete blobs or none under final names. Where
        ``os.sync`` does not exist this is a loop of :meth:`put`.

        This is the simulator's results-ledger hot path (a round's updates and model): it works on ``str``
        paths with ``os`` calls and names each temporary file after its blob and this process (created
        with ``O_EXCL``; ``mkstemp`` only if that name is taken), which halves the Python work per blob.
        """
        if not hasattr(os, "sync"):
            return [self.put(b) for b in blobs]
        if self._readonly:
            raise BlobError(f"{self.root}: opened read-only")
        digests: list[bytes] = []
        pending: list[tuple[str, str]] = []
        queued: set[bytes] = set()
        suffix = f"-{os.getpid()}"
        try:
            for data in blobs:
                if len(data) > BLOB_BYTES_MAX:
                    raise BlobError(f"blob of {len(data)} bytes exceeds {BLOB_BYTES_MAX}")
                digest = self._sha256(data)
                digests.append(digest)
                if digest in queued:
                    continue
                hx = digest.hex()
                parent = os.path.join(self._root_str, hx[:2])
                final = os.path.join(parent, hx[2:])
                if os.path.isfile(final):
                    continue
                if hx[:2] not in self._dirs:
                    os.makedirs(parent, exist_ok=True)
                    self._dirs.add(hx[:2])
                tmp = os.path.join(parent, ".tmp-" + hx[2:18] + suffix)
                try:
                    fd = os.open(tmp, _TMP_FLAGS, 0o600)
                except FileExistsError:  # left by a crashed process that had our pid: a fresh name
                    fd, tmp = tempfile.mkstemp(dir=parent, prefix=".tmp-")
                pending.append((tmp, final))
                queued.add(digest)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            if pending:
                os.sync()  # contents durable before any final name exists
                for tmp, final in pending:
                    os.replace(tmp, final)
                pending = []
                os.sync()  # the renames durable
        finally:
            for tmp, _ in pending:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
        return digests

    def get(self, digest: bytes) -> bytes:
        hx = _check_digest(digest)
        # os-level calls, not pathlib: this is the audit's hot path (one call per referenced blob)
        p = os.path.join(self._root_str, hx[:2], hx[2:])
        try:
            with open(p, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > BLOB_BYTES_MAX:
                    raise BlobError(f"{p}: {size} bytes exceeds {BLOB_BYTES_MAX}")
                data = f.read()
        except FileNotFoundError:
            raise BlobError(f"blob {hx} missing ({p})") from None
        except IsADirectoryError:
            raise BlobError(f"{p}: is a directory, not a blob") from None
        except OSError as e:
            raise BlobError(f"{p}: unreadable: {e.strerror}") from None
        if self._sha256(data) != digest:
            raise BlobError(f"{p}: content does not match its digest (corrupted)")
        return data


class MemoryBlobStore:
    """Blobs in a dict (tests and simulations that do not keep their ledger).

    ``put`` hashes and stores an immutable copy, so ``get`` needs no re-hash: nothing can change a stored
    ``bytes`` object in memory (disk stores re-hash every read). ``caches`` as for :class:`FileBlobStore`."""

    def __init__(self, *, caches: Caches | None = None) -> None:
        self._sha256 = sha256 if caches is None else caches.sha256
        self._blobs: dict[bytes, bytes] = {}

    def has(self, digest: bytes) -> bool:
        return digest in self._blobs

    def put(self, data: bytes) -> bytes:
        digest = self._sha256(data)
        self._blobs.setdefault(digest, bytes(data))
        return digest

    def get(self, digest: bytes) -> bytes:
        _check_digest(digest)
        data = self._blobs.get(digest)
        if data is None:
            raise BlobError(f"blob {digest.hex()} missing")
        return data

    def retain(self, keep: Collection[bytes]) -> int:
        """Forget every blob but those in ``keep`` (a simulated member that sleeps: ``node.OutsiderPolicy.shed_asleep``);
        returns how many were forgotten."""
        drop = [d for d in self._blobs if d not in keep]
        for d in drop:
            del self._blobs[d]
        return len(drop)
