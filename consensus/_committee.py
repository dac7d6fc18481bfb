"""CMFL committee mechanism and committee/coordinator choice: pure functions over plain numbers.

CMFL (Che et al., "A Decentralized Federated Learning Framework via Committee Mechanism with Convergence
Guarantee", TPDS 2022): set sizes, scoring, selection and election, made deterministic. The learning layer
computes each committee member's squared distances ``d[c][k] = ‖Δ_k − Δ_c‖²`` (eq. 7's denominator);
the member signs them as a *score row*; this module combines the rows *included in the proposal*
(never a replica's private view) into scores, ranks, selects and elects, deterministically.

The paper [P] vs the authors' code [C], and the rule implemented here [R] where they differ or leave a choice:

* Score: eq. 8, ``P_k = C' / Σ_c d[c][k]`` (1 / mean squared distance over the ``C'`` rows that scored
  ``k``), or the hardened ``P_k = 1 / median_c d[c][k]`` (which a minority of rows cannot move). [C]'s sum of per-layer
  non-squared norms of *models* is not implemented. Sums are ``math.fsum`` (exactly rounded, so independent of order)
  in float64, floored at ``distance_floor`` (identical vectors: no ``1/0``).
* Selection I = the ``m`` highest scores, ties by id (key ``(−P, id)``); Selection II = the ``m`` lowest,
  key ``(P, id)`` ([R]; a reversed ranking, ``ranked[::-1][:m]``, would break ties by *descending* id).
* Election: the middle window ``ranked[(n−C)//2 : (n−C)//2 + C]`` of the ranking by score descending,
  whatever the selection strategy ([R]; [C] uses the reversed list under Selection II, one
  position lower when ``n − C`` is odd). ``n`` here is the number of clients actually scored; if fewer
  than ``C`` were scored the committee stays in office (a documented project rule: no rotation into a
  smaller committee).
* Sizes: ``N_act = round_half_up(act·K)``, ``C = round_half_up(ω·N_act)``, ``n = N_act − C``,
  ``m = max(1, round_half_up(α·n))`` ([R]; ``alpha_base="active"`` gives [C]'s ``α·N_act``), with
  ``round_half_up(x) = ⌊x + 0.5⌋`` (never Python's banker's ``round``); ``C ≤ n`` (ω ≤ 50 %).
* Training clients: ``n`` of the non-committee members, ranked by ``H(domain ‖ genesis_hash ‖ height ‖ id)``
  (verifiable by anyone, and unbiasable: nothing a proposer puts in a block feeds it; [P]/[C] draw
  them with a local ``random.sample``; ``docs/sampling.md``). The ``"draw"``
  sampling rule (:data:`SAMPLING_RULES`) draws them instead, in ``O(n)`` hashes rather than one per member.
* Equivocating training clients (two different signed digests for one round in two rows) are excluded
  and the pair of signed commitments is ledger evidence.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger import (
    CMFL_DISTANCE_FLOOR,
    Caches,
    ChainContext,
    Evidence,
    Genesis,
    KeyPair,
    Payload,
    SignatureError,
    SignedMessage,
    UpdateCommitment,
    encode,
    hash_tagged,
    primary,
    quorum_size,
    sign_bytes,
    update_sign_bytes,
)

from consensus._errors import CommitteeConfigError, RemoteProtocolError

__all__ = [
    "DISTANCE_FLOOR",
    "KIND_INVALID_SCORE_ROW",
    "KIND_SCORES",
    "SCORE_AGGREGATIONS",
    "STRATEGIES",
    "CmflDecision",
    "CmflParams",
    "CommitteeSizes",
    "ForgedScoreRow",
    "ScoreRow",
    "check_cmfl_payload",
    "cmfl_record",
    "combine_scores",
    "committee_sizes",
    "coordinator",
    "decide_round",
    "elect_committee",
    "election_window",
    "parse_score_row",
    "rank_clients",
    "round_half_up",
    "SAMPLING_RULES",
    "sample_committee",
    "score_row_blobs",
    "sample_training_clients",
    "select_clients",
    "sign_score_row",
    "update_equivocation_evidence",
    "verify_score_row",
]

STRATEGIES = ("I", "II")
SCORE_AGGREGATIONS = ("mean", "median")
KIND_SCORES = "cmfl_scores"
DISTANCE_FLOOR = CMFL_DISTANCE_FLOOR
"""The floor on the distance sum before the reciprocal of eq. 8 (``ledger.CMFL_DISTANCE_FLOOR``: the one
definition, shared with ``learning.DISTANCE_FLOOR``; why ``1e-300`` is explained there)."""


def round_half_up(x: float) -> int:
    """``⌊x + 0.5⌋`` - the authors' ``int(x + 0.5)`` for x ≥ 0 (not banker's rounding: 6.5 -> 7)."""
    return math.floor(x + 0.5)


# --- sizes (CMFL's rates) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitteeSizes:
    """Per-round set sizes: ``K`` members, ``N_act`` active, ``C`` committee, ``n`` training, ``m`` accepted."""

    members: int
    active: int
    committee: int
    training: int
    aggregation: int

    @property
    def f(self) -> int:
        """Byzantine committee members pBFT tolerates: ``⌊(C − 1)/3⌋``."""
        return (self.committee - 1) // 3


def _rate(name: str, v: float) -> None:
    if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= 1):
        raise CommitteeConfigError(f"{name} must be in (0, 1], got {v!r}")


def committee_sizes(
    members: int,
    *,
    active_rate: float = 0.1,
    committee_rate: float = 0.4,
    aggregation_rate: float = 0.4,
    alpha_base: str = "training",
) -> CommitteeSizes:
    """Set sizes from ``(K, act, ω, α)``, CMFL's member count and rates ([R] in the module docstring).

    Examples
    --------
    >>> committee_sizes(300)
    CommitteeSizes(members=300, active=30, committee=12, training=18, aggregation=7)
    """
    _rate("active_rate", active_rate)
    _rate("committee_rate", committee_rate)
    _rate("aggregation_rate", aggregation_rate)
    if alpha_base not in ("training", "active"):
        raise CommitteeConfigError(f"alpha_base must be 'training' or 'active', got {alpha_base!r}")
    if members < 1:
        raise CommitteeConfigError(f"need at least one member, got {members}")
    active = round_half_up(active_rate * members)
    c = round_half_up(committee_rate * active)
    n = active - c
    if c < 1:
        raise CommitteeConfigError(f"committee of {c}: {committee_rate=} of {active} active members")
    if c > n:
        raise CommitteeConfigError(
            f"committee {c} > training clients {n}: the election picks C of n, so ω must be <= 50 %"
        )
    m = max(1, round_half_up(aggregation_rate * (n if alpha_base == "training" else active)))
    if m > n:
        raise CommitteeConfigError(f"{m} aggregation clients out of {n} training clients")
    return CommitteeSizes(members=members, active=active, committee=c, training=n, aggregation=m)


@dataclass(frozen=True, slots=True, kw_only=True)
class CmflParams:
    """What a CMFL round needs to decide, agreed in the genesis (``protocol.params``).

    ``rows_min``: score rows a proposal must include, and rows that must score a client for it to be
    ranked ([R]: any ``q``, so a round does not wait for the ``C - q`` members that may be silent; paper mode: all
    ``C``).
    """

    committee_size: int
    training_size: int
    aggregation_size: int
    strategy: str = "I"
    score_aggregation: str = "mean"
    rows_min: int = 1
    distance_floor: float = DISTANCE_FLOOR

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise CommitteeConfigError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.score_aggregation not in SCORE_AGGREGATIONS:
            raise CommitteeConfigError(f"score_aggregation must be one of {SCORE_AGGREGATIONS}")
        if not 1 <= self.committee_size <= self.training_size:
            raise CommitteeConfigError(f"need 1 <= C <= n, got C={self.committee_size}, n={self.training_size}")
        if not 1 <= self.aggregation_size <= self.training_size:
            raise CommitteeConfigError(f"need 1 <= m <= n, got m={self.aggregation_size}, n={self.training_size}")
        if not 1 <= self.rows_min <= self.committee_size:
            raise CommitteeConfigError(f"rows_min must be in [1, C], got {self.rows_min}")
        if not (math.isfinite(self.distance_floor) and self.distance_floor > 0):
            raise CommitteeConfigError("distance_floor must be a positive finite float")

    @classmethod
    def from_genesis(cls, genesis: Genesis) -> CmflParams:
        """From ``protocol.committee_size`` and ``protocol.params``: ``active_rate`` (0.1),
        ``aggregation_rate`` (0.4), ``alpha_base``, ``strategy``, ``score_aggregation``, ``rows_min``
        (default: the quorum), or explicit ``training_size``/``aggregation_size``."""
        p = genesis.protocol
        prm = p.params
        c = p.committee_size
        k = len(genesis.members)
        n = prm.get("training_size")
        if n is None:
            n = round_half_up(float(prm.get("active_rate", 0.1)) * k) - c
        base = n if prm.get("alpha_base", "training") == "training" else n + c
        m = prm.get("aggregation_size")
        if m is None:
            m = max(1, round_half_up(float(prm.get("aggregation_rate", 0.4)) * base))
        return cls(
            committee_size=c,
            training_size=int(n),
            aggregation_size=int(m),
            strategy=str(prm.get("strategy", "I")),
            score_aggregation=str(prm.get("score_aggregation", "mean")),
            rows_min=int(prm.get("rows_min", quorum_size(c, p.quorum))),
        )


# --- who does what this round --------------------------------------------------------------------


SAMPLING_RULES = ("rank", "draw")
"""How :func:`sample_training_clients` and :func:`sample_committee` pick ``k`` of ``N`` members (both uniform,
both a pure function of the seed and the member ids, so every replica and the auditor get the same sample):

