"""Errors raised by the ledger.

Hierarchy (documented once, as httpx does)::

    LedgerError                      base of everything the ledger raises on bad data
    ├── DecodeError                  bytes that are not a canonical encoding of the expected type
    ├── GenesisError                 a genesis file/object that fails validation
    ├── SignatureError               a signature that does not verify, or a signer that is not a member
    ├── ChainError                   a block that does not extend the chain (height, link, time, certificate ...)
    │   └── ReexecutionError         a block whose recorded decisions differ from re-execution
    ├── BlobError                    a blob that is missing, malformed, or whose digest does not match
    └── StoreError                   a block store that cannot be opened: missing, not a ledger, unsupported
        └── CorruptStoreError        a file identified as a concilium ledger whose contents are corrupt or
                                     inconsistent (a tampered genesis or index, an unreadable page)

Every error raised for *peer* data is a ``LedgerError``; anything else escaping ``ledger`` is a bug in
concilium itself: peer data is validated in two stages (stateless decoding and checks, then the stateful ones),
and only a peer's fault is an error a caller handles.

``StoreError`` versus ``CorruptStoreError`` is the line between bad input and an invalid ledger (exit
codes 2 and 1 of ``concilium ledger``): once a file carries the SQLite header and concilium's
``application_id``, whatever is wrong inside it is the ledger's fault, not the caller's.
"""

from __future__ import annotations

__all__ = [
    "BlobError",
    "ChainError",
    "CorruptStoreError",
    "DecodeError",
    "GenesisError",
    "LedgerError",
    "ReexecutionError",
    "SignatureError",
    "StoreError",
]


class LedgerError(Exception):
    """Base class of all ledger errors on bad input."""


class DecodeError(LedgerError):
    """Bytes are not the canonical encoding of the expected value."""


class GenesisError(LedgerError):
    """A genesis description is invalid."""


class SignatureError(LedgerError):
    """A signature does not verify, or the signer is not allowed to sign."""


class ChainError(LedgerError):
    """A block does not validly extend the chain."""


class ReexecutionError(ChainError):
    """Re-executing a block's round gives a different result from what the block records."""


class BlobError(LedgerError):
    """A content-addressed blob is missing, malformed or does not match its digest."""


class StoreError(LedgerError):
    """A block store cannot be opened (missing, not a ledger, an unsupported schema) or refuses a write."""


class CorruptStoreError(StoreError):
    """A concilium ledger file whose contents are corrupt or inconsistent: the ledger is invalid.

    ``height`` is the first bad height when one can be named (0 = the stored genesis), else None;
    ``reason`` is the message without the file and height, for :meth:`verdict`.
    """

    def __init__(self, path: object, reason: str, height: int | None = None) -> None:
        where = f"{path}: " + ("" if height is None else f"height {height}: ")
        super().__init__(where + reason)
        self.path = str(path)
        self.reason = reason
        self.height = height

    def __reduce__(self) -> tuple[object, ...]:  # the default would call __init__ with the message only
        return (type(self), (self.path, self.reason, self.height))

    def verdict(self) -> str:
        """The one-line ``FAIL`` verdict of ``concilium ledger verify`` for this error."""
        if self.height is None:
            return f"FAIL: {self.path}: {self.reason}"
        if self.height == 0:
            return f"FAIL at height 0: {self.reason}"
        return f"FAIL at height {self.height}: {self.reason} (valid prefix: {self.height - 1} blocks)"
