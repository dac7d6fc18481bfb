"""What each kind of ledger evidence claims, and the part of the claim anyone can check.

``ledger.check_evidence`` checks what every kind shares: the offender is a member, every exhibit is signed
by the offender, and for ``"equivocation"`` the two exhibits share (kind, height, view) and differ. This
module checks the rest of each claim from the exhibits and the genesis alone, so that a Byzantine proposer
cannot put a false accusation of an honest member into a block that honest validators certify:

====================== ============================================ ==============================================
kind                   exhibits                                     checked here
====================== ============================================ ==============================================
``equivocation``       two signed messages of one slot              the slot is one an honest member signs once:
                                                                    an update commitment (per round), a score row
                                                                    (per height) or a pBFT message (per height,
                                                                    view); not, e.g., a ``sync_request``
``invalid_score_row``  one signed score row                         the row is malformed or carries an update
                                                                    commitment its client did not sign
                                                                    (:func:`consensus.verify_score_row`)
``invalid_proposal``   the primary's signed pre-prepare             its kind only: the claim needs the proposal's
                                                                    payload and the chain state to re-execute, so
                                                                    each validator accepts it only if it refused
                                                                    that very proposal itself (``node.core``)
====================== ============================================ ==============================================

Any other kind is refused: honest members never produce it.
"""

from __future__ import annotations

from ledger import ChainContext, Evidence, SignatureError

from consensus._committee import KIND_INVALID_SCORE_ROW, KIND_SCORES, ForgedScoreRow, verify_score_row
from consensus._errors import RemoteProtocolError
from consensus._messages import KIND_PRE_PREPARE, PBFT_KINDS

__all__ = [
    "EVIDENCE_KINDS",
    "KIND_EQUIVOCATION",
    "KIND_INVALID_PROPOSAL",
    "SLOT_KINDS",
    "check_evidence_claim",
]

KIND_EQUIVOCATION = "equivocation"
KIND_INVALID_PROPOSAL = "invalid_proposal"
EVIDENCE_KINDS = (KIND_EQUIVOCATION, KIND_INVALID_PROPOSAL, KIND_INVALID_SCORE_ROW)

SLOT_KINDS = frozenset({"update", KIND_SCORES, *PBFT_KINDS})
"""Signed kinds of which an honest member signs at most one body per (kind, height, view): two different ones
are equivocation. (``update``: a training client's commitment, height = its round.)"""


def check_evidence_claim(ctx: ChainContext, ev: Evidence) -> str | None:
    """``None`` if the checkable part of ``ev``'s claim holds (after ``ledger.check_evidence``), else why not.

    Pure and deterministic: validators run it on every proposal's evidence and auditors on every block's.
    """
    if ev.kind == KIND_EQUIVOCATION:
        kind = ev.exhibits[0].kind
        if kind not in SLOT_KINDS:
            return f"equivocation evidence over {kind!r:.40} messages, which an honest member may sign more than once"
        return None
    if ev.kind == KIND_INVALID_SCORE_ROW:
        if len(ev.exhibits) != 1 or ev.exhibits[0].kind != KIND_SCORES:
            return "invalid_score_row evidence needs exactly one score row"
        row = ev.exhibits[0]
        if (row.height, row.view) != (ev.height, ev.view):
            return "invalid_score_row evidence names another height or view than its row"
        try:
            verify_score_row(ctx, row)
        except ForgedScoreRow:
            return None
        except (SignatureError, RemoteProtocolError) as e:  # (signatures were checked before; kept total)
            return f"invalid_score_row evidence: {e}"
        return f"the score row of {row.signer} in the evidence is valid"
    if ev.kind == KIND_INVALID_PROPOSAL:
        if len(ev.exhibits) != 1 or ev.exhibits[0].kind != KIND_PRE_PREPARE:
            return "invalid_proposal evidence needs exactly one pre_prepare"
        if (ev.exhibits[0].height, ev.exhibits[0].view) != (ev.height, ev.view):
            return "invalid_proposal evidence names another height or view than its pre_prepare"
        return None
    return f"unknown evidence kind {ev.kind!r:.40}"
