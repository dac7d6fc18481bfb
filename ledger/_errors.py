"""Errors raised by the ledger.

Hierarchy (documented once, as httpx does)::

    LedgerError                      base of everything the ledger raises on bad data
    ├── DecodeError                  bytes that are not a canonical encoding of the expected type
    ├── GenesisError                 a genesis file/object that fails validation
    ├── SignatureError               a signature that does not verify, or a signer that is not a member
    ├── ChainError                   a block that does not extend the chain (height, link, time, certificate ...)
    │   └── ReexecutionError         a block whose recorded decisions differ from re-execution
    ├── BlobError                    a blob that is missing, malformed, or whose digest does not match
    └── StoreError                   a block store that is unreadable, of the wrong schema, or inconsistent

Every error raised for *peer* data is a ``LedgerError``; anything else escaping ``ledger`` is a bug in
concilium itself (STYLE.md, "Validate in two stages").
"""

from __future__ import annotations

__all__ = [
    "BlobError",
    "ChainError",
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
    """A block store cannot be opened or is inconsistent."""
