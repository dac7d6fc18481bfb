"""View changes [pBFT §4.5.2]: VIEW-CHANGE, joining a higher view, NEW-VIEW.

When a phase's timer expires (``timeout_ticks_*``, doubled per view up to ``2**backoff_exponent_max``), or the
proposal is refused, a replica broadcasts VIEW-CHANGE(h, v+1) with its highest prepared certificate
(:meth:`ViewChanges._start_view_change`); it joins the smallest higher view for which it holds ``f + 1`` view changes
(:meth:`ViewChanges._join_higher_view`). The primary of ``v+1`` collects ``q`` and broadcasts NEW-VIEW with them and,
if any carries a prepared certificate, a pre-prepare of the highest one's *unchanged* header
(``certificate.view >= header.view``, see :mod:`consensus._certify`); otherwise it asks its node for a fresh proposal
(``RequestProposal``) (:meth:`ViewChanges._send_new_view`).

The timer that moves past a view starts only once ``q`` members left it (:meth:`ViewChanges._arm_view_change`): a
replica cut off stays at its view instead of running ahead of the others.
"""

from __future__ import annotations

from collections.abc import Sequence

from consensus._effects import Broadcast, Effect, RequestProposal
from consensus._errors import RemoteProtocolError
from consensus._messages import (
    KIND_NEW_VIEW,
    KIND_VIEW_CHANGE,
    NewView,
    PrePrepare,
    PreparedProof,
    Proposal,
    ViewChange,
    new_view_message,
    pre_prepare_message,
    view_change_message,
)
from consensus._replica_types import Phase
from consensus._state import NEVER, ReplicaState

__all__ = ["ViewChanges", "highest_prepared"]


