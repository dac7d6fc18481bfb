"""The adversary module: the Byzantine behaviours a scenario's ``[adversary]`` section configures, for both
drivers of :class:`node.core.NodeCore` (the simulator and the network runtime).

An attack lives here, never in the protocol code (``node.core`` calls the :class:`node.core.Behavior` hooks at
fixed points and does not know which attack, if any, runs):

* **faults** on the coordinator (the view-0 primary of the height being decided), a committee member or any
  member, from a round on: ``drop`` (its messages are lost: a crash or silence), ``delay`` (its messages leave
  ``delay_ms`` late, possibly past the validators' timeout), ``corrupt`` (a wrong aggregate in its proposals,
  a lying score row, and it votes for anything), ``equivocate`` (odd-indexed peers get other signed messages:
  another block hash in its votes, other distances in its score row, another update for the same round),
  ``skip_primary`` (selective delivery: its updates and score rows reach every validator but the height's view-0
  primary), ``omit_rows`` (as a CMFL primary, it builds its proposal without one of the score rows it holds, to steer
  the election: :func:`omitted_rows`);
  ``clock`` (its clock runs ``skew_ms`` ahead, or behind if negative: it stamps its proposals with that time and judges
  others' block times by it, within the genesis' drift bound); ``grind`` (as a primary, it tries up to ``tries`` block
  times within the validators' drift and proposes the first whose block hash would have made it the next height's
  primary under the former rule, which seeded the primary with the previous block's hash: :func:`ground_time`);
* **update attacks** of Byzantine clients (``learning.parse_update_attack``) are applied by the host to the
  client's own upload (:func:`attack_update`), and so is a claimed sample count (the scenario's ``adversary.n_samples``:
  the count it signs instead of its own, which validators cap: ``learning.cap_sample_counts``).

Each function is a pure function of its inputs plus a seeded generator the host derives (the simulator from
its scenario's ``RngTree``; a node process from the same scenario), so a scenario run as a testnet applies the
very same corruptions as ``sim run``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from consensus import KIND_COMMIT, KIND_PREPARE, parse_score_row, sign_score_row, vote_message
from ledger import BlockHeader, KeyPair, Payload, primary, sha256, sign_update
from learning import vector_to_blob
from node._wire import Envelope, EnvelopeDecoder, UpdatePacket
from node.config import FAULT_KINDS
from node.core import Behavior

__all__ = [
    "FAULT_KINDS", "SKIPPED_KINDS", "Fault", "FaultPlan", "NodeAdversary", "corrupt_proposal", "equivocate",
    "grind_for_next_primary", "ground_time", "lying_distances", "omitted_rows",
]



@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: ``kind`` on ``peer`` (None: whoever coordinates the height) from ``from_round`` to
    ``until_round`` (0: for ever); ``delay_ms`` for a ``delay``, ``skew_ms`` for a ``clock``, ``tries`` for a
    ``grind``."""

    kind: str
    peer: str | None
    from_round: int = 1
    delay_ms: float = 0.0
    until_round: int = 0
    skew_ms: int = 0
    tries: int = 0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r} (expected one of {', '.join(FAULT_KINDS)})")


class FaultPlan:
    """Which faults control a peer at a height. ``coordinator`` is a function giving the height's coordinator
    (its view-0 primary), called only when a fault targets the coordinator (the check runs per message)."""

    __slots__ = ("faults",)

    def __init__(self, faults: Sequence[Fault] = ()) -> None:
        self.faults = tuple(faults)

    def __bool__(self) -> bool:
        return bool(self.faults)

    @staticmethod
    def _hits(f: Fault, peer: str, height: int, coordinator: Callable[[], str | None]) -> bool:
        return (
            height >= f.from_round
            and (f.until_round == 0 or height <= f.until_round)
            and (f.peer == peer or (f.peer is None and peer == coordinator()))
        )

    def active(self, peer: str, kind: str, height: int, coordinator: Callable[[], str | None]) -> bool:
        return any(f.kind == kind and self._hits(f, peer, height, coordinator) for f in self.faults)

    def delay_ms(self, peer: str, height: int, coordinator: Callable[[], str | None]) -> float:
        return sum(f.delay_ms for f in self.faults if f.kind == "delay" and self._hits(f, peer, height, coordinator))

    def skew_ms(self, peer: str, height: int, coordinator: Callable[[], str | None]) -> int:
        """How far ``peer``'s clock runs ahead (negative: behind) at ``height``."""
        return sum(f.skew_ms for f in self.faults if f.kind == "clock" and self._hits(f, peer, height, coordinator))

    def tries(self, peer: str, height: int, coordinator: Callable[[], str | None]) -> int:
        """How many block times ``peer`` grinds through per proposal at ``height`` (0: it does not grind)."""
        return max((f.tries for f in self.faults if f.kind == "grind" and self._hits(f, peer, height, coordinator)),
                   default=0)


