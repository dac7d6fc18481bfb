"""The durable record of what a replica signed at its height, and restoring a replica from it [pBFT §4.4-4.5: each
replica keeps its log in stable storage, so a crash-recovered replica is correct, not faulty].

:meth:`DurableLog._durable_record` encodes the record (:meth:`~consensus.Replica.durable`): the height, the view,
every message the replica signed and sent at the height, and its highest prepared certificate with the payload.
:meth:`DurableLog._restore` reloads it (``Replica(..., restore=record)``); the rules and why they are safe are in
:class:`~consensus.Replica`'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger import ATTEMPT_VIEWS, LedgerError, Payload, Record, SignedMessage, record

from consensus._effects import Broadcast, Effect
from consensus._errors import DurableStateError, RemoteProtocolError
from consensus._messages import (
    KIND_COMMIT,
    KIND_PREPARE,
    KIND_VIEW_CHANGE,
    PBFT_KINDS,
    Message,
    NewView,
    PrePrepare,
    PreparedProof,
    Proposal,
    ViewChange,
    Vote,
    parse,
)
from consensus._replica_types import Phase
from consensus._state import NEVER, SIGNING_ORDER, ReplicaState

__all__ = ["DURABLE_BYTES_MAX", "DURABLE_FORMAT", "DurableLog"]

DURABLE_FORMAT = 1
"""Version of the :meth:`Replica.durable` record."""
DURABLE_BYTES_MAX = 256 << 20
"""Largest :meth:`Replica.durable` record a replica restores from (a local file: a bound on memory)."""
_DURABLE_VIEW_MAX = 1 << 62  # a view no replica reaches (each view waits longer, each attempt redraw_ticks)


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class _PreparedRecord(Record):
    """A prepared certificate with its payload, as stored in the durable record."""

    pre_prepare: SignedMessage
    prepares: tuple[SignedMessage, ...]
    payload: Payload


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class _DurableRecord(Record):
    """What a restarted replica must not forget about its current height (:meth:`Replica.durable`)."""

    format: int
    chain_id: str
    signer: str
    height: int
    view: int
    sent: tuple[Message, ...]
    """Every message it signed and sent at ``height``, sorted by (view, signing order)."""
    prepared: _PreparedRecord | None


class DurableLog(ReplicaState):
    """Writing and reloading the durable record (a mixin of :class:`~consensus.Replica`)."""

    def _durable_record(self) -> bytes:
        """The canonical bytes of the record (:meth:`~consensus.Replica.durable`)."""
        log = self._log
        keys = sorted(log.sent, key=lambda k: (k[1], SIGNING_ORDER[k[0]]))
        prepared = None
        if log.prepared is not None:
            proof, payload = log.prepared
            prepared = _PreparedRecord(pre_prepare=proof.pre_prepare.signed, prepares=proof.prepares, payload=payload)
        rec = _DurableRecord(
            format=DURABLE_FORMAT,
            chain_id=self._ctx.chain_id,
            signer=self._peer_id,
            height=self._height,
            view=self._view,
            sent=tuple(log.sent[k] for k in keys),
            prepared=prepared,
        )
        return rec.encode()

    def _restore(self, data: bytes) -> None:
        """Resume from a :meth:`durable` record (rules and safety argument: :class:`~consensus.Replica`)."""
        rec = self._load_record(data)
        if rec is None:
            return
        height, log = self._height, self._log
        self._reload_signed(rec)
        if rec.prepared is not None:
            proof, payload = self._load_prepared(rec)
            log.prepared = (proof, payload)
            log.proposals.setdefault(proof.pre_prepare.block_hash, Proposal(proof.pre_prepare.header, payload))
        v = rec.view
        if v // ATTEMPT_VIEWS > self._attempt:  # it had moved to a later committee attempt: back there
            self._attempt = v // ATTEMPT_VIEWS
            self._height_entered_at = self._now - self._attempt_ticks * self._attempt  # the next attempt a period on
            self._set_committee(self._ctx.view_committee(self._state, self._height, v))
        at_v = {s.kind for m in rec.sent if (s := m.signed) is not None and s.view == v}
        if not rec.sent and (v == 0 or not self._in_committee):
            return  # signed nothing at this height: the fresh start of the constructor is the same
        fx: list[Effect] = []  # no RequestProposal for view 0: this replica is past it
        self._view = v
        if at_v == {KIND_VIEW_CHANGE}:  # re-enter the view change to v with the same VIEW-CHANGE
            self._phase = Phase.VIEW_CHANGE
            self._deadline = NEVER
            self._retransmit_at = self._now + self._cfg.timeout_ticks_retransmit
            fx.append(Broadcast(to=self._committee_peers, message=log.sent[(KIND_VIEW_CHANGE, v)]))
            self._arm_view_change()
        else:  # it may have signed in v: only a higher view is safe (pBFT §4.5.2), from start() on
            self._phase = Phase.VIEW_CHANGE
            self._deadline = NEVER
            self._view_change_on_start = True
        assert self._height == height
        self._queued_effects = fx

    def _reload_signed(self, rec: _DurableRecord) -> None:
        """Put the messages of the record back in the height's log and votes, as when this replica signed them."""
        log, votes = self._log, self._votes
        for m in rec.sent:
            s = m.signed
            assert s is not None
            log.sent[(s.kind, s.view)] = m
            votes.remember_signed(s)
            parsed = parse(m)
            match parsed:
                case PrePrepare():
                    assert parsed.payload is not None
                    log.proposals.setdefault(parsed.block_hash, Proposal(parsed.header, parsed.payload))
                case Vote() if s.kind == KIND_PREPARE:
                    votes.add_prepare(s.view, parsed.block_hash, s)
                case Vote():
                    votes.add_commit(s.view, parsed.block_hash, s)
                case ViewChange():
                    votes.add_view_change(parsed)
                case NewView():
                    log.new_view_sent.add(s.view)
                    if parsed.pre_prepare is not None:
                        pp = parsed.pre_prepare
                        assert pp.payload is not None
                        votes.remember_signed(pp.signed)  # (the new primary's, of this view: this replica's)
                        log.proposals.setdefault(pp.block_hash, Proposal(pp.header, pp.payload))

    def _load_record(self, data: bytes) -> _DurableRecord | None:
        """Decode and check a durable record; None if it is for another height and can be ignored."""

        def bad(why: str) -> DurableStateError:
            return DurableStateError(f"vote record of {self._peer_id}: {why}")

        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise bad(f"expected bytes, got {type(data).__name__}")
        try:
            rec: _DurableRecord = _DurableRecord.decode(bytes(data), bytes_max=DURABLE_BYTES_MAX)
        except (LedgerError, ValueError, TypeError) as e:
            raise bad(f"malformed: {e}") from None
        if rec.format != DURABLE_FORMAT:
            raise bad(f"unsupported format {rec.format} (this version reads {DURABLE_FORMAT})")
        if rec.chain_id != self._ctx.chain_id:
            raise bad(f"of chain {rec.chain_id!r:.60}, not {self._ctx.chain_id!r}")
        if rec.signer != self._peer_id:
            raise bad(f"of member {rec.signer!r:.60}")
        if not 1 <= rec.height < 1 << 62 or not 0 <= rec.view <= _DURABLE_VIEW_MAX:
            raise bad(f"height {rec.height} or view {rec.view} out of range")
        if rec.height < self._height:
            return None  # stale: that height is decided
        if rec.height > self._height:
            raise bad(
                f"of height {rec.height} but the block store ends at height {self._height - 1}: decided blocks were "
                f"lost, and its votes at height {self._height} with them; refusing to start (it could sign twice)"
            )
        attempt = rec.view // ATTEMPT_VIEWS
        try:
            committee = self._ctx.view_committee(self._state, self._height, rec.view)
        except LedgerError as e:
            raise bad(str(e)) from None
        if self._peer_id not in committee and (rec.sent or rec.prepared is not None):
            raise bad(f"it signed votes at height {rec.height} in committee attempt {attempt}, which does not include it")
        seen: set[tuple[str, int]] = set()
        for m in rec.sent:
            s = m.signed
            if s is None or m.block is not None:
                raise bad("a sent entry is not a signed message")
            if s.kind not in PBFT_KINDS or s.signer != self._peer_id or s.height != rec.height or s.view > rec.view:
                raise bad(f"a sent {s.kind!r:.40} of ({s.height}, {s.view}) by {s.signer!r:.60} does not belong here")
            if (s.kind, s.view) in seen:
                raise bad(f"two {s.kind} messages for view {s.view}")
            seen.add((s.kind, s.view))
            try:
                parse(m)
                self._verify(s, "bad_vote_record")
            except RemoteProtocolError as e:
                raise bad(f"its {s.kind} of view {s.view}: {e}") from None
        return rec

    def _load_prepared(self, rec: _DurableRecord) -> tuple[PreparedProof, Payload]:
        """The record's prepared certificate, checked as a peer's, and consistent with its own COMMIT."""
        assert rec.prepared is not None
        p = rec.prepared
        try:
            pp = parse(Message(signed=p.pre_prepare, payload=p.payload))
            if not isinstance(pp, PrePrepare):
                raise RemoteProtocolError("malformed", "the prepared certificate needs a pre_prepare")
            w, bh = pp.signed.view, pp.block_hash
            if pp.signed.height != rec.height or w > rec.view:
                raise RemoteProtocolError("malformed", f"certificate of ({pp.signed.height}, {w})")
            last = ""
            for s in p.prepares:
                vote = parse(Message(signed=s))
                ok = isinstance(vote, Vote) and s.kind == KIND_PREPARE and (s.height, s.view) == (rec.height, w)
                if not ok or vote.block_hash != bh or not s.signer > last or s.signer == pp.signed.signer:  # type: ignore[union-attr]
                    raise RemoteProtocolError("malformed", "prepares must be sorted, unique PREPAREs of its block")
                last = s.signer
            proof = PreparedProof(PrePrepare(pp.signed, pp.header, bh, None), p.prepares)
            self._check_proof(proof, "bad_vote_record")
        except RemoteProtocolError as e:
            raise DurableStateError(f"vote record of {self._peer_id}: prepared certificate: {e}") from None
        own = self._log.sent.get((KIND_COMMIT, w))
        if own is None or own.signed is None or own.signed.body.get("block_hash") != bh:
            raise DurableStateError(f"vote record of {self._peer_id}: prepared in view {w} without its own COMMIT there")
        return proof, p.payload
