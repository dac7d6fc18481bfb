"""What the explorer and ``concilium ledger verify|show|export|proof`` show, computed in one place.

The command line and the web explorer call the same functions, so a page, its ``/api/...`` JSON and the
command's output come from the same code: :func:`audit_ledger` (``ledger verify``), :func:`block_summary`
(``ledger show L H``), :func:`genesis_document` (``ledger show L 0``), :func:`export_block` and
:func:`export_document` (``ledger export --json``), :func:`proof_document` (``ledger proof``).

The views read a ledger opened read-only (``open_ledger(readonly=True)``, SQLite ``mode=ro``). Pages read
only the rows they show: the blocks table is a keyset page over the ``height`` primary key and each row is
read with ``get_checked`` (its bytes checked against the store's index columns); the whole chain is checked
by the audit, which re-derives everything from the block bytes.
"""

from __future__ import annotations

import csv
import io
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger import (
    ATTEMPT_VIEWS,
    COMMITTEE_MODE,
    AuditReport,
    Block,
    Caches,
    Genesis,
    InclusionProof,
    attempt_of,
    audit_chain,
    decode,
    genesis_committee,
    primary,
    quorum_size,
    redrawn_committee,
    to_json_value,
)
from ledger.store import CorruptStoreError, SqliteBlockStore, open_ledger, resolve_ledger_path
from node.config import load_genesis, record_to_toml

__all__ = [
    "AuditOutcome",
    "CannotReexecute",
    "METRICS_CSV",
    "audit_ledger",
    "block_page",
    "block_rows",
    "block_summary",
    "export_block",
    "export_document",
    "genesis_document",
    "member_page",
    "mostly_rejected",
    "overview",
    "proof_document",
    "read_accuracy",
    "rejection_counts",
    "results_dir_for",
]

EXPORT_FORMAT = "concilium-ledger-export/1"
PROOF_FORMAT = "concilium-inclusion-proof/1"
METRICS_CSV = "metrics.csv"
METRICS_BYTES_MAX = 16 << 20
"""A results folder's metrics.csv is one short row per round; a larger file is not read."""
MEMBER_WINDOW = 1000
"""Blocks scanned per page of a member's history (one member page never decodes the whole chain)."""
OUTLIER_DISTANCE_FACTOR = 10.0
"""A score-row distance is marked an outlier when it is more than this many times the median of every distance in
its block's rows (the round's median). A client is marked when the median of its own distances over the rows is, so
that one member's lying row does not mark every client it scored (that row's cells are marked).
``benchmarks/scored_blobs.py``: in the quickstart's 30 rounds (digits, iid) honest clients' distances are at most 2.18
times their round's median, the two model-negating clients' at least 1,830 times; in cmfl's (label skew,
Dirichlet 0.1) honest clients reach 9.70 times in 20 rounds and 8.12 in 100: very heterogeneous data brings honest
clients near the mark. A mark is a place to look, not a verdict."""
MOSTLY_REJECTED_SHARE = 0.5
"""A member is marked *mostly rejected* when it was rejected (scored and not selected; coordinator mode: sampled
and not included) in more than this share of the rounds it trained, ..."""
MOSTLY_REJECTED_MIN_ROUNDS = 3
"""... and it trained in at least this many rounds of the heights looked at (one rejection in one round is no
pattern). How many honest members that marks depends on the share every round rejects (shown beside the marks):
``benchmarks/scored_blobs.py`` on the quickstart (8 of 12 accepted: a third rejected), 30 rounds, marks both
Byzantine clients (24 of 24 rounds rejected) and two honest ones (13 of 20, 12 of 18); on cmfl (7 of 18
accepted) most members that trained three times or more."""
OVERVIEW_WINDOW = 200
"""Blocks the overview's members table looks at for its *mostly rejected* marks (the most recent ones; a member's
own page looks at :data:`MEMBER_WINDOW`)."""


def mostly_rejected(trained: int, rejected: int) -> bool:
    """Was a member rejected in most of the rounds it trained (:data:`MOSTLY_REJECTED_SHARE`,
    :data:`MOSTLY_REJECTED_MIN_ROUNDS`)?"""
    return trained >= MOSTLY_REJECTED_MIN_ROUNDS and rejected > MOSTLY_REJECTED_SHARE * trained


