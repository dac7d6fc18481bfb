"""pBFT wire messages: one envelope, signed bodies over canonical values, stateless parsing at the edge.

Every pBFT message is a :class:`ledger.SignedMessage` whose signature covers
``sign_bytes(chain_id, kind, height, view, body)`` over a canonical ``body``:

============== ============================================ ========================================
kind           body                                          travels with
============== ============================================ ========================================
``pre_prepare`` ``{"header": BlockHeader value}``             the proposal's ``Payload``
``prepare``     ``{"block_hash": H(header)}``                 —
``commit``      ``{"block_hash": H(header)}``                 —
``view_change`` ``{"prepared": None | {"pre_prepare": SM,     the prepared proposal's ``Payload``
                "prepares": [SM, ...]}}``
``new_view``    ``{"view_changes": [SM, ...],                 the re-proposed ``Payload``, if any
                "pre_prepare": SM | None}``
``sync_request`` ``{}`` (``height`` = the block wanted)        —
``header_sync_request`` ``{}`` (``height`` = the first header  —
                wanted)
``decided_header`` ``{"header": BlockHeader value,              —
                "certificate": Certificate value}``
============== ============================================ ========================================

(SM = a nested ``SignedMessage`` value.) Consequences:

* A COMMIT's signature *is* the ledger's certificate signature: ``commit_sign_bytes(chain, height,
  view, block_hash)`` with ``block_hash = header.hash()``, so a quorum of COMMITs becomes a
  :class:`ledger.Certificate` as is.
* Any two messages of one signer with the same (kind, height, view) and different bodies form ledger
  ``Evidence(kind="equivocation")`` as they are (``ledger.check_evidence``).
* The payload travels unsigned next to the signed header and is bound to it by ``payload_hash``.

A decided block (header, payload, certificate) travels as ``Message(block=...)``: it needs no
signature of the sender, its certificate proves it. ``decided_header`` announces a decided block
without its payload to a member that does not need the payload (outside the next round, in a mode
whose next committee follows from the header: ``Replica(next_committee=...)``); the certificate proves
the header, the sender's signature only names who sent it. ``header_sync_request`` asks a member for
``decided_header`` messages from a height on: a member that slept through heights without a role catches up
by headers (``Replica(lazy=True)``), not by whole blocks.

:func:`parse` is the stateless check (CometBFT's ``ValidateBasic``): shapes, kinds, heights, hashes and
payload binding. Everything that needs the chain (membership, signatures, quorum, the primary of a
view) is checked by the replica.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ledger import (
    KIND_COMMIT,
    Block,
    BlockHeader,
    Certificate,
    DecodeError,
    KeyPair,
    Payload,
    SignedMessage,
    remembered,
    sign_bytes,
)
from ledger import Record
from ledger import record as _record

from consensus._errors import RemoteProtocolError

__all__ = [
    "KIND_COMMIT",
    "KIND_HEADER",
    "KIND_HEADER_SYNC",
    "KIND_NEW_VIEW",
    "KIND_PREPARE",
    "KIND_PRE_PREPARE",
    "KIND_SYNC",
    "KIND_VIEW_CHANGE",
    "MESSAGE_BYTES_MAX",
    "PBFT_KINDS",
    "Decided",
    "DecidedHeader",
    "Message",
    "NewView",
    "Parsed",
    "PrePrepare",
    "PreparedProof",
    "Proposal",
    "SyncRequest",
    "ViewChange",
    "Vote",
    "decided_header_message",
    "header_sync_request_message",
    "decided_message",
    "new_view_message",
    "parse",
    "parse_proposal",
    "pre_prepare_message",
    "sign_signed",
    "sync_request_message",
    "view_change_message",
    "vote_message",
]

KIND_PRE_PREPARE = "pre_prepare"
KIND_PREPARE = "prepare"
KIND_VIEW_CHANGE = "view_change"
KIND_NEW_VIEW = "new_view"
KIND_SYNC = "sync_request"
KIND_HEADER = "decided_header"
KIND_HEADER_SYNC = "header_sync_request"
PBFT_KINDS = (KIND_PRE_PREPARE, KIND_PREPARE, KIND_COMMIT, KIND_VIEW_CHANGE, KIND_NEW_VIEW)
"""Kinds that are votes: at most one body per (signer, kind, height, view), else equivocation."""

MESSAGE_BYTES_MAX = 32 << 20
"""Largest encoded :class:`Message` a replica should decode (``Message.decode(data, bytes_max=...)``)."""

_EMBEDDED_MAX = 10_000  # ledger.MEMBERS_MAX: no list in a message can name more signers than members


@_record
@dataclass(frozen=True, slots=True, kw_only=True)
class Message(Record):
    """The one wire type between replicas: a signed pBFT message (with its payload), or a decided block.

    ``encode()`` gives canonical bytes; ``Message.decode(data, bytes_max=MESSAGE_BYTES_MAX)`` is strict.
    :meth:`validate` is the stateless check to run at the edge; the replica runs it again.
    """

    signed: SignedMessage | None = None
    payload: Payload | None = None
    block: Block | None = None

    @property
    def kind(self) -> str:
        """The signed kind, or ``"decided"`` for a decided block."""
        return self.signed.kind if self.signed is not None else "decided"

    def validate(self) -> None:
        """Raise :class:`RemoteProtocolError` (reason ``"malformed"``) unless the message is well formed."""
        parse(self)


@dataclass(frozen=True, slots=True)
class Proposal:
    """What the primary proposes and ``validate`` judges: a block header and its payload."""

    header: BlockHeader
    payload: Payload

    @property
    def block_hash(self) -> bytes:
        return self.header.hash()


# --- parsed forms (not on the wire) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PrePrepare:
    """PRE-PREPARE(height, view, header) [pBFT §4.2]; ``payload`` is None when embedded in a proof."""

    signed: SignedMessage
    header: BlockHeader
    block_hash: bytes
    payload: Payload | None


@dataclass(frozen=True, slots=True)
class Vote:
    """PREPARE or COMMIT(height, view, block_hash) [pBFT §4.2]."""

    signed: SignedMessage
    block_hash: bytes


@dataclass(frozen=True, slots=True)
class PreparedProof:
    """A prepared certificate [pBFT §4.4]: the pre-prepare of view ``w`` and matching PREPAREs."""

    pre_prepare: PrePrepare
    prepares: tuple[SignedMessage, ...]

    @property
    def view(self) -> int:
        return self.pre_prepare.signed.view

    def to_value(self) -> dict[str, Any]:
        return {
            "pre_prepare": self.pre_prepare.signed.to_value(),
            "prepares": [p.to_value() for p in self.prepares],
        }


@dataclass(frozen=True, slots=True)
class ViewChange:
    """VIEW-CHANGE(height, view, prepared) [pBFT §4.5.2]; ``view`` is the view being moved to."""

    signed: SignedMessage
    prepared: PreparedProof | None
    payload: Payload | None


@dataclass(frozen=True, slots=True)
class NewView:
    """NEW-VIEW(height, view, V, O) [pBFT §4.5.2]: the view changes and the re-proposal, if any."""

    signed: SignedMessage
    view_changes: tuple[ViewChange, ...]
    pre_prepare: PrePrepare | None


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """A member asks for the decided block of ``signed.height`` and those after it (``sync_request``), or for
    their headers and certificates alone (``headers``: ``header_sync_request``)."""

    signed: SignedMessage
    headers: bool = False


@dataclass(frozen=True, slots=True)
class Decided:
    """A decided block, with its commit certificate."""

    block: Block


@dataclass(frozen=True, slots=True)
class DecidedHeader:
    """A decided block's header and commit certificate, without the payload (``decided_header``)."""

    signed: SignedMessage
    header: BlockHeader
    certificate: Certificate
    block_hash: bytes


