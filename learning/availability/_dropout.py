"""Client-dropout schemes of mimic spec §3 (MimiC experiments), as :class:`learning.availability.Availability` models.

Every scheme decides an active set ``𝒜_t`` over all N members, then answers for the sampled ones: active →
``0`` (on time), inactive → ``DROPPED``. Conventions shared by all of them:

* **Rounds.** Our rounds start at 1 (block height), the paper's at ``t = 0``: ``t = fl_round − 1``. Round
  ``t = 0`` (``fl_round = 1``) is all-active in every scheme (§1 "initial round", §7 item 6).
* **Randomness.** Per-trial draws (periods ``τ_i``, phases ``φ_i``) come from the ``seed`` parameter only
  (a private PCG64 stream keyed by the scheme name), so a trial's schedule does not depend on the run's other
  randomness; per-round draws come only from the ``rng`` argument.
* **Floor.** If fewer than ``min_active`` of the sampled clients are active, inactive sampled clients are
  added uniformly at random (``rng``) until the floor is met (§7 item 7: the code forces 2 in schemes 1-2;
  default here 1, the spec's recommendation). The code *replaces* the active set by 2 random clients; topping
  up keeps the scheme's own choices and differs only in which clients fill the floor.

================ =============================================================================================
``bounded``      scheme 1: ``τ_i ~ UniformInt{1..τ_max}`` (or code's ``halfnormal3``), active iff
                 ``(t + φ_i) mod τ_i = 0``; optional explicit ``periods``
``static``       scheme 2 (paper text): homogeneous ``p``, active iff ``U < p``
``static_het``   scheme 2 (code): ``p_i = p + (i mod 5)(1 − p)/4`` (``p`` is the minimum)
``timevar``      scheme 3: ``m = ⌊P·N⌋`` clients without replacement, weights ``a_t^i ~ U[1, 10]``, sequential
``corr``         stress scheme (§3 extra, §6.1 S5): clients holding a rare class are active every ``τ_rare``
================ =============================================================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from learning._config import take_params
from learning._errors import ConfigError
from learning.availability._base import DROPPED, AvailabilityContext, register_availability

__all__ = [
    "BoundedDropout",
    "ClassCorrelatedDropout",
    "StaticDropout",
    "StaticHetDropout",
    "TimeVaryingDropout",
    "expected_active_fraction",
    "trial_generator",
]


def trial_generator(seed: int, scheme: str) -> np.random.Generator:
    """The per-trial stream of ``scheme`` for ``seed`` (PCG64 of a SeedSequence keyed by the scheme name)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *scheme.encode()])))


def expected_active_fraction(tau_max: int) -> float:
    """``H_{τmax}/τmax``: the expected active fraction of scheme 1 under ``τ_i ~ UniformInt{1..τmax}`` (§3)."""
    return sum(1.0 / k for k in range(1, tau_max + 1)) / tau_max


def _params(params: Mapping[str, Any], allowed: dict[str, type], what: str) -> dict[str, Any]:
    """Strict: unknown keys and ill-typed values raise ConfigError (lists become tuples)."""
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ConfigError(f"{what}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}")
    return take_params({k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}, allowed, what)


