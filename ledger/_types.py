"""Frozen wire and chain types: genesis, block header/payload, update commitments, certificates, evidence.

All types are :func:`ledger._encoding.record` dataclasses: ``x.encode()`` gives canonical bytes and
``T.decode(data)`` is strict. ``__post_init__`` checks what a single object can check on its own
(lengths, ranges, sorted unique lists) - CometBFT's ``ValidateBasic``. Checks that need the chain
(membership, signatures, quorum, links) live in :mod:`ledger._chain`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ledger._crypto import DIGEST_BYTES, PUBLIC_KEY_BYTES, SIGNATURE_BYTES, hash_tagged
from ledger._encoding import Record, encode, freeze, record, remembered

__all__ = [
    "CMFL_DISTANCE_FLOOR",
    "COORDINATOR_MODE",
    "COMMITTEE_MODE",
    "MODES",
    "QUORUM_RULES",
    "Block",
    "BlockHeader",
    "Certificate",
    "CommitSignature",
    "Evidence",
    "Genesis",
    "Member",
    "ModelSpec",
    "Payload",
    "ProtocolParams",
    "SignedMessage",
    "TIME_DRIFT_KEY",
    "TIME_DRIFT_MS_DEFAULT",
    "TIME_MS_MAX",
    "Timeouts",
    "UpdateCommitment",
    "time_drift_ms_of",
    "REDRAW_TICKS_KEY",
    "REDRAW_TICKS_MAX",
    "redraw_ticks_of",
]

COMMITTEE_MODE = "committee"
COORDINATOR_MODE = "coordinator"
MODES = (COMMITTEE_MODE, COORDINATOR_MODE)
QUORUM_RULES = ("bft", "majority")
CMFL_DISTANCE_FLOOR = 1e-300
"""The one floor on a CMFL score's distance sum (or median) before its reciprocal, eq. (8) of cmfl spec:
``P_k = C / max(Σ_c ‖ĝ_k − ĝ_c‖², floor)``. It lives here because both layers that score need it and may not
import each other (``consensus``, which ranks the clients written into blocks, and ``learning``'s reference
combination); both re-export it as ``DISTANCE_FLOOR``.

Why ``1e-300`` and not a "small" ``1e-12``: eq. (8) is defined for every positive sum (the paper assumes
``ĝ_k ≠ ĝ_c``); the floor only replaces the undefined ``1/0`` of identical updates (cmfl spec §8 item 5), so it
must change no positive sum that can occur. Squared distances of float32 updates are ``0`` or
``>= (2^-149)^2 ≈ 2e-90``, so ``1e-300`` leaves eq. (8) exact for every float32 input, while ``1e-12`` tied every
client within ``1e-6`` of the committee (``d = 1e-14`` and ``d = 0`` both scored ``C·1e12``, and the id tie-break
could rank the farther one first). ``C / 1e-300`` stays finite for any committee below ``1.7e8`` members."""

MEMBERS_MAX = 10_000
"""Upper bound on members in a genesis (bounds every per-block list too)."""
TIME_MS_MAX = 2**63 - 1
"""Latest block time (and genesis time), in ms since 1970: the largest signed 64-bit integer, what every other
system (SQLite, Java, Go, JSON tools) reads as a time in ms. The encoding alone allows up to ``2**64 - 1``."""
TIME_DRIFT_KEY = "time_drift_ms"
"""Reserved ``protocol.params`` key of :attr:`ProtocolParams.time_drift_ms`."""
TIME_DRIFT_MS_DEFAULT = 10_000
""":attr:`ProtocolParams.time_drift_ms` when the genesis does not set it: 10 s, the default ``max_clock_drift`` of
CometBFT's light client."""
TIME_DRIFT_MS_MAX = 10**9
EVIDENCE_MAX = 256
EXHIBITS_MAX = 8
NAME_BYTES_MAX = 128
TEXT_BYTES_MAX = 4096

_CHAIN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_KIND = re.compile(r"^[a-z][a-z0-9_./-]{0,63}$")


def _digest(name: str, v: bytes) -> None:
    if len(v) != DIGEST_BYTES:
        raise ValueError(f"{name} must be {DIGEST_BYTES} bytes, got {len(v)}")