Parsed = PrePrepare | Vote | ViewChange | NewView | SyncRequest | Decided | DecidedHeader


# --- stateless parsing ---------------------------------------------------------------------------


def _malformed(detail: str) -> RemoteProtocolError:
    return RemoteProtocolError("malformed", detail)


def _thaw(v: Any) -> Any:
    """Frozen canonical value -> the plain dict/tuple form that ``T.from_value`` expects."""
    if type(v) is dict or type(v) is MappingProxyType:
        return {k: _thaw(x) for k, x in v.items()}
    if type(v) is tuple or type(v) is list:
        return tuple(_thaw(x) for x in v)
    return v


def _body(signed: SignedMessage, keys: frozenset[str]) -> Mapping[str, Any]:
    body = signed.body
    if not isinstance(body, Mapping) or frozenset(body) != keys:
        raise _malformed(f"{signed.kind} body must have exactly the keys {sorted(keys)}")
    return body


def _digest(v: Any, what: str) -> bytes:
    if type(v) is not bytes or len(v) != 32:
        raise _malformed(f"{what} must be 32 bytes")
    return v


def _signed(v: Any, what: str) -> SignedMessage:
    try:
        return SignedMessage.from_value(_thaw(v))
    except DecodeError as e:
        raise _malformed(f"{what}: {e}") from None