# --- the command line's documents ------------------------------------------------------------


def genesis_document(g: Genesis) -> dict[str, Any]:
    """``concilium ledger show L 0`` and ``genesis show``: the genesis hash and the genesis as TOML values."""
    return {"genesis_hash": g.hash().hex(), **record_to_toml(g)}


def block_summary(block: Block) -> dict[str, Any]:
    """``concilium ledger show L H``: one block's header, updates, committee, signers, evidence and record."""
    hd, pl = block.header, block.payload
    return {
        "height": hd.height,
        "hash": hd.hash().hex(),
        "prev_hash": hd.prev_hash.hex(),
        "fl_round": hd.fl_round,
        "view": hd.view,
        "proposer": hd.proposer,
        "time_ms": hd.time_ms,
        "updates": [{"peer": u.peer, "digest": u.digest.hex(), "n_samples": u.n_samples} for u in pl.updates],
        "model_digest": pl.model_digest.hex(),
        "next_committee": list(pl.next_committee),
        "certified_by": [s.signer for s in block.certificate.signatures],
        "evidence": [{"kind": e.kind, "offender": e.offender, "reason": e.reason} for e in pl.evidence],
        "record": to_json_value(pl.record),
    }


def export_block(raw: bytes, block: Block) -> dict[str, Any]:
    """One entry of ``ledger export --json``'s ``blocks``: the block's hash and its canonical value as JSON."""
    return {"hash": block.hash().hex(), **to_json_value(decode(raw))}


def export_document(store: SqliteBlockStore) -> dict[str, Any]:
    """``concilium ledger export --json`` (every row checked as ``iter_checked`` does; raises
    :class:`CorruptStoreError` at the first bad one)."""
    g = store.genesis()
    return {
        "format": EXPORT_FORMAT,
        "note": "bytes are hex; this is a view, the canonical bytes are in the ledger",
        "genesis_hash": g.hash().hex(),
        "genesis": to_json_value(g.to_value()),
        "blocks": [export_block(raw, b) for _h, raw, b in store.iter_checked()],
    }


def proof_document(proof: InclusionProof) -> dict[str, Any]:
    """``concilium ledger proof``'s JSON file: a readable summary and the canonical proof bytes (hex), which
    ``ledger verify-proof`` checks against a genesis."""
    return {
        "format": PROOF_FORMAT,
        "summary": {
            "chain_id": proof.chain_id,
            "height": proof.header.height,
            "block_hash": proof.header.hash().hex(),
            "peer": proof.commitment.peer,
            "update_digest": proof.commitment.digest.hex(),
            "n_samples": proof.commitment.n_samples,
            "leaf": proof.index,
            "leaves": proof.tree_size,
        },
        "proof": proof.encode().hex(),
    }


# --- the audit -------------------------------------------------------------------------------


class CannotReexecute(ValueError):
    """``reexec="yes"`` on a chain whose algorithm this concilium cannot re-execute (bad input)."""


@dataclass(frozen=True, slots=True)
class AuditOutcome:
    """The verdict of :func:`audit_ledger`: ``line`` is what ``concilium ledger verify`` prints.

    ``status``: ``"ok"`` (every check passed, every round re-executed unless the caller asked for no re-execution),
    ``"not_reexecuted"`` (the chain is valid but its rounds could not be re-executed here: ``line`` names why; never
    an OK: the audit did not check what the rounds computed) or ``"fail"``. ``ok`` is ``status == "ok"``."""

    ok: bool
    line: str
    first_bad_height: int | None = None
    reason: str | None = None
    report: AuditReport | None = None
    status: str = ""

    def __post_init__(self) -> None:
        if not self.status:
            object.__setattr__(self, "status", "ok" if self.ok else "fail")


def wall_clock_ms() -> int:
    """The auditor's clock: ms since 1970 (what a block time is)."""
    return time.time_ns() // 1_000_000