def ground_time(
    time_ms: int, latest_ms: int, tries: int, header_at: Callable[[int], BlockHeader], wins: Callable[[BlockHeader], bool]
) -> tuple[int, int, bool]:
    """A grinding primary's block time: ``time_ms, time_ms + 1, …`` (up to ``tries`` of them, none past
    ``latest_ms``), the first whose block header (``header_at(t)``) ``wins``, else ``time_ms``. Returns ``(time, tried, won)``.

    What it grinds for is the attacker's goal (``wins``); the chain rules read no block hash
    for any role or draw, so whatever it picks, the next heights' primaries, committees and trainers are those of the
    genesis hash and the height (``tests/sim/test_grinding_sim.py``, ``tests/node/runtime/test_adversary_net.py``)."""
    tried = 0
    for t in range(time_ms, min(latest_ms, time_ms + tries - 1) + 1):
        tried += 1
        if wins(header_at(t)):
            return t, tried, True
    return time_ms, tried, False


def grind_for_next_primary(
    me: str, time_ms: int, latest_ms: int, tries: int, header_at: Callable[[int], BlockHeader], payload: Payload
) -> tuple[int, int, bool]:
    """:func:`ground_time` for the goal of the attack the grinding tests measure: be the primary of the next height
    under the former rule, ``primary(next committee, this block's hash, height + 1, 0)``."""
    def wins(hd: BlockHeader) -> bool:
        return primary(payload.next_committee, hd.hash(), hd.height + 1, 0) == me
    return ground_time(time_ms, latest_ms, tries, header_at, wins)


def corrupt_proposal(payload: Payload, model: np.ndarray, rng: np.random.Generator) -> tuple[Payload, np.ndarray, bytes]:
    """A corrupt coordinator's proposal: the model moved away from the honest aggregate by N(0, 1) noise."""
    bad = (model + rng.standard_normal(model.shape).astype(np.float32)).astype(np.float32)
    blob = vector_to_blob(bad)
    fields = {f: getattr(payload, f) for f in payload._record_fields}
    fields["model_digest"] = sha256(blob)
    return Payload(**fields), bad, blob


SKIPPED_KINDS = frozenset({"update", "scores"})
"""What a ``skip_primary`` peer keeps from the view-0 primary."""


def omitted_rows(rows: dict[str, Any], *, me: str, rows_min: int) -> dict[str, Any]:
    """A primary steering the CMFL election: its proposal without the row of the first other member (by id), as
    long as ``rows_min`` rows remain."""
    others = sorted(m for m in rows if m != me)
    if not others or len(rows) - 1 < rows_min:
        return rows
    return {m: r for m, r in rows.items() if m != others[0]}


def lying_distances(distances: dict[str, float]) -> dict[str, float]:
    """A lying committee member's score row: it favours the clients the others rank worst."""
    return {k: 1.0 / max(d, 1e-12) for k, d in distances.items()}


def equivocate(
    data: bytes, *, key: KeyPair, chain_id: str, decoder: EnvelopeDecoder, last_upload: np.ndarray
) -> tuple[bytes, bool]:
    """What an equivocating peer tells odd-indexed peers instead of ``data`` (signed with its own key):
    another block hash in its PREPARE/COMMIT votes, other distances in its score row, the negated last upload
    for the same round. ``(bytes, changed)``; other messages go out unchanged."""
    env = decoder.decode(data)
    if env.pbft is not None and env.pbft.signed is not None and env.pbft.signed.kind in (KIND_PREPARE, KIND_COMMIT):
        sm = env.pbft.signed
        other = sha256(b"equivocation" + bytes(sm.body["block_hash"]))
        return Envelope(pbft=vote_message(key, chain_id, sm.kind, sm.height, sm.view, other)).encode(), True
    if env.scores is not None:
        row = parse_score_row(env.scores)
        signed = sign_score_row(
            key, chain_id, row.height, distances={k: 2.0 * d + 1.0 for k, d in row.distances.items()},
            updates=row.updates, reference=row.reference,
        )
        return Envelope(scores=signed).encode(), True
    if env.update is not None:
        c = env.update.commitment
        blob = vector_to_blob(-np.asarray(last_upload, dtype=np.float32))
        c2 = sign_update(key, chain_id, c.fl_round, sha256(blob), c.n_samples)
        return Envelope(update=UpdatePacket(commitment=c2, blob=blob)).encode(), True
    return data, False


