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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from learning._errors import ConfigError
from learning._preaggregators import format_aggregator, parse_aggregator

__all__ = [
    "STRATEGIES",
    "AggregateResult",
    "ClientUpdate",
    "FedAvg",
    "FedRo",
    "Strategy",
    "register_strategy",
    "strategy_from_params",
]


@dataclass(frozen=True, slots=True)
class ClientUpdate:
    """One client's update for a round: ``delta = θ_local − θ_global`` (float32, shape ``(d,)``)."""

    peer: str
    delta: np.ndarray
    n_samples: int


@dataclass(frozen=True, slots=True)
class AggregateResult:
    """What a strategy decides: the new global model, a canonical record for the block, the new state."""

    model: np.ndarray
    record: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    state: bytes | None = None


class Strategy(Protocol):
    """Server logic of one algorithm (coordinator mode)."""

    name: ClassVar[str]

    def clients_per_round(self, members: int) -> int:
        """How many clients the coordinator samples per round out of ``members``."""
        ...

    def aggregate(
        self,
        fl_round: int,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        """The new global model from ``model`` and the round's ``updates`` (sorted by peer)."""
        ...


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


def strategy_from_params(name: str, params: Mapping[str, Any]) -> Strategy:
    """Resolve ``name`` and build it from the genesis ``protocol.params`` (the config boundary)."""
    factory = STRATEGIES.get(name)
    if factory is None:
        raise ConfigError(f"unknown strategy {name!r}; known: {', '.join(sorted(STRATEGIES))}")
    return factory(params)


def _take(params: Mapping[str, Any], allowed: dict[str, type], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in params.items():
        if k not in allowed:
            continue  # other keys belong to other layers (committee sizes, local training, ...)
        t = allowed[k]
        if t is float and type(v) is int:
            v = float(v)
        if type(v) is not t:
            raise ConfigError(f"{what}: parameter {k} must be {t.__name__}, got {type(v).__name__}")
        out[k] = v
    return out


def _stack(updates: Sequence[ClientUpdate], d: int) -> np.ndarray:
    peers = [u.peer for u in updates]
    if peers != sorted(peers) or len(set(peers)) != len(peers):
        raise ValueError("updates must be sorted by peer and unique")
    x = np.empty((len(updates), d), dtype=np.float32)
    for i, u in enumerate(updates):
        if u.delta.shape != (d,):
            raise ValueError(f"update of {u.peer} has shape {u.delta.shape}, model has ({d},)")
        x[i] = u.delta
    return x


@register_strategy("fedavg")
@dataclass(frozen=True, slots=True, kw_only=True)
class FedAvg:
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
        return cls(**_take(params, {"clients": int, "server_lr": float}, "fedavg"))

    def clients_per_round(self, members: int) -> int:
        return members if self.clients == 0 else min(self.clients, members)

    def aggregate(
        self,
        fl_round: int,
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


@register_strategy("fedro")
@dataclass(frozen=True, slots=True, kw_only=True)
class FedRo:
    """FedRo (seed_004 Algorithm 1): ``x_{t+1} = x_t + γ_s · A(u_t^{(i)}, i ∈ S_t)``.

    ``A`` is any aggregator chain (default NNM then coordinate-wise trimmed mean, the paper's choice),
    called with tolerance ``f = b̂``; ``clients = n̂``. Use :func:`learning.recommend` to choose n̂ and b̂.
    """

    clients: int
    f: int
    aggregator: str = ""
    server_lr: float = 1.0
    name: ClassVar[str] = "fedro"

    def __post_init__(self) -> None:
        if self.clients < 1:
            raise ConfigError(f"fedro: clients (n̂) must be >= 1, got {self.clients}")
        if not 0 <= 2 * self.f < self.clients:
            raise ConfigError(f"fedro: need 0 <= 2f < n̂ (f={self.f}, n̂={self.clients})")
        spec = self.aggregator or f"nnm(f={self.f}) > trimmed_mean(f={self.f})"
        rule = parse_aggregator(spec)
        if not rule.bit_reproducible:
            raise ConfigError(f"fedro: aggregator {spec!r} is not bit-reproducible; validators could not agree")
        object.__setattr__(self, "aggregator", format_aggregator(rule))
        if not self.server_lr > 0:
            raise ConfigError(f"fedro: server_lr must be > 0, got {self.server_lr}")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FedRo:
        kw = _take(params, {"clients": int, "f": int, "aggregator": str, "server_lr": float}, "fedro")
        for k in ("clients", "f"):
            if k not in kw:
                raise ConfigError(f"fedro: parameter {k} is required")
        return cls(**kw)

    def clients_per_round(self, members: int) -> int:
        return min(self.clients, members)

    def aggregate(
        self,
        fl_round: int,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        if not updates:
            return AggregateResult(model=model, record={"aggregator": self.aggregator, "inputs": 0})
        x = _stack(updates, model.shape[0])
        # The rule's tolerance must stay below half of the inputs actually received (late clients drop
        # out); with too few inputs fall back to the coordinate-wise median, which needs no f (never the mean).
        spec = self.aggregator if 2 * self.f < len(updates) else "median"
        agg = parse_aggregator(spec)(x, rng=rng)
        new = (model.astype(np.float64) + self.server_lr * np.asarray(agg, dtype=np.float64)).astype(np.float32)
        return AggregateResult(model=new, record={"aggregator": spec, "inputs": len(updates)})