def _check_int(what: str, key: str, value: int, low: int) -> None:
    if type(value) is not int or value < low:
        raise ConfigError(f"{what}: {key} must be an int >= {low}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Scheme:
    """Shared outcome logic: round-0 all active, the scheme's mask, the floor over the sampled clients."""

    members: int
    min_active: int = 1
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        _check_int(self.name, "members", self.members, 1)
        _check_int(self.name, "min_active", self.min_active, 0)

    def active_mask(self, t: int, rng: np.random.Generator) -> np.ndarray:
        """Boolean mask over all members of ``𝒜_t`` for ``t >= 1`` (before the floor)."""
        raise NotImplementedError

    def outcome(self, fl_round: int, sampled: Sequence[int], *, rng: np.random.Generator) -> Mapping[int, int]:
        if type(fl_round) is not int or fl_round < 1:
            raise ValueError(f"{self.name}: fl_round counts from 1, got {fl_round!r}")
        idx = list(sampled)
        if any(type(i) is not int and not isinstance(i, np.integer) for i in idx):
            raise ValueError(f"{self.name}: sampled indices must be ints")
        if any(not 0 <= i < self.members for i in idx) or len(set(idx)) != len(idx):
            raise ValueError(f"{self.name}: sampled indices must be distinct members in [0, {self.members})")
        t = fl_round - 1  # the paper's round index
        if t == 0:
            return {int(i): 0 for i in idx}  # round 0: all active
        mask = self.active_mask(t, rng)
        active = {int(i) for i in idx if mask[i]}
        need = min(self.min_active, len(idx)) - len(active)
        if need > 0:
            pool = np.array(sorted(int(i) for i in idx if int(i) not in active), dtype=np.int64)
            active.update(int(i) for i in rng.choice(pool, size=need, replace=False))
        return {int(i): 0 if int(i) in active else DROPPED for i in idx}


def _periods_uniform(gen: np.random.Generator, n: int, tau_max: int) -> np.ndarray:
    return gen.integers(1, tau_max, size=n, endpoint=True)


def _periods_halfnormal3(gen: np.random.Generator, n: int, tau_max: int) -> np.ndarray:
    # code: min(round(|HalfNormal(0, 3)|), τ_max); a period of 0 means always active, i.e. 1
    tau = np.minimum(np.rint(np.abs(gen.normal(0.0, 3.0, size=n))), tau_max).astype(np.int64)
    return np.maximum(tau, 1)


_PERIOD_DISTS = {"uniform": _periods_uniform, "halfnormal3": _periods_halfnormal3}


@register_availability("bounded")
@dataclass(frozen=True, slots=True, kw_only=True)
class BoundedDropout(_Scheme):
    """Scheme 1, bounded consecutive dropouts (mimic spec §3, [22]): client i is active iff ``(t + φ_i) mod τ_i = 0``.

    Periods are drawn once per trial from ``seed``: ``τ_i ~ UniformInt{1..τ_max}`` (``period_dist="uniform"``,
    the spec's recommendation; expected active fraction ``H_{τmax}/τmax``) or the released code's
    ``min(round(|N(0, 3)|), τ_max)`` with 0 read as 1 (``"halfnormal3"``). Phases ``φ_i = 0`` (``phase="zero"``,
    code-like: equal periods are synchronised) or ``φ_i ~ UniformInt{0..τ_i−1}`` (``"random"``). ``periods``
    fixes ``τ_i`` explicitly (one per member), overriding the draw. Staleness never exceeds ``τ_i ≤ τ_max``
    (Assumption 1), the floor only adds activity.

    Parameters
    ----------
    tau_max:
        τ_max (default 20; the paper's 20/50/100).
    period_dist, phase, periods, seed, min_active:
        As above (``min_active`` default 1; the code's is 2).
    """

    tau_max: int = 20
    period_dist: str = "uniform"
    phase: str = "zero"
    periods: tuple[int, ...] = ()
    seed: int = 0
    tau: np.ndarray = field(init=False, repr=False, compare=False)
    """τ_i per member (int64)."""
    phi: np.ndarray = field(init=False, repr=False, compare=False)
    """φ_i per member (int64)."""
    name: ClassVar[str] = "bounded"

    def __post_init__(self) -> None:
        _Scheme.__post_init__(self)
        _check_int(self.name, "tau_max", self.tau_max, 1)
        _check_int(self.name, "seed", self.seed, 0)
        if self.period_dist not in _PERIOD_DISTS:
            raise ConfigError(f"bounded: period_dist must be uniform or halfnormal3, got {self.period_dist!r}")
        gen = trial_generator(self.seed, self.name)
        if self.periods:
            if len(self.periods) != self.members:
                raise ConfigError(f"bounded: periods has {len(self.periods)} entries for {self.members} members")
            for p in self.periods:
                _check_int(self.name, "each period", p, 1)
            if max(self.periods) > self.tau_max:
                raise ConfigError(f"bounded: a period exceeds tau_max={self.tau_max}")
            tau = np.array(self.periods, dtype=np.int64)
        else:
            tau = _PERIOD_DISTS[self.period_dist](gen, self.members, self.tau_max).astype(np.int64)
        _set_periodic(self, tau, gen, self.phase)

    @classmethod
    def from_params(cls, params: Mapping[str, Any], ctx: AvailabilityContext) -> BoundedDropout:
        kw = _params(
            params,
            {"tau_max": int, "period_dist": str, "phase": str, "periods": tuple, "seed": int, "min_active": int},
            cls.name,
        )
        return cls(members=ctx.members, **kw)

    def active_mask(self, t: int, rng: np.random.Generator) -> np.ndarray:
        return (t + self.phi) % self.tau == 0


def _set_periodic(
    obj: BoundedDropout | ClassCorrelatedDropout, tau: np.ndarray, gen: np.random.Generator, phase: str
) -> None:
    """Freeze ``tau`` and the phases ``φ_i`` (0, or ``UniformInt{0..τ_i−1}`` drawn from the trial stream)."""
    if phase not in ("zero", "random"):
        raise ConfigError(f"{obj.name}: phase must be zero or random, got {phase!r}")
    phi = np.zeros(tau.shape[0], dtype=np.int64)
    if phase == "random":
        phi = np.array([gen.integers(0, k) for k in tau], dtype=np.int64)
    tau.flags.writeable = False
    phi.flags.writeable = False
    object.__setattr__(obj, "tau", tau)
    object.__setattr__(obj, "phi", phi)


def _check_p(what: str, p: float) -> None:
    if not (isinstance(p, float) and math.isfinite(p) and 0.0 < p <= 1.0):
        raise ConfigError(f"{what}: p must be in (0, 1], got {p!r}")


@register_availability("static")
@dataclass(frozen=True, slots=True, kw_only=True)
class StaticDropout(_Scheme):
    """Scheme 2 as the paper states it (mimic spec §3, [23]): every client is active with the same ``p`` each round.

    ``r_t^i ~ U[0, 1)`` for all N members (one ``rng.random(N)`` draw per round), active iff ``r_t^i < p``.
    Homogeneous ``p`` leaves FedAvg unbiased (Remark 3). §6.1 S3: ``p = 0.1``, floor 1.
    """

    p: float
    name: ClassVar[str] = "static"

    def __post_init__(self) -> None:
        _Scheme.__post_init__(self)
        _check_p(self.name, self.p)

    @classmethod
    def from_params(cls, params: Mapping[str, Any], ctx: AvailabilityContext) -> StaticDropout:
        kw = _params(params, {"p": float, "min_active": int}, cls.name)
        if "p" not in kw:
            raise ConfigError("static: parameter p is required")
        return cls(members=ctx.members, **kw)

    def probabilities(self) -> np.ndarray:
        return np.full(self.members, self.p)

    def active_mask(self, t: int, rng: np.random.Generator) -> np.ndarray:
        return rng.random(self.members) < self.probabilities()


@register_availability("static_het")
@dataclass(frozen=True, slots=True, kw_only=True)
class StaticHetDropout(StaticDropout):
    """Scheme 2 as the released code runs it (mimic spec §3): ``p_i = p + (i mod L)·(1 − p)/(L − 1)``, ``L = 5``.

    ``p`` is the *minimum* probability: ``p = 0.1`` gives {0.1, 0.325, 0.55, 0.775, 1.0}. Client-heterogeneous,
    so FedAvg is biased (§6.1 S2).
    """

    levels: int = 5
    name: ClassVar[str] = "static_het"

    def __post_init__(self) -> None:
        StaticDropout.__post_init__(self)
        _check_int(self.name, "levels", self.levels, 2)

    @classmethod
    def from_params(cls, params: Mapping[str, Any], ctx: AvailabilityContext) -> StaticHetDropout:
        kw = _params(params, {"p": float, "min_active": int, "levels": int}, cls.name)
        if "p" not in kw:
            raise ConfigError("static_het: parameter p is required")
        return cls(members=ctx.members, **kw)

    def probabilities(self) -> np.ndarray:
        level = np.arange(self.members) % self.levels
        return self.p + level * (1.0 - self.p) / (self.levels - 1)


@register_availability("timevar")
@dataclass(frozen=True, slots=True, kw_only=True)
class TimeVaryingDropout(_Scheme):
    """Scheme 3, time-varying probabilities with ratio ``P`` (mimic spec §3, [2], [48]).

    Each round every member draws ``a_t^i ~ U[1, 10]`` (``rng.uniform``, member order); ``m = ⌊P·N⌋`` members are
    taken without replacement by sequential weighted sampling (pick ∝ ``a``, remove, renormalise — the
    semantics of the code's ``np.random.choice(N, m, replace=False, p=a/Σa)``), one ``rng.random()`` per pick.
    ``⌊P·N⌋`` is taken with a 1e-9 guard against float error (0.29·100 = 28.999…). Exactly ``m`` active per round
    when every member is sampled (§6.3 A5); ``m >= 1`` is required (§7 item 7).
    """

    ratio: float
    m: int = field(init=False)
    name: ClassVar[str] = "timevar"

    def __post_init__(self) -> None:
        _Scheme.__post_init__(self)
        if not (isinstance(self.ratio, float) and 0.0 < self.ratio <= 1.0):
            raise ConfigError(f"timevar: ratio must be in (0, 1], got {self.ratio!r}")
        m = int(math.floor(self.ratio * self.members + 1e-9))
        if m < 1:
            raise ConfigError(f"timevar: ratio {self.ratio} of {self.members} members selects no client")
        object.__setattr__(self, "m", m)

    @classmethod
    def from_params(cls, params: Mapping[str, Any], ctx: AvailabilityContext) -> TimeVaryingDropout:
        kw = _params(params, {"ratio": float, "min_active": int}, cls.name)
        if "ratio" not in kw:
            raise ConfigError("timevar: parameter ratio (P) is required")
        return cls(members=ctx.members, **kw)

    def active_mask(self, t: int, rng: np.random.Generator) -> np.ndarray:
        weights = rng.uniform(1.0, 10.0, size=self.members)
        mask = np.zeros(self.members, dtype=bool)
        for _ in range(self.m):
            w = np.where(mask, 0.0, weights)
            cum = np.cumsum(w)
            k = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
            if k >= self.members:  # u·Σ rounded up to Σ: the last unpicked member
                k = int(np.flatnonzero(~mask)[-1])
            mask[k] = True
        return mask


@register_availability("corr")
@dataclass(frozen=True, slots=True, kw_only=True)
class ClassCorrelatedDropout(_Scheme):
    """Class-correlated stress scheme (mimic spec §3 extra; §6.1 S5): rare-class holders are active every ``τ_rare``.

    A member is *rare* iff its local labels (``AvailabilityContext.labels``) include one of ``rare_classes``;
    rare members are active iff ``(t + φ_i) mod τ_rare = 0`` with ``φ_i ~ UniformInt{0..τ_rare−1}`` drawn once
    from ``seed`` (``phase="random"``, default) or 0; all other members are always active. That is scheme 1 with
    periods ``τ_i = τ_rare`` (rare) or 1. S5: classes 6–9
    rare, ``τ_rare = 10``.
    """

    rare_classes: tuple[int, ...]
    tau_rare: int = 10
    phase: str = "random"
    seed: int = 0
    labels: tuple[tuple[int, ...], ...] = field(default=(), repr=False)
    rare: np.ndarray = field(init=False, repr=False, compare=False)
    tau: np.ndarray = field(init=False, repr=False, compare=False)
    phi: np.ndarray = field(init=False, repr=False, compare=False)
    name: ClassVar[str] = "corr"

    def __post_init__(self) -> None:
        _Scheme.__post_init__(self)
        _check_int(self.name, "tau_rare", self.tau_rare, 1)
        _check_int(self.name, "seed", self.seed, 0)
        if not self.rare_classes or any(type(c) is not int or c < 0 for c in self.rare_classes):
            raise ConfigError(f"corr: rare_classes must be a non-empty tuple of class ids, got {self.rare_classes!r}")
        if len(self.labels) != self.members:
            raise ConfigError(f"corr: needs the labels of all {self.members} members (AvailabilityContext.labels)")
        rare_set = set(self.rare_classes)
        rare = np.array([bool(rare_set.intersection(ls)) for ls in self.labels], dtype=bool)
        rare.flags.writeable = False
        object.__setattr__(self, "rare", rare)
        _set_periodic(
            self, np.where(rare, self.tau_rare, 1).astype(np.int64), trial_generator(self.seed, self.name), self.phase
        )

    @classmethod
    def from_params(cls, params: Mapping[str, Any], ctx: AvailabilityContext) -> ClassCorrelatedDropout:
        kw = _params(
            params, {"rare_classes": tuple, "tau_rare": int, "phase": str, "seed": int, "min_active": int}, cls.name
        )
        if "rare_classes" not in kw:
            raise ConfigError("corr: parameter rare_classes is required")
        return cls(members=ctx.members, labels=ctx.labels, **kw)

    def active_mask(self, t: int, rng: np.random.Generator) -> np.ndarray:
        return (t + self.phi) % self.tau == 0  # τ_i = 1 (always active) unless rare