* ``"rank"`` (the default): every member ranked by ``H(domain ‖ seed ‖ id)``, the first ``k`` taken. One hash per
  member, ``O(N)`` per sample: 24-34 ms per sample at 10,000 members here (``benchmarks/sampling_rules.py``),
  twice per height.
* ``"draw"``: a Fisher-Yates shuffle of the sorted member ids, stopped after ``k`` picks that are not excluded,
  its ``j``-th swap index drawn from ``H(domain ‖ seed ‖ j ‖ attempt)`` by rejection (exactly uniform). ``O(k)``
  hashes and a dict of the swapped positions, whatever ``N``: what a network of many thousands of members
  wants (genesis ``protocol.params.sampling_rule``; ``node._rounds.sampling_rule_of``).

The two rules pick different members from the same seed: a chain keeps the rule of its genesis.
"""

_TRAINING_DOMAIN = b"concilium-cmfl-training/v1"
_COMMITTEE_DOMAIN = b"concilium-committee-sample/v1"
_DRAW_DOMAIN = b"/draw"  # appended to the rule's domain: the "draw" hashes never collide with the "rank" ones
_U64 = 1 << 64


_RANKINGS_KEPT = 256
"""Rankings a :class:`ledger.Caches` remembers: every node of a process (the simulator runs N) ranks the same pool
with the same seed each round."""
_POOLS_KEPT = 8
"""Member pools a :class:`ledger.Caches` remembers: a "draw" indexes one per member list, not one per sample."""


def _ranked_by_hash(domain: bytes, seed: bytes, peers: Sequence[str], caches: Caches | None) -> tuple[str, ...]:
    rank = _ranked if caches is None else caches.memo(_ranked, _RANKINGS_KEPT)
    return rank(domain, seed, tuple(peers))


def _ranked(domain: bytes, seed: bytes, peers: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(peers, key=lambda p: (hash_tagged(domain, seed + p.encode()), p)))


def _member_pool(members: tuple[str, ...]) -> tuple[tuple[str, ...], frozenset[str]]:
    # The sorted ids a "draw" indexes and their set.
    unique = frozenset(members)
    return tuple(sorted(unique)), unique


def _drawn(domain: bytes, seed: bytes, pool: tuple[str, ...], k: int, exclude: frozenset[str]) -> tuple[str, ...]:
    """The ``"draw"`` rule (:data:`SAMPLING_RULES`): ``k`` distinct members outside ``exclude``, sorted.

    A sparse Fisher-Yates shuffle over the sorted ids: step ``j`` swaps position ``j`` with ``j + u`` where ``u``
    is uniform in ``[0, N − j)``, from the first 8 bytes of ``H(domain/draw ‖ seed ‖ j ‖ attempt)`` (big-endian),
    an attempt rejected while that value is at or above the largest multiple of ``N − j`` below ``2^64`` (so no
    modulo bias). The member that lands at ``j`` is taken unless excluded; at most ``N`` steps, since a shuffle
    never repeats a member. ``pool`` is the sorted distinct member ids; the caller checks that ``k`` of them are
    eligible."""
    n = len(pool)
    tag = domain + _DRAW_DOMAIN
    moved: dict[int, int] = {}  # position -> index into pool, for the positions a swap has touched
    out: list[str] = []
    for j in range(n):
        if len(out) == k:
            break
        span = n - j
        limit = _U64 - _U64 % span
        attempt = 0
        while True:
            v = int.from_bytes(hash_tagged(tag, seed + struct.pack(">QI", j, attempt))[:8], "big")
            if v < limit:
                break
            attempt += 1
        r = j + v % span
        picked = moved.get(r, r)
        moved[r] = moved.get(j, j)
        member = pool[picked]
        if member not in exclude:
            out.append(member)
    return tuple(sorted(out))


def _sample(
    domain: bytes, seed: bytes, members: Sequence[str], exclude: Sequence[str], k: int, *, rule: str, least: int,
    what: Callable[[int], str], caches: Caches | None,
) -> tuple[str, ...]:
    """``k`` members outside ``exclude`` by ``rule`` (:data:`SAMPLING_RULES`), sorted; ``what(eligible)`` words the
    error when fewer than ``k`` (or ``k`` below ``least``) are eligible. ``caches`` remembers the rankings and
    pools (None: none remembered)."""
    if rule not in SAMPLING_RULES:
        raise CommitteeConfigError(f"unknown sampling rule {rule!r}; expected one of {', '.join(SAMPLING_RULES)}")
    if rule == "draw":
        pool_of = _member_pool if caches is None else caches.memo(_member_pool, _POOLS_KEPT)
        pool, unique = pool_of(tuple(members))
        excluded = frozenset(exclude)
        eligible = len(unique) - sum(1 for p in excluded if p in unique)
        if not least <= k <= eligible:
            raise CommitteeConfigError(what(eligible))
        return _drawn(domain, seed, pool, k, excluded)
    candidates = sorted(set(members) - set(exclude))
    if not least <= k <= len(candidates):
        raise CommitteeConfigError(what(len(candidates)))
    return tuple(sorted(_ranked_by_hash(domain, seed, candidates, caches)[:k]))


def sample_training_clients(
    members: Sequence[str], committee: Sequence[str], chain_seed: bytes, height: int, n: int, *, rule: str = "rank",
    caches: Caches | None = None,
) -> tuple[str, ...]:
    """``S_b^t``: ``n`` non-committee members drawn by a hash of ``chain_seed`` and the height (CMFL's random
    sample of clients, made verifiable: every replica and the auditor draw the same).

    ``chain_seed`` is the genesis hash (or a genesis ``sampling_seed``'s hash), never the previous block's hash,
    which a proposer could grind (try block contents until the sample suits it). The previous committee is eligible
    again at once ([C]). ``rule`` is one of :data:`SAMPLING_RULES`. Returns sorted ids. ``caches``: the driver's
    memos (:attr:`ledger.ChainContext.caches`), so that the nodes sharing them rank a pool once; the sample is the
    same without.
    """
    seed = chain_seed + struct.pack(">Q", height)
    return _sample(_TRAINING_DOMAIN, seed, members, committee, n, rule=rule, least=0,
                   what=lambda e: f"cannot sample {n} training clients from {e} non-committee members", caches=caches)


def sample_committee(
    members: Sequence[str], seed: bytes, size: int, *, exclude: Sequence[str] = (), rule: str = "rank",
    caches: Caches | None = None,
) -> tuple[str, ...]:
    """A committee of ``size`` members ranked by ``H(domain ‖ seed ‖ id)``, skipping ``exclude``.

    Coordinator mode's validators (docs/design.md: sampled with the round's unbiasable seed, a hash of the genesis and
    the height, or fixed per epoch; with ``committee_epoch`` the block that ends an epoch names the next one,
    ``node._rounds.RoundRules.next_committee_coordinator``). ``exclude`` holds members known not to be live
    (e.g. with evidence against them), so the coordinator - the primary of this committee - is always
    drawn from live members. ``rule`` is one of :data:`SAMPLING_RULES` (``"draw"`` draws instead of ranking).
    Returns sorted ids. ``caches`` as for :func:`sample_training_clients`.
    """
    return _sample(_COMMITTEE_DOMAIN, seed, members, exclude, size, rule=rule, least=1,
                   what=lambda e: f"cannot sample a committee of {size} from {e} members", caches=caches)


def coordinator(committee: Sequence[str], chain_seed: bytes, height: int, view: int) -> str:
    """The coordinator of (``height``, ``view``) in coordinator mode: the pBFT primary.

    ``committee[(PRF(chain_seed, height) + view) mod C]`` over the sorted committee, ``chain_seed`` the genesis hash
    (``ledger.primary``, which the ledger verifies as the block's proposer): deterministic, verifiable,
    and a view change moves to the next member.
    """
    return primary(committee, chain_seed, height, view)


# --- score rows (docs/design.md, committee mode step 4) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScoreRow:
    """A committee member's signed row for one round.

    ``distances[k] = ‖Δ_k − Δ_c‖²`` for each training client ``k`` the member scored; ``updates[k]`` is
    ``k``'s signed commitment the member scored (so digests can be cross-checked: two different ones are equivocation);
    ``reference`` is the digest of the member's own update.
    """

    member: str
    height: int
    distances: Mapping[str, float]
    updates: Mapping[str, UpdateCommitment]
    reference: bytes


def sign_score_row(
    key: KeyPair,
    chain_id: str,
    height: int,
    *,
    distances: Mapping[str, float],
    updates: Mapping[str, UpdateCommitment],
    reference: bytes,
) -> SignedMessage:
    """Sign a score row: ``SignedMessage(kind="cmfl_scores", height, view=0)`` for ``payload.attestations``."""
    if set(distances) != set(updates):
        raise ValueError("distances and updates must name the same clients")
    body = {
        "distances": {k: float(distances[k]) for k in sorted(distances)},
        "reference": reference,
        "updates": {k: (u.digest, u.n_samples, u.signature) for k, u in sorted(updates.items())},
    }
    sig = key.sign(sign_bytes(chain_id, KIND_SCORES, height, 0, body))
    return SignedMessage(signer=key.peer_id, kind=KIND_SCORES, height=height, view=0, body=body, signature=sig)


def _bad_row(detail: str) -> RemoteProtocolError:
    return RemoteProtocolError("bad_score_row", detail)


def parse_score_row(msg: SignedMessage) -> ScoreRow:
    """Stateless checks of a score row (signatures are the caller's: :func:`verify_score_row` does all of
    them); raises RemoteProtocolError."""
    if msg.kind != KIND_SCORES or msg.view != 0:
        raise _bad_row(f"not a score row: {msg.kind} view {msg.view}")
    body = msg.body
    if not isinstance(body, Mapping) or set(body) != {"distances", "reference", "updates"}:
        raise _bad_row("body must have exactly distances, reference, updates")
    d, ups, ref = body["distances"], body["updates"], body["reference"]
    if not isinstance(d, Mapping) or not isinstance(ups, Mapping) or set(d) != set(ups):
        raise _bad_row("distances and updates must be maps over the same clients")
    if type(ref) is not bytes or len(ref) != 32:
        raise _bad_row("reference must be a 32-byte digest")
    distances: dict[str, float] = {}
    updates: dict[str, UpdateCommitment] = {}
    for k in sorted(d):
        x = d[k]
        if type(x) is not float or not math.isfinite(x) or x < 0:  # (a NaN, an inf or a negative one breaks the ranking)
            raise _bad_row(f"distance of {k!r:.60} must be a finite float >= 0, got {x!r:.40}")
        distances[k] = x
        u = ups[k]
        if type(u) not in (tuple, list) or len(u) != 3:
            raise _bad_row(f"update of {k!r:.60} must be [digest, n_samples, signature]")
        try:
            updates[k] = UpdateCommitment(peer=k, fl_round=msg.height, digest=u[0], n_samples=u[1], signature=u[2])
        except (TypeError, ValueError) as e:
            raise _bad_row(f"update of {k!r:.60}: {e}") from None
    return ScoreRow(msg.signer, msg.height, distances, updates, ref)


def score_row_blobs(attestations: Sequence[SignedMessage]) -> tuple[tuple[str, str, bytes], ...]:
    """``(member, whose, digest)`` for every blob the score rows among ``attestations`` name: each row's
    reference (``whose`` = the member: its own update, what its distances are measured from) and each update
    it scored (``whose`` = the client). These are the blobs an audit needs to recompute every row, so a
    committed block's store keeps them all, not only the accepted updates (docs/design.md, "Ledger"). Rows that do
    not parse are skipped (a committed block's rows all parse); a digest named twice is listed once, for the
    first row (by member) that names it."""
    out: list[tuple[str, str, bytes]] = []
    seen: set[bytes] = set()
    rows = []
    for a in attestations:
        if a.kind != KIND_SCORES:
            continue
        try:
            rows.append(parse_score_row(a))
        except RemoteProtocolError:
            continue
    for r in sorted(rows, key=lambda r: r.member):
        for whose, digest in [(r.member, r.reference), *((k, u.digest) for k, u in sorted(r.updates.items()))]:
            if digest not in seen:
                seen.add(digest)
                out.append((r.member, whose, digest))
    return tuple(out)


KIND_INVALID_SCORE_ROW = "invalid_score_row"


class ForgedScoreRow(RemoteProtocolError):
    """A committee member signed a score row that no honest member signs: a malformed one, or one carrying an
    update commitment its client did not sign (e.g. the client's digest or ``n_samples`` changed, the client's
    old signature kept). Provable from the row alone, so it carries ledger ``evidence`` against the *member*
    (kind ``"invalid_score_row"``): the client whose commitment was altered is never blamed."""

    def __init__(self, evidence: Evidence) -> None:
        super().__init__("forged_score_row", evidence.reason)
        self.evidence = evidence


def verify_score_row(ctx: ChainContext, msg: SignedMessage) -> ScoreRow:
    """Every check of a score row: the member's signature, then :func:`parse_score_row`, then each update
    commitment it carries against the commitment's own signer (the client).

    Use it on every row before it counts: :func:`decide_round` trusts its rows. Raises
    ``ledger.SignatureError`` if the row's own signature does not hold (nothing is attributable then),
    :class:`ForgedScoreRow` (with evidence against the signer) if the signed row is malformed or carries a
    commitment that does not verify.
    """
    if msg.kind != KIND_SCORES:
        raise _bad_row(f"not a score row: {msg.kind!r:.40}")
    ctx.keys.verify(msg.signer, msg.signature, sign_bytes(ctx.chain_id, msg.kind, msg.height, msg.view, msg.body), what="score row")
    try:
        row = parse_score_row(msg)
    except RemoteProtocolError as e:
        raise ForgedScoreRow(_row_evidence(msg, f"malformed score row: {e}")) from None
    for k, u in row.updates.items():
        try:
            ctx.keys.verify(
                u.peer,
                u.signature,
                update_sign_bytes(ctx.chain_id, u.peer, u.fl_round, u.digest, u.n_samples),
                what=f"update commitment of {u.peer}",
            )
        except SignatureError:
            raise ForgedScoreRow(
                _row_evidence(msg, f"score row carries an update commitment of {k!r:.60} that {k!r:.60} did not sign")
            ) from None
    return row


def _row_evidence(msg: SignedMessage, reason: str) -> Evidence:
    return Evidence(
        kind=KIND_INVALID_SCORE_ROW,
        offender=msg.signer,
        height=msg.height,
        view=msg.view,
        exhibits=(msg,),
        reason=reason.encode()[:400].decode(errors="ignore"),
    )


# --- scores, selection, election (CMFL) ----------------------------------------------------------


def combine_scores(
    rows: Sequence[ScoreRow],
    clients: Sequence[str],
    *,
    method: str = "mean",
    rows_min: int = 1,
    distance_floor: float = DISTANCE_FLOOR,
) -> dict[str, float]:
    """Final scores ``P_k`` of the clients scored by at least ``rows_min`` of ``rows``.

    ``"mean"`` (eq. 8): ``P_k = C' / max(Σ_c d[c][k], floor)``, the harmonic mean of eq. 7's
    ``P_k^c = 1/d[c][k]`` over the ``C'`` rows that scored ``k``. ``"median"`` (hardened:
    a minority of rows cannot move it):
    ``P_k = 1 / max(median_c d[c][k], floor)`` (mean of the two middle values for even ``C'``).
    Higher = closer to the committee. Deterministic: exactly rounded sums, sorted medians, float64.
    """
    if method not in SCORE_AGGREGATIONS:
        raise CommitteeConfigError(f"score aggregation must be one of {SCORE_AGGREGATIONS}, got {method!r}")
    scores: dict[str, float] = {}
    for k in sorted(set(clients)):
        ds = [r.distances[k] for r in rows if k in r.distances]
        if len(ds) < rows_min or not ds:
            continue
        if method == "mean":
            scores[k] = len(ds) / max(math.fsum(ds), distance_floor)
        else:
            ds.sort()
            mid = len(ds) // 2
            med = ds[mid] if len(ds) % 2 else ds[mid - 1] / 2 + ds[mid] / 2
            scores[k] = 1.0 / max(med, distance_floor)
    return scores


def rank_clients(scores: Mapping[str, float]) -> tuple[str, ...]:
    """Clients by score descending, ties by id ascending: the one ranking every rule below uses."""
    return tuple(sorted(scores, key=lambda k: (-scores[k], k)))


def select_clients(scores: Mapping[str, float], m: int, strategy: str) -> tuple[str, ...]:
    """``S_a``: Selection I = the ``m`` highest scores (key ``(−P, id)``), II = the ``m`` lowest
    (key ``(P, id)``) [R]. Returns sorted ids."""
    if strategy == "I":
        order = sorted(scores, key=lambda k: (-scores[k], k))
    elif strategy == "II":
        order = sorted(scores, key=lambda k: (scores[k], k))
    else:
        raise CommitteeConfigError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    return tuple(sorted(order[: max(0, m)]))


def election_window(n: int, c: int) -> tuple[int, int]:
    """``[start, stop)`` of the elected committee in a ranking of ``n``: the middle ``c`` ([R]).

    ``start = (n − c) // 2`` equals [C]'s ``int(n/2 − c/2)`` for ``c <= n``.
    """
    if not 1 <= c <= n:
        raise CommitteeConfigError(f"cannot elect {c} of {n}")
    start = (n - c) // 2
    return start, start + c


def elect_committee(ranked: Sequence[str], c: int) -> tuple[str, ...]:
    """``S_c^{t+1}``: the middle window of the ranking by score descending ([R]). Sorted ids."""
    start, stop = election_window(len(ranked), c)
    return tuple(sorted(ranked[start:stop]))


@dataclass(frozen=True, slots=True, kw_only=True)
class CmflDecision:
    """What the committee decides from the score rows of a round."""

    scores: Mapping[str, float]
    ranked: tuple[str, ...]
    accepted: tuple[str, ...]
    """``S_a^t``, sorted."""
    next_committee: tuple[str, ...]
    """``S_c^{t+1}``, sorted."""
    excluded: tuple[str, ...]
    """Training clients not ranked: too few rows scored them, or they equivocated."""
    equivocations: tuple[tuple[UpdateCommitment, UpdateCommitment], ...]
    rows: tuple[str, ...]
    """Members whose rows were used, sorted."""


def decide_round(
    rows: Sequence[ScoreRow],
    *,
    training: Sequence[str],
    committee: Sequence[str],
    params: CmflParams,
) -> CmflDecision:
    """Scores, ``S_a^t`` and ``S_c^{t+1}`` from the score rows of a proposal: a pure function of them, so every
    replica and the auditor reach the same decision.

    ``rows`` must come from distinct committee members (RemoteProtocolError otherwise) and must have passed
    :func:`verify_score_row` (the member's signature and every client commitment's): two different
    commitments of one client in two rows are then the client's own equivocation, never a member's forgery.
    Deterministic for a given set of rows, whatever their order.
    """
    members = [r.member for r in rows]
    if len(set(members)) != len(members) or not set(members) <= set(committee):
        raise _bad_row("score rows must come from distinct committee members")
    if len(rows) < params.rows_min:
        raise _bad_row(f"{len(rows)} score rows, at least {params.rows_min} needed")
    train = sorted(set(training))
    conflicts: list[tuple[UpdateCommitment, UpdateCommitment]] = []
    clean: set[str] = set()
    for k in train:
        seen: dict[bytes, UpdateCommitment] = {}
        for r in sorted(rows, key=lambda r: r.member):
            u = r.updates.get(k)
            if u is not None:
                seen.setdefault(encode(u.signed_body()), u)
        if len(seen) > 1:
            a, b = (seen[x] for x in sorted(seen)[:2])
            conflicts.append((a, b))
        else:
            clean.add(k)
    scores = combine_scores(
        rows,
        sorted(clean),
        method=params.score_aggregation,
        rows_min=params.rows_min,
        distance_floor=params.distance_floor,
    )
    ranked = rank_clients(scores)
    accepted = select_clients(scores, min(params.aggregation_size, len(ranked)), params.strategy)
    if len(ranked) >= params.committee_size:
        nxt = elect_committee(ranked, params.committee_size)
    else:
        nxt = tuple(sorted(committee))  # too few clients scored: the committee stays in office
    return CmflDecision(
        scores=scores,
        ranked=ranked,
        accepted=accepted,
        next_committee=nxt,
        excluded=tuple(k for k in train if k not in scores),
        equivocations=tuple(conflicts),
        rows=tuple(sorted(members)),
    )


def update_equivocation_evidence(a: UpdateCommitment, b: UpdateCommitment) -> Evidence:
    """Ledger evidence that a training client signed two different updates for one round.

    An update commitment's signature covers ``sign_bytes(chain, "update", fl_round, 0, body)``, so
    each is a ``SignedMessage`` of kind ``"update"`` and the pair passes ``ledger.check_evidence``.
    """
    if a.peer != b.peer or a.fl_round != b.fl_round or a.signed_body() == b.signed_body():
        raise ValueError("not two different commitments of one client for one round")
    ex = sorted(
        (
            SignedMessage(signer=u.peer, kind="update", height=u.fl_round, view=0, body=u.signed_body(), signature=u.signature)
            for u in (a, b)
        ),
        key=lambda m: m.encode(),
    )
    return Evidence(
        kind="equivocation",
        offender=a.peer,
        height=a.fl_round,
        view=0,
        exhibits=tuple(ex),
        reason=f"two different update commitments for round {a.fl_round}",
    )


# --- the CMFL part of a proposal ---------------------------------------------------------------------


def cmfl_record(decision: CmflDecision, *, training: Sequence[str], params: CmflParams) -> dict[str, Any]:
    """``payload.record`` of a CMFL round; scores are re-derived from the rows, not stored."""
    return {
        "accepted": list(decision.accepted),
        "aggregation_size": params.aggregation_size,
        "excluded": list(decision.excluded),
        "rows": list(decision.rows),
        "score_aggregation": params.score_aggregation,
        "strategy": params.strategy,
        "training": sorted(training),
    }


def check_cmfl_payload(
    ctx: ChainContext,
    payload: Payload,
    *,
    height: int,
    committee: Sequence[str],
    training: Sequence[str],
    params: CmflParams,
) -> str | None:
    """Re-execute the committee decision of a proposal; ``None`` if it holds, else the reason.

    Checks the score rows in ``payload.attestations`` (signed by distinct committee members, for this
    height, each client commitment signed by its client), then that the record, the accepted updates and
    ``next_committee`` equal :func:`decide_round` on those rows. The aggregate (``model_digest``) is the
    node's to re-execute. Meant to be part of the node's ``validate``.
    """
    try:
        rows = []
        for a in payload.attestations:
            if a.kind != KIND_SCORES:
                continue
            if a.height != height:
                return f"score row of {a.signer} is for height {a.height}"
            rows.append(verify_score_row(ctx, a))
        decision = decide_round(rows, training=training, committee=committee, params=params)
    except (SignatureError, RemoteProtocolError) as e:
        return str(e)
    expected = cmfl_record(decision, training=training, params=params)
    if encode(payload.record) != encode(expected):
        return "the round record differs from re-execution of the score rows"
    if payload.next_committee != decision.next_committee:
        return "next committee differs from the election on the score rows"
    by_peer = {u.peer: u for u in payload.updates}
    if tuple(sorted(by_peer)) != decision.accepted:
        return "accepted updates differ from the selection on the score rows"
    for k, u in by_peer.items():
        scored = {encode(r.updates[k].signed_body()) for r in rows if k in r.updates}
        if scored != {encode(u.signed_body())}:
            return f"the accepted update of {k} is not the one the committee scored"
    return None
