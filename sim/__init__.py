"""Deterministic simulation: no trio, no libp2p, no wall clock, no global RNG.

For now: the ledger demo chain generator. The discrete-event training simulator lands with issue 5.
"""

from sim._ledger_demo import LedgerDemo, demo_genesis, tensor_blob

__all__ = ["LedgerDemo", "demo_genesis", "tensor_blob"]