def audit_ledger(
    path: str | os.PathLike[str],
    *,
    trusted_genesis: str | os.PathLike[str] | None = None,
    reexec: str = "auto",
    no_blobs: bool = False,
    expect_height: int | None = None,
    public_for: Callable[[Path], Any] | None = None,
    on_start: Callable[[int], None] | None = None,
    on_block: Callable[[int], None] | None = None,
    now_ms: int | None = None,
    app: str | os.PathLike[str] | None = None,
) -> AuditOutcome:
    """Every check of ``concilium ledger verify``: open the ledger read-only, compare its genesis with
    ``trusted_genesis`` (a genesis file), and run :func:`ledger.audit_chain` over every stored row with the
    blobs and, by ``reexec`` (``auto``/``yes``/``no``), the re-execution of every round.

    ``public_for(path)`` rebuilds the public split a strategy that scores models on one needs (Sself), or
    returns None. ``on_start(total)`` is called once the height is known, ``on_block(h)`` after each block.
    ``now_ms``: the auditor's clock (ms since 1970; default: the wall clock when the audit starts), beyond which
    plus the genesis' drift no block time may be (:func:`ledger.audit_chain`). ``app``: the app the genesis pins
    (``node.apps``; default: the one a results folder's ``scenario.toml`` beside the ledger names, else an
    installed one of the pinned name); re-execution needs it, and without it the verdict is ``not_reexecuted``
    naming it. Raises ``ConfigFileError`` (one line, naming both digests) when ``app`` is not the pinned one,
    ``StoreError`` when the path is not a ledger that can be read, ``NodeError`` for a bad genesis file,
    and :class:`CannotReexecute` when ``reexec="yes"`` but the algorithm cannot be re-executed.
    """
    caches = Caches()  # the blob store's, the audit's and the re-executor's
    try:
        store, blobs = open_ledger(path, readonly=True, check_index=False, caches=caches)
    except CorruptStoreError as e:
        return AuditOutcome(False, e.verdict(), e.height, e.reason)
    with store:
        genesis = store.genesis()
        if trusted_genesis is not None:
            trusted = load_genesis(trusted_genesis)
            if trusted.hash() != genesis.hash():
                reason = f"the ledger's genesis differs from {trusted_genesis}"
                return AuditOutcome(False, f"FAIL at height 0: {reason}", 0, reason)
        from node.apps import pin_of  # noqa: PLC0415
        from node.reexec import ledger_reexecutor  # noqa: PLC0415 - imports torch: only for an audit

        try:
            pin_of(genesis.protocol.params)
        except ValueError as e:
            return AuditOutcome(False, f"FAIL at height 0: {e}", 0, str(e))
        # (a strategy that scores models on a public split, Sself: public_for rebuilds it, from a results folder's
        # scenario.toml or the node's own split)
        rx, why = ledger_reexecutor(genesis, path, app=app, public_for=public_for,
                                    build=reexec != "no" and not no_blobs, caches=caches)
        if reexec == "yes" and rx is None:
            raise CannotReexecute(f"{path}: cannot re-execute the rounds: {why}")
        if on_start is not None:
            on_start(store.height())
        report = audit_chain(
            genesis,
            store.iter_rows(),
            blobs=None if no_blobs else blobs,
            expect_height=expect_height,
            reexecutor=rx,
            on_block=on_block,
            now_ms=wall_clock_ms() if now_ms is None else now_ms,
            caches=caches,
        )
        warning = store.warning
    note = ""
    line = report.line()
    status = "ok" if report.ok else "fail"
    if report.ok and rx is None and no_blobs:
        note = " (rounds not re-executed: --no-blobs skips the blobs that re-execution reads)"
    elif report.ok and rx is None and reexec == "no":
        note = " (rounds not re-executed: --reexec no)"
    elif report.ok and rx is None:
        # never an OK: the audit did not check what the rounds computed
        status = "not_reexecuted"
        line = "NOT RE-EXECUTED: " + line.removeprefix("OK: ")
        note = f"; its rounds were not re-executed: {why}"
    if warning:
        note += f"; WARNING: {warning}"
    return AuditOutcome(status == "ok", line + note, report.first_bad_height, report.reason, report, status)