class ViewChanges(ReplicaState):
    """View changes at the current height (a mixin of :class:`~consensus.Replica`)."""

    def _start_view_change(self, view: int, fx: list[Effect], *, also: tuple[str, ...] = ()) -> None:
        """Move to ``view`` with a VIEW-CHANGE to the committee (and to ``also``: the previous committee, when a new
        attempt starts)."""
        assert view > self._view, (view, self._view)
        self._view = view
        self._phase = Phase.VIEW_CHANGE
        self._log.waiting = None  # (a proposal of an earlier view)
        self._deadline = NEVER  # armed once a quorum has left the earlier views (_arm_view_change)
        prepared = self._log.prepared
        proof, payload = prepared if prepared is not None else (None, None)
        msg = view_change_message(self._key, self._ctx.chain_id, self._height, view, proof, payload)
        assert msg.signed is not None
        self._register(msg.signed, fx)
        self._votes.add_view_change(ViewChange(msg.signed, proof, payload))
        self._log.sent[(KIND_VIEW_CHANGE, view)] = msg
        self._retransmit_at = self._now + self._cfg.timeout_ticks_retransmit
        self._view_changes_sent += 1
        fx.append(Broadcast(to=self._committee_peers + also, message=msg))
        self._drop_held_before(view)
        self._arm_view_change()
        self._join_higher_view(fx)
        self._send_new_view(fx)

    def _on_view_change(self, vc: ViewChange, fx: list[Effect]) -> None:
        """pBFT §4.5.2: a member's VIEW-CHANGE for this view or a later one."""
        if vc.prepared is not None:
            self._check_proof(vc.prepared, "bad_view_change")
            assert vc.payload is not None
            pp = vc.prepared.pre_prepare
            height = self._height
            self._learn(pp.block_hash, Proposal(pp.header, vc.payload), fx)
            if self._height != height:
                return
        if not self._votes.add_view_change(vc):
            self._duplicates += 1
            return
        self._arm_view_change()
        self._join_higher_view(fx)
        self._send_new_view(fx)

    def _arm_view_change(self) -> None:
        """pBFT §4.5.2: the timer for moving past view ``v`` starts only once ``q`` members (us included)
        sent view changes for ``v`` or later. A replica alone (cut off) therefore stays at its view
        instead of running ahead of the others, who would then chase it at the same capped pace."""
        if self._phase is not Phase.VIEW_CHANGE or self._deadline != NEVER:
            return
        v = self._view
        if self._votes.left_view(v):
            self._deadline = self._now + self._cfg.timeout_ticks_view_change * self._backoff(v)

    def _join_higher_view(self, fx: list[Effect]) -> None:
        """pBFT §4.5.2 liveness: ``f+1`` view changes for higher views -> join the smallest of them."""
        while True:
            view = self._votes.view_to_join(self._view, self._peer_id)
            if view is None or not self._in_committee:
                return
            self._start_view_change(view, fx)

    def _send_new_view(self, fx: list[Effect]) -> None:
        """As the primary of the new view with ``q`` view changes: NEW-VIEW, re-proposing if needed."""
        v = self._view
        if self._phase is not Phase.VIEW_CHANGE or v in self._log.new_view_sent or self._primary(v) != self._peer_id:
            return
        chosen = self._votes.new_view_quorum(v)
        if chosen is None:
            return
        best = highest_prepared(chosen)
        carried = None
        payload = None
        if best is not None:
            payload = next(vc.payload for vc in chosen if vc.prepared is best)
            assert payload is not None
            pm = pre_prepare_message(self._key, self._ctx.chain_id, self._height, v, best.pre_prepare.header, payload)
            assert pm.signed is not None
            carried = PrePrepare(pm.signed, best.pre_prepare.header, best.pre_prepare.block_hash, payload)
            self._register(pm.signed, fx)
        msg = new_view_message(
            self._key,
            self._ctx.chain_id,
            self._height,
            v,
            [vc.signed for vc in chosen],
            carried.signed if carried is not None else None,
            payload,
        )
        assert msg.signed is not None
        self._register(msg.signed, fx)
        self._log.new_view_sent.add(v)
        self._log.sent[(KIND_NEW_VIEW, v)] = msg
        fx.append(Broadcast(to=self._committee_peers, message=msg))
        self._enter_view(v, carried, fx)
        if carried is None:
            fx.append(RequestProposal(height=self._height, view=v))

    def _on_new_view(self, nv: NewView, fx: list[Effect]) -> None:
        """pBFT §4.5.2: the new primary's NEW-VIEW, with ``q`` view changes and the re-proposal they justify."""
        s = nv.signed
        v = s.view
        expected = self._primary(v)
        if s.signer != expected:
            raise RemoteProtocolError("not_primary", f"new_view by {s.signer}, primary of view {v} is {expected}")
        quorum = self._votes.quorum
        if not quorum.certified_by({vc.signed.signer for vc in nv.view_changes}):
            raise RemoteProtocolError("bad_new_view", f"new_view needs {quorum.threshold} view changes of committee members")
        for vc in nv.view_changes:
            self._verify(vc.signed, "bad_new_view")
            if vc.prepared is not None:
                self._check_proof(vc.prepared, "bad_new_view")
        best = highest_prepared(list(nv.view_changes))
        pp = nv.pre_prepare
        if best is None and pp is not None:
            raise RemoteProtocolError("bad_new_view", "re-proposal without a prepared certificate")
        if best is not None:
            if pp is None or pp.block_hash != best.pre_prepare.block_hash:
                raise RemoteProtocolError("bad_new_view", "new_view does not re-propose the highest prepared block")
            self._verify(pp.signed, "bad_new_view")
            self._register(pp.signed, fx, embedded=True)
        for vc in nv.view_changes:
            self._register(vc.signed, fx, embedded=True)
        self._enter_view(v, pp, fx)

    def _enter_view(self, view: int, carried: PrePrepare | None, fx: list[Effect]) -> None:
        """Enter ``view`` (after its NEW-VIEW), accepting the re-proposal it carries, if any."""
        self._view = view
        self._phase = Phase.PROPOSE
        self._deadline = self._now + self._cfg.timeout_ticks_propose * self._backoff(view)
        if carried is not None:
            self._accept(carried, fx, validate=False)
        self._release_held()


def highest_prepared(vcs: Sequence[ViewChange]) -> PreparedProof | None:
    """The prepared certificate of the highest view among ``vcs`` (ties, impossible with f < C/3, by hash)."""
    best: PreparedProof | None = None
    for vc in vcs:
        p = vc.prepared
        if p is not None and (best is None or (p.view, p.pre_prepare.block_hash) > (best.view, best.pre_prepare.block_hash)):
            best = p
    return best