def _check_payload(header: BlockHeader, payload: Payload | None, what: str) -> None:
    if payload is None:
        raise _malformed(f"{what} without its payload")
    if payload.hash() != header.payload_hash:
        raise _malformed(f"{what}: payload does not match the header's payload_hash")


def _pre_prepare(signed: SignedMessage, payload: Payload | None, *, need_payload: bool) -> PrePrepare:
    if signed.kind != KIND_PRE_PREPARE:
        raise _malformed(f"expected a pre_prepare, got {signed.kind}")
    body = _body(signed, frozenset({"header"}))
    try:
        header = BlockHeader.from_value(_thaw(body["header"]))
    except DecodeError as e:
        raise _malformed(f"pre_prepare header: {e}") from None
    if header.height != signed.height:
        raise _malformed(f"pre_prepare for height {signed.height} carries a header of height {header.height}")
    if header.view > signed.view:
        raise _malformed(f"pre_prepare of view {signed.view} carries a header of the later view {header.view}")
    if need_payload:
        _check_payload(header, payload, "pre_prepare")
    return PrePrepare(signed, header, header.hash(), payload if need_payload else None)


def _vote(signed: SignedMessage) -> Vote:
    body = _body(signed, frozenset({"block_hash"}))
    return Vote(signed, _digest(body["block_hash"], f"{signed.kind} block_hash"))


def _prepared(v: Any, height: int, view: int) -> PreparedProof:
    if not isinstance(v, Mapping) or frozenset(v) != {"pre_prepare", "prepares"}:
        raise _malformed("prepared proof must have exactly the keys pre_prepare, prepares")
    pp = _pre_prepare(_signed(v["pre_prepare"], "prepared pre_prepare"), None, need_payload=False)
    w = pp.signed.view
    if pp.signed.height != height or w >= view:
        raise _malformed(f"prepared proof for ({pp.signed.height}, {w}) in a view change to ({height}, {view})")
    raw = v["prepares"]
    if type(raw) is not tuple or len(raw) > _EMBEDDED_MAX:
        raise _malformed("prepared proof: prepares must be a list")
    prepares = tuple(_signed(p, "prepared prepare") for p in raw)
    last = ""
    for p in prepares:
        if p.kind != KIND_PREPARE or p.height != height or p.view != w:
            raise _malformed("prepared proof: prepares must be PREPAREs of the proof's height and view")
        if _vote(p).block_hash != pp.block_hash:
            raise _malformed("prepared proof: a prepare is for another block")
        if not p.signer > last:
            raise _malformed("prepared proof: prepares must be sorted by signer and unique")
        if p.signer == pp.signed.signer:
            raise _malformed("prepared proof: the primary's vote is its pre_prepare, not a prepare")
        last = p.signer
    return PreparedProof(pp, prepares)


def _view_change(signed: SignedMessage, payload: Payload | None, *, need_payload: bool) -> ViewChange:
    if signed.kind != KIND_VIEW_CHANGE:
        raise _malformed(f"expected a view_change, got {signed.kind}")
    if signed.view < 1:
        raise _malformed("view_change to view 0")
    body = _body(signed, frozenset({"prepared"}))
    prepared = None if body["prepared"] is None else _prepared(body["prepared"], signed.height, signed.view)
    if need_payload:
        if prepared is None:
            if payload is not None:
                raise _malformed("view_change without a prepared proof carries a payload")
        else:
            _check_payload(prepared.pre_prepare.header, payload, "view_change")
    return ViewChange(signed, prepared, payload if need_payload else None)


