"""MimiC, SCAFFOLD and uniform FedAvg with a strategy-owned learning-rate schedule (mimic spec).

Units (mimic spec §2.0)
---------------------
The paper works in **gradient units** (Convention G, the default, ``units = "gradient"``): a client trains
``K_i`` plain-SGD steps at the round's local rate ``η_L(t)`` and uploads the average gradient along its
trajectory, eq. (3)::

    ĝ_i = (w_t − w^i_{t,K_i}) / (η_L(t) · K_i)          # = −Δ_i / (η_L(t) K_i), Δ_i = LocalOutcome.delta

and the server steps ``w_{t+1} = w_t − η_t v_t`` with ``η_t = K · η_L(t)`` (§2.0: the released code's single
decaying rate, server step 1 on deltas). The released code works in **delta units** (Convention D,
``units = "delta"``, code-compat): the upload is the raw ``Δ_i = w_K − w_t`` and the server applies
``w_{t+1} = w_t + v_t``; stale corrections then carry the learning rate of the round they were made in.

Both sides must know ``η_L(t)``, so the schedule is a strategy parameter, not the host's: ``local_update``
trains with ``lr_at(job.fl_round)`` and ignores ``job.lr``. Rounds: ``fl_round`` counts from 1 (block height),
the schedules of :mod:`learning.training._schedules` and the paper count ``t`` from 0, so ``t = fl_round − 1``.

How the server knows K (decision)
---------------------------------
Only the upload vector and ``n_samples`` are signed, and neither carries ``K_i``. ``K_i`` is needed only to
*normalise* ``ĝ_i``, which happens on the client with the steps it actually took (``LocalOutcome.steps``,
§2.0 last bullet, §7 item 5). The server's ``η_t = K · η_L(t)`` is the paper's global learning rate, a
server hyper-parameter: it is the strategy parameter ``local_steps`` (set it to the scenario's ``steps``;
with local *epochs* over unequal datasets it is the nominal K and each client still normalises by its own
``K_i``). With every ``K_i = K`` Convention G applies exactly the mean delta, as the code does.

Registered strategies
---------------------
``"mimic"``            :class:`MimiC` — Algorithm 1 (§2.3), corrections ``c^i`` per member in the state.
``"fedavg_uniform"``   :class:`FedAvgUniform` — FedAvg of §2.2: weights ``1/|S_t|``, same schedule and units.
``"scaffold"``         :class:`Scaffold` — standard SCAFFOLD, option II (§2.6); uploads ``[Δy ‖ Δc]``.
``"scaffold_active_mean"`` :class:`ScaffoldActiveMean` — ``c = mean_{j∈S_t} c_j`` (§2.6 optional, eq. (18)).

Every record carries ``uploads``: the number of d-vectors uploaded this round (2 per SCAFFOLD client,
1 otherwise; §4 "model uploadings", §6.3 A6).
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
from learning.strategies._base import (
    AggregateResult,
    ClientJob,
    ClientUpdate,
    ClientUpload,
    LocalTrain,
    RoundInfo,
    STRATEGY_LR_KEYS,
    STRATEGY_LR_SCHEDULES,
    StrategyBase,
    _stack,
    register_strategy,
    strategy_lr_schedule,
)
from learning.training import LRSchedule

__all__ = [
    "LR_SCHEDULES",
    "UNITS",
    "FedAvgUniform",
    "MimiC",
    "PeerTable",
    "Scaffold",
    "ScaffoldActiveMean",
    "decode_scaffold_client_state",
    "mimic_corrections",
    "scaffold_control",
]

UNITS = ("gradient", "delta")
"""mimic spec §2.0: Convention G (paper, default) and Convention D (released code)."""

LR_SCHEDULES = STRATEGY_LR_SCHEDULES
"""Schedules a strategy of this module accepts as ``lr_schedule`` (see :mod:`learning.training._schedules`)."""

_STATE_DTYPES = {"float64": "<f8", "float32": "<f4"}


# --- canonical per-peer vector table ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerTable:
    """One float64 vector and one round number per peer, encoded canonically (sorted peers, raw LE floats).

    MimiC's corrections ``c^i`` with each client's last active round, SCAFFOLD-active-mean's ``c_j``.
    Peers never seen are absent (their vector is 0, mimic spec §2.3 line 1).
    """

    vectors: Mapping[str, np.ndarray]
    last: Mapping[str, int]

    @staticmethod
    def empty() -> PeerTable:
        return PeerTable({}, {})

    def get(self, peer: str, d: int) -> np.ndarray:
        v = self.vectors.get(peer)
        return np.zeros(d, dtype=np.float64) if v is None else v

    def to_value(self, dtype: str) -> dict[str, Any]:
        peers = sorted(self.vectors)
        d_bytes = b"".join(np.ascontiguousarray(self.vectors[p], dtype=_STATE_DTYPES[dtype]).tobytes() for p in peers)
        return {"peers": peers, "last": [self.last[p] for p in peers], "vectors": d_bytes}

    @staticmethod
    def from_value(value: Mapping[str, Any], *, d: int, dtype: str, members: Sequence[str] | None) -> PeerTable:
        """Strict inverse of :meth:`to_value` (raises ValueError on any mismatch)."""
        peers, last, raw = value["peers"], value["last"], value["vectors"]
        if type(peers) is not tuple or any(type(p) is not str for p in peers):
            raise ValueError("state: peers must be a list of str")
        if list(peers) != sorted(set(peers)):
            raise ValueError("state: peers must be sorted and unique")
        if members is not None and not set(peers) <= set(members):
            raise ValueError(f"state: peers {sorted(set(peers) - set(members))} are not members")
        if type(last) is not tuple or len(last) != len(peers) or any(type(r) is not int or r < 0 for r in last):
            raise ValueError("state: last must be one non-negative int per peer")
        if type(raw) is not bytes:
            raise ValueError("state: vectors must be bytes")
        itemsize = np.dtype(_STATE_DTYPES[dtype]).itemsize
        if len(raw) != len(peers) * d * itemsize:
            raise ValueError(f"state: {len(raw)} vector bytes for {len(peers)} peers of dimension {d} ({dtype})")
        rows = np.frombuffer(raw, dtype=_STATE_DTYPES[dtype]).astype(np.float64).reshape(len(peers), d)
        if not np.isfinite(rows).all():
            raise ValueError("state: non-finite vector entries")
        return PeerTable({p: rows[k] for k, p in enumerate(peers)}, dict(zip(peers, last, strict=True)))


def _decode_state(state: bytes, fmt: str, keys: set[str]) -> Mapping[str, Any]:
    try:
        value = decode(state)
    except DecodeError as e:
        raise ValueError(f"{fmt} state: {e}") from None
    if not isinstance(value, Mapping) or set(value) != keys or value.get("format") != fmt:
        raise ValueError(
            f"state is not a {fmt} state (keys {sorted(value) if isinstance(value, Mapping) else value!r})"
        )
    return value


def _vector_from(raw: Any, d: int, what: str) -> np.ndarray:
    if type(raw) is not bytes or len(raw) != 8 * d:
        raise ValueError(f"{what}: expected {8 * d} bytes of float64, got {type(raw).__name__} of {len(raw)}")
    v = np.frombuffer(raw, dtype="<f8").astype(np.float64)
    if not np.isfinite(v).all():
        raise ValueError(f"{what}: non-finite entries")
    return v


def _vector_bytes(v: np.ndarray) -> bytes:
    return np.ascontiguousarray(v, dtype="<f8").tobytes()


def _check_dim(value: Mapping[str, Any], d: int, fmt: str) -> None:
    if type(value["dim"]) is not int or value["dim"] != d:
        raise ValueError(f"{fmt} state: dimension {value['dim']!r}, the model has {d}")


def _check_members(updates: Sequence[ClientUpdate], members: Sequence[str], what: str) -> None:
    known = set(members)
    for u in updates:
        if u.peer not in known:
            raise ValueError(f"{what}: update from {u.peer!r}, not a member")


def _sum_rows(rows: np.ndarray) -> np.ndarray:
    """``Σ_k rows[k]`` in float64, rows added in their (peer-sorted) order: bit-reproducible."""
    acc = np.zeros(rows.shape[1], dtype=np.float64)
    for row in rows:
        acc += row
    return acc


def _mean_rows(rows: np.ndarray) -> np.ndarray:
    """``(1/n) Σ_k rows[k]`` (see :func:`_sum_rows`)."""
    return _sum_rows(rows) / rows.shape[0]


# --- shared schedule machinery ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class _Scheduled(StrategyBase):
    """Fields shared by the strategies of this module: client sampling and the local rate ``η_L(t)``.

    Parameters
    ----------
    clients:
        Clients asked per round (0 = every member, the paper's "ask all clients", Algorithm 1 line 3).
    lr:
        ``η_L`` at the first round (required; mimic spec Table 2: 0.01, §6.1: 0.05).
    lr_schedule:
        ``"constant"``, ``"exponential"`` (``max(lr·lr_gamma^t, lr_min)``, §2.7) or ``"inverse_sqrt"``.
    lr_gamma:
        Decay γ of ``"exponential"`` (0.95 FMNIST, 0.99 CIFAR-10, 0.97 §6.1); only with that schedule.
    lr_min:
        Floor of ``"exponential"`` (None = the code's 1e-5); only with that schedule.
    """

    lr: float
    clients: int = 0
    lr_schedule: str = "constant"
    lr_gamma: float | None = None
    lr_min: float | None = None
    _schedule: LRSchedule = field(init=False, repr=False, compare=False)

    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        what = self.name
        if self.clients < 0:
            raise ConfigError(f"{what}: clients must be >= 0, got {self.clients}")
        sched = strategy_lr_schedule(
            what, lr=self.lr, lr_schedule=self.lr_schedule, lr_gamma=self.lr_gamma, lr_min=self.lr_min
        )
        object.__setattr__(self, "_schedule", sched)

    @classmethod
    def _kwargs(cls, params: Mapping[str, Any], extra: dict[str, type]) -> dict[str, Any]:
        kw = take_params(params, {**STRATEGY_LR_KEYS, **extra}, cls.name)
        if "lr" not in kw:
            raise ConfigError(f"{cls.name}: parameter lr is required (the strategy owns the local learning rate)")
        return kw

    def lr_at(self, fl_round: int) -> float:
        """``η_L(t)`` with ``t = fl_round − 1`` (our rounds start at 1, the schedules' at 0; mimic spec §2.7)."""
        if fl_round < 1:
            raise ValueError(f"fl_round counts from 1, got {fl_round}")
        return self._schedule(fl_round - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Uniform(_Scheduled):
    """Uniform ``1/|S_t|`` averaging in gradient or delta units (mimic spec eqs. (4)–(5), §2.0)."""

    units: str = "gradient"
    local_steps: int | None = None

    def __post_init__(self) -> None:
        _Scheduled.__post_init__(self)
        if self.units not in UNITS:
            raise ConfigError(f"{self.name}: units must be one of {', '.join(UNITS)}, got {self.units!r}")
        if self.local_steps is not None and self.local_steps < 1:
            raise ConfigError(f"{self.name}: local_steps must be >= 1, got {self.local_steps}")
        if self.units == "gradient" and self.local_steps is None:
            raise ConfigError(
                f"{self.name}: units 'gradient' needs local_steps (K of the server step η_t = K·η_L(t), §2.0)"
            )

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Any:
        return cls(**cls._kwargs(params, {"units": str, "local_steps": int, **cls._extra_keys()}))

    @classmethod
    def _extra_keys(cls) -> dict[str, type]:
        return {}

    def server_step(self, fl_round: int) -> float:
        """The coefficient of ``v_t`` in ``w_{t+1} = w_t + s·v_t``: ``−K·η_L(t)`` (G) or ``1`` (D)."""
        if self.units == "gradient":
            assert self.local_steps is not None
            return -self.local_steps * self.lr_at(fl_round)
        return 1.0

    def local_update(self, job: ClientJob, train: LocalTrain) -> ClientUpload:
        """``LocalTrain`` of §2.1 at ``η_L(t)``: uploads ``ĝ_i = −Δ_i/(η_L K_i)`` (G) or ``Δ_i`` (D)."""
        lr = self.lr_at(job.fl_round)
        out = train(job.model, lr=lr)
        if out.lr != lr:
            raise ValueError(f"{self.name}: the host trained with lr {out.lr}, the strategy asked for {lr}")
        if self.units == "delta":
            return ClientUpload(vector=np.asarray(out.delta, dtype=np.float32), n_samples=out.n_samples)
        if out.steps < 1:
            raise ValueError(f"{self.name}: local training took {out.steps} steps; ĝ needs K_i >= 1")
        g = -np.asarray(out.delta, dtype=np.float64) / (lr * out.steps)  # eq. (3) with the K_i actually taken
        return ClientUpload(vector=g.astype(np.float32), n_samples=out.n_samples)

    def _base_record(self, fl_round: int, updates: Sequence[ClientUpdate]) -> dict[str, Any]:
        n = len(updates)
        return {
            "active": [u.peer for u in updates],
            "weights": [1.0 / n for _ in range(n)],
            "uploads": n,
            "lr": self.lr_at(fl_round),
            "server_step": self.server_step(fl_round),
            "units": self.units,
        }


@register_strategy("fedavg_uniform")
@dataclass(frozen=True, slots=True, kw_only=True)
class FedAvgUniform(_Uniform):
    """FedAvg as mimic spec §2.2 runs it: ``v_t = (1/|S_t|) Σ_{i∈S_t} ĝ_i``, ``w_{t+1} = w_t − η_t v_t``.

    Differs from ``"fedavg"`` (:class:`learning.FedAvg`) in three ways, all needed for equal comparisons with
    :class:`MimiC`: uniform weights over the *active* clients (not sample-size weights), the strategy's own
    ``η_L(t)`` schedule for local training, and the server step ``η_t = K·η_L(t)``. Under Convention G and D it is
    the same algorithm when every ``K_i = K`` (§2.0); with unequal ``K_i`` G normalises per client.

    Parameters
    ----------
    units:
        ``"gradient"`` (default) or ``"delta"``.
    local_steps:
        K of ``η_t = K·η_L(t)``; required with ``units = "gradient"``.
    lr, lr_schedule, lr_gamma, lr_min, clients:
        See :class:`MimiC`.
    """

    name: ClassVar[str] = "fedavg_uniform"

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
            return AggregateResult(model=model, record=self._base_record(info.fl_round, updates))
        x = _stack(updates, model.shape[0])
        _check_members(updates, info.members, self.name)
        v = _mean_rows(x.astype(np.float64))  # eq. (4)
        new = (model.astype(np.float64) + self.server_step(info.fl_round) * v).astype(np.float32)  # eq. (5)
        return AggregateResult(model=new, record=self._base_record(info.fl_round, updates))


_MIMIC_FMT = "mimic/1"
_MIMIC_KEYS = {"format", "units", "dtype", "dim", "peers", "last", "vectors"}


@register_strategy("mimic")
@dataclass(frozen=True, slots=True, kw_only=True)
class MimiC(_Uniform):
    """MimiC (mimic spec §2.3, Algorithm 1): dropout-bias correction by mimicking the central update.

    Server side, with ``c^i = 0`` for never-seen clients (line 1)::

        v_t^i = ĝ_i(w_t) + c^i           for i ∈ S_t      # lines 5-7, c^i from i's last active round
        v_t   = (1/|S_t|) Σ_{i∈S_t} v_t^i                  # line 8
        w_{t+1} = w_t − η_t v_t                            # line 9  (η_t = K·η_L(t); Convention D: w_t + v_t)
        c^i   = v_t − ĝ_i(w_t)           for i ∈ S_t      # line 10, (15): after line 8, with the APPLIED v_t

    Inactive clients keep their ``c^i``; hence ``Σ_i c^i = 0`` always (§2.3 invariant 1). The client side is plain
    ``LocalTrain`` (§2.1). The corrections live in the strategy state (the server-side variant; §2.3's
    client-side "practical" variant would need an acknowledgement channel the framework does not have).

    The record holds ``active`` (S_t, sorted), ``weights`` (``1/|S_t|`` each), ``staleness`` (``τ(t,i)`` =
    rounds since i's last inclusion, 0 if never included), ``uploads``, ``lr`` (η_L(t)), ``server_step``.

    Parameters
    ----------
    units:
        ``"gradient"`` (Convention G, default: corrections in gradient units, re-scaled by the current η_t)
        or ``"delta"`` (Convention D, ``code_compat``: raw deltas, stale corrections keep their old lr).
    local_steps:
        K of ``η_t = K·η_L(t)`` (required with ``"gradient"``; set it to the scenario's local steps).
    lr, lr_schedule, lr_gamma, lr_min:
        The local rate ``η_L(t)`` (both sides): e.g. ``lr = 0.05, lr_schedule = "exponential", lr_gamma = 0.97``
        is §6.1's ``max(0.05·0.97^t, 1e-5)``.
    clients:
        Clients asked per round (0 = all, as Algorithm 1 line 3).
    state_dtype:
        ``"float64"`` (default; keeps invariant A2 at 1e-8) or ``"float32"`` (half the state for large models).

    Examples
    --------
    >>> s = MimiC.from_params({"lr": 0.05, "lr_schedule": "exponential", "lr_gamma": 0.97, "local_steps": 10})
    >>> round(s.lr_at(2), 6), round(s.server_step(1), 6)
    (0.0485, -0.5)
    """

    state_dtype: str = "float64"
    name: ClassVar[str] = "mimic"

    def __post_init__(self) -> None:
        _Uniform.__post_init__(self)
        if self.state_dtype not in _STATE_DTYPES:
            raise ConfigError(f"mimic: state_dtype must be float64 or float32, got {self.state_dtype!r}")

    @classmethod
    def _extra_keys(cls) -> dict[str, type]:
        return {"state_dtype": str}

    def decode_state(self, state: bytes | None, d: int, members: Sequence[str] | None = None) -> PeerTable:
        """The correction table in ``state`` (empty for ``None``); strict: ValueError on any mismatch."""
        if state is None:
            return PeerTable.empty()
        value = _decode_state(state, _MIMIC_FMT, _MIMIC_KEYS)
        if value["units"] != self.units or value["dtype"] != self.state_dtype:
            raise ValueError(
                f"mimic state in {value['units']!r}/{value['dtype']!r} units/dtype, "
                f"the strategy uses {self.units!r}/{self.state_dtype!r}"
            )
        _check_dim(value, d, _MIMIC_FMT)
        return PeerTable.from_value(value, d=d, dtype=self.state_dtype, members=members)

    def encode_state(self, table: PeerTable, d: int) -> bytes:
        return encode(
            {"format": _MIMIC_FMT, "units": self.units, "dtype": self.state_dtype, "dim": d}
            | table.to_value(self.state_dtype)
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
        table = self.decode_state(state, d, info.members)
        record = self._base_record(info.fl_round, updates)
        if not updates:  # S_t = ∅: skip the server step (§7 item 7), corrections unchanged
            return AggregateResult(model=model, record=record | {"staleness": []}, state=state)
        g = _stack(updates, d).astype(np.float64)
        _check_members(updates, info.members, self.name)
        corr = [table.get(u.peer, d) for u in updates]
        v = _mean_rows(g + np.stack(corr))  # lines 5-8
        new = (model.astype(np.float64) + self.server_step(info.fl_round) * v).astype(np.float32)  # line 9
        vectors, last = dict(table.vectors), dict(table.last)
        staleness = [info.fl_round - last[u.peer] if u.peer in last else 0 for u in updates]
        for k, u in enumerate(updates):  # line 10, after v_t is final
            vectors[u.peer] = v - g[k]
            last[u.peer] = info.fl_round
        return AggregateResult(
            model=new,
            record=record | {"staleness": staleness},
            state=self.encode_state(PeerTable(vectors, last), d),
        )


def mimic_corrections(state: bytes, d: int, *, units: str = "gradient", state_dtype: str = "float64") -> PeerTable:
    """Decode a MimiC state's correction table (tests, audits: invariant A2 ``Σ_i c^i = 0``)."""
    probe = MimiC(lr=1.0, units=units, local_steps=1, state_dtype=state_dtype)
    return probe.decode_state(state, d)


# --- SCAFFOLD -----------------------------------------------------------------------------------------------

_SCAFFOLD_FMT = "scaffold/1"
_SCAFFOLD_KEYS = {"format", "dim", "c", "peers", "last", "vectors"}
_SCAFFOLD_CLIENT_FMT = "scaffold-client/1"
_SCAFFOLD_CLIENT_KEYS = {"format", "dim", "c"}


def scaffold_control(server_state: bytes | None, d: int) -> np.ndarray:
    """The global control variate ``c`` (float64, ``(d,)``) in a SCAFFOLD state; zeros before the first block.

    The client side calls it on ``ClientJob.server_state`` (the state committed by the previous block).
    Strict: ValueError if the bytes are not a SCAFFOLD state of dimension ``d``.
    """
    if server_state is None:
        return np.zeros(d, dtype=np.float64)
    return _vector_from(_scaffold_value(server_state, d)["c"], d, "scaffold state c")


def _scaffold_value(state: bytes, d: int) -> Mapping[str, Any]:
    value = _decode_state(state, _SCAFFOLD_FMT, _SCAFFOLD_KEYS)
    _check_dim(value, d, _SCAFFOLD_FMT)
    return value


def decode_scaffold_client_state(client_state: bytes | None, d: int) -> np.ndarray:
    """A client's own control variate ``c_i`` (float64) from its ``client_state``; zeros the first time."""
    if client_state is None:
        return np.zeros(d, dtype=np.float64)
    value = _decode_state(client_state, _SCAFFOLD_CLIENT_FMT, _SCAFFOLD_CLIENT_KEYS)
    _check_dim(value, d, _SCAFFOLD_CLIENT_FMT)
    return _vector_from(value["c"], d, "scaffold client state c")


@register_strategy("scaffold")
@dataclass(frozen=True, slots=True, kw_only=True)
class Scaffold(_Scheduled):
    """Standard SCAFFOLD (Karimireddy et al. 2020, option II), as mimic spec §2.6 specifies it::

        client i ∈ S_t:  y ← x;  K_i times: y ← y − η_L (∇F_i(y; ξ) − c_i + c)
                         c_i⁺ = c_i − c + (x − y)/(K_i η_L)                       # option II
                         upload [Δy ‖ Δc] = [y − x ‖ c_i⁺ − c_i];  c_i ← c_i⁺       # 2 vectors (upload_dim = 2d)
        server:          x ← x + η_g (1/|S_t|) Σ_{i∈S_t} Δy_i                     # η_g = server_lr = 1
                         c ← c + (1/N) Σ_{i∈S_t} Δc_i                             # 1/N, not 1/|S_t| (§7 item 10)

    Sign convention: the host's trainer adds ``gradient_correction`` to every stochastic gradient
    (:func:`learning.train_local`: ``d ← ∇ℓ + … + correction``, then ``z ← z − η d``), so the client passes
    ``c − c_i``. ``c`` is read from ``job.server_state`` with :func:`scaffold_control`; ``c_i`` is the client's
    ``client_state`` (canonical bytes). The client keeps ``c_i + float32(Δc_i)`` — exactly what the server adds —
    so ``c = (1/N) Σ_i c_i`` holds to float64 rounding. ``η_L(t)`` is the strategy schedule (§2.6 "the same lr
    schedule as the other methods").

    Record: ``active``, ``weights`` (1/|S_t|), ``uploads`` (= 2|S_t|, §6.3 A6), ``lr``.

    Host requirement: a client's ``client_state`` must persist between its jobs, and only when its upload was
    included in the committed block (an excluded upload's ``Δc`` never reached ``c``).

    Parameters
    ----------
    server_lr:
        η_g (default 1.0).
    lr, lr_schedule, lr_gamma, lr_min, clients:
        As :class:`MimiC`.
    """

    server_lr: float = 1.0
    name: ClassVar[str] = "scaffold"
    active_mean: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _Scheduled.__post_init__(self)
        if not (math.isfinite(self.server_lr) and self.server_lr > 0):
            raise ConfigError(f"{self.name}: server_lr must be > 0, got {self.server_lr}")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Any:
        return cls(**cls._kwargs(params, {"server_lr": float}))

    def upload_dim(self, d: int) -> int:
        return 2 * d

    def local_update(self, job: ClientJob, train: LocalTrain) -> ClientUpload:
        d = job.model.shape[0]
        c = scaffold_control(job.server_state, d)
        ci = decode_scaffold_client_state(job.client_state, d)
        lr = self.lr_at(job.fl_round)
        out = train(job.model, lr=lr, gradient_correction=(c - ci).astype(np.float32))
        if out.lr != lr:
            raise ValueError(f"{self.name}: the host trained with lr {out.lr}, the strategy asked for {lr}")
        if out.steps < 1:
            raise ValueError(f"{self.name}: local training took {out.steps} steps; option II needs K_i >= 1")
        dy = np.asarray(out.delta, dtype=np.float32)
        ci_plus = ci - c - dy.astype(np.float64) / (out.steps * lr)  # option II: (x − y) = −Δy
        dc = (ci_plus - ci).astype(np.float32)
        ci_kept = ci + dc.astype(np.float64)  # = what the server adds to its sum
        client_state = encode({"format": _SCAFFOLD_CLIENT_FMT, "dim": d, "c": _vector_bytes(ci_kept)})
        return ClientUpload(vector=np.concatenate([dy, dc]), n_samples=out.n_samples, client_state=client_state)

    def decode_state(self, state: bytes | None, d: int, members: Sequence[str]) -> tuple[np.ndarray, PeerTable]:
        if state is None:
            return np.zeros(d, dtype=np.float64), PeerTable.empty()
        value = _scaffold_value(state, d)
        c = _vector_from(value["c"], d, "scaffold state c")
        table = PeerTable.from_value(value, d=d, dtype="float64", members=members)
        if table.vectors and not self.active_mean:
            raise ValueError("scaffold state holds a per-client table: it is a scaffold_active_mean state")
        return c, table

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
        c, table = self.decode_state(state, d, info.members)
        n = len(updates)
        record = {
            "active": [u.peer for u in updates],
            "weights": [1.0 / n for _ in range(n)],
            "uploads": 2 * n,
            "lr": self.lr_at(info.fl_round),
        }
        if not updates:
            return AggregateResult(model=model, record=record, state=state)
        x = _stack(updates, 2 * d).astype(np.float64)
        _check_members(updates, info.members, self.name)
        dy, dc = x[:, :d], x[:, d:]
        new = (model.astype(np.float64) + self.server_lr * _mean_rows(dy)).astype(np.float32)
        vectors, last = dict(table.vectors), dict(table.last)
        if self.active_mean:  # c = mean_{j∈S_t} c_j, with c_j tracked as the sum of j's Δc_j (eq. (18))
            for k, u in enumerate(updates):
                vectors[u.peer] = table.get(u.peer, d) + dc[k]
                last[u.peer] = info.fl_round
            c = _mean_rows(np.stack([vectors[u.peer] for u in updates]))
        else:
            c = c + _sum_rows(dc) / len(info.members)  # (1/N) Σ_{i∈S_t} Δc_i
        out_state = encode(
            {"format": _SCAFFOLD_FMT, "dim": d, "c": _vector_bytes(c)} | PeerTable(vectors, last).to_value("float64")
        )
        return AggregateResult(model=new, record=record, state=out_state)


@register_strategy("scaffold_active_mean")
@dataclass(frozen=True, slots=True, kw_only=True)
class ScaffoldActiveMean(Scaffold):
    """SCAFFOLD with ``c = mean_{j∈S_t} c_j`` (mimic spec §2.6 optional variant; eq. (18) taken literally).

    The server tracks each client's ``c_j`` as the running sum of its ``Δc_j`` (N·d floats in the state) and
    sets ``c`` to the mean over the round's active clients; expected to be dropout-biased (§2.6).
    """

    name: ClassVar[str] = "scaffold_active_mean"
    active_mean: ClassVar[bool] = True