# --- the explorer's views --------------------------------------------------------------------


def results_dir_for(ledger: str | os.PathLike[str], results: str | os.PathLike[str] | None) -> Path | None:
    """The results folder whose ``metrics.csv`` the overview plots: ``results`` if given, else the folder the
    ledger directory is in when it holds a ``metrics.csv`` (a ``concilium sim run`` results folder)."""
    if results is not None:
        return Path(results)
    chain, _ = resolve_ledger_path(ledger)
    parent = chain.parent.parent
    return parent if (parent / METRICS_CSV).is_file() else None


def read_accuracy(results: Path | None) -> list[dict[str, Any]]:
    """``[{"fl_round", "accuracy", "accepted", "rejected", "view"}]`` from ``results/metrics.csv`` (the rows
    with a finite accuracy), or ``[]`` when there is none. Only that one file name is ever opened."""
    if results is None:
        return []
    path = results / METRICS_CSV
    try:
        with open(path, "rb") as f:
            raw = f.read(METRICS_BYTES_MAX + 1)
    except OSError:
        return []
    if len(raw) > METRICS_BYTES_MAX:
        return []
    out = []
    try:
        for row in csv.DictReader(io.StringIO(raw.decode("utf-8", errors="replace"))):
            try:
                acc = float(row.get("accuracy") or "nan")
                rnd = int(row.get("fl_round") or "")
            except ValueError:
                continue
            if not math.isfinite(acc):
                continue
            out.append({"fl_round": rnd, "accuracy": acc, **{k: _int_or_none(row.get(k)) for k in ("accepted", "rejected", "view")}})
    except csv.Error:
        return out
    return out


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _names(g: Genesis) -> dict[str, str]:
    return {m.peer_id: m.name for m in g.members}


def overview(store: SqliteBlockStore, results: Path | None) -> dict[str, Any]:
    """The overview page: chain id, genesis (members, mode, algorithm and parameters, quorum rule), height,
    head hash, and accuracy per round from the results folder."""
    g = store.genesis()
    p = g.protocol
    first = set(genesis_committee(g))
    return {
        "chain_id": g.chain_id,
        "genesis_hash": g.hash().hex(),
        "genesis_time_ms": g.genesis_time_ms,
        "height": store.height(),
        "head_hash": store.head_hash().hex(),
        "warning": store.warning,
        "mode": p.mode,
        "algorithm": p.algorithm,
        "params": to_json_value(dict(p.params)),
        "committee_size": p.committee_size,
        "quorum": p.quorum,
        "quorum_votes": quorum_size(p.committee_size, p.quorum),
        "fl_rounds": p.fl_rounds,
        "timeouts": record_to_toml(p.timeouts),
        "model": {"name": g.model.name, "digest": g.model.digest.hex(), "params": to_json_value(dict(g.model.params))},
        "members": [
            {"peer_id": m.peer_id, "name": m.name, "addrs": list(m.addrs), "first_committee": m.peer_id in first}
            for m in g.members
        ],
        "accuracy": read_accuracy(results),
        "rejections": rejection_counts(store, window=OVERVIEW_WINDOW),
    }


def rejection_counts(store: SqliteBlockStore, *, window: int) -> dict[str, Any]:
    """Rounds trained and rejected per member over the last ``window`` blocks (heights ``from`` .. ``to``), and which
    members were :func:`mostly_rejected` there: ``{"from", "to", "members": {peer: {"trained", "rejected",
    "mostly_rejected"}}, "all": {"trained", "rejected"}}`` (members that trained only; ``all``: the sums, the share
    every round rejects)."""
    top = store.height()
    lo = max(1, top - window + 1)
    mode = store.genesis().protocol.mode
    trained: dict[str, int] = {}
    rejected: dict[str, int] = {}
    for h in range(lo, top + 1):
        sel = _selection(store.get_checked(h), mode)
        for p in sel["trainers"]:
            trained[p] = trained.get(p, 0) + 1
        for p in sel["rejected"]:
            rejected[p] = rejected.get(p, 0) + 1
    members = {
        p: {"trained": t, "rejected": rejected.get(p, 0), "mostly_rejected": mostly_rejected(t, rejected.get(p, 0))}
        for p, t in sorted(trained.items())
    }
    every = {"trained": sum(trained.values()), "rejected": sum(rejected.values())}
    return {"from": lo if top >= 1 else 0, "to": top, "members": members, "all": every}


