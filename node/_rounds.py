"""The deterministic round rules both the live node and the offline auditor execute.

Given the chain state before height ``t`` (``ChainState``), the genesis and the blobs, everything about
round ``t`` is a function: who trains, who validates, how the payload must look, and what the new model
is. ``node.core`` uses these functions to *build* its proposal and to *validate* others' (pBFT's
``validate`` callback); ``node.reexec`` uses the same functions to re-execute a stored ledger. One
implementation, so a proposal the committee accepted always re-executes in the audit.

* **committee mode** (CMFL, cmfl spec): training clients ``S_b^t`` sampled from non-committee members by
  the genesis hash and the height; the score rows in ``payload.attestations`` decide ``S_a^t`` and
  ``S_c^{t+1}`` (``consensus.check_cmfl_payload``); the aggregate is eq. 5/6,
  ``w̄^{t+1} = w̄^t + Σ_{k∈S_a} (n_k / Σ_j n_j) Δ_k``.
* **coordinator mode**: clients sampled from all members by the genesis hash and the height (or, for paired
  experiments, by the genesis' ``protocol.params.sampling_seed``: see :func:`sampling_seed_of`); the
  strategy named in the genesis aggregates the included updates; the next committee is sampled from the
  members with the seed ``genesis_hash ‖ height``.

No role and no random draw of a round reads a block hash: a proposer can grind its block's hash (its time, which
evidence and updates it includes), so anything derived from it would be the proposer's choice
(``docs/sampling.md``). The aggregation rng (:func:`round_rng`) too comes from the genesis hash and the height.

Both modes aggregate with the claimed sample counts capped at ``n_samples_cap`` times the round's median claim
(:func:`n_samples_cap_of`, ``learning.cap_sample_counts``): a count is the client's own word, and the weight of
every data-size-weighted rule.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from types import MappingProxyType

import numpy as np

from consensus import (
    SAMPLING_RULES,
    CmflParams,
    check_cmfl_payload,
    check_evidence_claim,
    sample_committee,
    sample_training_clients,
)
from ledger import (
    ATTEMPT_VIEWS,
    COMMITTEE_MODE,
    REDRAW_TICKS_KEY,
    TIME_DRIFT_KEY,
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
from learning import (
    HOST_PARAM_KEYS,
    N_SAMPLES_CAP_DEFAULT,
    AggregateResult,
    ClientUpdate,
    ConfigError,
    FedAvg,
    InvalidUpdateError,
    LearningError,
    PublicEval,
    RoundInfo,
    Strategy,
    blob_to_vector,
    cap_sample_counts,
    strategy_from_params,
    vector_to_blob,
)
from node._deadlines import link_mbit_of

__all__ = [
    "COMMITTEE_EPOCH_KEY",
    "N_SAMPLES_CAP_KEY",
    "N_SAMPLES_CAP_MAX",
    "SAMPLING_RULE_KEY",
    "SAMPLING_SEED_KEY",
    "RoundHistory",
    "RoundPlan",
    "RoundRules",
    "evidence_key",
    "proposal_evidence_key",
    "check_host_params",
    "committee_epoch_of",
    "n_samples_cap_of",
    "round_rng",
    "sampling_rule_of",
    "sampling_seed_of",
    "seeded_sampling_hash",
]

SAMPLING_SEED_KEY = "sampling_seed"
"""Reserved ``protocol.params`` key of :func:`sampling_seed_of` (one of ``learning``'s ``HOST_PARAM_KEYS``, which
:func:`strategy_from_params` strips, so strategies never see it)."""


def sampling_seed_of(params: Mapping[str, Any], *, mode: str = "coordinator") -> int | None:
    """The experiment sampling seed of a genesis' ``protocol.params``, or None when the key is absent.

    ``sampling_seed`` (an int in ``[0, 2^64)``; bool, float, str or a negative value raise
    :class:`ConfigError`) makes coordinator-mode client sampling depend on the seed instead of the genesis
    hash (:func:`seeded_sampling_hash`): two chains with the same members and the same seed ask the same
    clients to train in every round, whatever their algorithms and models - the pairing a comparison of
    schemes on the same draws needs (the sself spec prototype fixes the sampled clients per seed). Only a
    semi-synchronous strategy's busy trainers (still computing an earlier round) are taken out of the pool
    first, as without the key.

    Both samples are public and fixed before the chain starts (the default one by the genesis hash, not the
    previous block's: a sample that the previous block's hash fed could be ground by its proposer), so anyone can tell for
    every round who will be asked to train; ``docs/sampling.md`` says what that costs against an adaptive
    adversary. The seed only adds that the sample is the same on every chain with these members. Committee mode
    (CMFL) does not take the key (its training sample stays genesis-seeded) and rejects it.
    """
    if SAMPLING_SEED_KEY not in params:
        return None
    v = params[SAMPLING_SEED_KEY]
    if type(v) is not int:
        raise ConfigError(
            f"protocol.params.{SAMPLING_SEED_KEY} must be a non-negative int, got {type(v).__name__} {v!r}"
        )
    if not 0 <= v < 2**64:
        raise ConfigError(f"protocol.params.{SAMPLING_SEED_KEY} must be a non-negative int below 2^64, got {v}")
    if mode == COMMITTEE_MODE:
        raise ConfigError(
            f"protocol.params.{SAMPLING_SEED_KEY} applies to coordinator mode only; committee mode samples by the chain"
        )
    return v


SAMPLING_RULE_KEY = "sampling_rule"
"""Reserved ``protocol.params`` key of :func:`sampling_rule_of` (one of ``learning``'s ``HOST_PARAM_KEYS``)."""


def sampling_rule_of(params: Mapping[str, Any]) -> str:
    """How a chain samples its training clients and (coordinator mode) its next committee: the genesis'
    ``protocol.params.sampling_rule``, one of ``consensus.SAMPLING_RULES``; ``"rank"`` when the key is absent.

    ``"rank"`` hashes every member each time it samples (``O(members)`` per height, twice in coordinator mode);
    ``"draw"`` hashes only about as many times as it picks (``O(clients)``), so a member that takes no part in a
    round costs nothing in it. Both are uniform and verifiable from the previous block; they pick different
    members from the same block, so the rule is part of the genesis. ``"rank"`` stays the default because every
    calibrated reproduction in this project was run with it. Anything else raises :class:`ConfigError`.
    """
    v = params.get(SAMPLING_RULE_KEY, "rank")
    if type(v) is not str or v not in SAMPLING_RULES:
        raise ConfigError(
            f"protocol.params.{SAMPLING_RULE_KEY} must be one of {', '.join(map(repr, SAMPLING_RULES))}, got {v!r}"
        )
    return v


COMMITTEE_EPOCH_KEY = "committee_epoch"
"""Reserved ``protocol.params`` key of :func:`committee_epoch_of` (one of ``learning``'s ``HOST_PARAM_KEYS``)."""
N_SAMPLES_CAP_KEY = "n_samples_cap"
"""Reserved ``protocol.params`` key of :func:`n_samples_cap_of` (one of ``learning``'s ``HOST_PARAM_KEYS``)."""
N_SAMPLES_CAP_MAX = 1_000_000
_missing = {SAMPLING_SEED_KEY, SAMPLING_RULE_KEY, COMMITTEE_EPOCH_KEY, N_SAMPLES_CAP_KEY, TIME_DRIFT_KEY, REDRAW_TICKS_KEY} - HOST_PARAM_KEYS
if _missing:  # pragma: no cover - the two modules must agree
    raise ImportError(f"learning's HOST_PARAM_KEYS lacks {sorted(_missing)}")
COMMITTEE_EPOCH_MAX = 1_000_000


def committee_epoch_of(params: Mapping[str, Any], *, mode: str) -> int:
    """Coordinator mode: for how many heights one committee serves, the genesis' ``protocol.params.committee_epoch``
    (``E``, default 1: a new committee at every height): the committee is sampled at the block before a height,
    or fixed for an epoch of ``E`` heights. Heights ``kE+1 .. (k+1)E`` form epoch
    ``k``; epoch 0 is certified by the genesis committee, and the block at height ``kE`` names the committee of
    epoch ``k`` drawn, as at every height without the key, from the block before it
    (:meth:`RoundRules.next_committee_coordinator`). Every other block names the committee it was certified by.

    What it buys: a member that slept through ``n`` heights (``OutsiderPolicy(lazy_outsiders=True)``) checks the last
    header of each epoch, about ``n / E``, instead of all ``n`` (``ledger.apply_header(epoch=)``). What it costs: a
    committee is known ``E`` heights ahead and serves that long, so an adaptive adversary has longer to corrupt
    it, and a crashed member of it costs view changes for up to ``E`` heights. The coordinator (the primary) still
    changes every height. Committee mode (CMFL) elects each committee from the round's scores and rejects the
    key; anything but an int in ``[1, 1000000]`` raises :class:`ConfigError`.
    """
    if COMMITTEE_EPOCH_KEY not in params:
        return 1
    v = params[COMMITTEE_EPOCH_KEY]
    if type(v) is not int or not 1 <= v <= COMMITTEE_EPOCH_MAX:
        raise ConfigError(
            f"protocol.params.{COMMITTEE_EPOCH_KEY} must be an int in [1, {COMMITTEE_EPOCH_MAX}], got {v!r}"
        )
    if mode == COMMITTEE_MODE:
        raise ConfigError(
            f"protocol.params.{COMMITTEE_EPOCH_KEY} applies to coordinator mode only; committee mode elects every "
            "committee from the round's scores"
        )
    return v


def n_samples_cap_of(params: Mapping[str, Any]) -> int:
    """The cap on claimed sample counts, the genesis' ``protocol.params.n_samples_cap`` (``r``; default
    ``learning.N_SAMPLES_CAP_DEFAULT`` = 4), in both modes: every round is aggregated, by its proposer, its
    validators and the auditor alike, with each update's ``n_samples`` replaced by ``min(n_samples, r · m)``, ``m``
    the lower median of the round's claims (``learning.cap_sample_counts``, which says what it bounds and what it
    costs). ``0`` aggregates with the claims as signed (a deployment that trusts its clients' counts, or a
    reproduction of a paper whose server knows them). Anything but an int in ``[0, 1000000]`` raises
    :class:`ConfigError`."""
    if N_SAMPLES_CAP_KEY not in params:
        return N_SAMPLES_CAP_DEFAULT
    v = params[N_SAMPLES_CAP_KEY]
    if type(v) is not int or not 0 <= v <= N_SAMPLES_CAP_MAX:
        raise ConfigError(f"protocol.params.{N_SAMPLES_CAP_KEY} must be an int in [0, {N_SAMPLES_CAP_MAX}], got {v!r}")
    return v


def check_host_params(params: Mapping[str, Any], *, mode: str) -> None:
    """Check every reserved host key of a ``protocol.params`` (:func:`sampling_seed_of`, :func:`sampling_rule_of`,
    :func:`committee_epoch_of`, :func:`n_samples_cap_of`, ``node._deadlines.link_mbit_of``); raises
    :class:`ConfigError` for the first bad one."""
    link_mbit_of(params)
    sampling_seed_of(params, mode=mode)
    sampling_rule_of(params)
    committee_epoch_of(params, mode=mode)
    n_samples_cap_of(params)


def seeded_sampling_hash(sampling_seed: int) -> bytes:
    """The 32 bytes that stand in for the genesis hash when clients are sampled by ``sampling_seed``
    (domain-separated from every chain hash)."""
    return hash_tagged(b"concilium-seeded-sampling/v1", struct.pack(">Q", sampling_seed))


_PLANS_KEPT = 128
"""Plans and next committees remembered (by state): a member that slept through heights catches up over them one
by one (``OutsiderPolicy(lazy_outsiders=True)``), and each height's plan ranks every member by a hash."""


def round_rng(genesis_hash: bytes, height: int) -> np.random.Generator:
    """The aggregation rng of a round (a robust aggregator's random start, FedAsync's processing order), identical at
    every validator: from the genesis hash and the height, never the previous block's hash, which its proposer could
    grind to pick the draw (``v1`` read the previous block's hash)."""
    seed = hash_tagged(b"concilium-round-rng/v2", genesis_hash + struct.pack(">Q", height))
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
    participants: frozenset[str] = field(init=False, repr=False, compare=False)
    """Everyone with a role at this height: committee, trainers and references."""

    def __post_init__(self) -> None:
        roles = frozenset(self.committee) | frozenset(self.trainers) | frozenset(self.references)
        object.__setattr__(self, "participants", roles)


@dataclass(slots=True)
class RoundHistory:
    """The recent rounds a semi-synchronous strategy needs (``max_staleness`` > 0): who was asked to train at
    each recent height, the global model each of those rounds started from, and which ``(peer, round)``
    updates were already included. Kept by every node and by the auditor, block by block; pruned to the
    staleness window. Synchronous strategies keep nothing."""

    window: int
    plans: dict[int, RoundPlan] = field(default_factory=dict)
    models: dict[int, np.ndarray] = field(default_factory=dict)
    """height τ → the global model before round τ (what trainers of τ started from)."""
    included: dict[int, set[str]] = field(default_factory=dict)
    """height τ → peers whose round-τ update some block already included."""

    def record(self, plan: RoundPlan, model_before: np.ndarray | None, payload: Payload) -> None:
        """Round ``plan.height`` committed ``payload``; ``model_before`` is the model it started from."""
        if self.window <= 0:
            return
        h = plan.height
        self.plans[h] = plan
        if model_before is not None:
            self.models[h] = model_before
        for u in payload.updates:
            self.included.setdefault(u.fl_round, set()).add(u.peer)
        floor = h - self.window + 1  # the next round (h + 1) accepts rounds >= h + 1 - window
        for d in (self.plans, self.models, self.included):
            for k in [k for k in d if k < floor]:
                del d[k]

    def snapshot(self) -> RoundHistory:
        """A copy that later :meth:`record` calls leave alone (for a re-execution that runs while the node goes on);
        the models are shared, never written."""
        return RoundHistory(self.window, dict(self.plans), dict(self.models),
                            {k: set(v) for k, v in self.included.items()})

    def busy(self, height: int) -> frozenset[str]:
        """Trainers of the window before ``height`` whose update is not in yet (still computing: sself spec §1.2
        samples S_{t+1} disjoint from them)."""
        out: set[str] = set()
        for tau, plan in self.plans.items():
            if height - self.window <= tau < height:
                out.update(p for p in plan.trainers if p not in self.included.get(tau, ()))
        return frozenset(out)


class RoundRules:
    """The round rules of one chain (fixed by its genesis)."""

    def __init__(self, genesis: Genesis, *, ctx: ChainContext | None = None, public: PublicEval | None = None) -> None:
        self.genesis = genesis
        self.ctx = ctx if ctx is not None else ChainContext(genesis)
        if self.ctx.genesis is not genesis and self.ctx.genesis_hash != genesis.hash():
            raise ValueError("ctx is for another genesis")
        self.members = genesis.member_ids
        self._plans: OrderedDict[tuple[bytes, int, tuple[str, ...]], RoundPlan] = OrderedDict()
        """Plans by chain state, while they depend on nothing else (no staleness window): the nodes of one
        process that share these rules (a simulation's) sample each height's clients once, not once each."""
        self._next_committees: OrderedDict[int, tuple[str, ...]] = OrderedDict()
        self.committee_mode = genesis.protocol.mode == COMMITTEE_MODE
        self.cmfl = CmflParams.from_genesis(genesis) if self.committee_mode else None
        seed = sampling_seed_of(genesis.protocol.params, mode=genesis.protocol.mode)
        self.sampling_hash: bytes | None = None if seed is None else seeded_sampling_hash(seed)
        """Coordinator mode with ``sampling_seed``: what ranks the trainers instead of the genesis hash."""
        self.sampling_rule = sampling_rule_of(genesis.protocol.params)
        """``consensus.SAMPLING_RULES``: how :meth:`plan` and :meth:`next_committee_coordinator` pick members."""
        self.committee_epoch = committee_epoch_of(genesis.protocol.params, mode=genesis.protocol.mode)
        """Coordinator mode: heights per committee (:func:`committee_epoch_of`)."""
        self.n_samples_cap = n_samples_cap_of(genesis.protocol.params)
        """The cap on claimed sample counts (:func:`n_samples_cap_of`), both modes."""
        self.strategy: Strategy = FedAvg() if self.committee_mode else strategy_from_params(
            genesis.protocol.algorithm, genesis.protocol.params
        )
        self.public = public
        self.staleness = 0 if self.committee_mode else int(self.strategy.max_staleness)
        if self.strategy.needs_public and public is None and not self.committee_mode:
            raise LearningError(
                f"strategy {genesis.protocol.algorithm!r} scores models on a public split; this host has none"
            )

    def new_history(self) -> RoundHistory:
        return RoundHistory(self.staleness)

    def upload_dim(self, d: int) -> int:
        return d if self.committee_mode else int(self.strategy.upload_dim(d))

    # --- roles -------------------------------------------------------------------------------

    def plan(self, state: ChainState, history: RoundHistory | None = None) -> RoundPlan:
        """Who does what at height ``state.height + 1``: a pure function of the genesis, ``state`` and (with a
        staleness window) ``history``; remembered for the last few states when ``history`` cannot matter."""
        if self.staleness > 0 and history is not None:
            return self._plan(state, history)
        key = (state.head_hash, state.height, state.committee)  # what _plan reads; cheaper to hash than the state
        got = self._plans.get(key)
        if got is None:
            got = self._plans[key] = self._plan(state, history)
            while len(self._plans) > _PLANS_KEPT:
                self._plans.popitem(last=False)
        return got

    def _plan(self, state: ChainState, history: RoundHistory | None) -> RoundPlan:
        h = state.height + 1
        committee = tuple(sorted(state.committee))
        if self.committee_mode:
            assert self.cmfl is not None
            trainers = sample_training_clients(
                self.members, committee, self.ctx.genesis_hash, h, self.cmfl.training_size, rule=self.sampling_rule,
                caches=self.ctx.caches,
            )
            return RoundPlan(h, committee, trainers, committee)
        pool = self.members
        if self.staleness > 0 and history is not None:
            busy = history.busy(h)
            pool = tuple(m for m in self.members if m not in busy) or self.members
        k = self.strategy.clients_per_round(len(pool))
        seed = self.ctx.genesis_hash if self.sampling_hash is None else self.sampling_hash
        trainers = sample_training_clients(pool, (), seed, h, k, rule=self.sampling_rule, caches=self.ctx.caches)
        return RoundPlan(h, committee, trainers, ())

    def next_committee_coordinator(self, state: ChainState) -> tuple[str, ...]:
        """Coordinator mode: the committee the block after ``state`` must name (ranks every member by a hash;
        remembered for the last few states, like :meth:`plan`). With a ``committee_epoch`` ``E`` > 1, a block
        that does not end an epoch names ``state.committee``, the one that certifies it; reads nothing of
        ``state`` but its ``height`` and ``committee`` (a lazy member skipping to a header knows
        no more of the state before it)."""
        if (state.height + 1) % self.committee_epoch:
            return state.committee
        got = self._next_committees.get(state.height)
        if got is None:
            # the genesis hash and the height, never this block's hash (which its proposer could grind)
            seed = self.ctx.genesis_hash + struct.pack(">Q", state.height + 1)
            got = self._next_committees[state.height] = sample_committee(
                self.members, seed, self.genesis.protocol.committee_size, rule=self.sampling_rule, caches=self.ctx.caches
            )
            while len(self._next_committees) > _PLANS_KEPT:
                self._next_committees.popitem(last=False)
        return got

    # --- aggregation -------------------------------------------------------------------------

    def aggregate(
        self,
        state: ChainState,
        plan: RoundPlan,
        model: np.ndarray,
        updates: Sequence[tuple[UpdateCommitment, np.ndarray]],
        *,
        algo_state: bytes | None = None,
        history: RoundHistory | None = None,
    ) -> AggregateResult:
        """The round's new model from the included updates (sorted by ``(peer, round)`` here)."""
        ups = [ClientUpdate(c.peer, v, c.n_samples, c.fl_round) for c, v in updates]
        return self.aggregate_uploads(state, plan, model, ups, algo_state=algo_state, history=history)

    def aggregate_uploads(
        self,
        state: ChainState,
        plan: RoundPlan,
        model: np.ndarray,
        uploads: Sequence[ClientUpdate],
        *,
        algo_state: bytes | None = None,
        history: RoundHistory | None = None,
    ) -> AggregateResult:
        """:meth:`aggregate` on bare uploads (``base_round`` = the round each trained from), their claimed sample
        counts capped (:func:`n_samples_cap_of`)."""
        h = plan.height
        ups = cap_sample_counts(sorted(uploads, key=lambda u: (u.peer, u.base_round)), self.n_samples_cap)
        base: dict[int, np.ndarray] = {}
        for u in ups:
            if u.base_round == h:
                base[h] = model
            elif history is not None and u.base_round in history.models:
                base[u.base_round] = history.models[u.base_round]
            else:
                raise ValueError(f"no base model of round {u.base_round} for the stale update of {u.peer}")
        info = RoundInfo(
            fl_round=h,
            members=self.members,
            sampled=plan.trainers,
            base_models=MappingProxyType(base),
            public=self.public,
        )
        return self.strategy.aggregate(info, model, ups, state=algo_state, rng=round_rng(self.ctx.genesis_hash, h))

    def coordinator_record(self, plan: RoundPlan, result: AggregateResult) -> dict[str, Any]:
        return {"algorithm": self.genesis.protocol.algorithm, "clients": list(plan.trainers), **dict(result.record)}

    # --- a height decided by a re-drawn committee -----------------------------------------------

    def skip_payload(self, state: ChainState, view: int) -> Payload:
        """The one payload a block proposed in committee attempt ``a`` ≥ 1 (``view >= ledger.ATTEMPT_VIEWS``) may
        carry: the height outlasted its committee (the genesis' ``redraw_ticks``), and the
        committee re-drawn for it (``ChainContext.view_committee``) knows nothing of its round: the trainers sent
        their updates to the other one, and in committee mode only that one scored them. So the height is a skip: no
        update, the model and the algorithm state unchanged, no evidence (the next block takes it), and
        ``record = {"skipped": a}``; the next committee is the sampling rule's (coordinator mode), or the
        re-drawn committee itself (committee mode: the election needs scores, and that committee just showed it
        can reach quorum). A pure function of the state and the view: every validator builds the same one, so a
        proposal that differs is provably wrong, and a primary has nothing to choose."""
        attempt = view // ATTEMPT_VIEWS
        if attempt < 1:
            raise ValueError(f"view {view} is of the first committee attempt: its height has a round")
        h = state.height + 1
        nxt = tuple(self.ctx.view_committee(state, h, view)) if self.committee_mode else (
            self.next_committee_coordinator(state))
        return Payload(updates=(), model_digest=state.model_digest, next_committee=nxt, record={"skipped": attempt},
                       state_digest=state.state_digest)

    # --- validation (shared by pBFT validate and the offline audit) ----------------------------

    def check_payload(
        self,
        state: ChainState,
        payload: Payload,
        model: np.ndarray,
        blobs: BlobSource,
        *,
        algo_state: bytes | None = None,
        history: RoundHistory | None = None,
        held: Mapping[tuple[str, int], tuple[bytes, np.ndarray]] | None = None,
        view: int = 0,
    ) -> tuple[str | None, np.ndarray | None, bytes | None, bytes | None]:
        """Re-execute a round: ``(None, new_model, model_blob, new_algo_state)`` if ``payload`` is right, else
        ``(reason, None, None, None)``.

        ``model`` is the global model before the round (its digest is ``state.model_digest``); ``history``
        the recent rounds (semi-synchronous strategies); ``held`` maps ``(peer, round)`` to ``(digest, vector)``
        for updates the caller already decoded and checked, so they are not decoded again. ``view``: the view the
        block was proposed in (its header's); one of a re-drawn committee's must carry :meth:`skip_payload`.
        """
        if view >= ATTEMPT_VIEWS:
            if payload.hash() != self.skip_payload(state, view).hash():
                return ("a block proposed by a re-drawn committee (view >= 2^32) must skip the round: no update, the "
                        "model and state unchanged, no evidence, the rule's next committee"), None, None, None
            return None, model, vector_to_blob(model), algo_state
        plan = self.plan(state, history)
        reason = self._check_updates(plan, payload, history)
        if reason is None:
            reason = self._check_evidence_and_committee(state, plan, payload)
        if reason is not None:
            return reason, None, None, None
        reason, vectors = self._update_vectors(payload, self.upload_dim(model.shape[0]), blobs, held)
        if reason is not None:
            return reason, None, None, None
        try:
            result = self.aggregate(state, plan, model, vectors, algo_state=algo_state, history=history)
        except (LearningError, ValueError) as e:
            return f"aggregation failed: {e}", None, None, None
        if not self.committee_mode:
            plan_record = self.coordinator_record(plan, result)
            if encode(payload.record) != encode(plan_record):
                return "the round record differs from re-execution", None, None, None
        model_blob = vector_to_blob(result.model)
        if self.ctx.caches.sha256(model_blob) != payload.model_digest:
            return "the new model digest differs from re-execution of the aggregation", None, None, None
        state_digest = None if result.state is None else self.ctx.caches.sha256(result.state)
        if state_digest != payload.state_digest:
            return "the algorithm state digest differs from re-execution", None, None, None
        return None, result.model, model_blob, result.state

    def _check_updates(self, plan: RoundPlan, payload: Payload, history: RoundHistory | None) -> str | None:
        """Why the payload's update commitments are wrong (order, trainer of their round, staleness window, a
        stale one included twice, signature), or None."""
        h = plan.height
        ctx = self.ctx
        keys = [(u.peer, u.fl_round) for u in payload.updates]
        if keys != sorted(keys) or len(set(keys)) != len(keys):
            return "updates are not sorted by (peer, round) or repeat one"
        for u in payload.updates:
            if u.fl_round == h:
                if u.peer not in plan.trainers:
                    return f"update of {u.peer} who is not a trainer of height {h}"
            else:
                if not h - self.staleness <= u.fl_round < h:
                    return f"update of {u.peer} is for round {u.fl_round}, outside the staleness window"
                past = history.plans.get(u.fl_round) if history is not None else None
                if past is None or u.peer not in past.trainers:
                    return f"stale update of {u.peer} for round {u.fl_round}: not a trainer of that round"
                if u.peer in history.included.get(u.fl_round, ()):  # type: ignore[union-attr]
                    return f"stale update of {u.peer} for round {u.fl_round} was already included"
            try:
                ctx.keys.verify(
                    u.peer,
                    u.signature,
                    update_sign_bytes(ctx.chain_id, u.peer, u.fl_round, u.digest, u.n_samples),
                    what="update commitment",
                )
            except LedgerError as e:
                return str(e)
        return None

    def _check_evidence_and_committee(self, state: ChainState, plan: RoundPlan, payload: Payload) -> str | None:
        """Why the payload's evidence, or its election (committee mode) or next committee (coordinator mode), is
        wrong, or None."""
        h = plan.height
        ctx = self.ctx
        for ev in payload.evidence:
            try:
                check_evidence(ctx, h, ev)
            except LedgerError as e:
                return f"evidence: {e}"
            claim = check_evidence_claim(ctx, ev)
            if claim is not None:
                return f"evidence against {ev.offender}: {claim}"
        if self.committee_mode:
            assert self.cmfl is not None
            return check_cmfl_payload(
                ctx, payload, height=h, committee=plan.committee, training=plan.trainers, params=self.cmfl
            )
        if payload.next_committee != self.next_committee_coordinator(state):
            return "next committee differs from the sampling rule"
        return None

    @staticmethod
    def _update_vectors(
        payload: Payload, dim: int, blobs: BlobSource, held: Mapping[tuple[str, int], tuple[bytes, np.ndarray]] | None,
    ) -> tuple[str | None, list[tuple[UpdateCommitment, np.ndarray]]]:
        """The payload's updates with their vectors (``held`` ones as they are, the others decoded from ``blobs``);
        or why a blob is missing or invalid."""
        vectors = []
        for u in payload.updates:
            have = None if held is None else held.get((u.peer, u.fl_round))
            if have is not None and have[0] == u.digest and have[1].shape == (dim,):
                vectors.append((u, have[1]))
                continue
            try:
                blob = blobs.get(u.digest)
                vectors.append((u, blob_to_vector(blob, dim=dim, what=f"update of {u.peer}")))
            except (LedgerError, InvalidUpdateError) as e:
                return f"missing or invalid update blob of {u.peer}: {e}", vectors
        return None, vectors


def evidence_key(ev: Evidence) -> bytes:
    """Dedup key of an evidence item."""
    return sha256(encode(ev.to_value()))


def proposal_evidence_key(ev: Evidence) -> bytes:
    """Which refused proposal an ``invalid_proposal`` item names (its signed pre-prepare), whatever reason it
    gives: two validators that refused the same proposal hold the same key."""
    return sha256(encode([ev.kind, ev.offender, ev.height, ev.view, [x.to_value() for x in ev.exhibits]]))
