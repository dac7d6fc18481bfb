"""Offline audit of a stored chain, inclusion proofs, and JSON views of blocks.

:func:`audit_chain` folds :func:`ledger.apply_block` over the stored bytes and stops at the first bad
block, naming its height and the reason (Certificate Transparency's monitor, CometBFT's light client).
Re-execution of rounds plugs in through :class:`ledger.Reexecutor`; what it finds wrong with a signed input of an
otherwise valid block (:class:`ledger.AuditFinding`: a lying score row) fails the audit too, without stopping it.

Block times. What an audit checks: every block's ``time_ms`` is at least the previous block's
(the genesis time at height 1: a chain rule, :func:`ledger.apply_block`) and at most ``2^63 - 1`` (the header
type); given the auditor's clock (``now_ms``; ``ledger verify`` passes the wall clock), at most the latest time of
:func:`ledger.block_time_window` of it, ``now_ms + tick_ms + time_drift_ms``: every block was decided before the
audit, by a quorum in which an honest validator accepted its time only within the drift of its own clock, so a
later time means that the validators' clocks (or more than ``f`` validators) were wrong. What it cannot check:
that a time was within the drift of the validators' clocks when they voted (when that was is recorded nowhere: a
block's time is the only clock on the chain), hence no lower bound beyond the previous block's time (a network may
stall for any time between two heights).

An :class:`InclusionProof` shows that one signed update commitment is in a block certified by a quorum
of the committee that the previous block named, checkable with nothing but the genesis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ledger._caches import Caches
from ledger._chain import (
    AuditFinding,
    BlobSource,
    ChainContext,
    ChainState,
    Reexecutor,
    apply_block,
    block_time_window,
    check_certificate,
    decode_block,
    genesis_committee,
    genesis_state,
    update_leaves,
    update_sign_bytes,
)
from ledger._encoding import Record, record
from ledger._errors import ChainError, LedgerError, StoreError
from ledger._merkle import inclusion_path, verify_inclusion
from ledger._types import Block, BlockHeader, Certificate, Genesis, Payload, UpdateCommitment

__all__ = ["AuditReport", "InclusionProof", "audit_chain", "make_proof", "to_json_value", "verify_proof"]


@dataclass(frozen=True, slots=True)
class AuditReport:
    """Result of :func:`audit_chain`. ``ok`` is False iff some block failed; then ``first_bad_height``
    and ``reason`` say which and why, and ``height``/``head_hash`` describe the valid prefix."""

    ok: bool
    chain_id: str
    genesis_hash: bytes
    height: int
    head_hash: bytes
    signatures_checked: int
    blobs_checked: int
    reexecuted: bool
    first_bad_height: int | None = None
    reason: str | None = None
    findings: tuple[AuditFinding, ...] = ()
    """Signed inputs that re-execution found contradicted by the blobs (:class:`ledger.AuditFinding`), in height
    order, up to the end of the chain or its first invalid block: each one makes the audit fail (the first one
    found, if it comes before any invalid block, is ``first_bad_height``), but the chain is checked on past them."""
    chain_valid: bool = True
    """Every check but the findings passed: the chain follows its rules (its rounds re-execute from the signed
    inputs as they are), up to ``expect_height``."""

    def line(self) -> str:
        """The one-line verdict printed by ``concilium ledger verify``."""
        if self.ok:
            extra = ", rounds re-executed" if self.reexecuted else ""
            return (
                f"OK: chain {self.chain_id} verified, {self.height} blocks, head {self.head_hash.hex()[:16]}, "
                f"{self.signatures_checked} signatures, {self.blobs_checked} blobs{extra}"
            )
        return f"FAIL at height {self.first_bad_height}: {self.reason} (valid prefix: {self.height} blocks)"


def _signature_count(b: Block) -> int:
    p = b.payload
    return (
        len(p.updates)
        + len(b.certificate.signatures)
        + len(p.attestations)
        + sum(len(e.exhibits) for e in p.evidence)
    )


class _Collecting:
    """A re-executor that keeps what the wrapped one finds (:class:`ledger.AuditFinding`) instead of handing it on."""

    __slots__ = ("found", "inner")

    def __init__(self, inner: Reexecutor) -> None:
        self.inner = inner
        self.found: list[AuditFinding] = []

    def reexecute(self, ctx: ChainContext, before: ChainState, block: Block, blobs: BlobSource) -> None:
        got = self.inner.reexecute(ctx, before, block, blobs)
        if got:
            self.found.extend(got)


def audit_chain(
    genesis: Genesis,
    rows: Iterable[tuple[int, bytes] | tuple[int, bytes, bytes] | tuple[int, bytes, bytes, bytes]],
    *,
    blobs: BlobSource | None = None,
    reexecutor: Reexecutor | None = None,
    expect_height: int | None = None,
    on_block: Callable[[int], None] | None = None,
    now_ms: int | None = None,
    caches: Caches | None = None,
) -> AuditReport:
    """Verify every stored block in order.

    ``rows`` yields ``(height, canonical block bytes)``, optionally followed by the store's index columns
    ``hash`` and ``prev_hash`` (as :meth:`SqliteBlockStore.iter_rows` does); an index column that differs
    from what the block bytes say is reported at that height, as ``show`` and ``export`` report it, so
    every command names the same first bad height. ``blobs`` (optional)
    checks every referenced blob's digest. ``expect_height`` makes a chain shorter than expected fail
    (a truncated tail is otherwise indistinguishable from an older, valid chain). ``now_ms``: the auditor's clock
    (ms since 1970); a block whose time is beyond :func:`ledger.block_time_window` of it fails (see the module
    docstring). None: no bound but the chain's own (the ledger reads no clock).

    What ``reexecutor`` finds (:class:`ledger.AuditFinding`: a committee member's score row that the stored
    updates contradict) fails the audit too, but the chain is checked on past it, to its end or its first invalid
    block: the verdict names the lower of the first finding's height and the first invalid block's, and
    :attr:`AuditReport.findings` lists every finding.

    ``caches``: the auditor's memos (:class:`ledger.Caches`), which its blob store and re-executor may share
    (None: a private one).
    """
    ctx = ChainContext(genesis, caches=caches)
    state: ChainState = genesis_state(ctx)
    latest = None if now_ms is None else block_time_window(genesis, now_ms)[1]
    sigs = blobs_n = 0
    bad: tuple[int, str] | None = None
    collecting = None if reexecutor is None else _Collecting(reexecutor)
    found_before: ChainState | None = None  # the valid prefix before the first block with a finding
    rows_iter = iter(rows)
    while True:
        h = state.height + 1
        try:
            row = next(rows_iter)
        except StopIteration:
            break
        except LedgerError as e:  # the store itself failed mid-way (e.g. a corrupted page)
            if type(e) is StoreError:  # not the ledger's fault (an I/O error, a lock): no verdict on it
                raise
            bad = (h, str(e))
            break
        height, data = row[0], row[1]
        found = 0 if collecting is None else len(collecting.found)
        try:
            if height != h:
                raise ChainError(f"height {h}: missing (the next stored block is height {height})")
            block, digests = decode_block(data)
            after = apply_block(ctx, state, block, blobs=blobs, reexecutor=collecting, digests=digests)
            if latest is not None and block.header.time_ms > latest:
                raise ChainError(
                    f"height {h}: block time {block.header.time_ms} is beyond the auditor's clock {now_ms} + tick_ms + "
                    f"time_drift_ms ({latest}): a validator with a right clock could not have accepted it by now"
                )
            if len(row) >= 3 and row[2] != after.head_hash:  # type: ignore[misc]
                raise ChainError(f"height {h}: the store's hash index differs from the block's hash")
            if len(row) >= 4 and row[3] != block.header.prev_hash:  # type: ignore[misc]
                raise ChainError(f"height {h}: the store's prev_hash index differs from the block's prev_hash")
            if collecting is not None and len(collecting.found) > found and found_before is None:
                found_before = state
            state = after  # the valid prefix grows only once the row is entirely good
        except LedgerError as e:
            msg = str(e)
            bad = (h, msg if msg.startswith(f"height {h}") else f"height {h}: {msg}")
            break
        except (ValueError, TypeError, ArithmeticError, IndexError, KeyError, AttributeError, RecursionError) as e:
            # no stored input may raise out of an audit: a check this chain's rules lack (or a re-executor's own
            # refusal of its inputs) is still the first bad block, named with what went wrong
            bad = (h, f"height {h}: cannot be checked ({type(e).__name__}: {str(e)[:200]})")
            break
        finally:
            if bad is not None and collecting is not None:
                del collecting.found[found:]  # a block that fails is reported as such, not by its findings
        sigs += _signature_count(block)
        if blobs is not None:
            blobs_n += len(block.payload.updates) + 1 + (block.payload.state_digest is not None)
        if on_block is not None:
            on_block(h)
    if bad is None and expect_height is not None and state.height < expect_height:
        bad = (state.height + 1, f"height {state.height + 1}: missing (expected {expect_height} blocks)")
    findings = tuple(collecting.found) if collecting is not None else ()
    first_bad, reason = None, None
    if bad is not None:
        first_bad, reason = bad
        prefix = f"height {first_bad}: "
        reason = reason[len(prefix) :] if reason.startswith(prefix) else reason
    prefix_state = state
    if findings and (first_bad is None or findings[0].height < first_bad):
        assert found_before is not None
        rest = (
            f"every other check passed through height {state.height}" if bad is None
            else f"the chain itself fails at height {first_bad}: {reason}"
        )
        more = f"{len(findings)} signed inputs fail their recheck in all; " if len(findings) > 1 else ""
        first_bad, reason = findings[0].height, f"{findings[0].reason} ({more}{rest})"
        prefix_state = found_before
    return AuditReport(
        ok=bad is None and not findings,
        chain_id=genesis.chain_id,
        genesis_hash=ctx.genesis_hash,
        height=prefix_state.height,
        head_hash=prefix_state.head_hash,
        signatures_checked=sigs,
        blobs_checked=blobs_n,
        reexecuted=reexecutor is not None,
        first_bad_height=first_bad,
        reason=reason,
        findings=findings,
        chain_valid=bad is None,
    )


# --- inclusion proofs ------------------------------------------------------------------------


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class InclusionProof(Record):
    """One update commitment's inclusion in a certified block.

    ``prev_header``/``prev_payload`` are the block before (absent at height 1, where the committee is
    the genesis committee): they fix the committee that must have certified ``header``.
    """

    chain_id: str
    genesis_hash: bytes
    header: BlockHeader
    certificate: Certificate
    commitment: UpdateCommitment
    index: int
    tree_size: int
    path: tuple[bytes, ...]
    prev_header: BlockHeader | None
    prev_payload: Payload | None


def make_proof(genesis: Genesis, block: Block, prev: Block | None, peer: str) -> InclusionProof:
    """Build the proof that ``peer``'s update is in ``block`` (``prev`` = the block before, or None)."""
    ups = block.payload.updates
    idx = next((i for i, u in enumerate(ups) if u.peer == peer), None)
    if idx is None:
        raise ChainError(f"height {block.height}: no update from {peer} in this block")
    return InclusionProof(
        chain_id=genesis.chain_id,
        genesis_hash=genesis.hash(),
        header=block.header,
        certificate=block.certificate,
        commitment=ups[idx],
        index=idx,
        tree_size=len(ups),
        path=tuple(inclusion_path(update_leaves(ups), idx)),
        prev_header=None if prev is None else prev.header,
        prev_payload=None if prev is None else prev.payload,
    )