def _committee_before(store: SqliteBlockStore, height: int) -> tuple[str, ...]:
    """The committee that certifies block ``height``: the one block ``height - 1`` named (genesis: derived)."""
    if height <= 1:
        return genesis_committee(store.genesis())
    return tuple(store.get_checked(height - 1).payload.next_committee)


def _selection(block: Block, mode: str) -> dict[str, list[str]]:
    """Who trained for this block's round and what became of each: ``accepted`` (their update is in the
    block), ``rejected`` (committee mode: scored but not selected; coordinator mode: sampled, no update
    included - dropped out, late or filtered), ``excluded`` (committee mode: not scored by enough rows)."""
    rec = block.payload.record
    accepted = [u.peer for u in block.payload.updates]
    this_round = {u.peer for u in block.payload.updates if u.fl_round == block.header.fl_round}
    if mode == COMMITTEE_MODE:
        trainers = [str(x) for x in rec.get("training", ())]
        excluded = [str(x) for x in rec.get("excluded", ())]
    else:
        trainers = [str(x) for x in rec.get("clients", ())]
        excluded = []
    rejected = [t for t in trainers if t not in this_round and t not in excluded]
    return {"trainers": trainers, "accepted": accepted, "rejected": rejected, "excluded": excluded}


def _attempt_committee(committee: Sequence[str], g: Genesis, genesis_hash: bytes, height: int, view: int) -> tuple[str, ...]:
    """The committee of ``view`` at ``height``: the one the previous block named (``committee``) in committee attempt 0,
    else the one re-drawn for the attempt (``ledger.redrawn_committee``: a committee that cannot reach quorum does not
    stall the chain)."""
    a = attempt_of(view)
    return tuple(sorted(committee)) if a == 0 else redrawn_committee(g, height, a, genesis_hash=genesis_hash)


def _replaced(block: Block, committee: Sequence[str], g: Genesis, genesis_hash: bytes) -> list[str]:
    """The proposers of the views before the block's in its committee attempt, from the attempt's first view
    (``attempt × 2^32``): each was replaced by a view change. (How many views the earlier attempts of a re-drawn height
    had, no block records.)"""
    hd = block.header
    a = attempt_of(hd.view)
    com = _attempt_committee(committee, g, genesis_hash, hd.height, hd.view)
    return [primary(com, genesis_hash, hd.height, v) for v in range(a * ATTEMPT_VIEWS, hd.view)]


def _row(block: Block, mode: str) -> dict[str, Any]:
    sel = _selection(block, mode)
    hd = block.header
    return {
        "height": hd.height,
        "hash": block.hash().hex(),
        "fl_round": hd.fl_round,
        "view": hd.view,
        "proposer": hd.proposer,
        "time_ms": hd.time_ms,
        "accepted": len(sel["accepted"]),
        "rejected": len(sel["rejected"]),
        "evidence": len(block.payload.evidence),
    }


def block_rows(store: SqliteBlockStore, *, before: int | None, limit: int) -> dict[str, Any]:
    """A page of the blocks table, newest first: the ``limit`` blocks below height ``before`` (default: the
    head). Reads only those rows (primary-key lookups), whatever the chain's length."""
    top = store.height() if before is None else min(before - 1, store.height())
    lo = max(1, top - limit + 1)
    mode = store.genesis().protocol.mode
    rows = [_row(store.get_checked(h), mode) for h in range(top, lo - 1, -1)] if top >= 1 else []
    return {
        "height": store.height(),
        "rows": rows,
        "newer": None if before is None or top >= store.height() else min(store.height() + 1, top + limit + 1),
        "older": lo if lo > 1 else None,
    }


