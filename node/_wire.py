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
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from consensus import Message
from learning import blob_to_vector
from ledger import SignedMessage, UpdateCommitment, record

__all__ = ["BLOBS_PER_MESSAGE_MAX", "ENVELOPE_BYTES_MAX", "Envelope", "EnvelopeDecoder", "UpdatePacket"]

ENVELOPE_BYTES_MAX = 256 << 20
BLOBS_PER_MESSAGE_MAX = 64
_FIELDS = ("update", "scores", "pbft", "want", "blobs", "have", "refused")


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class UpdatePacket:
    """A training client's update: the signed commitment and the tensor blob it commits to."""

    commitment: UpdateCommitment
    blob: bytes


@record
@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
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


class EnvelopeDecoder:
    """Strict, bounded :meth:`Envelope.decode` with a memo of recent inputs.

    Decoding is a pure function of the bytes and envelopes are immutable, so identical bytes may share one
    decoded object: the nodes of a simulation (one process) share a decoder, and a broadcast is decoded
    once, not once per receiver. Every receiver still runs every semantic check (signatures, membership,
    digests) itself. Malformed input is never memoized; the memo is bounded by the bytes it holds.
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
        key = (blob, dim)
        v = self._vectors.get(key)
        if v is not None:
            self.hits += 1
            return v
        v = blob_to_vector(blob, dim=dim, what=what)
        if len(blob) <= self._bytes_max // 4:
            self._vectors[key] = v
            while len(self._vectors) > 256:
                self._vectors.popitem(last=False)
        return v

    def decode(self, data: bytes) -> Envelope:
        """``Envelope.decode(data, bytes_max=ENVELOPE_BYTES_MAX)``; raises ``ledger.DecodeError``."""
        env = self._memo.get(data)
        if env is not None:
            self.hits += 1
            self._memo.move_to_end(data)
            return env
        env = Envelope.decode(data, bytes_max=ENVELOPE_BYTES_MAX)  # type: ignore[attr-defined]
        if len(data) <= self._bytes_max // 4:
            self._memo[data] = env
            self._bytes += len(data)
            while self._bytes > self._bytes_max:
                old, _ = self._memo.popitem(last=False)
                self._bytes -= len(old)
        return env