def _nonneg(name: str, v: int) -> None:
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")


def _sorted_unique(name: str, items: tuple[Any, ...], key: Any = None) -> None:
    keys = [key(x) for x in items] if key else list(items)
    for a, b in zip(keys, keys[1:]):
        if not a < b:
            raise ValueError(f"{name} must be sorted and unique ({a!r} then {b!r})")


def _text(name: str, v: str, limit: int = NAME_BYTES_MAX) -> None:
    if len(v.encode()) > limit:
        raise ValueError(f"{name} longer than {limit} bytes")


def time_drift_ms_of(params: Mapping[str, Any]) -> int:
    """``params.time_drift_ms`` of a genesis' protocol (:attr:`ProtocolParams.time_drift_ms`), or its default when
    absent; raises ``ValueError`` unless it is an int in ``[1, 1e9]`` (ms: 11.6 days)."""
    drift = params.get(TIME_DRIFT_KEY, TIME_DRIFT_MS_DEFAULT)
    if type(drift) is not int or not 1 <= drift <= TIME_DRIFT_MS_MAX:
        raise ValueError(f"params.{TIME_DRIFT_KEY} must be an int in [1, 1e9] (ms), got {drift!r:.40}")
    return drift


REDRAW_TICKS_KEY = "redraw_ticks"
REDRAW_TICKS_MAX = 1 << 31
REDRAW_TIMEOUTS_DEFAULT = 10
"""Without ``params.redraw_ticks``, a height is re-drawn after this many times ``timeout_ticks_train +
timeout_ticks_propose + timeout_ticks_view_change`` (with the default timeouts 7,500 ticks: 12.5 minutes)."""


def redraw_ticks_of(params: Mapping[str, object], timeouts: "Timeouts") -> int:
    """After how many ticks at one height without a decision its replicas hand it to a re-drawn committee (the next
    committee attempt, ``ledger.ATTEMPT_VIEWS``): the genesis' ``protocol.params.redraw_ticks``, by
    default :data:`REDRAW_TIMEOUTS_DEFAULT` times the train, propose and view-change timeouts. ``0`` never: a
    committee that cannot reach quorum then stalls the chain until enough of its members come back, as in plain
    pBFT, which never forks (the trade-off: docs/sampling.md). Anything but an int in ``[0, 2^31]`` raises
    ``ValueError``."""
    if REDRAW_TICKS_KEY not in params:
        t = timeouts
        return min(REDRAW_TICKS_MAX, REDRAW_TIMEOUTS_DEFAULT * (
            t.timeout_ticks_train + t.timeout_ticks_propose + t.timeout_ticks_view_change))
    v = params[REDRAW_TICKS_KEY]
    if type(v) is not int or not 0 <= v <= REDRAW_TICKS_MAX:
        raise ValueError(f"protocol.params.{REDRAW_TICKS_KEY} must be an int in [0, {REDRAW_TICKS_MAX}], got {v!r}")
    return v


def _params(name: str, v: Mapping[str, Any]) -> Mapping[str, Any]:
    encode(dict(v))  # canonical? (raises TypeError/ValueError otherwise)
    return freeze(dict(sorted(v.items())))


