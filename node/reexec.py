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
from learning import InvalidUpdateError, LearningError, PublicEval, blob_to_vector
from node._rounds import RoundRules

__all__ = ["RoundReexecutor", "reexecutor_for"]


class RoundReexecutor:
    """``ledger.Reexecutor`` for chains produced by concilium nodes."""

    def __init__(self, genesis: Genesis, *, public: PublicEval | None = None) -> None:
        self.rules = RoundRules(genesis, public=public)
        self.history = self.rules.new_history()
        """Recent rounds for semi-synchronous strategies: blocks must come in height order from 1."""

    def reexecute(self, ctx: ChainContext, before: ChainState, block: Block, blobs: BlobSource) -> None:
        h = block.height
        try:
            model = blob_to_vector(blobs.get(before.model_digest), what=f"model before height {h}")
            algo_state = blobs.get(before.state_digest) if before.state_digest is not None else None
        except (LedgerError, InvalidUpdateError) as e:
            raise ReexecutionError(f"height {h}: cannot re-execute: {e}") from None
        plan = self.rules.plan(before, self.history)
        reason, _, _, _ = self.rules.check_payload(
            before, block.payload, model, blobs, algo_state=algo_state, history=self.history
        )
        if reason is not None:
            raise ReexecutionError(f"height {h}: re-execution disagrees: {reason}")
        self.history.record(plan, model, block.payload)


def reexecutor_for(genesis: Genesis, *, public: PublicEval | None = None) -> RoundReexecutor | None:
    """A re-executor for ``genesis``, or None if its algorithm is not one this concilium knows (or it needs a
    public split this host does not have)."""
    try:
        return RoundReexecutor(genesis, public=public)
    except (LearningError, ValueError):
        return None
