"""The votes of one height: quorum arithmetic, the tallies of PREPARE, COMMIT and VIEW-CHANGE, and equivocation.

A committee of ``C`` members decides with a quorum of ``q`` of them (``ledger.quorum_size``: ``2f+1`` of ``3f+1``
by default; ``⌊C/2⌋+1`` as the documented, not Byzantine-safe option) [Castro & Liskov, OSDI '99, "pBFT §n" below]:

* ``q`` matching votes, the primary's pre-prepare counting as its own, prepare a block [pBFT §4.2]; ``q`` COMMITs of
  one view for one block are its certificate [§4.3]; ``q`` VIEW-CHANGEs for a view let its primary start it, and
  ``q`` members gone past a view arm the timer that leaves it [§4.5.2]. Two quorums share an honest member while
  ``f < C/3``.
* ``C - q + 1`` members (``f + 1``) include an honest one: that many view changes for later views make a replica
  join them [§4.5.2], that many members of a later committee attempt make it follow them, and that many members
  send a decided block on to the next committee's newcomers.

:class:`Quorum` is that arithmetic for one committee. :class:`VoteKeeper` holds a replica's votes at its current
height, answers every quorum question the replica asks of them, and detects equivocation: two different bodies one
member signed for one (kind, view) at the height, which a member following the protocol never signs; the pair is
the ledger evidence (``ledger.check_evidence`` accepts it as is).

Pure bookkeeping: it checks no signature (the replica verifies a message before it is counted).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from types import MappingProxyType

from ledger import Certificate, CommitSignature, Evidence, SignedMessage, encode

from consensus._messages import PBFT_KINDS, ViewChange

__all__ = ["Quorum", "VoteKeeper"]

_NO_VOTES: Mapping[str, SignedMessage] = MappingProxyType({})


class Quorum:
    """The thresholds of one committee: ``threshold`` (``q``) votes decide, ``weak_threshold`` (``C - q + 1``, that
    is ``f + 1``) votes include an honest member's. Built from ``ChainContext.committee_view(committee)``: the
    committee sorted, as a set, and its quorum."""

    __slots__ = ("committee_view", "members", "threshold", "weak_threshold")

    def __init__(self, committee_view: tuple[tuple[str, ...], frozenset[str], int]) -> None:
        committee, members, threshold = committee_view
        self.committee_view = committee_view
        self.members = members
        self.threshold = threshold
        self.weak_threshold = len(committee) - threshold + 1

    def reached(self, votes: int) -> bool:
        """``votes`` distinct members are a quorum."""
        return votes >= self.threshold

    def weakly_reached(self, votes: int) -> bool:
        """``votes`` distinct members include an honest one."""
        return votes >= self.weak_threshold

    def certified_by(self, signers: Set[str]) -> bool:
        """``signers`` are a quorum of this committee's members (a certificate a peer hands over)."""
        return len(signers) >= self.threshold and signers <= self.members


_NO_COMMITTEE = Quorum(((), frozenset(), 1))


