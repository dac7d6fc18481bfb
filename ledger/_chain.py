"""Chain rules: quorum, the genesis committee, the primary of (height, view), signing, and ``apply_block``.

``apply_block(ctx, state, block) -> state`` is the one place that decides whether a block validly
extends the chain. The auditor folds it over a stored chain; nodes call it before appending. It is pure:
blob contents and re-execution come in through the :class:`BlobSource` and :class:`Reexecutor`
Protocols, so the learning layer can plug in re-execution of scoring/selection/aggregation without the
ledger importing it.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import msgpack

from ledger._caches import Caches
from ledger._crypto import KeyPair, PublicKeyCache, hash_tagged, sha256, sign_bytes, sign_bytes_flat
from ledger._encoding import decode, encode, remembered
from ledger._errors import BlobError, ChainError, SignatureError
from ledger._types import REDRAW_TICKS_KEY
from ledger._merkle import merkle_root
from ledger._types import (
    Block,
    BlockHeader,
    Certificate,
    CommitSignature,
    Evidence,
    Genesis,
    Payload,
    SignedMessage,
    UpdateCommitment,
)

__all__ = [
    "KIND_COMMIT",
    "KIND_UPDATE",
    "BlobSource",
    "BlockDigests",
    "ChainContext",
    "ChainState",
    "Reexecutor",
    "ATTEMPT_VIEWS",
    "apply_block",
    "apply_header",
    "attempt_of",
    "block_time_window",
    "commit_sign_bytes",
    "decode_block",
    "genesis_committee",
    "genesis_state",
    "make_certificate",
    "make_header",
    "primary",
    "quorum_size",
    "redrawn_committee",
    "same_epoch",
    "sign_commit",
    "sign_message",
    "sign_update",
    "update_leaves",
    "update_sign_bytes",
]

KIND_UPDATE = "update"
KIND_COMMIT = "commit"

ATTEMPT_VIEWS = 1 << 32
"""Views per committee *attempt* at one height: attempt ``a`` holds views ``[a·2^32, (a+1)·2^32)``. Attempt 0 is the
committee the previous block named; attempt ``a`` ≥ 1, a committee re-drawn from the genesis hash, the height and
``a`` (:meth:`ChainContext.view_committee`), which a height's replicas move to when it has not decided within
``a`` times the genesis' ``redraw_ticks`` (a committee that cannot reach quorum does not stall the chain for
ever; ``docs/sampling.md``, "A committee that cannot reach quorum")."""


def attempt_of(view: int) -> int:
    """The committee attempt a view belongs to (:data:`ATTEMPT_VIEWS`)."""
    return view >> 32


def quorum_size(n: int, rule: str = "bft") -> int:
    """Votes needed out of a committee of ``n``.

    * ``"bft"``: more than two thirds, ``⌊2n/3⌋ + 1`` (= ``2f+1`` for ``n = 3f+1``; CometBFT's rule). Any
      two quorums intersect in more than ``n/3`` members, hence in an honest one while ``f < n/3``.
    * ``"majority"``: ``⌊n/2⌋ + 1``, CMFL paper step 6 (cmfl spec §2.5). Two quorums intersect in one
      member only, which may be Byzantine: **not Byzantine-safe**.
    """
    if n < 1:
        raise ValueError(f"committee size must be >= 1, got {n}")
    if rule == "bft":
        return (2 * n) // 3 + 1
    if rule == "majority":
        return n // 2 + 1
    raise ValueError(f"unknown quorum rule {rule!r}")


def _rank(domain: bytes, seed: bytes, peers: Sequence[str]) -> list[str]:
    """Peers sorted by ``H(domain ‖ seed ‖ peer)``, ties (impossible in practice) by peer id."""
    return sorted(peers, key=lambda p: (hash_tagged(domain, seed + p.encode()), p))


@remembered  # (it ranks every member by a hash)
def genesis_committee(genesis: Genesis) -> tuple[str, ...]:
    """Committee that certifies block 1: ``committee_size`` members ranked by a hash of the genesis hash.

    docs/design.md, "A round, committee mode", step 1: "at genesis derived from the genesis".
    """
    ranked = _rank(b"concilium-committee/v1", genesis.hash(), genesis.member_ids)
    return tuple(sorted(ranked[: genesis.protocol.committee_size]))


def redrawn_committee(genesis: Genesis, height: int, attempt: int, *, genesis_hash: bytes | None = None) -> tuple[str, ...]:
    """The committee re-drawn for ``height`` at committee attempt ``attempt`` ≥ 1 (:data:`ATTEMPT_VIEWS`): the
    ``committee_size`` members ranked first by ``H("concilium-redraw/v1" ‖ genesis hash ‖ height ‖ attempt)``, sorted
    (:meth:`ChainContext.view_committee` checks the genesis allows it and remembers it)."""
    g = genesis
    seed = (genesis_hash if genesis_hash is not None else g.hash()) + struct.pack(">QQ", height, attempt)
    return tuple(sorted(_rank(b"concilium-redraw/v1", seed, g.member_ids)[: g.protocol.committee_size]))


def primary(committee: Sequence[str], chain_seed: bytes, height: int, view: int) -> str:
    """The primary (proposer; the coordinator in coordinator mode) of ``(height, view)``.

    ``committee[(PRF(chain_seed, height) + view) mod C]`` over the sorted committee (cmfl spec §2.8.2), where
    ``chain_seed`` is the genesis hash (:attr:`ChainContext.genesis_hash`): verifiable by anyone, and a view change
    moves to the next member. Nothing a proposer puts in a block feeds it (a PRF of the previous block's hash, the
    former rule, let a proposer grind its ``time_ms`` for the next primary), so a member's only influence on who
    proposes is to abstain, which moves the height to its next view. See ``docs/sampling.md``.
    """
    if not committee:
        raise ValueError("empty committee")
    members = sorted(committee)
    prf = hash_tagged(b"concilium-primary/v2", chain_seed + struct.pack(">Q", height))
    start = int.from_bytes(prf[:8], "big") % len(members)
    return members[(start + view) % len(members)]


# --- signing -----------------------------------------------------------------------------------


def update_sign_bytes(chain_id: str, peer: str, fl_round: int, digest: bytes, n_samples: int) -> bytes:
    return sign_bytes_flat(chain_id, KIND_UPDATE, fl_round, 0, {"digest": digest, "n_samples": n_samples, "peer": peer})


def sign_update(key: KeyPair, chain_id: str, fl_round: int, digest: bytes, n_samples: int) -> UpdateCommitment:
    """A training client's signed update commitment."""
    sig = key.sign(update_sign_bytes(chain_id, key.peer_id, fl_round, digest, n_samples))
    return UpdateCommitment(peer=key.peer_id, fl_round=fl_round, digest=digest, n_samples=n_samples, signature=sig)


def commit_sign_bytes(chain_id: str, height: int, view: int, block_hash: bytes) -> bytes:
    return sign_bytes_flat(chain_id, KIND_COMMIT, height, view, {"block_hash": block_hash})


def sign_commit(key: KeyPair, chain_id: str, height: int, view: int, block_hash: bytes) -> CommitSignature:
    return CommitSignature(signer=key.peer_id, signature=key.sign(commit_sign_bytes(chain_id, height, view, block_hash)))


def sign_message(key: KeyPair, chain_id: str, kind: str, height: int, view: int, body: object) -> SignedMessage:
    sig = key.sign(sign_bytes(chain_id, kind, height, view, body))
    return SignedMessage(signer=key.peer_id, kind=kind, height=height, view=view, body=body, signature=sig)


def update_leaves(updates: Sequence[UpdateCommitment]) -> list[bytes]:
    """Merkle leaves of a payload's update commitments: their canonical encodings, in payload order."""
    return [u.encode() for u in updates]


def make_header(
    *,
    chain_id: str,
    height: int,
    prev_hash: bytes,
    view: int,
    proposer: str,
    time_ms: int,
    payload: Payload,
    fl_round: int | None = None,
) -> BlockHeader:
    """Header for ``payload`` with the payload hash and the updates' Merkle root filled in."""
    return BlockHeader(
        chain_id=chain_id,
        height=height,
        prev_hash=prev_hash,
        fl_round=height if fl_round is None else fl_round,
        view=view,
        proposer=proposer,
        time_ms=time_ms,
        payload_hash=payload.hash(),
        updates_root=merkle_root(update_leaves(payload.updates)),
    )


def make_certificate(
    header: BlockHeader, signatures: Sequence[CommitSignature], *, view: int | None = None
) -> Certificate:
    """The certificate of ``header`` from COMMIT signatures cast in ``view`` (default: the header's view)."""
    return Certificate(
        height=header.height,
        view=header.view if view is None else view,
        block_hash=header.hash(),
        signatures=tuple(sorted(signatures, key=lambda s: s.signer)),
    )


# --- state and verification --------------------------------------------------------------------


class BlobSource(Protocol):
    """Read access to content-addressed blobs (the auditor's view of a blob store)."""

    def has(self, digest: bytes) -> bool: ...

    def get(self, digest: bytes) -> bytes:
        """The blob's bytes; raises :class:`BlobError` if missing or if its digest does not match."""
        ...


@dataclass(frozen=True, slots=True)
class ChainState:
    """What the chain says after block ``height`` (block 0 = genesis)."""

    height: int
    head_hash: bytes
    time_ms: int
    committee: tuple[str, ...]
    model_digest: bytes
    state_digest: bytes | None


@dataclass(frozen=True, slots=True)
class AuditFinding:
    """A signed input of a block that its stored blobs contradict, found by re-execution: a committee member's score
    row whose distances the updates do not give, or that names a blob nobody kept. The block itself follows the
    chain's rules (its decision re-executes from the rows as signed: the validators could not check the row), so
    the audit goes on past it; ``offender`` is the member who signed the input, ``reason`` says what is wrong."""

    height: int
    offender: str
    reason: str


class Reexecutor(Protocol):
    """Plug-in that re-executes a round from the stored blobs (scoring, selection, election, aggregation).

    It raises :class:`ReexecutionError` naming what differs. The ledger calls it after every structural
    check of the block passed, so it can trust signatures and links. It may return :class:`AuditFinding` items:
    signed inputs the blobs contradict in a block that is otherwise right (``audit_chain`` reports the first).
    """

    def reexecute(
        self, ctx: ChainContext, before: ChainState, block: Block, blobs: BlobSource
    ) -> Sequence[AuditFinding] | None: ...


_COMMITTEES_KEPT = 16
"""Committees a :class:`ChainContext` keeps worked out (:meth:`ChainContext.committee_view`)."""


class ChainContext:
    """Everything fixed by the genesis that block validation needs: members' keys and the rules."""

    def __init__(
        self, genesis: Genesis, *, signature_memo: int = 0, block_memo: int = 0, caches: Caches | None = None
    ) -> None:
        """``signature_memo``: successful verifications to remember (see :class:`PublicKeyCache`);
        ``block_memo``: structural :func:`apply_block` results to remember, keyed by the previous state and
        the block *object* (identical decoded objects are shared by a decode memo, e.g. in a simulation
        where many nodes verify one decided block), and for a skip (``epoch``) by the epoch too; a hit returns the
        state a past successful check gave. ``caches``: the driver's memos (:class:`Caches`), read by whatever
        works on this chain through this context (blob digests, committee samples); a private one if None."""
        self.genesis = genesis
        self.caches = caches if caches is not None else Caches()
        self.block_memo: OrderedDict[tuple[object, ...], tuple[Block | BlockHeader, ChainState]] | None = (
            OrderedDict() if block_memo > 0 else None
        )
        self.block_memo_max = block_memo
        self.chain_id = genesis.chain_id
        self.genesis_hash = genesis.hash()
        self.keys = PublicKeyCache(memo_max=signature_memo)
        for m in genesis.members:
            self.keys.add(m.peer_id, m.public_key)
        self.members = frozenset(genesis.member_ids)
        self.quorum_rule = genesis.protocol.quorum
        self._committees: OrderedDict[tuple[str, ...], tuple[tuple[str, ...], frozenset[str], int]] = OrderedDict()
        self.redraw_ticks = genesis.protocol.redraw_ticks
        """Ticks at one height before its replicas move to the next committee attempt (0: never)."""
        self._redrawn: OrderedDict[tuple[int, int], tuple[str, ...]] = OrderedDict()

    def quorum(self, committee_size: int) -> int:
        return quorum_size(committee_size, self.quorum_rule)

    def committee_view(self, committee: Sequence[str]) -> tuple[tuple[str, ...], frozenset[str], int]:
        """``committee`` sorted, as a set, and its quorum; the last few remembered (every replica sharing this
        context works them out for the same committee at each height: thousands of times in a simulation)."""
        key = tuple(committee)
        got = self._committees.get(key)
        if got is None:
            ordered = tuple(sorted(key))
            got = self._committees[key] = (ordered, frozenset(ordered), self.quorum(len(ordered)))
            while len(self._committees) > _COMMITTEES_KEPT:
                self._committees.popitem(last=False)
        return got

    def view_committee(self, state: ChainState, height: int, view: int) -> tuple[str, ...]:
        """The committee that decides ``height`` (``state.height + 1``, or a later height of its epoch) in ``view``:
        ``state.committee`` in attempt 0 (:data:`ATTEMPT_VIEWS`), else the ``committee_size`` members ranked first
        by ``H("concilium-redraw/v1" ‖ genesis hash ‖ height ‖ attempt)``, sorted: a pure function of the genesis,
        the height and the attempt, so that no member picks it. Raises :class:`ChainError` for an
        attempt ≥ 1 on a chain whose genesis has no ``redraw_ticks``."""
        a = view >> 32
        if a == 0:
            return state.committee
        if not self.redraw_ticks:
            raise ChainError(f"height {height}: view {view} is of committee attempt {a}, and this chain never "
                             f"re-draws a committee (its genesis has no protocol.params.{REDRAW_TICKS_KEY})")
        key = (height, a)
        got = self._redrawn.get(key)
        if got is None:
            got = self._redrawn[key] = redrawn_committee(self.genesis, height, a, genesis_hash=self.genesis_hash)
            while len(self._redrawn) > _COMMITTEES_KEPT:
                self._redrawn.popitem(last=False)
        return got


def genesis_state(ctx: ChainContext) -> ChainState:
    g = ctx.genesis
    return ChainState(
        height=0,
        head_hash=ctx.genesis_hash,
        time_ms=g.genesis_time_ms,
        committee=genesis_committee(g),
        model_digest=g.model.digest,
        state_digest=None,
    )


def block_time_window(genesis: Genesis, clock_ms: int) -> tuple[int, int]:
    """``(earliest, latest)``: the block times a validator whose clock reads ``clock_ms`` accepts in a fresh proposal,
    ``clock_ms ∓ (tick_ms + time_drift_ms)`` (the genesis' ``protocol.timeouts.tick_ms`` and
    ``protocol.time_drift_ms``). The tick is there because a node's clock counts whole ticks (``genesis_time_ms +
    tick × tick_ms``): two nodes whose clocks are just as right may read a tick apart. Not a chain rule: how far a
    validator's clock was from a block's time when it voted cannot be checked later (:func:`ledger.audit_chain`
    applies ``latest`` with the auditor's clock)."""
    p = genesis.protocol
    slack = p.timeouts.tick_ms + p.time_drift_ms
    return clock_ms - slack, clock_ms + slack


def _check(cond: bool, height: int, msg: str) -> None:
    if not cond:
        raise ChainError(f"height {height}: {msg}")


def check_certificate(
    ctx: ChainContext,
    committee: Sequence[str],
    header: BlockHeader,
    cert: Certificate,
    *,
    header_hash: bytes | None = None,
) -> None:
    """Raise unless ``cert`` holds a quorum of valid COMMIT signatures of ``committee`` over ``header``."""
    h = header.height
    if cert.height != h:
        raise ChainError(f"height {h}: certificate is for height {cert.height}")
    # pBFT §4.5.2: after a view change the highest prepared block is re-proposed *unchanged* (its header
    # keeps the view and proposer it was first proposed in) and committed by votes of the later view.
    if cert.view < header.view:
        raise ChainError(f"height {h}: certificate is for view {cert.view}, before the header's view {header.view}")
    if cert.block_hash != (header_hash or header.hash()):
        raise ChainError(f"height {h}: certificate signs a different block hash")
    cset = frozenset(committee)
    need = ctx.quorum(len(committee))
    if len(cert.signatures) < need:
        raise ChainError(
            f"height {h}: certificate has {len(cert.signatures)} signatures, quorum is {need} of {len(committee)} "
            f"({ctx.quorum_rule})"
        )
    msg = commit_sign_bytes(ctx.chain_id, h, cert.view, cert.block_hash)
    what = f"height {h}: commit signature"
    for s in cert.signatures:  # sorted and unique by construction (Certificate.__post_init__)
        if s.signer not in cset:
            raise SignatureError(f"height {h}: certificate signer {s.signer} is not in the committee")
        ctx.keys.verify(s.signer, s.signature, msg, what=what)


def check_evidence(ctx: ChainContext, height: int, ev: Evidence) -> None:
    """Structural and signature checks of one evidence item."""
    _check(ev.offender in ctx.members, height, f"evidence against non-member {ev.offender!r:.60}")
    _check(ev.height <= height, height, f"evidence from the future (height {ev.height})")
    for x in ev.exhibits:
        _check(x.signer == ev.offender, height, "evidence exhibit not signed by the offender")
        ctx.keys.verify(
            x.signer,
            x.signature,
            sign_bytes(ctx.chain_id, x.kind, x.height, x.view, x.body),
            what=f"height {height}: evidence exhibit",
        )
    if ev.kind == "equivocation":
        _check(len(ev.exhibits) == 2, height, "equivocation evidence needs exactly two exhibits")
        a, b = ev.exhibits
        _check(
            (a.kind, a.height, a.view) == (b.kind, b.height, b.view) == (a.kind, ev.height, ev.view),
            height,
            "equivocation exhibits are not for the same (kind, height, view)",
        )
        _check(encode(a.body) != encode(b.body), height, "equivocation exhibits are identical")


def apply_block(
    ctx: ChainContext,
    state: ChainState,
    block: Block,
    *,
    blobs: BlobSource | None = None,
    reexecutor: Reexecutor | None = None,
    digests: BlockDigests | None = None,
    epoch: int = 1,
) -> ChainState:
    """Validate ``block`` as the successor of ``state`` and return the new state.

    Checks, in order: chain id, height, hash link, time monotonic, proposer = primary of (height, view),
    payload hash, Merkle root, certificate against the committee of its votes' view (``state.committee``, or in a
    later committee attempt the re-drawn one: :meth:`ChainContext.view_committee`) with the genesis quorum rule,
    update commitments (members, round, signatures), next committee (members), evidence, blobs
    (when ``blobs`` is given), then re-execution (when ``reexecutor`` is given; what it returns, the
    :class:`AuditFinding` items, is for a caller that wraps it, as :func:`ledger.audit_chain` does).
    Raises a :class:`LedgerError` subclass naming the height and reason. ``digests`` (from
    :func:`decode_block`) saves recomputing the hashes of a block just decoded. ``epoch`` > 1: a block of a later
    height in the same committee epoch as ``state.height + 1`` is taken without the blocks between, as
    :func:`apply_header` takes a header (a follower's skip; an audit re-executes every block with ``epoch=1``).
    """
    # a skip exists only within a committee epoch (epoch > 1); with epoch 1 a block at another height is simply not
    # the successor, which _apply_block reports (a stored block whose header names another height: an audit's FAIL)
    skip = epoch if epoch > 1 and block.header.height != state.height + 1 else 0
    if skip and reexecutor is not None:
        raise ValueError("a re-executed block must be the successor of the state (no skip)")
    structural = blobs is None and reexecutor is None  # (only structural checks are remembered)
    hit = _remembered(ctx, state, block, skip_epoch=skip) if structural else None
    if hit is not None:
        return hit
    new_state = _apply_block(ctx, state, block, blobs=blobs, reexecutor=reexecutor, digests=digests, epoch=epoch)
    if structural:
        _remember(ctx, state, block, new_state, skip_epoch=skip)
    return new_state


def _memo_key(state: ChainState, checked: Block | BlockHeader, skip_epoch: int) -> tuple[object, ...]:
    """A successor check is keyed by (state, object); a skip also by its epoch, so that it never answers a successor
    check (which must refuse a block beyond ``state.height + 1``) nor a skip with another epoch."""
    return (state, id(checked)) if not skip_epoch else (state, id(checked), skip_epoch)


def _remembered(ctx: ChainContext, state: ChainState, checked: Block | BlockHeader, *,
                skip_epoch: int = 0) -> ChainState | None:
    """The state a past successful check of ``checked`` (this very object) after ``state`` gave, if remembered
    (``skip_epoch``: the epoch of a skip, 0 for a successor check)."""
    memo = ctx.block_memo
    hit = None if memo is None else memo.get(_memo_key(state, checked, skip_epoch))
    return hit[1] if hit is not None and hit[0] is checked else None


def _remember(ctx: ChainContext, state: ChainState, checked: Block | BlockHeader, new_state: ChainState, *,
              skip_epoch: int = 0) -> None:
    memo = ctx.block_memo
    if memo is not None:
        memo[_memo_key(state, checked, skip_epoch)] = (checked, new_state)  # keeps ``checked`` alive: its id stays unique
        while len(memo) > ctx.block_memo_max:
            memo.popitem(last=False)


def _check_next_committee(ctx: ChainContext, height: int, committee: Sequence[str]) -> None:
    for p in committee:
        if p not in ctx.members:
            raise ChainError(f"height {height}: next committee names non-member {p!r:.60}")


def _apply_block(
    ctx: ChainContext,
    state: ChainState,
    block: Block,
    *,
    blobs: BlobSource | None,
    reexecutor: Reexecutor | None,
    digests: BlockDigests | None,
    epoch: int = 1,
) -> ChainState:
    hd, pl = block.header, block.payload
    if digests is None:
        digests = BlockDigests(hd.hash(), pl.hash(), tuple(update_leaves(pl.updates)))
    _check_link(ctx, state, hd, epoch=epoch)
    h = hd.height  # state.height + 1, or a later height of its epoch (a skip)
    if hd.payload_hash != digests.payload_hash:
        raise ChainError(f"height {h}: payload hash mismatch")
    if hd.updates_root != merkle_root(digests.update_leaves):
        raise ChainError(f"height {h}: Merkle root of update commitments mismatch")
    # the votes' view names the committee that certified it (a block proposed in one attempt may be carried into a
    # later one by a view change and committed there)
    check_certificate(ctx, ctx.view_committee(state, h, block.certificate.view), hd, block.certificate,
                      header_hash=digests.header_hash)
    seen_updates: set[tuple[str, int]] = set()
    what_update = f"height {h}: update commitment"
    for u in pl.updates:
        if u.peer not in ctx.members:
            raise ChainError(f"height {h}: update from non-member {u.peer!r:.60}")
        # an update is stamped with the round whose model it started from: the current one, or an earlier one
        # for semi-synchronous algorithms (how old is allowed is the round rules' call, checked on re-execution)
        if not (1 <= u.fl_round <= hd.fl_round):
            raise ChainError(f"height {h}: update of {u.peer} is for round {u.fl_round}")
        if (u.peer, u.fl_round) in seen_updates:
            raise ChainError(f"height {h}: two updates of {u.peer} for round {u.fl_round}")
        seen_updates.add((u.peer, u.fl_round))
        ctx.keys.verify(
            u.peer,
            u.signature,
            update_sign_bytes(ctx.chain_id, u.peer, u.fl_round, u.digest, u.n_samples),
            what=what_update,
        )
    _check_next_committee(ctx, h, pl.next_committee)
    for x in pl.attestations:
        if x.height != h:
            raise ChainError(f"height {h}: attestation of {x.signer} is for height {x.height}")
        ctx.keys.verify(
            x.signer,
            x.signature,
            sign_bytes(ctx.chain_id, x.kind, x.height, x.view, x.body),
            what=f"height {h}: attestation",
        )
    for ev in pl.evidence:
        check_evidence(ctx, h, ev)
    if blobs is not None:
        refs = [(f"update of {u.peer}", u.digest) for u in pl.updates]
        refs.append(("model", pl.model_digest))
        if pl.state_digest is not None:
            refs.append(("algorithm state", pl.state_digest))
        for what, d in refs:
            try:
                blobs.get(d)
            except BlobError as e:
                raise BlobError(f"height {h}: {what} blob {d.hex()[:16]}…: {e}") from None
    new = ChainState(
        height=h,
        head_hash=digests.header_hash,
        time_ms=hd.time_ms,
        committee=pl.next_committee,
        model_digest=pl.model_digest,
        state_digest=pl.state_digest,
    )
    if reexecutor is not None:
        reexecutor.reexecute(ctx, state, block, blobs if blobs is not None else _NoBlobs())
    return new


def same_epoch(a: int, b: int, epoch: int) -> bool:
    """Are heights ``a`` and ``b`` in one committee epoch of ``epoch`` heights (heights ``kE+1 .. (k+1)E``)?"""
    return (a - 1) // epoch == (b - 1) // epoch


def _check_link(ctx: ChainContext, state: ChainState, hd: BlockHeader, *, epoch: int = 1) -> None:
    """The header's own rules as the successor of ``state``: chain id, height, hash link, round, time, proposer.

    With ``epoch`` > 1 the header may also be of a later height in the same committee epoch as ``state.height + 1``
    (a skip, see :func:`apply_header`): its hash link to ``state`` is then not checked, and its proposer is the
    primary of ``state.committee`` for its own height and view."""
    h = state.height + 1
    if hd.chain_id != ctx.chain_id:
        raise ChainError(f"height {h}: chain id {hd.chain_id!r:.60} is not {ctx.chain_id!r}")
    if epoch < 1:
        raise ValueError(f"epoch must be >= 1, got {epoch}")
    skip = hd.height > h and same_epoch(h, hd.height, epoch)
    if hd.height != h and not skip:
        raise ChainError(f"height {h}: expected height {h}, block says {hd.height} (missing or reordered block)")
    if not skip and hd.prev_hash != state.head_hash:
        raise ChainError(f"height {h}: prev_hash does not link to the previous block")
    if hd.fl_round != hd.height:
        raise ChainError(f"height {hd.height}: fl_round {hd.fl_round} differs from height")
    if hd.time_ms < state.time_ms:
        raise ChainError(f"height {hd.height}: time goes backwards ({hd.time_ms} < {state.time_ms})")
    expected = primary(ctx.view_committee(state, hd.height, hd.view), ctx.genesis_hash, hd.height, hd.view)
    if hd.proposer != expected:
        raise ChainError(f"height {hd.height}: proposer {hd.proposer} is not the primary {expected} of view {hd.view}")


def apply_header(
    ctx: ChainContext,
    state: ChainState,
    header: BlockHeader,
    certificate: Certificate,
    *,
    next_committee: tuple[str, ...],
    epoch: int = 1,
) -> ChainState:
    """Validate a decided block known by its header and certificate alone as the successor of ``state``, and
    return the state after it with what only the payload says left unknown: ``model_digest`` is ``b""`` and
    ``state_digest`` None. ``next_committee`` is the committee the block must name, where the round rules fix it
    from ``state`` alone (coordinator mode); the payload is not at hand to read it.

    Checks what :func:`apply_block` checks of the header and certificate: chain id, height, hash link, time,
    proposer, the certificate against the committee of its votes' view (:meth:`ChainContext.view_committee`). Not the
    payload: trusting its contents rests on the certificate, i.e. on a quorum of the committee having validated it
    (the same assumption under which any certified block is final). Such a state serves to follow the chain, and to
    check the next block, header or whole, against it; a member that needs the model or the payload takes the whole block instead. Raises a
    :class:`LedgerError` subclass naming the height and reason. Remembered like :func:`apply_block` (keyed by
    ``state`` and the header object).

    ``epoch`` > 1: the round rules fix one committee for each epoch of ``epoch`` heights (coordinator mode's
    ``committee_epoch``), so a header of a later height in the epoch of ``state.height + 1`` is certified by
    ``state.committee`` too, and is taken without the headers between (skipping verification, as a CometBFT light
    client skips from a trusted validator set to a header it signed): the safety of a certified block, at most
    ``f`` faulty members in the committee, is all that vouches for the heights skipped. The caller passes the
    ``next_committee`` that header must name. A skip is remembered apart from successor checks.
    """
    skip = epoch if header.height != state.height + 1 else 0
    hit = _remembered(ctx, state, header, skip_epoch=skip)
    if hit is not None:
        return hit
    _check_link(ctx, state, header, epoch=epoch)
    header_hash = header.hash()
    check_certificate(ctx, ctx.view_committee(state, header.height, certificate.view), header, certificate,
                      header_hash=header_hash)
    _check_next_committee(ctx, header.height, next_committee)
    new = ChainState(
        height=header.height,
        head_hash=header_hash,
        time_ms=header.time_ms,
        committee=tuple(next_committee),
        model_digest=b"",
        state_digest=None,
    )
    _remember(ctx, state, header, new, skip_epoch=skip)
    return new


@dataclass(frozen=True, slots=True)
class BlockDigests:
    """Hashes of a decoded block's parts, computed from its canonical bytes (no re-encoding)."""

    header_hash: bytes
    payload_hash: bytes
    update_leaves: tuple[bytes, ...]


def decode_block(data: bytes) -> tuple[Block, BlockDigests]:
    """Strictly decode a block and hash its parts from the canonical sub-trees.

    ``decode`` has already proven the tree canonical, so re-packing a sub-tree yields exactly its
    canonical bytes; this saves re-walking the block for each hash (the audit's hot path).
    """
    value = decode(data)
    block = Block.from_value(value)
    hv, pv = value["header"], value["payload"]
    digests = BlockDigests(
        header_hash=hash_tagged(b"concilium-header/v1", msgpack.packb(hv, use_bin_type=True)),
        payload_hash=hash_tagged(b"concilium-payload/v1", msgpack.packb(pv, use_bin_type=True)),
        update_leaves=tuple(msgpack.packb(u, use_bin_type=True) for u in pv["updates"]),
    )
    return block, digests


class _NoBlobs:
    def has(self, digest: bytes) -> bool:
        return False

    def get(self, digest: bytes) -> bytes:
        raise BlobError(f"blob {digest.hex()[:16]}… not available (no blob store given)")


def content_digest(data: bytes) -> bytes:
    """Digest of a blob = SHA-256 of its canonical bytes (docs/design.md, "Ledger")."""
    return sha256(data)
