"""What a replica asks its driver to do: frozen effect records (etcd's ``Ready``).

A driver (``node/runtime`` or ``sim``) executes each batch in order: ``Commit`` (persist the block
durably, then apply it) before any ``Send``/``Broadcast`` of the same batch, as etcd persists before
sending. Time is the driver calling ``Replica.tick()``; there are no timer effects.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger import Block, BlockHeader, Certificate, ChainState, Evidence, Payload

from consensus._messages import Message, Proposal

__all__ = [
    "Broadcast", "Commit", "CommitHeader", "Effect", "ReportMisbehavior", "RequestProposal", "RequestVerdict", "Send",
    "SendBlocks",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """Send ``message`` to one peer."""

    to: str
    message: Message


@dataclass(frozen=True, slots=True, kw_only=True)
class Broadcast:
    """Send ``message`` to each peer of ``to`` (sorted, never the sender itself)."""

    to: tuple[str, ...]
    message: Message


@dataclass(frozen=True, slots=True, kw_only=True)
class SendBlocks:
    """Send ``to`` the decided blocks of heights ``[start, stop)`` from the block store, each as
    ``Message(block=...)``: a member is stuck at a height this replica has decided. ``headers``: send each as its
    header and certificate alone (``consensus.decided_header_message``; the member asked a ``header_sync_request``),
    from the host's record of decided headers where it holds no block."""

    to: str
    start: int
    stop: int
    headers: bool = False
    epoch: int = 1
    """With ``headers``, a replica whose committee is fixed per epoch of ``epoch`` heights (``Replica(committee_epoch=)``)
    serves only the last header of each epoch in ``[start, stop)`` and the last one, ``stop - 1``: the member that
    asked skips to each in turn (``ledger.apply_header(epoch=)``). 1: every header."""

    def heights(self) -> list[int]:
        """The heights to send: every one of ``[start, stop)``, or with ``headers`` and ``epoch`` > 1 the epochs' last
        and ``stop - 1``."""
        if not self.headers or self.epoch == 1:
            return list(range(self.start, self.stop))
        return [h for h in range(self.start, self.stop) if h % self.epoch == 0 or h == self.stop - 1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    """``block`` is decided at its height: persist it, then apply it. Its certificate is in the block; ``state`` is
    the chain state after it. One batch may hold several heights (a replica catching up decides a run of synced
    blocks in one call), so a host takes the state of each height from its effect, not from the replica, which may
    be further on already."""

    block: Block
    state: ChainState


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitHeader:
    """A block is decided at its height, known by its ``header`` and ``certificate`` alone (``decided_header``;
    only from a replica given ``next_committee``, and only where its host said it needs no payload): ``state``
    is the chain state after it, with the payload's fields unknown (``ledger.apply_header``). There is no block
    to persist; the next block, header or whole, is checked against ``state``."""

    header: BlockHeader
    certificate: Certificate
    state: ChainState


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestProposal:
    """This replica is the primary of (``height``, ``view``) and must propose: call ``Replica.propose``.

    In coordinator mode the primary is the coordinator: this is its cue to run the algorithm's server
    side and build the payload. A late answer (the view moved on) is ignored by ``propose``.
    """

    height: int
    view: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestVerdict:
    """Judge ``proposal``, the pre-prepare of (``height``, ``view``) with hash ``block_hash``, and answer with
    ``Replica.verdict(block_hash, ...)``: None to agree, the reason to refuse, or :class:`consensus.Pending` while an
    input is missing (then answer again once it is here). Validity is an input of the replica, as in Malachite
    (``ProposedValue.validity``): the host judges when and where it likes (a runtime in a worker thread, re-executing
    the round), so nothing runs inside the replica's call. The replica neither votes nor refuses meanwhile; the
    view's timer bounds the wait, and then it refuses the proposal (a host that never answers only costs a view
    change). The host judges against its state *after* every ``Commit`` before this effect in the batch."""

    height: int
    view: int
    block_hash: bytes
    proposal: Proposal


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportMisbehavior:
    """Signed proof that a member misbehaved, for a later block's ``payload.evidence``.

    ``evidence.kind == "equivocation"``: two conflicting signed messages (verifiable by anyone).
    ``evidence.kind == "invalid_proposal"``: the primary's signed pre-prepare that ``validate``
    refused, with ``reason``; ``payload`` is the refused payload, needed to re-execute the claim.
    """

    evidence: Evidence
    payload: Payload | None = None


Effect = Send | Broadcast | SendBlocks | Commit | CommitHeader | RequestProposal | RequestVerdict | ReportMisbehavior