def _new_view(signed: SignedMessage, payload: Payload | None) -> NewView:
    if signed.view < 1:
        raise _malformed("new_view for view 0")
    body = _body(signed, frozenset({"pre_prepare", "view_changes"}))
    raw = body["view_changes"]
    if type(raw) is not tuple or len(raw) > _EMBEDDED_MAX:
        raise _malformed("new_view: view_changes must be a list")
    vcs = tuple(_view_change(_signed(x, "new_view view_change"), None, need_payload=False) for x in raw)
    last = ""
    for vc in vcs:
        if vc.signed.height != signed.height or vc.signed.view != signed.view:
            raise _malformed("new_view: a view_change is for another height or view")
        if not vc.signed.signer > last:
            raise _malformed("new_view: view_changes must be sorted by signer and unique")
        last = vc.signed.signer
    pp = None
    if body["pre_prepare"] is not None:
        pp = _pre_prepare(_signed(body["pre_prepare"], "new_view pre_prepare"), payload, need_payload=True)
        if (pp.signed.signer, pp.signed.height, pp.signed.view) != (signed.signer, signed.height, signed.view):
            raise _malformed("new_view: the re-proposal must be the new primary's pre_prepare of the new view")
    elif payload is not None:
        raise _malformed("new_view without a re-proposal carries a payload")
    return NewView(signed, vcs, pp)


def parse(message: Message) -> Parsed:
    """Stateless validation; returns the typed form or raises :class:`RemoteProtocolError` ("malformed")."""
    if not isinstance(message, Message):
        raise _malformed(f"not a consensus Message: {type(message).__name__}")
    if message.block is not None:
        if message.signed is not None or message.payload is not None:
            raise _malformed("a decided block travels alone")
        return Decided(message.block)
    signed = message.signed
    if signed is None:
        raise _malformed("empty message")
    if signed.height < 1:
        raise _malformed("consensus messages are for heights >= 1")
    kind = signed.kind
    if kind in (KIND_PREPARE, KIND_COMMIT, KIND_SYNC, KIND_HEADER_SYNC, KIND_HEADER) and message.payload is not None:
        raise _malformed(f"{kind} carries no payload")
    if kind == KIND_PRE_PREPARE:
        return _pre_prepare(signed, message.payload, need_payload=True)
    if kind in (KIND_PREPARE, KIND_COMMIT):
        return _vote(signed)
    if kind == KIND_VIEW_CHANGE:
        return _view_change(signed, message.payload, need_payload=True)
    if kind == KIND_NEW_VIEW:
        return _new_view(signed, message.payload)
    if kind in (KIND_SYNC, KIND_HEADER_SYNC):
        _body(signed, frozenset())
        if signed.view != 0:
            raise _malformed(f"{kind} has view 0")
        return SyncRequest(signed, headers=kind == KIND_HEADER_SYNC)
    if kind == KIND_HEADER:
        return _decided_header(signed)
    raise _malformed(f"unknown message kind {kind!r:.40}")


def parse_proposal(message: Message) -> Proposal:
    """The proposal of a pre-prepare message (its payload matching the header's ``payload_hash``, the header of the
    message's height and of at most its view), or :class:`RemoteProtocolError`. Stateless: not the signature."""
    pp = parse(message)
    if not isinstance(pp, PrePrepare) or pp.payload is None:
        raise _malformed("not a pre_prepare")
    return Proposal(header=pp.header, payload=pp.payload)


@remembered
def _decided_header(signed: SignedMessage) -> DecidedHeader:
    """A parsed ``decided_header`` message is remembered on its (immutable, decoded) signed part: thousands of
    members of a simulation receive one announcement, decoded once (``node.EnvelopeDecoder``), and the members that
    catch up from one sender are sent the same signed headers, over as many heights as they slept
    (``Replica(lazy=True)``: about members / clients heights each)."""
    return _parse_decided_header(signed)


