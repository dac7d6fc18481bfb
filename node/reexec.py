"""Offline re-execution of every round of a ledger: the auditor's plug-in for ``ledger.audit_chain``.

For each block it re-runs, from the stored blobs and with the very code the validators ran
(:class:`node._rounds.RoundRules`): the trainer sampling, the CMFL decision from the signed score rows
(scores, selection, election) or the coordinator strategy's aggregation, the new model digest, the
algorithm state digest and the next committee. The first block whose recorded decision differs is
reported with the reason (``ReexecutionError``).

Blocks are re-executed on this machine: the aggregate's digest is compared bit for bit, which holds on
the same platform (aggregation is deterministic there: sorted inputs, float64, a fixed reduction order; reproducible
mode makes it the same on any x86-64 CPU); auditing a ledger produced on another CPU architecture may
report a digest mismatch although every decision is right (a documented limitation).

Committee mode: the decision is re-executed from the signed score rows, which the validators could not check
(a member's distances are measured from its own update, which only it held). The audit also rechecks every row
against the stored blobs (:func:`recheck_score_rows`): each row's distances are recomputed from the member's
reference and the updates it scored, all of which a committed block's store keeps. A row that lies, or that
names a blob the store lacks, is a ``ledger.AuditFinding`` against its member: the audit fails, naming it, and
goes on checking the chain.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from consensus import KIND_SCORES, RemoteProtocolError, parse_score_row
from ledger import (
    AuditFinding, BlobSource, Block, Caches, ChainContext, ChainState, Genesis, LedgerError, ReexecutionError,
)
from learning import InvalidUpdateError, LearningError, PublicEval, blob_to_vector, distance_row, distance_rtol
from node._errors import ConfigFileError
from node._rounds import RoundRules

__all__ = ["RoundReexecutor", "ledger_reexecutor", "recheck_score_rows", "reexecutor_for", "reexecutor_or_why"]


class RoundReexecutor:
    """``ledger.Reexecutor`` for chains produced by concilium nodes."""

    def __init__(self, genesis: Genesis, *, public: PublicEval | None = None, caches: Caches | None = None) -> None:
        """``caches``: the auditor's memos (:class:`ledger.Caches`), shared with its blob store and
        :func:`ledger.audit_chain` (the re-executed model is the one the store hashes next); a private one if None."""
        self.rules = RoundRules(genesis, ctx=ChainContext(genesis, caches=caches), public=public)
        self.history = self.rules.new_history()
        """Recent rounds for semi-synchronous strategies: blocks must come in height order from 1."""

    def reexecute(self, ctx: ChainContext, before: ChainState, block: Block, blobs: BlobSource) -> list[AuditFinding]:
        h = block.height
        try:
            model = blob_to_vector(blobs.get(before.model_digest), what=f"model before height {h}")
            algo_state = blobs.get(before.state_digest) if before.state_digest is not None else None
        except (LedgerError, InvalidUpdateError) as e:
            raise ReexecutionError(f"height {h}: cannot re-execute: {e}") from None
        plan = self.rules.plan(before, self.history)
        reason, _, _, _ = self.rules.check_payload(
            before, block.payload, model, blobs, algo_state=algo_state, history=self.history, view=block.header.view
        )
        if reason is not None:
            raise ReexecutionError(f"height {h}: re-execution disagrees: {reason}")
        self.history.record(plan, model, block.payload)
        return recheck_score_rows(block, blobs, dim=model.shape[0]) if self.rules.committee_mode else []


def recheck_score_rows(block: Block, blobs: BlobSource, *, dim: int) -> list[AuditFinding]:
    """Recompute every score row of a committee-mode ``block`` from the stored blobs: one finding per row that
    lies (a distance farther from the recomputed one than ``learning.distance_rtol(dim)``, relative) or cannot be
    rechecked (its reference or an update it scored is missing or invalid in the store), naming the row's member.

    Each row is recomputed as its member computed it (``learning.distance_row`` over the updates it scored, in
    sorted order): on the CPU that signed the row the bits are equal; the tolerance covers another CPU's order of
    summation. ``dim`` is the model's size. The rows are those of a block that re-executed (they parse)."""
    h = block.height
    vectors: dict[bytes, np.ndarray | str] = {}

    def vector(digest: bytes, what: str) -> np.ndarray | str:
        got = vectors.get(digest)
        if got is None:
            try:
                got = blob_to_vector(blobs.get(digest), dim=dim, what=what)
            except (LedgerError, InvalidUpdateError) as e:
                got = str(e)
            vectors[digest] = got
        return got

    out: list[AuditFinding] = []
    rtol = distance_rtol(dim)
    for a in sorted((a for a in block.payload.attestations if a.kind == KIND_SCORES), key=lambda a: a.signer):
        try:
            row = parse_score_row(a)
        except RemoteProtocolError as e:  # not in a block that re-executed; named all the same
            out.append(AuditFinding(h, a.signer, f"the score row of {a.signer} does not parse: {e}"))
            continue
        who = f"the score row of {row.member}"
        ref = vector(row.reference, f"reference of {row.member}")
        if isinstance(ref, str):
            out.append(AuditFinding(h, row.member, f"{who} cannot be rechecked: its reference (the member's own update) "
                                                   f"{row.reference.hex()[:16]}…: {ref}"))
            continue
        clients = sorted(row.distances)
        if not clients:
            continue
        stack: list[np.ndarray] = []
        for k in clients:
            v = vector(row.updates[k].digest, f"update of {k}")
            if isinstance(v, str):
                out.append(AuditFinding(h, row.member, f"{who} cannot be rechecked: the update of {k} it scored "
                                                       f"{row.updates[k].digest.hex()[:16]}…: {v}"))
                break
            stack.append(v)
        else:
            lies = _lying(clients, [row.distances[k] for k in clients], distance_row(ref, np.stack(stack)), rtol)
            if lies:
                k, signed, got = lies[0]
                out.append(AuditFinding(
                    h, row.member,
                    f"{who} lies: {len(lies)} of its {len(clients)} distances differ from the stored updates' "
                    f"(to {k}: signed {signed!r}, recomputed {got!r})",
                ))
    return out