def _score_rows(block: Block, committee: Sequence[str], g: Genesis, trainers: Sequence[str]) -> dict[str, Any]:
    """Committee mode: every signed score row of the block (member, its distances to each client, the digest of
    its own update) and the scores, ranking and selection :func:`consensus.decide_round` derives from them."""
    from consensus import KIND_SCORES, CmflParams, ConsensusError, decide_round, parse_score_row  # noqa: PLC0415

    rows, parsed, errors = [], [], []
    for a in block.payload.attestations:
        if a.kind != KIND_SCORES:
            continue
        try:
            r = parse_score_row(a)
        except ConsensusError as e:
            errors.append(f"score row of {a.signer}: {e}")
            continue
        parsed.append(r)
        rows.append({"member": r.member, "reference": r.reference.hex(), "distances": dict(r.distances)})
    scores: dict[str, float] = {}
    ranked: list[str] = []
    try:
        d = decide_round(parsed, training=trainers, committee=committee, params=CmflParams.from_genesis(g))
        scores, ranked = dict(d.scores), list(d.ranked)
    except (ConsensusError, ValueError) as e:
        errors.append(f"scores cannot be derived from the rows: {e}")
    scored = {k for r in rows for k in r["distances"]}
    clients = [k for k in ranked if k in scored] + sorted(scored - set(ranked))  # best first, then the unranked
    return {"rows": rows, "clients": clients, "scores": scores, "ranked": ranked, "errors": errors,
            **_distance_outliers(rows)}