class VoteKeeper:
    """A replica's votes at its current height, by view and block hash, and the bodies its members signed.

    :meth:`start_height` forgets the previous height's; :meth:`set_committee` sets the quorum (the height's committee,
    or a committee attempt's that takes the height over).
    """

    __slots__ = ("quorum", "height", "_prepares", "_commits", "_view_changes", "_bodies", "_evidence")

    def __init__(self) -> None:
        self.quorum = _NO_COMMITTEE  # (set_committee comes before any vote)
        self.start_height(0)

    def start_height(self, height: int) -> None:
        self.height = height
        self._prepares: dict[tuple[int, bytes], dict[str, SignedMessage]] = {}  # (view, block hash) -> signer -> vote
        self._commits: dict[tuple[int, bytes], dict[str, SignedMessage]] = {}
        self._view_changes: dict[int, dict[str, ViewChange]] = {}  # view -> signer -> its VIEW-CHANGE
        self._bodies: dict[tuple[str, str, int], SignedMessage] = {}  # (signer, kind, view) -> the first one seen
        self._evidence: set[tuple[str, str, int]] = set()  # (signer, kind, view) reported as equivocation

    def set_committee(self, committee_view: tuple[tuple[str, ...], frozenset[str], int]) -> None:
        """The committee whose votes count from now on (``ChainContext.committee_view(committee)``)."""
        if committee_view is not self.quorum.committee_view:
            self.quorum = Quorum(committee_view)

    # --- PREPARE [pBFT §4.2] ---------------------------------------------------------------------------------------

    def add_prepare(self, view: int, block_hash: bytes, vote: SignedMessage) -> bool:
        """Count a PREPARE (or the primary's pre-prepare, its vote) for ``block_hash`` in ``view``; False if this
        signer's vote there is counted already."""
        votes = self._prepares.setdefault((view, block_hash), {})
        if vote.signer in votes:
            return False
        votes[vote.signer] = vote
        return True

    def prepares(self, view: int, block_hash: bytes) -> Mapping[str, SignedMessage]:
        """The votes counted for ``block_hash`` in ``view``, by signer."""
        return self._prepares.get((view, block_hash), _NO_VOTES)

    def prepared(self, view: int, block_hash: bytes, primary: str) -> tuple[SignedMessage, ...] | None:
        """pBFT §4.2 prepared(m, v, n, i): once ``q`` members voted for ``block_hash`` in ``view``, the PREPAREs of
        its prepared certificate (sorted by signer; the ``primary``'s pre-prepare goes in it apart); else None."""
        votes = self._prepares.get((view, block_hash), _NO_VOTES)
        if not self.quorum.reached(len(votes)):
            return None
        return tuple(votes[p] for p in sorted(votes) if p != primary)

    # --- COMMIT [pBFT §4.3] ----------------------------------------------------------------------------------------

    def add_commit(self, view: int, block_hash: bytes, vote: SignedMessage) -> bool:
        """Count a COMMIT for ``block_hash`` in ``view``; False if this signer's is counted already."""
        votes = self._commits.setdefault((view, block_hash), {})
        if vote.signer in votes:
            return False
        votes[vote.signer] = vote
        return True

    def commits(self, view: int, block_hash: bytes) -> Mapping[str, SignedMessage]:
        """The COMMITs counted for ``block_hash`` in ``view``, by signer."""
        return self._commits.get((view, block_hash), _NO_VOTES)

    def commit_views(self, block_hash: bytes) -> list[int]:
        """The views with COMMITs for ``block_hash``, lowest first."""
        return sorted(v for v, b in self._commits if b == block_hash)

    def commit_certificate(self, view: int, block_hash: bytes) -> Certificate | None:
        """pBFT §4.3 committed-local: the certificate of ``q`` COMMITs of ``view`` for ``block_hash`` (the first ``q``
        signers by id), or None before there are that many."""
        votes = self._commits.get((view, block_hash), _NO_VOTES)
        if not self.quorum.reached(len(votes)):
            return None
        signers = sorted(votes)[: self.quorum.threshold]
        return Certificate(
            height=self.height,
            view=view,
            block_hash=block_hash,
            signatures=tuple(CommitSignature(signer=p, signature=votes[p].signature) for p in signers),
        )

    # --- VIEW-CHANGE [pBFT §4.5.2] ---------------------------------------------------------------------------------

    def add_view_change(self, vc: ViewChange) -> bool:
        """Count a VIEW-CHANGE; False if its signer's for that view is counted already."""
        got = self._view_changes.setdefault(vc.signed.view, {})
        if vc.signed.signer in got:
            return False
        got[vc.signed.signer] = vc
        return True

    def left_view(self, view: int) -> bool:
        """``q`` members (this replica's own VIEW-CHANGE included) sent view changes for ``view`` or later: the timer
        that moves past ``view`` may start."""
        support = {p for v, got in self._view_changes.items() if v >= view for p in got}
        return self.quorum.reached(len(support))

    def view_to_join(self, view: int, me: str) -> int | None:
        """The smallest view above ``view`` that ``f + 1`` other members asked for (each counted at the smallest one
        it asked for above ``view``), or None while fewer did."""
        lowest: dict[str, int] = {}
        for v, got in self._view_changes.items():
            if v > view:
                for p in got:
                    if p != me:
                        lowest[p] = min(lowest.get(p, v), v)
        if not self.quorum.weakly_reached(len(lowest)):
            return None
        return min(lowest.values())

    def new_view_quorum(self, view: int) -> list[ViewChange] | None:
        """The ``q`` VIEW-CHANGEs for ``view`` a NEW-VIEW carries (the first signers by id), or None before there are
        that many."""
        got = self._view_changes.get(view)
        if got is None or not self.quorum.reached(len(got)):
            return None
        return [got[p] for p in sorted(got)][: self.quorum.threshold]

    # --- equivocation ----------------------------------------------------------------------------------------------

    def remember_signed(self, signed: SignedMessage) -> None:
        """Register a message this replica signed before a restart, so that no different one passes for it."""
        self._bodies[(signed.signer, signed.kind, signed.view)] = signed

    def equivocation(self, signed: SignedMessage) -> tuple[Evidence, bool] | None:
        """Register ``signed``: one body per (signer, kind, view) at this height. A second, different body is
        equivocation: returns its evidence (the two messages, sorted by their bytes) and whether it is the first
        report of that (signer, kind, view); None otherwise (another height, a repeat, a first body)."""
        if signed.kind not in PBFT_KINDS or signed.height != self.height:
            return None
        key = (signed.signer, signed.kind, signed.view)
        first = self._bodies.setdefault(key, signed)
        if first is signed or encode(first.body) == encode(signed.body):
            return None
        a, b = sorted((first, signed), key=lambda m: m.encode())
        evidence = Evidence(
            kind="equivocation",
            offender=signed.signer,
            height=signed.height,
            view=signed.view,
            exhibits=(a, b),
            reason=f"two different {signed.kind} messages for height {signed.height} view {signed.view}",
        )
        if key in self._evidence:
            return evidence, False
        self._evidence.add(key)
        return evidence, True
