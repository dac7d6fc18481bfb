"""Round deadlines that follow the model size and the links (docs/design.md, "Performance, reliability,
security": "Round deadlines follow the model size and the links").

The genesis' ``protocol.timeouts`` give the time a round needs with no bytes to move: ``timeout_ticks_train`` for
local training, ``timeout_ticks_propose/prepare/commit`` for the pBFT phases. Moving model-sized blobs adds time
that grows with the model and shrinks with the link, so a node adds the *wire time* of what a round moves over its
busiest link, at the genesis' planned link rate ``protocol.params.link_mbit`` (Mbit/s, the slowest member link
the network plans for; default :data:`LINK_MBIT_DEFAULT`):

* to the **collect** deadline (and, alike, to every replica's view-0 wait, ``ReplicaConfig.timeout_ticks_start``,
  so no validator gives up on the primary before the primary's own deadline): the new model to the trainers
  outside the committee (they hold no copy: the proposer pushes it), then each trainer's update to every
  validator, which each validator receives from every trainer, and one model more (a validator that decided the
  block by its certificate before it could re-execute it fetches the model before it trains):
  ``S × (T_out + max(T, C) + 1)`` bytes for an update of ``S`` bytes, ``T`` trainers (reference trainers
  included), ``C`` validators, ``T_out`` of the trainers outside the committee;
* to each **pBFT phase** timeout: a validator that lacks updates fetches them from the proposer before it can
  re-execute the proposal (``S × T``), or the decided model (``S``) before it can train.

Each is scaled by :data:`WIRE_MARGIN` (TCP's ramp-up, several streams sharing one link, the framing) and rounded
*down* to whole ticks, so a model small against the link adds nothing and leaves every timing, hence every
simulation trace, as it was: at the default 100 Mbit and tick (100 ms: 1.25 MB), a round that moves under
0.625 MB (twice that with the margin is under one tick) changes no deadline.

Deadlines are local timers: they decide when a node stops waiting, never what a block may contain, so two nodes
that planned different links still agree on every block (the ledger does not read ``link_mbit``). Both drivers use
them: the simulator, whose links have the scenario's ``network.bandwidth_mbps``, and the network runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from consensus import ReplicaConfig
from ledger import REDRAW_TICKS_KEY, REDRAW_TIMEOUTS_DEFAULT, Genesis, Timeouts
from learning import ConfigError

__all__ = ["LINK_MBIT_DEFAULT", "LINK_MBIT_KEY", "RoundDeadlines", "link_mbit_of"]

LINK_MBIT_KEY = "link_mbit"
"""Reserved ``protocol.params`` key: the link rate (Mbit/s) the round deadlines plan for."""
LINK_MBIT_DEFAULT = 100
"""Without ``params.link_mbit``: a 100 Mbit/s link (a LAN, a cloud region's slowest instance links)."""
LINK_MBIT_MAX = 10**6
WIRE_MARGIN = 2.0
"""Wire time budgeted per byte over the bare rate (``benchmarks/link_bench.py``: rounds of 1.2-1.6x the wire-time
bound with every update on time, from TCP's ramp-up, several streams sharing each link and the fetches of a
validator that decided a block by its certificate; with 1.5 a member that had to fetch the model first missed the
deadline at 100 Mbit/s with a 45 MB model)."""


def link_mbit_of(params: Mapping[str, Any]) -> int:
    """``params.link_mbit`` of a genesis' protocol, or :data:`LINK_MBIT_DEFAULT`; raises :class:`ConfigError` unless it
    is an int in ``[1, 1e6]``."""
    v = params.get(LINK_MBIT_KEY, LINK_MBIT_DEFAULT)
    if type(v) is not int or not 1 <= v <= LINK_MBIT_MAX:
        raise ConfigError(f"protocol.params.{LINK_MBIT_KEY} must be an int in [1, {LINK_MBIT_MAX}] (Mbit/s), got {v!r}")
    return v


@dataclass(frozen=True, slots=True)
class RoundDeadlines:
    """What a node waits, in ticks: the genesis' timeouts plus the wire time of the round's blobs."""

    timeouts: Timeouts
    collect_wire_ticks: int
    """Added to ``timeout_ticks_train``: the collect deadline and every replica's view-0 wait."""
    phase_wire_ticks: int
    """Added to each pBFT phase timeout (propose, prepare, commit)."""
    redraw_wire_ticks: int = 0
    """Added to the re-draw delay when the genesis leaves ``redraw_ticks`` to its default (``ledger.redraw_ticks_of``:
    10 times the train, propose and view-change timeouts): 10 times the wire time above."""

    @classmethod
    def of(cls, timeouts: Timeouts, params: Mapping[str, Any], *, blob_bytes: int, trainers: int, committee: int,
           trainers_outside: int) -> RoundDeadlines:
        """For updates (and models) of ``blob_bytes``, ``trainers`` trainers a round (reference trainers included),
        a committee of ``committee``, ``trainers_outside`` of the trainers outside it."""
        bytes_per_tick = link_mbit_of(params) * 1e6 / 8 * timeouts.tick_ms / 1000

        def ticks(n_bytes: float) -> int:
            return int(WIRE_MARGIN * n_bytes / bytes_per_tick)

        collect = ticks(blob_bytes * (trainers_outside + max(trainers, committee) + 1))
        phase = ticks(blob_bytes * max(1, trainers))
        redraw = 0 if REDRAW_TICKS_KEY in params else REDRAW_TIMEOUTS_DEFAULT * (collect + phase)
        return cls(timeouts=timeouts, collect_wire_ticks=collect, phase_wire_ticks=phase, redraw_wire_ticks=redraw)

    @classmethod
    def for_round(cls, genesis: Genesis, plan: Any, *, blob_bytes: int) -> RoundDeadlines:
        """For a chain's rounds like ``plan`` (a ``node._rounds.RoundPlan``: its roles' sizes; a committee's size is
        fixed by the genesis, a round's trainers by the strategy's sample). A function of the genesis and the plan
        only, never of a host's choices (``OutsiderPolicy(models_for_all=...)``): a simulation that pushes the model to
        fewer members must decide the same blocks. So the model fan-out counted is the trainers' outside the
        committee; a proposer that pushes the model to every member (the runtime) reaches them in member order, and
        with many members outside the round a trainer may wait behind the others' copies (not budgeted)."""
        inside = set(plan.committee)
        trainers = set(plan.trainers) | set(plan.references)
        return cls.of(genesis.protocol.timeouts, genesis.protocol.params, blob_bytes=blob_bytes, trainers=len(trainers),
                      committee=len(inside), trainers_outside=len(trainers - inside))

    @property
    def collect_ticks(self) -> int:
        """Ticks after a round starts at which validators score what they have and the primary proposes."""
        return self.timeouts.timeout_ticks_train + self.collect_wire_ticks

    def replica_config(self) -> ReplicaConfig:
        """``ReplicaConfig.from_timeouts`` of the genesis' timeouts, with the wire time added."""
        t, w = self.timeouts, self.phase_wire_ticks
        return ReplicaConfig.from_timeouts(t, **{
            "timeout_ticks_start": self.collect_ticks,
            "timeout_ticks_propose": t.timeout_ticks_propose + w,
            "timeout_ticks_prepare": t.timeout_ticks_prepare + w,
            "timeout_ticks_commit": t.timeout_ticks_commit + w,
            "redraw_extra_ticks": self.redraw_wire_ticks,
        })


READ_RATE_MIN = 16 << 10
"""Bytes/s: the slowest a frame may arrive on any link plan (a 1 Mbit/s link shared by eight streams)."""


def read_rate_floor(params: Mapping[str, Any], members: int) -> int:
    """The slowest rate (bytes/s) an honest peer's frame may arrive at over the planned link: the link shared by
    every stream that may cross it at once, one per other member each way. The runtime paces its read and write
    deadlines by it (``TransportLimits.read_bytes_per_s_min``, unless the node's ``[transport]`` sets it), so a big
    frame on a slow link is not taken for a peer that stalls (a bad frame, towards a ban)."""
    link = link_mbit_of(params) * 1_000_000 // 8
    return max(READ_RATE_MIN, link // (2 * max(1, members - 1)))