def _distance_outliers(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The round's median distance (over every row and client), the cells above :data:`OUTLIER_DISTANCE_FACTOR`
    times it (``{member: [client, ...]}``) and the clients whose own median distance is."""
    every = [d for r in rows for d in r["distances"].values()]
    if not every:
        return {"median": None, "outlier_factor": OUTLIER_DISTANCE_FACTOR, "outlier_cells": {}, "outliers": []}
    median = statistics.median(every)
    limit = OUTLIER_DISTANCE_FACTOR * median
    cells = {r["member"]: sorted(k for k, d in r["distances"].items() if d > limit) for r in rows}
    by_client: dict[str, list[float]] = {}
    for r in rows:
        for k, d in r["distances"].items():
            by_client.setdefault(k, []).append(d)
    outliers = sorted(k for k, ds in by_client.items() if statistics.median(ds) > limit)
    return {"median": median, "outlier_factor": OUTLIER_DISTANCE_FACTOR,
            "outlier_cells": {m: ks for m, ks in cells.items() if ks}, "outliers": outliers}


def block_page(store: SqliteBlockStore, height: int) -> dict[str, Any]:
    """One block: header fields, the committee that certified it and the signers, every update commitment,
    committee mode's score rows and selection (coordinator mode's round record), the accepted set, the model
    and state digests, and the evidence."""
    g = store.genesis()
    block = store.get_checked(height)
    named = _committee_before(store, height)
    hd, pl = block.header, block.payload
    committee = _attempt_committee(named, g, g.hash(), hd.height, block.certificate.view)
    mode = g.protocol.mode
    sel = _selection(block, mode)
    page: dict[str, Any] = {
        "summary": block_summary(block),
        "height": hd.height,
        "hash": block.hash().hex(),
        "prev_hash": hd.prev_hash.hex(),
        "fl_round": hd.fl_round,
        "view": hd.view,
        "attempt": attempt_of(block.certificate.view),
        "named_committee": list(named),
        "proposer": hd.proposer,
        "time_ms": hd.time_ms,
        "payload_hash": hd.payload_hash.hex(),
        "updates_root": hd.updates_root.hex(),
        "committee": list(committee),
        "replaced": _replaced(block, named, g, g.hash()),
        "replaced_from_view": attempt_of(hd.view) * ATTEMPT_VIEWS,
        "quorum_votes": quorum_size(len(committee), g.protocol.quorum),
        "signers": [s.signer for s in block.certificate.signatures],
        "updates": [
            {"peer": u.peer, "fl_round": u.fl_round, "digest": u.digest.hex(), "n_samples": u.n_samples} for u in pl.updates
        ],
        "selection": sel,
        "model_digest": pl.model_digest.hex(),
        "state_digest": pl.state_digest.hex() if pl.state_digest is not None else None,
        "next_committee": list(pl.next_committee),
        "evidence": [
            {"kind": e.kind, "offender": e.offender, "height": e.height, "view": e.view, "reason": e.reason,
             "exhibits": len(e.exhibits)}
            for e in pl.evidence
        ],
        "record": to_json_value(pl.record),
        "attestations": len(pl.attestations),
        "mode": mode,
        "top": store.height(),
    }
    if mode == COMMITTEE_MODE:
        page["scores"] = _score_rows(block, committee, g, sel["trainers"])
    return page


@dataclass(slots=True)
class _MemberRow:
    height: int
    fl_round: int
    roles: list[str] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)


def member_page(store: SqliteBlockStore, peer: str, *, to: int | None = None, window: int = MEMBER_WINDOW) -> dict[str, Any]:
    """One member's history over heights ``to - window + 1 .. to`` (default: up to the head), newest first:
    each round it trained in and whether it was accepted, rejected or not scored, sat on the committee,
    signed the commit certificate, proposed (coordinated) the block, and evidence against it. Raises
    ``KeyError`` if ``peer`` is not a genesis member."""
    g = store.genesis()
    member = next((m for m in g.members if m.peer_id == peer), None)
    if member is None:
        raise KeyError(peer)
    mode = g.protocol.mode
    genesis_hash = g.hash()
    top = store.height() if to is None else max(0, min(to, store.height()))
    lo = max(1, top - window + 1)
    committee = _committee_before(store, lo) if top >= 1 else ()
    rows: list[_MemberRow] = []
    counts = {k: 0 for k in ("trained", "accepted", "rejected", "excluded", "committee", "proposed", "replaced", "evidence")}
    for h in range(lo, top + 1):
        b = store.get_checked(h)
        sel = _selection(b, mode)
        r = _MemberRow(h, b.header.fl_round)
        if peer in sel["trainers"]:
            counts["trained"] += 1
            r.roles.append("trained")
        stale = [u.fl_round for u in b.payload.updates if u.peer == peer and u.fl_round != b.header.fl_round]
        for key in ("accepted", "rejected", "excluded"):
            if peer in sel[key]:
                counts[key] += 1
                r.roles.append(key if not (key == "accepted" and stale) else f"accepted (update of round {stale[0]})")
        if peer in _attempt_committee(committee, g, genesis_hash, h, b.certificate.view):  # (or re-drawn)
            counts["committee"] += 1
            r.roles.append("committee" + (", signed" if peer in {s.signer for s in b.certificate.signatures} else ""))
        if b.header.proposer == peer:
            counts["proposed"] += 1
            r.roles.append("coordinator" if mode != COMMITTEE_MODE else "proposer")
        for v, who in enumerate(_replaced(b, committee, g, genesis_hash), attempt_of(b.header.view) * ATTEMPT_VIEWS):
            if who == peer:
                counts["replaced"] += 1
                r.roles.append(f"replaced {'coordinator' if mode != COMMITTEE_MODE else 'proposer'} (view {v})")
        for e in b.payload.evidence:
            if e.offender == peer:
                counts["evidence"] += 1
                r.evidence.append({"kind": e.kind, "height": e.height, "view": e.view, "reason": e.reason})
        if r.roles or r.evidence:
            rows.append(r)
        committee = tuple(b.payload.next_committee)
    return {
        "peer_id": peer,
        "name": member.name,
        "mostly_rejected": mostly_rejected(counts["trained"], counts["rejected"]),
        "addrs": list(member.addrs),
        "height": store.height(),
        "from": lo if top >= 1 else 0,
        "to": top,
        "older": lo - 1 if lo > 1 else None,
        "newer": min(store.height(), top + window) if top < store.height() else None,
        "counts": counts,
        "rows": [{"height": r.height, "fl_round": r.fl_round, "roles": r.roles, "evidence": r.evidence} for r in reversed(rows)],
    }


def names_of(store: SqliteBlockStore) -> Mapping[str, str]:
    """Display names by peer id (from the genesis; may be empty strings)."""
    return _names(store.genesis())