def _parse_decided_header(signed: SignedMessage) -> DecidedHeader:
    body = _body(signed, frozenset({"header", "certificate"}))
    try:
        header = BlockHeader.from_value(_thaw(body["header"]))
        cert = Certificate.from_value(_thaw(body["certificate"]))
    except DecodeError as e:
        raise _malformed(f"decided_header: {e}") from None
    if header.height != signed.height or cert.height != header.height:
        raise _malformed(f"decided_header for height {signed.height}: header {header.height}, certificate {cert.height}")
    if signed.view != cert.view:
        raise _malformed(f"decided_header of view {signed.view} carries a certificate of view {cert.view}")
    bh = header.hash()
    if cert.block_hash != bh:
        raise _malformed("decided_header: the certificate is for another block")
    return DecidedHeader(signed, header, cert, bh)


# --- constructors --------------------------------------------------------------------------------


def sign_signed(key: KeyPair, chain_id: str, kind: str, height: int, view: int, body: Any) -> SignedMessage:
    """A :class:`SignedMessage` over ``sign_bytes(chain_id, kind, height, view, body)``."""
    sig = key.sign(sign_bytes(chain_id, kind, height, view, body))
    return SignedMessage(signer=key.peer_id, kind=kind, height=height, view=view, body=body, signature=sig)


def pre_prepare_message(
    key: KeyPair, chain_id: str, height: int, view: int, header: BlockHeader, payload: Payload
) -> Message:
    body = {"header": header.to_value()}
    return Message(signed=sign_signed(key, chain_id, KIND_PRE_PREPARE, height, view, body), payload=payload)


def vote_message(key: KeyPair, chain_id: str, kind: str, height: int, view: int, block_hash: bytes) -> Message:
    """PREPARE or COMMIT. A COMMIT signs exactly ``ledger.commit_sign_bytes(chain, height, view, block_hash)``."""
    if kind not in (KIND_PREPARE, KIND_COMMIT):
        raise ValueError(f"not a vote kind: {kind}")
    return Message(signed=sign_signed(key, chain_id, kind, height, view, {"block_hash": block_hash}))


def view_change_message(
    key: KeyPair, chain_id: str, height: int, view: int, prepared: PreparedProof | None, payload: Payload | None
) -> Message:
    body = {"prepared": None if prepared is None else prepared.to_value()}
    return Message(
        signed=sign_signed(key, chain_id, KIND_VIEW_CHANGE, height, view, body),
        payload=payload if prepared is not None else None,
    )


def new_view_message(
    key: KeyPair,
    chain_id: str,
    height: int,
    view: int,
    view_changes: Sequence[SignedMessage],
    pre_prepare: SignedMessage | None,
    payload: Payload | None,
) -> Message:
    body = {
        "view_changes": [vc.to_value() for vc in sorted(view_changes, key=lambda m: m.signer)],
        "pre_prepare": None if pre_prepare is None else pre_prepare.to_value(),
    }
    return Message(
        signed=sign_signed(key, chain_id, KIND_NEW_VIEW, height, view, body),
        payload=payload if pre_prepare is not None else None,
    )


def sync_request_message(key: KeyPair, chain_id: str, height: int) -> Message:
    return Message(signed=sign_signed(key, chain_id, KIND_SYNC, height, 0, {}))


def header_sync_request_message(key: KeyPair, chain_id: str, height: int) -> Message:
    """Ask for the decided headers (and certificates) from ``height`` on (``header_sync_request``)."""
    return Message(signed=sign_signed(key, chain_id, KIND_HEADER_SYNC, height, 0, {}))


def decided_message(block: Block) -> Message:
    return Message(block=block)


def decided_header_message(
    key: KeyPair, chain_id: str, block: Block | None = None, *, header: BlockHeader | None = None,
    certificate: Certificate | None = None,
) -> Message:
    """A decided block announced without its payload (``decided_header``), signed by the sender ``key``: ``block``'s
    header and certificate, or ``header`` and ``certificate`` given alone (a member that followed by headers)."""
    if block is not None:
        header, certificate = block.header, block.certificate
    if header is None or certificate is None:
        raise ValueError("decided_header_message needs a block, or a header and its certificate")
    body = {"header": header.to_value(), "certificate": certificate.to_value()}
    return Message(signed=sign_signed(key, chain_id, KIND_HEADER, header.height, certificate.view, body))