class NodeAdversary(Behavior):
    """The adversary of one node on a real network: the faults of a :class:`FaultPlan` that control this node,
    judged from its own view of the chain (the height it is deciding, and that height's view-0 primary as the
    coordinator). The runtime passes it to :class:`node.core.NodeCore` as its ``behavior`` and runs every
    outgoing message through :meth:`outgoing`.

    A dropped node is *silent* (nothing it sends leaves) but still hears: the simulator also makes it deaf, but
    it judges the fault by the network's height, which a deaf process could never learn had moved on (it would
    stay the faulty coordinator of its height for ever).

    ``rng_for(peer, height)``: the generator of a corrupt proposal (the simulator's, for the same scenario);
    ``index_of(peer)``: the member index (an equivocating peer lies to the odd-indexed ones)."""

    def __init__(
        self,
        *,
        key: KeyPair,
        chain_id: str,
        plan: FaultPlan,
        rng_for: Callable[[str, int], np.random.Generator],
        index_of: Callable[[str], int],
    ) -> None:
        self._key = key
        self._me = key.peer_id
        self._chain = chain_id
        self._plan = plan
        self._rng_for = rng_for
        self._index_of = index_of
        self._decoder = EnvelopeDecoder()
        self.core: Any = None
        """The node core this adversary steers (set by the host once built)."""
        self.last_upload: np.ndarray | None = None
        self.counts: dict[str, int] = {"dropped": 0, "delayed": 0, "corrupted": 0, "equivocated": 0, "skewed": 0}

    def _height(self) -> int:
        """The height the faults are judged at: the one this node decides, or the highest a member showed it if the
        network is further (as the simulator judges a fault by the network's height). A silent node whose fault
        ends at ``until_round`` thus speaks again once it sees the network past that round, and catches up: judged
        by its own height alone it could never ask for the block it missed."""
        if self.core is None:
            return 0
        return max(self.core.chain_state.height + 1, self.core.replica.ahead_height)

    def _coordinator(self) -> str | None:
        if self.core is None:
            return None
        st = self.core.chain_state
        return primary(st.committee, self.core.genesis_hash, st.height + 1, 0)

    def _active(self, kind: str) -> bool:
        return bool(self._plan) and self._plan.active(self._me, kind, self._height(), self._coordinator)

    @property
    def accepts_everything(self) -> bool:  # type: ignore[override]
        return self._active("corrupt")

    def proposal(self, payload: Payload, model: np.ndarray, model_blob: bytes) -> tuple[Payload, np.ndarray, bytes]:
        if not self._active("corrupt"):
            return payload, model, model_blob
        self.counts["corrupted"] += 1
        return corrupt_proposal(payload, model, self._rng_for(self._me, self._height()))

    def distances(self, distances: dict[str, float]) -> dict[str, float]:
        return lying_distances(distances) if self._active("corrupt") else distances

    def score_rows(self, rows: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        if not self._active("omit_rows") or self.core is None:
            return rows
        self.counts["omitted"] = self.counts.get("omitted", 0) + 1
        return omitted_rows(rows, me=self._me, rows_min=self.core.rows_min)

    def clock(self, now_ms: int) -> int:
        if not self._plan:
            return now_ms
        skew = self._plan.skew_ms(self._me, self._height(), self._coordinator)
        if skew:
            self.counts["skewed"] += 1
        return now_ms + skew

    def proposal_time(self, time_ms: int, latest_ms: int, header_at: Callable[[int], BlockHeader], payload: Payload) -> int:
        tries = self._plan.tries(self._me, self._height(), self._coordinator) if self._plan else 0
        if not tries:
            return time_ms
        t, tried, won = grind_for_next_primary(self._me, time_ms, latest_ms, tries, header_at, payload)
        self.counts["ground"] = self.counts.get("ground", 0) + tried
        self.counts["ground_proposals"] = self.counts.get("ground_proposals", 0) + 1
        self.counts["ground_wins"] = self.counts.get("ground_wins", 0) + int(won)
        return t

    @property
    def silent(self) -> bool:
        """A drop fault holds now: this node sends nothing, blobs served on request included."""
        return self._active("drop")

    def outgoing(self, to: str, data: bytes) -> tuple[float, bytes] | None:
        """``(delay_s, data)`` to send to ``to`` instead of ``data``, or None to drop it."""
        if not self._plan:
            return 0.0, data
        h, coord = self._height(), self._coordinator
        if self._plan.active(self._me, "drop", h, coord):
            self.counts["dropped"] += 1
            return None
        if (self._plan.active(self._me, "skip_primary", h, coord) and to == coord()
                and self._decoder.decode(data).kind in SKIPPED_KINDS):
            self.counts["skipped"] = self.counts.get("skipped", 0) + 1
            return None
        if self._plan.active(self._me, "equivocate", h, coord) and self._index_of(to) % 2 == 1:
            data, changed = equivocate(data, key=self._key, chain_id=self._chain, decoder=self._decoder,
                                       last_upload=self.last_upload if self.last_upload is not None else np.zeros(1, np.float32))
            self.counts["equivocated"] += changed
        delay = self._plan.delay_ms(self._me, h, coord) / 1000.0
        if delay:
            self.counts["delayed"] += 1
        return delay, data
