"""What peers send each other: one canonical, strictly decoded envelope per message.

======================= =================================================== ==========================
field set               meaning                                             sent by → to
======================= =================================================== ==========================
``update``              a signed update commitment and its tensor blob      training client → committee
``scores``              a signed CMFL score row (``cmfl_scores``)           committee member → committee
``pbft``                a consensus message (pre-prepare, votes, decided)   replica → replicas
``want``                digests of blobs the sender is missing              anyone → a peer that has them
``have``                signed update commitments the sender holds          validator → the primary
``refused``             a pre-prepare (with payload) the sender refused     validator → validators
                        with proof
``blobs``               blobs (answers to ``want``; the new model on commit) any → any
======================= =================================================== ==========================

Exactly one of them is set. :meth:`Envelope.decode` is strict and bounded (``ENVELOPE_BYTES_MAX``); the
receiver checks every signature, digest, shape and membership itself (``node.core``).

Decoding a peer's bytes (:func:`decode_envelope`, and :class:`EnvelopeDecoder`, which memoizes it) is bounded in what it
builds, before anything is built (a small frame must not make a node hold many times its size): the canonical encoding
of an envelope starts with one of seven prefixes that tell its field (:func:`envelope_kind`, a few byte comparisons),
and the field sets the budget of ``ledger.decode`` (``ledger._encoding.scan``: items and the bytes of the objects
msgpack would build, refused before building them):

* ``update``, ``blobs``, ``want``: a few maps around byte strings: at most :data:`FIXED_ITEMS_MAX` items, and
  objects of the frame's size plus :data:`BUDGET_SLACK` bytes;
* ``pbft``, ``scores``, ``have``, ``refused``: at most :data:`MSG_ENVELOPE_BYTES_MAX` bytes (the transport's cap of their protocol),
  one item per :data:`MSG_BYTES_PER_ITEM` bytes and objects of :data:`MSG_COST_PER_BYTE` times the frame's size,
  plus :data:`BUDGET_SLACK` (an envelope of an honest run takes under half of either, blocks of 100 commitments
  included: ``tests/node/test_unasked_data.py``; the estimate is an upper bound of what msgpack builds, and the
  records built from it take about as much again).

A frame built to blow up (16 MiB of empty maps: 1.3 GiB and 3.4-7.8 s of CPU before) is refused having built
nothing, after at most its budget of items (0.27 s for the slowest 16 MiB one): ``benchmarks/decode_bombs.py``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from consensus import Message
from learning import blob_to_vector
from ledger import Budget, DecodeError, Record, SignedMessage, UpdateCommitment, record

__all__ = [
    "BLOBS_PER_MESSAGE_MAX", "ENVELOPE_BYTES_MAX", "KINDS", "MSG_ENVELOPE_BYTES_MAX", "Envelope", "EnvelopeDecoder",
    "UpdatePacket", "decode_envelope", "envelope_budget", "envelope_kind",
]

ENVELOPE_BYTES_MAX = 256 << 20
BLOBS_PER_MESSAGE_MAX = 64
_FIELDS = ("update", "scores", "pbft", "want", "blobs", "have", "refused")
MSG_ENVELOPE_BYTES_MAX = 16 << 20
"""The largest ``pbft``, ``scores``, ``have`` or ``refused`` envelope (= ``TransportLimits.msg_frame_max``: their
protocol's cap)."""
MSG_ENVELOPE_KINDS = frozenset({"pbft", "scores", "have", "refused"})
"""The envelopes of many small objects (signed messages, commitments), budgeted by their size."""
FIXED_ITEMS_MAX = 256
"""Items of an ``update``, ``blobs`` or ``want`` envelope (at most 64 byte strings in a few maps: about 80)."""
MSG_BYTES_PER_ITEM = 8
MSG_COST_PER_BYTE = 10
BUDGET_SLACK = 256 << 10
KINDS = tuple(sorted(_FIELDS))
"""The envelope's fields in canonical (sorted) order."""


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class UpdatePacket(Record):
    """A training client's update: the signed commitment and the tensor blob it commits to."""

    commitment: UpdateCommitment
    blob: bytes


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope(Record):
    """The one wire type between nodes."""

    update: UpdatePacket | None = None
    scores: SignedMessage | None = None
    pbft: Message | None = None
    want: tuple[bytes, ...] | None = None
    blobs: tuple[bytes, ...] | None = None
    have: tuple[UpdateCommitment, ...] | None = None
    refused: Message | None = None

    def __post_init__(self) -> None:
        set_fields = [f for f in _FIELDS if getattr(self, f) is not None]
        if len(set_fields) != 1:
            raise ValueError(f"an envelope carries exactly one of {'/'.join(_FIELDS)}, got {set_fields}")
        if self.have is not None and not 1 <= len(self.have) <= BLOBS_PER_MESSAGE_MAX:
            raise ValueError(f"have must carry 1 to {BLOBS_PER_MESSAGE_MAX} commitments")
        if self.want is not None and not 1 <= len(self.want) <= BLOBS_PER_MESSAGE_MAX:
            raise ValueError(f"want must name 1 to {BLOBS_PER_MESSAGE_MAX} digests")
        if self.blobs is not None and not 1 <= len(self.blobs) <= BLOBS_PER_MESSAGE_MAX:
            raise ValueError(f"blobs must carry 1 to {BLOBS_PER_MESSAGE_MAX} blobs")

    @property
    def kind(self) -> str:
        for f in _FIELDS:
            if getattr(self, f) is not None:
                return f
        raise AssertionError("unreachable")


# The canonical encoding of an envelope: a map of its fields in sorted order, all but one nil; what comes before the
# set field's value is fixed by the field.
_PREFIXES = {}
_head = bytes([0x80 | len(KINDS)])
for _k in KINDS:
    _head += bytes([0xA0 | len(_k)]) + _k.encode()
    _PREFIXES[_k] = _head
    _head += b"\xc0"
del _head, _k


def envelope_kind(data: bytes) -> str:
    """The field set in the envelope ``data`` claims to be, read from its first bytes (a canonical envelope
    starts with the prefix of its field: at most 50 bytes); raises ``ledger.DecodeError`` if it is none."""
    for kind in KINDS:
        head = _PREFIXES[kind]
        if not data.startswith(head):
            break
        if len(data) > len(head) and data[len(head)] != 0xC0:  # this field's value is not nil: it is the one set
            return kind
    raise DecodeError("malformed envelope: it does not start as a canonical envelope does")


def envelope_budget(kind: str, size: int) -> Budget:
    """What decoding a ``size``-byte envelope of field ``kind`` may build (module docstring); raises
    ``ledger.DecodeError`` for a ``pbft``/``scores`` envelope over :data:`MSG_ENVELOPE_BYTES_MAX`."""
    if kind in MSG_ENVELOPE_KINDS:
        if size > MSG_ENVELOPE_BYTES_MAX:
            raise DecodeError(f"a {kind} envelope of {size} bytes exceeds the limit of {MSG_ENVELOPE_BYTES_MAX}")
        return Budget(items=size // MSG_BYTES_PER_ITEM + BUDGET_SLACK // 64, cost=MSG_COST_PER_BYTE * size + BUDGET_SLACK)
    return Budget(items=FIXED_ITEMS_MAX, cost=size + BUDGET_SLACK)


def decode_envelope(data: bytes) -> Envelope:
    """``Envelope.decode(data)``, bounded for bytes from a peer (module docstring): raises ``ledger.DecodeError``,
    having built at most the budget of the field ``data`` claims. Pure and thread-safe: a host may run it off its
    event loop (``node.runtime``)."""
    if len(data) > ENVELOPE_BYTES_MAX:
        raise DecodeError(f"encoded value of {len(data)} bytes exceeds the limit of {ENVELOPE_BYTES_MAX}")
    budget = envelope_budget(envelope_kind(data), len(data))
    return Envelope.decode(data, bytes_max=ENVELOPE_BYTES_MAX, budget=budget)


class EnvelopeDecoder:
    """Strict, bounded :meth:`Envelope.decode` with a memo of recent inputs.

    Decoding is a pure function of the bytes and envelopes are immutable, so identical bytes may share one
    decoded object: the nodes of a simulation (one process) share a decoder, and a broadcast is decoded
    once, not once per receiver. Every receiver still runs every semantic check (signatures, membership,
    digests) itself. Malformed input is never memoized; the memo is bounded by the bytes it holds, and inputs
    too big for it are not even looked up (hashing a 256 MiB frame costs more than decoding it).
    """

    __slots__ = ("_bytes", "_bytes_max", "_memo", "_vectors", "hits")

    def __init__(self, *, memo_bytes: int = 8 << 20) -> None:
        self._memo: OrderedDict[bytes, Envelope] = OrderedDict()
        self._vectors: OrderedDict[tuple[bytes, int], np.ndarray] = OrderedDict()
        self._bytes = 0
        self._bytes_max = memo_bytes
        self.hits = 0

    def vector(self, blob: bytes, *, dim: int, what: str) -> np.ndarray:
        """``learning.blob_to_vector(blob, dim=dim)`` (strict, finite), memoized like envelopes: the result
        is a read-only view, so receivers of the same update blob may share it."""
        memo = len(blob) <= self._bytes_max // 4
        key = (blob, dim)
        v = self._vectors.get(key) if memo else None
        if v is not None:
            self.hits += 1
            return v
        v = blob_to_vector(blob, dim=dim, what=what)
        if memo:
            self._vectors[key] = v
            while len(self._vectors) > 256:
                self._vectors.popitem(last=False)
        return v

    def decode(self, data: bytes) -> Envelope:
        """:func:`decode_envelope` (bounded); raises ``ledger.DecodeError``."""
        memo = len(data) <= self._bytes_max // 4
        env = self._memo.get(data) if memo else None
        if env is not None:
            self.hits += 1
            self._memo.move_to_end(data)
            return env
        env = decode_envelope(data)
        if memo:
            self._memo[data] = env
            self._bytes += len(data)
            while self._bytes > self._bytes_max:
                old, _ = self._memo.popitem(last=False)
                self._bytes -= len(old)
        return env