def verify_proof(genesis: Genesis, proof: InclusionProof) -> str:
    """Check ``proof`` against ``genesis``; return a one-line description or raise ``LedgerError``.

    Checks: same chain and genesis; the commitment is signed by a member for the header's round; its
    Merkle path leads to the header's ``updates_root``; the certificate holds a quorum of valid COMMIT
    signatures of the committee named by the previous block (which the header commits to by hash).
    """
    ctx = ChainContext(genesis)
    hd = proof.header
    if proof.chain_id != genesis.chain_id or hd.chain_id != genesis.chain_id:
        raise ChainError(f"proof is for chain {proof.chain_id!r:.60}, genesis is {genesis.chain_id!r}")
    if proof.genesis_hash != ctx.genesis_hash:
        raise ChainError("proof was made against a different genesis")
    u = proof.commitment
    if u.fl_round != hd.fl_round:
        raise ChainError(f"commitment is for round {u.fl_round}, header for {hd.fl_round}")
    ctx.keys.verify(
        u.peer,
        u.signature,
        update_sign_bytes(ctx.chain_id, u.peer, u.fl_round, u.digest, u.n_samples),
        what="update commitment",
    )
    if not verify_inclusion(hd.updates_root, u.encode(), proof.index, proof.tree_size, proof.path):
        raise ChainError(f"height {hd.height}: Merkle path does not lead to the header's updates root")
    if hd.height == 1:
        if proof.prev_header is not None or proof.prev_payload is not None:
            raise ChainError("a height-1 proof carries no previous block")
        if hd.prev_hash != ctx.genesis_hash:
            raise ChainError("height 1 does not link to the genesis")
        committee: tuple[str, ...] = genesis_committee(genesis)
    else:
        ph, pp = proof.prev_header, proof.prev_payload
        if ph is None or pp is None:
            raise ChainError(f"height {hd.height}: proof lacks the previous block that names the committee")
        if ph.hash() != hd.prev_hash or ph.height != hd.height - 1:
            raise ChainError(f"height {hd.height}: previous header does not link")
        if pp.hash() != ph.payload_hash:
            raise ChainError(f"height {hd.height}: previous payload does not match its header")
        committee = pp.next_committee
    check_certificate(ctx, committee, hd, proof.certificate)
    return (
        f"OK: update {u.digest.hex()[:16]} of {u.peer} ({u.n_samples} samples) is leaf {proof.index}/"
        f"{proof.tree_size} of block {hd.height} ({hd.hash().hex()[:16]}), certified by "
        f"{len(proof.certificate.signatures)} of {len(committee)} committee members"
    )


# --- JSON views ------------------------------------------------------------------------------


def to_json_value(v: Any) -> Any:
    """A canonical value as JSON-compatible data: bytes become lowercase hex strings."""
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (tuple, list)):
        return [to_json_value(x) for x in v]
    if isinstance(v, dict) or hasattr(v, "items"):
        return {k: to_json_value(x) for k, x in v.items()}
    return v
