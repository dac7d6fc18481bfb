"""Strategies of unavailability spec ("FL in the presence of adversarial client unavailability") and its baselines.

=================== ============================================================== =============================
name                server rule                                                    spec
=================== ============================================================== =============================
``fedavg_v``        ``θ_{t+1} = θ_t + β Σ_{i∈S_t} w_i Δ_i``, ``w_i = n_i/N``         unavailability spec §2.1, eq. (2)
``fedprox_v``       the same, clients minimise ``ℓ + (μ/2)‖z − θ_t‖²``              unavailability spec §2.2
``fedprox``         naive FedProx: FedAvg's renormalised ``n_i / Σ_{S_t} n_j``      unavailability spec §2.4
``mifa``            ``θ_{t+1} = θ_t − η_t Σ_{i∈[M]} w_i G^i``, stale ``G^i`` kept   unavailability spec (44), mimic spec §2.4
``cclip``           ``θ_{t+1} = θ_t − η CC({m_i}_{i∈[M]}, w)``, stale momenta kept  unavailability spec §2.6, eq. (43)
``gm``              the same with the smoothed-Weiszfeld geometric median           unavailability spec §2.6
``bucketing_cclip`` bucketing (size 2) then centered clipping                      unavailability spec §2.6, [KHJ22] Alg. 1
``bucketing_gm``    bucketing (size 2) then the geometric median                   unavailability spec §2.6
=================== ============================================================== =============================

Naive FedAvg is :class:`learning.strategies.FedAvg` (``"fedavg"``, unavailability spec §2.3); FedRo's takeover
(``fedro_takeover``, fedro spec Fig. 2) is in :mod:`learning.strategies._fedro`.

Population weights
------------------
The variant's weights ``w_i = n_i / N`` use ``N`` summed over **all** ``M`` members (§7 item 2), so the server must
know the population: the ``sizes`` parameter lists ``n_i`` per member in sorted-member order (the genesis fixes it;
a client's self-reported ``n_samples`` never changes its weight). Without ``sizes`` every member weighs ``1/M`` —
exactly the paper's weights for balanced data (§1.1: ``n_i = N/M ⇒ w_i = 1/M``).

Learning rate of the round
--------------------------
MIFA (gradient units) and the momentum baselines apply the server step ``θ_t − η_t · (…)`` with the round's
learning rate, and MIFA rescales stale memories by the *current* ``η_t`` (§2.5, §7 item 12), so both sides must
know ``η_t``. Two ways, chosen by configuration:

* default: the host's schedule (``job.lr``) is the single source; the client appends the rate it trained with,
  ``[vector ‖ η]`` (``upload_dim(d) = d + 1``), and the server uses the (lower) median ``η`` of the round's fresh
  uploads. An upload whose ``η`` is not a positive finite number is rejected (listed in the record), never fatal.
* ``lr`` (with ``lr_schedule``, ``lr_gamma``, ``lr_min``) set: the strategy owns the schedule exactly like the
  mimic spec strategies (:mod:`learning.strategies._mimic`): clients train at ``η(fl_round − 1)``, the server uses the
  same value, the upload is the bare vector.

Determinism
-----------
Updates arrive sorted by peer; every sum runs in sorted-member order in float64 and is cast to float32 once.
Cross-round state (MIFA's update table, the momentum table) is :class:`MemberTable`: canonical msgpack (``ledger``
encoding) with the rows as raw little-endian float32 bytes, decoded strictly. A round with no update returns the
old model and the old state (mimic spec §7 item 7: "skip the server step if ``S_t = ∅``").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ledger import DecodeError, decode, encode
from learning._config import take_params
from learning._errors import ConfigError
from learning.models import blob_to_vector, vector_to_blob
from learning.robust import Bucketing, CenteredClipping, Chain, GeometricMedian, format_aggregator
from learning.strategies._base import (
    AggregateResult,
    ClientJob,
    ClientUpdate,
    ClientUpload,
    FedAvg,
    LocalTrain,
    RoundInfo,
    STRATEGY_LR_KEYS,
    StrategyBase,
    _stack,
    register_strategy,
    strategy_lr_schedule,
)
from learning.training import LRSchedule

__all__ = [
    "GM",
    "MIFA",
    "BucketingCClip",
    "BucketingGM",
    "CClip",
    "FedAvgV",
    "FedProx",
    "FedProxV",
    "MemberTable",
    "population_weights",
]


# ---------------------------------------------------------------------------------------------------------------
# Shared helpers


def _parse_sizes(params: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``sizes`` from ``protocol.params`` (a TOML array), as a tuple; absent → nothing."""
    if "sizes" not in params:
        return {}
    v = params["sizes"]
    if not isinstance(v, list | tuple):
        raise ConfigError(f"{what}: parameter sizes must be a list of ints, got {type(v).__name__}")
    return {"sizes": tuple(v)}


