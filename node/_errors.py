"""Errors raised by the node layer.

Hierarchy::

    NodeError                  base of node-layer errors on bad input (files, configuration)
    ├── KeyFileError           a key file that is missing, unreadable, of the wrong format or mode
    └── ConfigFileError        a genesis/config file that is missing, not TOML, or fails validation

Both carry the offending path in their message. Ledger-level problems keep their ``ledger`` types.
"""

from __future__ import annotations

__all__ = ["ConfigFileError", "KeyFileError", "NodeError"]


class NodeError(Exception):
    """Base class of node-layer errors."""


class KeyFileError(NodeError):
    """A key file cannot be used."""


class ConfigFileError(NodeError):
    """A configuration or genesis file cannot be used."""
