"""The replica's value types: its configuration (:class:`ReplicaConfig`), phases (:class:`Phase`), the host's
verdict on a proposal (:data:`Verdict`, :class:`Pending`) and its status snapshot (:class:`ReplicaStatus`)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

from ledger import Timeouts

__all__ = ["Pending", "Phase", "Refusal", "ReplicaConfig", "ReplicaStatus", "Verdict"]


@dataclass(frozen=True, slots=True)
class Pending:
    """A verdict not reached yet: the host lacks an input to judge the proposal (``reason``: which). The replica
    neither votes nor refuses; it waits for the host's next verdict on the proposal (:meth:`Replica.verdict`), and
    refuses it with ``reason`` if the view's timer expires first."""

    reason: str


Verdict: TypeAlias = str | Pending | None
"""The host's answer to ``RequestVerdict`` (:meth:`Replica.verdict`): None if it agrees, the reason it refuses, or
:class:`Pending` while it lacks an input to judge the proposal. Must be deterministic (given the host's inputs)."""


class Phase(enum.StrEnum):
    PROPOSE = "propose"  # waiting for the view's pre-prepare (the primary: for its node's proposal)
    PREPARE = "prepare"  # accepted a pre-prepare, collecting PREPAREs
    COMMIT = "commit"  # prepared, sent COMMIT, collecting COMMITs
    VIEW_CHANGE = "view_change"  # sent VIEW-CHANGE(view), waiting for NEW-VIEW(view)
    OBSERVE = "observe"  # not in this height's committee: waiting for the decided block


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaConfig:
    """Timeouts (in ticks) and bounds of a replica.

    Each phase's timer is ``timeout_ticks_<phase> * 2**min(view, backoff_exponent_max)`` [pBFT §4.5.2:
    "wait 2T"]. View 0 of every height also waits ``timeout_ticks_start`` first (local training,
    collecting updates and score rows).
    """

    timeout_ticks_start: int = 0
    timeout_ticks_propose: int = 50
    timeout_ticks_prepare: int = 50
    timeout_ticks_commit: int = 50
    timeout_ticks_view_change: int = 100
    timeout_ticks_sync: int = 100
    timeout_ticks_retransmit: int = 25
    """While stuck in a phase, re-send this view's own messages to the members that have not answered."""
    redraw_extra_ticks: int = 0
    """Added to the genesis' ``redraw_ticks`` (when it has any): the wire time a host adds to the default re-draw
    delay, which it derives from timeouts that leave the wire out (``node._deadlines``)."""
    backoff_exponent_max: int = 4
    view_window: int = 32
    """Messages for views beyond ``view + view_window`` are dropped."""
    height_window: int = 8
    """Messages for heights beyond ``height + height_window`` are dropped."""
    buffered_messages_max: int = 1024
    """Messages kept for a later view or height (all senders together)."""
    buffered_bytes_max: int = 128 << 20
    """Their encoded bytes, all senders together; one sender's (its signed messages, or the decided blocks of
    all) at most ``max(buffered_owner_bytes_min, buffered_bytes_max / members)``: a bound in count alone would let
    a member's 16 MiB messages for later heights, 256 of them each in a network of 4, hold 4 GiB."""
    buffered_owner_bytes_min: int = 32 << 20
    sync_batch_max: int = 8
    """Decided blocks sent to a laggard per request (at most ``height_window``)."""
    header_batch_max: int = 64
    """Decided headers sent per ``header_sync_request`` (small: about 1.3 kB each); a lazy replica holds those of
    a batch that arrive out of order. With ``Replica(committee_epoch=E)`` a batch covers ``E`` times as many
    heights, one header (the last) per epoch."""
    header_retry_ticks: int = 2
    """A lazy replica catching up asks again (the next member in turn) when this many ticks bring it no new height;
    a member serves one requester's header batch from one height at most this often."""
    refusals_kept: int = 32
    verify_cache_max: int = 8192

    def __post_init__(self) -> None:
        if self.timeout_ticks_start < 0:
            raise ValueError("timeout_ticks_start must be >= 0")
        for name in ("timeout_ticks_propose", "timeout_ticks_prepare", "timeout_ticks_commit"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.redraw_extra_ticks < 0:
            raise ValueError("redraw_extra_ticks must be >= 0")
        for name in ("timeout_ticks_view_change", "timeout_ticks_sync", "timeout_ticks_retransmit"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("view_window", "height_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0 <= self.backoff_exponent_max <= 30:
            raise ValueError("backoff_exponent_max must be in [0, 30]")
        for name in ("buffered_messages_max", "sync_batch_max", "header_batch_max", "header_retry_ticks", "refusals_kept",
                     "verify_cache_max", "buffered_bytes_max", "buffered_owner_bytes_min"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.sync_batch_max > self.height_window:
            raise ValueError("sync_batch_max must be <= height_window (the receiver holds them)")

    @classmethod
    def from_timeouts(cls, timeouts: Timeouts, **overrides: int) -> ReplicaConfig:
        """The genesis' timeouts (``ProtocolParams.timeouts``); ``timeout_ticks_train`` starts each height."""
        values = {
            "timeout_ticks_start": timeouts.timeout_ticks_train,
            "timeout_ticks_propose": timeouts.timeout_ticks_propose,
            "timeout_ticks_prepare": timeouts.timeout_ticks_prepare,
            "timeout_ticks_commit": timeouts.timeout_ticks_commit,
            "timeout_ticks_view_change": timeouts.timeout_ticks_view_change,
            "timeout_ticks_sync": timeouts.timeout_ticks_view_change,
            "timeout_ticks_retransmit": max(1, timeouts.timeout_ticks_prepare // 2),
        }
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """A proposal this replica refused, and why."""

    height: int
    view: int
    proposer: str
    block_hash: bytes
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaStatus:
    """A frozen snapshot of a replica (trio's ``statistics()``)."""

    peer_id: str
    height: int
    """The height being decided (last decided + 1)."""
    view: int
    phase: Phase
    primary: str
    """Primary of (height, view): the proposer, the coordinator in coordinator mode."""
    in_committee: bool
    committee: tuple[str, ...]
    quorum: int
    head_hash: bytes
    now_tick: int
    deadline_tick: int
    decided: int
    """Blocks decided since start."""
    view_changes: int
    """VIEW-CHANGE messages sent since start."""
    buffered: int
    dropped: Mapping[str, int]
    """Dropped peer messages by reason (``RemoteProtocolError.reason``)."""
    duplicates: int
    refusals: tuple[Refusal, ...]
    """The last ``refusals_kept`` refused proposals."""
    attempt: int = 0
    """The committee attempt at this height (``ledger.ATTEMPT_VIEWS``): 0 until the height outlasts the genesis'
    ``redraw_ticks``, then the re-drawn committee's number."""
    evidence_reported: int
    stale_proposals: int
    """``propose`` calls that came after the view or height had moved on (ignored)."""
