"""Errors raised by the node layer.

Hierarchy::

    NodeError                  base of node-layer errors on bad input (files, configuration)
    ├── KeyFileError           a key file that is missing, unreadable, of the wrong format or mode
    ├── ConfigFileError        a genesis/config file that is missing, not TOML, or fails validation
    ├── OutputPathError        an output file or folder that cannot be written as asked (exists, is a
    │                          directory, under a file, unwritable, a symbolic link without --force)
    └── VoteLogError           a node's vote log that cannot be read (torn, corrupt, not a vote log) or
                               written: the node must not start, or go on voting, without it

    Terminated                 (a KeyboardInterrupt) the process was asked to stop with SIGTERM and
                               stopped cleanly; the command line exits 143 (128 + SIGTERM)

Each carries the offending path in its message. Ledger-level problems keep their ``ledger`` types.
"""

from __future__ import annotations

__all__ = [
    "ConfigFileError", "KeyFileError", "NodeError", "OutputPathError", "PersistError", "Terminated", "VoteLogError",
]


class NodeError(Exception):
    """Base class of node-layer errors."""


class KeyFileError(NodeError):
    """A key file cannot be used."""


class ConfigFileError(NodeError):
    """A configuration or genesis file cannot be used."""


class OutputPathError(NodeError):
    """An output path cannot be written as asked; nothing was written."""


class PersistError(NodeError):
    """The node cannot write its data dir (a full disk, a read-only mount, a removed directory): it stops, with
    this one line naming the path and the reason, whichever task met it. What it had written stays consistent (each
    write is atomic); started again with room, it resumes from there."""


class VoteLogError(NodeError):
    """The vote log cannot be read (torn, corrupt, not a vote log) or written; the message is one line
    that names the file. The node must not start (or go on voting) without it."""

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(f"vote log {path}: {reason}")
        self.path = str(path)
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.reason))


class Terminated(KeyboardInterrupt):
    """SIGTERM's clean stop: raised where Ctrl-C would raise ``KeyboardInterrupt`` (a long job stops between
    two events, keeping everything it decided), so that the caller can tell the two apart."""