def _check_sizes(sizes: object, what: str) -> None:
    if not isinstance(sizes, tuple) or any(type(n) is not int or n < 0 for n in sizes):
        raise ConfigError(f"{what}: sizes must be a list of non-negative ints (n_i per member), got {sizes!r}")
    if sizes and sum(sizes) <= 0:
        raise ConfigError(f"{what}: sizes must have a positive sum")


def _check_common(obj: Any) -> None:
    """``clients >= 0`` and valid ``sizes`` (every strategy here has both)."""
    if type(obj.clients) is not int or obj.clients < 0:
        raise ConfigError(f"{obj.name}: clients must be an int >= 0, got {obj.clients!r}")
    _check_sizes(obj.sizes, obj.name)


def _positive(obj: Any, attr: str, *, allow_zero: bool = False) -> None:
    v = getattr(obj, attr)
    ok = type(v) is float and math.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if not ok:
        raise ConfigError(f"{obj.name}: {attr} must be a finite float {'>=' if allow_zero else '>'} 0, got {v!r}")


def population_weights(sizes: Sequence[int], members: int, what: str = "strategy") -> np.ndarray:
    """``w_i = n_i / N`` over all members (unavailability spec §1.1), or ``1/M`` each when ``sizes`` is empty (float64)."""
    if members <= 0:
        raise ConfigError(f"{what}: the federation has no members")
    if not sizes:
        return np.full(members, 1.0 / members)
    if len(sizes) != members:
        raise ConfigError(f"{what}: sizes has {len(sizes)} entries for {members} members")
    return np.asarray(sizes, dtype=np.float64) / float(sum(sizes))


def _member_index(info: RoundInfo, updates: Sequence[ClientUpdate]) -> np.ndarray:
    """Position of each update's peer in ``info.members`` (which must be sorted and unique)."""
    members = info.members
    if list(members) != sorted(set(members)):
        raise ValueError("RoundInfo.members must be sorted and unique")
    where = {p: i for i, p in enumerate(members)}
    out = np.empty(len(updates), dtype=np.intp)
    for r, u in enumerate(updates):
        if u.peer not in where:
            raise ValueError(f"update from {u.peer!r}, which is not a member")
        out[r] = where[u.peer]
    return out


