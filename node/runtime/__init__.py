"""The network runtime: the second driver of :class:`node.core.NodeCore`, under trio + py-libp2p.

It decides nothing the core does not: it moves the core's bytes over Noise/Yamux streams, feeds it
wall-clock ticks, runs local training off the event loop, and keeps the node's state durable in its data
directory (docs/design.md, "The network runtime").
"""

from node.runtime._fetch import CHUNK_BYTES
from node.runtime._node import (
    LEDGER_DIR, STATUS_FILE, VOTE_LOG, EventLog, NodeOptions, NodeRuntime, check_data_dir, run_node,
)
from node.runtime._transport import Transport, TransportLimits

__all__ = [
    "CHUNK_BYTES", "LEDGER_DIR", "STATUS_FILE", "VOTE_LOG", "EventLog", "NodeOptions", "NodeRuntime", "Transport", "TransportLimits",
    "check_data_dir", "run_node",
]
