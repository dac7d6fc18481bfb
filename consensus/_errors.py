"""Errors raised by the consensus layer.

Hierarchy (documented once, as httpx does)::

    ConsensusError                    base of everything ``consensus`` raises on purpose
    ├── RemoteProtocolError           a peer's message breaks the protocol: malformed, bad signature,
    │   │                             non-member, wrong height or view, not from the primary, a proposal
    │   │                             that ``validate`` refuses, a bad view-change proof, ... The replica
    │   │                             drops the message, counts it under ``reason`` in
    │   │                             ``status().dropped`` and carries on: never fatal, never escapes
    │   │                             ``Replica.step``/``tick`` (h11's RemoteProtocolError).
    │   └── EquivocationError         two conflicting messages signed by one member for the same
    │                                 (kind, height, view); carries the ledger ``Evidence``
    ├── LocalProtocolError            our own caller misused the API (``propose`` by a replica that is not
    │                                 the primary, a proposal our own ``validate`` rejects, ...) or an
    │                                 internal invariant broke: a bug in concilium, it crashes
    ├── CommitteeConfigError          CMFL sizes or parameters that cannot work (ω > 50 %, m < 1, an
    │                                 unknown strategy); also a ``ValueError``
    └── DurableStateError             a replica's durable record (``Replica.durable``) that cannot be
                                      restored: torn, corrupt, of another chain or member, inconsistent,
                                      or ahead of the block store; also a ``ValueError``

``RemoteProtocolError.reason`` is a short snake_case code (``"bad_signature"``, ``"stale_view"``, ...)
so that drops can be counted; ``str(error)`` says what exactly was wrong. Anything else escaping
``consensus`` is a bug in concilium: a peer's fault is a ``RemoteProtocolError`` (dropped and counted, never
fatal), our own a ``LocalProtocolError`` or an ``AssertionError`` (it crashes).
"""

from __future__ import annotations

from ledger import Evidence

__all__ = [
    "CommitteeConfigError",
    "ConsensusError",
    "DurableStateError",
    "EquivocationError",
    "LocalProtocolError",
    "RemoteProtocolError",
]


class ConsensusError(Exception):
    """Base class of consensus errors."""


class RemoteProtocolError(ConsensusError):
    """A peer's message breaks the protocol. Dropped and counted; never fatal."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class EquivocationError(RemoteProtocolError):
    """Two conflicting messages signed by the same member; ``evidence`` proves it to anyone."""

    def __init__(self, evidence: Evidence) -> None:
        super().__init__("equivocation", f"{evidence.offender} signed two {evidence.exhibits[0].kind} messages")
        self.evidence = evidence


class LocalProtocolError(ConsensusError):
    """The local caller misused the API, or the state machine broke an invariant (a bug)."""


class CommitteeConfigError(ConsensusError, ValueError):
    """CMFL sizes or parameters that cannot work."""


class DurableStateError(ConsensusError, ValueError):
    """A :meth:`Replica.durable` record that cannot be restored: torn, corrupt, of another chain or
    member, inconsistent, or ahead of the block store. ``str(error)`` is one line for the operator."""
