"""The node: ``node.core`` (the sans-I/O orchestrator of consensus, ledger and learning), ``node.config``,
``node.keys``, ``node.adversary``, ``node.reexec`` and ``node.runtime`` (trio + py-libp2p). This module exports the
node-layer errors only, so importing it stays cheap (no torch).
"""

from node._errors import (
    ConfigFileError,
    KeyFileError,
    NodeError,
    OutputPathError,
    PersistError,
    Terminated,
    VoteLogError,
)

__all__ = [
    "ConfigFileError", "KeyFileError", "NodeError", "OutputPathError", "PersistError", "Terminated", "VoteLogError",
]
