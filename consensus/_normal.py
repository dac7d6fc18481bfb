"""The normal case of one view [pBFT §4.2-4.3]: pre-prepare, PREPARE, COMMIT, decide, and retransmission.

1. The primary pre-prepares a block (header + payload) (:meth:`NormalCase._propose`); its pre-prepare counts as its
   own vote.
2. A backup checks the pre-prepare (:meth:`NormalCase._accept`: signed by the primary of ``(h, v)``, a header of
   view ``v`` linking to the previous block) and asks its host for a verdict on the proposal
   (:class:`~consensus.RequestVerdict`); the host answers with :meth:`~consensus.Replica.verdict`. On ``None`` it
   broadcasts PREPARE. One that refuses records why, reports the signed proposal and starts a view change at once
   (:meth:`NormalCase._refuse`). Until the verdict comes (or while the host lacks an input to judge it:
   :class:`~consensus.Pending`) it waits, within the view's timer.
3. With the pre-prepare and ``q`` matching votes a replica is *prepared* and broadcasts COMMIT.
4. ``q`` COMMITs of one view for one block hash are its certificate: the block is decided (:meth:`NormalCase._decide`).

The quorum questions go to the replica's :class:`~consensus._votes.VoteKeeper`.
"""

from __future__ import annotations

from ledger import TIME_MS_MAX, Block, ChainState, Evidence, Payload, hash_tagged, make_header

from consensus._certify import advance_state
from consensus._effects import Broadcast, Commit, Effect, ReportMisbehavior, RequestVerdict
from consensus._errors import LocalProtocolError, RemoteProtocolError
from consensus._messages import (
    KIND_COMMIT,
    KIND_NEW_VIEW,
    KIND_PRE_PREPARE,
    KIND_PREPARE,
    KIND_VIEW_CHANGE,
    Message,
    PrePrepare,
    PreparedProof,
    Proposal,
    Vote,
    decided_message,
    pre_prepare_message,
    vote_message,
)
from consensus._replica_types import Pending, Phase, Refusal
from consensus._state import ReplicaState

__all__ = ["NormalCase", "REASON_BYTES_MAX"]

REASON_BYTES_MAX = 1024
"""A refusal's reason is kept (and reported) up to this many bytes."""


