"""Offline re-execution of every round of a ledger: the auditor's plug-in for ``ledger.audit_chain``.

For each block it re-runs, from the stored blobs and with the very code the validators ran
(:class:`node._rounds.RoundRules`): the trainer sampling, the CMFL decision from the signed score rows
(scores, selection, election) or the coordinator strategy's aggregation, the new model digest, the
algorithm state digest and the next committee. The first block whose recorded decision differs is
reported with the reason (``ReexecutionError``).

Blocks are re-executed on this machine: the aggregate's digest is compared bit for bit, which holds on
the same platform (DESIGN.md, STYLE.md §9); auditing a ledger produced on another CPU architecture may
report a digest mismatch although every decision is right (a documented limitation).
"""

from __future__ import annotations

from ledger import BlobSource, Block, ChainContext, ChainState, Genesis, LedgerError, ReexecutionError
from learning._blobs import blob_to_vector
from learning._errors import InvalidUpdateError, LearningError
from node._rounds import RoundRules

__all__ = ["RoundReexecutor", "reexecutor_for"]


class RoundReexecutor:
    """``ledger.Reexecutor`` for chains produced by concilium nodes."""

    def __init__(self, genesis: Genesis) -> None:
        self.rules = RoundRules(genesis)

    def reexecute(self, ctx: ChainContext, before: ChainState, block: Block, blobs: BlobSource) -> None:
        h = block.height
        try:
            model = blob_to_vector(blobs.get(before.model_digest), what=f"model before height {h}")
            algo_state = blobs.get(before.state_digest) if before.state_digest is not None else None
        except (LedgerError, InvalidUpdateError) as e:
            raise ReexecutionError(f"height {h}: cannot re-execute: {e}") from None
        reason, _, _ = self.rules.check_payload(before, block.payload, model, blobs, algo_state=algo_state)
        if reason is not None:
            raise ReexecutionError(f"height {h}: re-execution disagrees: {reason}")


def reexecutor_for(genesis: Genesis) -> RoundReexecutor | None:
    """A re-executor for ``genesis``, or None if its algorithm is not one this concilium knows."""
    try:
        return RoundReexecutor(genesis)
    except (LearningError, ValueError):
        return None