# ---------------------------------------------------------------------------------------------
# Genesis
# ---------------------------------------------------------------------------------------------


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class Member(Record):
    """A network member: its libp2p peer id, Ed25519 public key, and optional display data."""

    peer_id: str
    public_key: bytes
    name: str = ""
    addrs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from ledger._crypto import peer_id_from_public_key

        if len(self.public_key) != PUBLIC_KEY_BYTES:
            raise ValueError(f"public_key must be {PUBLIC_KEY_BYTES} bytes, got {len(self.public_key)}")
        if peer_id_from_public_key(self.public_key) != self.peer_id:
            raise ValueError(f"peer_id {self.peer_id!r:.60} does not match its public key")
        _text("name", self.name)
        if len(self.addrs) > 16:
            raise ValueError("at most 16 addrs per member")
        for a in self.addrs:
            _text("addr", a, 256)


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts(Record):
    """Every protocol timeout, in ticks (logical time; ``tick_ms`` maps a tick to wall time at runtime)."""

    tick_ms: int = 100
    timeout_ticks_train: int = 600
    timeout_ticks_propose: int = 50
    timeout_ticks_prepare: int = 50
    timeout_ticks_commit: int = 50
    timeout_ticks_view_change: int = 100

    def __post_init__(self) -> None:
        for name in self._record_fields:
            v = getattr(self, name)
            if not 1 <= v <= 10**9:
                raise ValueError(f"{name} must be in [1, 1e9], got {v}")


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolParams(Record):
    """How rounds are run: mode, algorithm, committee size, quorum rule, timeouts, algorithm parameters.

    ``quorum = "bft"``: more than two thirds of the committee (``2f+1`` of ``3f+1``; safe with ``f``
    Byzantine members). ``quorum = "majority"``: the CMFL paper's ``⌊C/2⌋+1`` - **not Byzantine-safe**,
    available only to reproduce the paper.

    ``params`` also carries the reserved protocol keys: the round rules' (``node._rounds``) and
    ``time_drift_ms`` (:attr:`time_drift_ms`), checked here. A reserved key that is absent takes its default, so
    a genesis that leaves it out keeps its bytes and hash.
    """

    mode: str
    algorithm: str
    committee_size: int
    quorum: str = "bft"
    fl_rounds: int = 0
    timeouts: Timeouts = field(default_factory=Timeouts)
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r:.40}")
        if not _KIND.match(self.algorithm):
            raise ValueError(f"algorithm must be a lowercase name, got {self.algorithm!r:.40}")
        if not 1 <= self.committee_size <= MEMBERS_MAX:
            raise ValueError(f"committee_size must be in [1, {MEMBERS_MAX}], got {self.committee_size}")
        if self.quorum not in QUORUM_RULES:
            raise ValueError(f"quorum must be one of {', '.join(QUORUM_RULES)}, got {self.quorum!r:.40}")
        _nonneg("fl_rounds", self.fl_rounds)
        object.__setattr__(self, "params", _params("params", self.params))
        time_drift_ms_of(self.params)
        redraw_ticks_of(self.params, self.timeouts)

    @property
    def redraw_ticks(self) -> int:
        """Ticks at one height without a decision before its replicas hand it to a re-drawn committee
        (``params.redraw_ticks`` or its default, :func:`redraw_ticks_of`; 0: never). See ``ledger.ATTEMPT_VIEWS``."""
        return redraw_ticks_of(self.params, self.timeouts)

    @property
    def time_drift_ms(self) -> int:
        """How far from a validator's own clock a fresh proposal's block time may be, in ms:
        ``params.time_drift_ms``, default :data:`TIME_DRIFT_MS_DEFAULT` (10 s). A validator refuses a proposal whose
        ``time_ms`` is more than a tick plus this drift ahead of its clock or behind it
        (``ledger.block_time_window``), without accusing the proposer (clocks differ: that proves no fault); a
        block's time is also never before the previous block's, a chain rule. ``ledger verify`` bounds every block's
        time by the auditor's clock plus the same (``ledger.audit_chain``'s ``now_ms``)."""
        return time_drift_ms_of(self.params)


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec(Record):
    """The model everyone starts from: a registry name, its parameters, and the initial weights' digest."""

    name: str
    digest: bytes
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not _KIND.match(self.name):
            raise ValueError(f"model name must be a lowercase name, got {self.name!r:.40}")
        _digest("model digest", self.digest)
        object.__setattr__(self, "params", _params("params", self.params))


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class Genesis(Record):
    """Block 0: chain id, members, protocol, initial model. ``hash()`` is the genesis hash."""

    chain_id: str
    genesis_time_ms: int
    members: tuple[Member, ...]
    protocol: ProtocolParams
    model: ModelSpec
    version: int = 1

    def __post_init__(self) -> None:
        if not _CHAIN_ID.match(self.chain_id):
            raise ValueError(
                f"chain_id must be 1-64 characters of [A-Za-z0-9._-] starting alphanumeric, got {self.chain_id!r:.80}"
            )
        if not 0 <= self.genesis_time_ms <= TIME_MS_MAX:
            raise ValueError(f"genesis_time_ms must be in [0, 2^63 - 1], got {self.genesis_time_ms}")
        if self.version != 1:
            raise ValueError(f"unsupported genesis version {self.version}")
        if not 1 <= len(self.members) <= MEMBERS_MAX:
            raise ValueError(f"a genesis needs 1 to {MEMBERS_MAX} members, got {len(self.members)}")
        seen: dict[str, int] = {}
        for i, m in enumerate(self.members):
            if m.peer_id in seen:
                raise ValueError(f"duplicate member {m.peer_id} (members[{seen[m.peer_id]}] and members[{i}])")
            seen[m.peer_id] = i
        _sorted_unique("members (by peer_id)", self.members, key=lambda m: m.peer_id)
        if self.protocol.committee_size > len(self.members):
            raise ValueError(
                f"committee_size {self.protocol.committee_size} exceeds the number of members {len(self.members)}"
            )

    @remembered  # (a genesis lists every member: a simulation's of 10,000 takes 50 ms to encode)
    def hash(self) -> bytes:
        """The genesis hash: ``prev_hash`` of block 1."""
        return hash_tagged(b"concilium-genesis/v1", self.encode())

    def member(self, peer_id: str) -> Member | None:
        for m in self.members:
            if m.peer_id == peer_id:
                return m
        return None

    @property
    def member_ids(self) -> tuple[str, ...]:
        return tuple(m.peer_id for m in self.members)