class NormalCase(ReplicaState):
    """The normal case of the current view (a mixin of :class:`~consensus.Replica`)."""

    def _propose(self, payload: Payload, *, time_ms: int, fx: list[Effect]) -> None:
        """Pre-prepare ``payload`` as the primary of the current height and view [pBFT §4.2]."""
        height, v = self._height, self._view
        if self._primary(v) != self._peer_id:
            raise LocalProtocolError(f"{self._peer_id} is not the primary of height {height} view {v}")
        if v in self._log.accepted or (v > 0 and v not in self._log.new_view_sent):
            raise LocalProtocolError(f"height {height} view {v} has a proposal already")
        if time_ms < self._state.time_ms:
            raise LocalProtocolError(f"time_ms {time_ms} < the previous block's {self._state.time_ms}")
        if time_ms > TIME_MS_MAX:
            raise LocalProtocolError(f"time_ms {time_ms} > 2^63 - 1, the latest a header takes")
        header = make_header(
            chain_id=self._ctx.chain_id,
            height=height,
            prev_hash=self._state.head_hash,
            view=v,
            proposer=self._peer_id,
            time_ms=time_ms,
            payload=payload,
        )
        block_hash = header.hash()
        reason = self._check_header(header, payload)  # (the host built the payload: it asks itself no verdict)
        if reason is not None:
            raise LocalProtocolError(f"own proposal for height {height} view {v} refused: {reason}")
        msg = pre_prepare_message(self._key, self._ctx.chain_id, height, v, header, payload)
        assert msg.signed is not None
        pp = PrePrepare(msg.signed, header, block_hash, payload)
        self._register(msg.signed, fx)
        self._log.sent[(KIND_PRE_PREPARE, v)] = msg
        fx.append(Broadcast(to=self._committee_peers, message=msg))
        self._accept(pp, fx, validate=False)

    def _on_pre_prepare(self, pp: PrePrepare, fx: list[Effect]) -> None:
        """pBFT §4.2: the primary's pre-prepare of this view."""
        expected = self._primary(self._view)
        if pp.signed.signer != expected:
            raise RemoteProtocolError("not_primary", f"pre_prepare by {pp.signed.signer}, primary is {expected}")
        if pp.header.view != self._view:  # a re-proposal is valid only inside a NEW-VIEW
            raise RemoteProtocolError("bad_pre_prepare", f"header of view {pp.header.view} outside a new_view")
        self._accept(pp, fx, validate=True)

    def _accept(self, pp: PrePrepare, fx: list[Effect], *, validate: bool) -> None:
        """Accept the pre-prepare of the current view: vote PREPARE (backups), or refuse it."""
        v, block_hash, height = self._view, pp.block_hash, self._height
        assert pp.payload is not None
        proposal = Proposal(pp.header, pp.payload)
        self._learn(block_hash, proposal, fx)
        if self._height != height:  # a certificate for it was already here: decided
            return
        if validate:
            self._log.waiting = None
            reason = self._check_header(pp.header, pp.payload)
            if reason is None and block_hash not in self._log.verdicts:  # ask the host; wait, within the view's timer
                self._log.waiting = (pp, Pending("the host has not judged the proposal yet"))
                fx.append(RequestVerdict(height=height, view=v, block_hash=block_hash, proposal=proposal))
                return
            reason = reason or self._log.verdicts[block_hash]
            if reason is not None:
                self._refuse(pp, reason, fx)
                return
        self._log.accepted[v] = pp
        self._phase = Phase.PREPARE
        self._deadline = self._now + self._cfg.timeout_ticks_prepare * self._backoff(v)
        self._retransmit_at = self._now + self._cfg.timeout_ticks_retransmit
        self._votes.add_prepare(v, block_hash, pp.signed)  # the pre-prepare is the primary's vote
        if pp.signed.signer != self._peer_id:
            msg = vote_message(self._key, self._ctx.chain_id, KIND_PREPARE, height, v, block_hash)
            assert msg.signed is not None
            self._register(msg.signed, fx)
            self._votes.add_prepare(v, block_hash, msg.signed)
            self._log.sent[(KIND_PREPARE, v)] = msg
            fx.append(Broadcast(to=self._committee_peers, message=msg))
        self._check_prepared(fx)

    def _refuse(self, pp: PrePrepare, reason: str, fx: list[Effect]) -> None:
        """A replica that disagrees with a proposal refuses it, records why, reports the signed proposal and asks for
        a new view (docs/design.md, coordinator mode step 4)."""
        reason = reason.encode()[:REASON_BYTES_MAX].decode(errors="ignore")
        s = pp.signed
        self._refusals.append(
            Refusal(height=s.height, view=s.view, proposer=s.signer, block_hash=pp.block_hash, reason=reason)
        )
        self._dropped["invalid_proposal"] += 1
        ev = Evidence(kind="invalid_proposal", offender=s.signer, height=s.height, view=s.view, exhibits=(s,), reason=reason)
        self._evidence_reported += 1
        fx.append(ReportMisbehavior(evidence=ev, payload=pp.payload))
        self._start_view_change(self._view + 1, fx)

    def _on_prepare(self, vote: Vote, fx: list[Effect]) -> None:
        """pBFT §4.2: a PREPARE, counted also before the pre-prepare it votes for arrives."""
        s = vote.signed
        if not self._votes.add_prepare(s.view, vote.block_hash, s):
            self._duplicates += 1
            return
        self._check_prepared(fx)

    def _check_prepared(self, fx: list[Effect]) -> None:
        """pBFT §4.2 prepared(m, v, n, i): the pre-prepare and ``q`` matching votes -> broadcast COMMIT."""
        if self._phase is not Phase.PREPARE:
            return
        v = self._view
        pp = self._log.accepted[v]
        prepares = self._votes.prepared(v, pp.block_hash, pp.signed.signer)
        if prepares is None:
            return
        proof = PreparedProof(PrePrepare(pp.signed, pp.header, pp.block_hash, None), prepares)
        assert pp.payload is not None
        self._log.prepared = (proof, pp.payload)
        self._phase = Phase.COMMIT
        self._deadline = self._now + self._cfg.timeout_ticks_commit * self._backoff(v)
        self._retransmit_at = self._now + self._cfg.timeout_ticks_retransmit
        msg = vote_message(self._key, self._ctx.chain_id, KIND_COMMIT, self._height, v, pp.block_hash)
        assert msg.signed is not None
        self._register(msg.signed, fx)
        self._votes.add_commit(v, pp.block_hash, msg.signed)
        self._log.sent[(KIND_COMMIT, v)] = msg
        fx.append(Broadcast(to=self._committee_peers, message=msg))
        self._check_committed(v, pp.block_hash, fx)

    def _on_commit(self, vote: Vote, fx: list[Effect]) -> None:
        """pBFT §4.3: a COMMIT, of this view or an earlier one (a late certificate)."""
        s = vote.signed
        if not self._votes.add_commit(s.view, vote.block_hash, s):
            self._duplicates += 1
            return
        self._check_committed(s.view, vote.block_hash, fx)

    def _check_committed(self, view: int, block_hash: bytes, fx: list[Effect]) -> None:
        """pBFT §4.3 committed-local: ``q`` COMMITs of one view for one block = its certificate."""
        proposal = self._log.proposals.get(block_hash)
        if proposal is None:
            return  # without the proposal, the decided block comes from a peer (Message(block=...))
        certificate = self._votes.commit_certificate(view, block_hash)
        if certificate is None:
            return
        self._decide(Block(header=proposal.header, payload=proposal.payload, certificate=certificate), fx)

    def _learn(self, block_hash: bytes, proposal: Proposal, fx: list[Effect]) -> None:
        """Remember a proposal's data; decide at once if its certificate is already here."""
        if block_hash in self._log.proposals:
            return
        self._log.proposals[block_hash] = proposal
        for view in self._votes.commit_views(block_hash):
            self._check_committed(view, block_hash, fx)
            if block_hash not in self._log.proposals:  # decided: the height moved on
                return

    def _decide(self, block: Block, fx: list[Effect], *, state: ChainState | None = None) -> None:
        """``block`` is decided (``state``: the chain state after it, if already at hand from its check). The host
        applies it in the order of the effects; this replica goes on with the next height's held input at once
        (a proposal of that height is judged by the host after it applied this block: ``RequestVerdict``)."""
        state = advance_state(self._state, block) if state is None else state
        fx.append(Commit(block=block, state=state))
        self._decided += 1
        block_hash = block.header.hash()
        newcomers = sorted(set(block.payload.next_committee) - self._committee_set - {self._peer_id})
        if newcomers and self._in_committee and self._peer_id in self._announcers(block_hash):
            # the next committee's newcomers took no part in this height: they get the block from f + 1 members
            fx.append(Broadcast(to=tuple(newcomers), message=decided_message(block)))
        self._enter_height(state, fx)

    def _announcers(self, block_hash: bytes) -> list[str]:
        """The ``C - q + 1`` committee members (at least one honest) that send a decided block onwards."""
        ranked = sorted(self._committee, key=lambda p: (hash_tagged(b"concilium-announce/v1", block_hash + p.encode()), p))
        return ranked[: self._votes.quorum.weak_threshold]

    def _retransmit(self, fx: list[Effect]) -> None:
        """Re-send this view's own messages to the members that have not shown they have them.

        pBFT assumes messages are retransmitted until received; this sends nothing while the view
        makes progress (each phase change re-arms the timer), so the fault-free cost is zero.
        """
        self._retransmit_at = self._now + self._cfg.timeout_ticks_retransmit
        v, sent, peers = self._view, self._log.sent, self._committee_peers
        if self._phase is Phase.VIEW_CHANGE:
            # To every other member: a peer whose VIEW-CHANGE reached us may still lack ours, and without a
            # quorum of them nobody's view-change timer starts (members split across two views then wait for
            # each other for ever). Sent only while the view change is stuck, so the cost stays there.
            self._resend(sent.get((KIND_VIEW_CHANGE, v)), list(peers), fx)
            return
        pp = self._log.accepted.get(v)
        if pp is None:
            return
        prepares = self._votes.prepares(v, pp.block_hash)
        commits = self._votes.commits(v, pp.block_hash)
        # Who has not shown it accepted the proposal may lack the (re-)proposal; who has not committed may
        # lack our PREPARE; anyone may lack our COMMIT (a replica that decided has left the height).
        behind = [p for p in peers if p not in prepares and p not in commits]
        uncommitted = [p for p in peers if p not in commits]
        self._resend(sent.get((KIND_NEW_VIEW, v)), behind, fx)  # a lost NEW-VIEW keeps them out of the view
        self._resend(sent.get((KIND_PRE_PREPARE, v)), behind, fx)
        self._resend(sent.get((KIND_PREPARE, v)), uncommitted, fx)
        self._resend(sent.get((KIND_COMMIT, v)), list(peers), fx)

    def _resend(self, msg: Message | None, to: list[str], fx: list[Effect]) -> None:
        if msg is not None and to:
            fx.append(Broadcast(to=tuple(to), message=msg))
