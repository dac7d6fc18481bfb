"""The deterministic round rules both the live node and the offline auditor execute.

Given the chain state before height ``t`` (``ChainState``), the genesis and the blobs, everything about
round ``t`` is a function: who trains, who validates, how the payload must look, and what the new model
is. ``node.core`` uses these functions to *build* its proposal and to *validate* others' (pBFT's
``validate`` callback); ``node.reexec`` uses the same functions to re-execute a stored ledger. One
implementation, so a proposal the committee accepted always re-executes in the audit.

* **committee mode** (CMFL, seed_003): training clients ``S_b^t`` sampled from non-committee members by
  the previous block hash; the score rows in ``payload.attestations`` decide ``S_a^t`` and
  ``S_c^{t+1}`` (``consensus.check_cmfl_payload``); the aggregate is eq. 5/6,
  ``w̄^{t+1} = w̄^t + Σ_{k∈S_a} (n_k / Σ_j n_j) Δ_k``.
* **coordinator mode**: clients sampled from all members by the previous block hash; the strategy
  named in the genesis aggregates the included updates; the next committee is sampled from the members
  with the seed ``H(prev_hash ‖ height)``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from consensus import CmflParams, check_cmfl_payload, sample_committee, sample_training_clients
from ledger import (
    COMMITTEE_MODE,
    BlobSource,
    ChainContext,
    ChainState,
    Evidence,
    Genesis,
    LedgerError,
    Payload,
    UpdateCommitment,
    check_evidence,
    encode,
    hash_tagged,
    sha256,
    update_sign_bytes,
)
from learning._blobs import blob_to_vector, vector_to_blob
from learning._errors import InvalidUpdateError, LearningError
from learning._strategies import AggregateResult, ClientUpdate, FedAvg, Strategy, strategy_from_params

__all__ = ["RoundPlan", "RoundRules", "evidence_key", "round_rng"]


def round_rng(prev_hash: bytes, height: int) -> np.random.Generator:
    """The aggregation rng of a round: derived from the previous block, identical at every validator."""
    seed = hash_tagged(b"concilium-round-rng/v1", prev_hash + struct.pack(">Q", height))
    return np.random.Generator(np.random.PCG64(int.from_bytes(seed[:16], "big")))


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """Who does what at one height."""

    height: int
    committee: tuple[str, ...]
    """Validators of this height (named by the previous block), sorted."""
    trainers: tuple[str, ...]
    """Peers that submit updates: ``S_b^t`` (committee mode) or the sampled clients (coordinator mode)."""
    references: tuple[str, ...]
    """Committee mode: members that train a reference update for scoring (= ``committee``); else empty."""


class RoundRules:
    """The round rules of one chain (fixed by its genesis)."""

    def __init__(self, genesis: Genesis, *, ctx: ChainContext | None = None) -> None:
        self.genesis = genesis
        self.ctx = ctx if ctx is not None else ChainContext(genesis)
        if self.ctx.genesis_hash != genesis.hash():
            raise ValueError("ctx is for another genesis")
        self.members = genesis.member_ids
        self.committee_mode = genesis.protocol.mode == COMMITTEE_MODE
        self.cmfl = CmflParams.from_genesis(genesis) if self.committee_mode else None
        self.strategy: Strategy = FedAvg() if self.committee_mode else strategy_from_params(
            genesis.protocol.algorithm, genesis.protocol.params
        )

    # --- roles -------------------------------------------------------------------------------

    def plan(self, state: ChainState) -> RoundPlan:
        h = state.height + 1
        committee = tuple(sorted(state.committee))
        if self.committee_mode:
            assert self.cmfl is not None
            trainers = sample_training_clients(self.members, committee, state.head_hash, h, self.cmfl.training_size)
            return RoundPlan(h, committee, trainers, committee)
        k = self.strategy.clients_per_round(len(self.members))
        trainers = sample_training_clients(self.members, (), state.head_hash, h, k)
        return RoundPlan(h, committee, trainers, ())

    def next_committee_coordinator(self, state: ChainState) -> tuple[str, ...]:
        seed = state.head_hash + struct.pack(">Q", state.height + 1)
        return sample_committee(self.members, seed, self.genesis.protocol.committee_size)

    # --- aggregation -------------------------------------------------------------------------

    def aggregate(
        self,
        state: ChainState,
        model: np.ndarray,
        updates: Sequence[tuple[UpdateCommitment, np.ndarray]],
        *,
        algo_state: bytes | None = None,
    ) -> AggregateResult:
        """The round's new model from the included updates (sorted by peer here)."""
        ups = [ClientUpdate(c.peer, v, c.n_samples) for c, v in sorted(updates, key=lambda cu: cu[0].peer)]
        return self.strategy.aggregate(
            self.round_info(state, plan=None), model, ups, state=algo_state, rng=round_rng(state.head_hash, state.height + 1)
        )

    def coordinator_record(self, plan: RoundPlan, result: AggregateResult) -> dict[str, Any]:
        return {"algorithm": self.genesis.protocol.algorithm, "clients": list(plan.trainers), **dict(result.record)}

    # --- validation (shared by pBFT validate and the offline audit) ----------------------------

    def check_payload(
        self,
        state: ChainState,
        payload: Payload,
        model: np.ndarray,
        blobs: BlobSource,
        *,
        algo_state: bytes | None = None,
    ) -> tuple[str | None, np.ndarray | None, bytes | None]:
        """Re-execute a round: ``(None, new_model, model_blob)`` if ``payload`` is right, else ``(reason, None, None)``.

        ``model`` is the global model before the round (its digest is ``state.model_digest``).
        """
        plan = self.plan(state)
        h = plan.height
        ctx = self.ctx
        for u in payload.updates:
            if u.peer not in plan.trainers:
                return f"update of {u.peer} who is not a trainer of height {h}", None, None
            if u.fl_round != h:
                return f"update of {u.peer} is for round {u.fl_round}", None, None
            try:
                ctx.keys.verify(
                    u.peer,
                    u.signature,
                    update_sign_bytes(ctx.chain_id, u.peer, u.fl_round, u.digest, u.n_samples),
                    what="update commitment",
                )
            except LedgerError as e:
                return str(e), None, None
        for ev in payload.evidence:
            try:
                check_evidence(ctx, h, ev)
            except LedgerError as e:
                return f"evidence: {e}", None, None
        if self.committee_mode:
            assert self.cmfl is not None
            reason = check_cmfl_payload(
                ctx, payload, height=h, committee=plan.committee, training=plan.trainers, params=self.cmfl
            )
            if reason is not None:
                return reason, None, None
        else:
            expected_next = self.next_committee_coordinator(state)
            if payload.next_committee != expected_next:
                return "next committee differs from the sampling rule", None, None
        vectors = []
        for u in payload.updates:
            try:
                blob = blobs.get(u.digest)
                vectors.append((u, blob_to_vector(blob, dim=model.shape[0], what=f"update of {u.peer}")))
            except (LedgerError, InvalidUpdateError) as e:
                return f"missing or invalid update blob of {u.peer}: {e}", None, None
        try:
            result = self.aggregate(state, model, vectors, algo_state=algo_state)
        except (LearningError, ValueError) as e:
            return f"aggregation failed: {e}", None, None
        if not self.committee_mode:
            plan_record = self.coordinator_record(plan, result)
            if encode(payload.record) != encode(plan_record):
                return "the round record differs from re-execution", None, None
        model_blob = vector_to_blob(result.model)
        if sha256(model_blob) != payload.model_digest:
            return "the new model digest differs from re-execution of the aggregation", None, None
        state_digest = None if result.state is None else sha256(result.state)
        if state_digest != payload.state_digest:
            return "the algorithm state digest differs from re-execution", None, None
        return None, result.model, model_blob


def evidence_key(ev: Evidence) -> bytes:
    """Dedup key of an evidence item."""
    return sha256(encode(ev.to_value()))  # type: ignore[attr-defined]
