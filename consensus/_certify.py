"""Commit certificates across view changes, and the chain state after a decided block.

pBFT decides a *value* in some view; after a view change the new primary re-proposes the highest
prepared value unchanged [pBFT §4.5.2]. Here the value is the block header, whose hash the COMMIT
votes sign, and the header records the view it was first proposed in (its proposer is the primary of
*that* view, which ``ledger.apply_block`` checks). So a block first proposed in view ``w`` can be
committed in a later view ``v`` and its certificate then says ``view = v`` (the view of the COMMIT
votes, which their signatures cover): ``certificate.view >= header.view``.

Why the certificate view must be the view of the votes, and the header must keep its first view:

* If a re-proposal rebuilt the header for view ``v`` (new ``view``/``proposer``), a replica that
  committed the view-``w`` header and one that committed the view-``v`` header would hold different
  blocks at one height (same payload, different hashes): the hash chain forks.
* If COMMIT votes cast in view ``v`` signed ``view = w`` instead, votes cast in different views would
  add up to one certificate. pBFT's safety argument needs the quorum in one view; across views two
  conflicting certificates can be assembled with a single Byzantine member (an honest replica may
  commit-vote value A in view 0 and value B in view 1).

``ledger.check_certificate`` accepts exactly that (``certificate.view >= header.view``), so every
decided block goes through ``ledger.apply_block``: one implementation of the chain rules.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger import (
    Block,
    BlockHeader,
    Certificate,
    ChainContext,
    ChainState,
    apply_block,
    check_certificate,
)

__all__ = ["advance_state", "check_commit_certificate", "verify_decided_block"]


def check_commit_certificate(
    ctx: ChainContext,
    committee: Sequence[str],
    header: BlockHeader,
    cert: Certificate,
    *,
    header_hash: bytes | None = None,
) -> None:
    """Raise a ``LedgerError`` unless ``cert`` holds a quorum of valid COMMIT votes of ``committee``
    (``ledger.check_certificate``; the votes may come from a view later than the header's)."""
    check_certificate(ctx, committee, header, cert, header_hash=header_hash)


def advance_state(state: ChainState, block: Block) -> ChainState:
    """The chain state after ``block`` (no checks: the caller decided or verified it)."""
    return ChainState(
        height=block.header.height,
        head_hash=block.header.hash(),
        time_ms=block.header.time_ms,
        committee=block.payload.next_committee,
        model_digest=block.payload.model_digest,
        state_digest=block.payload.state_digest,
    )


def verify_decided_block(ctx: ChainContext, state: ChainState, block: Block, *, epoch: int = 1) -> ChainState:
    """Check a decided block received from a peer as the successor of ``state``; return the new state.

    Every ledger check (``ledger.apply_block``): link, proposer, payload hash, Merkle root, certificate
    (``certificate.view >= header.view``), signatures. Raises a ``LedgerError``. ``epoch`` > 1: the block may be
    of a later height in the committee epoch of ``state.height + 1`` (``ledger.apply_block``'s skip).
    """
    return apply_block(ctx, state, block, epoch=epoch)