# ---------------------------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------------------------


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class SignedMessage(Record):
    """Any signed protocol message: the signature covers ``sign_bytes(chain, kind, height, view, body)``.

    Used for evidence exhibits and for signed per-round records carried in a payload (e.g. a
    committee member's CMFL score vector).
    """

    signer: str
    kind: str
    height: int
    view: int
    body: Any
    signature: bytes

    def __post_init__(self) -> None:
        if not _KIND.match(self.kind):
            raise ValueError(f"kind must be a lowercase name, got {self.kind!r:.40}")
        _nonneg("height", self.height)
        _nonneg("view", self.view)
        if len(self.signature) != SIGNATURE_BYTES:
            raise ValueError(f"signature must be {SIGNATURE_BYTES} bytes")
        object.__setattr__(self, "body", freeze(self.body))


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateCommitment(Record):
    """A training client's signed statement: "my update for ``fl_round`` has digest D and n samples".

    The signature covers ``sign_bytes(chain, "update", fl_round, 0, {digest, n_samples, peer})``.
    """

    peer: str
    fl_round: int
    digest: bytes
    n_samples: int
    signature: bytes

    def __post_init__(self) -> None:
        _nonneg("fl_round", self.fl_round)
        _digest("update digest", self.digest)
        if not 0 <= self.n_samples < 2**53:
            raise ValueError(f"n_samples out of range: {self.n_samples}")
        if len(self.signature) != SIGNATURE_BYTES:
            raise ValueError(f"signature must be {SIGNATURE_BYTES} bytes")

    def signed_body(self) -> dict[str, Any]:
        return {"digest": self.digest, "n_samples": self.n_samples, "peer": self.peer}


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence(Record):
    """Signed proof of misbehaviour, carried in a later block.

    ``kind = "equivocation"``: two exhibits signed by ``offender`` with the same (kind, height, view) and
    different bodies (a double pre-prepare or double vote). Other kinds (``"invalid_proposal"``,
    ``"invalid_update"``) carry the offending signed message; their claim is checked by re-execution.
    """

    kind: str
    offender: str
    height: int
    view: int
    exhibits: tuple[SignedMessage, ...]
    reason: str = ""

    def __post_init__(self) -> None:
        if not _KIND.match(self.kind):
            raise ValueError(f"evidence kind must be a lowercase name, got {self.kind!r:.40}")
        _nonneg("height", self.height)
        _nonneg("view", self.view)
        if not 1 <= len(self.exhibits) <= EXHIBITS_MAX:
            raise ValueError(f"evidence needs 1 to {EXHIBITS_MAX} exhibits")
        _text("reason", self.reason, TEXT_BYTES_MAX)


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class Payload(Record):
    """What a round decided.

    * ``updates``: the accepted signed update commitments, sorted by peer (their Merkle root is in the
      header, so one update's inclusion is provable from the certified header alone);
    * ``model_digest``: digest of the new global model blob;
    * ``next_committee``: sorted peer ids of the committee that certifies the next block;
    * ``record``: the mode/algorithm's round record (scores, accepted set, weights, ...) - re-executed
      by the auditor's plug-in;
    * ``attestations``: signed per-round messages the record depends on (e.g. committee score rows);
    * ``state_digest``: digest of the algorithm state blob (MIFA table, control variates, ...), if any;
    * ``evidence``: misbehaviour proven since the previous block.
    """

    updates: tuple[UpdateCommitment, ...]
    model_digest: bytes
    next_committee: tuple[str, ...]
    record: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    attestations: tuple[SignedMessage, ...] = ()
    state_digest: bytes | None = None
    evidence: tuple[Evidence, ...] = ()

    def __post_init__(self) -> None:
        if len(self.updates) > MEMBERS_MAX:
            raise ValueError(f"more than {MEMBERS_MAX} updates")
        _sorted_unique("updates (by peer)", self.updates, key=lambda u: u.peer)
        _digest("model_digest", self.model_digest)
        if not 1 <= len(self.next_committee) <= MEMBERS_MAX:
            raise ValueError("next_committee must name 1 or more members")
        _sorted_unique("next_committee", self.next_committee)
        if len(self.attestations) > 4 * MEMBERS_MAX:
            raise ValueError("too many attestations")
        if self.state_digest is not None:
            _digest("state_digest", self.state_digest)
        if len(self.evidence) > EVIDENCE_MAX:
            raise ValueError(f"more than {EVIDENCE_MAX} evidence items")
        object.__setattr__(self, "record", _params("record", self.record))

    def hash(self) -> bytes:
        return hash_tagged(b"concilium-payload/v1", self.encode())


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class BlockHeader(Record):
    """The hashed part of a block. ``hash()`` is the block hash that commit votes sign.

    Departure from docs/design.md's header list: ``updates_root`` (Merkle root of the payload's update
    commitments) is in the header, as CometBFT puts ``DataHash`` there, so that an inclusion proof needs
    only the certified header, not the whole payload.
    """

    chain_id: str
    height: int
    prev_hash: bytes
    fl_round: int
    view: int
    proposer: str
    time_ms: int
    payload_hash: bytes
    updates_root: bytes

    def __post_init__(self) -> None:
        if self.height < 1:
            raise ValueError(f"block height must be >= 1, got {self.height}")
        _digest("prev_hash", self.prev_hash)
        _nonneg("fl_round", self.fl_round)
        _nonneg("view", self.view)
        if not 0 <= self.time_ms <= TIME_MS_MAX:  # bounded block time: 2^64 - 1 encodes, but no clock reads it
            raise ValueError(f"time_ms must be in [0, 2^63 - 1], got {self.time_ms}")
        _digest("payload_hash", self.payload_hash)
        _digest("updates_root", self.updates_root)

    def hash(self) -> bytes:
        return hash_tagged(b"concilium-header/v1", self.encode())


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class CommitSignature(Record):
    """One committee member's COMMIT vote: signs ``sign_bytes(chain, "commit", height, view, {block_hash})``."""

    signer: str
    signature: bytes

    def __post_init__(self) -> None:
        if len(self.signature) != SIGNATURE_BYTES:
            raise ValueError(f"signature must be {SIGNATURE_BYTES} bytes")


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class Certificate(Record):
    """The commit certificate of a block: a quorum of COMMIT signatures of the height's committee."""

    height: int
    view: int
    block_hash: bytes
    signatures: tuple[CommitSignature, ...]

    def __post_init__(self) -> None:
        _nonneg("height", self.height)
        _nonneg("view", self.view)
        _digest("block_hash", self.block_hash)
        if len(self.signatures) > MEMBERS_MAX:
            raise ValueError("too many signatures")
        _sorted_unique("certificate signatures (by signer)", self.signatures, key=lambda s: s.signer)


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class Block(Record):
    """A committed block: header, payload and the commit certificate over the header's hash."""

    header: BlockHeader
    payload: Payload
    certificate: Certificate

    @property
    def height(self) -> int:
        return self.header.height

    def hash(self) -> bytes:
        return self.header.hash()
