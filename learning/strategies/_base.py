"""Server-side strategies for coordinator mode: pure aggregation logic behind one typed plug-in interface.

A strategy is Flower's ``aggregate`` half of a server algorithm, made deterministic so that every
validator re-executes the coordinator's work bit for bit: inputs come sorted by peer id, accumulation is
float64 in that fixed order, the result is cast to float32 once. Randomness (bucketing, client sampling
draws) only through the ``rng`` the node derives from the previous block hash.

State that spans rounds (MIFA's table, SCAFFOLD's control variates, ...) is an opaque ``bytes`` blob in
and out of :meth:`Strategy.aggregate`; the node stores it content-addressed and the block references it
(``payload.state_digest``), so a new coordinator resumes exactly after a view change.

New strategies register with :func:`register_strategy` and are resolved by name only at the config
boundary (:func:`strategy_from_params`), from the genesis' ``protocol.algorithm`` and ``protocol.params``.
The node core never names a strategy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from learning._config import take_params
from learning._errors import ConfigError
from learning.training import LRSchedule, schedule_spec

__all__ = [
    "STRATEGIES",
    "AggregateResult",
    "ClientJob",
    "ClientUpdate",
    "ClientUpload",
    "FedAvg",
    "HOST_PARAM_KEYS",
    "LocalOutcome",
    "LocalTrain",
    "PublicEval",
    "RoundInfo",
    "Strategy",
    "StrategyBase",
    "STRATEGY_LR_KEYS",
    "STRATEGY_LR_SCHEDULES",
    "N_SAMPLES_CAP_DEFAULT",
    "cap_sample_counts",
    "check_order",
    "strategy_lr_schedule",
    "register_strategy",
    "strategy_from_params",
]


@dataclass(frozen=True, slots=True)
class ClientUpdate:
    """One client's upload, as the server sees it.

    ``delta`` is the upload vector (float32, shape ``(strategy.upload_dim(d),)``): ``θ_local − θ_base`` for the
    plain strategies, whatever :meth:`Strategy.local_update` produced otherwise (SCAFFOLD: ``[Δy ‖ Δc]``).
    ``base_round`` is the round whose global model the client trained from; it is below the aggregating round
    only for strategies with ``max_staleness > 0`` (semi-synchronous / asynchronous: Sself, FedAsync).
    """

    peer: str
    delta: np.ndarray
    n_samples: int
    base_round: int = -1
    """-1 = fresh (trained from this round's model); the node fills in the real round."""


class PublicEval(Protocol):
    """Scores a model vector on the public split the host holds (sself spec §1.3): what Sself's entropy filter and
    loss weighting need. Must be deterministic: every validator re-executes it and must get the same floats."""

    def __call__(self, model: np.ndarray, /) -> tuple[float, float]:
        """``(E_avg, F_pub)``: mean prediction entropy in nats (eq. 4) and mean cross-entropy loss."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundInfo:
    """What the server side knows about a round beyond the updates (all deterministic from the chain)."""

    fl_round: int
    """The aggregating round (= block height, from 1)."""
    members: tuple[str, ...]
    """Every member of the federation, sorted (MIFA/MimiC tables, SCAFFOLD's 1/N)."""
    sampled: tuple[str, ...]
    """The clients asked to train this round (S̃_t), sorted."""
    base_models: Mapping[int, np.ndarray] = field(default_factory=lambda: MappingProxyType({}))
    """Global model each stale update was trained from, by ``base_round`` (only ``max_staleness`` > 0)."""
    public: PublicEval | None = None
    """The host's public-split evaluator (only for strategies with ``needs_public``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AggregateResult:
    """What a strategy decides: the new global model, a canonical record for the block, the new state."""

    model: np.ndarray
    record: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    state: bytes | None = None


# --- client side ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientJob:
    """One local job as the client side of a strategy sees it."""

    fl_round: int
    model: np.ndarray
    """The global model to start from (float32, ``(d,)``; read-only)."""
    server_state: bytes | None
    """The strategy state committed by the previous block (SCAFFOLD's ``c`` lives there), or None."""
    client_state: bytes | None
    """This client's own state from its previous job (client momentum, SCAFFOLD's ``c_i``); None the first time."""
    lr: float
    """The host's learning rate for this round (the scenario's schedule); a strategy may use its own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalOutcome:
    """What one call of the host's local trainer returns (float32 numpy vectors)."""

    delta: np.ndarray
    """``z_K − θ`` (float32, ``(d,)``)."""
    n_samples: int
    steps: int
    lr: float
    loss: float
    momentum_buffer: np.ndarray | None = None


class LocalTrain(Protocol):
    """The host's local trainer (K local steps or E epochs of the scenario's training config on this client's
    data, seeded by the host): ``gradient_correction`` is added to every stochastic gradient (SCAFFOLD's
    ``c − c_i``); ``momentum_buffer`` seeds the momentum state (client momentum persisting across rounds; the
    scenario's momentum ρ applies); ``prox_mu`` overrides the FedProx μ (None = the host's config)."""

    def __call__(
        self,
        model: np.ndarray,
        *,
        lr: float,
        gradient_correction: np.ndarray | None = None,
        momentum_buffer: np.ndarray | None = None,
        prox_mu: float | None = None,
    ) -> LocalOutcome: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientUpload:
    """A client's result: the vector it signs and sends, its sample count, its new private state."""

    vector: np.ndarray
    n_samples: int
    client_state: bytes | None = None


class Strategy(Protocol):
    """Server logic of one algorithm (coordinator mode), plus its client side.

    Subclass :class:`StrategyBase` for the defaults (synchronous, plain deltas, no public data).
    """

    name: ClassVar[str]
    max_staleness: int
    """Oldest ``fl_round − base_round`` the server accepts (0 = synchronous: late updates are dropped)."""
    needs_public: bool
    """True if :meth:`aggregate` needs ``info.public`` (the host must then provide a public split)."""

    def clients_per_round(self, members: int) -> int:
        """How many clients the coordinator samples per round out of ``members``."""
        ...

    def upload_dim(self, d: int) -> int:
        """Length of one upload vector for a model of ``d`` parameters."""
        ...

    def local_update(self, job: ClientJob, train: LocalTrain) -> ClientUpload:
        """The client side: run ``train`` (once, usually) and build the upload."""
        ...

    def aggregate(
        self,
        info: RoundInfo,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        """The new global model from ``model`` and the round's ``updates`` (sorted by peer, then base round)."""
        ...


class StrategyBase:
    """Defaults for :class:`Strategy`: every member trains, plain deltas, synchronous, no public data."""

    __slots__ = ()
    max_staleness: ClassVar[int] = 0
    needs_public: ClassVar[bool] = False

    def clients_per_round(self, members: int) -> int:
        clients = getattr(self, "clients", 0)
        return members if clients == 0 else min(clients, members)

    def upload_dim(self, d: int) -> int:
        return d

    def local_update(self, job: ClientJob, train: LocalTrain) -> ClientUpload:
        out = train(job.model, lr=job.lr)
        return ClientUpload(vector=out.delta, n_samples=out.n_samples)


STRATEGIES: dict[str, Callable[[Mapping[str, Any]], Strategy]] = {}
_S = TypeVar("_S")


def register_strategy(name: str) -> Callable[[type[_S]], type[_S]]:
    """Class decorator: register a strategy class under ``name`` (built with ``cls.from_params``)."""

    def deco(cls: type[_S]) -> type[_S]:
        if name in STRATEGIES:
            raise ConfigError(f"strategy {name!r} registered twice")
        STRATEGIES[name] = cls.from_params  # type: ignore[attr-defined]
        return cls

    return deco


HOST_PARAM_KEYS: frozenset[str] = frozenset(
    {"sampling_seed", "sampling_rule", "committee_epoch", "n_samples_cap", "time_drift_ms", "redraw_ticks", "app",
     "training", "data", "link_mbit"}
)
"""Reserved ``protocol.params`` keys that the host's round rules (or the chain) read, never a strategy:
``sampling_seed`` (``node._rounds.RoundRules``: experiment-seeded client sampling), ``sampling_rule`` (how members
are drawn), ``committee_epoch`` (heights per committee in coordinator mode), ``n_samples_cap`` (the cap on claimed
sample counts, :func:`cap_sample_counts`), ``time_drift_ms`` (``ledger.ProtocolParams.time_drift_ms``: how far
from a validator's clock a block time may be), ``redraw_ticks`` (``ledger.ProtocolParams.redraw_ticks``: when a
height's committee is re-drawn), ``app`` (``node.apps``: the pinned app's name and digest), ``training`` and ``data``
(``node.world``: the agreed training plan and the data contract every member's data must fit), ``link_mbit``
(``node._deadlines``: the link rate the round deadlines plan for).
:func:`strategy_from_params` strips them before the strategy sees its parameters, so a strategy's own parameter
check never meets them; a strategy must not use these names."""


def strategy_from_params(name: str, params: Mapping[str, Any]) -> Strategy:
    """Resolve ``name`` and build it from the genesis ``protocol.params`` (the config boundary).

    The reserved host keys (:data:`HOST_PARAM_KEYS`) are removed first; every other key reaches the
    strategy's ``from_params`` unchanged."""
    factory = STRATEGIES.get(name)
    if factory is None:
        raise ConfigError(f"unknown strategy {name!r}; known: {', '.join(sorted(STRATEGIES))}")
    return factory({k: v for k, v in params.items() if k not in HOST_PARAM_KEYS})


STRATEGY_LR_SCHEDULES = ("constant", "exponential", "inverse_sqrt")
"""Schedules a strategy may own through ``lr_schedule`` (see :mod:`learning.training._schedules`)."""
STRATEGY_LR_KEYS: dict[str, type] = {"clients": int, "lr": float, "lr_schedule": str, "lr_gamma": float, "lr_min": float}
"""The ``protocol.params`` keys of a strategy-owned learning rate (with client sampling), one meaning everywhere."""


def strategy_lr_schedule(
    what: str, *, lr: float, lr_schedule: str, lr_gamma: float | None, lr_min: float | None
) -> LRSchedule:
    """The schedule a strategy owns (mimic spec §2.7 and the unavailability spec strategies alike): ``"constant"`` ``η = lr``,
    ``"inverse_sqrt"`` ``η_t = lr/√(t+1)``, ``"exponential"`` ``η_t = max(lr·lr_gamma^t, lr_min)`` (floor 1e-5
    by default, the mimic spec code's), evaluated at ``t = fl_round − 1`` by the caller."""
    if not (math.isfinite(lr) and lr > 0):
        raise ConfigError(f"{what}: lr must be a positive finite number, got {lr}")
    if lr_schedule not in STRATEGY_LR_SCHEDULES:
        raise ConfigError(f"{what}: lr_schedule must be one of {', '.join(STRATEGY_LR_SCHEDULES)}, got {lr_schedule!r}")
    if lr_schedule == "exponential":
        if lr_gamma is None:
            raise ConfigError(f"{what}: lr_schedule 'exponential' needs lr_gamma")
        floor = 1e-5 if lr_min is None else lr_min
        return schedule_spec("exponential", {"lr0": lr, "gamma": lr_gamma, "floor": floor})
    if lr_gamma is not None or lr_min is not None:
        raise ConfigError(f"{what}: lr_gamma and lr_min apply only to lr_schedule 'exponential'")
    return schedule_spec(lr_schedule, {"lr" if lr_schedule == "constant" else "lr0": lr})


def check_order(updates: Sequence[ClientUpdate]) -> None:
    """Updates come sorted by ``(peer, base_round)`` and each pair once (the node's canonical order)."""
    keys = [(u.peer, u.base_round) for u in updates]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        raise ValueError("updates must be sorted by (peer, base_round) and unique")


N_SAMPLES_CAP_DEFAULT = 4
"""Default ratio of :func:`cap_sample_counts` (the genesis' ``protocol.params.n_samples_cap`` when absent)."""


def cap_sample_counts(updates: Sequence[ClientUpdate], ratio: int) -> list[ClientUpdate]:
    """The updates with every claimed sample count capped at ``ratio`` times the round's median claim.

    ``n_k`` is what a client signs in its update commitment, and the weight numerator of every rule that weighs
    clients by data size: FedAvg's ``θ_{t+1} = θ_t + Σ_k (n_k / Σ_j n_j) Δ_k`` (McMahan et al. 2017; CMFL's
    aggregation, cmfl spec eq. (5): ``p_{k,S} = n_k / Σ_{j∈S} n_j``), Sself's and FedAsync's ``β_t(k) ∝ m_k /
    F_pub^δ`` and ``α_t(i) ∝ Σ_{k∈U^(i)} m_k / (t − i + 1)^c`` (sself spec eqs. (5), (9), (10)), the ``n_k``-weighted
    robust rules. The papers' server knows ``n_k``; in a peer-to-peer network nobody can check a claim (the data
    is private), and one client claiming ``2^53 − 1`` took the whole weight of every round (what is left
    under the cap: ``benchmarks/claim_gap.py``; sself spec §7 item 17: "cap or verify m_k"). So every validator, and
    the auditor, re-executes every round with the counts this function gives:

    * ``m`` = the lower median of the claims (``sorted(n)[(len − 1) // 2]``), ``cap = ratio · m``;
    * each count becomes ``min(n_k, cap)``; ``ratio = 0`` leaves the claims as signed.

    Integers only, and independent of the updates' order. The bound: while honest clients are more than half of
    the round's updates, ``m`` is at most the largest honest claim, so a client claiming any count weighs at most
    as much as ``ratio`` honest clients of median size (with ``k`` such honest clients, ``ratio / (k + ratio)`` of
    a FedAvg round). The price: an honest client whose data is more than ``ratio`` times the round's median loses
    weight too (with ``ratio = 4`` no bundled scenario's ledger changes: ``benchmarks/heads.py``, 10 and 30 rounds,
    the non-IID partitions of sself spec and cmfl spec included). Strategies that weigh by sizes registered in the
    genesis (unavailability spec's ``sizes``) never read ``n_k``.
    """
    if type(ratio) is not int or ratio < 0:
        raise ValueError(f"n_samples cap ratio must be an int >= 0, got {ratio!r}")
    if ratio == 0 or not updates:
        return list(updates)
    counts = sorted(u.n_samples for u in updates)
    cap = ratio * counts[(len(counts) - 1) // 2]
    return [u if u.n_samples <= cap else replace(u, n_samples=cap) for u in updates]


def _stack(updates: Sequence[ClientUpdate], d: int) -> np.ndarray:
    """The uploads as one ``(n, d)`` float32 stack, after checking order, uniqueness and shapes."""
    check_order(updates)
    x = np.empty((len(updates), d), dtype=np.float32)
    for i, u in enumerate(updates):
        if u.delta.shape != (d,):
            raise ValueError(f"update of {u.peer} has shape {u.delta.shape}, model has ({d},)")
        x[i] = u.delta
    return x


@register_strategy("fedavg")
@dataclass(frozen=True, slots=True, kw_only=True)
class FedAvg(StrategyBase):
    """FedAvg (McMahan et al. 2017): ``θ_{t+1} = θ_t + η_s Σ_k (n_k / Σ_j n_j) Δ_k``.

    Parameters
    ----------
    clients:
        Clients sampled per round (0 = every member).
    server_lr:
        Server step ``η_s`` (1.0 = plain model averaging).
    """

    clients: int = 0
    server_lr: float = 1.0
    name: ClassVar[str] = "fedavg"

    def __post_init__(self) -> None:
        if self.clients < 0:
            raise ConfigError(f"fedavg: clients must be >= 0, got {self.clients}")
        if not self.server_lr > 0:
            raise ConfigError(f"fedavg: server_lr must be > 0, got {self.server_lr}")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FedAvg:
        return cls(**take_params(params, {"clients": int, "server_lr": float}, "fedavg"))

    def aggregate(
        self,
        info: RoundInfo,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        if not updates:
            return AggregateResult(model=model, record={"weights": []})
        d = model.shape[0]
        _stack(updates, d)  # validates order and shapes
        total = sum(u.n_samples for u in updates)
        weights = [u.n_samples / total if total else 1.0 / len(updates) for u in updates]
        acc = np.zeros(d, dtype=np.float64)
        for w, u in zip(weights, updates):  # fixed order: bit-reproducible
            acc += w * u.delta.astype(np.float64)
        new = (model.astype(np.float64) + self.server_lr * acc).astype(np.float32)
        return AggregateResult(model=new, record={"weights": [float(w) for w in weights]})