def _lying(
    clients: Sequence[str], signed: Sequence[float], got: np.ndarray, rtol: float
) -> list[tuple[str, float, float]]:
    return [
        (k, s, float(g)) for k, s, g in zip(clients, signed, got.tolist())
        if abs(s - g) > rtol * max(s, g)
    ]


def reexecutor_for(
    genesis: Genesis, *, public: PublicEval | None = None, caches: Caches | None = None
) -> RoundReexecutor | None:
    """A re-executor for ``genesis``, or None if its algorithm is not one this concilium knows (or it needs a
    public split this host does not have): :func:`reexecutor_or_why` says which."""
    return reexecutor_or_why(genesis, public=public, caches=caches)[0]


def reexecutor_or_why(
    genesis: Genesis, *, public: PublicEval | None = None, caches: Caches | None = None
) -> tuple[RoundReexecutor | None, str]:
    """``(re-executor, "")``, or ``(None, why)``: the exact reason this host cannot re-execute ``genesis``'s rounds
    (an unknown strategy, aggregator or parameter, named by the error that building the strategy raised; a public
    split it needs and this host has not)."""
    try:
        return RoundReexecutor(genesis, public=public, caches=caches), ""
    except (LearningError, ValueError) as e:
        return None, f"algorithm {genesis.protocol.algorithm!r} cannot be built here: {e}"


def ledger_reexecutor(
    genesis: Genesis,
    ledger: str | os.PathLike[str],
    *,
    app: str | os.PathLike[str] | None = None,
    public: PublicEval | None = None,
    public_for: Callable[[Path], PublicEval | None] | None = None,
    build: bool = True,
    caches: Caches | None = None,
) -> tuple[RoundReexecutor | None, str]:
    """What an audit of the stored ledger at ``ledger`` re-executes its rounds with: ``(re-executor, "")`` or
    ``(None, why)``. First the app ``genesis`` pins (``node.apps``): ``app`` if given (a failure raises: the
    auditor's own input, one line), else the copy a results folder keeps beside the ledger, else this process's or
    an installed one (a failure is part of ``why``). Then the strategy, with ``public`` or, where it needs a public
    split, the one ``public_for(ledger)`` rebuilds. ``build=False``: only the app (the caller re-executes nothing).
    ``caches``: the re-executor's memos (see :class:`RoundReexecutor`)."""
    from node.apps import app_beside, load_pinned_app, pin_of  # noqa: PLC0415

    params = genesis.protocol.params
    app_why = ""
    try:
        if pin_of(params) is not None or app is not None:
            load_pinned_app(params, app if app is not None else app_beside(ledger), what="the ledger's genesis")
    except (ConfigFileError, ValueError) as e:
        if app is not None:
            raise
        app_why = f"{e}; "
    if not build:
        return None, ""
    rx, why = reexecutor_or_why(genesis, public=public, caches=caches)
    if rx is None and public is None and public_for is not None:
        rebuilt = public_for(Path(ledger))
        if rebuilt is not None:
            rx, why = reexecutor_or_why(genesis, public=rebuilt, caches=caches)
    return rx, app_why + why