def _split_lr(x: np.ndarray, updates: Sequence[ClientUpdate], d: int) -> tuple[list[int], list[str], float]:
    """Rows whose trailing ``η`` is a positive finite number, the rejected peers, and the round's ``η_t``."""
    good: list[int] = []
    rejected: list[str] = []
    for r, u in enumerate(updates):
        lr = float(x[r, d])
        if math.isfinite(lr) and lr > 0.0:
            good.append(r)
        else:
            rejected.append(u.peer)
    if not good:
        return good, rejected, 0.0
    lrs = sorted(float(x[r, d]) for r in good)
    return good, rejected, lrs[(len(lrs) - 1) // 2]


def _skip(model: np.ndarray, state: bytes | None, record: Mapping[str, Any]) -> AggregateResult:
    """No usable update: the old model, the old state (mimic spec §7 item 7)."""
    return AggregateResult(model=model, record={**record, "skipped": True}, state=state)


# ---------------------------------------------------------------------------------------------------------------
# Per-member table (MIFA's G^i, the baselines' stale momenta)


@dataclass(frozen=True, slots=True)
class MemberTable:
    """One float32 row per member that has ever responded, in sorted peer order.

    Encoded as the canonical map ``{"dim": d, "peers": [...], "rows": bytes}`` (``ledger.encode``), ``rows`` the
    little-endian float32 bytes of the ``(len(peers), d)`` array.
    """

    peers: tuple[str, ...]
    rows: np.ndarray

    @classmethod
    def empty(cls, dim: int) -> MemberTable:
        return cls((), np.zeros((0, dim), dtype=np.float32))

    def encode(self) -> bytes:
        """Canonical bytes (same table ⇒ same bytes)."""
        rows = np.ascontiguousarray(self.rows, dtype="<f4")
        return encode({"dim": int(rows.shape[1]), "peers": list(self.peers), "rows": rows.tobytes()})

    @classmethod
    def decode(cls, data: bytes | None, *, members: Sequence[str], dim: int) -> MemberTable:
        """Strict inverse of :meth:`encode`; ``None`` is the initial (empty) table.

        Raises
        ------
        ValueError
            Not canonical, wrong keys, wrong dimension or byte length, unsorted/duplicate peers, a peer that is
            not a member, or a non-finite value.
        """
        if data is None:
            return cls.empty(dim)
        bound = (len(members) + 1) * (4 * dim + 1024) + 4096
        try:
            value = decode(data, bytes_max=bound)
        except DecodeError as e:
            raise ValueError(f"strategy state: {e}") from None
        if not isinstance(value, dict) or sorted(value) != ["dim", "peers", "rows"]:
            raise ValueError("strategy state: expected the keys dim, peers, rows")
        peers, rows = value["peers"], value["rows"]
        if type(value["dim"]) is not int or value["dim"] != dim:
            raise ValueError(f"strategy state: dimension {value['dim']!r}, the model has {dim}")
        if not isinstance(peers, tuple) or any(type(p) is not str for p in peers):
            raise ValueError("strategy state: peers must be a list of strings")
        if list(peers) != sorted(set(peers)):
            raise ValueError("strategy state: peers must be sorted and unique")
        if not set(peers) <= set(members):
            raise ValueError("strategy state: names a peer that is not a member")
        if type(rows) is not bytes or len(rows) != 4 * dim * len(peers):
            raise ValueError(f"strategy state: rows must be {len(peers)} x {dim} float32 bytes")
        arr = np.frombuffer(rows, dtype="<f4").reshape(len(peers), dim).astype(np.float32)
        if not np.isfinite(arr).all():
            raise ValueError("strategy state: non-finite row")
        return cls(tuple(peers), arr)

    def updated(self, fresh: Mapping[str, np.ndarray]) -> MemberTable:
        """A new table with ``fresh`` rows replacing (or adding) those peers' rows."""
        old = dict(zip(self.peers, self.rows, strict=True))
        old.update(fresh)
        peers = tuple(sorted(old))
        dim = self.rows.shape[1]
        rows = np.empty((len(peers), dim), dtype=np.float32)
        for r, p in enumerate(peers):
            rows[r] = old[p]
        return MemberTable(peers, rows)

    def dense(self, members: Sequence[str]) -> np.ndarray:
        """``(M, d)`` float32 stack in member order; members without a row get zeros (unavailability spec §7 items 12–13)."""
        out = np.zeros((len(members), self.rows.shape[1]), dtype=np.float32)
        where = {p: i for i, p in enumerate(members)}
        for r, p in enumerate(self.peers):
            out[where[p]] = self.rows[r]
        return out


# ---------------------------------------------------------------------------------------------------------------
# FedAvg / FedProx variants (eq. 2)


@register_strategy("fedavg_v")
@dataclass(frozen=True, slots=True, kw_only=True)
class FedAvgV(StrategyBase):
    """The paper's FedAvg variant (unavailability spec §2.1, eq. 2): fixed population weights, global factor β.

    .. math::

        \\theta_{t+1} = \\theta_t + \\beta \\sum_{i \\in S_t} w_i (\\theta_{i,t+1} - \\theta_t),
        \\qquad w_i = n_i / N \\ (N \\text{ over all } M \\text{ members})

    No renormalisation over the survivors ``S_t``: a dropped client contributes a zero update, and
    ``θ_{t+1} − θ_t = (β n_{S_t}/N)·(θ^{naive}_{t+1} − θ_t)`` exactly (§2.1). ``β w_i > 1`` (imbalanced data) is
    intended extrapolation and is not clipped. The sum is simultaneous (Jacobi): every term uses ``θ_t`` (§7 item 1).

    Parameters
    ----------
    clients:
        ``K``, clients sampled per round (0 = every member).
    beta:
        ``β > 0``, the global amplification factor (the server step); 0 (default) means ``β = M/K`` (the paper's
        experiments).
    sizes:
        ``n_i`` per member in sorted-member order (empty: ``w_i = 1/M``, the balanced case).
    sequential_legacy:
        The official code's in-place loop ``θ ← θ + β w_i (θ_{i,t+1} − θ)`` over the clients in sorted order
        (§7 item 1; a bug kept for bit-compatibility studies only).

    Examples
    --------
    ``protocol.params = { clients = 10 }`` with 100 members gives β = 10 and ``w_i = 1/100``.
    """

    clients: int = 0
    beta: float = 0.0
    sizes: tuple[int, ...] = ()
    sequential_legacy: bool = False
    name: ClassVar[str] = "fedavg_v"
    _params: ClassVar[dict[str, type]] = {"clients": int, "beta": float, "sequential_legacy": bool}

    def __post_init__(self) -> None:
        _check_common(self)
        _positive(self, "beta", allow_zero=True)
        if type(self.sequential_legacy) is not bool:
            raise ConfigError(f"{self.name}: sequential_legacy must be a bool")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FedAvgV:
        return cls(**take_params(params, cls._params, cls.name), **_parse_sizes(params, cls.name))

    def beta_for(self, members: int) -> float:
        """β for a federation of ``members``: the configured value, or ``M / K``."""
        return self.beta if self.beta > 0 else members / self.clients_per_round(members)

    def aggregate(
        self,
        info: RoundInfo,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        m = len(info.members)
        beta = self.beta_for(m)
        if not updates:
            return AggregateResult(model=model, record={"beta": beta, "weights": [], "step": 0.0})
        d = model.shape[0]
        x = _stack(updates, d)
        w = population_weights(self.sizes, m, self.name)[_member_index(info, updates)]
        theta = model.astype(np.float64)
        if self.sequential_legacy:
            cur = theta.copy()
            for wi, row in zip(w, x, strict=True):
                cur += beta * wi * (theta + row.astype(np.float64) - cur)
            new = cur
        else:
            acc = np.zeros(d, dtype=np.float64)
            for wi, row in zip(w, x, strict=True):  # fixed (sorted) order: bit-reproducible
                acc += wi * row.astype(np.float64)
            new = theta + beta * acc
        mass = 0.0
        for wi in w:
            mass += float(wi)
        record = {"beta": beta, "weights": [float(v) for v in w], "step": beta * mass}
        return AggregateResult(model=new.astype(np.float32), record=record)


def _prox_update(mu: float, job: ClientJob, train: LocalTrain) -> ClientUpload:
    """FedProx client (unavailability spec §2.2): minimise ``ℓ_{i,t}(z) + (μ/2)‖z − θ_t‖²`` by the host's local solver."""
    out = train(job.model, lr=job.lr, prox_mu=mu)
    return ClientUpload(vector=out.delta, n_samples=out.n_samples)


@register_strategy("fedprox_v")
@dataclass(frozen=True, slots=True, kw_only=True)
class FedProxV(FedAvgV):
    """The paper's FedProx variant (unavailability spec §2.2): proximal local problem, eq. (2) aggregation.

    The client solves ``min_z ℓ_{i,t}(z) + (μ/2)‖z − θ_t‖²`` inexactly with the host's local solver
    (``train(..., prox_mu=μ)``; the paper uses ``s`` steps of momentum SGD 0.9 with a buffer reset every round,
    i.e. the host's ``momentum = 0.9`` and no persistent buffer). ``μ = μ_0 = 1/η_t`` of the theory; the
    experiments use a constant μ_0 (README example 0.1).

    Parameters
    ----------
    mu:
        Proximal coefficient ``μ_0 > 0`` (default 0.1).
    clients, beta, sizes, sequential_legacy:
        As :class:`FedAvgV`.
    """

    mu: float = 0.1
    name: ClassVar[str] = "fedprox_v"
    _params: ClassVar[dict[str, type]] = {**FedAvgV._params, "mu": float}

    def __post_init__(self) -> None:
        FedAvgV.__post_init__(self)
        _positive(self, "mu")

    def local_update(self, job: ClientJob, train: LocalTrain) -> ClientUpload:
        return _prox_update(self.mu, job, train)


@register_strategy("fedprox")
@dataclass(frozen=True, slots=True, kw_only=True)
class FedProx(FedAvg):
    """Naive FedProx (Li et al. 2020; unavailability spec §2.4): the proximal client of :class:`FedProxV`, FedAvg's
    aggregation renormalised over the responders, ``θ_{t+1} = θ_t + η_s Σ_{i∈S_t} (n_i / Σ_{j∈S_t} n_j) Δ_i``.

    Parameters
    ----------
    mu:
        Proximal coefficient ``μ > 0`` (default 0.1).
    clients, server_lr:
        As :class:`~learning.strategies.FedAvg`.
    """

    mu: float = 0.1
    name: ClassVar[str] = "fedprox"

    def __post_init__(self) -> None:
        FedAvg.__post_init__(self)
        _positive(self, "mu")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FedProx:
        return cls(**take_params(params, {"clients": int, "server_lr": float, "mu": float}, "fedprox"))

    def local_update(self, job: ClientJob, train: LocalTrain) -> ClientUpload:
        return _prox_update(self.mu, job, train)


# ---------------------------------------------------------------------------------------------------------------
# The round's learning rate: the host's (carried in the upload) or the strategy's own schedule




def _own_schedule(obj: Any) -> LRSchedule | None:
    """The strategy-owned schedule from ``lr``/``lr_schedule``/``lr_gamma``/``lr_min`` (None: the host's rate).

    Same parameters and meaning as the mimic spec strategies (:mod:`learning.strategies._mimic`), so one
    ``protocol.params`` configures MIFA and MimiC alike: ``"constant"`` ``η = lr``, ``"inverse_sqrt"``
    ``η_t = lr/√(t+1)``, ``"exponential"`` ``η_t = max(lr·lr_gamma^t, lr_min)`` (floor 1e-5 by default),
    ``t = fl_round − 1``.
    """
    what = obj.name
    if obj.lr is None:
        if obj.lr_schedule != "constant" or obj.lr_gamma is not None or obj.lr_min is not None:
            raise ConfigError(f"{what}: lr_schedule, lr_gamma and lr_min need lr (the strategy-owned rate)")
        return None
    return strategy_lr_schedule(
        what, lr=obj.lr, lr_schedule=obj.lr_schedule, lr_gamma=obj.lr_gamma, lr_min=obj.lr_min
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _RoundRate(StrategyBase):
    """Fields shared by MIFA and the momentum baselines: ``clients``, ``sizes`` and the round's learning rate.

    Without ``lr`` (default) the host's rate ``job.lr`` is used and travels in the upload (``[vector ‖ η]``, see
    the module docstring). With ``lr`` the strategy owns the schedule: clients train at ``η(fl_round − 1)`` and
    the server uses the same value; the upload is the bare vector.
    """

    clients: int = 0
    sizes: tuple[int, ...] = ()
    lr: float | None = None
    lr_schedule: str = "constant"
    lr_gamma: float | None = None
    lr_min: float | None = None
    _schedule: LRSchedule | None = field(init=False, repr=False, compare=False)
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        _check_common(self)
        object.__setattr__(self, "_schedule", _own_schedule(self))

    @classmethod
    def _kwargs(cls, params: Mapping[str, Any], extra: dict[str, type]) -> dict[str, Any]:
        return {**take_params(params, {**STRATEGY_LR_KEYS, **extra}, cls.name), **_parse_sizes(params, cls.name)}

    @property
    def lr_in_upload(self) -> bool:
        """The upload ends with the client's ``η`` (no strategy-owned schedule)."""
        return self._schedule is None

    def client_lr(self, job: ClientJob) -> float:
        """The rate the client trains with: the strategy's ``η(fl_round − 1)`` or the host's ``job.lr``."""
        return job.lr if self._schedule is None else self._schedule(job.fl_round - 1)

    def _round_rows(
        self, info: RoundInfo, updates: Sequence[ClientUpdate], x: np.ndarray, d: int
    ) -> tuple[list[int], list[str], float]:
        """Usable rows, rejected peers and the server's ``η_t`` (see :func:`_split_lr`)."""
        if self._schedule is None:
            return _split_lr(x, updates, d)
        return list(range(len(updates))), [], self._schedule(info.fl_round - 1)

    def _upload(self, vector: np.ndarray, lr: float) -> np.ndarray:
        v = np.ascontiguousarray(vector, dtype=np.float32)
        return np.concatenate([v, [np.float32(lr)]]) if self.lr_in_upload else v


def _scaled(delta: np.ndarray, lr: float) -> np.ndarray:
    """``−Δ/η`` (cumulative gradient of plain local SGD) in float32, divided in float64 by the float32 ``η``."""
    return (-np.asarray(delta, dtype=np.float64) / np.float64(np.float32(lr))).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------------
# MIFA


_MIFA_WEIGHTS = {"unavailability": "unavailability", "mimic": "mimic", "seed000": "unavailability", "seed001": "mimic"}
"""``variant`` -> whose weights: the papers by name, or by their former ids (``seed000``, ``seed001``), which stay
valid. The value is kept as written (it is in the round record), so a chain written with either spelling
re-executes as it was."""
_MIFA_VARIANTS = tuple(_MIFA_WEIGHTS)
_MIFA_UNITS = ("gradient", "delta")


@register_strategy("mifa")
@dataclass(frozen=True, slots=True, kw_only=True)
class MIFA(_RoundRate):
    """MIFA (Gu et al. 2021) with the server-side update table, as unavailability spec §2.5 (44) or mimic spec §2.4 use it.

    .. math::

        G^i \\leftarrow \\frac{\\theta_t - \\theta_{i,t+1}}{\\eta_t} \\ (i \\in S_t), \\qquad
        \\theta_{t+1} = \\theta_t - \\eta_t \\sum_{i=1}^{M} w_i G^i

    ``G^i`` starts at zero (§7 item 12) and stays stale while ``i`` is silent; stale entries are multiplied by the
    *current* ``η_t``. Weights over **all** members:

    * ``variant="unavailability"`` (or ``"seed000"``; eq. 44): ``w_i = n_i / N`` (``sizes``; ``1/M`` without it);
    * ``variant="mimic"`` (or ``"seed001"``; §2.4): ``w_i = 1/M`` always (the code's ``round(1/N, 4)`` is not
      copied, §7 item 3).

    ``units="gradient"`` (default; mimic spec Convention G) stores ``G^i`` in gradient units as above, the client
    uploading ``−Δ_i/η``. With equal local step counts ``K`` this is mimic spec's ``ĝ_i = −Δ_i/(η K)`` times ``K``
    with the server step ``η_t = K·η_L(t)``, i.e. the same algorithm. ``units="delta"`` (mimic spec Convention D,
    ``code_compat``) stores raw deltas and applies ``θ_t + Σ w_i Δ_i``: stale deltas keep their old learning rate.
    Under full participation MIFA is FedAvg (mimic spec §2.3 item 2); with ``s = 1`` it is gradient descent on
    ``F`` (unavailability spec §6.1 item 8). Round 1 should have every member active (mimic spec §1: ``S_0 = 𝒩``), a host choice.

    Parameters
    ----------
    clients:
        ``K`` (0 = every member).
    variant:
        ``"unavailability"`` or ``"mimic"`` (the former ids ``"seed000"`` and ``"seed001"`` are the same; the
        default stays ``"seed000"``, so that the records of existing chains do not change).
    units:
        ``"gradient"`` or ``"delta"``.
    sizes:
        ``n_i`` per member (``variant="unavailability"`` only).
    lr, lr_schedule, lr_gamma, lr_min:
        Optional strategy-owned learning rate (:func:`_own_schedule`); unset = the host's rate.
    """

    variant: str = "seed000"
    units: str = "gradient"
    name: ClassVar[str] = "mifa"

    def __post_init__(self) -> None:
        _RoundRate.__post_init__(self)
        if self.variant not in _MIFA_VARIANTS:
            raise ConfigError(f"mifa: variant must be one of {_MIFA_VARIANTS}, got {self.variant!r}")
        if self.units not in _MIFA_UNITS:
            raise ConfigError(f"mifa: units must be one of {_MIFA_UNITS}, got {self.units!r}")
        if _MIFA_WEIGHTS[self.variant] == "mimic" and self.sizes:
            raise ConfigError(f"mifa: variant {self.variant} weighs every member 1/M; sizes apply to variant "
                              "unavailability (seed000) only")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> MIFA:
        return cls(**cls._kwargs(params, {"variant": str, "units": str}))

    @property
    def lr_in_upload(self) -> bool:
        return self.units == "gradient" and self._schedule is None

    def upload_dim(self, d: int) -> int:
        return d + 1 if self.lr_in_upload else d

    def local_update(self, job: ClientJob, train: LocalTrain) -> ClientUpload:
        out = train(job.model, lr=self.client_lr(job))
        vector = out.delta if self.units == "delta" else _scaled(out.delta, out.lr)
        return ClientUpload(vector=self._upload(vector, out.lr), n_samples=out.n_samples)

    def aggregate(
        self,
        info: RoundInfo,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        d = model.shape[0]
        members = info.members
        record: dict[str, Any] = {"variant": self.variant, "units": self.units, "fresh": [], "rejected": []}
        if not updates:
            return _skip(model, state, record)
        x = _stack(updates, self.upload_dim(d))
        _member_index(info, updates)
        table = MemberTable.decode(state, members=members, dim=d)
        if self.units == "gradient":
            good, rejected, lr = self._round_rows(info, updates, x, d)
        else:
            good, rejected, lr = list(range(len(updates))), [], 1.0
        record["rejected"] = rejected
        if not good:
            return _skip(model, state, record)
        table = table.updated({updates[r].peer: x[r, :d] for r in good})
        sizes = self.sizes if _MIFA_WEIGHTS[self.variant] == "unavailability" else ()
        w = population_weights(sizes, len(members), "mifa")
        where = {p: i for i, p in enumerate(members)}
        acc = np.zeros(d, dtype=np.float64)
        for p, row in zip(table.peers, table.rows, strict=True):  # sorted member order
            acc += w[where[p]] * row.astype(np.float64)
        theta = model.astype(np.float64)
        new = theta - lr * acc if self.units == "gradient" else theta + acc
        record.update(fresh=[updates[r].peer for r in good], stored=len(table.peers))
        if self.units == "gradient":
            record["lr"] = lr
        return AggregateResult(model=new.astype(np.float32), record=record, state=table.encode())


# ---------------------------------------------------------------------------------------------------------------
# Byzantine-robust baselines with client momentum and stale-momentum reuse (unavailability spec §2.6)


@dataclass(frozen=True, slots=True, kw_only=True)
class _StaleMomentum(_RoundRate):
    """Client momentum persisting across rounds; the server aggregates the latest momentum of **all** members.

    Client (unavailability spec §2.6): ``m_i ← β_0 m_i + g_i`` over the host's local steps (``s = 1`` in the paper), the
    buffer kept in ``client_state`` between the client's jobs (host ``momentum = β_0 = 0.9``; PyTorch convention,
    no dampening). The upload is ``m_i`` (``[m_i ‖ η]`` with the host's rate). With host momentum 0 the trainer
    returns no buffer and the client uploads its cumulative gradient ``−Δ_i/η`` instead.

    Server: ``v = AGG({m_i}_{i∈[M]}, {w_i})`` with the stale momentum of silent members and zeros for members
    never heard from (§7 item 13), then ``θ_{t+1} = θ_t − η v``.
    """

    def rule(self) -> Any:
        """The aggregation rule (a weighted aggregator or chain)."""
        raise NotImplementedError

    def upload_dim(self, d: int) -> int:
        return d + 1 if self.lr_in_upload else d

    def local_update(self, job: ClientJob, train: LocalTrain) -> ClientUpload:
        d = job.model.shape[0]
        buf = None
        if job.client_state is not None:
            buf = blob_to_vector(job.client_state, dim=d, what="client momentum state")
        out = train(job.model, lr=self.client_lr(job), momentum_buffer=buf)
        if out.momentum_buffer is not None:
            m = np.ascontiguousarray(out.momentum_buffer, dtype=np.float32)
        else:
            m = _scaled(out.delta, out.lr)
        return ClientUpload(
            vector=self._upload(m, out.lr), n_samples=out.n_samples, client_state=vector_to_blob(m)
        )

    def aggregate(
        self,
        info: RoundInfo,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        d = model.shape[0]
        rule = self.rule()
        record: dict[str, Any] = {"aggregator": format_aggregator(rule), "fresh": [], "rejected": []}
        if not updates:
            return _skip(model, state, record)
        x = _stack(updates, self.upload_dim(d))
        _member_index(info, updates)
        table = MemberTable.decode(state, members=info.members, dim=d)
        good, rejected, lr = self._round_rows(info, updates, x, d)
        record["rejected"] = rejected
        if not good:
            return _skip(model, state, record)
        table = table.updated({updates[r].peer: x[r, :d] for r in good})
        w = population_weights(self.sizes, len(info.members), self.name)
        v = rule(table.dense(info.members), rng=rng, weights=w)
        new = model.astype(np.float64) - lr * np.asarray(v, dtype=np.float64)
        record.update(fresh=[updates[r].peer for r in good], stored=len(table.peers), lr=lr)
        return AggregateResult(model=new.astype(np.float32), record=record, state=table.encode())


def _bucketed(bucket_size: int, final: Any) -> Any:
    return final if bucket_size == 0 else Chain(pre=(Bucketing(bucket_size=bucket_size),), final=final)


def _check_momentum(obj: Any) -> None:
    """Shared checks of the momentum baselines (after the common fields)."""
    _RoundRate.__post_init__(obj)
    if type(obj.bucket_size) is not int or obj.bucket_size < 0:
        raise ConfigError(f"{obj.name}: bucket_size must be an int >= 0 (0 = no bucketing), got {obj.bucket_size!r}")
    if type(obj.iterations) is not int or obj.iterations < 1:
        raise ConfigError(f"{obj.name}: iterations must be an int >= 1, got {obj.iterations!r}")


@register_strategy("cclip")
@dataclass(frozen=True, slots=True, kw_only=True)
class CClip(_StaleMomentum):
    """Centered clipping over all members' (stale) momenta, weighted (unavailability spec §2.6, eq. 43).

    .. math::

        v_{l+1} = v_l + \\sum_{i=1}^M w_i (m_i - v_l) \\min\\left(1, \\frac{\\tau}{\\|m_i - v_l\\|_2}\\right),
        \\quad v_0 = 0, \\; l = 0..L-1, \\qquad \\theta_{t+1} = \\theta_t - \\eta v_L

    Jacobi iteration with whole-vector norms (:class:`~learning.robust.CenteredClipping`; the official
    code's Gauss–Seidel, per-tensor, model-started loop is not reproduced, §7 item 14).

    Parameters
    ----------
    clients:
        ``K`` (0 = every member).
    sizes:
        ``n_i`` per member (empty: ``w_i = 1/M``).
    tau:
        Radius ``τ = 10/(1 − β_0)`` = 100 for the host's momentum ``β_0 = 0.9`` (10 with dampened momentum).
    iterations:
        ``L`` (default 3).
    bucket_size:
        0 = none; 2 = the bucketing variant (:class:`BucketingCClip`).
    lr, lr_schedule, lr_gamma, lr_min:
        Optional strategy-owned learning rate (:func:`_own_schedule`); unset = the host's (constant) rate.
    """

    tau: float = 100.0
    iterations: int = 3
    bucket_size: int = 0
    name: ClassVar[str] = "cclip"

    def __post_init__(self) -> None:
        _check_momentum(self)
        _positive(self, "tau")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> CClip:
        return cls(**cls._kwargs(params, {"tau": float, "iterations": int, "bucket_size": int}))

    def rule(self) -> Any:
        return _bucketed(self.bucket_size, CenteredClipping(tau=self.tau, iterations=self.iterations))


@register_strategy("bucketing_cclip")
@dataclass(frozen=True, slots=True, kw_only=True)
class BucketingCClip(CClip):
    """:class:`CClip` after bucketing with bucket size 2 ([KHJ22] Algorithm 1; unavailability spec §2.6: "2 buckets" means
    bucket *size* 2). Bucket means weigh by ``n_i``, bucket weights are ``Σ_{i∈b} n_i / N``; the permutation comes
    from the round's ``rng``."""

    bucket_size: int = 2
    name: ClassVar[str] = "bucketing_cclip"


@register_strategy("gm")
@dataclass(frozen=True, slots=True, kw_only=True)
class GM(_StaleMomentum):
    """Geometric median over all members' (stale) momenta by smoothed Weiszfeld (unavailability spec §2.6, [PKH22]).

    .. math::

        z \\leftarrow 0; \\quad R \\text{ times: } b_i = \\frac{w_i}{\\max(\\nu, \\|z - m_i\\|_2)},\\;
        z = \\frac{\\sum_i b_i m_i}{\\sum_i b_i}; \\qquad \\theta_{t+1} = \\theta_t - \\eta z

    On the whole flattened vector (the official code works per tensor, §7 item 15).

    Parameters
    ----------
    clients, sizes, bucket_size, lr, lr_schedule, lr_gamma, lr_min:
        As :class:`CClip`.
    nu:
        Smoothing ``ν`` (default 0.1, official code).
    iterations:
        ``R`` (default 8, official code).
    """

    nu: float = 0.1
    iterations: int = 8
    bucket_size: int = 0
    name: ClassVar[str] = "gm"

    def __post_init__(self) -> None:
        _check_momentum(self)
        _positive(self, "nu")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> GM:
        return cls(**cls._kwargs(params, {"nu": float, "iterations": int, "bucket_size": int}))

    def rule(self) -> Any:
        return _bucketed(self.bucket_size, GeometricMedian(nu=self.nu, iterations=self.iterations, init="zero"))


@register_strategy("bucketing_gm")
@dataclass(frozen=True, slots=True, kw_only=True)
class BucketingGM(GM):
    """:class:`GM` after bucketing with bucket size 2 (unavailability spec §2.6)."""

    bucket_size: int = 2
    name: ClassVar[str] = "bucketing_gm"
